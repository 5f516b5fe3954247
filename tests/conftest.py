"""Shared test set-up: the CPU mode (Triton interpreter), the `gpu` marker, and every test's
default results folder and store under its own tmp folder (never the checkout's results/)."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

try:
    import torch
    HAS_GPU = torch.cuda.is_available()
except Exception:  # pragma: no cover
    HAS_GPU = False

if not HAS_GPU:
    # must happen before triton is imported anywhere: @triton.jit then yields interpreter objects
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device():
    return "cuda" if HAS_GPU else "cpu"


CHECKOUT_RESULTS = ROOT / "results"


def results_snapshot() -> dict:
    """name -> modification time of each entry of the checkout's results/ (a new run folder, a
    store file written or created: runs.sqlite, its -wal and -shm)."""
    if not CHECKOUT_RESULTS.is_dir():
        return {}
    return {p.name: p.stat().st_mtime_ns for p in CHECKOUT_RESULTS.iterdir()}


@pytest.fixture(autouse=True)
def default_results(monkeypatch, tmp_path_factory):
    """The harness's defaults (``results/<run>`` without --out, ``results/runs.sqlite`` without
    --store) point into a tmp folder of this test's own; a test that still writes into the checkout's
    results/ (a subprocess started in the checkout) fails at teardown, naming what it wrote."""
    from harness import results, store
    base = tmp_path_factory.mktemp("default-results")   # beside tmp_path: --out tmp_path stays empty
    monkeypatch.setattr(results, "DEFAULT_ROOT", base)
    monkeypatch.setattr(store, "DEFAULT_PATH", base / "runs.sqlite")
    before = results_snapshot()
    yield base
    after = results_snapshot()
    wrote = sorted(n for n, t in after.items() if before.get(n) != t)
    assert not wrote, f"this test wrote into the checkout's results/: {wrote}"


#: seeds of a GPU test's verify_case: the main job verifies with three; a GPU test checks that an
#: implementation passes the verify suite at all, on one seed whose launch runs twice (a race, an
#: unwritten element or a stale buffer still shows), so `pytest -m gpu` fits one 10-minute call
GPU_SEEDS = (0,)


def _compile_group(jobs):
    """compile_only of each (problem, impl id, case) in turn, in one worker: a kernel two cases
    share is compiled once (the layers cache it in-process). The failures, one line each."""
    from harness import registry
    failed = []
    for problem, impl_id, case in jobs:
        try:
            registry.get(problem, impl_id, candidates=True).compile_only_fn(case)
        except Exception as e:   # reported by compile_ahead; the test's own prepare raises it again
            failed.append(f"{impl_id} {case.id}: {type(e).__name__}: {str(e).strip()[:200]}")
    return failed


def compile_ahead(jobs, budget_s: float = 240.0) -> list[str]:
    """Compile ``jobs`` ((problem, impl id, case), through each implementation's compile_only) in
    parallel worker processes, so that the layers' disk caches (TileLang's kernel cache, the CuTe
    DSL's exported kernels) hold them before a GPU test prepares them one after the other: the
    compiles of a layer's verify suite take minutes serially, and the GPU machine's cores sit idle
    meanwhile. The jobs of one implementation, dtype and bias (the cases that share kernels) go to
    one worker. Workers still busy after ``budget_s`` are stopped (the test compiles what is left
    itself). Returns the jobs that failed, one line each (the test's own prepare raises them)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, TimeoutError, as_completed

    jobs = list(dict.fromkeys(jobs))
    groups: dict = {}
    for problem, impl_id, case in jobs:
        groups.setdefault((problem, impl_id, case.dtype, case.params.get("bias")), []).append((problem, impl_id, case))
    if not groups:
        return []
    from harness.machine import usable_cpus
    workers = min(len(groups), max(1, usable_cpus() - 1), 15)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    futures = [pool.submit(_compile_group, g) for g in sorted(groups.values(), key=len, reverse=True)]
    failed = []
    try:
        for f in as_completed(futures, timeout=budget_s):
            failed += f.result()
    except TimeoutError:
        failed.append(f"compile_ahead: {sum(not f.done() for f in futures)} of {len(groups)} groups "
                      f"still compiling after {budget_s:.0f} s: stopped")
    finally:
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
    print(f"compile_ahead: {len(groups)} groups of {len(jobs)} compiles on {workers} workers; "
          f"failed: {failed or 'none'}")
    return failed
