"""The roofline model: what each variant of a problem would take on an ideal machine.

``python -m harness model PROBLEM --set KEY=VALUE ... [--dtype D] [--gpu NAME | --bw B --peak P |
--from RESULTS.json] [--format table|json]`` prints, per variant (the fused kernel and its unfused
forms), F, bytes read and written, Q, intensity I = F/Q, T_compute = F/P, T_memory = Q/BW, T_ideal
and the bound that holds.

Conventions (printed with every table; the kernels and counts come from ``Problem.variants``):

- one FLOP per elementwise add, subtract, multiply, divide, compare (max, ReLU) and exp; a
  reduction over n elements costs n - 1 FLOPs; GEMM is 2*M*N*K; an activation one FLOP per element;
- each kernel reads each of its inputs once and writes its output once, vectors of length M or N
  included; bytes are decimal, the element size comes from the dtype (default float32);
- a variant's T_compute = F/P and T_memory = Q/BW over all its kernels; its T_ideal is the sum over
  its kernels of max(F_k/P, Q_k/BW) (kernels run one after another, each at its own bound).

The lead's ``compare`` uses :func:`model_rows` and :func:`ideal_time`; the hardware comes from
:func:`datasheet_hardware`, :func:`ceilings_hardware` or explicit numbers.
"""
from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from .case import DTYPES, Case, dtype_name
from . import problems

CONVENTIONS = (
    "one FLOP per elementwise add, subtract, multiply, divide, compare (max, ReLU) and exp; "
    "a reduction over n elements costs n-1 FLOPs; GEMM is 2*M*N*K; an activation 1 FLOP/element",
    "each kernel reads each of its inputs once and writes its output once (vectors of length M or N "
    "included); bytes are decimal (1 GB = 1e9 B), element size from the dtype",
    "T_compute = F/P, T_memory = Q/BW over the variant; T_ideal = sum over its kernels of "
    "max(F_k/P, Q_k/BW); bound = the larger term (mixed when its kernels differ)",
)


# -- hardware ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class GPU:
    key: str
    name: str
    bw: float          # bytes/s, HBM
    fp32: float        # FLOP/s, fp32 non-tensor (CUDA cores)
    tensor16: float    # FLOP/s, dense fp16/bf16 tensor core, fp32 accumulate
    source: str
    #: what a planner reads of the device (torch.cuda.get_device_properties reports the same):
    #: compute capability, SMs, shared memory an SM and a CTA (opt-in), L2 bytes, threads an SM
    arch: "Arch | None" = None

    @property
    def sm(self) -> str:
        """``sm_90``-style name of its compute capability ("" when unknown)."""
        return f"sm_{self.arch.cc[0]}{self.arch.cc[1]}" if self.arch else ""


@dataclass(frozen=True)
class Arch:
    cc: tuple[int, int]
    sms: int
    smem_per_sm: int
    smem_optin: int
    l2_bytes: int
    threads_per_sm: int
    source: str


# CUDA C++ Programming Guide, "Technical Specifications per Compute Capability": shared memory an
# SM / a CTA (opt-in) and resident threads an SM for 8.0 (164 / 163 KiB, 2048), 8.9 and 12.0
# (100 / 99 KiB, 1536), 9.0 and 10.0 (228 / 227 KiB, 2048); SMs and L2 from each GPU's datasheet
# or architecture whitepaper (named with the GPU below)
_CC_TABLE = "CUDA C++ Programming Guide, technical specifications per compute capability"
_A100 = Arch((8, 0), 108, 167936, 166912, 40 * 2 ** 20, 2048, f"{_CC_TABLE}; A100 whitepaper: 108 SMs, 40 MB L2")
_RTX4090 = Arch((8, 9), 128, 102400, 101376, 72 * 2 ** 20, 1536,
                f"{_CC_TABLE}; Ada whitepaper (RTX 4090): 128 SMs, 72 MB L2")
_H100 = Arch((9, 0), 132, 233472, 232448, 50 * 2 ** 20, 2048, f"{_CC_TABLE}; H100 SXM5: 132 SMs, 50 MB L2")
_H200 = Arch((9, 0), 132, 233472, 232448, 50 * 2 ** 20, 2048, f"{_CC_TABLE}; H200 SXM: 132 SMs, 50 MB L2")
_B200 = Arch((10, 0), 148, 233472, 232448, 126 * 2 ** 20, 2048,
             f"{_CC_TABLE}; Blackwell datasheet (B200): 148 SMs, 126 MB L2")
