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
import contextlib
import json
import os
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


# -- Triton ------------------------------------------------------------------------------------
_TRITON_STAGES = ("ttir", "ttgir", "llir", "ptx", "cubin")


def _write_triton(art: Artifacts, ck, name: str | None = None) -> None:
    asm = getattr(ck, "asm", {}) or {}
    meta = getattr(ck, "metadata", None)
    name = name or getattr(meta, "name", None) or "kernel"
    for stage in _TRITON_STAGES:
        if stage in asm and asm[stage]:
            art.write(f"{name}.{stage}", asm[stage])
    missing = [s for s in _TRITON_STAGES if s not in asm]
    if missing:
        art.notes.append(f"{name}: Triton kept no {', '.join(missing)}")
    if meta is not None:
        try:
            d = meta._asdict() if hasattr(meta, "_asdict") else dict(vars(meta))
            art.write(f"{name}.metadata.json", json.dumps(d, indent=2, default=str))
        except Exception:
            pass


@contextlib.contextmanager
def _watch_triton():
    """Record every ``triton.compile`` call made inside the block (the real compile still runs)."""
    import triton
    import triton.compiler as tc
    import triton.compiler.compiler as tcc

    orig = tcc.compile
    seen: list = []

    def watched(src, *a, **kw):
        ck = orig(src, *a, **kw)
        seen.append((src, ck))
        return ck

    patched = [(m, "compile") for m in (triton, tc, tcc) if getattr(m, "compile", None) is orig]
    for m, attr in patched:
        setattr(m, attr, watched)
    try:
        yield seen
    finally:
        for m, attr in patched:
            setattr(m, attr, orig)


def _jit_of(kernel):
    """A JITFunction for ``kernel`` (also when TRITON_INTERPRET=1 made it an interpreter object)."""
    from triton.runtime.jit import JITFunction

    k = kernel
    while not isinstance(k, JITFunction) and hasattr(k, "fn"):
        k = k.fn
    if isinstance(k, JITFunction):
        return k
    if callable(k):
        return JITFunction(k)
    raise ValueError(f"triton_kernels: {kernel!r} is not a @triton.jit function")


