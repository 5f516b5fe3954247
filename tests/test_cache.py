"""kltools.cache: one folder, entries written whole (two runs compiling the same key at once)."""
from __future__ import annotations

import threading

from kltools.cache import cache_dir, key, write_atomic


def test_cache_dir_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir("nvrtc") == tmp_path / "kernel-layers" / "nvrtc"


def test_key_separates_its_parts():
    assert key("ab", "c") != key("a", "bc") and key(b"x", 1) == key(b"x", 1) != key(b"x", "1")


def test_concurrent_writers_of_one_key_never_leave_a_partial_entry(tmp_path):
    """Writers of the same entry race; every read sees one writer's whole bytes, and no temporary
    file is left behind."""
    path = tmp_path / "sub" / "entry.bin"
    payloads = [bytes([i]) * (1 << 20) for i in range(4)]
    seen, stop = [], threading.Event()

    def writer(p):
        for _ in range(20):
            assert write_atomic(path, p)

    def reader():
        while not stop.is_set():
            try:
                seen.append(path.read_bytes())
            except FileNotFoundError:
                pass

    r = threading.Thread(target=reader)
    r.start()
    ws = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    for w in ws:
        w.start()
    for w in ws:
        w.join()
    stop.set()
    r.join()
    assert seen and all(s in payloads for s in seen)
    assert path.read_bytes() in payloads and [p.name for p in path.parent.iterdir()] == ["entry.bin"]


def test_unwritable_folder_is_no_error(tmp_path):
    (tmp_path / "file").write_text("")
    assert write_atomic(tmp_path / "file" / "entry", "x") is False