_RTX5090 = Arch((12, 0), 170, 102400, 101376, 96 * 2 ** 20, 1536,
                f"{_CC_TABLE}; RTX Blackwell whitepaper (RTX 5090): 170 SMs, 96 MB L2")


# Datasheet figures. The fp16/bf16 tensor figures in NVIDIA's datasheets are quoted "with
# sparsity"; the dense figure used here is half of it.
GPUS: dict[str, GPU] = {
    "h100": GPU("h100", "NVIDIA H100 SXM5 80GB", 3.35e12, 67e12, 989.5e12,
                "NVIDIA H100 Tensor Core GPU datasheet, SXM5 column: GPU memory bandwidth 3.35 TB/s; "
                "FP32 67 TFLOPS; BF16/FP16 Tensor Core 1,979 TFLOPS with sparsity -> 989.5 dense",
                arch=_H100),
    "h200": GPU("h200", "NVIDIA H200 SXM 141GB", 4.8e12, 67e12, 989.5e12,
                "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: GPU memory bandwidth 4.8 TB/s; "
                "FP32 67 TFLOPS; BF16/FP16 Tensor Core 1,979 TFLOPS with sparsity -> 989.5 dense",
                arch=_H200),
    "a100": GPU("a100", "NVIDIA A100 SXM4 80GB", 2.039e12, 19.5e12, 312e12,
                "NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column: GPU memory bandwidth "
                "2,039 GB/s; FP32 19.5 TFLOPS; BF16/FP16 Tensor Core 312 TFLOPS dense (624 with sparsity)",
                arch=_A100),
    "b200": GPU("b200", "NVIDIA B200 (HGX B200)", 7.7e12, 75e12, 2.25e15,
                "NVIDIA HGX B200 datasheet, individual B200 GPU: 180 GB HBM3E at 7.7 TB/s; FP32 75 TFLOPS; "
                "FP16/BF16 Tensor Core 4.5 PFLOPS with sparsity -> 2.25 dense",
                arch=_B200),
    # GeForce: the tensor figure with FP32 accumulate (what these GEMMs do), half the FP16-accumulate one
    "rtx4090": GPU("rtx4090", "NVIDIA GeForce RTX 4090", 1.008e12, 82.6e12, 165.2e12,
                   "NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090: memory bandwidth 1,008 GB/s; "
                   "peak FP32 82.6 TFLOPS; peak FP16/BF16 Tensor with FP32 accumulate 165.2 TFLOPS dense "
                   "(330.3 with sparsity)",
                   arch=_RTX4090),
    "rtx5090": GPU("rtx5090", "NVIDIA GeForce RTX 5090", 1.792e12, 104.8e12, 209.5e12,
                   "NVIDIA RTX Blackwell GPU architecture whitepaper, GeForce RTX 5090: memory bandwidth "
                   "1,792 GB/s; peak FP32 104.8 TFLOPS; peak FP16/BF16 Tensor with FP32 accumulate 209.5 "
                   "TFLOPS dense (419 with sparsity)",
                   arch=_RTX5090),
}
GPU_ALIASES = {"h100-sxm": "h100", "h100-sxm5": "h100", "h100sxm": "h100",
               "h200-sxm": "h200", "a100-sxm": "a100", "a100-sxm4": "a100", "a100-80gb": "a100",
               "a100-sxm4-80gb": "a100", "b200-sxm": "b200", "hgx-b200": "b200",
               "4090": "rtx4090", "rtx-4090": "rtx4090", "geforce-rtx-4090": "rtx4090",
               "5090": "rtx5090", "rtx-5090": "rtx5090", "geforce-rtx-5090": "rtx5090"}


def gpu_by_name(name: str) -> GPU:
    """A datasheet entry by short name (h100, h200, a100, b200, rtx4090, rtx5090, or an alias);
    ValueError naming it otherwise."""
    k = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    k = GPU_ALIASES.get(k, k)
    if k not in GPUS:
        raise ValueError(f"--gpu: unknown GPU {name!r}; known: {', '.join(GPUS)} "
                         f"(or give --bw BYTES_PER_S --peak FLOP_PER_S)")
    return GPUS[k]


