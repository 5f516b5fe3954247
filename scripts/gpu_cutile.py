"""GPU check of the cuTile layer (no arguments, within about 150 s): writes $OUT/cutile/.

1. verify (harness.verify.verify_case against float64) of the variants not yet run on a GPU
   (cutile:gemm_epilogue_pack, cutile:softmax_online_flat, cutile:softmax_rows_tma,
   cutile:softmax_online_tma) on cases that reach every path: GEMM
   with A and/or B packed (K or N rows not 16-byte multiples) on the tiled (few-row and 128-row
   tiles) and split-K paths; flat softmax on rows shorter and longer than a tile, an fp32 tail,
   N = 1, and strided / offset rows (the planner's 2-d kernels there); the default beside;
2. timings (CUDA events, median of 20) of the candidates the rules choose between, beside the
   default (no pack: 2-byte loads of unaligned B) and torch eager: GEMM at N = 50257 and the
   few-row split-K shapes; softmax rows vs rows_tma (tile elements x occupancy), online vs
   online_tma vs online_flat and their tiles, on the models suite's softmax shapes (and the
   same-size copy); stage time guards stop it before the limit;
3. the SASS opcode counts of the new kernels (pack, GEMM on packed B, flat softmax).
Everything goes to $OUT/cutile/verify.json, sweep.json, log.txt.
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
LOG = open(OUT / "log.txt", "w")
RESULTS: list = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.write(s + "\n")
    LOG.flush()


STAGE_END = [LIMIT]  # seconds after T0 at which the current stage stops


def left() -> float:
    return min(LIMIT, STAGE_END[0]) - (time.perf_counter() - T0)


def timed(fn, iters=20) -> float:
    fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) for s, e in ev)
    return ts[len(ts) // 2] * 1e3  # microseconds


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
        log(json.dumps(row))
        return us
    except Exception as e:
        RESULTS.append({"problem": problem, "shape": shape, "label": label, "error": f"{type(e).__name__}: {e}"[:800]})
        log("ERROR", problem, shape, label, traceback.format_exc()[-1500:])
        return None


def verify_stage():
    from harness import problems, registry
    from harness.case import Case
    from harness.verify import verify_case
    registry.load_backends()
    out = []
    G = [({"M": 16, "N": 50257, "K": 768}, "bf16", {"act": "none", "bias": 1}),
         ({"M": 256, "N": 50257, "K": 768}, "fp16", {"act": "gelu", "bias": 1}),
         ({"M": 100, "N": 333, "K": 781}, "fp16", {"act": "relu", "bias": 0}),
         ({"M": 32, "N": 1001, "K": 4097}, "bf16", {"act": "gelu", "bias": 1}),
         ({"M": 1823, "N": 781, "K": 333}, "bf16", {"act": "relu", "bias": 1}),
         ({"M": 16, "N": 4096, "K": 4096}, "bf16", {"act": "none", "bias": 1})]
    S = [({"M": 64, "N": 50257}, "bf16", {}), ({"M": 37, "N": 50257}, "fp32", {}),
         ({"M": 3, "N": 40003}, "fp16", {}), ({"M": 1823, "N": 781}, "bf16", {}),
         ({"M": 5, "N": 70001}, "fp32", {"layout": "strided_odd"}), ({"M": 7, "N": 1000}, "bf16", {"layout": "strided"}), ({"M": 300, "N": 2049}, "fp16", {}),
         ({"M": 50, "N": 131072}, "bf16", {}), ({"M": 129, "N": 1}, "fp32", {}),
         ({"M": 1823, "N": 781}, "fp16", {"layout": "strided"})]
    jobs = [("gemm_epilogue", "cutile:gemm_epilogue_pack", d, dt, p) for d, dt, p in G]
    jobs += [("softmax", "cutile:softmax_online_flat", d, dt, p) for d, dt, p in S]
    jobs += [("softmax", "cutile:softmax_rows_tma", d, dt, p) for d, dt, p in S if d["N"] <= 32768]
    jobs += [("softmax", "cutile:softmax_online_tma", d, dt, p) for d, dt, p in S]
    jobs += [("gemm_epilogue", "cutile:gemm_epilogue", d, dt, p) for d, dt, p in G[:3]]
    for prob, iid, dims, dt, params in jobs:
        if left() < 2:
            log("time guard: verify stops", iid, dims)
            break
        case = Case(prob, dims, dt, params)
        try:
            im = registry.get(prob, iid, candidates=True)
            if im.supports(case):
                rec = {"status": "SKIP", "reason": im.supports(case)}
            else:
                c = verify_case(im, problems.get(prob), case, "cuda", seeds=(0, 1))
                info = c.details.get("info", {}) if isinstance(c.details, dict) else {}
                rec = {"status": "PASS" if c.ok else "FAIL", "reason": c.reason, "rel_err": c.rel_err,
                       "config": info.get("config")}
        except Exception as e:
            rec = {"status": "ERROR", "reason": f"{type(e).__name__}: {e}"[:600]}
        rec.update(impl=iid, case=case.id)
        out.append(rec)
        log("verify", rec["status"], iid, rec["case"], json.dumps(rec.get("config"), default=str)[:300],
            (rec.get("reason") or "")[:200])
    (OUT / "verify.json").write_text(json.dumps(out, indent=1, default=str))


def main():
    import cuda.tile as ct

    from backends import cutile_layer as L
    from cutile_src import dispatch, gemm_epilogue_splitk, gemm_epilogue_tiled, softmax_online, softmax_rows
    log("torch", torch.__version__, "cuda.tile", getattr(ct, "__version__", "?"),
        "device", torch.cuda.get_device_name(), "SMs", L._sms())
    sms, dev = L._sms(), "cuda"
    STAGE_END[0] = 45.0
    verify_stage()
    STAGE_END[0] = 75.0

    # GEMM: the default (no pack) vs the pack variant vs torch; split-K neighbours
    for M, N, K in ((16, 50257, 768), (256, 50257, 768), (4096, 50257, 768), (16, 6144, 4096), (16, 4096, 14336),
                    (16, 8192, 28672)):
        if N != 50257:
            STAGE_END[0] = 100.0  # the few-row split-K shapes: their own share
        if left() < 5:
            continue
        ga = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        gb = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
        gbias = torch.randn(N, device=dev, dtype=torch.bfloat16)
        gc = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        tus = round(timed(lambda: torch.addmm(gbias, ga, gb)), 2)
        ex = {"torch_us": tus, "flops": 2 * M * N * K}
        launch, launches, cfg = L.bind_gemm("default", ga, gb, gbias, "none", gc)
        record("gemm_epilogue", [M, N, K], "default " + json.dumps(cfg), launch, dict(ex))
        plaunch, launches, pcfg = L.bind_gemm("pack", ga, gb, gbias, "none", gc)
        if pcfg["variant"] == "pack":
            record("gemm_epilogue", [M, N, K], "pack " + json.dumps(pcfg), plaunch, dict(ex))
            sub = pcfg["GEMM"]
            pk = pcfg["PACK"]["b"]
            from cutile_src import gemm_epilogue_pack as P
            buf, view = P.packed_buffer(gb)
            p2 = P.bind_pack(gb, buf, pk["TR"], pk["TC"], pk["grid"])
            buf.fill_(1.0)
            p2()
            torch.cuda.synchronize()
            log("pack rows exact copy:", bool(torch.equal(view, gb)), "padding zero:", bool((buf[:, N:] == 0).all()))
            record("gemm_epilogue", [M, N, K], f"pack B alone {pk}", p2, {"copy_bytes": 2 * gb.numel() * 2})
            if M > 64 and (sub["TM"], sub["TN"]) != (128, 128):
                alt = {"variant": "tiled", "TM": 128, "TN": 128, "TK": 64, "GROUP": 8,
                       "grid": -(-M // 128) * -(-N // 128), "hints": {"num_worker_warps": 8}}
                fk = L.hinted(gemm_epilogue_tiled.gemm_epilogue_tiled_kernel, alt["hints"])
                main_ = gemm_epilogue_tiled.bind_launch(ga, view, gbias, 0, gc, alt, kernel=fk)
                packf = P.bind_pack(gb, buf, pk["TR"], pk["TC"], pk["grid"])
                record("gemm_epilogue", [M, N, K], "pack + tiled 128x128x64 ww8", lambda: (packf(), main_()), dict(ex))
            for t in (2048, 4096):
                g = min(-(-gb.numel() // t), 8 * sms)
                pf = P.bind_pack_flat(gb, buf, t, g)
                buf.zero_()
                pf()
                torch.cuda.synchronize()
                log("pack flat T=%d exact copy:" % t, bool(torch.equal(view, gb)))
                record("gemm_epilogue", [M, N, K], f"pack B alone flat T={t} grid={g}", pf,
                       {"copy_bytes": 2 * gb.numel() * 2})
                if t == 2048:
                    mainp = L.bind_gemm("pack", ga, gb, gbias, "none", gc)[0]
                    gemm_only = getattr(mainp, "main", None)
                    if gemm_only is not None:
                        record("gemm_epilogue", [M, N, K], "pack flat T=2048 + the pack plan's GEMM",
                               lambda: (pf(), gemm_only()), dict(ex))
                        record("gemm_epilogue", [M, N, K], "the pack plan's GEMM alone (packed B)", gemm_only, dict(ex))
            for tr, tc in ((16, 512), (4, 1024), (8, 1024)):
                g = max(1, min(-(-K // tr) * -(-N // tc), 8 * sms))
                record("gemm_epilogue", [M, N, K], f"pack B alone TR={tr} TC={tc} grid={g}",
                       P.bind_pack(gb, buf, tr, tc, g), {"copy_bytes": 2 * gb.numel() * 2})
            cfg = pcfg
        if M <= 64:
            # split-K neighbours: tile shape, and the occupancy hint (255 registers and 128 KB of
            # shared memory a program without one: one program an SM) with the split that fills
            # whole waves of occupancy x SMs programs
            cands = []
            tm = min(64, max(16, 1 << (M - 1).bit_length()))
            for tn, tk, occ, waves in ((128, 128, 1, 2), (128, 64, 1, 2), (64, 128, 1, 2), (128, 128, 2, 1),
                                       (128, 128, 2, 2), (128, 128, 4, 1), (128, 64, 2, 2), (128, 128, 1, 4)):
                tiles = -(-M // tm) * -(-N // tn)
                kt = -(-K // tk)
                split = max(2, min(32, (waves * occ * sms) // tiles, kt // 2))
                kper = -(-kt // split)
                split = -(-kt // kper)
                c = {"variant": "splitk", "TM": tm, "TN": tn, "TK": tk, "KPER": kper, "SPLIT": split,
                     "RM": 16, "RN": 128, "grid": tiles * split, "hints": {"occupancy": occ} if occ > 1 else {}}
                cands.append(c)
            # the previous rule (about two waves of programs, rounded up: 288 at 16 x 6144 x 4096)
            tiles, kt = -(-M // tm) * -(-N // 128), -(-K // 128)
            split = max(1, min(32, -(-2 * sms // tiles), kt // 4))
            kper = -(-kt // split)
            split = -(-kt // kper)
            cands.insert(0, {"variant": "splitk", "TM": tm, "TN": 128, "TK": 128, "KPER": kper, "SPLIT": split,
                             "RM": 16, "RN": 128, "grid": tiles * split, "hints": {}, "rule": "previous"})
            for c in cands:
                if cfg["variant"] == "pack":
                    continue
                kp = L.hinted(gemm_epilogue_splitk.gemm_splitk_partial_kernel, c["hints"])
                f = gemm_epilogue_splitk.bind_launch(ga, gb, gbias, 0, gc, c,
                                                     kernels=(kp, gemm_epilogue_splitk.gemm_splitk_reduce_kernel))
                record("gemm_epilogue", [M, N, K], "splitk " + json.dumps(c), f, dict(ex))
            t = dispatch.tiled_config(M, N, K, 2, sms)
            if cfg["variant"] != "pack":
                f = gemm_epilogue_tiled.bind_launch(ga, gb, gbias, 0, gc, t,
                                                    kernel=L.hinted(gemm_epilogue_tiled.gemm_epilogue_tiled_kernel, t["hints"]))
                record("gemm_epilogue", [M, N, K], "tiled few rows " + json.dumps(t), f, dict(ex))
        if (M, N, K) == (256, 50257, 768):
            try:
                for k, a, h in launches:
                    fct = L.compile_kernel(k, a, h)
                    log("sass", M, N, K, json.dumps({kk: v for kk, v in fct.items() if kk != "_cubin"}, default=str))
            except Exception:
                log("sass failed", traceback.format_exc()[-800:])
        del ga, gb, gc

    # softmax: the models suite's shapes; plan vs neighbours
    from cutile_src import softmax_online_flat, softmax_online_tma, softmax_rows_tma
    R, O, F = softmax_rows.softmax_rows_kernel, softmax_online.softmax_online_kernel, softmax_online_flat.softmax_online_flat_kernel
    RT, OT = softmax_rows_tma.softmax_rows_tma_kernel, softmax_online_tma.softmax_online_tma_kernel
    STAGE_END[0] = LIMIT
    shapes = ((4096, 50257, torch.bfloat16), (32768, 512, torch.bfloat16), (4096, 151936, torch.bfloat16),
              (32768, 1024, torch.bfloat16), (4096, 50257, torch.float32), (8192, 2048, torch.float16),
              (4096, 32000, torch.bfloat16), (32768, 4096, torch.bfloat16), (4096, 128256, torch.float32))
    for M, N, dt in shapes:
        if left() < 8:
            break
        xs = torch.randn(M, N, device=dev, dtype=dt)
        os_ = torch.empty_like(xs)
        copy_us = round(timed(lambda: os_.copy_(xs)), 2)
        ex = {"copy_us": copy_us, "torch_us": round(timed(lambda: torch.softmax(xs, -1)), 2)}
        f, _, plan = L.bind_softmax("default", xs, os_)
        record("softmax", [M, N, str(dt)], "default " + json.dumps(plan), f, ex)
        cands = []
        tn = 1 << (N - 1).bit_length()
        if tn <= 32768:
            for elems in (4096, 8192, 16384):
                rows = max(1, min(64, elems // tn))
                for occ in (2, 4, 8):
                    if rows * tn * occ > 65536 or (occ == 8 and elems > 4096):
                        continue
                    g = -(-M // rows)
                    for name, kern, mod in (("rows", R, softmax_rows), ("rows_tma", RT, softmax_rows_tma)):
                        cands.append((f"{name} ROWS={rows} occ={occ} grid={g}",
                                      mod.bind_launch(xs, os_, rows, tn, g, kernel=L.hinted(kern, {"occupancy": occ}))))
        for t, occ in ((2048, 4), (4096, 2), (4096, 4), (1024, 8)):
            if t > tn or tn <= 32768:
                continue
            cands.append((f"online TILE={t} occ={occ}", softmax_online.bind_launch(
                xs, os_, t, kernel=L.hinted(O, {"occupancy": occ}))))
            cands.append((f"online_tma TILE={t} occ={occ}", softmax_online_tma.bind_launch(
                xs, os_, t, kernel=L.hinted(OT, {"occupancy": occ}))))
            cands.append((f"online_flat TILE={t} occ={occ}", softmax_online_flat.bind_launch(
                xs, os_, t, kernel=L.hinted(F, {"occupancy": occ}))))
        seen = set()
        for label, fn in cands:
            if label not in seen and left() > 8:
                seen.add(label)
                record("softmax", [M, N, str(dt)], label, fn, ex)
        del xs, os_
    try:
        x = torch.empty((64, 50257), device=dev, dtype=torch.bfloat16)
        launches, plan = L._sm_launches("online_flat", x, torch.empty_like(x))
        fct = L.compile_kernel(*launches[0])
        log("sass softmax flat", json.dumps({kk: v for kk, v in fct.items() if kk != "_cubin"}, default=str))
    except Exception:
        log("sass failed", traceback.format_exc()[-800:])
    (OUT / "sweep.json").write_text(json.dumps(RESULTS, indent=1))
    log("done in", round(time.perf_counter() - T0, 1), "s")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        log("FAILED", traceback.format_exc())
        (OUT / "sweep.json").write_text(json.dumps(RESULTS, indent=1))
        raise
