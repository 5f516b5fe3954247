"""GEMM + epilogue, ``tma``: persistent, A / B / C through TMA descriptors.

One program per SM loops over C tiles (grouped order, stride = the grid), so the launch costs one
wave and, with ``tl.range(..., flatten=True)``, the next tile's loads are issued while this tile's
epilogue runs. A, B and C are addressed through host-built TMA descriptors: the copy engine
fetches whole boxes into swizzled shared memory (no address arithmetic, no masks: out-of-bounds
box elements read as zero, which also covers the K tail) and the store clips ragged M / N edges
by itself. The price: TMA needs 16-byte aligned base addresses and row strides and a unit inner
stride, so for 16-bit types K and N must be multiples of 8 (``supports``); ``dispatch`` sends the
other shapes to the tiled kernel. EPILOGUE_SUBTILE stores C in two halves (half the staging
buffer in shared memory; the first half's store overlaps the second half's epilogue).

Staged operands (``bind_staged_launch``; dispatch's tma plans with ``stage`` in their config, for
rows TMA cannot read, e.g. N = 2047 or K = 777): ``stage_rows_kernel`` copies A and / or B once a
call into workspaces whose rows are 16-byte multiples (the descriptors keep the real K / N, so boxes still clip at the
edges), and a C that TMA cannot write is stored from registers (``C_TMA`` off: a masked pointer
store, which Triton lays out along the rows, 32 consecutive columns a warp instruction).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .checks import ACTS
from .gemm_epilogue_tiled import epilogue, grouped_tile
from .runtime import Spec, bind_spec


@triton.jit
def store_tile(c_desc, c_ptr, stride_cm, val, off_m, off_n, M, N, C_TMA: tl.constexpr):
    """One [BM, BN'] piece of C at (off_m, off_n): by TMA, or by a masked pointer store."""
    if C_TMA:
        c_desc.store([off_m, off_n], val)
    else:
        cm = off_m + tl.arange(0, val.shape[0])
        cn = off_n + tl.arange(0, val.shape[1])
        tl.store(c_ptr + cm[:, None].to(tl.int64) * stride_cm + cn[None, :], val,
                 mask=(cm[:, None] < M) & (cn[None, :] < N))


@triton.jit
def gemm_epilogue_tma_kernel(a_desc, b_desc, c_desc, bias_ptr, M, N, K,
                             ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
                             EPILOGUE_SUBTILE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                             FLATTEN: tl.constexpr, c_ptr=None, stride_cm=0, C_TMA: tl.constexpr = True):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    # FLATTEN fuses the tile loop and the K loop into one software pipeline, so the loads of the
    # next tile start while this one finishes; WARP_SPECIALIZE would give loads and MMAs their own
    # warps (see dispatch.GEMM for why no config sets it)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, NUM_SMS, flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = grouped_tile(tile, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(k_steps):
            a = a_desc.load([off_m, k * BLOCK_K])
            b = b_desc.load([k * BLOCK_K, off_n])
            acc = tl.dot(a, b, acc)
        finish_tile(acc, c_desc, c_ptr, stride_cm, bias_ptr, off_m, off_n, M, N, ACT, HAS_BIAS,
                    EPILOGUE_SUBTILE, C_TMA, a_desc.dtype)


@triton.jit
def finish_tile(acc, c_desc, c_ptr, stride_cm, bias_ptr, off_m, off_n, M, N, ACT: tl.constexpr,
                HAS_BIAS: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr, C_TMA: tl.constexpr,
                dtype: tl.constexpr):
    """Bias + activation on a finished fp32 tile and its store at (off_m, off_n)."""
    BLOCK_M: tl.constexpr = acc.shape[0]
    BLOCK_N: tl.constexpr = acc.shape[1]
    if EPILOGUE_SUBTILE:
        # two [BM, BN/2] halves, each finished and stored on its own: half the staging buffer
        # in shared memory, and the first half's store overlaps the second half's epilogue
        halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        cn = off_n + tl.arange(0, BLOCK_N // 2)
        left = epilogue(left, bias_ptr, cn, N, ACT, HAS_BIAS)
        store_tile(c_desc, c_ptr, stride_cm, left.to(dtype), off_m, off_n, M, N, C_TMA)
        right = epilogue(right, bias_ptr, cn + BLOCK_N // 2, N, ACT, HAS_BIAS)
        store_tile(c_desc, c_ptr, stride_cm, right.to(dtype), off_m, off_n + BLOCK_N // 2, M, N, C_TMA)
    else:
        acc = epilogue(acc, bias_ptr, off_n + tl.arange(0, BLOCK_N), N, ACT, HAS_BIAS)
        store_tile(c_desc, c_ptr, stride_cm, acc.to(dtype), off_m, off_n, M, N, C_TMA)


@triton.jit
def stage_rows_kernel(src_ptr, dst_ptr, rows, cols, stride_s, stride_d,
                      BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """dst[r, c] = src[r, c] for r < rows, c < cols, zeros on to the next multiple of 8 columns:
    2-byte loads from rows of any alignment, 16-byte stores into dst, whose row stride the host
    made a multiple of 8 elements (rewritten as x // 8 * 8 so that Triton proves it)."""
    stride_d = stride_d // 8 * 8
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cols8 = (cols + 7) // 8 * 8
    v = tl.load(src_ptr + r[:, None].to(tl.int64) * stride_s + c[None, :],
                mask=(r[:, None] < rows) & (c[None, :] < cols), other=0.0)
    tl.store(dst_ptr + r[:, None].to(tl.int64) * stride_d + c[None, :], v,
             mask=(r[:, None] < rows) & (c[None, :] < cols8))


def supports(M: int, N: int, K: int, strides: dict | None = None,
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
                    f"{16 // es} for contiguous {str(dtype).replace('torch.', '')}); "
                    f"gemm_epilogue_tiled takes it")
    for name, ptr in (data_ptrs or {}).items():
        if ptr % 16:
            return f"{name}: base address {ptr:#x} is not 16-byte aligned, as TMA descriptors need"
    return None


def descriptors(a, b, out, cfg: dict):
    """Host TMA descriptors of A, B and C with the box shapes of ``cfg``'s tiles (C's box is half
    as wide when the epilogue stores in two halves)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    return (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
            TensorDescriptor.from_tensor(out, [bm, bn // 2 if cfg["EPILOGUE_SUBTILE"] else bn]))


def launch_spec(a, b, bias, act: str, out, cfg: dict, sms: int) -> Spec:
    M, K = a.shape
    N = b.shape[1]
    a_desc, b_desc, c_desc = descriptors(a, b, out, cfg)
    tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
    args = {"a_desc": a_desc, "b_desc": b_desc, "c_desc": c_desc,
            "bias_ptr": bias if bias is not None else a, "M": M, "N": N, "K": K,
            "ACT": ACTS[act], "HAS_BIAS": bias is not None, "NUM_SMS": sms,
            "c_ptr": None, "stride_cm": 0, "C_TMA": True,
            **{k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EPILOGUE_SUBTILE",
                                   "WARP_SPECIALIZE", "FLATTEN")}}
    return Spec(gemm_epilogue_tma_kernel, (min(sms, tiles),), args,
                {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})


#: rows x columns a program of stage_rows_kernel copies
STAGE_BLOCK = (16, 256)


def tma_readable(t: torch.Tensor) -> bool:
    """Whether a TMA descriptor can address ``t`` (unit inner stride, 16-byte row stride and base)."""
    es = t.element_size()
    return (t.shape[1] <= 1 or t.stride(1) == 1) and (t.stride(0) * es) % 16 == 0 and t.data_ptr() % 16 == 0


def staged(t: torch.Tensor) -> torch.Tensor:
    """A workspace for ``t`` with rows of a multiple of 8 elements (16 bytes), viewed as t's shape."""
    rows, cols = t.shape
    return torch.empty((rows, triton.cdiv(max(cols, 1), 8) * 8), dtype=t.dtype, device=t.device)[:, :cols]


def stage_spec(src: torch.Tensor, dst: torch.Tensor) -> Spec:
    rows, cols = src.shape
    br, bc = STAGE_BLOCK
    return Spec(stage_rows_kernel, (triton.cdiv(rows, br), triton.cdiv(cols, bc)),
                {"src_ptr": src, "dst_ptr": dst, "rows": rows, "cols": cols, "stride_s": src.stride(0),
                 "stride_d": dst.stride(0), "BLOCK_R": br, "BLOCK_C": bc}, {"num_warps": 4})


def bind_staged_launch(a, b, bias, act: str, out, cfg: dict, sms: int):
    """Zero-argument launch of the TMA kernel on operands TMA may not address: an A or B whose
    rows it cannot read is copied first (stage_rows_kernel, into a workspace this launch owns),
    a C it cannot write is stored from registers. ``launch.staged`` names the copied operands."""
    copies, ops = [], {"a": a, "b": b}
    for name, t in (("a", a), ("b", b)):
        if not tma_readable(t):
            ops[name] = staged(t)
            copies.append((name, bind_spec(stage_spec(t, ops[name]), a.device)))
    c_tma = tma_readable(out)
    spec = launch_spec(ops["a"], ops["b"], bias, act, out if c_tma else ops["a"], cfg, sms)
    if not c_tma:
        spec.args.update(c_desc=None, c_ptr=out, stride_cm=out.stride(0), C_TMA=False)
    main = bind_spec(spec, a.device)

    def launch():
        for _, copy in copies:
            copy()
        main()
    launch.compiled = main.compiled
    launch.staged = tuple(name for name, _ in copies)
    launch.keep = ops
    return launch


def bind_launch(a, b, bias, act: str, out, cfg: dict, sms: int):
    """Zero-argument launch on min(sms, tiles) programs with ``cfg`` (BLOCK_M/N/K, GROUP_M,
    EPILOGUE_SUBTILE, FLATTEN, WARP_SPECIALIZE, num_warps, num_stages). Raises ValueError naming
    the operand TMA cannot address."""
    if (why := check(a, b, out)):
        raise ValueError(why)
    return bind_spec(launch_spec(a, b, bias, act, out, cfg, sms), a.device)


def check(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> str | None:
    """``supports`` on actual tensors: their strides and base addresses."""
    return supports(a.shape[0], b.shape[1], a.shape[1],
                    {"a": a.stride(), "b": b.stride(), "out": out.stride()}, a.dtype,
                    {"a": a.data_ptr(), "b": b.data_ptr(), "out": out.data_ptr()})
