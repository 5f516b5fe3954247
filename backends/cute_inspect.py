"""The CuTe DSL layer's hooks for ``python -m harness inspect`` (the PTX, cubin and MLIR the DSL
keeps when asked) and its colour in plots."""
from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

from harness.inspect_cmd import ARCH, Artifacts
from harness.registry import describe_layer

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
    import cutlass_src
    cutlass_src.DISK_CACHE = False      # compile for real: a kernel loaded from disk has no IR to show
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



describe_layer("cute", order=4, colour="#d62728", artifacts=cute_artifacts)
