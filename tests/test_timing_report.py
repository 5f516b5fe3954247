"""Timing statistics, metrics and report formats (CPU), and the timed path on a GPU."""
import json

import pytest

from harness import report
from harness.case import Case
from harness.timing import Stats, TimingConfig


def test_stats_quartiles_and_stability():
    s = Stats(samples=[1.0, 2.0, 3.0, 4.0, 5.0])
    assert s.quartiles() == (2.0, 3.0, 4.0)
    assert not s.stable(0.01)  # IQR 2 on a median of 3: far from stable
    tight = Stats(samples=[1.0 + 1e-4 * (i % 3) for i in range(50)])
    assert tight.stable(0.01)
    j = tight.to_json()
    assert j["samples"] == 50 and len(j["raw_s"]) == 50 and j["iqr_s"] >= 0
    assert "raw_s" not in tight.to_json(keep_raw=False)
    assert "cold L2" in TimingConfig().describe() and "graph" in TimingConfig(mode="graph").describe()


def _row(impl, t, problem="vector_add", dims=None, dtype="float32", traffic=12_000_000, flops=1_000_000):
    return {"problem": problem, "impl": impl, "layer": impl.split(":")[0], "name": impl.split(":")[1],
            "case": Case(problem, dims or {"N": 1_000_000}, dtype).to_json(),
            "status": "PASS", "time": {"median_s": t, "q1_s": t, "q3_s": t, "iqr_s": 0.0, "samples": 20},
            "traffic_bytes": traffic, "flops": flops, "compile": {"registers": 32, "spills": 0}}


def test_interleaved_rounds_rotate_the_order():
    """Each round of the interleaved timing starts one place further along the list, so no
    implementation always takes the same slot (the first after the host's wait, or the one after
    the same neighbour); every implementation still gets one sample a round."""
    from harness.timing import time_cold

    order = []

    class Launch:
        def __init__(self, key):
            self.key = key

        def call(self):
            return None

        def poison(self):          # called right before each timed sample
            order.append(self.key)

        def result(self, res):
            return res

    cfg = TimingConfig(min_samples=4, max_samples=4, time_cap_s=10.0, warmup_ms=0.0)
    stats = time_cold({k: Launch(k) for k in "abc"}, cfg, "cpu")
    assert all(st.n == 4 for st in stats.values())
    rounds = [order[i:i + 3] for i in range(0, len(order), 3)]
    assert rounds == [list("abc"), list("bca"), list("cab"), list("abc")], rounds


def test_metrics_against_ceilings_baseline_and_model():
    rows = [_row("torch:vector_add", 4e-6), _row("triton:vector_add", 3e-6)]
    ceil = {"copy_bytes_per_s": 4.0e12, "gemm_flops_per_s": {"bfloat16": 7e14}}
    report.add_metrics(rows, ceil, {}, "NVIDIA H200")
    tri = rows[1]
    assert tri["gbps"] == pytest.approx(12e6 / 3e-6 / 1e9)
    # without a same-size copy timed beside it a row has no pct_ceiling; the large copy is pct_hbm
    assert tri["pct_ceiling"] is None and tri["pct_hbm"] == pytest.approx(100 * 12e6 / 3e-6 / 4e12)
    assert tri["pct_datasheet"] == pytest.approx(100 * 12e6 / 3e-6 / 4.8e12)
    assert tri["speedup_vs_baseline"] == pytest.approx(4 / 3) and tri["baseline_impl"] == "torch:vector_add"
    # the model's fused add on the measured copy ceiling: 12 MB / 4 TB/s = 3 us
    assert tri["model_ideal_s"] == pytest.approx(3e-6) and tri["measured_over_ideal"] == pytest.approx(1.0)


def test_gemm_metrics_use_vendor_same_shape():
    case_id = "gemm_epilogue[M=4096,N=4096,K=4096,bfloat16,act=relu,bias=1]"
    r = _row("triton:gemm_epilogue", 2e-4, problem="gemm_epilogue", dims={"M": 4096, "N": 4096, "K": 4096},
             dtype="bfloat16", traffic=1, flops=2 * 4096 ** 3)
    r["case"] = Case("gemm_epilogue", {"M": 4096, "N": 4096, "K": 4096}, "bfloat16",
                     {"act": "relu", "bias": 1}).to_json()
    assert r["case"]["id"] == case_id
    report.add_metrics([r], {"copy_bytes_per_s": 4e12, "gemm_flops_per_s": {"bfloat16": 7e14}},
                       {case_id: {"flops_per_s": 8e14}}, "NVIDIA H200")
    assert r["tflops"] == pytest.approx(2 * 4096 ** 3 / 2e-4 / 1e12)
    assert r["pct_ceiling"] == pytest.approx(100 * r["tflops"] * 1e12 / 7e14)
    assert r["pct_vendor_same_shape"] == pytest.approx(100 * r["tflops"] * 1e12 / 8e14)


