"""gemm_epilogue plans of the CUDA C++ layer (``dispatch`` is the entry): by TMA legality (16-byte
strides and bases), by the wave efficiency of the output tiles on the SMs, and by a small cost
model for split-K; at small M (a stream of B) by the resident CTAs of the tiled kernel that the
split-K factor fills. Hopper's TMA / wgmma kernels (ws, pingpong) only where the sm_90a code
runs; the tiled kernel elsewhere."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .dispatch_common import ACT_CODE, H200, Decline, Device, Launches, Plan, _blocks_per_sm, _cdiv, _why

# ---------------------------------------------------------------------------------------------------
# tuning table

GEMM = {
    "peak_flops": {"ws": 640e12, "pingpong": 680e12, "tiled": 320e12},  # sustained mainloop rates (H200)
    "hbm_bytes_per_s": 4.0e12,
    "launch_s": 3e-6,               # one more kernel on the stream (split-K reduction, staging copies)
    "max_splits": 16,
    "min_kt_per_split": 4,          # 64-column k-tiles per split-K unit
    "splitk_gain": 1.10,            # split-K must beat the one-pass kernel by this factor
    "group_m": 8,                   # grouped tile order of the persistent kernels
    "tiled_bms": (32, 64, 128),
    # Tile rows of the tiled kernel above the B stream (M > stream_max_m; A or B not TMA-readable,
    # or no Hopper code): the bm of tiled_bms with the least load work on the busiest SM,
    # ceil(tiles / SMs) x (bm + TILED_BN) elements of A and B a k-step (co-resident CTAs share an SM's
    # load and tensor pipes; ties: the larger bm). A grid of few 128-row tiles (411 x 733: 24 CTAs
    # for 132 SMs) takes 32-row tiles (78 CTAs); a grid that fills the SMs keeps 128 rows
    # (measured against 128 rows at 97 x 211 x 389: docs/performance.md,
    # "CUDA C++ / GEMM + epilogue").
    # Operands TMA cannot read (A: K, lda or its base not 16-byte multiples; B: N, ldb), above the
    # B stream: each copied once a call into a workspace of 16-byte rows (gemm_stage_rows_kernel, one
    # launch for both), then the TMA kernels; C goes out by ping-pong's plain 16-byte stores where TMA
    # cannot write it (any ldc). Taken when the model's copies (bytes read + written at
    # hbm_bytes_per_s, one launch) + TMA kernel beat the tiled kernel on such rows, whose 2-byte
    # loads into registers run at tiled_unaligned_flops over the whole GPU (555 x 1234 x 777:
    # 1.06 GFLOP in 61.8 us on 50 of 132 SMs; docs/performance.md, "CUDA C++ / GEMM + epilogue",
    # where it is measured at N = 50257 against the B repacked for ws that it replaced and at
    # 411 x 733 x 957 against the tiled kernel).
    "tiled_unaligned_flops": 45e12,
    # At M <= stream_max_m the one 128-row tile is mostly padding and the GEMM is a stream of B from
    # HBM; every split-K factor streams B at about the same rate per busy SM (sm_stream_bytes_per_s,
    # below an SM's share of HBM; docs/performance.md, "CUDA C++ / GEMM + epilogue"). The split is then chosen
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
    # M <= 64: the best was at 0.5-0.8 of the slots; docs/performance.md, "CUDA C++ / GEMM + epilogue")
    "tiled_wave_fill": 0.75,
    "tiled_min_kt_per_split": 8,
    "tiled_splitk_max_charge": 0.25,
    "tiled_cta_bytes_per_s": 22e9,
    # registers per thread of the tiled kernel by tile rows (upper bounds of the ptxas figures for
    # sm_90a and sm_80; tests/test_cuda_layer.py checks every instance against the build log)
    "tiled_regs": {32: 64, 64: 80, 128: 128},
}
# The default's GELU: ex2.approx and a fast division (kernel act code 3) instead of libm's tanhf,
# whose ~20 instructions and branches an element run outside the mainloop in ws's epilogue (the CuTe
# layer's rcp.approx form took 8192^3 GELU from 532 to 710 TFLOP/s; this one measured in
# docs/performance.md, "CUDA C++ / GEMM + epilogue"). The variant ids keep tanhf.
ACT_GELU_EXP2 = 3   # the kernels' act code of GELU by ex2.approx (gemm_common.cuh)

WS_BM, WS_BK, WS_THREADS = 128, 64, 384
WS_BNS = (128, 192, 256)      # the ws kernel's tile widths (instances)
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
    stages = {256: 4, 192: 5}.get(bn, 6)
    return stages * (WS_BM * WS_BK * 2 + (bn // 64) * WS_BK * 64 * 2) + 2 * stages * 8 + 1024


PP_SMEM = PP_STAGES * (PP_BM * PP_BK * 2 + PP_BK * PP_BN * 2) + 2 * (2 * PP_BM * 64 * 2) + (2 * PP_STAGES + 2) * 8 + 1024

# ---------------------------------------------------------------------------------------------------
# kernel instances (the module's table and NVRTC's name expressions) and argument signatures

SIGNATURES = {  # parameter types in order: ptr / i32 / i64 / tma (a 128-byte CUtensorMap by value)
    "gemm_simple_kernel": ("ptr", "ptr", "ptr", "ptr", "i32", "i32", "i32", "i64", "i64", "i64", "i32"),
    "gemm_tiled_kernel": ("ptr", "ptr", "ptr", "ptr", "i32", "i32", "i32", "i64", "i64", "i64", "i32", "i32", "i32",
                          "ptr", "i64"),
    "gemm_ws_kernel": ("tma", "tma", "ptr", "ptr", "i32", "i32", "i32", "i64", "i32", "i32", "i32", "i32", "i32",
                       "i32", "i32", "ptr", "i64"),
    "gemm_splitk_reduce_kernel": ("ptr", "i32", "i32", "i32", "i64", "ptr", "ptr", "i64", "i32"),
    "gemm_stage_rows_kernel": ("ptr", "i64", "ptr", "i64", "i32", "i32") * 2,
    "gemm_pingpong_kernel": ("tma", "tma", "tma", "ptr", "i32", "i32", "i32", "i32", "i32", "i32", "i32", "ptr", "i64",
                             "i32"),
}


def instances() -> dict[str, list[str]]:
    """{source file: [instance, ...]}: every kernel instance a plan can name, by source."""
    out: dict[str, list[str]] = {}
    bools = ("true", "false")
    out["gemm_epilogue.cu"] = [f"gemm_simple_kernel<{b}>" for b in bools]
    out["gemm_epilogue_tiled.cu"] = [f"gemm_tiled_kernel<{b}, {bm}, {va}, {vb}>" for b in bools
                                     for bm in GEMM["tiled_bms"] for va in bools for vb in bools]
    out["gemm_epilogue_ws.cu"] = [f"gemm_ws_kernel<{b}, {bn}>" for b in bools for bn in WS_BNS] + \
        ["gemm_stage_rows_kernel"]
    out["gemm_epilogue_splitk.cu"] = [f"gemm_splitk_reduce_kernel<{b}>" for b in bools]
    out["gemm_epilogue_pingpong.cu"] = [f"gemm_pingpong_kernel<{b}, {cm}>" for b in bools for cm in (1, 2)]
    return out


# ---------------------------------------------------------------------------------------------------
# plans

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
    gelu_exp2: bool = False   # GELU by ex2.approx (the default, ACT_GELU_EXP2)

    @property
    def act_code(self) -> int:
        return ACT_GELU_EXP2 if self.gelu_exp2 and self.act == "gelu" else ACT_CODE[self.act]

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


def _pp_time(g: GemmCase, dev: Device) -> float:
    """Modelled seconds of the ping-pong kernel: as _ws_time (one pass) on 128 x 128 tiles at its rate."""
    tiles = _cdiv(g.M, PP_BM) * _cdiv(g.N, PP_BN)
    flops = 2.0 * tiles * PP_BM * PP_BN * g.K
    hbm = 2.0 * (g.M * g.K + g.K * g.N + g.M * g.N)
    return max(flops / GEMM["peak_flops"]["pingpong"], hbm / GEMM["hbm_bytes_per_s"]) / _wave_eff(tiles, dev.sms)


def _plan_staged(g: GemmCase, dev: Device) -> Launches | None:
    """The operands TMA cannot read copied into workspaces of 16-byte rows ("apad", "bpad"; one
    gemm_stage_rows_kernel launch), then split-K on the ws kernel where the cost model gains, else
    ping-pong (C by TMA or by its plain 16-byte stores). info["model_s"]: the modelled seconds
    (copies at HBM speed + one launch + the kernel). None if a copy's 16-byte chunks reach 2^31."""
    jobs = [(src, dst, rows, cols, ld) for ok, src, dst, rows, cols, ld in
            ((g.tma_a(), "a", "apad", g.M, g.K, g.lda), (g.tma_b(), "b", "bpad", g.K, g.N, g.ldb)) if not ok]
    if any(rows * _cdiv(cols, 8) >= 2 ** 31 for _, _, rows, cols, _ in jobs):
        return None
    ld = {dst: _cdiv(cols, 8) * 8 for _, dst, _, cols, _ in jobs}
    a = ("apad", ld["apad"]) if "apad" in ld else ("a", g.lda)
    b = ("bpad", ld["bpad"]) if "bpad" in ld else ("b", g.ldb)
    gs = replace(g, lda=a[1], ldb=b[1], a_mod16=0 if "apad" in ld else g.a_mod16,
                 b_mod16=0 if "bpad" in ld else g.b_mod16)   # the case the TMA kernels see
    s = _choose_splits(gs, dev, 128)
    if s > 1:
        plan = _plan_ws(gs, dev, 128, s, a_buf=a[0], lda=a[1], b_buf=b[0], ldb=b[1])
        t, what = _ws_time(gs, dev, 128, s), f"split-K {s} on the ws kernel"
    else:
        plan = _plan_pingpong(gs, dev, a=a, b=b)
        t, what = _pp_time(gs, dev), f"ping-pong, C by {plan.info['c_store']} stores"
    args, grid_x, nbytes = (), 1, 0
    for src, dst, rows, cols, lds in jobs:
        args += (("ptr", src), ("i64", lds), ("ptr", dst), ("i64", ld[dst]), ("i32", rows), ("i32", cols))
        grid_x = max(grid_x, min(_cdiv(rows * _cdiv(cols, 8), 256), dev.sms * 8))
        plan.workspace[dst] = rows * ld[dst] * 2
        nbytes += 4 * rows * cols
    args += (("ptr", 0), ("i64", 0), ("ptr", 0), ("i64", 0), ("i32", 0), ("i32", 0)) * (2 - len(jobs))
    plan.plans.insert(0, Plan("gemm_stage_rows_kernel", (grid_x, len(jobs), 1), 256, args))
    t += nbytes / GEMM["hbm_bytes_per_s"] + GEMM["launch_s"]
    plan.info.update(stage={dst: ld[dst] for dst in ld}, model_s=t)
    return _why(plan, f"{' and '.join(src.upper() for src, *_ in jobs)} copied to 16-byte rows "
                      f"({', '.join(f'{d}: ld {v}' for d, v in ld.items())}), then {what}; modelled {t * 1e6:.1f} us")


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
                                ("ptr", "bias"), ("ptr", "c"), ("i64", g.ldc), ("i32", g.act_code))))
    return out


