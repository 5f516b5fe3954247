"""Row softmax, ``split``: rows too long for one program, with one read and one write.

Each row is cut into C chunks of CHUNK columns, held in the registers of C different programs of a
persistent, co-resident grid; the programs of a row publish their chunk's (max, sum) in global
memory, poll until all C partials of the row are there, combine them and write their chunk from
registers. See ``softmax_split_kernel`` for the protocol and why it cannot deadlock; ``dispatch``
picks CHUNK (the power of two that wastes the fewest padded lanes, a few rows filling the machine)
and the warps (a fixed number of values a thread). Under the interpreter the programs run as
concurrent threads (``runtime.interpret_concurrently``): the protocol and the arithmetic are checked
on the CPU, the GPU memory model and residency only on the GPU.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import aligned_frame, device_facts, interpreting, next_pow2
from .runtime import Spec, bind_spec, interpret_concurrently, programs_per_sm

#: rows of at most this many columns fit one program (``softmax_block``), which needs no exchange
MIN_N = 16385
#: polls of the row's slots before a waiter gives up and writes NaN (see softmax_split_kernel).
#: On the GPU a poll is an L2 round trip and a block reduction, about 1-2 us, so 2^20 polls are
#: one to two seconds against waits of microseconds; under the interpreter a poll is tens of
#: microseconds to a millisecond of Python shared by all threads, and legitimate waits there are
#: hundreds of polls.
MAX_SPIN = 1 << 20
MAX_SPIN_INTERPRETER = 1 << 16
#: cooperative launch: the driver refuses a grid that cannot be resident all at once instead of
#: running it partly, which is the guarantee the spin needs
COOPERATIVE = True
#: CPU mode: teams of C programs in the interpreter's grid (one thread each); two teams, so that
#: rows alternate between them and M > 2 runs several rounds
INTERPRETER_TEAMS = 2


@triton.jit
def _unit_offsets(u, C, N, stride, n_units, cols, CHUNK: tl.constexpr, VEC: tl.constexpr,
                  PAST_END: tl.constexpr):
    """Unit u's chunk: (row, its lanes' positions, element offsets of its lanes from x, load mask,
    lanes that hold the row). VEC = 0: positions are the row's columns. VEC > 0
    (``aligned_frame``): positions from the 16-byte boundary at or before the row's start,
    ``lead`` elements before it; the load mask covers whole groups of VEC (16 bytes, so the loads
    stay 128-bit: a group that holds some of the row is inside the allocation), the valid lanes
    only the row. PAST_END: u may be past the last unit (a prefetch), whose lanes are all masked."""
    row = u // C
    row64 = row.to(tl.int64)
    p = (u - row * C) * CHUNK + cols
    if VEC == 0:
        if PAST_END:
            valid = p < tl.where(u < n_units, N, 0)
        else:
            valid = p < N
        offs = row64 * stride + p
        load_mask = valid
    else:   # (a unit past the last: end = 0 masks it whole)
        start = row64 * stride
        base = (start // VEC) * VEC
        lead = (start - base).to(tl.int32)
        end = tl.where(u < n_units, lead + N, 0)
        g = (p // VEC) * VEC
        load_mask = (g + VEC > lead) & (g < end)
        valid = (p >= lead) & (p < end)
        offs = base + p
    return row, p, offs, load_mask, valid


@triton.jit
def softmax_split_kernel(x_ptr, out_ptr, slot_ptr, N, stride_x, stride_o, C, n_units, max_spin,
                         CHUNK: tl.constexpr, C_PAD: tl.constexpr, PREFETCH: tl.constexpr,
                         VEC: tl.constexpr):
    """One read and one write of rows too long for one program, on a co-resident grid.

    Work unit u = pid + k * G (round k = 0, 1, ...; G = programs in the grid) is chunk u % C of
    row u // C: columns [chunk * CHUNK, chunk * CHUNK + CHUNK) of the row, C = cdiv(N, CHUNK)
    (with VEC > 0, positions from the row's 16-byte boundary: ``_unit_offsets``).
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

    Stores with VEC > 0: the groups wholly inside the row in one 128-bit masked store; the few
    lanes of the row's first and last groups recomputed from x and stored in VEC-wide tensors.

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
        _r, _p, offs0, lmask0, valid0 = _unit_offsets(pid, C, N, stride_x, n_units, cols, CHUNK, VEC,
                                                      True)
        x_next = tl.load(x_ptr + offs0, mask=lmask0, other=NEG_INF, eviction_policy="evict_first")
        if VEC > 0:
            x_next = tl.where(valid0, x_next, NEG_INF)
    for u in tl.range(pid, n_units, nprog):
        row, c, offs, lmask, valid = _unit_offsets(u, C, N, stride_x, n_units, cols, CHUNK, VEC, False)
        row64 = row.to(tl.int64)
        if PREFETCH:
            x = x_next.to(tl.float32)
        else:
            x = tl.load(x_ptr + offs, mask=lmask, other=NEG_INF,
                        eviction_policy="evict_first").to(tl.float32)
            if VEC > 0:
                x = tl.where(valid, x, NEG_INF)   # the edge groups' lanes of the rows beside
        m = tl.max(x, axis=0)
        m_ref = tl.where(m == NEG_INF, 0.0, m)
        e = tl.exp(x - m_ref)
        if PREFETCH:
            _rn, _pn, offs_n, lmask_n, valid_n = _unit_offsets(u + nprog, C, N, stride_x, n_units,
                                                               cols, CHUNK, VEC, True)
            x_next = tl.load(x_ptr + offs_n, mask=lmask_n, other=NEG_INF, eviction_policy="evict_first")
            if VEC > 0:
                x_next = tl.where(valid_n, x_next, NEG_INF)
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
        y = (e * f).to(out_ptr.dtype.element_ty)
        if VEC == 0:
            tl.store(out_ptr + row64 * stride_o + c, y, mask=valid)
        else:
            k = u - row * C
            # the output row starts as far past a boundary as the input row (aligned_frame):
            # the 16-byte groups wholly inside the row from the registers, then the row's two
            # partial groups (its first and last < VEC lanes), recomputed from x in VEC-wide
            # tensors: a full-width per-element store would cost every edge chunk 16x its stores,
            # and a row's chunks all wait for the slowest of them
            x_start = row64 * stride_x
            x_base = (x_start // VEC) * VEC
            o_start = row64 * stride_o
            o_base = (o_start // VEC) * VEC
            lead = (x_start - x_base).to(tl.int32)
            g = (cols // VEC) * VEC + k * CHUNK
            tl.store(out_ptr + o_base + k * CHUNK + cols, y, mask=(g >= lead) & (g + VEC <= lead + N))
            j = tl.arange(0, VEC)
            tail = ((lead + N) // VEC) * VEC
            if (k == 0) & (lead > 0):
                em = j >= lead
                xe = tl.load(x_ptr + x_base + j, mask=em, other=NEG_INF).to(tl.float32)
                tl.store(out_ptr + o_base + j, (tl.exp(xe - m_ref) * f).to(out_ptr.dtype.element_ty),
                         mask=em)
            if (k == tail // CHUNK) & (tail < lead + N):
                em = tail + j < lead + N
                xe = tl.load(x_ptr + x_base + tail + j, mask=em, other=NEG_INF).to(tl.float32)
                tl.store(out_ptr + o_base + tail + j, (tl.exp(xe - m_ref) * f).to(out_ptr.dtype.element_ty),
                         mask=em)


class TooFewPrograms(ValueError):
    """The device cannot hold all C programs of a row at once (the default then runs online)."""


def supports(N: int) -> str | None:
    if N < MIN_N:
        return (f"a row of {N} columns fits one program's registers (softmax_block), which needs "
                f"no exchange between programs; split takes rows of at least {MIN_N} columns")
    return None


def config(N: int, chunk: int, num_warps: int, prefetch: bool = False, vec: int = 0) -> dict:
    """Chunks of CHUNK columns, C = cdiv(N, CHUNK) per row (C_PAD: C rounded up to a power of two,
    the width of the tensor that polls a row's slots). ``vec`` > 0: rows addressed from their
    16-byte boundary (``triton_src.aligned_frame``), up to vec - 1 positions more a row."""
    if num_warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"num_warps: must be a power of two from 1 to 32, got {num_warps!r}")
    if chunk < 16 or chunk & (chunk - 1):
        raise ValueError(f"chunk: must be a power of two >= 16, got {chunk}")
    if chunk > 32768:
        raise ValueError(f"chunk: {chunk} columns per program would spill (limit 32768)")
    n_chunks = triton.cdiv(N + max(0, vec - 1), chunk)
    return {"CHUNK": chunk, "C": n_chunks, "C_PAD": max(2, next_pow2(n_chunks)),
            "PREFETCH": bool(prefetch), "VEC": int(vec), "num_warps": num_warps}


def with_frame(cfg: dict, x, out) -> dict:
    """``cfg`` with the aligned frame these tensors allow (``triton_src.aligned_frame``): the frame
    follows the tensors' alignment, and it can add a chunk to a row."""
    vec = aligned_frame(x, out)
    if cfg.get("VEC", 0) == vec:
        return cfg
    return dict(cfg, **config(x.shape[1], cfg["CHUNK"], cfg["num_warps"], cfg["PREFETCH"], vec))


def launch_spec(x, out, slots, cfg: dict, grid: int, max_spin: int | None = None) -> Spec:
    M, N = x.shape
    if max_spin is None:
        max_spin = MAX_SPIN_INTERPRETER if interpreting() else MAX_SPIN
    return Spec(softmax_split_kernel, (grid,),
                {"x_ptr": x, "out_ptr": out, "slot_ptr": slots, "N": N, "stride_x": x.stride(0),
                 "stride_o": out.stride(0), "C": cfg["C"], "n_units": M * cfg["C"],
                 "max_spin": max_spin, "CHUNK": cfg["CHUNK"], "C_PAD": cfg["C_PAD"],
                 "PREFETCH": cfg["PREFETCH"], "VEC": cfg.get("VEC", 0)},
                {"num_warps": cfg["num_warps"], "launch_cooperative_grid": COOPERATIVE,
                 **({"maxnreg": cfg["MAXNREG"]} if cfg.get("MAXNREG") else {})})


def _compiled_facts(x, out, slots, cfg: dict) -> dict:
    """Registers, spilled values a thread and programs an SM of this configuration's kernel."""
    probe = bind_spec(launch_spec(x, out, slots, cfg, 1), x.device).compiled
    per_sm = programs_per_sm(probe, cfg["num_warps"], device_facts(x.device))
    return {"regs": probe.n_regs, "spills": probe.n_spills, "per_sm": per_sm,
            "smem": int(probe.metadata.shared or 0), "regs_cap": cfg.get("MAXNREG")}


def compiled_facts(x, out, cfg: dict) -> dict:
    """The compiled kernel's facts for ``cfg`` on these (CUDA) tensors: registers, spilled values a
    thread, programs an SM, shared memory and the register cap (``MAXNREG``) it was compiled
    under. What the planner's register-cap rule reads (``dispatch.with_split_register_cap``)."""
    slots = torch.empty(x.shape[0] * cfg["C"], dtype=torch.int64, device=x.device)
    return _compiled_facts(x, out, slots, cfg)


def capacity(x, out, slots, cfg: dict) -> int:
    """Programs of this configuration the device holds at once (SMs x programs per SM of the
    compiled kernel, its register cap included); under the interpreter every program is a
    thread, all running at once."""
    if interpreting():
        return INTERPRETER_TEAMS * cfg["C"]
    return device_facts(x.device)["sms"] * _compiled_facts(x, out, slots, cfg)["per_sm"]


def bind_launch(x, out, cfg: dict, programs: int | None = None):
    """Zero-argument launch: zero the M*C partial slots (one int64 each, owned by this launch),
    then the kernel on a grid that is a multiple of C and at most what the device holds at once
    (``programs`` to choose a smaller one), compiled under the register cap ``MAXNREG`` of the
    config if it has one (the planner's ``dispatch.with_split_register_cap`` decides it)."""
    M, N = x.shape
    cfg = with_frame(cfg, x, out)
    C = cfg["C"]
    if 2 * M * C >= 2 ** 31:
        raise ValueError(f"x: {M} rows x {C} chunks exceed the kernel's 32-bit unit index")
    slots = torch.zeros(M * C, dtype=torch.int64, device=x.device)
    cap = capacity(x, out, slots, cfg)
    if cap < C:
        raise TooFewPrograms(f"x: a row of {N} columns needs {C} programs of {cfg['CHUNK']} columns at "
                         f"once, but this device holds {cap}; use a larger chunk or online")
    if programs is None:
        grid = min(M * C, cap // C * C)
    else:
        if isinstance(programs, bool) or not isinstance(programs, int) or programs < C or programs % C:
            raise ValueError(f"programs: must be a positive multiple of C = {C} chunks per row, "
                             f"got {programs!r}")
        if programs > cap:
            raise ValueError(f"programs: {programs} exceeds the {cap} programs this device "
                             f"holds at once; the waiting programs would deadlock")
        grid = programs
    spec = launch_spec(x, out, slots, cfg, grid)
    if interpreting():
        def launch():
            slots.zero_()
            interpret_concurrently(softmax_split_kernel, grid, **spec.args)
        launch.grid, launch.compiled, launch.config = grid, None, cfg
        return launch
    kernel = bind_spec(spec, x.device)

    def launch():
        slots.zero_()
        kernel()
    launch.grid, launch.compiled, launch.config = grid, kernel.compiled, cfg
    return launch


def launch_raw(x, out, slots, cfg: dict, grid: int, max_spin: int) -> None:
    """One launch on a grid of your choice with your slots, no checks: for tests of the protocol
    (a grid that is not a multiple of C must end in NaNs, not hang)."""
    spec = launch_spec(x, out, slots, cfg, grid, max_spin)
    if interpreting():
        interpret_concurrently(softmax_split_kernel, grid, **spec.args)
    else:
        softmax_split_kernel[(grid,)](**spec.args, **spec.options)
