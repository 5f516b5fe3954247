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

``gemm_epilogue_tma`` is the persistent TMA-descriptor variant (one program per SM looping over
tiles; A, B, C through host-built tensor descriptors; K and N multiples of 8), with the same
grouped order and the same epilogue helper. Which of the two is faster on the H200 is measured by
scripts/tune_triton_gemm.py.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import check_same_device, check_tensor, device_facts, interpreting

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
def _grouped_tile(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(row, column) of C tile number ``tile`` in grouped order: GROUP_M tile-rows are visited
    column by column, so programs running at the same time share a few A row panels and B column
    panels in L2."""
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % group_rows, (tile % per_group) // group_rows


@triton.jit
def _epilogue(acc, bias_ptr, cn, N, ACT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """bias + activation on the fp32 accumulator tile (columns ``cn``), before the one store."""
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cn, mask=cn < N, other=0.0).to(tl.float32)[None, :]
    if ACT == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACT == 2:
        # gelu(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3);
        # x / (1 + exp(-2u)) is finite for every finite x (exp overflow gives x / inf = -0)
        u2 = 1.5957691216057308 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp(-u2))
    return acc


@triton.jit
def gemm_epilogue_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                         stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                         ACT: tl.constexpr, HAS_BIAS: tl.constexpr, UPCAST: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    pid_m, pid_n = _grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)

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

    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _epilogue(acc, bias_ptr, cn, N, ACT, HAS_BIAS)
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


def _check_gemm_args(a, b, bias, act, out):
    """The input checks both wrappers share; returns (M, N, K, out), ``out`` allocated if None."""
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
    return M, N, K, out


def _flags(a, bias, act) -> dict:
    return {"ACT": ACTS[act], "HAS_BIAS": bias is not None,
            "UPCAST": interpreting() and a.dtype == torch.bfloat16}


def gemm_epilogue(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                  act: str = "relu", out: torch.Tensor | None = None, *,
                  config: triton.Config | None = None) -> torch.Tensor:
    """C = act(a @ b + bias) with fp32 accumulation; a [M, K], b [K, N], bias [N] or None.

    ``config`` pins one tile config (no autotuning); by default the autotuner picks per
    (M, N, K, act, bias, dtype). Under the interpreter a fixed small config runs."""
    M, N, K, out = _check_gemm_args(a, b, bias, act, out)
    args = (a, b, bias if bias is not None else a, out, M, N, K,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1))
    flags = _flags(a, bias, act)
    if config is None and interpreting():
        config = INTERPRETER_CONFIG
    if config is None:
        gemm_epilogue_tuned[lambda m: gemm_grid(M, N, m["BLOCK_M"], m["BLOCK_N"])](*args, **flags)
    else:
        kw = config.kwargs
        gemm_epilogue_fixed[gemm_grid(M, N, kw["BLOCK_M"], kw["BLOCK_N"])](
            *args, **flags, **kw, num_warps=config.num_warps, num_stages=config.num_stages)
    return out


def tuned_config(a: torch.Tensor, b: torch.Tensor, act: str, has_bias: bool, tuner=None):
    """The config the autotuner (``tuner``, default the plain kernel's) settled on for this problem
    (None before the first call)."""
    M, K = a.shape
    N = b.shape[1]
    for key, cfg in (tuner or gemm_epilogue_tuned).cache.items():
        if tuple(key[:5]) == (M, N, K, ACTS[act], has_bias) and str(a.dtype) in map(str, key):
            return cfg
    return None


# -- persistent, TMA-descriptor variant ---------------------------------------------------------
# One program per SM loops over C tiles (grouped order, stride = #programs), so the launch costs
# one wave and the next tile's loads can be issued while the previous tile's epilogue runs. A, B
# and C are addressed through host-built TMA descriptors: the copy engine fetches whole boxes into
# swizzled shared memory (no address arithmetic, no masks: out-of-bounds box elements read as
# zero, which also covers the K tail) and the store clips ragged M / N edges by itself. The price:
# TMA needs 16-byte aligned base addresses and row strides and a unit inner stride.

def _set_block_shapes(nargs):
    """Autotune pre_hook: the descriptors are built once per call, before a config is picked;
    each config's tiles become their TMA box shapes here (C's box is half as wide when the
    epilogue stores in two halves)."""
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bk, bn]
    nargs["c_desc"].block_shape = [bm, bn // 2 if nargs["EPILOGUE_SUBTILE"] else bn]


def _tma_cfg(bm, bn, bk, stages, warps, subtile=False, flatten=True, ws=False, group=8):
    if ws and flatten:
        raise ValueError("flatten: Hopper's warp-specialised loop cannot also be flattened")
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group,
                          "EPILOGUE_SUBTILE": subtile, "FLATTEN": flatten, "WARP_SPECIALIZE": ws},
                         num_stages=stages, num_warps=warps, pre_hook=_set_block_shapes)


#: A small Hopper set. Shared memory: a bf16 stage is (BM + BN) x 64 x 2 bytes (48 KB for 128x256,
#: 32 KB for 128x128) plus C's staging buffer for the TMA store, BM x BN x 2, halved by
#: EPILOGUE_SUBTILE; 128x256 with 4 stages fits the 227 KB only with the halved buffer.
#: No warp-specialised config: with Triton 3.6 and 3.9, ``warp_specialize=True`` on sm_90
#: either leaves the loop unspecialised (8 warps: no ttg.warp_specialize in the TTGIR, i.e. just an
#: unflattened loop, which the FLATTEN=False config below measures) or fails in the compiler's
#: NVGPUWarpSpecialization pass (4 warps). The knob stays for Triton versions where it works.
TMA_CONFIGS = [
    _tma_cfg(128, 256, 64, 3, 8, subtile=True),
    _tma_cfg(128, 256, 64, 3, 8),
    _tma_cfg(128, 256, 64, 4, 8, subtile=True),
    _tma_cfg(256, 128, 64, 3, 8, subtile=True),
    _tma_cfg(128, 128, 64, 4, 8),
    _tma_cfg(128, 128, 64, 4, 4, subtile=True),
    _tma_cfg(128, 256, 64, 3, 8, subtile=True, flatten=False),
    _tma_cfg(64, 64, 64, 3, 4),  # the pruner's fallback for problems under 65 rows or columns
]

#: small tiles with the two-half store and 4 programs: the interpreter walks the persistent loop
TMA_INTERPRETER_CONFIG = _tma_cfg(32, 32, 32, 1, 4, subtile=True)


@triton.jit
def gemm_epilogue_tma_kernel(a_desc, b_desc, c_desc, bias_ptr, M, N, K,
                             ACT: tl.constexpr, HAS_BIAS: tl.constexpr, UPCAST: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
                             EPILOGUE_SUBTILE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                             FLATTEN: tl.constexpr):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    # FLATTEN fuses the tile loop and the K loop into one software pipeline, so the loads of the
    # next tile start while this one finishes; WARP_SPECIALIZE would give loads and MMAs their own
    # warps (see TMA_CONFIGS for why no config sets it)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, NUM_SMS, flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _grouped_tile(tile, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(k_steps):
            a = a_desc.load([off_m, k * BLOCK_K])
            b = b_desc.load([k * BLOCK_K, off_n])
            if UPCAST:  # interpreter only, as in gemm_epilogue_kernel
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
        if EPILOGUE_SUBTILE:
            # two [BM, BN/2] halves, each finished and stored on its own: half the staging buffer
            # in shared memory, and the first half's store overlaps the second half's epilogue
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            cn = off_n + tl.arange(0, BLOCK_N // 2)
            left = _epilogue(left, bias_ptr, cn, N, ACT, HAS_BIAS)
            c_desc.store([off_m, off_n], left.to(c_desc.dtype))
            right = _epilogue(right, bias_ptr, cn + BLOCK_N // 2, N, ACT, HAS_BIAS)
            c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_desc.dtype))
        else:
            acc = _epilogue(acc, bias_ptr, off_n + tl.arange(0, BLOCK_N), N, ACT, HAS_BIAS)
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


gemm_epilogue_tma_tuned = triton.autotune(
    configs=TMA_CONFIGS, key=["M", "N", "K", "ACT", "HAS_BIAS"],  # the autotuner adds bias_ptr's dtype
    prune_configs_by={"early_config_prune": prune_configs},
)(gemm_epilogue_tma_kernel)


def tma_grid(M: int, N: int, block_m: int, block_n: int, sms: int) -> tuple[int]:
    """Persistent: one program per SM, fewer when there are fewer tiles."""
    return (min(sms, triton.cdiv(M, block_m) * triton.cdiv(N, block_n)),)


def gemm_tma_supports(M: int, N: int, K: int, strides: dict | None = None,
                      dtype: torch.dtype = torch.bfloat16, data_ptrs: dict | None = None) -> str | None:
    """None if TMA descriptors can address the operands, else why not (naming the argument).

    ``strides`` maps a / b / out to their (row, column) strides in elements (default: contiguous
    [M, K], [K, N], [M, N]); ``data_ptrs`` optionally maps them to base addresses. TMA needs
    16-byte aligned bases and row strides and a unit column stride: for 16-bit types K and N must
    be multiples of 8."""
    es = torch.empty((), dtype=dtype).element_size()
    strides = strides or {"a": (K, 1), "b": (N, 1), "out": (N, 1)}
    dims = {"a": "K", "b": "N", "out": "N"}
    for name, (row, col) in strides.items():
        if col != 1:
            return f"{name}: column stride {col}; TMA descriptors need a unit inner stride"
        if (row * es) % 16:
            return (f"{name}: row stride {row} elements = {row * es} bytes is not a multiple of 16; "
                    f"TMA descriptors need 16-byte aligned rows ({dims[name]} a multiple of "
                    f"{16 // es} for contiguous {str(dtype).replace('torch.', '')}); use triton:gemm")
    for name, ptr in (data_ptrs or {}).items():
        if ptr % 16:
            return f"{name}: base address {ptr:#x} is not 16-byte aligned, as TMA descriptors need"
    return None


def gemm_tma_check(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> str | None:
    """``gemm_tma_supports`` on actual tensors: their strides and base addresses."""
    return gemm_tma_supports(a.shape[0], b.shape[1], a.shape[1],
                             {"a": a.stride(), "b": b.stride(), "out": out.stride()}, a.dtype,
                             {"a": a.data_ptr(), "b": b.data_ptr(), "out": out.data_ptr()})


def tma_descriptors(a, b, out, kw):
    """Host TMA descriptors of A, B and C with the box shapes of config keywords ``kw``."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    nargs = {"a_desc": TensorDescriptor.from_tensor(a, [1, 8]),  # box shapes set below
             "b_desc": TensorDescriptor.from_tensor(b, [1, 8]),
             "c_desc": TensorDescriptor.from_tensor(out, [1, 8])}
    _set_block_shapes({**nargs, **kw})
    return nargs["a_desc"], nargs["b_desc"], nargs["c_desc"]


