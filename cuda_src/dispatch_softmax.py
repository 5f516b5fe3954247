"""softmax plans of the CUDA C++ layer (``dispatch`` is the entry): the path by the bytes an SM
holds in flight (rows x bytes per row of the path's resident CTAs) against
``SOFTMAX["resident_target"]``, by row length in bytes, alignment and M against the SM count
(warp, rows, block; long rows to smem (staged in the shared memory of a CTA, or of a cluster of C
CTAs) or split; online as the fallback)."""
from __future__ import annotations

from dataclasses import dataclass

from .dispatch_common import (CTYPE, ESIZE, H200, Decline, Device, Launches, Plan, _blocks_per_sm, _cdiv,
                              _pow2_at_least, _types, _why)

# ---------------------------------------------------------------------------------------------------
# tuning table

SOFTMAX = {
    # Paths in the order the default tries them; the first whose CTAs keep at least
    # resident_target bytes of rows in flight per SM wins (long rows: see below).
    "order": ("warp", "rows", "block"),
    "resident_target": 96 * 1024,   # bytes an SM holds in flight to stream near the HBM rate
    # The warp path needs fewer: its warps are independent (no block barrier, no prefetch), so ~40
    # warps an SM sit in different phases (load / shuffle / store); below this the rows kernel's
    # prefetch wins (docs/performance.md, "CUDA C++ / softmax").
    "warp_resident_target": 32 * 1024,
    # So does the block path on rows of block_min_n .. block_short_max_n columns (the range timed;
    # longer rows keep resident_target): a CTA a row, its loads all issued at once, and a finished
    # CTA's place taken by the next row's CTA at once; it beat the rows kernel's persistent grid
    # on every row of that range timed (docs/performance.md, "CUDA C++ / softmax"). Shorter rows stay with the
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
    # the rows kernel holds 32 elements a thread; 8 / 16 (rows of <= 64 x 8 / 16 columns: G up to 64)
    # halve or quarter the padded slots of very short rows (N <= 64: 128 slots for 48 columns at 32).
    # Pinned only (ept=), for tuning and python -m harness check cuda: those instances have not run on a GPU.
    "rows_short_epts": (8, 16),
    "rows_short_max_g": 64,
    # smem path (the row staged raw in shared memory, softmax_smem.cu): a row that fits ONE CTA's
    # shared memory takes C = 1 (a CTA a row: no cluster barrier, no co-scheduling of C CTAs); a
    # longer row takes the smallest cluster of C CTAs whose slices fit smem_ctas_per_sm CTAs an SM
    # (the measurements behind both: docs/performance.md, "CUDA C++ / softmax").
    "smem_ctas_per_sm": 2,
    "slice_min": 2 * 1024,          # smem path: smallest slice worth a CTA (few rows: more CTAs a row)
    "smem_cluster_max": 16,         # CTAs per row (16 is a non-portable cluster size, sm_90)
    "smem_reserve": 1024,           # static shared memory of the smem kernel, rounded up
    # Long rows go to the split path when their rows are 16-byte aligned, longer than this many
    # bytes, and a split chunk (16384 elements) is at least split_min_chunk_bytes; else smem.
    "split_min_row_bytes": 128 * 1024,
    "split_min_chunk_bytes": 64 * 1024,
    "split_chunk": 16384,           # columns per split unit (NT threads x 16384 / NT values)
    # Few long rows (M x 16384-column units < SMs: one fp32 row of 10^6 columns is 62 units for 132
    # SMs) leave SMs idle; the shorter chunks (256 threads) spread them: the largest chunk of
    # split_chunks whose M x parts units cover the SMs (else the smallest). The split variant
    # (cuda:softmax_split) applies it; the default only when split_fill_sms is on, because the
    # 8192 / 4096 chunks have not run on a GPU yet (python -m harness check cuda verifies and times them).
    "split_chunks": (16384, 8192, 4096),
    "split_fill_sms": False,
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
    "softmax_smem_kernel": 40, "softmax_split_kernel": 128, "softmax_online_kernel": 64,
}

