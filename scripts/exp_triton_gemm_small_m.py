"""Experiment (round 15): Triton's GEMM + epilogue at few rows (M <= 256), where every layer sits
at 0.85-0.90x torch's act(addmm) on the models suite: narrow split-K tiles (BLOCK_N, BLOCK_K, the
split factor) and, from M = 128, the split-K and TMA tiles of the large-M table, against the
default's plan, on suite shapes and off-suite ones of the same classes. Every candidate is compiled
ahead in a process pool, checked against torch (relative error) and timed interleaved with torch
(``scripts/gpu_triton.time_case``: cold L2). Writes $OUT/gpu_triton.json.

    python3 scripts/exp_triton_gemm_small_m.py [--budget S] [--shapes 'M,N,K;M,N,K']
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_triton as G  # noqa: E402

SHAPES = [(16, 6144, 4096), (16, 28672, 4096), (16, 4096, 14336), (16, 4096, 4096), (1, 6144, 4096),
          (32, 6144, 4096), (64, 8192, 8192), (256, 6144, 4096), (256, 4096, 14336), (128, 6144, 4096),
          (256, 4096, 4096)]


def candidates(M: int) -> list[tuple[str, str, dict | None]]:
    from triton_src import dispatch, next_pow2
    out = [("default", "default", None)]
    if M <= 64:
        bm = max(16, next_pow2(M))
        for bn, bk, splits in ((64, 128, (1, 2, 3, 4, 6, 8)), (128, 128, (1, 2, 3, 4, 6, 8)), (64, 256, (2, 4))):
            for s in splits:
                cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 1, "num_stages": 4,
                       "num_warps": 4, "eff": 1.0, "SPLIT": s}
                out.append((f"narrow {bm}x{bn}x{bk} S{s}", "splitk", cfg))
        return out
    for c in dispatch.GEMM["tma"]:
        out.append((f"tma {c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['num_stages']} w{c['num_warps']}", "tma", c))
    for c in dispatch.GEMM["tiled"]:
        for s in (1, 2, 3, 4):
            out.append((f"splitk {c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} w{c['num_warps']} S{s}", "splitk",
                        {**c, "SPLIT": s}))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=240.0)
    ap.add_argument("--jobs", type=int, default=14)
    ap.add_argument("--shapes", default="", help="M,N,K;M,N,K;... instead of SHAPES")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes.split(";") if s] or SHAPES
    import torch

    import backends.triton_layer  # noqa: F401  (registers the ids)
    from harness import problems
    prob = problems.get("gemm_epilogue")
    G.RESULT["_problems"] = {"gemm_epilogue": prob}
    G.RESULT["facts"] = {"gpu": torch.cuda.get_device_name(0)}
    work, jobs = [], []
    for M, N, K in shapes:
        case = prob.case(M=M, N=N, K=K, dtype="bfloat16", act="none", bias=1)
        cands = candidates(M)
        work.append((case, cands))
        jobs += [("gemm_epilogue", v, case.to_json(), cfg) for _, v, cfg in cands]
    G.compile_ahead(jobs, 0.35 * args.budget, args.jobs)
    per_case = (0.95 * args.budget - G.now()) / len(work)
    for case, cands in work:
        G.time_case("gemm_epilogue", case, cands, G.now() + per_case, None)
        G.save()
        row = G.RESULT["timing"][-1]["rows"]
        top = sorted(((r["speedup_vs_torch"], k) for k, r in row.items() if "speedup_vs_torch" in r), reverse=True)
        print(f"  {case.label}: default {row.get('default', {}).get('speedup_vs_torch')}x; best "
              + ", ".join(f"{k} {s}x" for s, k in top[:4]), flush=True)
    G.RESULT.pop("_problems", None)
    G.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
