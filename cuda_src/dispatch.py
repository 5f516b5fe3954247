"""The CUDA C++ layer's one planner: tuning tables (plain data) and the rules that turn a case into
launch plans, for both launchers of the same ``.cu`` sources (the pybind11 module ``kl_cuda`` and
NVRTC through CuPy). A plan names the kernel instance, its source file, grid, block, dynamic shared
memory, cluster size, cooperative launch, workspaces and the argument list; the launchers only
resolve names and pointers and enqueue it (``backends/cuda_layer.py``, ``backends/cupy_layer.py``).

Pure Python (no torch, no CUDA): it plans without a GPU for an assumed device (``H200``), which is
what ``compile_only``, ``grid`` and the tests use. The build runs this file as a script to emit the
instance tables of the module (``--emit-instances DIR``), so the kernels the planner can pick and
the kernels the module contains are one list.

Rules, not shapes: softmax picks its path by the bytes an SM holds in flight (rows x bytes per row
of the path's resident CTAs) against ``SOFTMAX["resident_target"]``, by row length in bytes, and by
M against the SM count; GEMM picks by TMA legality (16-byte strides and bases), by the wave
efficiency of the output tiles on the SMs, and by a small cost model for split-K; at small M (a
stream of B) by the resident CTAs of the tiled kernel that the split-K factor fills.
"""
from __future__ import annotations

import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

# ---------------------------------------------------------------------------------------------------
# the device the plans are for


@dataclass(frozen=True)
class Device:
    """What the planner needs to know of a GPU. The default is an H100/H200 (used without a GPU)."""
    sms: int = 132
    cc: tuple[int, int] = (9, 0)
    smem_optin: int = 232448      # dynamic shared memory one CTA may opt in to (bytes)
    smem_per_sm: int = 233472     # shared memory of one SM (bytes)
    cooperative: bool = True      # cooperative launch supported
    sm90a: bool = True            # the sm_90a code of this build runs here (wgmma, TMA)


H200 = Device()
THREADS_PER_SM = 2048
REGS_PER_SM = 65536
CTYPE = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
ESIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
DTYPE_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}
ACT_CODE = {"none": 0, "relu": 1, "gelu": 2}


class Decline(ValueError):
    """This path (or variant) cannot take this case; the message says why."""


# ---------------------------------------------------------------------------------------------------
# tuning tables

VECTOR_ADD = {
    "block": 256,             # threads per block
    "unroll": 4,              # most independent 16-byte loads per input per thread (template argument)
    "unrolls": (1, 2, 4),     # the instances compiled: a tuning run may pin one (plan's ``unroll``)
    # the unroll is the largest whose grid still gives every SM a block: on a short vector more
    # blocks (more SMs issuing loads at once) shorten the one round trip the launch waits for,
    # where more loads a thread only make fewer, longer blocks
    "blocks_per_sm": 8,       # resident blocks of 256 threads (the grid is capped at 1024 such waves)
    "max_waves": 1024,
}

SOFTMAX = {
    # Paths in the order the default tries them; the first whose CTAs keep at least
    # resident_target bytes of rows in flight per SM wins (long rows: see below).
    "order": ("warp", "rows", "block"),
    "resident_target": 96 * 1024,   # bytes an SM holds in flight to stream near the HBM rate
    # The warp path needs fewer: its warps are independent (no block barrier, no prefetch), so ~40
    # warps an SM sit in different phases (load / shuffle / store); below this the rows kernel's
    # prefetch wins (measurements: docs/perf-notes.md, Round 6 CUDA C++).
    "warp_resident_target": 32 * 1024,
    # So does the block path on rows of block_min_n .. block_short_max_n columns (the range timed;
    # longer rows keep resident_target): a CTA a row, its loads all issued at once, and a finished
    # CTA's place taken by the next row's CTA at once; it beat the rows kernel's persistent grid
    # on every row of that range timed (docs/perf-notes.md, Round 7). Shorter rows stay with the
    # rows kernel (several a CTA).
    "block_resident_target": 32 * 1024,
    "block_min_n": 1025,
    "block_short_max_n": 4096,
    "warp_max_n": 1024,             # 32 lanes x 32 values
    "rows_max_n": 8192,             # 256 threads x 32 values
    "block_max_n": 32768,           # 1024 threads x 32 values
    "block_ept": 32,                # elements per thread of the block path
    "warp_threads": 128,
    "rows_threads": 256,
    # cluster path: a row that fits ONE CTA's shared memory takes C = 1 (no cluster barrier, no
    # co-scheduling of C CTAs; measured +6..12 points over C = 2/4 at 64-201 KB rows); a longer row
    # takes the smallest C whose slices fit cluster_ctas_per_sm CTAs an SM (2: 64-76 KB slices were
    # best at 256-304 KB bf16 rows, 38 KB slices (C = 8) lost 10 points).
    "cluster_ctas_per_sm": 2,
    # A row that fits one CTA (C = 1) with more rows than resident CTAs goes to the persist kernel:
    # the same shared-memory row, but a persistent CTA copies the next row in, chunk by chunk, as it
    # writes the current one (no per-row launch / barrier init / first-byte latency; at 1 CTA an SM
    # the cluster kernel's SM reads nothing while it writes). ``persist``: whether the default takes
    # it. Off: scripts/gpu_gate.py measured it slower than the C = 1 cluster kernel (with its
    # 16-byte shared-memory reads) on the rows it would take (docs/perf-notes.md, Round 6 measured).
    "persist": False,
    "slice_min": 2 * 1024,          # cluster path: smallest slice worth a CTA (few rows: more CTAs a row)
    "cluster_max": 16,              # CTAs per row (16 is a non-portable cluster size, sm_90)
    "smem_reserve": 1024,           # static shared memory of the cluster kernel, rounded up
    # Long rows go to the split path when their rows are 16-byte aligned, longer than this many
    # bytes, and a split chunk (16384 elements) is at least split_min_chunk_bytes; else cluster.
    "split_min_row_bytes": 128 * 1024,
    "split_min_chunk_bytes": 64 * 1024,
    "split_chunk": 16384,           # columns per split unit (NT threads x 16384 / NT values)
    "split_threads": 512,
    "split_blocks_per_sm": 2,       # the split kernel's launch bound
    "split_max_spin": 1 << 20,      # polls before a waiting split block gives up (writes NaN)
    "online_threads": 512,
    "online_slice": 64 * 1024,      # online path: bytes of row per CTA
    "simple_threads": 256,
}

# Registers per thread the occupancy estimates assume (upper bounds of the ptxas figures for sm_90a;
# tests/test_cuda_layer.py checks every instance against the build log).
REGS = {
    "softmax_warp_kernel": 48, "softmax_block_kernel": 64, "softmax_rows_kernel": 128,
    "softmax_cluster_kernel": 40, "softmax_split_kernel": 128, "softmax_online_kernel": 64,
    "softmax_persist_kernel": 40,
}

