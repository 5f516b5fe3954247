"""The adapters: one module per layer (a layer may split its glue over several, e.g. one per
problem or its ``inspect`` artifacts), each registering its implementations with
``harness.register`` when imported.

``ADAPTERS`` declares them; ``harness.registry.load_backends`` imports exactly these, in this
order, having found this package through the ``kernel_layers.adapters`` entry point of
pyproject.toml (the harness imports no adapter by name). An adapter must import cleanly when its runtime is missing and report the reason through
``available()``; one whose file is missing or fails to import is recorded in
``harness.registry.BACKEND_ERRORS`` (``python -m harness list`` shows it), not fatal. A new layer
adds its module here (a test checks that every ``backends/*.py`` is declared).
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (layer, its modules), in the order they are imported
LAYERS = (
    ("torch", ("torch_layer",)),
    ("cuda", ("cuda_layer", "cuda_gemm", "cuda_inspect", "cuda_attention")),
    ("cupy", ("cupy_layer", "cupy_attention")),
    ("triton", ("triton_layer", "triton_inspect", "triton_attention")),
    ("gluon", ("gluon_layer", "gluon_attention")),
    ("cute", ("cute_layer", "cute_inspect", "cute_attention")),
    ("helion", ("helion_layer", "helion_attention")),
    ("tilelang", ("tilelang_layer", "tilelang_attention")),
    ("cutile", ("cutile_layer", "cutile_attention")),
    ("libraries", ("library_layer",)),
)
ADAPTERS = tuple(m for _, mods in LAYERS for m in mods)


def src(*parts: str) -> str:
    """Path of a kernel source file, relative to the repository root (for the LOC counter)."""
    return str(Path(*parts))


def planner_rules(package: str, module: str = "dispatch"):
    """``<package>/<module>.py`` (a planner) on a machine without its layer's package: the
    module's tables, switches and rules, with the kernel modules it imports (relative imports) and
    any import that fails bound to None. An adapter reads only the rules at registration (``reachable``, which
    planner the switches pick), so a machine without the package registers the same ids with the
    same sources (and lines of code) as one with it; nothing here plans a launch."""
    import ast
    import sys
    import types

    path = ROOT / package / f"{module}.py"
    tree = ast.parse(path.read_text(), str(path))
    mod = types.ModuleType(f"{package}.{module}")
    body = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "module", None) != "__future__":
            names = [a.asname or a.name.split(".")[0] for a in node.names]
            try:
                if getattr(node, "level", 0):
                    raise ImportError("a kernel module of the layer")
                exec(compile(ast.Module([node], []), str(path), "exec"), mod.__dict__)
            except ImportError:
                mod.__dict__.update(dict.fromkeys(names))
            continue
        body.append(node)
    tree.body = body
    sys.modules[mod.__name__] = mod    # while it runs: dataclasses look their module up
    try:
        exec(compile(tree, str(path), "exec"), mod.__dict__)
    finally:
        del sys.modules[mod.__name__]
    return mod
