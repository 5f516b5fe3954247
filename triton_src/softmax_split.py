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
- split:      long rows with one read and one write. Each row is cut into C chunks of CHUNK
  columns, held in the registers of C different programs of a persistent, co-resident grid; the
  programs of a row publish their chunk's (max, sum) in global memory, poll until all C partials
  of the row are there, combine them and write their chunk from registers. See
  ``softmax_split_kernel`` for the protocol and why it cannot deadlock.

All variants: fp32 / fp16 / bf16 in and out, fp32 math, rows of any stride (x.stride(0) != N,
also not 16-byte aligned), 64-bit row offsets, -inf entries (a row of only -inf gives NaN, as
torch does).

The interpreter and ``split``. Triton's interpreter (triton/runtime/interpreter.py, 3.9) runs the
programs of a grid one after another, each to completion, so a program that waits for its
partners would wait for programs that have not started. Changing the kernel for the interpreter
(one chunk per row, a program walking all chunks of a row, two launches split at the wait) would
verify a different algorithm, so the CPU mode instead runs the same kernel, one launch, with its
programs on concurrent Python threads (``_interpret_concurrently``: each thread is one program and
sees its own ``tl.program_id``; the spin is the real spin over the real slots). That checks the
indexing, the masks, the -inf rules, the partial/combine arithmetic, the publish-and-poll protocol
and that a grid whose programs all run at once finishes. It cannot check the GPU memory model (the
single-copy atomicity of the 64-bit slots and the volatile polls: the GIL makes every store
visible at once), that the grid the GPU path computes from registers and shared memory is in fact
co-resident, or the speed: those are for the GPU run. Threads are scheduled so that some programs
straggle (random 1 ms sleeps before loads): a kernel that skipped the wait fails there. The hook
uses interpreter internals (``GridExecutor``, ``InterpretedFunction.rewrite``, three
``interpreter_builder`` methods); should they change, the CPU-mode launch fails loudly, it does
not fall back.
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