GEMM = {
    "peak_flops": {"ws": 640e12, "pingpong": 680e12, "tiled": 320e12},  # sustained mainloop rates (H200)
    "hbm_bytes_per_s": 4.0e12,
    "launch_s": 3e-6,               # one more kernel on the stream (split-K reduction, B repack)
    "max_splits": 16,
    "min_kt_per_split": 4,          # 64-column k-tiles per split-K unit
    "splitk_gain": 1.10,            # split-K must beat the one-pass kernel by this factor
    "group_m": 8,                   # grouped tile order of the persistent kernels
    "repack_min_m": 128,            # below this many rows, copying B to an aligned buffer costs more than it saves
    "tiled_bms": (32, 64, 128),
    # At M <= stream_max_m the one 128-row tile is mostly padding and the GEMM is a stream of B from
    # HBM; every split-K factor streams B at about the same rate per busy SM (sm_stream_bytes_per_s,
    # below an SM's share of HBM; docs/perf-notes.md, Round 6 CUDA C++). The split is then chosen
    # to minimise the k-tiles of B the busiest SM streams (waves x k-tiles per unit).
    "stream_max_m": 64,
    "sm_stream_bytes_per_s": 22e9,
    # Small-M B stream on the tiled kernel (on/off: scripts/gpu_gate.py measures it against the ws
    # split-K kernel and turns it off if it loses). The tiled kernel's tile rows are the smallest
    # of tiled_bms that hold M, so few rows waste little; its CTAs are small (256 threads, 40-64 KB
    # of shared memory), so several share an SM. A stream of B runs at the bytes an SM keeps in
    # flight (resident CTAs x the 3 stages ahead x 8 KB of B a stage): one CTA an SM is short of
    # an SM's share of HBM, a full SM of CTAs is not. Where the N tiles leave SMs short of CTAs,
    # split K until the CTAs fill tiled_wave_fill of one wave of the SMs' resident capacity (all
    # co-resident: no second wave of lone CTAs), within max_splits and with at least
    # tiled_min_kt_per_split k-tiles (of 32) per split; fewer splits while the fp32 partials and
    # the reduction launch cost more than tiled_splitk_max_charge of the unsplit kernel's time (one
    # CTA streaming its column strip of B at tiled_cta_bytes_per_s).
    "tiled_splitk": True,
    "tiled_max_ctas_per_sm": 4,
    # the split fills this fraction of the resident capacity, not all of it: every split's partial
    # plane costs bytes, and the last slots add less stream than their planes cost (timed splits of
    # M <= 64: the best was at 0.5-0.8 of the slots; docs/perf-notes.md, Round 9)
    "tiled_wave_fill": 0.75,
    "tiled_min_kt_per_split": 8,
    "tiled_splitk_max_charge": 0.25,
    "tiled_cta_bytes_per_s": 22e9,
    # registers per thread of the tiled kernel by tile rows (upper bounds of the ptxas figures for
    # sm_90a and sm_80; tests/test_cuda_layer.py checks every instance against the build log)
    "tiled_regs": {32: 64, 64: 80, 128: 128},
}

WS_BM, WS_BK, WS_THREADS = 128, 64, 384
PP_BM, PP_BN, PP_BK, PP_STAGES, PP_THREADS = 128, 128, 64, 5, 384
TILED_BN, TILED_BK, TILED_STAGES, TILED_THREADS = 128, 32, 4, 256
SMEM_PER_CTA_RESERVED = 1024   # shared memory the system keeps per resident CTA (sm_80 and later)


def tiled_smem(bm: int) -> int:
    return TILED_STAGES * (bm * TILED_BK + TILED_BK * TILED_BN) * 2


def tiled_ctas_per_sm(bm: int, dev: Device) -> int:
    """Resident CTAs an SM of the tiled kernel at ``bm`` tile rows: shared memory, threads and
    registers, capped at GEMM['tiled_max_ctas_per_sm']."""
    by_smem = dev.smem_per_sm // (tiled_smem(bm) + SMEM_PER_CTA_RESERVED)
    by_regs = _blocks_per_sm(TILED_THREADS, GEMM["tiled_regs"][bm], GEMM["tiled_max_ctas_per_sm"])
    return max(1, min(by_smem, by_regs))


SIMPLE_TILE = 16


