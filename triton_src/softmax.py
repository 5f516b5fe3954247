"""Row softmax in Triton, three ways, plus a dispatcher.

softmax is memory-bound (about 5 FLOP per element against 2 x 4 bytes in fp32), so each variant is
judged by the bytes it moves: the floor is one read and one write of the tensor (2MN elements).

- fused_row:  one program per row; the whole row (padded with -inf to a power of two) sits in
  registers: max, exp, sum, scale, store. One read, one write. Rows longer than MAX_ON_CHIP
  columns would spill, so it declines them.
- persistent: as many programs as the SMs hold at once (from the compiled kernel's registers and
  shared memory); each program loops over blocks of ROWS rows with a software-pipelined loop
  (``tl.range(..., num_stages=...)``) so the next rows' loads are in flight while this block is
  reduced. Short rows are packed ROWS to a block so that a program still moves a useful tile.
- online:     any row length. Pass 1 streams column tiles and keeps a running max and a running
  sum per lane, rescaled as the max grows (one exp per element: of the old max and the new value,
  one is the new max, so only exp(min - max) is needed). Pass 2 streams the tiles again, last tile
  first, so that the tiles read most recently are the ones still in L2, and writes
  exp(x - max) / sum. Two reads and one write at most.

All variants: fp32 / fp16 / bf16 in and out, fp32 math, rows of any stride (x.stride(0) != N,
also not 16-byte aligned), 64-bit row offsets, -inf entries (a row of only -inf gives NaN, as
torch does).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import check_same_device, check_tensor, device_facts, interpreting, next_pow2

#: longest row (in columns, after padding to a power of two) kept in registers by fused_row and
#: persistent: 32768 fp32 values over 16 warps is 64 values per thread; twice that spills.
MAX_ON_CHIP = 32768
MIN_BLOCK = 16


# -- kernels -----------------------------------------------------------------------------------
@triton.jit
def softmax_fused_row_kernel(x_ptr, out_ptr, N, stride_x, stride_o, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=0)
    e = tl.exp(z)
    y = e * (1.0 / tl.sum(e, axis=0))
    tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_persistent_kernel(x_ptr, out_ptr, M, N, stride_x, stride_o, ROWS: tl.constexpr,
                              BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_blocks = tl.cdiv(M, ROWS)
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols[None, :] < N
    for blk in tl.range(pid, n_blocks, nprog, num_stages=NUM_STAGES):
        r = (blk * ROWS + rows).to(tl.int64)
        mask = (r[:, None] < M) & col_mask
        x = tl.load(x_ptr + r[:, None] * stride_x + cols[None, :], mask=mask,
                    other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=1)[:, None])
        y = e * (1.0 / tl.sum(e, axis=1))[:, None]
        tl.store(out_ptr + r[:, None] * stride_o + cols[None, :], y.to(out_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def softmax_online_kernel(x_ptr, out_ptr, N, stride_x, stride_o, BLOCK_N: tl.constexpr,
                          NUM_STAGES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    o_row = out_ptr + row * stride_o
    cols = tl.arange(0, BLOCK_N)
    NEG_INF: tl.constexpr = -float("inf")
    # pass 1: per-lane running max m and running sum s of exp(x - m)
    m = tl.full([BLOCK_N], NEG_INF, tl.float32)
    s = tl.zeros([BLOCK_N], tl.float32)
    for start in tl.range(0, N, BLOCK_N, num_stages=NUM_STAGES):
        c = start + cols
        x = tl.load(x_row + c, mask=c < N, other=NEG_INF, eviction_policy="evict_last").to(tl.float32)
        hi = tl.maximum(m, x)
        e = tl.exp(tl.minimum(m, x) - hi)          # exp(old max - new max) or exp(x - new max)
        e = tl.where(hi == NEG_INF, 0.0, e)        # both -inf: nothing seen yet in this lane
        s = tl.where(x > m, s * e + 1.0, s + e)
        m = hi
    row_max = tl.max(m, axis=0)
    scale = tl.where(m == NEG_INF, 0.0, tl.exp(m - row_max))
    inv_sum = 1.0 / tl.sum(s * scale, axis=0)
    # pass 2: newest tiles first (most likely still in L2), write exp(x - max) / sum
    n_tiles = tl.cdiv(N, BLOCK_N)
    for t in tl.range(0, n_tiles, num_stages=NUM_STAGES):
        c = (n_tiles - 1 - t) * BLOCK_N + cols
        x = tl.load(x_row + c, mask=c < N, other=NEG_INF, eviction_policy="evict_first").to(tl.float32)
        y = tl.exp(x - row_max) * inv_sum
        tl.store(o_row + c, y.to(out_ptr.dtype.element_ty), mask=c < N)


# -- configuration -----------------------------------------------------------------------------
def _warps_for(elems: int, per_thread: int) -> int:
    """Warps so that each thread holds about ``per_thread`` values (1..16 warps)."""
    return int(min(16, max(1, next_pow2(max(1, elems // (32 * per_thread))))))


def fused_row_supports(N: int) -> str | None:
    if max(MIN_BLOCK, next_pow2(N)) > MAX_ON_CHIP:
        return (f"row of {N} columns does not fit on chip (limit {MAX_ON_CHIP} columns per program); "
                f"use online")
    return None


persistent_supports = fused_row_supports


def fused_row_config(N: int, num_warps: int | None = None) -> dict:
    """H200 sweep (fp32): 4 warps best up to 1024 columns, 8 up to 8192, 16 above."""
    block = max(MIN_BLOCK, next_pow2(N))
    return {"BLOCK_N": block, "num_warps": num_warps or (4 if block <= 1024 else 8 if block <= 8192 else 16)}


#: persistent: each block of ROWS rows is about this many elements (short rows are packed);
#: the H200 sweep at N = 1024 fp32 preferred 2 rows (2048 elements) to 4 or 8
PERSISTENT_TILE = 2048


def persistent_config(N: int, rows: int | None = None, num_warps: int | None = None,
                      num_stages: int | None = None, elem_size: int = 4) -> dict:
    block = max(MIN_BLOCK, next_pow2(N))
    rows = rows or max(1, PERSISTENT_TILE // block)
    if rows & (rows - 1):
        raise ValueError(f"rows: must be a power of two, got {rows}")
    # two stages (next block's loads in flight) while a stage is small; at 128 KB a block,
    # three stages exceed shared memory and one was fastest
    stages = num_stages or (1 if rows * block * elem_size >= 131072 else 2)
    return {"ROWS": rows, "BLOCK_N": block, "NUM_STAGES": stages,
            "num_warps": num_warps or _warps_for(rows * block, 16)}


def online_config(N: int, elem_size: int, block: int | None = None, num_warps: int | None = None,
                  num_stages: int | None = None) -> dict:
    """H200 sweep (fp32, N = 16K..256K): 8192-column tiles, 16 warps, no extra pipeline stage."""
    if block is None:
        block = min(max(MIN_BLOCK, next_pow2(N)), 8192)
    if block & (block - 1) or block < MIN_BLOCK:
        raise ValueError(f"block: must be a power of two >= {MIN_BLOCK}, got {block}")
    return {"BLOCK_N": block, "NUM_STAGES": num_stages or 1,
            "num_warps": num_warps or _warps_for(block, 8)}


_occupancy_cache: dict = {}


def persistent_programs(x, out, M, N, cfg: dict) -> int:
    """Programs of the persistent grid: blocks of rows, capped at what all SMs hold at once.

    Occupancy comes from the compiled kernel (registers per thread, shared memory per program).
    Under the interpreter a small grid is used so that the row loop still runs several times."""
    n_blocks = triton.cdiv(M, cfg["ROWS"])
    if interpreting() or x.device.type != "cuda":
        return max(1, min(n_blocks, 3))
    facts = device_facts(x.device)
    key = (x.device.index, x.dtype, out.dtype, x.stride(0) % 16, tuple(sorted(cfg.items())))
    per_sm = _occupancy_cache.get(key)
    if per_sm is None:
        warps = cfg["num_warps"]
        per_sm = max(1, min(facts["max_warps_per_sm"] // warps, 32))
        try:
            k = softmax_persistent_kernel.warmup(x, out, M, N, x.stride(0), out.stride(0),
                                                 ROWS=cfg["ROWS"], BLOCK_N=cfg["BLOCK_N"],
                                                 NUM_STAGES=cfg["NUM_STAGES"], num_warps=warps,
                                                 grid=(1,))
            k._init_handles()
            regs_per_warp = -(-k.n_regs * 32 // 256) * 256  # allocated in units of 256 per warp
            if regs_per_warp:
                per_sm = min(per_sm, facts["regs_per_sm"] // (regs_per_warp * warps))
            smem = k.metadata.shared
            if smem:
                per_sm = min(per_sm, facts["smem_per_sm"] // (smem + 1024))
        except Exception:  # occupancy is a tuning fact; fall back to the warp limit
            pass
        per_sm = max(1, per_sm)
        _occupancy_cache[key] = per_sm
    return max(1, min(n_blocks, facts["sms"] * per_sm))


# -- launch wrappers ---------------------------------------------------------------------------
def _check(x, out):
    check_tensor("x", x, ndim=2)
    M, N = x.shape
    if M == 0 or N == 0:
        raise ValueError(f"x: empty shape {tuple(x.shape)}")
    if N > 1 and x.stride(1) != 1:
        raise ValueError(f"x: columns must be contiguous (x.stride(1) == 1), got strides {x.stride()}")
    if x.stride(0) < 0:
        raise ValueError(f"x: negative row stride {x.stride(0)}")
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    check_tensor("out", out, ndim=2)
    if tuple(out.shape) != (M, N):
        raise ValueError(f"out: shape {tuple(out.shape)} != x's {(M, N)}")
    if out.dtype != x.dtype:
        raise TypeError(f"out: dtype {out.dtype} != x's {x.dtype}")
    if N > 1 and out.stride(1) != 1:
        raise ValueError(f"out: columns must be contiguous, got strides {out.stride()}")
    check_same_device(x=x, out=out)
    return M, N, out


def softmax_fused_row(x: torch.Tensor, out: torch.Tensor | None = None, *,
                      num_warps: int | None = None) -> torch.Tensor:
    """Row softmax, one program per row, the whole row in registers (N <= MAX_ON_CHIP)."""
    M, N, out = _check(x, out)
    if (why := fused_row_supports(N)):
        raise ValueError(f"x: {why}")
    cfg = fused_row_config(N, num_warps)
    softmax_fused_row_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), BLOCK_N=cfg["BLOCK_N"],
                                   num_warps=cfg["num_warps"])
    return out


def softmax_persistent(x: torch.Tensor, out: torch.Tensor | None = None, *, rows: int | None = None,
                       num_warps: int | None = None, num_stages: int | None = None,
                       programs: int | None = None) -> torch.Tensor:
    """Row softmax on a persistent grid: each program loops over blocks of ``rows`` rows."""
    M, N, out = _check(x, out)
    if (why := persistent_supports(N)):
        raise ValueError(f"x: {why}")
    cfg = persistent_config(N, rows, num_warps, num_stages, x.element_size())
    grid = programs or persistent_programs(x, out, M, N, cfg)
    softmax_persistent_kernel[(grid,)](x, out, M, N, x.stride(0), out.stride(0), ROWS=cfg["ROWS"],
                                       BLOCK_N=cfg["BLOCK_N"], NUM_STAGES=cfg["NUM_STAGES"],
                                       num_warps=cfg["num_warps"])
    return out


def softmax_online(x: torch.Tensor, out: torch.Tensor | None = None, *, block: int | None = None,
                   num_warps: int | None = None, num_stages: int | None = None) -> torch.Tensor:
    """Row softmax of any length: column tiles, online max/sum, then a second (reversed) pass."""
    M, N, out = _check(x, out)
    cfg = online_config(N, x.element_size(), block, num_warps, num_stages)
    softmax_online_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), BLOCK_N=cfg["BLOCK_N"],
                                NUM_STAGES=cfg["NUM_STAGES"], num_warps=cfg["num_warps"])
    return out


#: dispatcher thresholds in bytes per row, from the H200 sweep (scripts/tune_triton.py, fp32):
#: persistent won at N = 1024 (2.74 vs 2.52 TB/s), fused_row from 2048 to 32768 columns
PERSISTENT_MAX_ROW_BYTES = 4096
FUSED_MAX_ROW_BYTES = 32768 * 4


def choose_variant(N: int, elem_size: int) -> str:
    """The variant the dispatcher runs for rows of N columns of ``elem_size`` bytes."""
    row_bytes = N * elem_size
    if row_bytes <= PERSISTENT_MAX_ROW_BYTES and not persistent_supports(N):
        return "persistent"
    if row_bytes <= FUSED_MAX_ROW_BYTES and not fused_row_supports(N):
        return "fused_row"
    return "online"


VARIANTS = {"fused_row": softmax_fused_row, "persistent": softmax_persistent, "online": softmax_online}


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Row softmax, dispatching to the variant that was fastest for this row length."""
    check_tensor("x", x, ndim=2)
    return VARIANTS[choose_variant(x.shape[1], x.element_size())](x, out)
