"""GPU check of the cuTile layer (no arguments, about 2 minutes at most): writes $OUT/cutile/.

1. versions, and whether compile-only's signature (built from shapes, strides and alignment) is
   the one a launch derives from the tensors (KernelSignature.from_kernel_args);
2. a small sweep of the planner's choices against neighbours (vector add tile, softmax rows vs
   online and the online tile, GEMM tile shapes / hints / split-K) with torch beside, median of
   CUDA-event timed launches; a time guard stops it before the limit;
3. the SASS of the default GEMM on two models shapes (does HGMMA / UTMALDG appear).
Everything goes to $OUT/cutile/sweep.json, signatures.json, *.sass and log.txt.
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
LIMIT = 105.0
OUT = Path(os.environ.get("OUT", "/tmp/out")) / "cutile"
OUT.mkdir(parents=True, exist_ok=True)
LOG = open(OUT / "log.txt", "w")


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.write(s + "\n")
    LOG.flush()


def left() -> float:
    return LIMIT - (time.perf_counter() - T0)


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


def main():
    import cuda.tile as ct
    from cuda.tile.compilation import CallingConvention, KernelSignature

    from backends import cutile_layer as L
    from cutile_src import (dispatch, gemm_epilogue_splitk, gemm_epilogue_tiled, softmax_online,
                            softmax_rows, vector_add_unmasked)
    log("torch", torch.__version__, "cuda.tile", getattr(ct, "__version__", "?"),
        "device", torch.cuda.get_device_name(), "SMs", L._sms())
    dev = "cuda"
    results = []

    # 1. signatures: compile-only's vs the launch's
    sigs = []
    x = torch.randn(4100, device=dev, dtype=torch.float16)[3:4099]
    xs = torch.randn(300, 780, device=dev)[:, :777]
    a = torch.randn(64, 513, device=dev, dtype=torch.bfloat16)
    for name, kern, args in [("va_misaligned", vector_add_unmasked.vector_add_unmasked_kernel,
                              vector_add_unmasked.split_args(x, x, x, 4096)),
                             ("softmax_strided", softmax_rows.softmax_rows_kernel, (xs, xs, 4, 1024, False)),
                             ("gemm_odd_k", gemm_epilogue_tiled.gemm_epilogue_tiled_kernel,
                              (a, a.t().contiguous(), a[0], a[:, :64].contiguous(), 1, 1, 64, 128, 64, 8, True))]:
        for cc_name in ("cutile_python_v1", "cutile_python_v2"):
            cc = getattr(CallingConvention, cc_name)()
            try:
                launch_sig = KernelSignature.from_kernel_args(kern, args, cc)
                mine = KernelSignature([L._constraint(t, c) for t, c in zip(args, L._constant_params(kern))], cc)
                mine = mine.with_mangled_symbol(kern._pyfunc.__name__) if hasattr(kern, "_pyfunc") else mine
                sigs.append({"case": name, "cc": cc_name, "launch": launch_sig.symbol, "compile_only": mine.symbol,
                             "same": launch_sig.parameters == mine.parameters,
                             "launch_params": repr(launch_sig.parameters)[:2000]})
            except Exception as e:
                sigs.append({"case": name, "cc": cc_name, "error": f"{type(e).__name__}: {e}"[:500]})
    # the launch's compile, then the export of the same signature (the adapter's facts path):
    # a hit in cuTile's disk cache if the export is fast
    try:
        y = torch.randn(5000, device=dev, dtype=torch.float16)
        t1 = time.perf_counter()
        vector_add_unmasked.bind_launch(y, y, y, 2048)()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        f = L.compile_kernel(vector_add_unmasked.vector_add_unmasked_kernel,
                             vector_add_unmasked.split_args(y, y, y, 2048), sass=False)
        t3 = time.perf_counter()
        sigs.append({"case": "launch then export", "launch_s": round(t2 - t1, 3), "export_s": round(t3 - t2, 3),
                     "facts": {k: v for k, v in f.items() if k != "_cubin"}})
    except Exception as e:
        sigs.append({"case": "launch then export", "error": f"{type(e).__name__}: {e}"[:500]})
    (OUT / "signatures.json").write_text(json.dumps(sigs, indent=1))
    log("signatures", json.dumps([{k: s.get(k) for k in ("case", "cc", "same", "error")} for s in sigs]))

    def record(problem, shape, label, fn, torch_fn=None, extra=None):
        if left() < 5:
            log("time guard: skipped", problem, shape, label)
            return
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
            if "flops" in row:
                row["tflops"] = round(row.pop("flops") / us / 1e6, 1)
            if torch_fn is not None:
                row["torch_us"] = round(timed(torch_fn), 2)
                row["vs_torch"] = round(row["torch_us"] / us, 3)
            results.append(row)
            log(json.dumps(row))
        except Exception as e:
            results.append({"problem": problem, "shape": shape, "label": label, "error": f"{type(e).__name__}: {e}"[:800]})
            log("ERROR", problem, shape, label, traceback.format_exc()[-1500:])

    # 2a. GEMM (first: the most to learn)
    for M, N, K in ((4096, 28672, 4096), (4096, 50257, 768), (256, 6144, 4096), (16, 6144, 4096), (16, 4096, 14336)):
        ga = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        gb = torch.randn(K, N, device=dev, dtype=torch.bfloat16)
        gbias = torch.randn(N, device=dev, dtype=torch.bfloat16)
        gc = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        tf = (lambda: torch.addmm(gbias, ga, gb))
        plan = dispatch.plan_gemm(M, N, K, 2, L._sms())
        cands = [("plan " + json.dumps(plan), plan)]
        if plan["variant"] == "splitk":
            cands.append(("tiled (few rows)", dispatch.tiled_config(M, N, K, 2, L._sms())))
        for tm, tn, tk, h in ((128, 256, 64, {"num_worker_warps": 8}), (128, 128, 64, {"num_worker_warps": 8}),
                              (128, 128, 64, {}), (64, 128, 64, {})):
            if M >= 128 or tm == 64:
                tiles = -(-M // tm) * -(-N // tn)
                cands.append((f"tiled {tm}x{tn}x{tk} {h}", {"variant": "tiled", "TM": tm, "TN": tn, "TK": tk,
                                                              "GROUP": 8, "grid": tiles, "hints": h}))
        for label, cfg in cands[:4]:
            if cfg["variant"] == "splitk":
                f = gemm_epilogue_splitk.bind_launch(ga, gb, gbias, 0, gc, cfg)
            else:
                f = gemm_epilogue_tiled.bind_launch(ga, gb, gbias, 0, gc, cfg,
                                                    kernel=L.hinted(gemm_epilogue_tiled.gemm_epilogue_tiled_kernel, cfg["hints"]))
            record("gemm_epilogue", [M, N, K], label, f, tf, {"flops": 2 * M * N * K})
        if (M, N, K) in ((4096, 28672, 4096), (4096, 50257, 768)) and left() > 10:
            try:
                launches, _ = L._gemm_launches("default", ga, gb, gbias, "none", gc)
                k, args, h = launches[0]
                f = L.compile_kernel(k, args, h)
                (OUT / f"gemm_{M}x{N}x{K}.sass").write_text(L.sass_text(f["_cubin"]) or "no cuobjdump")
                log("sass", M, N, K, json.dumps({kk: v for kk, v in f.items() if kk != "_cubin"}, default=str))
            except Exception:
                log("sass failed", traceback.format_exc()[-800:])
        del ga, gb, gc

    # 2b. softmax: the plan (with its hints) against the same kernel without hints / other hints
    R, O = softmax_rows.softmax_rows_kernel, softmax_online.softmax_online_kernel
    for M, N, dt in ((32768, 1024, torch.bfloat16), (32768, 4096, torch.bfloat16), (4096, 32000, torch.bfloat16),
                     (4096, 32000, torch.float32), (4096, 151936, torch.bfloat16)):
        xs = torch.randn(M, N, device=dev, dtype=dt)
        os_ = torch.empty_like(xs)
        plan = dispatch.plan_softmax(M, N, xs.element_size(), L._sms())
        copy_us = round(timed(lambda: os_.copy_(xs)), 2)  # the same bytes read and written
        cands = []
        if plan["variant"] == "rows":
            r, tn = plan["ROWS"], plan["TN"]
            every = -(-M // r)
            for h, g in [(plan["hints"], plan["grid"]), (plan["hints"], every), ({"occupancy": 8}, every),
                         ({"occupancy": 8}, 8 * L._sms()), ({}, every)]:
                cands.append((f"rows ROWS={r} TN={tn} {h} grid={g}",
                              softmax_rows.bind_launch(xs, os_, r, tn, g, kernel=L.hinted(R, h))))
            cands.append(("online TILE=2048 occ4", softmax_online.bind_launch(xs, os_, 2048, kernel=L.hinted(O, {"occupancy": 4}))))
        else:
            sms = L._sms()
            for t, h, g in [(plan["TILE"], plan["hints"], plan["grid"]), (4096, {"occupancy": 2}, M),
                            (2048, {"occupancy": 4}, 4 * sms), (1024, {"occupancy": 8}, M),
                            (2048, {"occupancy": 2}, M)]:
                cands.append((f"online TILE={t} {h} grid={g}",
                              softmax_online.bind_launch(xs, os_, t, g, kernel=L.hinted(O, h))))
        seen = set()
        for label, f in cands:
            if label in seen:
                continue
            seen.add(label)
            record("softmax", [M, N, str(dt)], label, f, lambda: torch.softmax(xs, -1),
                   {"plan": plan, "copy_us": copy_us})
        del xs, os_

    # 2c. vector add
    for n, dt in ((8192 * 8192, torch.bfloat16), (2 ** 27 + 1, torch.float32)):
        xa, ya, oa = (torch.randn(n, device=dev, dtype=dt) for _ in range(3))
        for tile in ((2048, 4096, 8192) if dt == torch.bfloat16 else (2048, 4096)):
            f = vector_add_unmasked.bind_launch(xa, ya, oa, tile)
            record("vector_add", [n, str(dt)], f"unmasked TILE={tile}", f, lambda: torch.add(xa, ya, out=oa))
        del xa, ya, oa

    (OUT / "sweep.json").write_text(json.dumps(results, indent=1))
    log("done in", round(time.perf_counter() - T0, 1), "s")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        log("FAILED", traceback.format_exc())
        raise
