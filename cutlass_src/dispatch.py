"""The CuTe layer's dispatch: its tuning tables (plain data) and its one planner per problem.

Rules, not shapes: the planners look at bytes per row, alignment and waves (work units / SMs),
never at a list of benchmark shapes. A test fixture may monkeypatch a table; nothing reads the
environment.
"""
from __future__ import annotations

from contextlib import contextmanager

DEFAULT_SMS = 132            # H100 SXM / H200; the real count is read from the GPU when present

# -- vector add ---------------------------------------------------------------------------------
# 128-bit accesses a thread makes per operand: VECTOR_ADD_UNROLL[0] while the vector gives every
# SM a CTA at that unroll, else VECTOR_ADD_UNROLL[1]. A short vector's time is one CTA's chain of
# loads, add and store: more, shorter CTAs finish sooner (65536 bf16: 8 CTAs at 4, 32 at 1).
VECTOR_ADD_UNROLL = (4, 1)


def vector_add_unroll(n: int, vec: int, threads: int, sms: int | None = None) -> int:
    """Accesses a thread per operand for ``n`` elements moved ``vec`` at a time (see above)."""
    big, small = VECTOR_ADD_UNROLL
    sms = sms or num_sms()
    return big if -(-n // (threads * big * vec)) >= sms else small


# -- GEMM ---------------------------------------------------------------------------------------
# Candidate (schedule, tile_m, tile_n) and a relative per-tile efficiency: a bigger tile reuses
# each operand byte more (128x256: 85 FLOP per byte of shared memory; 128x128: 64; 64x256: 51),
# so at equal wave utilisation the bigger tile wins. 64-row tiles only for M <= 64, where a
# 128-row tile would spend half its wgmmas on padding rows. (No 64 x 64 tile: its 8 KB B stages
# streamed B slower per SM than 64 x 128's, which the extra units did not make up.)
GEMM_TILES = (
    ("ws", 128, 256, 1.00),
    ("pingpong", 128, 128, 0.94),
    ("pingpong", 64, 256, 1.00),
    ("pingpong", 64, 128, 0.96),
)
GEMM_MAX_SPLITS = 16
GEMM_MIN_KTILES_PER_SPLIT = 4   # a split shorter than this spends more on its fix-up than it saves
# The planner's cost model: predicted microseconds of one candidate (schedule, tile, splits), fitted
# on measured timings of every alternative at M <= 300
# (docs/performance.md, "CuTe DSL / GEMM + epilogue"). A persistent CTA runs ceil(units / SMs)
# units; a unit costs its k-tiles, each the longer of its wgmmas (GEMM_SM_TFLOPS
# x tile efficiency) and its operand bytes (GEMM_SM_GBPS: what one SM's TMA ring pulls), plus
# GEMM_UNIT_US (pipeline fill, epilogue). Split-K adds the fix-up: GEMM_FIXUP_US plus the last
# split reading all S fp32 partials (GEMM_FIXUP_GBPS: measured slow, a large part of a short
# GEMM's time). The whole grid's bytes bound it below at
# GEMM_HBM_GBPS; the two bounds meet in a soft maximum (sum of 4th powers).
GEMM_SM_TFLOPS = 6.6            # per SM: 870 TFLOP/s over 132 SMs
GEMM_SM_GBPS = 90.0             # per SM, operand bytes of a unit's k-tiles
GEMM_UNIT_US = 3.5              # per unit a CTA runs
GEMM_FIXUP_US = 0.5             # per split-K unit: partial written, arrival counted
GEMM_FIXUP_GBPS = 20.0          # the last split's read of S partials (S x tile x 4 bytes)
GEMM_HBM_GBPS = 3300.0          # A + B + C once, whole GPU
GEMM_TIE = 0.03                 # candidates within 3 % of the fastest: best wave balance, then fewest splits
GEMM_CLUSTER_MIN_WAVES = 1.0    # 2x1 clusters (B multicast) once the grid is full
# A or B rows TMA cannot take (K or N not a multiple of 8, or a misaligned view): "realign" (16-byte
# loads from the boundary before each row segment, shifted into place in registers) or "vector"
# (a predicated copy of the widest aligned vectors: down to 2-byte accesses, 8 x the instructions)
GEMM_RAGGED_LOAD = "realign"
# Above GEMM_STAGE_MIN_M rows, an A or B whose rows TMA cannot read may instead be copied once a
# call into a workspace of 16-byte rows (gemm_stage.py) and loaded by TMA: taken where the model's
# time of the TMA plan plus the copies (bytes read and written at GEMM_HBM_GBPS, GEMM_STAGE_LAUNCH_US
# each) beats the ragged plan's modelled time x GEMM_RAGGED_SLOWDOWN (what the realign loads
# measured against the model: 2048 x 2047 x 2048 91.5 us against 23.9, 555 x 1234 x 777 35.6
# against 8.2; docs/performance.md, "CuTe DSL / GEMM + epilogue"). Off until a GPU has run it:
# cute:gemm_epilogue_next plans with GEMM_NEXT.
GEMM_STAGE_MIN_M = 64
GEMM_STAGE_LAUNCH_US = 3.0
GEMM_RAGGED_SLOWDOWN = 4.0
# Tiles offered beside GEMM_TILES with ``wide`` (GEMM_NEXT): ws 128 x 192 (77 FLOP per byte of
# shared memory, between 128 x 128's 64 and 128 x 256's 85: weight between theirs). A grid off the
# 256-column grid can then fill its waves: 3000^3 takes 24 x 16 = 384 tiles (2.91 waves of 132)
# where 128 x 256 left 288 (2.18: the third wave 18 % full) and 128 x 128 576 (4.36). The cost
# model picks it on the busiest SM's work like every other tile. Off until a GPU has run it.
GEMM_TILES_WIDE = (("ws", 128, 192, 0.97),)
GEMM_NEXT = {"stage": True, "wide": True}
K_TILE = 64


def num_sms() -> int:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    except Exception:
        pass
    return DEFAULT_SMS


def max_clusters(cluster_m: int) -> int:
    """Clusters of ``cluster_m`` full-SM CTAs resident at once: the driver's occupancy answer on a
    GPU (an SM count that is not a multiple of the cluster size per GPC leaves some SMs out, and
    a persistent grid larger than what is resident would run a second wave), else SMs / size."""
    if cluster_m == 1:
        return num_sms()
    try:
        import torch

        if torch.cuda.is_available():
            import cutlass.utils as utils

            return int(utils.HardwareInfo(torch.cuda.current_device()).get_max_active_clusters(cluster_m))
    except Exception:
        pass
    return DEFAULT_SMS // cluster_m


def wave_efficiency(units: int, slots: int) -> float:
    """Fraction of the SM-time a persistent grid of ``slots`` CTAs spends on ``units`` equal units."""
    return units / (-(-units // slots) * slots)


def gemm_time_us(M: int, N: int, K: int, tm: int, tn: int, weight: float, splits: int, sms: int) -> float:
    """The cost model's predicted time (microseconds, launch excluded) of an M x N x K 16-bit GEMM
    on ``tm`` x ``tn`` tiles of efficiency ``weight`` split ``splits`` ways over ``sms`` SMs."""
    tiles = -(-M // tm) * -(-N // tn)
    units = tiles * splits
    per_cta = -(-units // sms)
    k_tiles = -(-K // K_TILE)
    k_unit = -(-k_tiles // splits)
    flop_us = 2 * tm * tn * K_TILE / (GEMM_SM_TFLOPS * 1e6 * weight)
    byte_us = (min(tm, M) + tn) * K_TILE * 2 / (GEMM_SM_GBPS * 1e3)
    t = per_cta * (k_unit * max(flop_us, byte_us) + GEMM_UNIT_US)
    if splits > 1:
        t += GEMM_FIXUP_US + splits * tm * tn * 4 / (GEMM_FIXUP_GBPS * 1e3)
    hbm = (M * K + K * N + M * N) * 2 / (GEMM_HBM_GBPS * 1e3)
    return (t ** 4 + hbm ** 4) ** 0.25


def plan_gemm(M: int, N: int, K: int, widths=(8, 8, 8), sms: int | None = None, schedule: str | None = None,
              min_splits: int = 1, tma: bool = True, stage: bool = False, wide: bool = False,
              probe: bool = True) -> dict:
    """plan_search's plan; with ``stage`` (GEMM_NEXT) and more than GEMM_STAGE_MIN_M rows, the A / B
    rows TMA cannot read copied to 16-byte rows (plan["stage"]: the operands) where that models
    faster (see GEMM_STAGE_MIN_M); with ``wide`` (GEMM_NEXT) GEMM_TILES_WIDE among the tiles where
    that models GEMM_TIE faster. ``probe=False``: the resident clusters from ``sms`` alone, no GPU
    asked (``plan``)."""
    tiles = GEMM_TILES
    plan = plan_search(M, N, K, widths, sms, schedule, min_splits, tma, tiles, probe)
    if wide:   # a wide tile only where it models GEMM_TIE faster than the table's best
        wider = plan_search(M, N, K, widths, sms, schedule, min_splits, tma, GEMM_TILES + GEMM_TILES_WIDE, probe)
        if _plan_us(M, N, K, wider, sms) < (1 - GEMM_TIE) * _plan_us(M, N, K, plan, sms):
            plan, tiles = wider, GEMM_TILES + GEMM_TILES_WIDE
    ragged = [op for op, w in zip("ab", widths[:2]) if w < 8]
    if not (stage and tma and ragged and M > GEMM_STAGE_MIN_M):
        return plan
    wide_w = tuple(8 if op in ragged else w for op, w in zip("abc", widths))
    staged = plan_search(M, N, K, wide_w, sms, schedule, min_splits, tma, tiles, probe)
    t_now = _plan_us(M, N, K, plan, sms) * GEMM_RAGGED_SLOWDOWN
    copies = sum(4 * (M * K if op == "a" else K * N) for op in ragged)
    t_stage = _plan_us(M, N, K, staged, sms) + copies / (GEMM_HBM_GBPS * 1e3) + GEMM_STAGE_LAUNCH_US * len(ragged)
    if t_stage >= t_now:
        return plan
    return {**staged, "stage": ragged, "model_us": round(t_stage, 1)}


def _plan_us(M: int, N: int, K: int, plan: dict, sms: int | None) -> float:
    tm, tn = plan["tile"]
    weight = next(w for s, m, n, w in GEMM_TILES + GEMM_TILES_WIDE if (s, m, n) == (plan["schedule"], tm, tn))
    return gemm_time_us(M, N, K, tm, tn, weight, plan["splits"], sms or num_sms())


def plan_search(M: int, N: int, K: int, widths=(8, 8, 8), sms: int | None = None, schedule: str | None = None,
                min_splits: int = 1, tma: bool = True, tiles_table=GEMM_TILES, probe: bool = True) -> dict:
    """Schedule, tile, split count, cluster and load kind per operand for an M x N x K GEMM.

    ``widths``: the widest access (elements) A's, B's and C's rows allow; 8 (16 bytes) means TMA,
    else A and B load by GEMM_RAGGED_LOAD and C stores by a predicated copy of that width
    (``tma=False``: predicated copies everywhere). Among ``tiles_table`` (64-row tiles when M <= 64,
    else 128-row ones; ``schedule`` restricts them) and split counts 1..GEMM_MAX_SPLITS (each split
    >= GEMM_MIN_KTILES_PER_SPLIT k-tiles; at least ``min_splits``), the lowest gemm_time_us;
    among those within GEMM_TIE of it, the best wave_efficiency(tiles * splits), then the fewest
    splits, then the table's order."""
    sms = sms or num_sms()
    def kind(w, operand):
        if w >= 8 and tma:
            return "tma"
        if operand != "c" and tma and GEMM_RAGGED_LOAD == "realign":
            return "realign"
        return f"v{min(int(w), 8)}"

    loads = tuple(kind(w, op) for w, op in zip(widths, "abc"))
    k_tiles = -(-K // K_TILE)
    top = max(1, min(GEMM_MAX_SPLITS, k_tiles // GEMM_MIN_KTILES_PER_SPLIT))
    if min_splits > top:
        raise ValueError(f"K={K}: {k_tiles} k-tiles of {K_TILE} cannot make {min_splits} splits of at least "
                         f"{GEMM_MIN_KTILES_PER_SPLIT}")
    found = []
    for order, (sched, tm, tn, weight) in enumerate(tiles_table):
        if (tm == 64) != (M <= 64) or (schedule and sched != schedule):
            continue
        tiles = -(-M // tm) * -(-N // tn)
        for splits in range(min_splits, top + 1):
            if splits > max(1, min_splits) and tiles * splits > 2 * sms:
                break
            t = gemm_time_us(max(M, 1), max(N, 1), max(K, 1), tm, tn, weight, splits, sms)
            found.append((t, -wave_efficiency(tiles * splits, sms), splits, order, sched, tm, tn, tiles))
    if not found:
        raise ValueError(f"schedule: {schedule!r} has no tile for M={M} (the cooperative schedule needs "
                         f"M > 64; ping-pong takes every M)")
    fastest = min(f[0] for f in found)
    t, _, splits, _, sched, tm, tn, tiles = min((f for f in found if f[0] <= fastest * (1 + GEMM_TIE)),
                                               key=lambda f: f[1:4])
    cluster_m = 1
    if (sched == "ws" and loads[:2] == ("tma", "tma") and -(-M // tm) >= 2
            and tiles >= GEMM_CLUSTER_MIN_WAVES * sms):
        cluster_m = 2
    return {"schedule": sched, "tile": [tm, tn], "cluster_m": cluster_m, "splits": splits,
            "loads": list(loads), "max_clusters": max_clusters(cluster_m) if probe else sms // cluster_m, "tiles": tiles,
            "waves": round(tiles * splits / sms, 3)}


# -- softmax ------------------------------------------------------------------------------------
# Kernel by bytes per row: short rows share a CTA (rows), a row per CTA while the grid has at
# least a CTA per SM to offer and 256 threads hold the row (block; SOFTMAX_BLOCK_DEFAULT_MAX_THREADS,
# else smem), longer rows staged raw in shared memory (smem, below: a CTA or a cluster of C CTAs
# a row) while its M x C CTAs cover the SMs; else - rows too long or too few to fill the GPU -
# chunks held by a persistent grid (split; one chunk per row = a persistent row pipeline;
# docs/performance.md, "CuTe DSL / softmax"). The cluster kernel (each CTA's slice in registers)
# is reached only when asked for or with SOFTMAX_CLUSTER_LONG: not yet run on a GPU.
SOFTMAX_ROWS_MAX_BYTES = 4096
SOFTMAX_BLOCK_MAX_BYTES = 32768
# Short rows: the SM's loads in flight are CTAs x threads x (16-byte vectors a thread holds per row
# buffer). With <= 16 values a thread (2 vectors bf16) and whole-warp groups a 16-vector row left
# half a group's lanes idle and 8-32 KB in flight an SM (docs/performance.md, "CuTe DSL / softmax"). Now 4 vectors a
# thread for every dtype (64 registers by ptxas, so 4 CTAs of 256 an SM: 64 KB in flight) and
# groups down to a lane or two, so a row fills its group.
SOFTMAX_ROWS_VECTORS = 4            # 16-byte vectors per thread per row buffer (two buffers live)
SOFTMAX_ROWS_THREADS = 256
SOFTMAX_ROWS_CTAS_PER_SM = 4        # 1024 threads an SM: <= 64 registers (a launch bound)
SOFTMAX_ROWS_CTAS_PER_SM_LANES16 = 3    # 16-bit rows on groups of < 32 lanes: 67-72 registers
                                        # (ptxas; 64 would spill): 48 KB in flight an SM
SOFTMAX_BLOCK_VALUES = 32           # values per thread (block)
# The default's block kernel up to this many threads a CTA; a row that needs more (16-bit rows of
# 16-32 KB: 512 threads x ~50 registers, so 2 CTAs an SM, where one CTA's reduction and stores
# leave the SM's loads idle) goes to softmax_smem (6 CTAs an SM), which measured well ahead there
# (docs/performance.md, "CuTe DSL / softmax"). fp32 rows up to 32 KB need <= 256.
SOFTMAX_BLOCK_DEFAULT_MAX_THREADS = 256
SOFTMAX_SPLIT_THREADS = 256
SOFTMAX_SPLIT_VECTORS = {4: 16, 2: 8}   # 16-byte vectors a thread holds, by element size: 64 KB
                                        # fp32 / 32 KB 16-bit chunks (16-bit values are not kept
                                        # packed in registers, so 16 would spill)
SOFTMAX_SPLIT_BLOCKS_PER_SM = 2
# The cluster kernel (softmax_cluster.py; only when asked for, not yet run on a GPU): T threads a
# CTA, at most SOFTMAX_CLUSTER_VALUES values a thread (one exponential each, kept in fp32), the
# fewest CTAs C (2 .. SOFTMAX_CLUSTER_MAX; 16 is non-portable) that hold the row; with few rows C
# doubles while the M x C CTAs do not cover the SMs. SOFTMAX_CLUSTER_STAGE: the loads go through
# shared memory by cp.async (no registers held in flight) rather than straight into registers.
# (quack-kernels' softmax has the same mechanisms and leads this layer's smem kernel on long rows:
# docs/performance.md, "CuTe DSL / softmax".)
SOFTMAX_CLUSTER_THREADS = 256
SOFTMAX_CLUSTER_VALUES = 64
SOFTMAX_CLUSTER_MAX = 16
SOFTMAX_CLUSTER_STAGE = True
# Whether the default sends rows longer than SOFTMAX_BLOCK_MAX_BYTES to the cluster kernel (while
# a cluster holds the row and the M x C CTAs cover the SMs) before the smem kernel. Off: not yet
# run on a GPU; on in SOFTMAX_NEXT
SOFTMAX_CLUSTER_LONG = False
# Rows longer than SOFTMAX_BLOCK_MAX_BYTES: the row staged in shared memory by bulk copies, a CTA a
# row (softmax_smem.py) while one CTA's shared memory holds it (a pair instead where one would
# be alone on its SM: SOFTMAX_SMEM_PAIR_MIN_CTAS), else the smallest cluster of C
# CTAs whose slices let SOFTMAX_SMEM_CTAS_PER_SM CTAs share an SM. Why: the register kernels hold
# 64 KB of bf16 an SM (2 CTAs x 512 threads x 32 values at ~2 registers a value), and on 16-bit
# vocabulary rows they measured far below the CUDA kernel that stages each slice in shared memory
# (where C = 1 beat C = 2/4 on rows one CTA holds, and 2 CTAs an SM were best for longer rows;
# docs/performance.md, "CuTe DSL / softmax" and "CUDA C++ / softmax"). Few
# rows: C doubles while M x C < SMs and slices stay >= SOFTMAX_SMEM_MIN_SLICE; the default takes
# the kernel only when its M x C CTAs cover the SMs (else split spreads a row wider).
SOFTMAX_SMEM_PER_SM = 228 * 1024        # shared memory of an SM (H100 / H200)
SOFTMAX_SMEM_PER_CTA = 227 * 1024       # the most one CTA may opt in to
SOFTMAX_SMEM_CTA_RESERVE = 1024         # the driver's reservation per CTA
SOFTMAX_SMEM_CTAS_PER_SM = 2            # slices of a row longer than one CTA holds
# A row one CTA holds but alone on its SM (slice > half the SM's shared memory: its loads idle
# while it reduces and writes) goes to a pair of CTAs when the halves let this many share an SM:
# the pair gained where its halves let 3 share an SM and lost where only 2 (the cluster's
# exchange and co-scheduling cost more than the second CTA buys; docs/performance.md, "CuTe DSL / softmax").
SOFTMAX_SMEM_PAIR_MIN_CTAS = 3
SOFTMAX_SMEM_CLUSTER_MAX = 8            # portable clusters
SOFTMAX_SMEM_MIN_SLICE = 16 * 1024      # few rows: a slice is worth a CTA down to this
SOFTMAX_SMEM_DEFAULT = True             # whether the default takes smem for long rows (the table
                                        # entry a measurement turns off; docs/performance.md, "CuTe DSL / softmax")
# Threads a CTA: what the SM's CTAs (as many as their slices let share it) divide among them, a
# power of two from 128 to SOFTMAX_SMEM_MAX_THREADS: 1536 threads an SM for a row per CTA, 768 for
# a row over a cluster: 2048 threads an SM lost wherever tried, a row per CTA gained up to 1536,
# cluster rows lost a little above 768 (docs/performance.md, "CuTe DSL / softmax").
SOFTMAX_SMEM_THREADS_PER_SM = 1536
SOFTMAX_SMEM_CLUSTER_THREADS_PER_SM = 768
SOFTMAX_SMEM_MAX_THREADS = 512
# The switches built on the CPU and waiting for a GPU: the candidate cute:softmax_next plans with
# these tables set (``switched``), so one run times today's default beside it
SOFTMAX_NEXT = {"SOFTMAX_CLUSTER_LONG": True}


@contextmanager
def switched(changes: dict):
    """This module's tables set to ``changes`` while the block runs (a candidate's planning)."""
    table = globals()
    saved = {k: table[k] for k in changes}
    table.update(changes)
    try:
        yield
    finally:
        table.update(saved)


def _pow2(k: int) -> int:
    return 1 << max(0, (k - 1).bit_length())


def row_vectors(n: int, esize: int, aligned: bool) -> int:
    """16-byte vectors a row of n elements may touch: n / V when every row starts on a 16-byte
    boundary, one more when rows may start anywhere in one."""
    v = 16 // esize
    return -(-n // v) if aligned else -(-(n + v - 1) // v)


def _block_threads(nvec: int, v: int) -> int:
    """Threads of a softmax_block CTA holding a row of ``nvec`` vectors at SOFTMAX_BLOCK_VALUES
    values a thread (the fewest, a power of two from 32); 0 when 1024 are too few."""
    kmax = SOFTMAX_BLOCK_VALUES // v
    return next((t for t in (32, 64, 128, 256, 512, 1024) if -(-nvec // t) <= kmax), 0)


def plan_cluster(M: int, nvec: int, v: int, sms: int, cluster: int | None = None) -> dict | None:
    """softmax_cluster's plan for rows of ``nvec`` vectors: the fewest CTAs C >= 2 of
    SOFTMAX_CLUSTER_THREADS threads that hold a row at SOFTMAX_CLUSTER_VALUES values a
    thread, doubled while M x C < SMs (few rows: more SMs a row), or the forced ``cluster``; None
    when no cluster of at most SOFTMAX_CLUSTER_MAX holds the row."""
    t = SOFTMAX_CLUSTER_THREADS
    kmax = max(1, SOFTMAX_CLUSTER_VALUES // v)
    c = cluster or next((c for c in (2, 4, 8, 16) if c <= SOFTMAX_CLUSTER_MAX
                         and -(-nvec // (c * t)) <= kmax), 0)
    if c not in (2, 4, 8, 16) or -(-nvec // (c * t)) > kmax:
        return None
    while not cluster and 2 * c <= SOFTMAX_CLUSTER_MAX and M * c < sms:
        c *= 2
    return {"kernel": "cluster", "vec": v, "threads": t, "k": -(-nvec // (c * t)), "cluster": c,
            "stage": SOFTMAX_CLUSTER_STAGE}


def _smem_bytes(cap: int) -> int:
    """Dynamic shared memory of a softmax_smem CTA whose slice holds ``cap`` vectors (the kernel's
    ``smem_bytes``: 128 bytes of alignment slack, a 512-byte header, the slice)."""
    return 128 + 512 + 16 * cap


def plan_smem(M: int, N: int, esize: int, sms: int, cluster: int | None = None) -> dict | None:
    """softmax_smem's plan: cluster C, slice capacity (vectors), threads; None when a row does not
    fit SOFTMAX_SMEM_CLUSTER_MAX CTAs' shared memory (or the forced ``cluster``'s). The capacity
    counts the vectors a row touches at any alignment (the kernel finds each row's phase at run
    time)."""
    v = 16 // esize
    nvec = row_vectors(N, esize, False)
    cap = lambda c: -(-nvec // c)
    per_sm = SOFTMAX_SMEM_PER_SM // SOFTMAX_SMEM_CTAS_PER_SM - SOFTMAX_SMEM_CTA_RESERVE
    sizes = [c for c in (1, 2, 4, 8, 16) if c <= SOFTMAX_SMEM_CLUSTER_MAX]
    sharing = lambda c: SOFTMAX_SMEM_PER_SM // (_smem_bytes(cap(c)) + SOFTMAX_SMEM_CTA_RESERVE)  # CTAs an SM
    if _smem_bytes(cap(1)) <= SOFTMAX_SMEM_PER_CTA:
        c = 1
        if sharing(1) == 1 and 2 in sizes and sharing(2) >= SOFTMAX_SMEM_PAIR_MIN_CTAS:
            c = 2
    else:
        c = next((c for c in sizes if _smem_bytes(cap(c)) <= per_sm), 0) or \
            next((c for c in sizes if _smem_bytes(cap(c)) <= SOFTMAX_SMEM_PER_CTA), 0)   # 1 CTA an SM
    if cluster:
        c = cluster if cluster in (1, 2, 4, 8, 16) and _smem_bytes(cap(cluster)) <= SOFTMAX_SMEM_PER_CTA else 0
    if not c:
        return None
    while not cluster and 2 * c in sizes and M * c < sms and cap(2 * c) * 16 >= SOFTMAX_SMEM_MIN_SLICE:
        c *= 2
    per_sm_ctas = max(1, sharing(c))
    budget = SOFTMAX_SMEM_THREADS_PER_SM if c == 1 else SOFTMAX_SMEM_CLUSTER_THREADS_PER_SM
    threads = min(SOFTMAX_SMEM_MAX_THREADS, max(128, 1 << (max(1, budget // per_sm_ctas).bit_length() - 1)))
    return {"kernel": "smem", "vec": v, "threads": threads, "cluster": c, "cap": cap(c), "smem": _smem_bytes(cap(c)),
            "ctas_per_sm": min(per_sm_ctas, 2048 // threads)}


# -- the layer contract (kltools.plan): variants by algorithm word, plan(problem, facts) ----------
def _src(file: str, kernels: tuple, host: tuple = ()):
    from kltools.plan import Source
    return (Source(f"cutlass_src/{file}", kernels=kernels, host=host),)


def _kernel_class(file: str, cls: str, *host: str):
    """A CuTe kernel class: its @cute.kernel method, and as host its @cute.jit launcher and the
    named host functions."""
    return _src(file, (f"{cls}.kernel",), (f"{cls}.__call__", *host))


#: the device pieces of attention_tma.py's kernel (the warp-specialised variant shares them)
ATTENTION_TMA_PIECES = ("AttentionTma.shared", "AttentionTma.tma_views", "AttentionTma.key_tiles",
                        "AttentionTma.load_q", "AttentionTma.load_kv", "AttentionTma.consume",
                        "AttentionTma.normalise", "AttentionTma.store_o", "AttentionTma.wgmma",
                        "AttentionTma.online_softmax", "wgmma_mn_view", "a_view")

#: the variants the defaults plan among, by algorithm word: kernel files, entry points and the host
#: entries that bind them ("simple": the two-pass twin's kernel, for rows longer than split holds)
VARIANTS = {
    "vector_add": {"unmasked": _kernel_class("vector_add_unmasked.py", "VectorAdd", "prepare_vector_add",
                                             "_compile", "validate")},
    "softmax": {"rows": _kernel_class("softmax_rows.py", "SoftmaxRows", "prepare_softmax_rows", "compile_rows"),
                "block": _kernel_class("softmax_block.py", "SoftmaxBlock", "prepare_softmax_block", "compile_block"),
                # with the helpers it shares with the split and cluster kernels
                "smem": _src("softmax_smem.py", ("SoftmaxSmem.kernel", "SoftmaxSmem.vector"),
                             ("SoftmaxSmem.__call__", "prepare_softmax_smem", "compile_smem", "smem_bytes"))
                + _src("softmax_split.py", ("bulk_g2s", "merge")) + _src("softmax_cluster.py", ("load_peer_f32",)),
                "split": _kernel_class("softmax_split.py", "SoftmaxSplit", "prepare_softmax_split", "compile_split",
                                       "_slots"),
                "cluster": _src("softmax_cluster.py", ("SoftmaxCluster.kernel", "load_peer_i64"),
                                ("SoftmaxCluster.__call__", "prepare_softmax_cluster", "compile_cluster"))
                + _src("softmax_split.py", ("pack_pair", "unpack_pair")),
                "simple": _src("softmax.py", ("SoftmaxSimple.kernel",), ("SoftmaxSimple.__call__",))},
    # the schedules; split-K's fix-up and the predicated copies are modes of the family's base
    # (bases reached through ``self``): a plan names them where its splits and loads use them
    "gemm_epilogue": {"ws": _src("gemm_epilogue_ws.py", ("GemmWS.kernel",)),
                      "pingpong": _src("gemm_epilogue_pingpong.py", ("GemmPingpong.kernel", "GemmPingpong.step_over"))},
    # the fourth problem's rules are dispatch_attention.py's; "simple": the twin's kernel, where TMA
    # cannot take a tensor or the GPU is not sm_90
    "attention": {"tma": _src("attention_tma.py", ("AttentionTma.kernel", "AttentionTma.release",
                                                   "AttentionTma.consumer_sync", *ATTENTION_TMA_PIECES),
                              ("AttentionTma.__call__", "AttentionTma.__init__", "compile_tma",
                               "prepare_attention_tma", "tma_ready"))
                  + _src("attention.py", ("online_softmax_rows", "quad_reduce"),
                         ("validate", "attention_args", "fake_qkvo")),
                  "simple": _src("attention.py", ("AttentionSimple.kernel", "AttentionSimple.online_softmax",
                                                  "online_softmax_rows", "gemm_slices", "load_tile", "quad_reduce",
                                                  "mn_view"),
                                 ("AttentionSimple.__call__", "prepare_attention_simple", "_compile", "validate",
                                  "attention_args", "fake_qkvo"))},
}
GEMM_MODES = {"splitk": _src("gemm_epilogue_splitk.py", ("SplitK.splitk_fixup", "split_range")),
              "tiled": _src("gemm_epilogue_tiled.py", ("TiledCopies.gmem_copy", "TiledCopies.copy_predicated",
                                                        "TiledCopies.c_copy"))}


def _widths(facts) -> tuple[int, int, int]:
    """Widest access for A, B and C in elements (``gemm_launch.operand_widths`` on facts)."""
    def width(*qs):
        a = 16
        for q in qs:
            while a > 2 and int(q) % a:
                a //= 2
        return a // 2
    ops, M, N, K = facts.operands, facts.M, facts.N, facts.K
    return (width(K * 2, ops["a"].strides[0] * 2 if M > 1 else 16, ops["a"].addr16),
            width(N * 2, ops["b"].strides[0] * 2 if K > 1 else 16, ops["b"].addr16),
            width(N * 2, ops["out"].strides[0] * 2 if M > 1 else 16, ops["out"].addr16))


def plan(problem: str, facts):
    """The default's plan (``cute:<problem>``) for one case given as ``kltools.plan.Facts``: the
    kernel (softmax), the schedule (GEMM: with split-K's fix-up and the predicated copies where its
    splits and loads take them) and the configuration ``plan_softmax`` / ``plan_gemm`` give."""
    from kltools.plan import check_problem, make_plan
    check_problem(problem, VARIANTS)
    sms = facts.device.sms
    if problem == "vector_add":
        return make_plan(problem, "unmasked", VARIANTS, {"unroll": VECTOR_ADD_UNROLL})
    if problem == "softmax":
        cfg = plan_softmax(facts.M, facts.N, facts.esize, facts.rows16("x", "out"), sms)
        return make_plan(problem, cfg["kernel"], VARIANTS, cfg)
    if problem == "attention":
        from .dispatch_attention import plan_attention
        es = facts.esize
        tma = all(op.addr16 == 0 and all(s * es % 16 == 0 for s in op.strides[:3])
                  for op in facts.operands.values())
        cfg = plan_attention(facts.B, facts.Hq, facts.Sq, facts.D, es, tma=tma,
                             hopper=tuple(facts.device.cc) == (9, 0), sms=sms)
        return make_plan(problem, cfg["kernel"], VARIANTS, cfg)
    cfg = plan_gemm(facts.M, facts.N, facts.K, _widths(facts), sms, probe=False)
    modes = (("splitk",) if cfg["splits"] > 1 else ()) + (("tiled",) if set(cfg["loads"]) - {"tma"} else ())
    srcs = VARIANTS[problem][cfg["schedule"]] + tuple(s for m in modes for s in GEMM_MODES[m])
    return make_plan(problem, cfg["schedule"], VARIANTS, cfg, sources=srcs)


def plan_softmax(M: int, N: int, esize: int, aligned: bool = True, sms: int | None = None,
                 kernel: str | None = None) -> dict:
    """The kernel and its configuration for an M x N softmax of ``esize``-byte elements; ``aligned``:
    every row of input and output starts on a 16-byte boundary. ``kernel`` forces one of rows /
    block / split / cluster / smem (ValueError when it cannot take the shape). Unforced, a row longer than
    the split grid holds goes to the two-pass kernel (the teaching twin), which takes any N."""
    sms = sms or num_sms()
    v = 16 // esize
    nvec = row_vectors(N, esize, aligned)
    row_bytes = N * esize
    if kernel is None:
        if row_bytes <= SOFTMAX_ROWS_MAX_BYTES:
            kernel = "rows"
        elif row_bytes <= SOFTMAX_BLOCK_MAX_BYTES and M >= sms:
            kernel = "block"
            if SOFTMAX_SMEM_DEFAULT and _block_threads(nvec, v) > SOFTMAX_BLOCK_DEFAULT_MAX_THREADS:
                if sp := plan_smem(M, N, esize, sms):
                    return sp
        elif SOFTMAX_CLUSTER_LONG and row_bytes > SOFTMAX_BLOCK_MAX_BYTES and \
                (cp := plan_cluster(M, nvec, v, sms)) and M * cp["cluster"] >= sms:
            return cp
        elif SOFTMAX_SMEM_DEFAULT and row_bytes > SOFTMAX_BLOCK_MAX_BYTES and \
                (sp := plan_smem(M, N, esize, sms)) and M * sp["cluster"] >= sms:
            return sp
        else:
            kernel = "split"
            t, kmax = SOFTMAX_SPLIT_THREADS, SOFTMAX_SPLIT_VECTORS[esize]
            if -(-nvec // (t * kmax)) > sms * SOFTMAX_SPLIT_BLOCKS_PER_SM:
                return {"kernel": "simple", "threads": 256}
    if kernel == "rows":
        kmax = SOFTMAX_ROWS_VECTORS
        for g in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
            if -(-nvec // g) <= kmax:
                threads = max(SOFTMAX_ROWS_THREADS, g)
                per_sm = SOFTMAX_ROWS_CTAS_PER_SM_LANES16 if esize == 2 and g < 32 else SOFTMAX_ROWS_CTAS_PER_SM
                per_sm = max(1, per_sm * SOFTMAX_ROWS_THREADS // threads)
                return {"kernel": "rows", "vec": v, "group": g, "k": _pow2(-(-nvec // g)),
                        "threads": threads, "rows_per_cta": threads // g,
                        "grid_cap": sms * per_sm, "ctas_per_sm": per_sm}
        raise ValueError(f"N={N}: rows of {row_bytes} bytes are longer than the short-row kernel takes "
                         f"({512 * kmax * 16} bytes)")
    if kernel == "block":
        if t := _block_threads(nvec, v):
            return {"kernel": "block", "vec": v, "threads": t, "k": _pow2(-(-nvec // t)), "cluster": 1}
        kmax = SOFTMAX_BLOCK_VALUES // v
        raise ValueError(f"N={N}: a row of {row_bytes} bytes does not fit one CTA's registers "
                         f"({1024 * kmax * 16} bytes)")
    if kernel == "cluster":
        if cp := plan_cluster(M, nvec, v, sms):
            return cp
        raise ValueError(f"N={N}: a row of {row_bytes} bytes does not fit the registers of a cluster of "
                         f"{SOFTMAX_CLUSTER_MAX} CTAs ({SOFTMAX_CLUSTER_VALUES} values a thread)")
    if kernel == "split":
        t = SOFTMAX_SPLIT_THREADS
        kmax = SOFTMAX_SPLIT_VECTORS[esize]
        cap = sms * SOFTMAX_SPLIT_BLOCKS_PER_SM
        parts = -(-nvec // (t * kmax))
        if M * parts < cap:            # too few chunks to fill the GPU: spread each row wider
            parts = max(parts, min(cap // max(M, 1), -(-nvec // t)))
        if parts > cap:
            raise ValueError(f"N={N}: a row needs {parts} co-resident CTAs of {t * kmax * 16} bytes; "
                             f"the GPU holds {cap}")
        k = -(-nvec // (parts * t))
        return {"kernel": "split", "vec": v, "threads": t, "k": k, "parts": parts, "grid_cap": cap,
                "grid": min(M * parts, cap // parts * parts)}
    if kernel == "smem":
        sp = plan_smem(M, N, esize, sms)
        if sp:
            return sp
        raise ValueError(f"N={N}: a row of {row_bytes} bytes does not fit the shared memory of a cluster of "
                         f"{SOFTMAX_SMEM_CLUSTER_MAX} CTAs")
    raise ValueError(f"kernel: {kernel!r} is not one of rows, block, split, cluster, smem")