def _tiled_bm(g: GemmCase) -> int:
    return next((b for b in sorted(GEMM["tiled_bms"]) if b >= g.M), max(GEMM["tiled_bms"]))


def _norm_splits(kt: int, splits: int) -> tuple[int, int]:
    """(splits, k-tiles per split) with no empty split: kps = ceil(kt / s), then s = ceil(kt / kps)."""
    splits = max(1, min(splits, kt))
    kps = max(1, _cdiv(kt, splits))
    return (_cdiv(kt, kps) if kt else 1), kps


def _tiled_fill_bm(g: GemmCase, dev: Device) -> tuple[int, str]:
    """Tile rows of the tiled kernel for M > GEMM['stream_max_m'] (the rule: GEMM's comment at
    "tiled_bms") and why."""
    gx = _cdiv(g.N, TILED_BN)

    def work(bm):
        return _cdiv(_cdiv(g.M, bm) * gx, dev.sms) * (bm + TILED_BN)
    bm = min(sorted(GEMM["tiled_bms"], reverse=True), key=work)
    return bm, f"{_cdiv(g.M, bm) * gx} tiles of {bm} x {TILED_BN}: the least load work on the busiest of {dev.sms} SMs"


def _plan_tiled(g: GemmCase, splits: int = 1, dev: Device = H200, bm: int = 0) -> Launches:
    va = "true" if g.tma_a() or (g.K % 8 == 0 and g.lda % 8 == 0 and g.a_mod16 == 0) else "false"
    vb = "true" if (g.N % 8 == 0 and g.ldb % 8 == 0 and g.b_mod16 == 0) else "false"
    bm = bm or _tiled_bm(g)
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
             + (("i64", g.lda), ("i64", g.ldb), ("i64", g.ldc), ("i32", g.act_code), ("i32", g.pair_ok()),
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
             group_m: int = 0, a_buf: str = "a", lda: int | None = None) -> Launches:
    ldb = g.ldb if ldb is None else ldb
    lda = g.lda if lda is None else lda
    splits, kps = _norm_splits(_cdiv(g.K, WS_BK), splits)
    tiles_m, tiles_n = _cdiv(g.M, WS_BM), _cdiv(g.N, bn)
    units = tiles_m * tiles_n * splits
    grid = min(units, dev.sms)
    ldw = _splitk_ldw(g)
    smem = ws_smem(bn)
    code = g.act_code
    main = Plan(f"gemm_ws_kernel<{g.bf16}, {bn}>", (grid, 1, 1), WS_THREADS,
                (("tma", (a_buf, g.M, g.K, lda, WS_BM, 64)), ("tma", (b_buf, g.K, g.N, ldb, WS_BK, 64)),
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
        # docs/performance.md, "CUDA C++ / GEMM + epilogue"); a split would add partials and a launch for the rest
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


def _plan_pingpong(g: GemmCase, dev: Device, cm: int = 1, group_m: int = 0, a: tuple = (), b: tuple = ()) -> Launches:
    """``a`` / ``b``: (buffer, row stride) of a staged operand (default: the operand itself). C goes
    out by TMA where its rows allow, else by the kernel's plain 16-byte stores (c_tma = 0; the
    unused C descriptor slot then carries A's)."""
    a_buf, lda = a or ("a", g.lda)
    b_buf, ldb = b or ("b", g.ldb)
    tiles_m, tiles_n = _cdiv(g.M, PP_BM), _cdiv(g.N, PP_BN)
    units = _cdiv(tiles_m, cm) * tiles_n
    n = max(1, min(dev.sms // cm, units))
    kern = f"gemm_pingpong_kernel<{g.bf16}, {cm}>"
    desc_a = ("tma", (a_buf, g.M, g.K, lda, PP_BM, 64))
    desc_c = ("tma", ("c", g.M, g.N, g.ldc, PP_BM, 64)) if g.tma_c() else desc_a
    p = Plan(kern, (cm * n, 1, 1), PP_THREADS,
             (desc_a, ("tma", (b_buf, g.K, g.N, ldb, PP_BK, 64)), desc_c, ("ptr", "bias")) + _gemm_common_args(g)
             + (("i32", g.act_code), ("i32", tiles_m), ("i32", tiles_n), ("i32", group_m or GEMM["group_m"]),
                ("ptr", "c"), ("i64", g.ldc), ("i32", int(g.tma_c()))),
             smem=PP_SMEM, max_dynamic_smem=PP_SMEM, cluster=cm, cluster_launch=cm > 1)
    return Launches([p], info={"path": "pingpong" if cm == 1 else "pingpong_c2", "kernel": kern,
                               "tile": (PP_BM, PP_BN, PP_BK), "units": units, "grid": cm * n, "smem": PP_SMEM,
                               "c_store": "tma" if g.tma_c() else "plain 16-byte"})


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
              group_m: int = 0, bm: int = 0) -> Launches:
    """Plan C = act(A @ B + bias) for A [M, K] (row stride lda), B [K, N] (ldb), C [M, N] (ldc).
    ``path`` "auto" is the layer's default (``cuda:gemm_epilogue``); ``splits``/``bn``/``group_m``
    pin the split-K factor, the ws tile width and the tile grouping, ``bm`` the tiled kernel's tile
    rows (0: the planner's choice)."""
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
    if bn not in (0,) + WS_BNS:
        raise ValueError(f"bn: the ws kernel's tile width is one of {WS_BNS}, got {bn}")
    if bm and (bm not in GEMM["tiled_bms"] or path != "tiled"):
        raise ValueError(f"bm: the tiled path's tile rows are one of {GEMM['tiled_bms']}, got {bm} for path {path!r}")
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
        return _plan_tiled(g, splits or 1, dev, bm)
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
    return _gemm_auto(replace(g, gelu_exp2=True), dev)


def _gemm_auto(g: GemmCase, dev: Device) -> Launches:
    """The default: at small M (a stream of B) the tiled kernel, split-K when its tiles leave SMs
    short of resident CTAs; else the Hopper kernels where TMA can read A and B, split-K when the
    output tiles leave SMs idle, else the tiled kernel. With GEMM["tiled_splitk"] off, small M takes
    the ws split-K kernel as before (the tiled kernel where TMA cannot read A or B). Above the
    B stream, A and B rows TMA cannot read are staged (_plan_staged) where the model says it beats
    the tiled kernel (whose tile rows fill the SMs: _tiled_fill_bm), and ping-pong takes any C."""
    G = GEMM
    why = _hopper_why(g, dev)
    stream = g.M <= G["stream_max_m"]
    if stream and G["tiled_splitk"]:
        # a B stream (few rows): the tiled kernel at the smallest tile rows that hold M, with K split
        # until its small CTAs fill tiled_wave_fill of the SMs' resident capacity (any alignment of
        # A and B, any device)
        s, swhy = _tiled_stream_splits(g, dev)
        return _why(_plan_tiled(g, s, dev), f"M = {g.M} <= {GEMM['stream_max_m']}, a stream of B: tiled; " + swhy)
    fill = not stream
    if not why and not stream and not (g.tma_a() and g.tma_b()):
        staged = _plan_staged(g, dev)
        bm, bwhy = _tiled_fill_bm(g, dev)
        t_tiled = 2.0 * g.M * g.N * g.K / G["tiled_unaligned_flops"] / _wave_eff(_cdiv(g.M, bm) * _cdiv(g.N, TILED_BN),
                                                                                 dev.sms)
        if staged is not None and staged.info["model_s"] < t_tiled:
            return staged
        return _why(_plan_tiled(g, 1, dev, bm), f"A or B not TMA-readable and staging them models slower than the "
                                                f"tiled kernel ({t_tiled * 1e6:.1f} us)" + (f"; {bwhy}" if bwhy else ""))
    if why or not g.tma_a():
        bm, bwhy = _tiled_fill_bm(g, dev) if fill else (_tiled_bm(g), "")
        return _why(_plan_tiled(g, 1, dev, bm), (why or "A is not TMA-readable (K, lda multiples of 8 and a 16-byte "
                                                        "base)") + (f": tiled, {bwhy}" if bwhy else ""))
    if not g.tma_b():
        # (GEMM["tiled_splitk"] off) a B stream whose B rows TMA cannot read (above the stream B is
        # staged): the tiled kernel
        return _why(_plan_tiled(g), "B is not TMA-readable (N, ldb multiples of 8 and a 16-byte base): tiled")
    if stream and _cdiv(g.N, TILED_BN) >= dev.sms:
        # (GEMM["tiled_splitk"] off) a B stream whose 32-row tiles alone give every SM a tile: the
        # tiled kernel, no padding rows and no split (it beat split-K at every factor there:
        # docs/performance.md, "CUDA C++ / GEMM + epilogue")
        return _why(_plan_tiled(g), f"M = {g.M} <= {GEMM['stream_max_m']} and {_cdiv(g.N, TILED_BN)} "
                                    f"column tiles >= {dev.sms} SMs: the tiled kernel streams B without padding rows")
    s = _stream_splits(g, dev, 128) if stream else _choose_splits(g, dev, 128)
    if s == 1:
        return _why(_plan_pingpong(g, dev), "pingpong: A, B and C are TMA-legal" if g.tma_c() else
                    "pingpong: A and B are TMA-legal, C by plain 16-byte stores")
    plan = _plan_ws(g, dev, 128, s)
    why = f"split-K {s}: {plan.info['units']} units for {dev.sms} SMs" + \
        (f" (M = {g.M} <= {GEMM['stream_max_m']}: a B stream, fewest k-tiles on the busiest SM)" if stream else "")
    return _why(plan, why)