def gpu_from_device_name(device_name: str | None) -> GPU | None:
    """Map a device name as CUDA reports it ('NVIDIA H200', 'NVIDIA H100 80GB HBM3',
    'NVIDIA A100-SXM4-80GB') to a datasheet entry; None when it is not one of ours (PCIe and NVL
    parts have other figures)."""
    if not device_name:
        return None
    n = device_name.upper()
    if any(t in n for t in ("PCIE", "NVL", "40GB")):
        return None
    for key in ("H200", "H100", "A100", "B200"):
        if key in n:
            return GPUS[key.lower()]
    for key in ("RTX 4090", "RTX 5090"):   # "NVIDIA GeForce RTX 4090" (not the "D" or laptop parts)
        if n.endswith(key):
            return GPUS[key.replace(" ", "").lower()]
    return None


@dataclass(frozen=True)
class Hardware:
    """One hardware model: bandwidth BW (bytes/s), peak P (FLOP/s) and where each figure comes from."""

    bw: float
    peak: float
    bw_source: str
    peak_source: str

    @property
    def ridge(self) -> float:
        """Intensity (FLOP/byte) above which a kernel is compute-bound."""
        return self.peak / self.bw


def _tensor_dtype(dtype: str) -> bool:
    return dtype_name(dtype) in ("float16", "bfloat16")


def datasheet_hardware(gpu: str | GPU, dtype: str) -> Hardware:
    """The datasheet model of ``gpu`` for ``dtype``: fp32 uses the fp32 non-tensor peak, fp16/bf16
    the dense tensor-core peak (one peak for every kernel of the problem)."""
    g = gpu if isinstance(gpu, GPU) else gpu_by_name(gpu)
    dt = dtype_name(dtype)
    if _tensor_dtype(dt):
        peak, what = g.tensor16, f"dense {dt} tensor-core peak"
    else:
        peak, what = g.fp32, "fp32 non-tensor (CUDA-core) peak"
    return Hardware(g.bw, peak, f"{g.name} datasheet HBM bandwidth",
                    f"{g.name} datasheet {what}")


def _positive(val, what: str) -> float:
    if isinstance(val, bool):
        raise ValueError(f"{what}: expected a positive number, got {val!r}")
    try:
        x = float(val)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a positive number, got {val!r}") from None
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{what}: expected a positive finite number, got {val!r}")
    return x


def _ceilings(results: dict, where: str) -> dict:
    if not isinstance(results, dict):
        raise ValueError(f"{where}: not a results object")
    ceil = results.get("ceilings")
    if not isinstance(ceil, dict):
        raise ValueError(f"{where}: has no 'ceilings' (was it written by `compare` on a GPU?)")
    return ceil


def _run_gpu(results: dict) -> str | None:
    m = results.get("machine")
    return m.get("gpu") if isinstance(m, dict) else None


def measured_bw(results: dict, where: str = "results") -> tuple[float, str]:
    """(BW, source) from ``results["ceilings"]["copy_bytes_per_s"]``."""
    bw = _ceilings(results, where).get("copy_bytes_per_s")
    if bw is None:
        raise ValueError(f"{where}: the run measured no copy bandwidth (ceilings.copy_bytes_per_s "
                         f"is null); give --bw as well")
    gpu = _run_gpu(results)
    return (_positive(bw, f"{where}: ceilings.copy_bytes_per_s"),
            f"measured device-to-device copy in {where}" + (f" ({gpu})" if gpu else ""))


def measured_peak(results: dict, dtype: str, where: str = "results") -> tuple[float, str]:
    """(P, source) from ``results["ceilings"]["gemm_flops_per_s"][dtype]``. A run measures no
    fp32 GEMM ceiling: then P is the datasheet fp32 figure of the run's GPU
    (``results["machine"]["gpu"]``) when it is a known one, else ValueError."""
    dt = dtype_name(dtype)
    gemm = _ceilings(results, where).get("gemm_flops_per_s") or {}
    if not isinstance(gemm, dict):
        raise ValueError(f"{where}: ceilings.gemm_flops_per_s is not an object")
    if gemm.get(dt) is not None:
        return (_positive(gemm[dt], f"{where}: ceilings.gemm_flops_per_s.{dt}"),
                f"measured vendor GEMM ({dt}) in {where}")
    g = gpu_from_device_name(_run_gpu(results))
    if g is not None and not _tensor_dtype(dt):
        return g.fp32, f"{g.name} datasheet fp32 non-tensor peak (the run measured no {dt} GEMM ceiling)"
    have = ", ".join(k for k, v in gemm.items() if v is not None) or "none"
    raise ValueError(f"{where}: the run measured no {dt} GEMM ceiling (measured: {have}); "
                     f"give --peak FLOP_PER_S as well")


