"""GEMM with a fused epilogue in Triton: C = act(A @ B + bias), act in none / relu / gelu (tanh).

Tiled ``tl.dot`` (wgmma on Hopper) with fp32 accumulation. Programs are launched in grouped order:
GROUP_M row-tiles of C are walked column by column, so a wave of programs shares a few A row
panels and B column panels in L2 instead of streaming all of B for every row of tiles. The bias
add and the activation are applied to the fp32 accumulator in registers, then C is stored once:
no extra pass over M x N as in torch's addmm followed by relu.

Ragged shapes: A rows and B columns past M / N wrap to a valid row / column with a modulo (the
loads need no mask and the wrapped rows are never stored; Triton's alignment analysis still sees
16-element contiguity when M and N are multiples of 16, so aligned shapes keep 16-byte loads); the K tail is masked with zeros
unless K is a multiple of BLOCK_K (EVEN_K); the store is masked on M and N.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import check_same_device, check_tensor, interpreting

ACTS = {"none": 0, "relu": 1, "gelu": 2}


def _cfg(bm, bn, bk, stages, warps, group=8):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group},
                         num_stages=stages, num_warps=warps)


#: Hopper-friendly tiles: 128-wide warpgroup MMA shapes, 3-4 stage cp.async / TMA pipelines that
#: fit in 227 KB of shared memory (128x256x64 bf16 = 48 KB a stage).
CONFIGS = [
    _cfg(128, 256, 64, 3, 8),
    _cfg(256, 128, 64, 3, 8),
    _cfg(128, 256, 64, 4, 8),
    _cfg(128, 128, 64, 4, 8),
    _cfg(128, 128, 64, 4, 4),
    _cfg(128, 64, 64, 4, 4),
    _cfg(64, 128, 64, 4, 4),
    _cfg(64, 64, 64, 4, 4),
]

#: the config the interpreter runs (the interpreter cannot autotune in reasonable time)
INTERPRETER_CONFIG = _cfg(64, 64, 32, 1, 4)


def prune_configs(configs, named_args, **kwargs):
    """Drop tiles much larger than the problem (they only add masked work); keep at least one."""
    M, N = named_args["M"], named_args["N"]
    keep = [c for c in configs
            if c.kwargs["BLOCK_M"] <= max(64, triton.next_power_of_2(M))
            and c.kwargs["BLOCK_N"] <= max(64, triton.next_power_of_2(N))]
    return keep or configs[-1:]


@triton.jit
def gemm_epilogue_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                         stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                         ACT: tl.constexpr, HAS_BIAS: tl.constexpr, UPCAST: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    # grouped program order: GROUP_M tile-rows are visited column by column
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :].to(tl.int64) * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        if UPCAST:  # interpreter only: its bf16 dot is wrong, fp32 operands hold bf16 exactly
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # epilogue on the fp32 accumulator
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cn, mask=cn < N, other=0.0).to(tl.float32)[None, :]
    if ACT == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACT == 2:
        # gelu(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3);
        # x / (1 + exp(-2u)) is finite for every finite x (exp overflow gives x / inf = -0)
        u2 = 1.5957691216057308 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp(-u2))
    c_ptrs = c_ptr + cm[:, None].to(tl.int64) * stride_cm + cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(cm[:, None] < M) & (cn[None, :] < N))


def _even_k(args):
    return args["K"] % args["BLOCK_K"] == 0


gemm_epilogue_tuned = triton.autotune(
    configs=CONFIGS, key=["M", "N", "K", "ACT", "HAS_BIAS"],  # the autotuner adds the dtypes
    prune_configs_by={"early_config_prune": prune_configs},
)(triton.heuristics({"EVEN_K": _even_k})(gemm_epilogue_kernel))
gemm_epilogue_fixed = triton.heuristics({"EVEN_K": _even_k})(gemm_epilogue_kernel)


def gemm_grid(M: int, N: int, block_m: int, block_n: int) -> tuple[int]:
    return (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)


def gemm_epilogue(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                  act: str = "relu", out: torch.Tensor | None = None, *,
                  config: triton.Config | None = None) -> torch.Tensor:
    """C = act(a @ b + bias) with fp32 accumulation; a [M, K], b [K, N], bias [N] or None.

    ``config`` pins one tile config (no autotuning); by default the autotuner picks per
    (M, N, K, act, bias, dtype). Under the interpreter a fixed small config runs."""
    half = (torch.float16, torch.bfloat16)
    check_tensor("a", a, dtypes=half, ndim=2)
    check_tensor("b", b, dtypes=half, ndim=2)
    if b.dtype != a.dtype:
        raise TypeError(f"b: dtype {b.dtype} differs from a's {a.dtype}")
    M, K = a.shape
    K2, N = b.shape
    if K2 != K:
        raise ValueError(f"b: shape {tuple(b.shape)} does not match a's {tuple(a.shape)} (K = {K})")
    if min(M, N, K) == 0:
        raise ValueError(f"a, b: empty GEMM (M, N, K) = {(M, N, K)}")
    if act not in ACTS:
        raise ValueError(f"act: {act!r} is not one of {', '.join(ACTS)}")
    if bias is not None:
        check_tensor("bias", bias, dtypes=half, ndim=1)
        if bias.dtype != a.dtype:
            raise TypeError(f"bias: dtype {bias.dtype} differs from a's {a.dtype}")
        if bias.shape[0] != N:
            raise ValueError(f"bias: length {bias.shape[0]} != N = {N}")
    if out is None:
        out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    check_tensor("out", out, dtypes=half, ndim=2)
    if tuple(out.shape) != (M, N) or out.dtype != a.dtype:
        raise ValueError(f"out: expected {(M, N)} {a.dtype}, got {tuple(out.shape)} {out.dtype}")
    check_same_device(a=a, b=b, bias=bias, out=out)
    args = (a, b, bias if bias is not None else a, out, M, N, K,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1))
    flags = {"ACT": ACTS[act], "HAS_BIAS": bias is not None,
             "UPCAST": interpreting() and a.dtype == torch.bfloat16}
    if config is None and interpreting():
        config = INTERPRETER_CONFIG
    if config is None:
        gemm_epilogue_tuned[lambda m: gemm_grid(M, N, m["BLOCK_M"], m["BLOCK_N"])](*args, **flags)
    else:
        kw = config.kwargs
        gemm_epilogue_fixed[gemm_grid(M, N, kw["BLOCK_M"], kw["BLOCK_N"])](
            *args, **flags, **kw, num_warps=config.num_warps, num_stages=config.num_stages)
    return out


def tuned_config(a: torch.Tensor, b: torch.Tensor, act: str, has_bias: bool):
    """The config the autotuner settled on for this problem (None before the first call)."""
    M, K = a.shape
    N = b.shape[1]
    for key, cfg in gemm_epilogue_tuned.cache.items():
        if tuple(key[:5]) == (M, N, K, ACTS[act], has_bias) and str(a.dtype) in map(str, key):
            return cfg
    return None