# ---------------------------------------------------------------------------------------------------
# kernel instances (the module's table and NVRTC's name expressions) and argument signatures

SIGNATURES = {  # parameter types in order: ptr / i32 / i64 / tma (a 128-byte CUtensorMap by value)
    "softmax_simple_kernel": ("ptr", "ptr", "i32", "i64", "i64"),
    "softmax_warp_kernel": ("ptr", "ptr", "i64", "i32", "i64", "i64"),
    "softmax_block_kernel": ("ptr", "ptr", "i32", "i64", "i64"),
    "softmax_rows_kernel": ("ptr", "ptr", "i64", "i32", "i64", "i64"),
    "softmax_online_kernel": ("ptr", "ptr", "i32", "i64", "i64", "i32"),
    "softmax_smem_kernel": ("ptr", "ptr", "i32", "i64", "i64", "i32"),
    "softmax_split_kernel": ("ptr", "ptr", "ptr", "i32", "i64", "i64", "i32", "i64", "i32"),
}


def instances() -> dict[str, list[str]]:
    """{source file: [instance, ...]}: every kernel instance a plan can name, by source."""
    out: dict[str, list[str]] = {}
    out["softmax.cu"] = [f"softmax_simple_kernel<{t}>" for t, _ in _types()]
    out["softmax_warp.cu"] = [f"softmax_warp_kernel<{t}, {v}, {c}>" for t, es in _types() for v in (1, 16 // es)
                              for c in (1, 2, 4, 8, 16, 32) if c * v * 32 <= 1024]
    out["softmax_block.cu"] = [f"softmax_block_kernel<{t}, {v}, {c}>" for t, es in _types() for v in (1, 16 // es)
                               for c in (1, 2, 4, 8, 16, 32) if 8 <= c * v <= 32]
    out["softmax_rows.cu"] = [f"softmax_rows_kernel<{t}, {v}, {32 // v}, {g}>" for t, es in _types()
                              for v in (1, 16 // es) for g in (4, 8, 16, 32, 64, 128, 256)]
    out["softmax_rows.cu"] += [f"softmax_rows_kernel<{t}, {v}, {e // v}, {g}>" for t, es in _types()
                               for v in (1, 16 // es) for e in SOFTMAX["rows_short_epts"] if e >= v
                               for g in (4, 8, 16, 32, 64) if g <= SOFTMAX["rows_short_max_g"]]
    out["softmax_online.cu"] = [f"softmax_online_kernel<{t}, {v}, {c}>" for t, es in _types() for v in (1, 16 // es)
                                for c in (1, 2, 4, 8)]
    out["softmax_smem.cu"] = [f"softmax_smem_kernel<{t}, {c}>" for t, _ in _types() for c in (1, 2, 4, 8, 16)]
    out["softmax_split.cu"] = [f"softmax_split_kernel<{t}, {v}, {nt}, {ch}>" for t, es in _types() for v in (1, 16 // es)
                               for nt, ch in ((256, 16384), (512, 16384), (256, 8192), (256, 4096))]
    return out


# ---------------------------------------------------------------------------------------------------
# plans

_NO_CLUSTERS = ("thread-block clusters need code compiled for sm_90 or newer running on the device "
                "(compute capability {cc}: the module's compute_80 code or an older GPU)")

SOFTMAX_PATHS = ("auto", "simple", "warp", "block", "rows", "smem", "split", "online")


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


def _rowargs(kernel_family: str, c: RowCase, sx: int, sy: int, extra=()):
    if kernel_family in ("softmax_warp_kernel", "softmax_rows_kernel"):
        return (("ptr", "x"), ("ptr", "out"), ("i64", c.M), ("i32", c.N), ("i64", sx), ("i64", sy))
    return (("ptr", "x"), ("ptr", "out"), ("i32", c.N), ("i64", sx), ("i64", sy)) + tuple(extra)


def _one_launch(p: Plan, info: dict) -> Launches:
    return Launches([p], info=dict(info, kernel=p.kernel, grid=p.grid[0]))


def _path_simple(c: RowCase, sx: int, sy: int, dev: Device, info: dict, **_) -> Launches:
    p = Plan(f"softmax_simple_kernel<{CTYPE[c.dtype]}>", (c.M, 1, 1), SOFTMAX["simple_threads"],
             _rowargs("", c, sx, sy))
    info.update(threads=p.block, grid=c.M, resident=0)
    return Launches([p], info=dict(info, kernel=p.kernel))


def _path_warp(c: RowCase, sx: int, sy: int, dev: Device, info: dict, threads=0, **_) -> Launches:
    S, N, vec = SOFTMAX, c.N, info["vec"]
    if N > S["warp_max_n"]:
        raise Decline(f"N: the warp-per-row path takes N <= {S['warp_max_n']}, got {N}")
    chunks = _pow2_at_least(_cdiv(N, 32 * vec))
    nt = threads or S["warp_threads"]
    if nt > 256 or nt % 32:
        raise ValueError("threads: the warp path takes a multiple of 32 up to 256 threads (8 rows) per block")
    rpb = nt // 32
    kern = f"softmax_warp_kernel<{CTYPE[c.dtype]}, {vec}, {chunks}>"
    bps = _blocks_per_sm(nt, REGS["softmax_warp_kernel"])
    p = Plan(kern, (_cdiv(c.M, rpb), 1, 1), nt, _rowargs("softmax_warp_kernel", c, sx, sy))
    info.update(chunks=chunks, threads=nt, rows_per_block=rpb, resident=bps * rpb * c.row_bytes)
    return _one_launch(p, info)


def _path_block(c: RowCase, sx: int, sy: int, dev: Device, info: dict, threads=0, ept=0, **_) -> Launches:
    S, N, vec = SOFTMAX, c.N, info["vec"]
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
    kern = f"softmax_block_kernel<{CTYPE[c.dtype]}, {vec}, {e // vec}>"
    p = Plan(kern, (c.M, 1, 1), nt, _rowargs("softmax_block_kernel", c, sx, sy))
    bps = _blocks_per_sm(nt, REGS["softmax_block_kernel"])
    info.update(chunks=e // vec, threads=nt, resident=bps * c.row_bytes)
    return _one_launch(p, info)


def _path_rows(c: RowCase, sx: int, sy: int, dev: Device, info: dict, threads=0, ept=0, blocks_per_sm=0,
               **_) -> Launches:
    S, N, vec = SOFTMAX, c.N, info["vec"]
    if N > S["rows_max_n"]:
        raise Decline(f"N: the rows path holds a row in at most 256 threads x 32 elements: N <= {S['rows_max_n']}, "
                      f"got {N}")
    if ept not in (0, 32, *S["rows_short_epts"]):
        raise ValueError(f"ept: the rows path holds 32 elements a thread ({', '.join(map(str, S['rows_short_epts']))} "
                         f"pinned, for short rows), got {ept}")
    e = ept or 32
    if e < vec:
        raise ValueError(f"ept: {e} elements a thread is less than one {vec}-element vector")
    if threads not in (0, S["rows_threads"]):
        raise ValueError(f"threads: the rows path uses {S['rows_threads']} threads per block, got {threads}")
    if not 0 <= blocks_per_sm <= 32:
        raise ValueError(f"blocks_per_sm: must be 0 (default 2 or 3) .. 32, got {blocks_per_sm}")
    g = max(4, _pow2_at_least(_cdiv(N, e)))
    if e != 32 and g > S["rows_short_max_g"]:
        raise Decline(f"N: {e} elements a thread hold rows of at most {S['rows_short_max_g'] * e} columns, got {N}")
    nt = S["rows_threads"]
    rpb = nt // g
    bps = blocks_per_sm or rows_min_blocks(c.es, vec, g)
    need = _cdiv(c.M, rpb)  # CTA-steps; balanced grid: every CTA runs the same number of steps
    steps = _cdiv(need, dev.sms * bps)
    kern = f"softmax_rows_kernel<{CTYPE[c.dtype]}, {vec}, {e // vec}, {g}>"
    p = Plan(kern, (_cdiv(need, steps), 1, 1), nt, _rowargs("softmax_rows_kernel", c, sx, sy))
    # two rows per group in flight: the current one and the prefetched next one
    info.update(groups=g, threads=nt, rows_per_block=rpb, blocks_per_sm=bps, ept=e,
                resident=bps * rpb * 2 * c.row_bytes)
    return _one_launch(p, info)


def _smem_cluster(c: RowCase, dev: Device, cluster: int, slice_bytes) -> int:
    """The smem path's CTAs a row: ``cluster`` when pinned; else one while a CTA's shared memory
    holds the row, the smallest cluster whose slices fit smem_ctas_per_sm CTAs an SM, and more
    CTAs a row while few rows leave SMs idle."""
    S = SOFTMAX
    cmax = S["smem_cluster_max"] if dev.clusters else 1
    if cluster:
        return cluster
    limit = dev.smem_optin - S["smem_reserve"]
    cands = [k for k in (1, 2, 4, 8, 16) if k <= cmax]
    target = dev.smem_per_sm // S["smem_ctas_per_sm"] - 2 * S["smem_reserve"]
    k = 1 if slice_bytes(1) <= limit else \
        next((k for k in cands if slice_bytes(k) <= target), 0) or \
        (cmax if slice_bytes(cmax) <= limit else 0)
    if not k:
        raise Decline(f"N: a row of {c.N * c.es} bytes does not fit {cmax} CTAs' shared memory ({limit} bytes each)")
    # few rows: more CTAs per row, so that M x C CTAs cover the SMs, while slices stay worth a CTA
    while k < cmax and c.M * k < dev.sms and slice_bytes(2 * k) >= S["slice_min"]:
        k *= 2
    return k


def _path_smem(c: RowCase, sx: int, sy: int, dev: Device, info: dict, threads=0, cluster=0, **_) -> Launches:
    S, N, es = SOFTMAX, c.N, c.es
    cmax = S["smem_cluster_max"] if dev.clusters else 1
    if cluster not in (0, 1, 2, 4, 8, 16):
        raise ValueError(f"cluster: the smem path takes 0 (default), 1, 2, 4, 8 or 16 CTAs a row, got {cluster}")
    if cluster > cmax:
        raise ValueError(f"cluster: {_NO_CLUSTERS.format(cc=dev.cc)}")
    V = 16 // es  # the kernel handles any alignment with 16-byte vectors (scalar head and tail)
    limit = dev.smem_optin - S["smem_reserve"]

    def seg_of(k):
        return _cdiv(_cdiv(N, k), V) * V

    def slice_bytes(k):
        return _cdiv((seg_of(k) + V) * es, 16) * 16

    k = _smem_cluster(c, dev, cluster, slice_bytes)
    if slice_bytes(k) > limit:
        raise Decline(f"cluster: {k} CTAs x {limit} bytes of shared memory cannot hold N = {N} "
                      f"({slice_bytes(k)} bytes per CTA)")
    seg, smem = seg_of(k), slice_bytes(k)
    nt = threads or min(512, max(128, _pow2_at_least(_cdiv(seg, V * 8))))
    if nt > 512 or nt % 32:
        raise ValueError("threads: the smem path takes a multiple of 32 up to 512 threads per block")
    kern = f"softmax_smem_kernel<{CTYPE[c.dtype]}, {k}>"
    per_sm = max(1, min(dev.smem_per_sm // (smem + S["smem_reserve"]),
                        _blocks_per_sm(nt, REGS["softmax_smem_kernel"])))
    p = Plan(kern, (c.M * k, 1, 1), nt, _rowargs("softmax_smem_kernel", c, sx, sy, (("i32", seg),)), smem=smem,
             cluster=k, max_dynamic_smem=smem, carveout=100, nonportable_cluster=k > 8)
    info.update(vec=V, cluster=k, seg=seg, smem=smem, threads=nt, resident=per_sm * (smem - V * es))
    return _one_launch(p, info)


def _split_options(c: RowCase, dev: Device, threads, ept, cluster, blocks_per_sm, chunk):
    """The split path's checked options: (blocks per SM, chunk, threads)."""
    S, N, M = SOFTMAX, c.N, c.M
    if chunk and chunk not in S["split_chunks"]:
        raise ValueError(f"chunk: the split path's chunks are {S['split_chunks']} columns (0: by the SM count), "
                         f"got {chunk}")
    if threads not in (0, 256, 512):
        raise ValueError(f"threads: the split path takes 256 or 512 threads per block (0: 512), got {threads}")
    if cluster > 1:
        raise ValueError(f"cluster: the split path uses no clusters, got {cluster}")
    if not 0 <= blocks_per_sm <= 32:
        raise ValueError(f"blocks_per_sm: must be 0 (default 2) .. 32, got {blocks_per_sm}")
    bps = blocks_per_sm or S["split_blocks_per_sm"]
    cap = dev.sms * bps
    if not chunk:   # the largest chunk whose units cover the SMs (few long rows: shorter chunks)
        fits = [ch for ch in S["split_chunks"] if _cdiv(N, ch) <= cap]
        chunk = next((ch for ch in fits if M * _cdiv(N, ch) >= dev.sms), fits[-1] if fits else S["split_chunk"])
    nt = threads or (S["split_threads"] if chunk == S["split_chunk"] else 256)
    if chunk != S["split_chunk"] and nt != 256:
        raise ValueError(f"threads: chunks of {chunk} columns run on 256 threads, got {threads}")
    if ept not in (0, chunk // nt):
        raise ValueError(f"ept: the split path holds {chunk} / threads = {chunk // nt} elements per thread, got {ept}")
    return bps, chunk, nt


def _path_split(c: RowCase, sx: int, sy: int, dev: Device, info: dict, threads=0, ept=0, cluster=0,
                blocks_per_sm=0, max_spin=-1, chunk=0) -> Launches:
    S, N, M, vec = SOFTMAX, c.N, c.M, info["vec"]
    if N <= 2 * S["split_chunk"]:
        raise Decline(f"N: the split path takes rows longer than {2 * S['split_chunk']} columns (the block path "
                      f"keeps shorter rows on chip in one block), got N = {N}")
    if not dev.cooperative:
        raise Decline("the split path needs cooperative launch, which this device does not support")
    bps, chunk, nt = _split_options(c, dev, threads, ept, cluster, blocks_per_sm, chunk)
    cap = dev.sms * bps
    parts = _cdiv(N, chunk)
    if parts > cap:
        raise Decline(f"N: the split path needs C = {parts} co-resident blocks per row (N = {N}), "
                      f"the device holds {cap}")
    grid = min(M * parts, cap // parts * parts)
    if max_spin < -1:
        raise ValueError(f"max_spin: must be -1 (default 2^20 polls) or >= 0, got {max_spin}")
    spin = S["split_max_spin"] if max_spin < 0 else max_spin
    kern = f"softmax_split_kernel<{CTYPE[c.dtype]}, {vec}, {nt}, {chunk}>"
    units = M * parts
    p = Plan(kern, (grid, 1, 1), nt,
             (("ptr", "x"), ("ptr", "out"), ("ptr", "slots"), ("i32", N), ("i64", sx), ("i64", sy),
              ("i32", parts), ("i64", units), ("i32", spin)),
             cooperative=True, zero=("slots",))
    info.update(parts=parts, chunks=chunk // nt // vec, threads=nt, seg=chunk, blocks_per_sm=bps,
                resident=bps * chunk * c.es)
    return Launches([p], workspace={"slots": units * 8}, info=dict(info, kernel=kern, grid=grid))


def _path_online(c: RowCase, sx: int, sy: int, dev: Device, info: dict, threads=0, cluster=0, **_) -> Launches:
    S, N, vec = SOFTMAX, c.N, info["vec"]
    k = cluster
    if k == 16:
        raise ValueError("cluster: the online path takes 0 (default), 1, 2, 4 or 8, got 16")
    if not k:
        b = c.row_bytes
        slice_ = S["online_slice"]
        k = 1 if b <= slice_ else 2 if b <= 2 * slice_ else 4 if b <= 4 * slice_ else 8
    if k > 1 and not dev.clusters:
        if cluster > 1:
            raise ValueError(f"cluster: {_NO_CLUSTERS.format(cc=dev.cc)}")
        k = 1
    nt = threads or S["online_threads"]
    if nt > 512:
        raise ValueError("threads: the online path takes at most 512 threads per block")
    seg = _cdiv(_cdiv(N, k), vec) * vec
    kern = f"softmax_online_kernel<{CTYPE[c.dtype]}, {vec}, {k}>"
    p = Plan(kern, (c.M * k, 1, 1), nt, _rowargs("softmax_online_kernel", c, sx, sy, (("i32", seg),)), cluster=k)
    info.update(cluster=k, seg=seg, threads=nt, resident=0)
    return _one_launch(p, info)


_PATHS = {"simple": _path_simple, "warp": _path_warp, "block": _path_block, "rows": _path_rows,
          "smem": _path_smem, "split": _path_split, "online": _path_online}


def _softmax_path(path: str, c: RowCase, sx: int, sy: int, dev: Device, threads=0, ept=0, cluster=0,
                  blocks_per_sm=0, max_spin=-1, chunk=0) -> Launches:
    """One concrete path; raises Decline when the path cannot take the case, ValueError for a bad option."""
    if path not in _PATHS:
        raise ValueError(f"path: {path!r} is not one of {', '.join(SOFTMAX_PATHS)}")
    info = {"path": path, "vec": 16 // c.es if c.rows16 else 1}
    return _PATHS[path](c, sx, sy, dev, info, threads=threads, ept=ept, cluster=cluster,
                        blocks_per_sm=blocks_per_sm, max_spin=max_spin, chunk=chunk)


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
        cl = _softmax_path("smem", c, sx, sy, dev, **opts)
    except Decline as e:
        tried.append(str(e))
    long_row = c.row_bytes > S["split_min_row_bytes"] and S["split_chunk"] * c.es >= S["split_min_chunk_bytes"]
    if long_row and c.rows16:
        try:
            sopts = dict(opts)
            sopts.setdefault("chunk", 0 if S["split_fill_sms"] else S["split_chunk"])
            plan = _softmax_path("split", c, sx, sy, dev, **sopts)
            # enough units to cover the SMs, or at least as many CTAs as the path that would run
            # instead: smem where it takes the row, else the online fallback (few rows: split's
            # units spread a row over more SMs than the smem path's CTAs or online's M x <= 8)
            units = c.M * plan.info["parts"]
            alt = cl or best or _softmax_path("online", c, sx, sy, dev, **opts)
            alt_name = "smem" if cl else alt.info["path"]
            if units >= min(dev.sms, alt.plans[0].grid[0]):
                return _why(plan, f"split: rows of {c.row_bytes} bytes, 16-byte aligned, {c.M} x "
                                  f"{plan.info['parts']} units (>= {dev.sms} SMs or >= the {alt.plans[0].grid[0]} "
                                  f"CTAs of {alt_name})")
        except Decline as e:
            tried.append(str(e))
    if cl is not None and (best is None or cl.info["resident"] > best.info["resident"]):
        how = "a CTA a row" if cl.info["cluster"] == 1 else f"a cluster of C = {cl.info['cluster']} CTAs a row"
        return _why(cl, f"smem: {how}, {cl.info['resident']} bytes of staged slices in flight per SM")
    if best is not None:
        return _why(best, f"{best.info['path']}: the most bytes in flight ({best.info['resident']}) of the paths")
    return _why(_softmax_path("online", c, sx, sy, dev, **opts), "online: " + "; ".join(tried))
