"""``python -m harness inspect IMPL [--problem P] [--set KEY=VALUE ...] [--dtype D] --out DIR``.

The compiler's view of one implementation for one case, so that one problem can be read across
layers: Triton's ttir, ttgir, llir and ptx; the CuTe DSL's ptx (and its MLIR when the DSL keeps
it); CUDA C++'s ptx (``nvcc -ptx`` of the ``.cu`` for sm_90a); SASS where ``cuobjdump`` exists;
and the ``ptxas -v`` line of every kernel. Nothing here needs a GPU.

Where the artifacts come from, first match wins:

1. the implementation's own hook, ``register(..., artifacts=fn)`` with
   ``fn(case, outdir: Path) -> list[Path]`` (it writes the files itself);
2. Triton: ``register(..., triton_kernels=fn)`` with ``fn(case) -> list[dict]``, each
   ``{"kernel": <@triton.jit fn>, "signature": {"x_ptr": "*fp32", "n": "i32", ...},
   "constexprs": {"BLOCK": 1024}, "num_warps": 4, "num_stages": 3}`` (optionally ``"aligned":
   ("x_ptr", ...)`` for 16-byte divisibility hints), compiled here with
   ``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))``;
3. generic fallbacks, per layer:
   - triton / cute: the implementation's ``compile_only(case)`` runs while ``triton.compile`` /
     ``cutlass.cute.compile`` are watched; every kernel they compile is written out (for the CuTe
     DSL with ``--keep-ptx --keep-cubin`` added and its dump directory moved into ``--out``);
   - cuda / cupy: ``nvcc -ptx -arch=sm_90a`` (and ``-cubin`` when cuobjdump can read it) of each
     ``.cu`` file in the implementation's ``sources``, with ``impl.extra["nvcc_flags"]`` added.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ARCH = "sm_90a"
ROOT = Path(__file__).resolve().parent.parent


class Artifacts:
    """What one inspection produced: files, per-kernel ptxas facts, notes."""

    def __init__(self, outdir: Path):
        self.outdir = outdir
        self.files: list[Path] = []
        self.ptxas: dict[str, dict] = {}
        self.ptxas_lines: list[str] = []
        self.notes: list[str] = []
        self.source = ""

    def write(self, name: str, data: str | bytes) -> Path:
        p = self.outdir / _safe(name)
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data)
        self.add(p)
        return p

    def add(self, p: Path) -> None:
        p = Path(p)
        if p not in self.files:
            self.files.append(p)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name)


def _kind(p: Path) -> str:
    s = p.name.lower()
    for ext, kind in ((".ttir", "Triton IR"), (".ttgir", "Triton GPU IR"), (".llir", "LLVM IR"),
                      (".ptx", "PTX"), (".cubin", "cubin"), (".sass", "SASS"), (".mlir", "MLIR"),
                      (".ptxas.txt", "ptxas -v log"), (".json", "metadata"), (".txt", "text")):
        if s.endswith(ext):
            return kind
    return "file"


# -- ptxas and SASS ----------------------------------------------------------------------------
def _triton_bin() -> Path | None:
    try:
        import triton

        d = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
        return d if d.is_dir() else None
    except Exception:
        return None


def _ptxas_candidates() -> list[str]:
    from .ptxas import ptxas_candidates

    return ptxas_candidates()


def _cuobjdump() -> str | None:
    tool = shutil.which("cuobjdump")
    if tool:
        return tool
    tb = _triton_bin()
    if tb is not None and (tb / "cuobjdump").exists():
        return str(tb / "cuobjdump")
    return None


def run_ptxas(ptx_path: Path, art: Artifacts, want: tuple[str, ...] = ()) -> None:
    """``ptxas -v`` on one PTX file: the raw log next to it, the per-kernel facts in ``art``, and
    the cubin (for SASS). Tries the system ptxas, then Triton's (a newer PTX ISA than the system
    accepts is the usual reason the first refuses)."""
    from .ptxas import parse_ptxas_log

    ptx = ptx_path.read_text()
    arch = (re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.M) or [None, ARCH])[1]
    errors = []
    cubin = ptx_path.parent / (ptx_path.stem + ".cubin")
    compiler_cubin = cubin in art.files  # the layer's own cubin (Triton keeps one): keep it
    for exe in _ptxas_candidates():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "k.cubin"
            r = subprocess.run([exe, "-v", f"-arch={arch}", str(ptx_path), "-o", str(out)],
                               capture_output=True, text=True, timeout=600)
            if r.returncode == 0 and not compiler_cubin:
                shutil.copyfile(out, cubin)
        log = (r.stderr + r.stdout).strip()
        if r.returncode == 0:
            logp = ptx_path.parent / (ptx_path.stem + ".ptxas.txt")
            logp.write_text(f"$ {exe} -v -arch={arch} {ptx_path.name}\n{log}\n")
            if errors:
                art.notes.append(f"{ptx_path.name}: assembled with {exe} (" + "; ".join(errors) + ")")
            art.add(logp)
            art.add(cubin)
            facts = parse_ptxas_log(log)
            for k, d in facts.items():
                if want and not any(w in k for w in want):
                    continue
                art.ptxas[k] = {**d, "ptx": ptx_path.name}
            art.ptxas_lines += _kernel_lines(log, want)
            _sass(cubin, art)
            return
        errors.append(f"{exe}: {log.splitlines()[-1] if log else r.returncode}")
    art.notes.append(f"ptxas -v on {ptx_path.name} failed: " + "; ".join(errors) if errors
                     else "ptxas not found: no registers/spills")


def _kernel_lines(log: str, want: tuple[str, ...]) -> list[str]:
    """One line per kernel from a ``ptxas -v`` log: its name, then what ptxas said of it."""
    from .ptxas import _FUNC

    per: dict[str, list[str]] = {}
    cur = None
    for ln in log.splitlines():
        m = _FUNC.search(ln)
        if m:
            cur = m.group(1) or m.group(2)
            per.setdefault(cur, [])
            continue
        if cur is not None and ("Used" in ln or "spill" in ln or "smem" in ln):
            per[cur].append(re.sub(r"^\s*ptxas[\w-]*\s+info\s*:\s*", "", ln).strip())
    names = _demangle(list(per))
    return [f"{names.get(k, k)}: " + "; ".join(v) for k, v in per.items()
            if v and (not want or any(w in k for w in want))]


def _demangle(names: list[str]) -> dict[str, str]:
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {}
    try:
        r = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=30)
        out = r.stdout.splitlines()
        return dict(zip(names, out)) if len(out) == len(names) else {}
    except Exception:
        return {}


def _sass(cubin: Path, art: Artifacts) -> None:
    tool = _cuobjdump()
    if tool is None:
        if not any("cuobjdump" in n for n in art.notes):
            art.notes.append("SASS: cuobjdump not found on this machine (the cubin is kept)")
        return
    r = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, timeout=300)
    if r.returncode == 0 and r.stdout.strip():
        art.write(cubin.stem + ".sass", r.stdout)
    else:
        art.notes.append(f"SASS: cuobjdump -sass {cubin.name} failed: {r.stderr.strip()[:200]}")


# -- the command -------------------------------------------------------------------------------
def find_impl(impl_id: str, problem: str | None):
    from . import registry

    if problem is not None:
        return registry.get(problem, impl_id)
    matches = [i for i in registry.all_impls() if i.id == impl_id]
    if not matches:
        known = sorted({i.id for i in registry.all_impls()})
        raise ValueError(f"impl: unknown implementation {impl_id!r}; ids look like layer:name, e.g. "
                         f"{', '.join(known[:5])} (see `python -m harness list`)")
    if len(matches) > 1:
        raise ValueError(f"impl: {impl_id} exists for {', '.join(sorted(m.problem for m in matches))}; "
                         f"pick one with --problem")
    return matches[0]


def default_case(problem_name: str, sets, dtype: str | None):
    """The case from --set/--dtype, or the problem's first smoke case when no size is given."""
    from . import problems
    from .case import Case, dtype_name
    from .model import build_case, parse_sets

    prob = problems.get(problem_name)
    kv = parse_sets(sets)
    if any(k in prob.dim_names or k.upper() in prob.dim_names for k in kv):
        return build_case(problem_name, sets, dtype)
    base = prob.cases("smoke")[0]
    params = dict(base.params)
    for k, v in kv.items():  # parameters only (act=gelu, ...): validate through the problem
        params.update(prob.case(dtype=base.dtype, **base.dims, **{k: v}).params)
    dt = dtype_name(dtype) if dtype else base.dtype
    if dt not in prob.dtypes:
        raise ValueError(f"dtype: {problem_name} takes {', '.join(prob.dtypes)}, not {dt}")
    return Case(base.problem, base.dims, dt, params)