def ceilings_hardware(results: dict, dtype: str, where: str = "results") -> Hardware:
    """The measured model of a run: the copy bandwidth as BW and the vendor GEMM of ``dtype`` as P
    (see :func:`measured_peak` for fp32)."""
    bw, bws = measured_bw(results, where)
    pk, pks = measured_peak(results, dtype, where)
    return Hardware(bw, pk, bws, pks)


def load_results(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--from: no such file: {path}")
    try:
        return json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"--from: {path} is not valid JSON ({e})") from None


_SI = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


def parse_rate(text: str, what: str) -> float:
    """'4.8e12', '4.8T', '4.8 TB/s', '989.5T' -> float (decimal prefixes)."""
    s = str(text).strip()
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*([kKmMgGtTpP]?)\s*(?:B/s|FLOP/s|FLOPS|flop/s)?", s)
    if not m:
        raise ValueError(f"{what}: expected a positive number such as 4.8e12 or 4.8T, got {text!r}")
    return _positive(float(m.group(1)) * _SI[m.group(2).lower()], what)


def resolve_hardware(dtype: str, gpu: str | None = None, bw: str | float | None = None,
                     peak: str | float | None = None, results_path: str | None = None) -> Hardware:
    """The hardware for the CLI. Explicit ``--bw``/``--peak`` win; the figure not given comes from
    ``--from`` (measured) or ``--gpu`` (datasheet); with neither, both must be given, and with
    nothing at all the h200 datasheet (this project's GPU) is used and said so."""
    if gpu is not None and results_path is not None:
        raise ValueError("--gpu and --from both name the hardware; give one of them")
    bw_v = parse_rate(bw, "--bw") if bw is not None else None
    peak_v = parse_rate(peak, "--peak") if peak is not None else None
    given = (bw_v, "--bw (given)"), (peak_v, "--peak (given)")
    if results_path is not None:
        res = load_results(results_path)
        where = str(results_path)
        (b, bs) = given[0] if bw_v is not None else measured_bw(res, where)
        (p, ps) = given[1] if peak_v is not None else measured_peak(res, dtype, where)
        return Hardware(b, p, bs, ps)
    if gpu is None and bw_v is not None and peak_v is not None:
        return Hardware(bw_v, peak_v, given[0][1], given[1][1])
    if gpu is None and (bw_v is not None or peak_v is not None):
        raise ValueError("--bw and --peak go together (or combine one of them with --gpu or --from)")
    sheet = datasheet_hardware(gpu or "h200", dtype)
    dflt = " (default: --gpu h200)" if gpu is None else ""
    return Hardware(bw_v if bw_v is not None else sheet.bw, peak_v if peak_v is not None else sheet.peak,
                    given[0][1] if bw_v is not None else sheet.bw_source + dflt,
                    given[1][1] if peak_v is not None else sheet.peak_source + dflt)


# -- the model ---------------------------------------------------------------------------------
def _bound(t_compute: float, t_memory: float) -> str:
    if t_compute > t_memory:
        return "compute"
    if t_memory > t_compute:
        return "memory"
    return "balanced"


def kernel_rows(problem_name: str, case: Case, bw: float, peak: float) -> dict[str, list[dict]]:
    """Per variant, one dict per kernel: name, flops, bytes_read, bytes_written, bytes, t_compute_s,
    t_memory_s, t_ideal_s, bound."""
    bw = _positive(bw, "bw")
    peak = _positive(peak, "peak")
    prob = problems.get(problem_name)
    out: dict[str, list[dict]] = {}
    for variant, kernels in prob.variants(case).items():
        rows = []
        for k in kernels:
            q = int(k.bytes_read) + int(k.bytes_written)
            tc, tm = k.flops / peak, q / bw
            rows.append({"name": k.name, "flops": int(k.flops), "bytes_read": int(k.bytes_read),
                         "bytes_written": int(k.bytes_written), "bytes": q, "t_compute_s": tc,
                         "t_memory_s": tm, "t_ideal_s": max(tc, tm), "bound": _bound(tc, tm)})
        out[variant] = rows
    return out


