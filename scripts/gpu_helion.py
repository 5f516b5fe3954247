"""GPU check of the Helion layer (no arguments, about two minutes): a bounded run of Helion's
autotuner (effort "quick", 75 s shared among the shape classes of helion_src/dispatch.py) on one
representative shape per class, written to $OUT/helion/tune.json with the chosen configurations,
their times beside dispatch's and Helion's default configuration, and the tuning seconds per
class."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> int:
    out = Path(os.environ.get("OUT", "out")) / "helion"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    import signal

    def stop(*_):
        raise TimeoutError("gpu_helion: 115 s spent; the classes done so far are in tune.json")
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(115)
    import tune_helion
    tune_helion._WRITE = lambda r: (out / "tune.json").write_text(json.dumps(r, indent=2, default=str))
    try:
        res = tune_helion.tune(list(tune_helion.CLASSES), budget=75, effort="quick",
                               log=lambda m: print(m, flush=True))
        tune_helion._WRITE(res)
    except Exception as e:
        import traceback
        (out / "tune_error.txt").write_text(traceback.format_exc())
        print(f"tune failed: {type(e).__name__}: {e}")
    print(f"gpu_helion: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
