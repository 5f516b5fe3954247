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
