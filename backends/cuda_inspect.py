"""The CUDA C++ layers' hooks for ``python -m harness inspect`` (``nvcc -ptx``/``-cubin`` of the
.cu sources, the same files the pybind11 module and NVRTC compile) and their colours in plots."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.inspect_cmd import ARCH, ROOT, Artifacts
from harness.registry import describe_layer

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
    art.source = (f"nvcc -ptx -arch={ARCH} of the kernel instances the planner can pick from the "
                  f"implementation's .cu source(s) (cuda_src/dispatch.py --emit-instances)")
    with tempfile.TemporaryDirectory(prefix="kl-instances-") as tmp:  # removed when done
        _cuda_ptx(nvcc, impl, cus, flags, Path(tmp), art)


def _cuda_ptx(nvcc, impl, cus, flags, gen: Path, art: Artifacts) -> None:
    """nvcc -ptx of each .cu source (its planner-emitted instance file where there is one) into
    the artifacts folder; ``gen`` holds the instance files for the duration."""
    r = subprocess.run([sys.executable, str(ROOT / "cuda_src" / "dispatch.py"), "--emit-instances", str(gen)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise ValueError(f"inspect: cuda_src/dispatch.py --emit-instances failed: {r.stderr.strip()[:300]}")
    for s in cus:
        src = Path(s.path)
        if not src.is_absolute():
            src = ROOT / src
        if not src.is_file():
            raise ValueError(f"inspect: source file not found: {s.path}")
        inst = gen / f"{src.stem}_instances.cu"
        path = inst if inst.is_file() else src  # a file of templates compiles to no kernel alone
        base = ["-arch=" + ARCH, "-std=c++17", "-I", str(src.parent), "-I", str(ROOT / "cuda_src"),
                "-lineinfo"] + flags
        out = art.outdir / f"{src.stem}.{ARCH}.ptx"
        r = subprocess.run([nvcc, "-ptx", *base, str(path), "-o", str(out)], capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0:
            raise ValueError(f"inspect: nvcc -ptx {path.name} failed: "
                             + " | ".join(r.stderr.strip().splitlines()[:6]))
        art.add(out)
        if s.kernels:
            art.notes.append(f"{path.name}: the PTX holds every kernel of the file; "
                             f"{impl.id} uses {', '.join(s.kernels)}")


describe_layer("cuda", order=1, colour="#2ca02c", artifacts=cuda_artifacts, ptxas_named_kernels=True,
               compile_ahead=False)   # built at install time: nothing to compile ahead on a GPU
describe_layer("cupy", order=2, colour="#17becf", artifacts=cuda_artifacts, ptxas_named_kernels=True)