def ws_smem(bn: int) -> int:
    stages = 4 if bn == 256 else 6
    return stages * (WS_BM * WS_BK * 2 + (bn // 64) * WS_BK * 64 * 2) + 2 * stages * 8 + 1024


PP_SMEM = PP_STAGES * (PP_BM * PP_BK * 2 + PP_BK * PP_BN * 2) + 2 * (2 * PP_BM * 64 * 2) + (2 * PP_STAGES + 2) * 8 + 1024

# ---------------------------------------------------------------------------------------------------
# kernel instances (the module's table and NVRTC's name expressions) and argument signatures

SIGNATURES = {  # parameter types in order: ptr / i32 / i64 / tma (a 128-byte CUtensorMap by value)
    "vector_add_simple_kernel": ("ptr", "ptr", "ptr", "i64"),
    "vector_add_vec_kernel": ("ptr", "ptr", "ptr", "i64", "i64"),
    "softmax_simple_kernel": ("ptr", "ptr", "i32", "i64", "i64"),
    "softmax_warp_kernel": ("ptr", "ptr", "i64", "i32", "i64", "i64"),
    "softmax_block_kernel": ("ptr", "ptr", "i32", "i64", "i64"),
    "softmax_rows_kernel": ("ptr", "ptr", "i64", "i32", "i64", "i64"),
    "softmax_online_kernel": ("ptr", "ptr", "i32", "i64", "i64", "i32"),
    "softmax_cluster_kernel": ("ptr", "ptr", "i32", "i64", "i64", "i32"),
    "softmax_persist_kernel": ("ptr", "ptr", "i64", "i32", "i64", "i64"),
    "softmax_split_kernel": ("ptr", "ptr", "ptr", "i32", "i64", "i64", "i32", "i64", "i32"),
    "gemm_simple_kernel": ("ptr", "ptr", "ptr", "ptr", "i32", "i32", "i32", "i64", "i64", "i64", "i32"),
    "gemm_tiled_kernel": ("ptr", "ptr", "ptr", "ptr", "i32", "i32", "i32", "i64", "i64", "i64", "i32", "i32", "i32",
                          "ptr", "i64"),
    "gemm_ws_kernel": ("tma", "tma", "ptr", "ptr", "i32", "i32", "i32", "i64", "i32", "i32", "i32", "i32", "i32",
                       "i32", "i32", "ptr", "i64"),
    "gemm_splitk_reduce_kernel": ("ptr", "i32", "i32", "i32", "i64", "ptr", "ptr", "i64", "i32"),
    "gemm_pad_rows_kernel": ("ptr", "i64", "ptr", "i64", "i32", "i32"),
    "gemm_pingpong_kernel": ("tma", "tma", "tma", "ptr", "i32", "i32", "i32", "i32", "i32", "i32", "i32"),
}


def family(kernel: str) -> str:
    return kernel.split("<", 1)[0]


def _types():
    return (("float", 4), ("__half", 2), ("__nv_bfloat16", 2))


def instances() -> dict[str, list[str]]:
    """{source file: [instance, ...]}: every kernel instance a plan can name, by source."""
    out: dict[str, list[str]] = {}
    out["vector_add.cu"] = [f"vector_add_simple_kernel<{t}>" for t, _ in _types()]
    out["vector_add_vec.cu"] = [f"vector_add_vec_kernel<{t}, {v}, {u}>"
                                for t, es in _types() for v in (1, 16 // es) for u in VECTOR_ADD["unrolls"]]
    out["softmax.cu"] = [f"softmax_simple_kernel<{t}>" for t, _ in _types()]
    out["softmax_warp.cu"] = [f"softmax_warp_kernel<{t}, {v}, {c}>" for t, es in _types() for v in (1, 16 // es)
                              for c in (1, 2, 4, 8, 16, 32) if c * v * 32 <= 1024]
    out["softmax_block.cu"] = [f"softmax_block_kernel<{t}, {v}, {c}>" for t, es in _types() for v in (1, 16 // es)
                               for c in (1, 2, 4, 8, 16, 32) if 8 <= c * v <= 32]
    out["softmax_rows.cu"] = [f"softmax_rows_kernel<{t}, {v}, {32 // v}, {g}>" for t, es in _types()
                              for v in (1, 16 // es) for g in (4, 8, 16, 32, 64, 128, 256)]
    out["softmax_online.cu"] = [f"softmax_online_kernel<{t}, {v}, {c}>" for t, es in _types() for v in (1, 16 // es)
                                for c in (1, 2, 4, 8)]
    out["softmax_cluster.cu"] = [f"softmax_cluster_kernel<{t}, {c}>" for t, _ in _types() for c in (1, 2, 4, 8, 16)]
    out["softmax_persist.cu"] = [f"softmax_persist_kernel<{t}>" for t, _ in _types()]
    out["softmax_split.cu"] = [f"softmax_split_kernel<{t}, {v}, {nt}>" for t, es in _types() for v in (1, 16 // es)
                               for nt in (256, 512)]
    bools = ("true", "false")
    out["gemm_epilogue.cu"] = [f"gemm_simple_kernel<{b}>" for b in bools]
    out["gemm_epilogue_tiled.cu"] = [f"gemm_tiled_kernel<{b}, {bm}, {va}, {vb}>" for b in bools
                                     for bm in GEMM["tiled_bms"] for va in bools for vb in bools]
    out["gemm_epilogue_ws.cu"] = ([f"gemm_ws_kernel<{b}, {bn}>" for b in bools for bn in (128, 256)]
                                  + [f"gemm_splitk_reduce_kernel<{b}>" for b in bools] + ["gemm_pad_rows_kernel"])
    out["gemm_epilogue_pingpong.cu"] = [f"gemm_pingpong_kernel<{b}, {cm}>" for b in bools for cm in (1, 2)]
    return out


def source_of(kernel: str) -> str:
    for src, names in instances().items():
        if kernel in names:
            return src
    raise KeyError(f"kernel: {kernel} is not an instance of any cuda_src file")


# ---------------------------------------------------------------------------------------------------
# plans


@dataclass
class Plan:
    """One kernel launch. ``args``: ((type, value), ...) in the kernel's parameter order; a value is
    an int, a buffer name (``"x"``, ``"out"``, ``"slots"``...) the launcher resolves to a pointer,
    or for ``tma`` a tuple (buffer, rows, cols, ld, box_rows, box_cols)."""
    kernel: str
    grid: tuple[int, int, int]
    block: int
    args: tuple
    smem: int = 0
    cluster: int = 1                 # CTAs per cluster
    cluster_launch: bool = False     # the cluster is a launch attribute (else compile-time dims)
    cooperative: bool = False
    zero: tuple = ()                 # workspace names zeroed on the stream before this launch
    max_dynamic_smem: int = 0        # function attributes, set once in prepare
    carveout: int = -1
    nonportable_cluster: bool = False

    @property
    def source(self) -> str:
        return source_of(self.kernel)


@dataclass
class Launches:
    """What a case runs: one or more plans in stream order, the workspaces they need (name -> bytes,
    allocated once in prepare), and a description for reports."""
    plans: list[Plan]
    workspace: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    @property
    def kernel(self) -> str:
        """The main kernel (the one a report names)."""
        return self.info.get("kernel", self.plans[0].kernel if self.plans else "")


def _pow2_at_least(v: int) -> int:
    return 1 if v <= 1 else 1 << (int(v) - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


ALIGN = {"ptr": 8, "i64": 8, "i32": 4, "tma": 64}
FMT = {"ptr": "<Q", "i64": "<q", "i32": "<i"}


def pack(plan: Plan, pointers: dict, encode_tma=None) -> tuple[bytes, list[int]]:
    """The argument values of ``plan`` packed each at its natural alignment: (blob, offsets).
    ``pointers`` maps buffer names to device addresses; ``encode_tma(ptr, rows, cols, ld, box_rows,
    box_cols) -> 128 bytes`` encodes TMA descriptors."""
    sig = SIGNATURES[family(plan.kernel)]
    if len(sig) != len(plan.args):
        raise ValueError(f"args: {plan.kernel} takes {len(sig)} arguments, the plan has {len(plan.args)}")
    blob = bytearray()
    offsets = []
    for want, (typ, val) in zip(sig, plan.args):
        if typ != want:
            raise ValueError(f"args: {plan.kernel} expects {want}, the plan gives {typ}")
        pad = -len(blob) % ALIGN[typ]
        blob += b"\0" * pad
        offsets.append(len(blob))
        if typ == "tma":
            buf, *dims = val
            desc = encode_tma(pointers[buf], *dims)
            if len(desc) != 128:
                raise ValueError("encode_tma: a CUtensorMap is 128 bytes")
            blob += desc
        elif typ == "ptr":
            blob += struct.pack("<Q", pointers[val] if isinstance(val, str) else int(val))
        else:
            blob += struct.pack(FMT[typ], int(val))
    return bytes(blob), offsets


# ---------------------------------------------------------------------------------------------------
# vector_add

VECTOR_ADD_PATHS = ("auto", "simple")


def plan_vector_add(path: str, n: int, dtype: str, x_mod16: int = 0, y_mod16: int = 0, out_mod16: int = 0,
                    dev: Device = H200, unroll: int | None = None) -> Launches:
    """``*_mod16``: byte address modulo 16 of x, y, out (the 16-byte vector path needs them equal).
    ``unroll``: pin the vector path's loads in flight per thread (one of VECTOR_ADD["unrolls"]),
    for tuning runs; by default the largest up to VECTOR_ADD["unroll"] whose grid has a block for
    every SM (the smallest when none has)."""
    if path not in VECTOR_ADD_PATHS:
        raise ValueError(f"path: {path!r} is not one of {', '.join(VECTOR_ADD_PATHS)}")
    if unroll is not None and unroll not in VECTOR_ADD["unrolls"]:
        raise ValueError(f"unroll: must be one of {VECTOR_ADD['unrolls']}, got {unroll!r}")
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n}")
    t, es = CTYPE[dtype], ESIZE[dtype]
    if path == "simple":
        block = 256
        grid = min(_cdiv(max(n, 1), block), dev.sms * (THREADS_PER_SM // block) * 32)
        p = Plan(f"vector_add_simple_kernel<{t}>", (grid if n else 0, 1, 1), block,
                 (("ptr", "x"), ("ptr", "y"), ("ptr", "out"), ("i64", n)))
        return Launches([p], info={"path": "simple", "kernel": p.kernel, "grid": grid, "block": block})
    same = x_mod16 == out_mod16 and y_mod16 == out_mod16
    vec = 16 // es if same else 1
    head = min(((16 - out_mod16) % 16) // es, n) if same else 0
    b = VECTOR_ADD["block"]
    nvec = (n - head) // vec
    if unroll is None:
        fits = [u for u in VECTOR_ADD["unrolls"] if u <= VECTOR_ADD["unroll"] and _cdiv(nvec, b * u) >= dev.sms]
        unroll = max(fits) if fits else min(VECTOR_ADD["unrolls"])
    full = max(1, _cdiv(nvec, b * unroll))
    grid = min(full, dev.sms * VECTOR_ADD["blocks_per_sm"] * VECTOR_ADD["max_waves"])
    grid = max(grid, _cdiv(vec, b))  # the head and the tail (< vec elements each) need vec threads
    kern = f"vector_add_vec_kernel<{t}, {vec}, {unroll}>"
    p = Plan(kern, (grid if n else 0, 1, 1), b, (("ptr", "x"), ("ptr", "y"), ("ptr", "out"), ("i64", n), ("i64", head)))
    return Launches([p], info={"path": "vec", "kernel": kern, "vec": vec, "head": head, "unroll": unroll,
                               "block": b, "grid": grid})


# ---------------------------------------------------------------------------------------------------
# softmax

SOFTMAX_PATHS = ("auto", "simple", "warp", "block", "rows", "cluster", "persist", "split", "online")


@dataclass(frozen=True)
class RowCase:
    M: int
    N: int
    dtype: str
    rows16: bool    # every row of x and of y starts 16-byte aligned (the VEC instances of most paths)

    @property
    def es(self) -> int:
        return ESIZE[self.dtype]

    @property
    def row_bytes(self) -> int:
        return self.N * self.es


def rows_min_blocks(es: int, vec: int, g: int) -> int:
    """CTAs per SM of a rows-kernel instance (its launch bound; ``rows_min_blocks`` in softmax_rows.cu)."""
    return 3 if vec > 1 and (es == 2 or g <= 32) else 2


def _blocks_per_sm(threads: int, regs: int, cap: int = 32) -> int:
    return max(1, min(cap, THREADS_PER_SM // threads, REGS_PER_SM // (threads * regs)))


def _rowargs(kernel_family: str, c: RowCase, sx: int, sy: int, extra=()):
    if kernel_family in ("softmax_warp_kernel", "softmax_rows_kernel", "softmax_persist_kernel"):
        return (("ptr", "x"), ("ptr", "out"), ("i64", c.M), ("i32", c.N), ("i64", sx), ("i64", sy))
    return (("ptr", "x"), ("ptr", "out"), ("i32", c.N), ("i64", sx), ("i64", sy)) + tuple(extra)


def _softmax_path(path: str, c: RowCase, sx: int, sy: int, dev: Device, threads=0, ept=0, cluster=0,
                  blocks_per_sm=0, max_spin=-1) -> Launches:
    """One concrete path; raises Decline when the path cannot take the case, ValueError for a bad option."""
    T, es, M, N = CTYPE[c.dtype], c.es, c.M, c.N
    vec = 16 // es if c.rows16 else 1
    S = SOFTMAX
    info = {"path": path, "vec": vec}
    if path == "simple":
        p = Plan(f"softmax_simple_kernel<{T}>", (M, 1, 1), S["simple_threads"], _rowargs("", c, sx, sy))
        info.update(threads=p.block, grid=M, resident=0)
        return Launches([p], info=dict(info, kernel=p.kernel))
    if path == "warp":
        if N > S["warp_max_n"]:
            raise Decline(f"N: the warp-per-row path takes N <= {S['warp_max_n']}, got {N}")
        chunks = _pow2_at_least(_cdiv(N, 32 * vec))
        nt = threads or S["warp_threads"]
        if nt > 256 or nt % 32:
            raise ValueError("threads: the warp path takes a multiple of 32 up to 256 threads (8 rows) per block")
        rpb = nt // 32
        kern = f"softmax_warp_kernel<{T}, {vec}, {chunks}>"
        bps = _blocks_per_sm(nt, REGS["softmax_warp_kernel"])
        p = Plan(kern, (_cdiv(M, rpb), 1, 1), nt, _rowargs("softmax_warp_kernel", c, sx, sy))
        info.update(chunks=chunks, threads=nt, rows_per_block=rpb, resident=bps * rpb * c.row_bytes)
    elif path == "block":
        if N > S["block_max_n"]:
            raise Decline(f"N: the block-per-row path holds at most {S['block_max_n']} columns in registers, got {N}")
        if ept not in (0, 8, 16, 32):
            raise ValueError(f"ept: elements per thread must be 0 (default), 8, 16 or 32, got {ept}")
        e = ept or S["block_ept"]
        nt = (_cdiv(N, e) + 31) // 32 * 32
        while nt > 1024 and e < 32:
            e *= 2
            nt = (_cdiv(N, e) + 31) // 32 * 32
        e = max(e, vec)
        if threads:
            if threads * e < N or threads % 32 or threads > 1024:
                raise ValueError(f"threads: {threads} x {e} elements per thread cannot hold N = {N}")
            nt = threads
        kern = f"softmax_block_kernel<{T}, {vec}, {e // vec}>"
        p = Plan(kern, (M, 1, 1), nt, _rowargs("softmax_block_kernel", c, sx, sy))
        bps = _blocks_per_sm(nt, REGS["softmax_block_kernel"])
        info.update(chunks=e // vec, threads=nt, resident=bps * c.row_bytes)
    elif path == "rows":
        if N > S["rows_max_n"]:
            raise Decline(f"N: the rows path holds a row in at most 256 threads x 32 elements: N <= {S['rows_max_n']}, "
                          f"got {N}")
        if ept not in (0, 32):
            raise ValueError(f"ept: the rows path uses 32 elements per thread, got {ept}")
        if threads not in (0, S["rows_threads"]):
            raise ValueError(f"threads: the rows path uses {S['rows_threads']} threads per block, got {threads}")
        if not 0 <= blocks_per_sm <= 32:
            raise ValueError(f"blocks_per_sm: must be 0 (default 2 or 3) .. 32, got {blocks_per_sm}")
        g = max(4, _pow2_at_least(_cdiv(N, 32)))
        nt = S["rows_threads"]
        rpb = nt // g
        bps = blocks_per_sm or rows_min_blocks(es, vec, g)
        need = _cdiv(M, rpb)  # CTA-steps; balanced grid: every CTA runs the same number of steps
        steps = _cdiv(need, dev.sms * bps)
        kern = f"softmax_rows_kernel<{T}, {vec}, {32 // vec}, {g}>"
        p = Plan(kern, (_cdiv(need, steps), 1, 1), nt, _rowargs("softmax_rows_kernel", c, sx, sy))
        # two rows per group in flight: the current one and the prefetched next one
        info.update(groups=g, threads=nt, rows_per_block=rpb, blocks_per_sm=bps,
                    resident=bps * rpb * 2 * c.row_bytes)
    elif path == "cluster":
        cmax = S["cluster_max"] if dev.cc[0] >= 9 else 1
        if cluster not in (0, 1, 2, 4, 8, 16):
            raise ValueError(f"cluster: the cluster path takes 0 (default), 1, 2, 4, 8 or 16, got {cluster}")
        if cluster > cmax:
            raise ValueError("cluster: thread-block clusters need compute capability 9.0 or newer")
        V = 16 // es  # the kernel handles any alignment with 16-byte vectors (scalar head and tail)
        limit = dev.smem_optin - S["smem_reserve"]

        def seg_of(k):
            return _cdiv(_cdiv(N, k), V) * V

        def slice_bytes(k):
            return _cdiv((seg_of(k) + V) * es, 16) * 16

        if cluster:
            k = cluster
        else:
            cands = [k for k in (1, 2, 4, 8, 16) if k <= cmax]
            target = dev.smem_per_sm // S["cluster_ctas_per_sm"] - 2 * S["smem_reserve"]
            k = 1 if slice_bytes(1) <= limit else \
                next((k for k in cands if slice_bytes(k) <= target), 0) or \
                (cmax if slice_bytes(cmax) <= limit else 0)
            if not k:
                raise Decline(f"N: a row of {N * es} bytes does not fit {cmax} CTAs' shared memory ({limit} bytes each)")
            # few rows: more CTAs per row, so that M x C CTAs cover the SMs, while slices stay worth a CTA
            while k < cmax and M * k < dev.sms and slice_bytes(2 * k) >= S["slice_min"]:
                k *= 2
        if slice_bytes(k) > limit:
            raise Decline(f"cluster: {k} CTAs x {limit} bytes of shared memory cannot hold N = {N} "
                          f"({slice_bytes(k)} bytes per CTA)")
        seg, smem = seg_of(k), slice_bytes(k)
        nt = threads or min(512, max(128, _pow2_at_least(_cdiv(seg, V * 8))))
        if nt > 512 or nt % 32:
            raise ValueError("threads: the cluster path takes a multiple of 32 up to 512 threads per block")
        kern = f"softmax_cluster_kernel<{T}, {k}>"
        per_sm = max(1, min(dev.smem_per_sm // (smem + S["smem_reserve"]),
                            _blocks_per_sm(nt, REGS["softmax_cluster_kernel"])))
        p = Plan(kern, (M * k, 1, 1), nt, _rowargs("softmax_cluster_kernel", c, sx, sy, (("i32", seg),)), smem=smem,
                 cluster=k, max_dynamic_smem=smem, carveout=100, nonportable_cluster=k > 8)
        info.update(vec=V, cluster=k, seg=seg, smem=smem, threads=nt, resident=per_sm * (smem - V * es))
    elif path == "persist":
        if dev.cc[0] < 9:
            raise Decline("the persist path needs sm_90 bulk copies and mbarriers")
        if cluster > 1:
            raise ValueError(f"cluster: the persist path holds a whole row in one CTA, got {cluster}")
        V = 16 // es  # any alignment: head and tail (< V elements each) in registers, the body in 16-byte vectors
        smem = max(16, N // V * 16)
        limit = dev.smem_optin - S["smem_reserve"]
        if smem > limit:
            raise Decline(f"N: the persist path holds a row of {N * es} bytes in one CTA's shared memory "
                          f"({limit} bytes)")
        nt = threads or min(512, max(128, _pow2_at_least(_cdiv(N, V * 8))))
        if nt > 512 or nt % 32:
            raise ValueError("threads: the persist path takes a multiple of 32 up to 512 threads per block")
        per_sm = max(1, min(dev.smem_per_sm // (smem + S["smem_reserve"]),
                            _blocks_per_sm(nt, REGS["softmax_persist_kernel"])))
        grid = min(M, dev.sms * per_sm)
        kern = f"softmax_persist_kernel<{T}>"
        p = Plan(kern, (grid, 1, 1), nt, _rowargs("softmax_persist_kernel", c, sx, sy), smem=smem,
                 max_dynamic_smem=smem, carveout=100)
        info.update(vec=V, cluster=1, seg=N, smem=smem, threads=nt, blocks_per_sm=per_sm,
                    rows_per_cta=_cdiv(M, grid), resident=per_sm * smem)
    elif path == "split":
        chunk = S["split_chunk"]
        if N <= 2 * chunk:
            raise Decline(f"N: the split path takes rows longer than {2 * chunk} columns (the block path keeps "
                          f"shorter rows on chip in one block), got N = {N}")
        if not dev.cooperative:
            raise Decline("the split path needs cooperative launch, which this device does not support")
        if threads not in (0, 256, 512):
            raise ValueError(f"threads: the split path takes 256 or 512 threads per block (0: 512), got {threads}")
        nt = threads or S["split_threads"]
        if ept not in (0, chunk // nt):
            raise ValueError(f"ept: the split path holds 16384 / threads = {chunk // nt} elements per thread, got {ept}")
        if cluster > 1:
            raise ValueError(f"cluster: the split path uses no clusters, got {cluster}")
        if not 0 <= blocks_per_sm <= 32:
            raise ValueError(f"blocks_per_sm: must be 0 (default 2) .. 32, got {blocks_per_sm}")
        parts = _cdiv(N, chunk)
        bps = blocks_per_sm or S["split_blocks_per_sm"]
        cap = dev.sms * bps
        if parts > cap:
            raise Decline(f"N: the split path needs C = {parts} co-resident blocks per row (N = {N}), "
                          f"the device holds {cap}")
        grid = min(M * parts, cap // parts * parts)
        if max_spin < -1:
            raise ValueError(f"max_spin: must be -1 (default 2^20 polls) or >= 0, got {max_spin}")
        spin = S["split_max_spin"] if max_spin < 0 else max_spin
        kern = f"softmax_split_kernel<{T}, {vec}, {nt}>"
        units = M * parts
        p = Plan(kern, (grid, 1, 1), nt,
                 (("ptr", "x"), ("ptr", "out"), ("ptr", "slots"), ("i32", N), ("i64", sx), ("i64", sy),
                  ("i32", parts), ("i64", units), ("i32", spin)),
                 cooperative=True, zero=("slots",))
        info.update(parts=parts, chunks=chunk // nt // vec, threads=nt, seg=chunk, blocks_per_sm=bps,
                    resident=bps * chunk * es)
        return Launches([p], workspace={"slots": units * 8}, info=dict(info, kernel=kern, grid=grid))
    elif path == "online":
        k = cluster
        if k == 16:
            raise ValueError("cluster: the online path takes 0 (default), 1, 2, 4 or 8, got 16")
        if not k:
            b = c.row_bytes
            slice_ = S["online_slice"]
            k = 1 if b <= slice_ else 2 if b <= 2 * slice_ else 4 if b <= 4 * slice_ else 8
        if k > 1 and dev.cc[0] < 9:
            if cluster > 1:
                raise ValueError("cluster: thread-block clusters need compute capability 9.0 or newer")
            k = 1
        nt = threads or S["online_threads"]
        if nt > 512:
            raise ValueError("threads: the online path takes at most 512 threads per block")
        seg = _cdiv(_cdiv(N, k), vec) * vec
        kern = f"softmax_online_kernel<{T}, {vec}, {k}>"
        p = Plan(kern, (M * k, 1, 1), nt, _rowargs("softmax_online_kernel", c, sx, sy, (("i32", seg),)), cluster=k)
        info.update(cluster=k, seg=seg, threads=nt, resident=0)
    else:
        raise ValueError(f"path: {path!r} is not one of {', '.join(SOFTMAX_PATHS)}")
    return Launches([p], info=dict(info, kernel=p.kernel, grid=p.grid[0]))


def plan_softmax(path: str, M: int, N: int, dtype: str, sx: int | None = None, sy: int | None = None,
                 x_mod16: int = 0, y_mod16: int = 0, dev: Device = H200, **opts) -> Launches:
    """Plan a row softmax of x [M, N] (row stride sx elements, x at byte address = x_mod16 modulo 16)
    into y [M, N] (row stride sy). ``path`` "auto" is the layer's default (``cuda:softmax``)."""
    if path not in SOFTMAX_PATHS:
        raise ValueError(f"path: {path!r} is not one of {', '.join(SOFTMAX_PATHS)}")
    if dtype not in CTYPE:
        raise ValueError(f"dtype: {dtype!r} is not float32, float16 or bfloat16")
    if M < 1 or not 1 <= N < 2 ** 31 - 64:
        raise ValueError(f"M, N: need M >= 1 and 1 <= N < 2^31 - 64, got M={M}, N={N}")
    sx = N if sx is None else sx
    sy = N if sy is None else sy
    if sx < N or sy < N:
        raise ValueError(f"sx, sy: row strides must be >= N = {N}, got {sx}, {sy}")
    if M * N > 0 and M > 1 and max(sx, sy) * M >= 2 ** 62:
        raise ValueError("M: too many rows")
    es = ESIZE[dtype]
    rows16 = x_mod16 % 16 == 0 and y_mod16 % 16 == 0 and (M == 1 or ((sx * es) % 16 == 0 and (sy * es) % 16 == 0))
    c = RowCase(M, N, dtype, rows16)
    if path != "auto":
        out = _softmax_path(path, c, sx, sy, dev, **opts)
    else:
        out = _softmax_auto(c, sx, sy, dev, **opts)
    if max(p.grid[0] for p in out.plans) > 2 ** 31 - 1:
        raise ValueError(f"M: too many rows for one launch (grid {out.plans[0].grid[0]})")
    return out


def _softmax_auto(c: RowCase, sx: int, sy: int, dev: Device, **opts) -> Launches:
    """The default: rules by bytes in flight per SM, row bytes and M (see SOFTMAX)."""
    S = SOFTMAX
    tried = []
    best = None
    order = list(S["order"])
    if S["block_min_n"] <= c.N <= S["block_short_max_n"]:   # block before rows, on its own target
        order.remove("block")
        order.insert(order.index("rows"), "block")
    for path in order:
        try:
            plan = _softmax_path(path, c, sx, sy, dev, **opts)
        except Decline as e:
            tried.append(str(e))
            continue
        target = S["resident_target"]
        if path == "warp":
            target = S["warp_resident_target"]
        elif path == "block" and S["block_min_n"] <= c.N <= S["block_short_max_n"]:
            target = S["block_resident_target"]
        if plan.info["resident"] >= target:
            return _why(plan, f"{path}: {plan.info['resident']} bytes of rows in flight per SM >= {target}")
        if best is None or plan.info["resident"] > best.info["resident"]:
            best = plan
    cl = None
    try:
        cl = _softmax_path("cluster", c, sx, sy, dev, **opts)
    except Decline as e:
        tried.append(str(e))
    long_row = c.row_bytes > S["split_min_row_bytes"] and S["split_chunk"] * c.es >= S["split_min_chunk_bytes"]
    if long_row and c.rows16:
        try:
            plan = _softmax_path("split", c, sx, sy, dev, **opts)
            # enough units to cover the SMs, or at least as many CTAs as the cluster path would run
            # (few rows: split's units spread a row over more SMs than a cluster's CTAs)
            units = c.M * plan.info["parts"]
            if units >= min(dev.sms, cl.plans[0].grid[0] if cl else dev.sms):
                return _why(plan, f"split: rows of {c.row_bytes} bytes, 16-byte aligned, {c.M} x "
                                  f"{plan.info['parts']} units")
        except Decline as e:
            tried.append(str(e))
    if cl is not None and (best is None or cl.info["resident"] > best.info["resident"]):
        if cl.info["cluster"] == 1 and dev.cc[0] >= 9 and SOFTMAX["persist"]:
            # a whole row in one CTA and more rows than resident CTAs: the persistent kernel streams
            # the next row in while it writes the current one (per-row launch and load latency hidden)
            try:
                ps = _softmax_path("persist", c, sx, sy, dev, **opts)
                if c.M > ps.plans[0].grid[0]:
                    return _why(ps, f"persist: a row of {c.row_bytes} bytes in one CTA, {ps.info['blocks_per_sm']} "
                                    f"CTAs an SM, {ps.info['rows_per_cta']} rows per CTA")
            except Decline as e:
                tried.append(str(e))
        return _why(cl, f"cluster: C = {cl.info['cluster']}, {cl.info['resident']} bytes of slices in flight per SM")
    if best is not None:
        return _why(best, f"{best.info['path']}: the most bytes in flight ({best.info['resident']}) of the paths")
    return _why(_softmax_path("online", c, sx, sy, dev, **opts), "online: " + "; ".join(tried))


def _why(plan: Launches, why: str) -> Launches:
    plan.info["why"] = why
    return plan


# ---------------------------------------------------------------------------------------------------
# gemm_epilogue

GEMM_PATHS = ("auto", "simple", "tiled", "ws", "pingpong", "pingpong_c2", "splitk")


@dataclass(frozen=True)
class GemmCase:
    M: int
    N: int
    K: int
    dtype: str
    act: str
    has_bias: bool
    lda: int
    ldb: int
    ldc: int
    a_mod16: int = 0
    b_mod16: int = 0
    c_mod16: int = 0

    @property
    def bf16(self) -> str:
        return "true" if self.dtype == "bfloat16" else "false"

    def tma_a(self) -> bool:
        return self.K % 8 == 0 and self.lda % 8 == 0 and self.a_mod16 == 0 and self.K > 0

    def tma_b(self) -> bool:
        return self.N % 8 == 0 and self.ldb % 8 == 0 and self.b_mod16 == 0

    def tma_c(self) -> bool:
        return self.ldc % 8 == 0 and self.c_mod16 == 0

    def pair_ok(self) -> int:
        return int(self.ldc % 2 == 0 and self.c_mod16 % 4 == 0)


def _wave_eff(units: int, sms: int) -> float:
    return units / (_cdiv(units, sms) * sms) if units else 1.0


def _ws_time(g: GemmCase, dev: Device, bn: int, splits: int) -> float:
    """Modelled seconds of the ws kernel with `splits` K splits (+ the reduction when splits > 1):
    the larger of the padded tiles' tensor-core time and the HBM time, divided by the wave
    efficiency of the work units on the SMs."""
    G = GEMM
    units = _cdiv(g.M, WS_BM) * _cdiv(g.N, bn) * splits
    flops = 2.0 * _cdiv(g.M, WS_BM) * WS_BM * _cdiv(g.N, bn) * bn * g.K
    hbm = 2.0 * (g.M * g.K + g.K * g.N + g.M * g.N)
    t = max(flops / G["peak_flops"]["ws"], hbm / G["hbm_bytes_per_s"]) / _wave_eff(units, dev.sms)
    if splits > 1:  # the fp32 partials are written and read back, then C is written once
        t += (2.0 * splits * g.M * g.N * 4 + g.M * g.N * 2) / G["hbm_bytes_per_s"] + G["launch_s"]
    return t


def _choose_splits(g: GemmCase, dev: Device, bn: int) -> int:
    """Split-K factor by the cost model: 1 unless splitting beats one pass by GEMM['splitk_gain']."""
    G = GEMM
    kt = _cdiv(g.K, WS_BK)
    best, best_t = 1, _ws_time(g, dev, bn, 1)
    for s in range(2, G["max_splits"] + 1):
        kps = _cdiv(kt, s)
        if kps < G["min_kt_per_split"] or _cdiv(kt, kps) != s:
            continue
        t = _ws_time(g, dev, bn, s)
        if t * G["splitk_gain"] < best_t:
            best, best_t = s, t
    return best


def _stream_splits(g: GemmCase, dev: Device, bn: int = 128) -> int:
    """Split-K factor for a B stream (M <= GEMM['stream_max_m']): the one minimising the modelled
    time of the busiest SM, ceil(units / SMs) x k-tiles per unit x one k-tile of B at the per-SM
    stream rate, plus the fp32 partials and the reduction launch (s > 1)."""
    G = GEMM
    kt, tiles = _cdiv(g.K, WS_BK), _cdiv(g.M, WS_BM) * _cdiv(g.N, bn)
    kt_s = WS_BK * bn * 2 / G["sm_stream_bytes_per_s"]
    best, best_t = 1, None
    for s in range(1, G["max_splits"] + 1):
        kps = _cdiv(kt, s)
        if s > 1 and (kps < G["min_kt_per_split"] or _cdiv(kt, kps) != s):
            continue
        t = _cdiv(tiles * s, dev.sms) * kps * kt_s
        if s > 1:
            t += (2.0 * s * g.M * g.N * 4 + g.M * g.N * 2) / G["hbm_bytes_per_s"] + G["launch_s"]
        if best_t is None or t < best_t:
            best, best_t = s, t
    return best


def _gemm_common_args(g: GemmCase):
    return (("i32", g.M), ("i32", g.N), ("i32", g.K))


def _splitk_ldw(g: GemmCase) -> int:
    """Row stride (fp32 elements) of the split-K workspace: a multiple of 4, so that column pairs are
    8-byte aligned float2 stores (and rows 16-byte aligned)."""
    return _cdiv(g.N, 4) * 4


def _add_splitk_reduce(out: Launches, g: GemmCase, dev: Device, splits: int) -> Launches:
    """Append the split-K fixup to a plan whose main kernel wrote fp32 partials ws[split][M][ldw]:
    the "ws" workspace and gemm_splitk_reduce_kernel, which sums the splits in split order (a
    deterministic result) and applies bias + activation once."""
    ldw = _splitk_ldw(g)
    out.workspace["ws"] = splits * g.M * ldw * 4
    total = g.M * g.N
    out.plans.append(Plan(f"gemm_splitk_reduce_kernel<{g.bf16}>", (max(1, min(_cdiv(total, 256), dev.sms * 8)), 1, 1),
                          256, (("ptr", "ws"), ("i32", splits), ("i32", g.M), ("i32", g.N), ("i64", ldw),
                                ("ptr", "bias"), ("ptr", "c"), ("i64", g.ldc), ("i32", ACT_CODE[g.act]))))
    return out


def _tiled_bm(g: GemmCase) -> int:
    return next((b for b in sorted(GEMM["tiled_bms"]) if b >= g.M), max(GEMM["tiled_bms"]))


def _norm_splits(kt: int, splits: int) -> tuple[int, int]:
    """(splits, k-tiles per split) with no empty split: kps = ceil(kt / s), then s = ceil(kt / kps)."""
    splits = max(1, min(splits, kt))
    kps = max(1, _cdiv(kt, splits))
    return (_cdiv(kt, kps) if kt else 1), kps


def _plan_tiled(g: GemmCase, splits: int = 1, dev: Device = H200) -> Launches:
    va = "true" if g.tma_a() or (g.K % 8 == 0 and g.lda % 8 == 0 and g.a_mod16 == 0) else "false"
    vb = "true" if (g.N % 8 == 0 and g.ldb % 8 == 0 and g.b_mod16 == 0) else "false"
    bm = _tiled_bm(g)
    gy = _cdiv(g.M, bm)
    if gy > 65535:
        raise Decline(f"M: too large for the tiled kernel's grid (M <= {65535 * bm})")
    kt = _cdiv(g.K, TILED_BK)
    splits, kps = _norm_splits(kt, splits)
    kern = f"gemm_tiled_kernel<{g.bf16}, {bm}, {va}, {vb}>"
    smem = tiled_smem(bm)
    gx = _cdiv(g.N, TILED_BN)
    p = Plan(kern, (gx, gy, splits), TILED_THREADS,
             (("ptr", "a"), ("ptr", "b"), ("ptr", "bias"), ("ptr", "c")) + _gemm_common_args(g)
             + (("i64", g.lda), ("i64", g.ldb), ("i64", g.ldc), ("i32", ACT_CODE[g.act]), ("i32", g.pair_ok()),
                ("i32", kps), ("ptr", "ws" if splits > 1 else 0), ("i64", _splitk_ldw(g) if splits > 1 else 0)),
             smem=smem, max_dynamic_smem=smem)
    out = Launches([p], info={"path": "tiled", "kernel": kern, "tile": (bm, TILED_BN, TILED_BK),
                              "vec_a": va == "true", "vec_b": vb == "true", "splits": splits, "kt_per_split": kps,
                              "units": gx * gy * splits})
    if splits > 1:
        _add_splitk_reduce(out, g, dev, splits)
        out.info["path"] = "tiled_splitk"
    return out


def _plan_ws(g: GemmCase, dev: Device, bn: int = 256, splits: int = 1, b_buf: str = "b", ldb: int | None = None,
             group_m: int = 0) -> Launches:
    ldb = g.ldb if ldb is None else ldb
    splits, kps = _norm_splits(_cdiv(g.K, WS_BK), splits)
    tiles_m, tiles_n = _cdiv(g.M, WS_BM), _cdiv(g.N, bn)
    units = tiles_m * tiles_n * splits
    grid = min(units, dev.sms)
    ldw = _splitk_ldw(g)
    smem = ws_smem(bn)
    code = ACT_CODE[g.act]
    main = Plan(f"gemm_ws_kernel<{g.bf16}, {bn}>", (grid, 1, 1), WS_THREADS,
                (("tma", ("a", g.M, g.K, g.lda, WS_BM, 64)), ("tma", (b_buf, g.K, g.N, ldb, WS_BK, 64)),
                 ("ptr", "bias"), ("ptr", "c")) + _gemm_common_args(g)
                + (("i64", g.ldc), ("i32", code), ("i32", tiles_m), ("i32", tiles_n),
                   ("i32", group_m or GEMM["group_m"]), ("i32", g.pair_ok()), ("i32", splits), ("i32", kps),
                   ("ptr", "ws" if splits > 1 else 0), ("i64", ldw)),
                smem=smem, max_dynamic_smem=smem)
    info = {"path": "ws", "kernel": main.kernel, "tile": (WS_BM, bn, WS_BK), "splits": splits, "units": units,
            "grid": grid, "smem": smem}
    out = Launches([main], info=info)
    if splits > 1:
        _add_splitk_reduce(out, g, dev, splits)
        info["path"] = "splitk"
    return out


def _tiled_stream_splits(g: GemmCase, dev: Device) -> tuple[int, str]:
    """Split-K factor of the tiled kernel for a B stream (M <= GEMM['stream_max_m']) and why (the
    rule: GEMM's comment at "tiled_splitk")."""
    G = GEMM
    bm = _tiled_bm(g)
    tiles = _cdiv(g.M, bm) * _cdiv(g.N, TILED_BN)
    kt = _cdiv(g.K, TILED_BK)
    cps = tiled_ctas_per_sm(bm, dev)
    cap = dev.sms * cps
    if tiles >= dev.sms:
        # the N tiles alone give every SM a CTA (the unsplit tiled kernel matched torch there:
        # docs/perf-notes.md, Round 6); a split would add partials and a launch for the rest
        return 1, f"{tiles} tiles of {bm} x {TILED_BN} >= {dev.sms} SMs: no split"
    s = min(int(cap * G["tiled_wave_fill"]) // tiles, G["max_splits"], kt // G["tiled_min_kt_per_split"])
    s = top = _norm_splits(kt, s)[0]
    if s > 1:
        # the unsplit kernel: each SM streams one tile's column strip of B (tiles < SMs) alone
        t1 = kt * TILED_BK * TILED_BN * 2 / G["tiled_cta_bytes_per_s"]

        def charge(n):
            return 2.0 * n * g.M * g.N * 4 / G["hbm_bytes_per_s"] + G["launch_s"]

        while s > 1 and charge(s) > G["tiled_splitk_max_charge"] * t1:
            s = _norm_splits(kt, s - 1)[0]
    why = f"{tiles} tiles x {s} splits for {G['tiled_wave_fill']} of {dev.sms} SMs x {cps} resident CTAs"
    if 1 < s < top:
        why += f" (fewer than {top}: partials + reduction launch > {G['tiled_splitk_max_charge']} of the " \
               "unsplit stream)"
    if s <= 1:
        why = f"{tiles} tile(s), K = {g.K}: no split (too few k-tiles, or the partials would cost more)"
    return max(1, s), why


def _plan_pingpong(g: GemmCase, dev: Device, cm: int = 1, group_m: int = 0) -> Launches:
    tiles_m, tiles_n = _cdiv(g.M, PP_BM), _cdiv(g.N, PP_BN)
    units = _cdiv(tiles_m, cm) * tiles_n
    n = max(1, min(dev.sms // cm, units))
    kern = f"gemm_pingpong_kernel<{g.bf16}, {cm}>"
    p = Plan(kern, (cm * n, 1, 1), PP_THREADS,
             (("tma", ("a", g.M, g.K, g.lda, PP_BM, 64)), ("tma", ("b", g.K, g.N, g.ldb, PP_BK, 64)),
              ("tma", ("c", g.M, g.N, g.ldc, PP_BM, 64)), ("ptr", "bias")) + _gemm_common_args(g)
             + (("i32", ACT_CODE[g.act]), ("i32", tiles_m), ("i32", tiles_n), ("i32", group_m or GEMM["group_m"])),
             smem=PP_SMEM, max_dynamic_smem=PP_SMEM, cluster=cm, cluster_launch=cm > 1)
    return Launches([p], info={"path": "pingpong" if cm == 1 else "pingpong_c2", "kernel": kern,
                               "tile": (PP_BM, PP_BN, PP_BK), "units": units, "grid": cm * n, "smem": PP_SMEM})


def _hopper_why(g: GemmCase, dev: Device) -> str | None:
    if dev.cc != (9, 0):
        return f"needs an sm_90 (Hopper) GPU for wgmma/TMA; this device is sm_{dev.cc[0]}{dev.cc[1]}"
    if not dev.sm90a:
        return "the sm_90a code of this build does not run here (compute_80 PTX was JIT-compiled instead)"
    if g.K < 1:
        return "K = 0: nothing for TMA to load"
    return None


def plan_gemm(path: str, M: int, N: int, K: int, dtype: str = "bfloat16", act: str = "relu", has_bias: bool = True,
              lda: int | None = None, ldb: int | None = None, ldc: int | None = None, a_mod16: int = 0,
              b_mod16: int = 0, c_mod16: int = 0, dev: Device = H200, splits: int = 0, bn: int = 0,
              group_m: int = 0) -> Launches:
    """Plan C = act(A @ B + bias) for A [M, K] (row stride lda), B [K, N] (ldb), C [M, N] (ldc).
    ``path`` "auto" is the layer's default (``cuda:gemm_epilogue``); ``splits``/``bn``/``group_m``
    pin the split-K factor, the ws tile width and the tile grouping (0: the planner's choice)."""
    if path not in GEMM_PATHS:
        raise ValueError(f"path: {path!r} is not one of {', '.join(GEMM_PATHS)}")
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"dtype: fp16/bf16 only, got {dtype}")
    if act not in ACT_CODE:
        raise ValueError(f"act: {act!r} is not one of {', '.join(ACT_CODE)}")
    if min(M, N, K) < 0 or max(M, N, K) >= 2 ** 31:
        raise ValueError(f"M, N, K: sizes in [0, 2^31), got {M}, {N}, {K}")
    lda, ldb, ldc = (K if lda is None else lda), (N if ldb is None else ldb), (N if ldc is None else ldc)
    if lda < max(K, 1) or ldb < max(N, 1) or ldc < max(N, 1):
        raise ValueError(f"lda, ldb, ldc: row strides must be >= K, N, N; got {lda}, {ldb}, {ldc}")
    if bn not in (0, 128, 256):
        raise ValueError(f"bn: the ws kernel's tile width is 128 or 256, got {bn}")
    g = GemmCase(M, N, K, dtype, act, bool(has_bias), lda, ldb, ldc, a_mod16 % 16, b_mod16 % 16, c_mod16 % 16)
    if M == 0 or N == 0:
        return Launches([], info={"path": path, "kernel": "", "note": "empty output: nothing to launch"})
    if path == "simple":
        kern = f"gemm_simple_kernel<{g.bf16}>"
        if _cdiv(M, SIMPLE_TILE) > 65535:
            raise Decline("M: too large for the simple kernel's grid")
        p = Plan(kern, (_cdiv(N, SIMPLE_TILE), _cdiv(M, SIMPLE_TILE), 1), SIMPLE_TILE * SIMPLE_TILE,
                 (("ptr", "a"), ("ptr", "b"), ("ptr", "bias"), ("ptr", "c")) + _gemm_common_args(g)
                 + (("i64", lda), ("i64", ldb), ("i64", ldc), ("i32", ACT_CODE[act])))
        return Launches([p], info={"path": "simple", "kernel": kern, "tile": (16, 16, 16)})
    if path == "tiled":
        return _plan_tiled(g, splits or 1, dev)
    if path in ("ws", "pingpong", "pingpong_c2", "splitk"):
        why = _hopper_why(g, dev)
        if why:
            raise Decline(why)
        if not (g.tma_a() and g.tma_b()):
            raise Decline("TMA needs 16-byte aligned rows and bases of a and b: K, lda, N, ldb multiples of 8 "
                          f"(K={K}, lda={lda}, N={N}, ldb={ldb})")
        if path == "ws":
            return _plan_ws(g, dev, bn or 256, splits or 1, group_m=group_m)
        if path == "splitk":
            b = bn or 128
            s = splits or _choose_splits(g, dev, b)
            if s < 2:
                s = min(GEMM["max_splits"], max(2, _cdiv(g.K, WS_BK) // GEMM["min_kt_per_split"]))
            return _plan_ws(g, dev, b, s, group_m=group_m)
        if not g.tma_c():
            raise Decline(f"the TMA store needs 16-byte aligned rows and base of c: ldc % 8 == 0 (ldc={ldc})")
        return _plan_pingpong(g, dev, 2 if path == "pingpong_c2" else 1, group_m=group_m)
    return _gemm_auto(g, dev)


def _gemm_auto(g: GemmCase, dev: Device) -> Launches:
    """The default: at small M (a stream of B) the tiled kernel, split-K when its tiles leave SMs
    short of resident CTAs; else the Hopper kernels where TMA can read A and B, split-K when the
    output tiles leave SMs idle, a repacked B where only B's stride is the obstacle, else the tiled
    kernel. With GEMM["tiled_splitk"] off, small M takes the ws split-K kernel as before."""
    why = _hopper_why(g, dev)
    stream = g.M <= GEMM["stream_max_m"]
    if stream and GEMM["tiled_splitk"]:
        # a B stream (few rows): the tiled kernel at the smallest tile rows that hold M, with K split
        # until its small CTAs fill tiled_wave_fill of the SMs' resident capacity (any alignment of
        # A and B, any device)
        s, swhy = _tiled_stream_splits(g, dev)
        return _why(_plan_tiled(g, s, dev), f"M = {g.M} <= {GEMM['stream_max_m']}, a stream of B: tiled; " + swhy)
    if why or not g.tma_a():
        return _why(_plan_tiled(g), why or "A is not TMA-readable (K, lda multiples of 8 and a 16-byte base)")
    repack = not g.tma_b()
    if repack and g.M < GEMM["repack_min_m"]:
        return _why(_plan_tiled(g), f"B is not TMA-readable and M = {g.M} < {GEMM['repack_min_m']}: "
                                    "copying B would cost more than the tensor-core path saves")
    if stream and not repack and _cdiv(g.N, TILED_BN) >= dev.sms:
        # (GEMM["tiled_splitk"] off) a B stream whose 32-row tiles alone give every SM a tile: the
        # tiled kernel, no padding rows and no split (it beat split-K at every factor there:
        # docs/perf-notes.md, Round 6)
        return _why(_plan_tiled(g), f"M = {g.M} <= {GEMM['stream_max_m']} and {_cdiv(g.N, TILED_BN)} "
                                    f"column tiles >= {dev.sms} SMs: the tiled kernel streams B without padding rows")
    s = _stream_splits(g, dev, 128) if stream else _choose_splits(g, dev, 128)
    if s > 1:
        plan = _plan_ws(g, dev, 128, s, b_buf="bpad" if repack else "b",
                        ldb=_cdiv(g.N, 8) * 8 if repack else None)
        why = f"split-K {s}: {plan.info['units']} units for {dev.sms} SMs" + \
            (f" (M = {g.M} <= {GEMM['stream_max_m']}: a B stream, fewest k-tiles on the busiest SM)" if stream else "")
    elif not repack and g.tma_c():
        return _why(_plan_pingpong(g, dev), "pingpong: A, B and C are TMA-legal")
    else:
        plan = _plan_ws(g, dev, 256, 1, b_buf="bpad" if repack else "b", ldb=_cdiv(g.N, 8) * 8 if repack else None)
        why = "ws: the output is not TMA-storable" if not repack else "ws on a repacked B"
    if repack:
        ldp = _cdiv(g.N, 8) * 8
        cp = Plan("gemm_pad_rows_kernel", (max(1, min(g.K, dev.sms * 8)), 1, 1), 256,
                  (("ptr", "b"), ("i64", g.ldb), ("ptr", "bpad"), ("i64", ldp), ("i32", g.K), ("i32", g.N)))
        plan.plans.insert(0, cp)
        plan.workspace["bpad"] = g.K * ldp * 2
        plan.info["repack"] = {"ld": ldp}
        why += f"; B copied to a row stride of {ldp} (TMA needs 16-byte strides, ldb = {g.ldb})"
    return _why(plan, why)


# ---------------------------------------------------------------------------------------------------
# build support: the module's instance tables

def emit_instances(out_dir: str) -> list[str]:
    """Write one translation unit per kernel source: it includes the source and registers every
    instance in the module's table under the planner's name. Returns the files written."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for src, names in instances().items():
        lines = [f"// generated by cuda_src/dispatch.py --emit-instances: the instances of {src}",
                 f'#include "{src}"', '#include "kl_registry.h"', "", "namespace {",
                 "const kl::KernelEntry kEntries[] = {"]
        for n in names:
            lines.append(f'    {{"{n}", (const void*)&kl::{n}}},')
        lines += ["};", "const kl::KernelRegistrar kRegistrar(kEntries, sizeof(kEntries) / sizeof(kEntries[0]));",
                  "}  // namespace", ""]
        p = d / (Path(src).stem + "_instances.cu")
        text = "\n".join(lines)
        if not p.is_file() or p.read_text() != text:
            p.write_text(text)
        written.append(str(p))
    for stale in d.glob("*_instances.cu"):
        if str(stale) not in written:
            stale.unlink()
    return written


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--emit-instances":
        for f in emit_instances(sys.argv[2]):
            print(f)
    else:
        print("usage: python cuda_src/dispatch.py --emit-instances DIR", file=sys.stderr)
        sys.exit(2)
