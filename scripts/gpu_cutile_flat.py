"""On the GPU machine: find where cuTile's flat online softmax (cutile_src/softmax_online_flat.py)
stops. It hung at 4096 x 50257 bf16 on the H200 (2026-12-06), where it compiles on the CPU with
no spills. Each probe runs in a child process with a time limit, so that a hang costs that limit
and not the call: the kernel as it is at growing sizes, then one change at a time (no row loop,
the shallowest latency hint, pass 2 stored by scatter only or by whole tiles only).
A probe prints ok / FAIL (max error against torch.softmax in float64) / HANG / ERROR and its time
per call beside torch.softmax's.

    python3 scripts/gpu_cutile_flat.py [--limit S] [--out FILE.json]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (name, M, N, dtype, grid (0: one program a row), latency hint, pass-2 mode, occupancy)
PROBES = (
    ("tree 2 rows", 2, 50257, "bfloat16", 0, 8, "tree", 1),
    ("tree 64 rows, a program a row", 64, 50257, "bfloat16", 0, 8, "tree", 1),
    ("tree 64 rows, 16 programs loop", 64, 50257, "bfloat16", 16, 8, "tree", 1),
    ("latency hint 1, 64 rows", 64, 50257, "bfloat16", 0, 1, "tree", 1),
    ("pass 2 scatter only, 64 rows", 64, 50257, "bfloat16", 0, 8, "scatter", 1),
    ("pass 2 store only (edges wrong), 64 rows", 64, 50257, "bfloat16", 0, 8, "store", 1),
    ("no row loop, 64 rows", 64, 50257, "bfloat16", 0, 8, "noloop", 1),
    ("tree fp32 64 rows", 64, 50257, "float32", 0, 6, "tree", 1),
    ("tree plan 4096 rows (grid 132)", 4096, 50257, "bfloat16", 132, 8, "tree", 1),
    ("no row loop 4096 rows", 4096, 50257, "bfloat16", 0, 8, "noloop", 1),
    ("latency hint 1, 4096 rows", 4096, 50257, "bfloat16", 132, 1, "tree", 1),
    ("scatter 4096 rows", 4096, 50257, "bfloat16", 132, 8, "scatter", 1),
    ("tree 1000 x 32769 bf16", 1000, 32769, "bfloat16", 264, 8, "tree", 2),
    ("tree 3 x 100003 fp32", 3, 100003, "float32", 0, 6, "tree", 1),
)


def kernels():
    global ct
    import cuda.tile as ct

    from cutile_src.softmax_online_flat import softmax_online_flat_kernel
    from cutile_src.softmax_online_tma import online_step, online_total

    @ct.kernel
    def flat_modes(x, out, N: int, TILE: ct.Constant[int], LATENCY: ct.Constant[int],
                   MODE: ct.Constant[int]):
        # MODE 1: pass 2 stores every tile by masked scatter; 2: by whole tiles (neighbour rows'
        # lanes overwritten: a timing probe only)
        ar = ct.arange(TILE, dtype=ct.int32)
        for row in range(ct.bid(0), x.shape[0] // N, ct.num_blocks(0)):
            start = row * N
            j0 = start // TILE
            j1 = ct.cdiv(start + N, TILE)
            m = ct.full((TILE,), -math.inf, dtype=ct.float32)
            s = ct.full((TILE,), 0.0, dtype=ct.float32)
            for j in range(j0, j1):
                inside = (ar >= start - j * TILE) & (ar < start + N - j * TILE)
                t = ct.astype(ct.load(x, index=(j,), shape=(TILE,), latency=LATENCY), ct.float32)
                m, s = online_step(m, s, ct.where(inside, t, -math.inf))
            m_row, inv = online_total(m, s, 0)
            for i in range(j1 - j0):
                j = j1 - 1 - i
                t = ct.astype(ct.load(x, index=(j,), shape=(TILE,), latency=LATENCY), ct.float32)
                p = ct.astype(ct.exp(t - m_row) * inv, out.dtype)
                if MODE == 1:
                    lo, hi = start - j * TILE, start + N - j * TILE
                    ct.scatter(out, j * TILE + ar, p, mask=(ar >= lo) & (ar < hi))
                else:
                    ct.store(out, index=(j,), tile=p)

    @ct.kernel
    def flat_noloop(x, out, N: int, TILE: ct.Constant[int], LATENCY: ct.Constant[int]):
        ar = ct.arange(TILE, dtype=ct.int32)
        start = ct.bid(0) * N
        j0 = start // TILE
        j1 = ct.cdiv(start + N, TILE)
        m = ct.full((TILE,), -math.inf, dtype=ct.float32)
        s = ct.full((TILE,), 0.0, dtype=ct.float32)
        for j in range(j0, j1):
            inside = (ar >= start - j * TILE) & (ar < start + N - j * TILE)
            t = ct.astype(ct.load(x, index=(j,), shape=(TILE,), latency=LATENCY), ct.float32)
            m, s = online_step(m, s, ct.where(inside, t, -math.inf))
        m_row, inv = online_total(m, s, 0)
        for i in range(j1 - j0):
            j = j1 - 1 - i
            lo, hi = start - j * TILE, start + N - j * TILE
            t = ct.astype(ct.load(x, index=(j,), shape=(TILE,), latency=LATENCY), ct.float32)
            p = ct.astype(ct.exp(t - m_row) * inv, out.dtype)
            if lo <= 0 and hi >= TILE:
                ct.store(out, index=(j,), tile=p)
            else:
                ct.scatter(out, j * TILE + ar, p, mask=(ar >= lo) & (ar < hi))

    return ct, softmax_online_flat_kernel, flat_modes, flat_noloop


def one(spec: list) -> dict:
    import torch

    name, M, N, dtype, grid, latency, mode, occ = spec
    ct, tree, modes, noloop = kernels()
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn((M, N), generator=g, device="cuda", dtype=torch.float32) * 3).to(dt)
    out = torch.full_like(x, float("nan"))
    tile = 2048
    if mode == "tree":
        k, args = tree, (x.view(-1), out.view(-1), N, tile, latency)
    elif mode == "noloop":
        k, args = noloop, (x.view(-1), out.view(-1), N, tile, latency)
    else:
        k, args = modes, (x.view(-1), out.view(-1), N, tile, latency, {"scatter": 1, "store": 2}[mode])
    if occ:
        k = k.replace_hints(occupancy=occ)
    launch_grid = (M if mode == "noloop" or not grid else grid, 1, 1)
    t0 = time.perf_counter()
    ct.launch(torch.cuda.current_stream(), launch_grid, k, args)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ref = torch.softmax(x.double(), dim=1)
    err = (out.double() - ref).abs()
    worst = float(torch.nan_to_num(err, nan=math.inf).max())
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    reps = 20
    ev[0].record()
    for _ in range(reps):
        ct.launch(torch.cuda.current_stream(), launch_grid, k, args)
    ev[1].record()
    ev[2].record()
    for _ in range(reps):
        torch.softmax(x, dim=1)
    ev[3].record()
    torch.cuda.synchronize()
    return {"first_call_s": round(first, 2), "max_err": worst,
            "us": round(ev[0].elapsed_time(ev[1]) * 1000 / reps, 1),
            "torch_us": round(ev[2].elapsed_time(ev[3]) * 1000 / reps, 1),
            "bound": 2 ** -7 if dtype != "float32" else 1e-5}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=40.0, help="seconds a probe may take")
    ap.add_argument("--out", default=None, help="JSON file for the probes' results")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print("RESULT " + json.dumps(one(json.loads(a.one))), flush=True)
        return 0
    rows, hung = [], {}
    for spec in PROBES:
        t0 = time.time()
        key = (spec[3], spec[5], spec[6])  # dtype, latency, mode: a hang at fewer rows implies one at more
        if key in hung:
            r = {"status": "SKIP", "reason": f"hung at {hung[key]} rows"}
            rows.append(r | {"probe": spec[0], "spec": spec})
            print(f"SKIP  {spec[0]:44s} {r['reason']}", flush=True)
            continue
        try:
            p = subprocess.run([sys.executable, __file__, "--one", json.dumps(spec)], capture_output=True,
                               text=True, timeout=a.limit)
            res = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if res:
                r = json.loads(res[-1][7:])
                r["status"] = "ok" if r["max_err"] <= r["bound"] else "FAIL"
            else:
                r = {"status": "ERROR", "reason": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
        except subprocess.TimeoutExpired:
            r = {"status": "HANG", "reason": f"no result in {a.limit:.0f} s"}
            hung[key] = spec[1]
        r |= {"probe": spec[0], "spec": spec, "wall_s": round(time.time() - t0, 1)}
        rows.append(r)
        print(f"{r['status']:5s} {spec[0]:44s} " + " ".join(f"{k}={r[k]}" for k in
              ("us", "torch_us", "max_err", "first_call_s", "reason", "wall_s") if k in r), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
