"""Row softmax, ``rows``: short rows, several to a program, on a persistent grid.

A row of a few hundred columns is too little work for one program: its loads would wait a full
memory latency for a few hundred bytes. Here a block is ROWS rows x BLOCK_N columns (about
``dispatch.SOFTMAX["rows_tile"]`` elements), reduced along its rows at once. Program p takes
blocks ``p, p + grid, ...``: the default grid is one block a program (``PERSISTENT`` False: the
hardware starts a program wherever one ends); a persistent grid (what the SMs hold at once, from
the compiled kernel's registers and shared memory) loops over blocks, and
``tl.range(..., num_stages=NUM_STAGES)`` software-pipelines that loop (the next block's loads
issued before this block is reduced and stored). Rows that Triton cannot prove 16-byte aligned
are each addressed from their 16-byte boundary (``VEC``), as in ``softmax_block``.
"""
from __future__ import annotations

import triton
import triton.language as tl

from . import device_facts, interpreting, next_pow2
from .softmax_block import row_args
from .runtime import Spec, bind_spec, programs_per_sm

MAX_COLS = 32768


@triton.jit
def softmax_rows_kernel(x_ptr, out_ptr, M, N, stride_x, stride_out, ROWS: tl.constexpr,
                        BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr, VEC: tl.constexpr):
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols[None, :] < N
    g = (cols[None, :] // VEC) * VEC if VEC > 0 else cols[None, :]
    for blk in tl.range(tl.program_id(0), tl.cdiv(M, ROWS), tl.num_programs(0), num_stages=NUM_STAGES):
        r = (blk * ROWS + rows).to(tl.int64)
        if VEC == 0:
            mask = (r[:, None] < M) & col_mask
            x = tl.load(x_ptr + r[:, None] * stride_x + cols[None, :], mask=mask,
                        other=-float("inf")).to(tl.float32)
        else:
            # each row from the 16-byte boundary at or before it (triton_src.aligned_frame)
            start = r * stride_x
            base = (start // VEC) * VEC
            lead1 = (start - base).to(tl.int32)
            lead = lead1[:, None]
            end = tl.where(r < M, lead1 + N, 0)[:, None]
            x = tl.load(x_ptr + base[:, None] + cols[None, :], mask=(g + VEC > lead) & (g < end),
                        other=-float("inf"))
            mask = (cols[None, :] >= lead) & (cols[None, :] < end)
            x = tl.where(mask, x.to(tl.float32), -float("inf"))
        m = tl.max(x, axis=1)
        e = tl.exp(x - m[:, None])
        inv = 1.0 / tl.sum(e, axis=1)
        y = (e * inv[:, None]).to(out_ptr.dtype.element_ty)
        if VEC == 0:
            tl.store(out_ptr + r[:, None] * stride_out + cols[None, :], y, mask=mask)
        else:
            o_base = ((r * stride_out // VEC) * VEC)[:, None]
            tl.store(out_ptr + o_base + cols[None, :], y, mask=(g >= lead) & (g + VEC <= end))
            # each row's first and last partial groups: recomputed from x, VEC lanes each
            j = tl.arange(0, VEC)[None, :]
            tail = (end // VEC) * VEC
            for q in tl.static_range(2):
                pos = j + tail if q == 1 else j + 0 * tail
                em = (pos >= lead) & (pos < end)
                xe = tl.load(x_ptr + base[:, None] + pos, mask=em, other=-float("inf")).to(tl.float32)
                ye = tl.exp(xe - m[:, None]) * inv[:, None]
                tl.store(out_ptr + o_base + pos, ye.to(out_ptr.dtype.element_ty), mask=em)


def supports(N: int) -> str | None:
    if next_pow2(N) > MAX_COLS:
        return f"a row of {N} columns does not fit one program's registers; softmax_split takes it"
    return None


def config(N: int, tile: int, values_per_thread: int, num_stages: int, persistent: bool = False) -> dict:
    """ROWS rows of BLOCK_N = next_pow2(N) columns, about ``tile`` elements a block, over the
    warps that give each thread ``values_per_thread`` values; ``persistent``: a grid of what the
    SMs hold at once instead of one block a program."""
    block = max(16, next_pow2(N))
    rows = max(1, tile // block)
    warps = min(16, max(1, next_pow2(rows * block // (32 * values_per_thread))))
    # one block a program: its loop runs once, and a pipeline there only adds a predicated
    # prologue (measured slower: docs/performance.md, "Triton / softmax")
    return {"ROWS": rows, "BLOCK_N": block, "NUM_STAGES": num_stages if persistent else 1,
            "num_warps": warps, "PERSISTENT": bool(persistent)}


def launch_spec(x, out, cfg: dict, programs: int) -> Spec:
    M, N = x.shape
    blocks = triton.cdiv(M, cfg["ROWS"])
    return Spec(softmax_rows_kernel, (max(1, min(blocks, programs)),),
                {"x_ptr": x, "out_ptr": out, "M": M, "ROWS": cfg["ROWS"], "BLOCK_N": cfg["BLOCK_N"],
                 "NUM_STAGES": cfg["NUM_STAGES"], **row_args(x, out, cfg)},
                {"num_warps": cfg["num_warps"]})


def bind_launch(x, out, cfg: dict, programs: int | None = None):
    """Launch on ``programs`` programs (default: one a block, or with ``PERSISTENT`` what the
    device holds at once; under the interpreter 3, so that the block loop runs several times)."""
    if programs is None:
        if interpreting():
            programs = 3
        elif not cfg.get("PERSISTENT", False):
            programs = triton.cdiv(x.shape[0], cfg["ROWS"])
        else:  # compile once to learn the occupancy, then bind the real grid
            probe = bind_spec(launch_spec(x, out, cfg, 1), x.device)
            facts = device_facts(x.device)
            programs = facts["sms"] * max(1, programs_per_sm(probe.compiled, cfg["num_warps"], facts))
    return bind_spec(launch_spec(x, out, cfg, programs), x.device)