def model_rows(problem_name: str, case: Case, bw: float, peak: float) -> list[dict]:
    """One row per variant (the fused / actual kernel first):
    ``{problem, variant, kernels, flops, bytes_read, bytes_written, bytes, intensity, t_compute_s,
    t_memory_s, t_ideal_s, bound}``; ``kernels`` is the number of kernels of the variant."""
    rows = []
    for variant, ks in kernel_rows(problem_name, case, bw, peak).items():
        f = sum(k["flops"] for k in ks)
        br = sum(k["bytes_read"] for k in ks)
        bwr = sum(k["bytes_written"] for k in ks)
        q = br + bwr
        t_ideal = 0.0
        for k in ks:
            t_ideal += k["t_ideal_s"]
        bounds = {k["bound"] for k in ks}
        rows.append({"problem": problem_name, "variant": variant, "kernels": len(ks), "flops": f,
                     "bytes_read": br, "bytes_written": bwr, "bytes": q,
                     "intensity": f / q if q else math.inf,
                     "t_compute_s": f / float(peak), "t_memory_s": q / float(bw), "t_ideal_s": t_ideal,
                     "bound": bounds.pop() if len(bounds) == 1 else "mixed"})
    return rows


def ideal_time(problem_name: str, case: Case, bw: float, peak: float, variant: str | None = None) -> float:
    """T_ideal (seconds) of ``variant`` of ``case``; by default the fused variant (the problem's
    first: what the implementations compute in one kernel)."""
    rows = model_rows(problem_name, case, bw, peak)
    want = variant or problems.get(problem_name).fused_variant(case)
    for r in rows:
        if r["variant"] == want:
            return r["t_ideal_s"]
    raise ValueError(f"variant: {problem_name} has no variant {want!r}; "
                     f"known: {', '.join(r['variant'] for r in rows)}")


def variant_of(impl) -> str | None:
    """The model variant an implementation computes: ``impl.extra["model_variant"]`` when it
    registered one (e.g. the five-op naive softmax: ``model_variant="naive"``), else None (fused)."""
    return (getattr(impl, "extra", None) or {}).get("model_variant")


# -- case building -----------------------------------------------------------------------------
def parse_sets(items) -> dict[str, str]:
    """``--set K=V`` items (each may hold several comma-separated pairs) -> {K: V}."""
    kv: dict[str, str] = {}
    for item in items or ():
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise ValueError(f"--set: expected KEY=VALUE, got {part!r}")
            k, v = part.split("=", 1)
            k, v = k.strip(), v.strip()
            if not k or not v:
                raise ValueError(f"--set: expected KEY=VALUE, got {part!r}")
            kv[k] = v
    return kv


def build_case(problem_name: str, sets, dtype: str | None, default_dtype: str | None = None,
               any_dtype: bool = False) -> Case:
    """A validated case of ``problem_name`` from ``--set`` items and ``--dtype``. With
    ``any_dtype`` a dtype the problem's implementations do not take (e.g. fp32 GEMM) is still
    modeled."""
    prob = problems.get(problem_name)
    kv = parse_sets(sets)
    # sizes are case-sensitive in the problem (M, N, K); accept m=, n=, k= too
    fixed = {}
    for k, v in kv.items():
        if k not in prob.dim_names and k.upper() in prob.dim_names:
            k = k.upper()
        fixed[k] = v
    missing = [d for d in prob.dim_names if d not in fixed]
    if missing:
        raise ValueError(f"--set: {problem_name} needs its size(s) "
                         + " ".join(f"--set {d}=..." for d in missing))
    dt = dtype_name(dtype if dtype is not None else (default_dtype or prob.dtypes[0]))
    if dt in prob.dtypes or not any_dtype:
        return prob.case(dtype=dt, **fixed)
    base = prob.case(dtype=prob.dtypes[0], **fixed)
    return Case(base.problem, base.dims, dt, base.params)


# -- output ------------------------------------------------------------------------------------
def fmt_seconds(t: float) -> str:
    if t == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if t >= scale:
            return f"{t / scale:.4g} {unit}"
    return f"{t / 1e-12:.4g} ps"


def fmt_int(n: int) -> str:
    return f"{n:,}"


def _fmt_rate(x: float, unit: str) -> str:
    for p, s in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if x >= s:
            return f"{x / s:.4g} {p}{unit}"
    return f"{x:.4g} {unit}"


