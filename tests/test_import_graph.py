"""The product's import graph has no circle (docs/DESIGN.md: planning is one-way; kernel folders
import no harness code): every import between the product's own modules, at module level or
inside a function, read from the sources with ``ast``."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "backends", "kltools", "cuda_src", "triton_src", "cutlass_src", "gluon_src",
            "helion_src", "tilelang_src", "cutile_src")


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_of(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if "__pycache__" not in p.parts and (ROOT / pkg).is_dir()}


def _imports(mod: str, path: Path, known: set[str]) -> set[str]:
    """The product modules ``mod`` imports (a name imported from a package counts as its submodule
    where one exists, else as the package)."""
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in known:
                    out.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1] if pkg else []
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:
                sub = f"{base}.{a.name}" if base else a.name
                if sub in known:
                    out.add(sub)
                elif base in known:
                    out.add(base)
    out.discard(mod)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return comps


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    # a package's __init__ re-exporting its submodules is not an edge back from them
    return {m: {d for d in _imports(m, p, known) if not (p.name == "__init__.py" and d.startswith(m + "."))}
            for m, p in mods.items()}


def test_no_import_circle():
    cycles = _cycles(_graph())
    assert not cycles, "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_planted_circle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(g) == [["a", "b", "c"]]


def test_kernel_folders_import_no_harness_code():
    g = _graph()
    bad = [f"{m} -> {d}" for m, deps in g.items() if m.split(".")[0].endswith("_src")
           for d in deps if d.split(".")[0] == "harness"]
    assert not bad, bad


def test_the_harness_imports_no_layer_and_no_adapter():
    """The harness knows no layer by name: it imports neither ``backends`` nor a kernel folder
    (it finds the adapter packages through the ``kernel_layers.adapters`` entry points), so every
    arrow between them runs from the layers down to the harness."""
    g = _graph()
    bad = [f"{m} -> {d}" for m, deps in g.items() if m.split(".")[0] == "harness"
           for d in deps if d.split(".")[0] == "backends" or d.split(".")[0].endswith("_src")]
    assert not bad, bad


def test_kernel_folders_import_no_adapter():
    g = _graph()
    bad = [f"{m} -> {d}" for m, deps in g.items() if m.split(".")[0].endswith("_src")
           for d in deps if d.split(".")[0] == "backends"]
    assert not bad, bad


def test_the_adapters_are_found_through_their_entry_point():
    from harness import registry
    assert registry.adapter_packages()[:1] == ["backends"]
    registry.load_backends()
    import backends
    origins = {i.origin for i in registry.all_impls() + registry.candidates()}
    inspect_only = {"backends.cuda_inspect", "backends.triton_inspect", "backends.cute_inspect"}
    assert origins >= {f"backends.{m}" for m in backends.ADAPTERS if m not in registry.BACKEND_ERRORS} - inspect_only


def test_the_planted_arrow_back_up_is_caught():
    """The check above sees an import of backends from a harness module."""
    g = {"harness.x": {"backends.cuda_layer"}, "backends.cuda_layer": {"harness"}}
    bad = [f"{m} -> {d}" for m, deps in g.items() if m.split(".")[0] == "harness"
           for d in deps if d.split(".")[0] == "backends"]
    assert bad == ["harness.x -> backends.cuda_layer"]


def test_registering_every_row_imports_no_heavy_layer_package():
    """Every process (the parent, each worker, each pool process) registers the rows it runs;
    registering must not import the layers' own compilers (helion alone costs ~3 s: it pulls in
    torch._dynamo and sklearn), which load on a row's first use instead."""
    import subprocess
    import sys
    code = ("import sys; from harness import registry; registry.load_backends(); "
            "print(len(registry.all_impls())); "
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'helion', 'tilelang', 'tvm', 'cutlass', 'quack', 'liger_kernel', 'sklearn'})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    n, heavy = (out.stdout.splitlines() + [""])[:2]
    assert int(n) > 50           # the rows were registered
    assert heavy == ""