@triton.jit
def softmax_split_kernel(x_ptr, out_ptr, slot_ptr, N, stride_x, stride_o, C, n_units, max_spin,
                         CHUNK: tl.constexpr, C_PAD: tl.constexpr, PREFETCH: tl.constexpr):
    """One read and one write of rows too long for one program, on a co-resident grid.

    Work unit u = pid + k * G (round k = 0, 1, ...; G = programs in the grid) is chunk u % C of
    row u // C: columns [chunk * CHUNK, chunk * CHUNK + CHUNK) of the row, C = cdiv(N, CHUNK).
    A unit loads its chunk into registers (-inf in masked lanes), reduces it to m = max and
    s = sum exp(x - m), publishes (m, s) as one 64-bit word in its slot (slot[u], zeroed before
    the launch), polls the C slots of its row until none is zero, combines the C partials into
    the row's max and sum and writes its chunk from the registers it still holds. HBM traffic:
    one read and one write of x; the slots (8 bytes a chunk) stay in L2.

    Why a slot per unit and no counter. The payload is its own flag: a 64-bit relaxed atomic
    exchange is seen whole or not at all, and 0 is never a partial (a finite m has s >= 1, the
    chunk's max contributing exp(0); m = -inf has the bits of -inf), so no memory fence is needed.
    A counter would need release/acquire ordering between the partial and the count: on sm_90 the
    release became MEMBAR.ALL.GPU before the atomic (it waits for the thread's outstanding
    memory operations, the prefetch below included) and the acquire an L1 invalidate after it;
    that version of this kernel measured 2-7 points of copy slower on the H200. The polls are
    volatile loads (relaxed, system scope in the PTX memory model), so they read L2, never a
    stale L1 line.

    Why it cannot deadlock. (1) All G programs are resident at once: the launch caps G at SMs x
    programs-per-SM computed from the compiled kernel's registers, shared memory and warps, and
    on the GPU it is a cooperative launch, which the driver refuses rather than run partly
    resident. (2) G is a multiple of C, so the C units of a row (row*C .. row*C + C-1, aligned to
    C) fall in one round k and belong to C distinct programs. By induction on k: every program
    finishes round k-1, so each one reaches round k; a row of round k therefore gets all C
    partials and none of its waiters waits on a later round. Programs without a unit in the last
    round wait on nothing (M*C units: a row is either wholly in a round or absent).

    Bounded spin. Should the grid not be resident after all (another process's kernels holding
    SMs, a wrong occupancy figure), a waiter gives up after ``max_spin`` polls, writes NaN over
    its chunk and stops waiting in later rounds (its budget drops to 0, so the kernel ends within
    about one budget): a scheduling failure shows up as a verification FAIL with NaNs, not as a
    hang. (Slots left unzeroed would be the opposite failure, stale partials read as fresh: the
    launch zeroes them every call.)

    PREFETCH: the next unit's chunk is loaded (in the input dtype) as soon as this unit's x has
    become e, before the partials are published and the partners awaited, so that HBM has work
    during the wait. Costs the registers of a second chunk.

    Combining, -inf rules: a chunk of only -inf (or only padding) has m = -inf and contributes
    s = 0 (its exponentials are taken against 0 instead of -inf, so no -inf - -inf = NaN); the
    row's max is the max of the finite m; a row of only -inf has sum 0 and gives 0/0 = NaN, as
    torch does. The output is exp(x - m) * exp(m - row_max) / row_sum: one exp per element.
    """
    NEG_INF: tl.constexpr = -float("inf")
    LOW: tl.constexpr = 0xFFFFFFFF
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, CHUNK)
    pc = tl.arange(0, C_PAD)
    budget = max_spin
    if PREFETCH:
        r0 = pid // C
        c0 = (pid - r0 * C) * CHUNK + cols
        # past the last unit: a bound of 0 columns masks the whole chunk
        x_next = tl.load(x_ptr + r0.to(tl.int64) * stride_x + c0,
                         mask=c0 < tl.where(pid < n_units, N, 0), other=NEG_INF,
                         eviction_policy="evict_first")
    for u in tl.range(pid, n_units, nprog):
        row = u // C
        c = (u - row * C) * CHUNK + cols
        mask = c < N
        row64 = row.to(tl.int64)
        if PREFETCH:
            x = x_next.to(tl.float32)
        else:
            x = tl.load(x_ptr + row64 * stride_x + c, mask=mask, other=NEG_INF,
                        eviction_policy="evict_first").to(tl.float32)
        m = tl.max(x, axis=0)
        m_ref = tl.where(m == NEG_INF, 0.0, m)
        e = tl.exp(x - m_ref)
        if PREFETCH:
            un = u + nprog
            rn = un // C
            cn = (un - rn * C) * CHUNK + cols
            x_next = tl.load(x_ptr + rn.to(tl.int64) * stride_x + cn,
                             mask=cn < tl.where(un < n_units, N, 0), other=NEG_INF,
                             eviction_policy="evict_first")
        s = tl.sum(e, axis=0)
        word = ((s.to(tl.uint32, bitcast=True).to(tl.int64) << 32)
                | m.to(tl.uint32, bitcast=True).to(tl.int64))
        tl.atomic_xchg(slot_ptr + u, word, sem="relaxed")
        slots = slot_ptr + row * C + pc
        live = pc < C
        v = tl.load(slots, mask=live, other=1, volatile=True)
        missing = tl.sum(((v == 0) & live).to(tl.int32), axis=0)
        spins = 0
        while (missing > 0) & (spins < budget):
            v = tl.load(slots, mask=live, other=1, volatile=True)
            missing = tl.sum(((v == 0) & live).to(tl.int32), axis=0)
            spins += 1
        done = missing == 0
        budget = tl.where(done, budget, 0)
        mc = tl.where(live, (v & LOW).to(tl.uint32).to(tl.float32, bitcast=True), NEG_INF)
        sc = tl.where(live, (v >> 32).to(tl.uint32).to(tl.float32, bitcast=True), 0.0)
        row_max = tl.max(mc, axis=0)
        row_sum = tl.sum(tl.where(mc == NEG_INF, 0.0, sc * tl.exp(mc - row_max)), axis=0)
        f = tl.where(m == NEG_INF, 0.0, tl.exp(m - row_max)) / row_sum
        f = tl.where(done, f, float("nan"))
        tl.store(out_ptr + row64 * stride_o + c, (e * f).to(out_ptr.dtype.element_ty), mask=mask)


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


