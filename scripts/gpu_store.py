"""GPU check of the results store and the HTML report (no arguments; writes under $OUT/store/).

Two short compares of vector add (smoke cases, twin and default beside torch, no verify suite, a
short time cap) into one SQLite store, then `runs`, `diff` (table and JSON: real time ratios
against the measured noise), `export --format csv` and `report --html` of both runs. Every step
has its own time limit; what finished is kept, with each command's output and exit status in
steps.txt.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("OUT", "gpu_out")) / "store"
ROOT = Path(__file__).resolve().parent.parent
DEADLINE = time.monotonic() + 115


def step(name: str, args: list[str], limit: float, log) -> int | None:
    left = DEADLINE - time.monotonic()
    if left < 5:
        log.write(f"== {name}: skipped (no time left)\n")
        return None
    cmd = [sys.executable, "-m", "harness", *args]
    t = time.monotonic()
    try:
        r = subprocess.run(cmd, cwd=OUT, capture_output=True, text=True, timeout=min(limit, left))
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        got = e.stdout or ""
        rc, out, err = "timeout", got.decode(errors="replace") if isinstance(got, bytes) else got, ""
    log.write(f"== {name}: rc={rc} in {time.monotonic() - t:.1f}s\n$ {' '.join(cmd)}\n{out[-6000:]}\n{err[-3000:]}\n")
    log.flush()
    (OUT / f"{name}.txt").write_text(out)
    return rc if isinstance(rc, int) else None


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    store = str(OUT / "runs.sqlite")
    small = ["compare", "--suite", "smoke", "--problem", "vector_add", "--roles", "baseline,default,simple",
             "--no-verify-suite", "--time-cap", "0.3", "--store", store]
    with open(OUT / "steps.txt", "w") as log:
        step("compare1", small + ["--out", str(OUT / "run1")], 50, log)
        step("compare2", small + ["--out", str(OUT / "run2")], 40, log)
        step("runs", ["runs", "--store", store], 10, log)
        step("diff", ["diff", "1", "2", "--store", store, "--all-rows"], 10, log)
        step("diff_json", ["diff", "1", "2", "--store", store, "--format", "json"], 10, log)
        step("export_csv", ["export", "2", "--store", store, "--format", "csv"], 10, log)
        step("report", ["report", "1", "2", "--store", store, "--html", str(OUT / "site")], 25, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
