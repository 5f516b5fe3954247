"""Resource facts from ``ptxas -v``: the same tool for every layer where possible.

``ptxas_info(ptx)`` assembles PTX text for a target (default sm_90a) and returns, per kernel,
registers per thread, spill bytes (stores + loads), static shared memory and stack frame.
``parse_ptxas_log(text)`` parses the same lines out of an existing log (e.g. an nvcc build).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

_FUNC = re.compile(r"Compiling entry function '([^']+)'|Function properties for (\S+)")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def find_ptxas() -> str | None:
    """ptxas from PATH, CUDA_HOME, or the copy Triton ships."""
    for cand in (shutil.which("ptxas"),
                 os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas")):
        if cand and os.path.exists(cand):
            return cand
    try:
        import triton  # noqa: F401
        from pathlib import Path
        p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
        if p.exists():
            return str(p)
    except Exception:
        pass
    return None


def ptxas_candidates() -> list[str]:
    """Every usable ptxas, best first: the system one, then the ones Triton ships
    (``ptxas-blackwell`` is a newer toolkit and takes the newer PTX ISA versions that recent
    Triton and CuTe DSL releases emit)."""
    c = [find_ptxas()]
    try:
        import triton
        from pathlib import Path
        tb = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
        c += [str(tb / "ptxas-blackwell"), str(tb / "ptxas")]
    except Exception:
        pass
    return [p for i, p in enumerate(c) if p and os.path.exists(p) and p not in c[:i]]


def parse_ptxas_log(text: str) -> dict[str, dict]:
    """{kernel: {registers, spill_stores, spill_loads, spills, stack, smem}} from ``ptxas -v`` output."""
    out: dict[str, dict] = {}
    cur = None
    for line in text.splitlines():
        m = _FUNC.search(line)
        if m:
            cur = m.group(1) or m.group(2)
            out.setdefault(cur, {"registers": None, "spill_stores": 0, "spill_loads": 0,
                                 "spills": 0, "stack": 0, "smem": 0})
            continue
        if cur is None:
            continue
        d = out[cur]
        if (m := _SPILL.search(line)):
            d["stack"], d["spill_stores"], d["spill_loads"] = map(int, m.groups())
            d["spills"] = d["spill_stores"] + d["spill_loads"]
        if (m := _USED.search(line)):
            d["registers"] = int(m.group(1))
        if (m := _SMEM.search(line)):
            d["smem"] = int(m.group(1))
    return out


def ptxas_info(ptx: str, arch: str = "sm_90a") -> dict[str, dict]:
    """Assemble ``ptx`` with ``ptxas -v`` for ``arch`` and return the per-kernel facts; tries each
    of ``ptxas_candidates()`` until one accepts the PTX's ISA version."""
    exes = ptxas_candidates()
    if not exes:
        raise RuntimeError("ptxas not found (install the CUDA toolkit or Triton)")
    errors = []
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        for exe in exes:
            r = subprocess.run([exe, "-v", f"-arch={arch}", src, "-o", os.path.join(d, "k.cubin")],
                               capture_output=True, text=True, timeout=300)
            if r.returncode == 0:
                return parse_ptxas_log(r.stderr + r.stdout)
            errors.append(f"{exe}: {r.stderr.strip()[:500]}")
    raise RuntimeError("ptxas failed: " + " | ".join(errors))


def summarize(per_kernel: dict[str, dict]) -> dict:
    """One row's compile facts: the largest register count and the total spills over its kernels."""
    if not per_kernel:
        return {}
    regs = [d["registers"] for d in per_kernel.values() if d.get("registers") is not None]
    return {"registers": max(regs) if regs else None,
            "spills": sum(d.get("spills", 0) for d in per_kernel.values()),
            "smem": max(d.get("smem", 0) for d in per_kernel.values()),
            "kernels": per_kernel}