def gemm_epilogue_tma(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                      act: str = "relu", out: torch.Tensor | None = None, *,
                      config: triton.Config | None = None) -> torch.Tensor:
    """C = act(a @ b + bias) like ``gemm_epilogue``, with the persistent TMA-descriptor kernel.

    Raises ValueError naming the argument when TMA cannot address it (see ``gemm_tma_supports``).
    ``config`` pins one of ``TMA_CONFIGS`` (or any config made like them); by default the
    autotuner picks. Under the interpreter a small fixed config runs on 4 "SMs"."""
    M, N, K, out = _check_gemm_args(a, b, bias, act, out)
    if (why := gemm_tma_check(a, b, out)):
        raise ValueError(why)
    if config is None and interpreting():
        config = TMA_INTERPRETER_CONFIG
    # the autotuner's pre_hook overwrites these box shapes with each config's
    kw = config.kwargs if config is not None else TMA_CONFIGS[0].kwargs
    sms = device_facts(a.device)["sms"]
    args = (*tma_descriptors(a, b, out, kw), bias if bias is not None else a, M, N, K)
    flags = _flags(a, bias, act)
    if config is None:
        gemm_epilogue_tma_tuned[lambda m: tma_grid(M, N, m["BLOCK_M"], m["BLOCK_N"], sms)](
            *args, **flags, NUM_SMS=sms)
    else:
        gemm_epilogue_tma_kernel[tma_grid(M, N, kw["BLOCK_M"], kw["BLOCK_N"], sms)](
            *args, **flags, NUM_SMS=sms, **kw, num_warps=config.num_warps, num_stages=config.num_stages)
    return out
