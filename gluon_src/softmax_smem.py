"""Row softmax, ``smem``: a long row staged in shared memory, one read and one write of HBM.

Plain Triton holds a row in registers as fp32 (``softmax_block``) or spreads it over programs that
exchange partials through global memory (``softmax_split``). Both keep a 16-bit row's values in
registers at 4 bytes a value, so an SM holds few bytes of a long 16-bit row in flight. Gluon
(``triton.experimental.gluon``: Triton with explicit layouts and shared memory) can place the row
in shared memory instead: the program copies its whole row, raw dtype, into shared
memory with asynchronous copies (``cp.async``, 16 bytes each, no registers held while they fly),
waits once, then reads the row from shared memory three times:

1. max: every thread keeps a running max of its lanes, one block reduction at the end;
2. sum of exp(x - max), the same way;
3. exp(x - max) / sum, stored to HBM.

A row of 50257 bf16 is 100 KB: two programs an SM, 200 KB of rows in flight, and the registers
stay few (no value is held between passes). One program a row, grid = M; the hardware starts a
program where one ends.

Layout. A chunk is one 16-byte vector a thread (CHUNK = 32 x warps x VEC elements); a row takes
C chunks. Gluon's shared-memory buffers have power-of-two shapes, so the C chunks live in up to
three buffers of N0 >= N1 >= N2 chunks, powers of two that sum to at least C (``config``). Every
thread copies, reads and writes the same lanes of every chunk, so it reads back only what its own
copies wrote: ``wait_group(0)`` is all the synchronisation the data needs.

Alignment. The copies are 16-byte, so each row is addressed in 16-byte groups: from the row's start
when the rows are 16-byte aligned (FRAME = False), else from the 16-byte boundary at or before it
(FRAME, ``gluon_src.aligned_frame``: ``lead`` elements of the row before it belong to the previous
row; a group holding any of the row lies inside the allocation). The max and sum passes count only
the row's lanes; the store writes the groups wholly inside the row as 16-byte vectors and the
row's first and last partial groups (fewer than VEC lanes each) from VEC-wide tensors, recomputed
from x. Tensors that allow neither (a base not 16-byte aligned, input and output rows at different
offsets from a boundary) are declined (``supports_tensors``): ``dispatch`` then plans another kernel.

-inf: lanes of -inf contribute exp(-inf - max) = 0; a row of only -inf has max -inf and gives
exp(NaN) = NaN, as torch does.
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

from . import aligned_frame
from ._compat import cp_async
from .runtime import Spec, bind
#: bytes the driver reserves per program in an SM's shared memory (cudaOccupancy's figure)
RESERVED_SMEM = 1024


@gluon.jit
def _slot(buf0, buf1, buf2, c: gl.constexpr, N0: gl.constexpr, N1: gl.constexpr):
    """Chunk c of the row: its place in the three buffers (c is a compile-time index)."""
    if c < N0:
        slot = buf0.index(c)
    elif c < N0 + N1:
        slot = buf1.index(c - N0)
    else:
        slot = buf2.index(c - N0 - N1)
    return slot


@gluon.jit
def _sum_exp(buf, n: gl.constexpr, acc, max2, lanes):
    """acc + exp(x - max) over the first n chunks of ``buf`` (max2 = max * log2(e))."""
    LOG2E: gl.constexpr = 1.4426950408889634
    for i in range(n):
        x = buf.index(i).load(lanes.type.layout).to(gl.float32)
        acc += gl.exp2(x * LOG2E - max2)
    return acc


@gluon.jit
def _store(buf, n: gl.constexpr, c0: gl.constexpr, dst, max2, inv, lead, end, lanes,
           CHUNK: gl.constexpr, VEC: gl.constexpr):
    """Write exp(x - max) / sum for the 16-byte groups of chunks c0 .. c0 + n - 1 that lie wholly
    inside the row (the mask is constant over a group: 16-byte stores)."""
    LOG2E: gl.constexpr = 1.4426950408889634
    for i in range(n):
        pos = (c0 + i) * CHUNK + lanes
        group = pos // VEC * VEC
        x = buf.index(i).load(lanes.type.layout).to(gl.float32)
        y = (gl.exp2(x * LOG2E - max2) * inv).to(dst.dtype.element_ty)
        gl.store(dst + pos, y, mask=(group >= lead) & (group + VEC <= end))


@gluon.jit
def softmax_smem_kernel(x_ptr, out_ptr, N, stride_x, stride_o, CHUNK: gl.constexpr,
                        C: gl.constexpr, N0: gl.constexpr, N1: gl.constexpr, N2: gl.constexpr,
                        VEC: gl.constexpr, FRAME: gl.constexpr):
    LOG2E: gl.constexpr = 1.4426950408889634
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [gl.num_warps()], [0])
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])   # a thread's lanes are contiguous
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    buf0 = gl.allocate_shared_memory(dtype, [N0, CHUNK], plain)
    buf1 = buf0
    buf2 = buf0
    if N1 > 0:
        buf1 = gl.allocate_shared_memory(dtype, [N1, CHUNK], plain)
    if N2 > 0:
        buf2 = gl.allocate_shared_memory(dtype, [N2, CHUNK], plain)

    row = gl.program_id(0).to(gl.int64)
    x_start = row * stride_x
    o_start = row * stride_o
    # positions counted from the 16-byte boundary at or before the row's start (without the
    # frame the rows start on one, and the rounding only tells the compiler so: a stride that is
    # a multiple of VEC but not of 16 elements is not specialised as aligned)
    x_base = x_start // VEC * VEC
    o_base = o_start // VEC * VEC
    if FRAME:
        lead = (x_start - x_base).to(gl.int32)
    else:
        lead = 0
    end = lead + N
    lanes = gl.arange(0, CHUNK, layout=layout)
    src = x_ptr + x_base
    dst = out_ptr + o_base

    # every chunk's copies in flight at once, one commit group a chunk: whole 16-byte groups that
    # hold any of the row (the mask is constant over a group, so each copy stays 16 bytes)
    for c in gl.static_range(C):
        pos = c * CHUNK + lanes
        group = pos // VEC * VEC
        cp_async(_slot(buf0, buf1, buf2, c, N0, N1), src + pos,
                        mask=(group + VEC > lead) & (group < end))
        async_copy.commit_group()

    # pass 1, max, each chunk as soon as it lands. Lanes outside the row (before ``lead`` in
    # chunk 0, past ``end`` in the last two) become -inf in shared memory too, so the passes
    # after this one need no masks
    acc = gl.full([CHUNK], -float("inf"), gl.float32, layout)
    for c in gl.static_range(C):
        async_copy.wait_group(C - 1 - c)
        slot = _slot(buf0, buf1, buf2, c, N0, N1)
        x = slot.load(layout)
        if c == 0 or c >= C - 2:
            pos = c * CHUNK + lanes
            x = gl.where((pos >= lead) & (pos < end), x, -float("inf"))
            slot.store(x)
        acc = gl.maximum(acc, x.to(gl.float32))
    max2 = gl.max(acc, axis=0) * LOG2E

    # pass 2, sum of exp(x - max); its loops are not unrolled into pass 1's, so the compiler
    # reloads shared memory instead of keeping the row in registers
    n2: gl.constexpr = C - N0 - N1
    acc = _sum_exp(buf0, min(N0, C), gl.zeros([CHUNK], gl.float32, layout), max2, lanes)
    if C > N0:
        acc = _sum_exp(buf1, min(N1, C - N0), acc, max2, lanes)
    if n2 > 0:
        acc = _sum_exp(buf2, n2, acc, max2, lanes)
    inv = 1.0 / gl.sum(acc, axis=0)

    # pass 3, the store
    _store(buf0, min(N0, C), 0, dst, max2, inv, lead, end, lanes, CHUNK, VEC)
    if C > N0:
        _store(buf1, min(N1, C - N0), N0, dst, max2, inv, lead, end, lanes, CHUNK, VEC)
    if n2 > 0:
        _store(buf2, n2, N0 + N1, dst, max2, inv, lead, end, lanes, CHUNK, VEC)
    if FRAME:   # the row's first and last partial groups, VEC lanes each, recomputed from x
        edge: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
        j = gl.arange(0, VEC, layout=edge)
        tail = end // VEC * VEC
        for q in gl.static_range(2):
            if q == 0:
                pos = j
            else:
                pos = tail + j
            keep = (pos >= lead) & (pos < end)
            xe = gl.load(src + pos, mask=keep, other=-float("inf")).to(gl.float32)
            gl.store(dst + pos, (gl.exp2(xe * LOG2E - max2) * inv).to(dst.dtype.element_ty), mask=keep)


def split_pow2(count: int, parts: int = 3) -> tuple[int, ...]:
    """``parts`` powers of two (descending; 0 for an unused part) that sum to at least ``count``,
    as little above it as ``parts`` terms allow: the binary digits of ``count`` from the top, the
    last one rounded up when lower digits are left."""
    out, left = [], int(count)
    for k in range(parts):
        if left <= 0:
            out.append(0)
            continue
        top = 1 << (left.bit_length() - 1)
        if k == parts - 1 and left > top:
            top <<= 1
        out.append(top)
        left -= top
    return tuple(out)


def config(N: int, elem_size: int, num_warps: int, framed: bool = True) -> dict:
    """CHUNK = one 16-byte vector a thread; the chunks a row takes (framed: room for the up to
    VEC - 1 lanes before the row) in three power-of-two buffers; the shared memory they use."""
    if num_warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"num_warps: must be a power of two from 1 to 32, got {num_warps!r}")
    vec = 16 // elem_size
    chunk = 32 * num_warps * vec
    chunks = triton.cdiv(N + (vec - 1 if framed else 0), chunk)
    n0, n1, n2 = split_pow2(chunks)
    return {"CHUNK": chunk, "C": chunks, "N0": n0, "N1": n1, "N2": n2, "VEC": vec,
            "smem": (n0 + n1 + n2) * chunk * elem_size, "num_warps": num_warps}


def programs_per_sm(cfg: dict, facts: dict) -> int:
    """Programs of this configuration an SM holds: its shared memory (plus the driver's reserve)
    and its warps (the registers, few here, are not the limit)."""
    by_smem = facts["smem_per_sm"] // (cfg["smem"] + RESERVED_SMEM)
    return max(0, min(by_smem, facts["max_warps_per_sm"] // cfg["num_warps"], 32))


def supports(N: int, elem_size: int, num_warps: int, facts: dict) -> str | None:
    cfg = config(N, elem_size, num_warps)
    if programs_per_sm(cfg, facts) < 1:
        return (f"a row of {N} columns takes {cfg['smem']} bytes of shared memory, more than one "
                f"program may have ({facts['smem_per_sm'] - RESERVED_SMEM})")
    return None


def frame_of(x: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether the rows are addressed from their 16-byte boundary (False: they start on one)."""
    es = x.element_size()
    return not (all(t.data_ptr() % 16 == 0 and (t.stride(0) * es) % 16 == 0 for t in (x, out))
                and (x.shape[1] * es) % 16 == 0)


def supports_tensors(x: torch.Tensor, out: torch.Tensor) -> str | None:
    """None when every row of x and out can be addressed in 16-byte groups (aligned rows, or the
    aligned frame), else why not."""
    if not frame_of(x, out) or aligned_frame(x, out):
        return None
    return ("x, out: rows neither 16-byte aligned nor at the same offset from a 16-byte boundary "
            "in a 16-byte aligned tensor; the 16-byte shared-memory copies need one or the other")


def with_frame(cfg: dict, x, out) -> dict:
    """``cfg``'s warps configured for these tensors: FRAME, and the chunks that the frame's extra
    lanes may add. What the launch binds and what it reports."""
    frame = frame_of(x, out)
    return dict(config(x.shape[1], x.element_size(), cfg["num_warps"], frame), FRAME=frame)


def launch_spec(x, out, cfg: dict) -> Spec:
    M, N = x.shape
    cfg = with_frame(cfg, x, out)
    return Spec(softmax_smem_kernel, (M,),
                {"x_ptr": x, "out_ptr": out, "N": N, "stride_x": x.stride(0), "stride_o": out.stride(0),
                 **{k: cfg[k] for k in ("CHUNK", "C", "N0", "N1", "N2", "VEC", "FRAME")}},
                {"num_warps": cfg["num_warps"]})


def bind_launch(x, out, cfg: dict):
    """Zero-argument launch on a grid of M programs (checks the tensors first: ValueError naming
    them when the rows cannot be addressed in 16-byte groups)."""
    if (why := supports_tensors(x, out)):
        raise ValueError(why)
    launch = bind(launch_spec(x, out, cfg), x.device)
    launch.config = with_frame(cfg, x, out)
    return launch
