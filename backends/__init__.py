"""The adapters: one module per layer (a layer may split its glue over several, e.g. one per
problem or its ``inspect`` artifacts), each registering its implementations with
``harness.register`` when imported.

``ADAPTERS`` declares them; ``harness.registry.load_backends`` imports exactly these, in this
order. An adapter must import cleanly when its runtime is missing and report the reason through
``available()``; one whose file is missing or fails to import is recorded in
``harness.registry.BACKEND_ERRORS`` (``python -m harness list`` shows it), not fatal. A new layer
adds its module here (a test checks that every ``backends/*.py`` is declared).
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (layer, its modules), in the order they are imported
LAYERS = (
    ("torch", ("torch_layer",)),
    ("cuda", ("cuda_layer", "cuda_gemm", "cuda_inspect")),
    ("cupy", ("cupy_layer",)),
    ("triton", ("triton_layer", "triton_inspect", "triton_attention")),
    ("gluon", ("gluon_layer", "gluon_attention")),
    ("cute", ("cute_layer", "cute_inspect")),
    ("helion", ("helion_layer",)),
    ("tilelang", ("tilelang_layer", "tilelang_attention")),
    ("cutile", ("cutile_layer",)),
    ("libraries", ("library_layer",)),
)
ADAPTERS = tuple(m for _, mods in LAYERS for m in mods)


def src(*parts: str) -> str:
    """Path of a kernel source file, relative to the repository root (for the LOC counter)."""
    return str(Path(*parts))
