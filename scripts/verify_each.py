#!/usr/bin/env python3
"""Verify implementations case by case, each in its own process, printing every case as it ends.

    python3 scripts/verify_each.py --impl cute:softmax_block --impl cute:softmax_rows \
        --problem softmax --suite verify --out DIR [--stall 60] [--limit 400]

Why beside ``harness verify``: that command runs a task (one case, every selected implementation)
per worker and reports rows as they finish, so one implementation that waits forever on its first
case leaves a run with no rows at all and no clue where it waits. Here every implementation runs
in a process of its own, in parallel, writes ``DIR/<impl>.jsonl`` (a line per case: status, reason,
seconds) as it goes, and, when a case takes longer than ``--stall`` seconds, the Python stacks of
that process go to ``DIR/<impl>.stacks`` (faulthandler, repeated) - the line it waits on.
Each process is killed after ``--limit`` seconds; its file still holds the cases that ended.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def one(impl_id: str, problem: str, suite: str, out: Path, stall: float) -> int:
    import torch

    from harness import problems, registry
    from harness.verify import verify_case

    registry.load_backends()
    prob = problems.get(problem)
    im = registry.get(problem, impl_id)
    safe = impl_id.replace(":", "_")
    rows = open(out / f"{safe}.jsonl", "a", buffering=1)
    stacks = open(out / f"{safe}.stacks", "w")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    bad = 0
    for case in prob.cases(suite):
        row = {"impl": impl_id, "case": case.id}
        why = im.supports(case)
        t0 = time.time()
        if why:
            row.update(status="SKIP" if im.role != "default" else "FAIL", reason=f"declined: {why}")
        else:
            faulthandler.dump_traceback_later(stall, repeat=True, file=stacks)
            try:
                c = verify_case(im, prob, case, device, seeds=(0, 1))
                row.update(status="PASS" if c.ok else "FAIL", reason=c.reason)
            except Exception as e:   # a crash of this case: recorded, the next case runs
                row.update(status="FAIL", reason=f"crashed: {type(e).__name__}: {e}"[:400])
            finally:
                faulthandler.cancel_dump_traceback_later()
        row["s"] = round(time.time() - t0, 2)
        bad += row["status"] == "FAIL"
        rows.write(json.dumps(row) + "\n")
        print(f"{impl_id:28s} {case.id:55s} {row['status']:4s} {row['s']:7.2f} s {row.get('reason', '')[:120]}",
              flush=True)
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", action="append", required=True)
    ap.add_argument("--problem", required=True)
    ap.add_argument("--suite", default="verify")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "verify_each_out"))
    ap.add_argument("--stall", type=float, default=60.0, help="seconds a case may take before stacks are dumped")
    ap.add_argument("--limit", type=float, default=400.0, help="seconds each process may run")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.one:
        return one(args.impl[0], args.problem, args.suite, args.out, args.stall)
    procs = {}
    for iid in args.impl:
        cmd = [sys.executable, __file__, "--one", "--impl", iid, "--problem", args.problem, "--suite", args.suite,
               "--out", str(args.out), "--stall", str(args.stall)]
        procs[iid] = subprocess.Popen(cmd, cwd=ROOT)
    t0 = time.time()
    status = {}
    while len(status) < len(procs):
        for iid, p in procs.items():
            if iid in status:
                continue
            if p.poll() is not None:
                status[iid] = p.returncode
            elif time.time() - t0 > args.limit:
                p.kill()
                p.wait()
                status[iid] = f"killed after {args.limit:g} s"
        time.sleep(0.5)
    for iid, st in status.items():
        print(f"{iid}: {st}", flush=True)
    return 0 if all(st == 0 for st in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