def render_table(problem_name: str, case: Case, hw: Hardware, note: str = "") -> str:
    """The human table (a string): conventions, hardware, then each variant and its kernels."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    rows = model_rows(problem_name, case, hw.bw, hw.peak)
    per_kernel = kernel_rows(problem_name, case, hw.bw, hw.peak)
    buf = StringIO()
    con = Console(file=buf, width=170, highlight=False, color_system=None)
    con.print(f"Roofline model: {problem_name} {case.label}")
    con.print(f"  BW = {_fmt_rate(hw.bw, 'B/s')}  [{hw.bw_source}]")
    con.print(f"  P  = {_fmt_rate(hw.peak, 'FLOP/s')}  [{hw.peak_source}]")
    con.print(f"  ridge point P/BW = {hw.ridge:.4g} FLOP/B (kernels below it are memory-bound)")
    if note:
        con.print(f"  note: {note}")
    t = Table(show_lines=False)
    for col, just in (("variant / kernel", "left"), ("F (FLOP)", "right"), ("read (B)", "right"),
                      ("written (B)", "right"), ("Q (B)", "right"), ("I (FLOP/B)", "right"),
                      ("T_compute", "right"), ("T_memory", "right"), ("T_ideal", "right"),
                      ("bound", "left")):
        t.add_column(col, justify=just)
    fused_t = rows[0]["t_ideal_s"] if rows else None
    for r in rows:
        label = f"{r['variant']} ({r['kernels']} kernel{'s' if r['kernels'] != 1 else ''})"
        t.add_row(label, fmt_int(r["flops"]), fmt_int(r["bytes_read"]), fmt_int(r["bytes_written"]),
                  fmt_int(r["bytes"]), f"{r['intensity']:.4g}", fmt_seconds(r["t_compute_s"]),
                  fmt_seconds(r["t_memory_s"]), fmt_seconds(r["t_ideal_s"]), r["bound"])
        if r["kernels"] > 1:
            for k in per_kernel[r["variant"]]:
                inten = k["flops"] / k["bytes"] if k["bytes"] else math.inf
                t.add_row(f"  · {k['name']}", fmt_int(k["flops"]), fmt_int(k["bytes_read"]),
                          fmt_int(k["bytes_written"]), fmt_int(k["bytes"]), f"{inten:.4g}",
                          fmt_seconds(k["t_compute_s"]), fmt_seconds(k["t_memory_s"]),
                          fmt_seconds(k["t_ideal_s"]), k["bound"])
    con.print(t)
    if fused_t and len(rows) > 1:
        con.print("T_ideal relative to " + rows[0]["variant"] + ": " + ", ".join(
            f"{r['variant']} {r['t_ideal_s'] / fused_t:.3g}x" for r in rows[1:]))
    out = buf.getvalue() + "Conventions:\n" + "".join(f"  - {c}\n" for c in CONVENTIONS)
    return out


# -- command -----------------------------------------------------------------------------------
def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "model", help="roofline model of a problem's variants (fused vs unfused) for a GPU",
        description="Print F, bytes read/written, Q, intensity, T_compute = F/P, T_memory = Q/BW, "
                    "T_ideal and the bound, per variant. Hardware: --gpu (datasheet), --bw/--peak, "
                    "or --from a results JSON (measured ceilings); default --gpu h200.")
    from .problems import names_help
    p.add_argument("problem", help=names_help())
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="sizes and parameters, e.g. --set M=4096 --set N=1024 (repeatable; "
                        "comma-separated pairs also work)")
    p.add_argument("--dtype", default=None, help="float32 (default) | float16 | bfloat16")
    p.add_argument("--gpu", default=None, help=f"datasheet figures of: {', '.join(GPUS)}")
    p.add_argument("--bw", default=None, metavar="BYTES_PER_S", help="memory bandwidth, e.g. 4.8e12")
    p.add_argument("--peak", default=None, metavar="FLOP_PER_S", help="peak FLOP/s, e.g. 989.5e12")
    p.add_argument("--from", dest="from_results", default=None, metavar="RESULTS.json",
                   help="measured ceilings of a compare run")
    p.add_argument("--format", default="table", choices=("table", "json"))
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    case = build_case(args.problem, args.set, args.dtype, default_dtype="float32", any_dtype=True)
    hw = resolve_hardware(case.dtype, gpu=args.gpu, bw=args.bw, peak=args.peak,
                          results_path=args.from_results)
    prob = problems.get(args.problem)
    note = ""
    if case.dtype not in prob.dtypes:
        note = (f"{args.problem}'s implementations take {', '.join(prob.dtypes)}; "
                f"modeled here at {case.dtype} as asked")
    if args.format == "json":
        print(json.dumps(model_rows(args.problem, case, hw.bw, hw.peak), indent=2))
    else:
        print(render_table(args.problem, case, hw, note), end="")
    return 0


__all__ = ["GPUS", "Hardware", "datasheet_hardware", "ceilings_hardware", "measured_bw",
           "measured_peak", "resolve_hardware",
           "model_rows", "kernel_rows", "ideal_time", "variant_of", "build_case", "parse_sets",
           "add_parser", "main", "DTYPES"]