#: split: values a thread holds per unit (fp32 in registers whatever the input dtype); the chunk
#: is SPLIT_VALUES x 32 x num_warps columns. H200 sweep (scripts/tune_triton_softmax_split.py,
#: triton 3.6, copy ceiling 4.22 TB/s; docs/perf-notes.md): what counts is the chunk bytes an SM
#: holds, in more than one program, so that while one waits for its partners the others load.
#: fp32: 16384 columns over 8 warps (118-120 registers, two programs an SM) 87 / 85 % of copy at
#: N = 131072 / 262144 (online 70 / 68 %); 32 values a thread in three programs an SM 85 / 78 %,
#: one 16384-column program an SM 62-67 %. bf16: 8192 columns over 4 warps (96-128 registers,
#: four or five an SM) 72 / 76 % (online 66 / 65 %), 8192 over 8 warps 76 / 67 %.
SPLIT_VALUES = 64
SPLIT_WARPS = {4: 8, 2: 4}
#: rows split declines: at most 16384 columns, where fused_row keeps the row on chip in one
#: program at 94-98 % of copy and split measured 87-88 % (N = 32768: 87 % vs fused_row's 98 %)
SPLIT_MIN_N = 16385
#: polls of the row's slots before a waiter gives up and writes NaN (see softmax_split_kernel).
#: On the GPU a poll is an L2 round trip and a block reduction, about 1-2 us, so 2^20 polls are
#: one to two seconds against waits of microseconds; under the interpreter a poll is tens of
#: microseconds to a millisecond of Python shared by all threads, and legitimate waits there are
#: hundreds of polls.
SPLIT_MAX_SPIN = 1 << 20
SPLIT_MAX_SPIN_INTERPRETER = 1 << 16
#: cooperative launch (CU_LAUNCH_ATTRIBUTE_COOPERATIVE): the driver refuses a grid that cannot
#: be resident all at once instead of running it partly, which is the guarantee the spin needs
SPLIT_COOPERATIVE = True
#: load the next unit's chunk before waiting for the partners (see softmax_split_kernel)
SPLIT_PREFETCH = False


def split_supports(N: int) -> str | None:
    if N < SPLIT_MIN_N:
        return (f"row of {N} columns: fused_row keeps rows up to {SPLIT_MIN_N - 1} columns on chip "
                f"in one program, faster than splitting them (98 vs 87 % of copy at 32768); use "
                f"fused_row")
    return None


def split_config(N: int, elem_size: int, chunk: int | None = None,
                 num_warps: int | None = None, prefetch: bool | None = None) -> dict:
    """Chunk of CHUNK columns per work unit, C = cdiv(N, CHUNK) units per row. Defaults from the
    H200 sweep: SPLIT_VALUES fp32 values a thread over the dtype's SPLIT_WARPS (a given chunk or
    warp count sets the other to the same values a thread); a row shorter than that chunk gets a
    chunk of its own padded length (C = 1)."""
    if num_warps is not None and (num_warps not in (1, 2, 4, 8, 16, 32)):
        raise ValueError(f"num_warps: must be a power of two from 1 to 32, got {num_warps!r}")
    if chunk is None:
        warps = num_warps or SPLIT_WARPS.get(elem_size, 4)
        chunk = min(SPLIT_VALUES * 32 * warps, max(MIN_BLOCK, next_pow2(N)))
    else:
        warps = num_warps or _warps_for(chunk, SPLIT_VALUES)
    if chunk & (chunk - 1) or chunk < MIN_BLOCK:
        raise ValueError(f"chunk: must be a power of two >= {MIN_BLOCK}, got {chunk}")
    if chunk > MAX_ON_CHIP:
        raise ValueError(f"chunk: {chunk} columns per program would spill (limit {MAX_ON_CHIP})")
    n_chunks = triton.cdiv(N, chunk)
    return {"CHUNK": chunk, "C": n_chunks, "C_PAD": max(2, next_pow2(n_chunks)),
            "PREFETCH": SPLIT_PREFETCH if prefetch is None else bool(prefetch), "num_warps": warps}


