"""One adapter per runtime. Each module registers its implementations with ``harness.register``.

Every ``backends/*.py`` module is an adapter (a layer may split its glue over several, e.g. one
per problem). Adapters must import cleanly when their runtime is missing and report the reason
through ``available()`` instead.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_FIRST = ("torch_layer", "cuda_layer", "cupy_layer", "triton_layer", "cute_layer")
ADAPTERS = tuple(m for m in _FIRST if (Path(__file__).parent / f"{m}.py").exists()) + tuple(
    sorted(p.stem for p in Path(__file__).parent.glob("*.py")
           if not p.stem.startswith("_") and p.stem not in _FIRST))


def src(*parts: str) -> str:
    """Path of a kernel source file, relative to the repository root (for the LOC counter)."""
    return str(Path(*parts))
