"""The one folder every kernel-layers cache lives in: ``$XDG_CACHE_HOME/kernel-layers`` (by default
``~/.cache/kernel-layers``), shared by the harness (line counts, compile facts) and the layers'
own caches (NVRTC cubins, exported CuTe DSL kernels)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """``<cache root>/kernel-layers/<parts...>`` (not created here)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root, "kernel-layers", *parts)
