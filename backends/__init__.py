"""One adapter per runtime. Each module registers its implementations with ``harness.register``.

Adapters must import cleanly when their runtime is missing and report the reason through
``available()`` instead.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = ("torch_layer", "cuda_layer", "cupy_layer", "triton_layer", "cute_layer")


def src(*parts: str) -> str:
    """Path of a kernel source file, relative to the repository root (for the LOC counter)."""
    return str(Path(*parts))
