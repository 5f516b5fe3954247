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


def _median_time(fn, reps: int) -> float:
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
    times.sort()
    return times[len(times) // 2]


def measure_ceilings(gemm_size: int = 8192) -> dict:
    """Copy bandwidth (1 GiB fp32 device-to-device, bytes read + written) and the vendor GEMM
    (torch.mm at gemm_size^3 on random data) per 16-bit dtype, measured now on this GPU."""
    dev = "cuda"
    n = 2 ** 28
    x = torch.randn(n, device=dev)
    y = torch.empty_like(x)
    t = _median_time(lambda: y.copy_(x), 30)
    copy_bps = 2 * n * 4 / t
    del x, y
    gemm = {}
    for name, dt in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        g = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn(gemm_size, gemm_size, device=dev, generator=g).to(dt)
        b = torch.randn(gemm_size, gemm_size, device=dev, generator=g).to(dt)
        t = _median_time(lambda: torch.mm(a, b), 20)
        gemm[name] = 2 * gemm_size ** 3 / t
        del a, b
    torch.cuda.empty_cache()
    return {"copy_bytes_per_s": copy_bps, "gemm_flops_per_s": gemm, "gemm_size": gemm_size,
            "copy_bytes": 2 * n * 4, "measured": True}
