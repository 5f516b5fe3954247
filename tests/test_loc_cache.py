"""The LOC counts persist across runs (harness.loc's disk cache) and an edit invalidates them."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness import loc
from harness.registry import Source

KERNEL = '''import triton
import triton.language as tl
from .helpers import twice


@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, twice(x), mask=offs < n)


def launch(x):
    k[(1,)](x, x.numel(), BLOCK=1024)
'''
HELPERS = '''import triton


@triton.jit
def twice(x):
    return x + x
'''


class Impl:
    role = "default"
    id = "planted:k"

    def __init__(self, sources):
        self.sources = sources


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A planted layer folder inside the repository (imports resolve only there), in the ignored
    build/ folder, removed afterwards; the cache in a temporary home."""
    import shutil
    import tempfile
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (loc.REPO_ROOT / "build").mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="loc_cache_", dir=loc.REPO_ROOT / "build"))
    (root / "planted_src").mkdir(parents=True)
    (root / "planted_src" / "__init__.py").write_text("")
    (root / "planted_src" / "k.py").write_text(KERNEL)
    (root / "planted_src" / "helpers.py").write_text(HELPERS)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _no_count(*a, **k):
    raise AssertionError("counted afresh: the cache was not used")


def test_second_count_comes_from_disk_and_an_edit_recounts(tree, monkeypatch):
    impl = Impl((Source("planted_src/k.py", host=("launch",)),))
    first = loc.count_impl(impl, root=tree)
    assert first["kernel"] == 8 and first["host"] == 2 and "planted_src/helpers.py" in first["files"]
    assert list(loc._cache_dir().glob("*.json"))
    real = loc._count_impl
    monkeypatch.setattr(loc, "_count_impl", _no_count)
    assert loc.count_impl(impl, root=tree) == first            # another process would read the same
    # an edit of a file the count reached (the helper in another file) is seen
    (tree / "planted_src" / "helpers.py").write_text(HELPERS + "\n\n@triton.jit\ndef unused(x):\n    return x\n")
    with pytest.raises(AssertionError, match="counted afresh"):
        loc.count_impl(impl, root=tree)
    monkeypatch.setattr(loc, "_count_impl", real)
    (tree / "planted_src" / "helpers.py").write_text(HELPERS.replace("return x + x", "y = x + x\n    return y"))
    assert loc.count_impl(impl, root=tree)["kernel"] == 9
    monkeypatch.setattr(loc, "_count_impl", _no_count)
    assert loc.count_impl(impl, root=tree)["kernel"] == 9


def test_the_key_holds_the_sources_the_role_and_a_new_file_beside_them(tree, monkeypatch):
    impl = Impl((Source("planted_src/k.py", host=("launch",)),))
    loc.count_impl(impl, root=tree)
    monkeypatch.setattr(loc, "_count_impl", _no_count)
    for other in (Impl((Source("planted_src/k.py"),)),                       # other host entries
                  Impl((Source("planted_src/k.py", host=("launch",), variant="v"),))):
        with pytest.raises(AssertionError, match="counted afresh"):
            loc.count_impl(other, root=tree)
    twin = Impl(impl.sources)
    twin.role = "simple"
    with pytest.raises(AssertionError, match="counted afresh"):
        loc.count_impl(twin, root=tree)
    # a module appearing beside a reached file (an import may now resolve to it)
    (tree / "planted_src" / "helpers2.py").write_text(HELPERS)
    with pytest.raises(AssertionError, match="counted afresh"):
        loc.count_impl(impl, root=tree)


def test_a_deleted_file_is_an_error_not_a_stale_count(tree):
    impl = Impl((Source("planted_src/k.py", host=("launch",)),))
    loc.count_impl(impl, root=tree)
    (tree / "planted_src" / "k.py").unlink()
    with pytest.raises(FileNotFoundError, match="k.py"):
        loc.count_impl(impl, root=tree)


def test_explain_counts_afresh_and_agrees(tree):
    impl = Impl((Source("planted_src/k.py", host=("launch",)),))
    c = loc.count_impl(impl, root=tree)
    e = loc.count_impl(impl, root=tree, explain=True)
    assert (e["kernel"], e["host"], e["plan"]) == (c["kernel"], c["host"], c["plan"]) and e["spans"]