def test_outputs_csv_md_json(tmp_path):
    rows = [_row("torch:vector_add", 4e-6)]
    report.add_metrics(rows, None, {}, None)
    doc = report.results_doc(rows, command="python -m harness compare", machine={"gpu": None},
                             ceilings=None, vendor={}, timing={"description": "x"}, suite="bench",
                             created="2026-11-29T00:00:00+00:00")
    paths = report.write_outputs(doc, tmp_path)
    assert json.loads(paths[0].read_text())["rows"][0]["impl"] == "torch:vector_add"
    csv = paths[1].read_text().splitlines()
    assert csv[0].startswith("problem,phase,case,dtype,impl,layer,role,status") and "torch:vector_add" in csv[1]
    assert "| vector_add |" in paths[2].read_text()


@pytest.mark.gpu
def test_compare_times_on_gpu(tmp_path):
    from harness.cli import main

    for extra in ([], ["--graph"]):
        out = tmp_path / ("graph" if extra else "cold")
        rc = main(["compare", "--layer", "torch", "--all", "--problem", "softmax", "--set", "M=512", "--set", "N=1024",
                   "--out", str(out), "--time-cap", "0.2", "--no-ceilings", *extra])
        assert rc == 0
        doc = json.loads((out / "results.json").read_text())
        timed = [r for r in doc["rows"] if r["status"] == "PASS" and r.get("time")]
        assert {r["impl"] for r in timed} >= {"torch:softmax", "torch:softmax_naive"}
        for r in timed:
            assert r["time"]["median_s"] > 0 and r["gbps"] > 0 and r["time"]["samples"] >= 15
        assert doc["timing"]["mode"] == ("graph" if extra else "cold")


@pytest.mark.gpu
def test_ceilings_on_gpu():
    from harness.machine import measure_ceilings

    import math
    c = measure_ceilings(gemm_size=2048)
    assert c["measured"] and c["gemm_size"] == 2048
    assert c["copy_bytes_per_s"] == c["stream_bytes_per_s"]["1:1"]["per_s"]
    rates = [m["per_s"] for m in c["stream_bytes_per_s"].values()] + list(c["gemm_flops_per_s"].values())
    assert set(c["gemm_flops_per_s"]) == {"bfloat16", "float16"}
    assert all(math.isfinite(v) and v > 0 for v in rates), c


def test_implausible_rows_fail_and_lose_their_figures():
    """A GEMM row at 15 us for 8192^3 (70,000 TFLOP/s) and a vector add above the datasheet are
    FAIL implausible, never a figure; a row at the ceiling is kept."""
    from harness import problems
    g = problems.get("gemm_epilogue")
    c = g.case(M=8192, N=8192, K=8192)
    gemm = {"problem": "gemm_epilogue", "impl": "cuda:gemm_epilogue", "layer": "cuda", "case": c.to_json(),
            "status": "PASS", "time": {"median_s": 15e-6, "iqr_s": 1e-7}, "traffic_bytes": g.traffic(c),
            "flops": g.flops(c)}
    v = problems.get("vector_add")
    cv = v.case(N=2 ** 28)
    fast = {"problem": "vector_add", "impl": "x:fast", "layer": "x", "case": cv.to_json(), "status": "PASS",
            "time": {"median_s": v.traffic(cv) / 5.5e12, "iqr_s": 0.0}, "traffic_bytes": v.traffic(cv),
            "flops": v.flops(cv)}
    ok = dict(fast, impl="x:ok", time={"median_s": v.traffic(cv) / 4.3e12, "iqr_s": 0.0})
    ceil = {"copy_bytes_per_s": 4.1e12, "gemm_flops_per_s": {"bfloat16": 7.5e14},
            "stream_bytes_per_s": {"2:1": {"per_s": 4.3e12, "rel_iqr": 0.01}}}
    rows = [gemm, fast, ok]
    report.add_metrics(rows, ceil, {}, "NVIDIA H200")
    assert gemm["status"] == "FAIL" and gemm["kind"] == "implausible" and gemm["tflops"] is None
    assert "TFLOP/s is above" in gemm["reason"] and gemm["time"] is None
    assert fast["status"] == "FAIL" and fast["kind"] == "implausible"
    assert ok["status"] == "PASS" and abs(ok["pct_hbm"] - 100) < 1 and ok["hbm_mix"] == "2:1"
    assert fast["pct_hbm"] is None