def compile_triton_spec(spec: dict):
    """Compile one ``triton_kernels`` entry for sm_90 (no GPU needed); returns the CompiledKernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    jf = _jit_of(spec["kernel"])
    names = list(jf.arg_names)
    consts = dict(spec.get("constexprs", {}))
    sig_in = dict(spec.get("signature", {}))
    sig = {}
    for n in names:
        if n in consts:
            sig[n] = "constexpr"
        elif n in sig_in:
            sig[n] = sig_in[n]
        else:
            raise ValueError(f"triton_kernels: no type for argument {n!r} of {jf.__name__} "
                             f"(give it in 'signature' or 'constexprs')")
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in spec.get("aligned", ())}
    try:
        src = ASTSource(fn=jf, signature=sig, constexprs={(names.index(k),): v for k, v in consts.items()},
                        attrs=attrs)
    except (TypeError, AssertionError):
        src = ASTSource(fn=jf, signature=sig, constexprs=consts, attrs=attrs)
    opts = {"num_warps": int(spec.get("num_warps", 4)), "num_stages": int(spec.get("num_stages", 3))}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def triton_artifacts(impl, case, art: Artifacts) -> None:
    hook = impl.extra.get("triton_kernels")
    if hook is not None:
        art.source = "triton_kernels hook, compiled with triton.compile(ASTSource, GPUTarget('cuda', 90, 32))"
        specs = hook(case)
        if not specs:
            raise ValueError(f"inspect: {impl.id}'s triton_kernels hook returned no kernels for {case.label}")
        for spec in specs:
            ck = compile_triton_spec(spec)
            _write_triton(art, ck, spec.get("name") or _jit_of(spec["kernel"]).__name__)
        return
    if impl.compile_only_fn is None:
        raise ValueError(f"inspect: {impl.id} has neither an artifacts/triton_kernels hook nor "
                         f"compile_only; nothing tells how to compile its kernels")
    art.source = "compile_only(case), every triton.compile call recorded"
    facts = None
    with _watch_triton() as seen:
        try:
            facts = impl.compile_only_fn(case)
        except Exception as e:
            if not seen:
                raise
            art.notes.append(f"compile_only failed after compiling its kernel(s): {type(e).__name__}: "
                             + (str(e).strip().splitlines() or [""])[0][:200])
    if not seen:
        raise ValueError(f"inspect: {impl.id}'s compile_only compiled no Triton kernel "
                         f"(it may take them from a cache); add an artifacts or triton_kernels hook")
    for src, ck in seen:
        fn = getattr(src, "fn", None)
        _write_triton(art, ck, getattr(fn, "__name__", None))
    if isinstance(facts, dict):
        art.write("compile_facts.json", json.dumps(facts, indent=2, default=str))


# -- CuTe DSL ----------------------------------------------------------------------------------
_DUMP_FLAG = re.compile(r"--dump-dir(?:=|\s+)\S+")


@contextlib.contextmanager
def _watch_cute(dump_dir: Path):
    import cutlass.cute as cute

    orig = cute.compile
    seen: list = []

    class Watched:
        """Stands in for ``cute.compile``: adds --keep-ptx/--keep-cubin and our dump directory."""

        def __call__(self, fn, *args, options: str = "", **kw):
            opts = _DUMP_FLAG.sub("", options or "")
            for flag in ("--keep-ptx", "--keep-cubin"):
                if flag not in opts:
                    opts += f" {flag}"
            opts += f" --dump-dir={dump_dir}"
            r = orig(fn, *args, options=opts.strip(), **kw)
            seen.append((fn, r))
            return r

        def __getattr__(self, name):
            return getattr(orig, name)

        def __getitem__(self, item):
            return orig[item]

    cute.compile = Watched()
    try:
        yield seen
    finally:
        cute.compile = orig


def cute_artifacts(impl, case, art: Artifacts) -> None:
    if impl.compile_only_fn is None:
        raise ValueError(f"inspect: {impl.id} has neither an artifacts hook nor compile_only")
    why = impl.available()
    if why:
        raise ValueError(f"inspect: {impl.id} is not available here: {why}")
    dump = art.outdir / "cute_dump"
    dump.mkdir(exist_ok=True)
    os.environ.setdefault("CUTE_DSL_ARCH", ARCH)
    # the DSL reads these when cutlass is first imported: ask it to keep its IR as well
    os.environ.setdefault("CUTE_DSL_KEEP", "ir,ptx,cubin")
    os.environ.setdefault("CUTE_DSL_DUMP_DIR", str(dump))
    art.source = "compile_only(case), every cute.compile call recorded (--keep-ptx --keep-cubin)"
    with _watch_cute(dump) as seen:
        facts = impl.compile_only_fn(case)
    if not seen:
        raise ValueError(f"inspect: {impl.id}'s compile_only compiled nothing (a cached compile?); "
                         f"add an artifacts hook")
    kept = set()
    for k, (fn, r) in enumerate(seen):
        name = f"{impl.layer}_{impl.name}" + (f"_{k}" if len(seen) > 1 else "")
        for attr, ext in (("__ptx__", "ptx"), ("__mlir__", "mlir"), ("__cubin__", "cubin"),
                          ("__sass__", "sass")):
            try:
                data = getattr(r, attr, None)
            except Exception:
                data = None
            if data:
                art.write(f"{name}.{ext}", data)
                kept.add(ext)
    # what the DSL dumped beyond that (its IR files, when it keeps them) stays in cute_dump/
    for p in sorted(dump.rglob("*")):
        if p.is_file():
            if p.suffix.lstrip(".") in kept:
                p.unlink()
            else:
                art.add(p)
                kept.add(p.suffix.lstrip("."))
    if "mlir" not in kept:
        art.notes.append("the DSL kept no MLIR (CUTE_DSL_KEEP=ir must be set before cutlass is "
                         "first imported in the process)")
    if isinstance(facts, dict):
        art.write("compile_facts.json", json.dumps(facts, indent=2, default=str))


# -- CUDA C++ ----------------------------------------------------------------------------------
def _nvcc() -> str | None:
    for cand in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                                    "bin", "nvcc")):
        if cand and os.path.exists(cand):
            return cand
    return None


def cuda_artifacts(impl, case, art: Artifacts) -> None:
    nvcc = _nvcc()
    if nvcc is None:
        raise ValueError("inspect: nvcc not found (install the CUDA toolkit or set CUDA_HOME)")
    cus = [s for s in impl.sources if str(s.path).endswith(".cu")]
    if not cus:
        raise ValueError(f"inspect: {impl.id} names no .cu file in its sources")
    flags = list(impl.extra.get("nvcc_flags", ()))
    art.source = f"nvcc -ptx -arch={ARCH} of the implementation's .cu source(s)"
    for s in cus:
        path = Path(s.path)
        if not path.is_absolute():
            path = ROOT / path
        if not path.is_file():
            raise ValueError(f"inspect: source file not found: {s.path}")
        base = ["-arch=" + ARCH, "-std=c++17", "-I", str(path.parent), "-I", str(ROOT / "cuda_src"),
                "-lineinfo"] + flags
        out = art.outdir / f"{path.stem}.{ARCH}.ptx"
        r = subprocess.run([nvcc, "-ptx", *base, str(path), "-o", str(out)], capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0:
            raise ValueError(f"inspect: nvcc -ptx {path.name} failed: "
                             + " | ".join(r.stderr.strip().splitlines()[:6]))
        art.add(out)
        if s.kernels:
            art.notes.append(f"{path.name}: the PTX holds every kernel of the file; "
                             f"{impl.id} uses {', '.join(s.kernels)}")


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
    hook = impl.extra.get("artifacts")
    t0 = time.perf_counter()
    if hook is not None:
        art.source = "the implementation's artifacts hook"
        for p in hook(case, outdir) or []:
            art.add(Path(p))
    elif impl.layer == "triton":
        triton_artifacts(impl, case, art)
    elif impl.layer == "cute":
        cute_artifacts(impl, case, art)
    elif impl.layer in ("cuda", "cupy"):
        cuda_artifacts(impl, case, art)
    elif impl.layer == "torch":
        raise ValueError(f"inspect: {impl.id} runs torch's own kernels (prebuilt in libtorch, or "
                         f"generated by inductor); there is no kernel source of ours to compile")
    else:
        raise ValueError(f"inspect: {impl.id} (layer {impl.layer!r}) registers no artifacts hook "
                         f"(register(..., artifacts=fn(case, outdir) -> [paths]))")
    art.seconds = time.perf_counter() - t0
    want = tuple(k for s in impl.sources for k in (s.kernels or ()))
    for p in list(art.files):
        if p.suffix == ".ptx" and p.is_file():
            run_ptxas(p, art, want if impl.layer in ("cuda", "cupy") else ())
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
