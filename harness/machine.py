"""What machine this is, and the ceilings measured at the start of a run on it."""
from __future__ import annotations

import importlib.metadata as md
import platform
import shutil
import subprocess
import sys

import torch

def datasheet_for(gpu_name: str | None):
    """The datasheet entry (harness.model.GPUS) of the GPU CUDA reports, or None."""
    from .model import gpu_from_device_name

    return gpu_from_device_name(gpu_name)


def _version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def usable_cpus() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (``taskset``,
    a container's cpuset), else every core. The pools size themselves by it, so that two runs
    pinned to halves of a machine do not each start a process for every core."""
    import os
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def has_gpu() -> bool:
    try:
        return torch.cuda.is_available() and torch.cuda.device_count() > 0
    except Exception:
        return False


def machine_info() -> dict:
    info = {
        "device": "cuda" if has_gpu() else "cpu",
        "gpu": None,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": _version("triton"),
        "cutlass_dsl": _version("nvidia-cutlass-dsl"),
        "cupy": _version("cupy-cuda13x") or _version("cupy-cuda12x") or _version("cupy"),
    }
    if info["device"] == "cuda":
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, sm_count=p.multi_processor_count,
                    capability=f"{p.major}.{p.minor}", memory_bytes=p.total_memory,
                    l2_bytes=int(getattr(p, "L2_cache_size", 0) or 0))
        info.update(_nvidia_smi())
    return info


def _nvidia_smi() -> dict:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    fields = ["driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
              "power.limit", "temperature.gpu"]
    try:
        r = subprocess.run([exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        vals = [v.strip() for v in r.stdout.strip().splitlines()[0].split(",")]
        d = dict(zip(fields, vals))
        return {"driver": d.get("driver_version"),
                "clocks": {k: v for k, v in d.items() if k != "driver_version"}}
    except Exception as e:  # recorded, not fatal
        return {"nvidia_smi_error": str(e)}


def _times(fn, reps: int) -> list[float]:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e-3)
    return sorted(times)


def _rate(amount: float, times: list[float]) -> dict:
    """Rate from the median time, its best, and the relative spread (IQR / median)."""
    n = len(times)
    med, q1, q3 = times[n // 2], times[n // 4], times[(3 * n) // 4]
    return {"per_s": amount / med, "best_per_s": amount / times[0], "rel_iqr": (q3 - q1) / med}


# streaming ceilings by read:write mix (bytes read : bytes written), each a 1 GiB-class torch op
MIXES = {"read": "x.sum() over 2^28 fp32 (read only)",
         "1:1": "y.copy_(x), 2^28 fp32 (read + write)",
         "2:1": "torch.add(x, y, out=z), 2^28 fp32 (two reads, one write)"}


def _stream_ceilings(n: int, dev: str) -> dict:
    x = torch.randn(n, device=dev)
    y = torch.randn(n, device=dev)
    z = torch.empty_like(x)
    return {"read": _rate(n * 4, _times(lambda: x.sum(), 30)),
            "1:1": _rate(2 * n * 4, _times(lambda: z.copy_(x), 30)),
            "2:1": _rate(3 * n * 4, _times(lambda: torch.add(x, y, out=z), 30))}


def measure_ceilings(gemm_size: int = 8192) -> dict:
    """Streaming bandwidth per read:write mix (read only; 1:1 copy; 2:1 as in vector add) and the
    vendor GEMM (torch.mm at gemm_size^3 on random data) per 16-bit dtype, measured now on this
    GPU; each with its relative spread (the noise the plausibility check allows for)."""
    dev = "cuda"
    n = 2 ** 28
    mixes = _stream_ceilings(n, dev)
    gemm, gemm_spread = {}, {}
    for name, dt in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        g = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn(gemm_size, gemm_size, device=dev, generator=g).to(dt)
        b = torch.randn(gemm_size, gemm_size, device=dev, generator=g).to(dt)
        r = _rate(2 * gemm_size ** 3, _times(lambda: torch.mm(a, b), 20))
        gemm[name], gemm_spread[name] = r["per_s"], r["rel_iqr"]
        del a, b
    torch.cuda.empty_cache()
    return {"copy_bytes_per_s": mixes["1:1"]["per_s"], "stream_bytes_per_s": mixes,
            "stream_how": MIXES, "gemm_flops_per_s": gemm, "gemm_rel_iqr": gemm_spread,
            "gemm_size": gemm_size, "copy_bytes": 2 * n * 4, "measured": True}