def inspect_impl(impl, case, outdir: Path) -> Artifacts:
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise ValueError(f"--out: {outdir} exists and is not a directory")
    outdir.mkdir(parents=True, exist_ok=True)
    art = Artifacts(outdir)
    why = impl.supports(case)
    if why:
        raise ValueError(f"inspect: {impl.id} does not take {case.label}: {why}")
    from .registry import layer_info

    hook = impl.extra.get("artifacts")
    info = layer_info(impl.layer)
    t0 = time.perf_counter()
    if hook is not None:
        art.source = "the implementation's artifacts hook"
        for p in hook(case, outdir) or []:
            art.add(Path(p))
    elif info.artifacts is not None:
        info.artifacts(impl, case, art)
    elif info.no_source:
        raise ValueError(f"inspect: {impl.id}: {info.no_source}")
    else:
        raise ValueError(f"inspect: {impl.id} (layer {impl.layer!r}) registers no artifacts hook "
                         f"(register(..., artifacts=fn(case, outdir) -> [paths]), or "
                         f"registry.describe_layer({impl.layer!r}, artifacts=...))")
    art.seconds = time.perf_counter() - t0
    want = tuple(k for s in impl.sources for k in (s.kernels or ()))
    for p in list(art.files):
        if p.suffix == ".ptx" and p.is_file():
            run_ptxas(p, art, want if info.ptxas_named_kernels else ())
    if not any(p.suffix == ".ptx" for p in art.files):
        art.notes.append("no PTX among the artifacts: no ptxas -v facts")
    return art