def test_pct_ceiling_is_against_the_same_size_copy():
    """Issue 29: a launch-bound vector add is measured against a copy of the same bytes timed
    in the same run (``copy_ceiling`` on the row), the large copy stays beside it as pct_hbm."""
    small = _row("triton:vector_add", 4e-6, traffic=393_216)
    small["copy_ceiling"] = {"bytes": 393_216, "mix": "2:1", "median_s": 3.5e-6, "per_s": 393_216 / 3.5e-6}
    big = _row("triton:vector_add", 3e-3, dims={"N": 2 ** 28}, traffic=3 * 4 * 2 ** 28)
    big["copy_ceiling"] = {"bytes": 3 * 4 * 2 ** 28, "mix": "2:1", "median_s": 2.9e-3,
                           "per_s": 3 * 4 * 2 ** 28 / 2.9e-3}
    ceil = {"copy_bytes_per_s": 4.0e12, "stream_bytes_per_s": {"2:1": {"per_s": 4.2e12, "rel_iqr": 0.0}}}
    report.add_metrics([small, big], ceil, {}, "NVIDIA H200")
    assert small["pct_ceiling"] == pytest.approx(100 * 3.5 / 4) and small["ceiling_mix"] == "2:1"
    assert small["pct_hbm"] == pytest.approx(100 * 393_216 / 4e-6 / 4.2e12) and small["pct_hbm"] < 3
    assert big["pct_ceiling"] == pytest.approx(100 * 2.9 / 3)


def test_same_size_copy_moves_the_case_bytes():
    import torch
    from harness import problems
    for name, case, mix_parts in (("vector_add", {"N": 98_432}, 3), ("softmax", {"M": 37, "N": 1000}, 2)):
        p = problems.get(name)
        c = p.case(dtype="float16", **case)
        launch = p.copy_launch(c, "cpu")
        out = launch()
        assert out.dtype == torch.float32 and out.numel() * 4 * mix_parts >= p.traffic(c)
        assert out.numel() * 4 * mix_parts - p.traffic(c) < 4 * mix_parts
    g = problems.get("gemm_epilogue")
    assert g.copy_launch(g.case(M=64, N=48, K=32), "cpu") is None


def test_headline_has_plan_loc_compile_host_and_tune_columns():
    from harness import summary
    a = _row("triton:vector_add", 3e-6)
    b = _row("cuda:vector_add", 3.2e-6)
    for r, loc, comp, host in ((a, (16, 48, 14), {"compile_s": 0.5}, 12.0), (b, (40, 76, 20), {"compile_s": 0.0}, 6.0)):
        r["role"] = "default"
        r["loc"] = dict(zip(("kernel", "host", "plan"), loc))
        r["compile"] = comp
        r["time"]["host_us"] = host
        r["pct_ceiling"] = 80.0
    a["compile"]["tune_s"] = 30.0
    s = summary.summarize([a, b])["vector_add"]
    ln = {x["impl"]: x for x in s["lines"]}
    assert ln["triton:vector_add"]["loc_plan"] == 14 and ln["cuda:vector_add"]["loc_plan"] == 20
    assert ln["triton:vector_add"]["compile_s"] == pytest.approx(0.5)
    assert ln["cuda:vector_add"]["compile_s"] == 0.0          # built ahead of time: no first-call compile
    assert ln["triton:vector_add"]["host_us"] == pytest.approx(12.0)
    assert ln["triton:vector_add"]["tune_s"] == 30.0 and ln["cuda:vector_add"]["tune_s"] is None
    md = "\n".join(summary.render_md({"vector_add": s}))
    assert "LOC kernel/host/plan" in md and "compile s" in md and "host us" in md and "tune s" in md
    assert "| triton:vector_add | default | 16/48/14 |" in md


def test_headline_against_the_best_library_row():
    """Per case the fastest PASS library row is the yardstick; a library that declines a case
    leaves it to the others and does not take the case out of the other lines' means."""
    from harness import summary
    rows = []
    for n, (base, dflt, comp, quack) in {1000: (4e-6, 2e-6, 3e-6, 1e-6), 2000: (8e-6, 4e-6, 2e-6, None)}.items():
        d = {"N": n}
        b = _row("torch:vector_add", base, dims=d); b["role"] = "baseline"
        x = _row("triton:vector_add", dflt, dims=d); x["role"] = "default"
        c = _row("torch:vector_add_compile", comp, dims=d); c["role"] = "library"
        q = _row("quack:vector_add", quack or 1.0, dims=d); q["role"] = "library"
        if quack is None:
            q["status"], q["time"] = "SKIP", None
        for r in (b, x, c, q):
            r["speedup_vs_baseline"] = base / r["time"]["median_s"] if r["time"] else None
        rows += [b, x, c, q]
    s = summary.summarize(rows, roles=("baseline", "library", "default"))["vector_add"]
    assert s["common_cases"] == 2 and s["library"]
    ln = {x["impl"]: x for x in s["lines"]}
    # case 1000: best library 1e-6 (quack) / 2e-6 = 0.5; case 2000: torch.compile 2e-6 / 4e-6 = 0.5
    assert ln["triton:vector_add"]["geomean_vs_library"] == pytest.approx(0.5)
    assert ln["torch:vector_add"]["geomean_vs_library"] == pytest.approx((0.25 * 0.25) ** 0.5)
    md = "\n".join(summary.render_md({"vector_add": s}))
    assert "vs best library (geomean)" in md and "| triton:vector_add | default |" in md
    assert summary.summarize([r for r in rows if r["role"] != "library"])["vector_add"]["library"] is False
