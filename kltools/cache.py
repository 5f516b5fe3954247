"""The one folder every kernel-layers cache lives in: ``$XDG_CACHE_HOME/kernel-layers`` (by default
``~/.cache/kernel-layers``), shared by the harness (line counts, compile facts) and the layers'
own caches (NVRTC cubins, exported CuTe DSL kernels).

Entries are written whole or not at all (``write_atomic``: a temporary file in the same folder,
then ``os.replace``), so two runs that compile the same key at once each leave a complete entry
and a reader never sees half of one; ``key`` hashes what an entry depends on (sources, plan, GPU
architecture, compiler and layer versions)."""
from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """``<cache root>/kernel-layers/<parts...>`` (not created here)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root, "kernel-layers", *parts)


def key(*parts) -> str:
    """A hex digest of ``parts`` (bytes as they are, anything else by ``repr``), in order."""
    h = hashlib.sha256()
    for p in parts:
        b = p if isinstance(p, bytes) else repr(p).encode()
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def write_atomic(path: str | os.PathLike, data: bytes | str) -> bool:
    """Write ``data`` to ``path`` whole: into a temporary file beside it (unique to this process
    and thread), then renamed over ``path``. The folder is created. False (nothing written) where
    the folder cannot be written: a cache is an optimisation, never a reason to fail."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        return False