def report(impl, case, art: Artifacts) -> dict:
    return {"impl": impl.id, "problem": impl.problem, "layer": impl.layer, "case": case.to_json(),
            "outdir": str(art.outdir), "source": art.source,
            "artifacts": [{"path": str(p), "kind": _kind(p), "bytes": p.stat().st_size if p.exists() else None}
                          for p in art.files],
            "ptxas": art.ptxas, "ptxas_lines": art.ptxas_lines, "notes": art.notes}


def render(rep: dict) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=160, highlight=False, color_system=None)
    c = rep["case"]
    con.print(f"{rep['impl']} ({rep['problem']}) for {c['dtype']} "
              + " ".join(f"{k}={v}" for k, v in c["dims"].items())
              + "".join(f" {k}={v}" for k, v in sorted(c["params"].items())) + f", target {ARCH}")
    con.print(f"  from: {rep['source']}")
    t = Table(title=f"artifacts in {rep['outdir']}")
    t.add_column("file")
    t.add_column("kind")
    t.add_column("bytes", justify="right")
    for a in rep["artifacts"]:
        try:
            name = str(Path(a["path"]).relative_to(rep["outdir"]))
        except ValueError:
            name = a["path"]
        t.add_row(name, a["kind"], f"{a['bytes']:,}" if a["bytes"] is not None else "missing")
    con.print(t)
    if rep["ptxas"]:
        k = Table(title=f"ptxas -v ({ARCH})")
        for col in ("kernel", "registers", "spill stores", "spill loads", "stack", "smem (static)", "ptx"):
            k.add_column(col, overflow="fold")
        for name, d in rep["ptxas"].items():
            k.add_row(name, str(d.get("registers")), str(d.get("spill_stores")), str(d.get("spill_loads")),
                      str(d.get("stack")), str(d.get("smem")), d.get("ptx", ""))
        con.print(k)
    for ln in rep.get("ptxas_lines", []):
        con.print(f"ptxas -v: {ln}", soft_wrap=True)
    for n in rep["notes"]:
        con.print(f"note: {n}")
    return buf.getvalue()


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "inspect", help="compile artifacts of one implementation (ttir/ttgir/llir/ptx/sass, ptxas -v)",
        description="Write the compile artifacts of one implementation for one case into --out, "
                    "for sm_90a, without a GPU where the layer compiles without one.")
    p.add_argument("impl", help="implementation id layer:name, e.g. triton:add")
    p.add_argument("--problem", default=None, help="needed when the id exists for several problems")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="sizes and parameters (default: the problem's first smoke case)")
    p.add_argument("--dtype", default=None)
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the artifacts")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE")
    p.add_argument("--format", default="table", choices=("table", "json"))
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    from . import registry

    registry.load_plugins(getattr(args, "plugin", None))
    impl = find_impl(args.impl, args.problem)
    case = default_case(impl.problem, args.set, args.dtype)
    try:
        art = inspect_impl(impl, case, Path(args.out))
    except ValueError:
        raise
    except Exception as e:  # a compiler failure is reported as one line, not a traceback
        from .errors import Unsupported

        if isinstance(e, Unsupported):
            raise ValueError(f"inspect: {impl.id} cannot compile {case.label} here: {e}") from None
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ValueError(f"inspect: compiling {impl.id} for {case.label} failed: "
                         f"{type(e).__name__}: {msg}"[:600]) from None
    rep = report(impl, case, art)
    if args.format == "json":
        print(json.dumps(rep, indent=2))
    else:
        print(render(rep), end="")
    return 0
