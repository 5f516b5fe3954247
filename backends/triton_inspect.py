"""The Triton layer's hooks for ``python -m harness inspect`` (its compile artifacts: ttir, ttgir,
llir, ptx, cubin) and its colour in plots."""
from __future__ import annotations

import contextlib
import json

from harness.inspect_cmd import Artifacts
from harness.registry import describe_layer

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
    """Compile one ``triton_kernels`` entry for sm_90 (no GPU needed); returns the CompiledKernel.
    The compile runs under the Triton layer's ``_compiler_mode``, as every other sm_90 compile in
    this process does: an interpreted launch earlier in the process (TRITON_INTERPRET=1) can leave
    ``triton.language.core`` patched with the interpreter's builtins, which the code generator
    cannot compile (a CompilationError at the kernel's first ``*``)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from backends.triton_layer import _compiler_mode

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
    src = ASTSource(fn=jf, signature=sig, constexprs={(names.index(k),): v for k, v in consts.items()},
                    attrs=attrs)
    opts = {"num_warps": int(spec.get("num_warps", 4)), "num_stages": int(spec.get("num_stages", 3))}
    with _compiler_mode():
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



describe_layer("triton", order=3, colour="#1f77b4", artifacts=triton_artifacts)
