"""GPU check of the cuTile layer's candidates: writes $OUT/cutile/ (verify.json, sweep.json, log.txt).

Usage: ``python scripts/gpu_cutile.py [verify] [softmax] [gemm]`` (no argument: all three, in that
order, within about 150 s: each stage stops at its share of the time; give one stage a call of its
own to run it whole).

- verify: harness.verify.verify_case (float64 reference, poisoned and guarded output, two seeds)
  of every candidate (cutile:softmax_split / _rows_tma / _online_tma / _online_flat / _next,
  cutile:gemm_epilogue_pack / _next) on cases that reach each of their paths (N = 1, M = 1,
  strided and odd-strided rows, -inf rows, fp32 tails, unaligned K and N, split-K, few rows);
- softmax / gemm: cold-L2 timings (CUDA events, median of 15, a 256 MB write before each sample)
  of the default, softmax_next / gemm_epilogue_next and the neighbours of each pending rule
  (occupancy, latency hint, tile, persistent grid) beside torch eager and a same-size copy,
  on the shapes whose class each switch decides. A row: the label, the plan, us, x vs torch,
  share of the copy.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

T0 = time.perf_counter()
LIMIT = 145.0
OUT = Path(os.environ.get("OUT", "/tmp/out")) / "cutile"
OUT.mkdir(parents=True, exist_ok=True)
LOG = open(OUT / "log.txt", "a")
RESULTS: list = []
STAGE_END = [LIMIT]
FLUSH: list = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.write(s + "\n")
    LOG.flush()


def left() -> float:
    return min(LIMIT, STAGE_END[0]) - (time.perf_counter() - T0)


def timed(fn, iters=15) -> float:
    """Median device us of ``fn`` with L2 flushed (a 256 MB write) before each sample."""
    if not FLUSH:
        FLUSH.append(torch.empty(64 * 2 ** 20, dtype=torch.float32, device="cuda"))
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        FLUSH[0].zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return sorted(ts)[len(ts) // 2] * 1e3


def record(problem, shape, label, fn, extra=None, reserve=3.0):
    if left() < reserve:
        log("time guard: skipped", problem, shape, label)
        return None
    try:
        t1 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        first = time.perf_counter() - t1
        us = timed(fn)
        row = {"problem": problem, "shape": shape, "label": label, "us": round(us, 2),
               "first_call_s": round(first, 2)} | (extra or {})
        if "copy_us" in row:
            row["vs_copy"] = round(row["copy_us"] / us, 3)
        if "torch_us" in row:
            row["vs_torch"] = round(row["torch_us"] / us, 3)
        if "flops" in row:
            row["tflops"] = round(row.pop("flops") / us / 1e6, 1)
        RESULTS.append(row)
        log(json.dumps(row, default=str))
        return us
    except Exception as e:
        RESULTS.append({"problem": problem, "shape": shape, "label": label, "error": f"{type(e).__name__}: {e}"[:800]})
        log("ERROR", problem, shape, label, traceback.format_exc()[-1500:])
        return None


# -- verify ------------------------------------------------------------------------------------
SM_CASES = [({"M": 1, "N": 1}, "float32", {}), ({"M": 129, "N": 1}, "float32", {}),
            ({"M": 1, "N": 98_432}, "float32", {}), ({"M": 3, "N": 262_147}, "float32", {}),
            ({"M": 2, "N": 131_072}, "bfloat16", {}), ({"M": 4, "N": 32_768}, "float32", {"kind": "neginf"}),
            ({"M": 17, "N": 40_000}, "float16", {"layout": "strided_odd"}), ({"M": 1823, "N": 781}, "bfloat16", {}),
            ({"M": 37, "N": 1000}, "float16", {"layout": "strided"}), ({"M": 64, "N": 1000}, "bfloat16", {"kind": "neginf"}),
            ({"M": 64, "N": 1000}, "float16", {"kind": "large"}), ({"M": 4099, "N": 33}, "bfloat16", {"layout": "strided_odd"}),
            ({"M": 2048, "N": 2050}, "float16", {}), ({"M": 300, "N": 70_001}, "float32", {}),
            ({"M": 300, "N": 50_257}, "bfloat16", {}), ({"M": 300, "N": 40_000}, "bfloat16", {"kind": "neginf"}),
            ({"M": 8, "N": 200_003}, "bfloat16", {}),
            # resident split: units straddling programs and rounds, a strided aligned layout, fp32
            ({"M": 300, "N": 40_000}, "bfloat16", {"layout": "strided"}), ({"M": 264, "N": 131_072}, "float32", {}),
            ({"M": 333, "N": 65_536}, "float16", {"kind": "large"})]
GEMM_CASES = [({"M": 16, "N": 50257, "K": 768}, "bfloat16", {"act": "none", "bias": 1}),
              ({"M": 1, "N": 17, "K": 33}, "float16", {"act": "gelu", "bias": 1}),
              ({"M": 127, "N": 65, "K": 129}, "bfloat16", {"act": "relu", "bias": 1}),
              ({"M": 1025, "N": 769, "K": 513}, "float16", {"act": "gelu", "bias": 1}),
              ({"M": 33, "N": 1001, "K": 3000}, "bfloat16", {"act": "gelu", "bias": 1}),
              ({"M": 555, "N": 1234, "K": 777}, "bfloat16", {"act": "gelu", "bias": 1}),
              ({"M": 2050, "N": 1001, "K": 136}, "float16", {"act": "gelu", "bias": 0}),
              ({"M": 640, "N": 136, "K": 4104}, "bfloat16", {"act": "gelu", "bias": 0}),
              ({"M": 3000, "N": 3000, "K": 3000}, "float16", {"act": "gelu", "bias": 1})]
SM_IDS = ("cutile:softmax_next", "cutile:softmax_split", "cutile:softmax_online_flat", "cutile:softmax_online_tma",
          "cutile:softmax_rows_tma")
GEMM_IDS = ("cutile:gemm_epilogue_next", "cutile:gemm_epilogue_pack")


def verify_stage():
    from harness import problems, registry
    from harness.case import Case
    from harness.verify import verify_case
    registry.load_backends()
    out = []
    jobs = [("softmax", i, c) for i in SM_IDS for c in SM_CASES] + [("gemm_epilogue", i, c) for i in GEMM_IDS for c in GEMM_CASES]
    for prob, iid, (dims, dt, params) in jobs:
        if left() < 2:
            log("time guard: verify stops at", iid, dims)
            break
        case = Case(prob, dims, dt, params)
        try:
            im = registry.get(prob, iid, candidates=True)
            why = im.supports(case)
            if why:
                rec = {"status": "SKIP", "reason": why}
            else:
                c = verify_case(im, problems.get(prob), case, "cuda", seeds=(0, 1))
                info = c.details.get("info", {}) if isinstance(c.details, dict) else {}
                rec = {"status": "PASS" if c.ok else "FAIL", "reason": c.reason, "rel_err": c.rel_err,
                       "config": info.get("config")}
        except Exception as e:
            rec = {"status": "ERROR", "reason": f"{type(e).__name__}: {e}"[:600]}
        rec.update(impl=iid, case=case.id)
        out.append(rec)
        log("verify", rec["status"], iid, rec["case"], json.dumps(rec.get("config"), default=str)[:240],
            (rec.get("reason") or "")[:200])
    (OUT / "verify.json").write_text(json.dumps(out, indent=1, default=str))


# -- softmax timings ---------------------------------------------------------------------------
SM_SHAPES = [  # (M, N, dtype): a class each
    (4096, 50257, torch.bfloat16), (4096, 128256, torch.bfloat16), (32768, 512, torch.bfloat16),
    (2, 2_000_000, torch.float32), (96, 100_000, torch.bfloat16), (4096, 32000, torch.bfloat16),
    (50000, 200, torch.float16), (1000, 32769, torch.bfloat16), (4096, 151936, torch.float32),
    (12288, 768, torch.float32), (32768, 1024, torch.bfloat16), (2048, 128000, torch.float16),
    (8, 200_003, torch.bfloat16), (65536, 128, torch.float32), (4096, 50257, torch.float32),
]


def softmax_neighbours(L, xs, os_, plan):
    """(label, launch) of the knobs around the next plan's rule for this shape."""
    from cutile_src import dispatch as D, softmax_online_flat as F, softmax_online_tma as O, softmax_rows_tma as R
    from cutile_src import softmax_split as S
    out = []
    v = plan["variant"]
    if v == "split":
        resident = plan["MODE"] == "resident"
        k = S.softmax_split_resident_kernel if resident else None
        for f in (2, 0.5):
            ch = int(plan["CHUNK"] * f)
            parts = -(-xs.shape[1] // ch)
            if parts > 132 and resident or ch < 512:
                continue
            cfg = plan | {"CHUNK": ch, "C": parts, "CP": 1 << (parts - 1).bit_length(),
                          "grid": min(xs.shape[0] * parts, plan["grid"] if resident else 528)}
            cfg["hints"] = plan["hints"] if resident else D.softmax_hints(ch, ch)
            ks = [L.hinted(k, cfg["hints"])] if resident else [L.hinted(kk, cfg["hints"]) for kk in
                                                               (S.softmax_split_stats_kernel, S.softmax_split_norm_kernel)]
            out.append((f"split {cfg}", S.bind_launch(xs, os_, cfg, kernels=ks)))
        if resident:
            p = D.online_config(*xs.shape, xs.element_size(), 132, L._l2(), "online_tma")
            out.append((f"online_tma {p}", O.bind_launch(xs, os_, p["TILE"], p["LATENCY"], p["grid"],
                                                        kernel=L.hinted(O.softmax_online_tma_kernel, p["hints"]))))
    if v == "rows_tma":
        for rows_x, lat in ((1, 10), (2, 0), (2, 10)):
            rows = min(plan["ROWS"] * rows_x, 64)
            h = D.softmax_hints(rows * plan["TN"], plan["TN"])
            g = min(-(-xs.shape[0] // rows), 132 * h.get("occupancy", 1))
            out.append((f"rows_tma ROWS={rows} LAT={lat} {h}",
                        R.bind_launch(xs, os_, rows, plan["TN"], lat, g, kernel=L.hinted(R.softmax_rows_tma_kernel, h))))
        if plan["TN"] >= 8192:
            p = D.online_config(*xs.shape, xs.element_size(), 132, L._l2(), "online_tma")
            out.append((f"online_tma {p}", O.bind_launch(xs, os_, p["TILE"], p["LATENCY"], p["grid"],
                                                        kernel=L.hinted(O.softmax_online_tma_kernel, p["hints"]))))
    if v in ("online_tma", "online_flat"):
        mod, k = (O, O.softmax_online_tma_kernel) if v == "online_tma" else (F, F.softmax_online_flat_kernel)
        occ = plan["hints"]["occupancy"]
        for o, lat in ((occ, 1), (max(1, occ // 2), plan["LATENCY"]), (min(4, occ * 2), plan["LATENCY"]), (4, 1)):
            g = min(xs.shape[0], o * 132)
            out.append((f"{v} occ={o} LAT={lat} grid={g}",
                        mod.bind_launch(xs, os_, plan["TILE"], lat, g, kernel=L.hinted(k, {"occupancy": o}))))
    return out


def softmax_stage():
    from backends import cutile_layer as L
    for M, N, dt in SM_SHAPES:
        if left() < 8:
            break
        xs = torch.randn(M, N, device="cuda", dtype=dt)
        os_ = torch.empty_like(xs)
        shape = [M, N, str(dt)]
        ex = {"copy_us": round(timed(lambda: os_.copy_(xs)), 2), "torch_us": round(timed(lambda: torch.softmax(xs, -1)), 2)}
        f, _, plan = L.bind_softmax("default", xs, os_)
        record("softmax", shape, "default " + json.dumps(plan), f, ex)
        f, _, nplan = L.bind_softmax("next", xs, os_)
        record("softmax", shape, "next " + json.dumps(nplan), f, ex)
        for label, fn in dict(softmax_neighbours(L, xs, os_, nplan)).items():
            record("softmax", shape, label, fn, ex, reserve=6.0)
        del xs, os_


# -- GEMM timings ------------------------------------------------------------------------------
GEMM_SHAPES = [(2048, 2047, 2048, torch.bfloat16, 2), (16, 50257, 768, torch.bfloat16, 0),
               (3000, 3000, 3000, torch.float16, 2), (555, 1234, 777, torch.bfloat16, 2),
               (4096, 50257, 768, torch.bfloat16, 0), (256, 50257, 768, torch.float16, 0),
               (16, 6144, 4096, torch.bfloat16, 0), (200, 13824, 5120, torch.bfloat16, 1),
               (4096, 4096, 14336, torch.bfloat16, 0)]


def gemm_neighbours(L, a, b, bias, act, c, plan):
    """The next plan's GEMM with its grid not persistent, and 3000^3's tile neighbours."""
    from cutile_src import dispatch as D, gemm_epilogue_tiled as T
    g = plan.get("GEMM", plan)
    out = []
    if g["variant"] == "tiled" and plan["variant"] == "tiled":
        M, N = c.shape
        for tm, tn, h in ((g["TM"], g["TN"], g["hints"]), (128, 256, {"num_worker_warps": 8}), (128, 128, {"num_worker_warps": 8})):
            tiles = -(-M // tm) * -(-N // tn)
            cfg = {"TM": tm, "TN": tn, "TK": 64 if tm > 64 else g["TK"], "GROUP": 8, "grid": tiles}
            k = L.hinted(T.gemm_epilogue_tiled_kernel, h)
            out.append((f"tiled non-persistent {cfg}", T.bind_launch(a, b, bias, act, c, cfg, kernel=k)))
            out.append((f"tiled persistent {cfg | {'grid': min(tiles, 132)}}",
                        T.bind_launch(a, b, bias, act, c, cfg | {"grid": min(tiles, 132)}, kernel=k)))
            if (tm, tn) == (g["TM"], g["TN"]) and M < 1000:
                break
    pk = plan.get("PACK", {}).get("b")
    if pk:
        from cutile_src import gemm_epilogue_pack as P
        buf, _ = P.packed_buffer(b)
        out.append((f"pack B alone {pk}", P.bind_pack(b, buf, pk["TR"], pk["TC"], pk["grid"])))
        if b.shape[1] >= 2048:
            out.append(("pack B alone flat T=2048", P.bind_pack_flat(b, buf, 2048, min(-(-b.numel() // 2048), 8 * 132))))
    return out


def gemm_stage():
    from backends import cutile_layer as L
    acts = ("none", "relu", "gelu")
    for M, N, K, dt, act in GEMM_SHAPES:
        if left() < 8:
            break
        a = torch.randn(M, K, device="cuda", dtype=dt)
        b = torch.randn(K, N, device="cuda", dtype=dt)
        bias = torch.randn(N, device="cuda", dtype=dt)
        c = torch.empty(M, N, device="cuda", dtype=dt)
        shape = [M, N, K, str(dt), acts[act]]
        fns = (lambda y: y, torch.relu, lambda y: torch.nn.functional.gelu(y, approximate="tanh"))
        ex = {"torch_us": round(timed(lambda: fns[act](torch.addmm(bias, a, b))), 2), "flops": 2 * M * N * K}
        for v in ("default", "next"):
            f, _, plan = L.bind_gemm(v, a, b, bias, acts[act], c)
            record("gemm_epilogue", shape, f"{v} " + json.dumps(plan), f, dict(ex))
        for label, fn in dict(gemm_neighbours(L, a, b, bias, act, c, plan)).items():
            record("gemm_epilogue", shape, label, fn, dict(ex) if "pack B" not in label else {"bytes": 4 * b.numel()},
                   reserve=6.0)
        del a, b, c


def main(stages):
    import cuda.tile as ct
    from backends import cutile_layer as L
    log("torch", torch.__version__, "cuda.tile", getattr(ct, "__version__", "?"), "device",
        torch.cuda.get_device_name(), "SMs", L._sms(), "L2", L._l2(), "stages", stages)
    share = {"verify": 0.3, "softmax": 0.4, "gemm": 0.3} if len(stages) > 1 else {stages[0]: 1.0}
    at = 0.0
    for st in stages:
        at += share[st] * LIMIT
        STAGE_END[0] = at
        try:
            {"verify": verify_stage, "softmax": softmax_stage, "gemm": gemm_stage}[st]()
        except Exception:
            log("FAILED stage", st, traceback.format_exc()[-2000:])
        (OUT / "sweep.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    log("done in", round(time.perf_counter() - T0, 1), "s")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a in ("verify", "softmax", "gemm")]
    bad = [a for a in sys.argv[1:] if a not in ("verify", "softmax", "gemm")]
    if bad:
        raise SystemExit(f"stages: unknown {bad}; choose from verify, softmax, gemm")
    main(args or ["verify", "softmax", "gemm"])