_occupancy_cache: dict = {}


def programs_per_sm(kernel, device, key, num_warps: int, warmup) -> int:
    """How many programs of ``kernel`` one SM holds at once: the warp limit, then the compiled
    kernel's registers (allocated per warp in units of 256) and shared memory (plus the 1 KB the
    driver reserves per block). ``warmup()`` compiles the kernel as the launch will (same
    arguments, constexprs and options) and returns the compiled kernel; ``key`` names that
    specialisation for the cache. Should the compiled facts be unavailable, the warp limit alone
    (an upper bound: callers that need residency must not rely on it blindly)."""
    facts = device_facts(device)
    key = (getattr(kernel, "__name__", id(kernel)), device.index, num_warps, key)
    per_sm = _occupancy_cache.get(key)
    if per_sm is None:
        per_sm = max(1, min(facts["max_warps_per_sm"] // num_warps, 32))
        try:
            k = warmup()
            k._init_handles()
            regs_per_warp = -(-k.n_regs * 32 // 256) * 256  # allocated in units of 256 per warp
            if regs_per_warp:
                per_sm = min(per_sm, facts["regs_per_sm"] // (regs_per_warp * num_warps))
            smem = k.metadata.shared
            if smem:
                per_sm = min(per_sm, facts["smem_per_sm"] // (smem + 1024))
        except Exception:  # occupancy is a tuning fact; fall back to the warp limit
            pass
        per_sm = max(0, per_sm)
        _occupancy_cache[key] = per_sm
    return per_sm


def persistent_programs(x, out, M, N, cfg: dict) -> int:
    """Programs of the persistent grid: blocks of rows, capped at what all SMs hold at once.

    Occupancy comes from the compiled kernel (registers per thread, shared memory per program).
    Under the interpreter a small grid is used so that the row loop still runs several times."""
    n_blocks = triton.cdiv(M, cfg["ROWS"])
    if interpreting() or x.device.type != "cuda":
        return max(1, min(n_blocks, 3))
    warps = cfg["num_warps"]
    per_sm = programs_per_sm(
        softmax_persistent_kernel, x.device,
        (x.dtype, out.dtype, x.stride(0) % 16, tuple(sorted(cfg.items()))), warps,
        lambda: softmax_persistent_kernel.warmup(x, out, M, N, x.stride(0), out.stride(0),
                                                 ROWS=cfg["ROWS"], BLOCK_N=cfg["BLOCK_N"],
                                                 NUM_STAGES=cfg["NUM_STAGES"], num_warps=warps,
                                                 grid=(1,)))
    return max(1, min(n_blocks, device_facts(x.device)["sms"] * max(1, per_sm)))


#: CPU mode: teams of C programs in the interpreter's grid (one thread each); two teams, so that
#: rows alternate between them and M > 2 runs several rounds
INTERPRETER_SPLIT_TEAMS = 2


def split_capacity(x, out, slots, M, N, cfg: dict) -> int:
    """Programs of the split kernel that the device holds at once (SMs x programs per SM of the
    compiled kernel). Under the interpreter every program is a thread, all running at once. If the
    compiled facts were unavailable the warp limit would overstate it; the cooperative launch
    then fails with the driver's error instead of running part of the grid."""
    if interpreting() or x.device.type != "cuda":
        return INTERPRETER_SPLIT_TEAMS * cfg["C"]
    warps = cfg["num_warps"]
    per_sm = programs_per_sm(
        softmax_split_kernel, x.device,
        (x.dtype, out.dtype, x.stride(0) % 16, out.stride(0) % 16, SPLIT_COOPERATIVE,
         cfg["CHUNK"], cfg["C_PAD"], cfg["PREFETCH"]), warps,
        lambda: softmax_split_kernel.warmup(x, out, slots, N, x.stride(0), out.stride(0),
                                            cfg["C"], M * cfg["C"], SPLIT_MAX_SPIN,
                                            CHUNK=cfg["CHUNK"], C_PAD=cfg["C_PAD"],
                                            PREFETCH=cfg["PREFETCH"], num_warps=warps, grid=(1,),
                                            launch_cooperative_grid=SPLIT_COOPERATIVE))
    return device_facts(x.device)["sms"] * per_sm


_split_slot_cache: dict = {}


def _split_slots(device, n: int) -> torch.Tensor:
    """The n partial slots (int64, one per unit), cached per device and stream (grown, never
    shrunk) so that a launch allocates nothing, and zeroed on every call. The zeroing is
    stream-ordered (after any earlier launch on this stream has finished with them) and costs
    one memset launch of 8 bytes a unit: 1 MB at 8192 rows x 16 chunks, about 2-3 us against
    milliseconds of kernel. The kernel could clear its row's slots itself, but a run that gave up
    (bounded spin) would then leave stale partials for the next one."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device.type, device.index, stream)
    slots = _split_slot_cache.get(key)
    if slots is None or slots.numel() < n:
        slots = _split_slot_cache[key] = torch.empty(n, dtype=torch.int64, device=device)
    slots = slots[:n]
    slots.zero_()
    return slots


def _interpret_concurrently(kernel, n_programs: int, *args, **kwargs) -> None:
    """One interpreter launch of ``kernel`` on a grid of ``n_programs`` whose programs run at the
    same time, one Python thread each (the interpreter itself runs them one after another, which
    a kernel whose programs wait for each other cannot survive). The launch goes through the
    interpreter's own GridExecutor (argument conversion, language patching, copy-back); only the
    per-program call is replaced: it queues a thread, and the last one starts them all and joins.
    ``tl.program_id`` answers each thread with its own index.

    Scheduling: left alone, threads change hands only at the GIL's 5 ms switch, in start order,
    so whether a partner is late is luck. Instead, before every load (the polls are loads too) a
    thread sleeps 0 or 1 ms at random (a fixed seed per program) and every atomic hands the GIL on:
    a spinning thread costs little, and stragglers arrive late in every round, so a kernel that
    read its partners' partials without waiting for them reads empty or stale slots and fails
    verification (checked by removing the wait: every run failed)."""
    import inspect
    import random
    import threading
    import time
    from types import SimpleNamespace
    try:
        from triton.runtime import interpreter as interp
        body = kernel.rewrite()
        builder = interp.interpreter_builder
        program_id = type(builder).create_get_program_id
        rmw, masked_load = builder.create_atomic_rmw, builder.create_masked_load
        executor = interp.GridExecutor
        signature = inspect.signature(kernel.fn)
    except Exception as e:
        raise RuntimeError(f"split: this Triton's interpreter lacks what the concurrent CPU-mode "
                           f"launch uses ({type(e).__name__}: {e})") from None
    local = threading.local()
    threads: list = []
    errors: list = []

    def run(idx, kw):
        local.grid_idx = idx
        local.rng = random.Random(idx[0])
        try:
            body(**kw)
        except BaseException as e:  # re-raised in the launching thread
            errors.append(e)

    def atomic_rmw(*a, **k):
        time.sleep(0)
        return rmw(*a, **k)

    def load(*a, **k):
        time.sleep(local.rng.choice((0, 0, 0.001)))
        return masked_load(*a, **k)

    def spawn(**kw):
        threads.append(threading.Thread(target=run, args=(builder.grid_idx, kw), daemon=True))
        if len(threads) < n_programs:
            return
        builder.create_get_program_id = lambda axis: program_id(
            SimpleNamespace(grid_idx=local.grid_idx), axis)
        builder.create_atomic_rmw, builder.create_masked_load = atomic_rmw, load
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            del builder.create_get_program_id, builder.create_atomic_rmw, builder.create_masked_load
        if errors:
            raise errors[0]

    spawn.__signature__ = signature
    spawn.__annotations__ = dict(kernel.fn.__annotations__)
    executor(spawn, kernel.arg_names, (n_programs,))(*args, **kwargs)


def _launch_split(x, out, slots, M, N, cfg: dict, grid: int, max_spin: int) -> None:
    args = (x, out, slots, N, x.stride(0), out.stride(0), cfg["C"], M * cfg["C"], max_spin)
    meta = {k: cfg[k] for k in ("CHUNK", "C_PAD", "PREFETCH")}
    if interpreting():
        _interpret_concurrently(softmax_split_kernel, grid, *args, **meta)
    else:
        softmax_split_kernel[(grid,)](*args, **meta, num_warps=cfg["num_warps"],
                                      launch_cooperative_grid=SPLIT_COOPERATIVE)


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


def softmax_split(x: torch.Tensor, out: torch.Tensor | None = None, *, chunk: int | None = None,
                  num_warps: int | None = None, programs: int | None = None,
                  prefetch: bool | None = None) -> torch.Tensor:
    """Row softmax of long rows, one read and one write: each row split over C co-resident
    programs that exchange (max, sum) partials through global memory (``softmax_split_kernel``).

    ``programs``: the grid, a multiple of C = cdiv(N, chunk) and at most what the device holds
    at once (default: all of that, rounded down to a multiple of C, capped at M*C units). Any N
    works here (C = 1 for a row of one chunk); ``split_supports`` (the registry) declines the rows
    fused_row is faster on."""
    M, N, out = _check(x, out)
    cfg = split_config(N, x.element_size(), chunk, num_warps, prefetch)
    C = cfg["C"]
    if 2 * M * C >= 2 ** 31:
        raise ValueError(f"x: {M} rows x {C} chunks exceed the kernel's 32-bit unit index")
    slots = _split_slots(x.device, M * C)
    capacity = split_capacity(x, out, slots, M, N, cfg)
    if capacity < C:
        raise ValueError(f"x: a row of {N} columns needs {C} programs of {cfg['CHUNK']} columns "
                         f"at once, but this device holds {capacity}; use a larger chunk or online")
    if programs is None:
        grid = min(M * C, capacity // C * C)
    else:
        if (isinstance(programs, bool) or not isinstance(programs, int) or programs < C
                or programs % C):
            raise ValueError(f"programs: must be a positive multiple of C = {C} chunks per row, "
                             f"got {programs!r}")
        if programs > capacity:
            raise ValueError(f"programs: {programs} exceeds the {capacity} programs this device "
                             f"holds at once; the waiting programs would deadlock")
        grid = programs
    max_spin = SPLIT_MAX_SPIN_INTERPRETER if interpreting() else SPLIT_MAX_SPIN
    _launch_split(x, out, slots, M, N, cfg, grid, max_spin)
    return out


#: dispatcher thresholds in bytes per row, from the H200 sweep (scripts/tune_triton.py, fp32):
#: persistent won at N = 1024 (2.74 vs 2.52 TB/s), fused_row from 2048 to 32768 columns
PERSISTENT_MAX_ROW_BYTES = 4096
FUSED_MAX_ROW_BYTES = 32768 * 4
#: rows that neither persistent nor fused_row take go to split (one read) instead of online when
#: they are at least this many bytes; None keeps online. 0 would send every such row to split,
#: which measured faster than online at every long row in the H200 sweep
#: (scripts/tune_triton_softmax_split.py: fp32 87 / 85 % vs 70 / 68 % of copy at N = 131072 /
#: 262144; bf16 72 / 76 % vs 66 / 65 %).
SPLIT_MIN_ROW_BYTES: int | None = 0


def choose_variant(N: int, elem_size: int) -> str:
    """The variant the dispatcher runs for rows of N columns of ``elem_size`` bytes."""
    row_bytes = N * elem_size
    if row_bytes <= PERSISTENT_MAX_ROW_BYTES and not persistent_supports(N):
        return "persistent"
    if row_bytes <= FUSED_MAX_ROW_BYTES and not fused_row_supports(N):
        return "fused_row"
    if (SPLIT_MIN_ROW_BYTES is not None and row_bytes >= SPLIT_MIN_ROW_BYTES
            and not split_supports(N)):
        return "split"
    return "online"


VARIANTS = {"fused_row": softmax_fused_row, "persistent": softmax_persistent, "online": softmax_online,
            "split": softmax_split}


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Row softmax, dispatching to the variant that was fastest for this row length."""
    check_tensor("x", x, ndim=2)
    return VARIANTS[choose_variant(x.shape[1], x.element_size())](x, out)
