"""The roofline model reproduces hand calculations of its stated conventions exactly.

Every expected number below is worked out by hand in the comments (element sizes: fp32 4 B,
fp16/bf16 2 B; decimal bytes), not computed by the code under test.
"""
from __future__ import annotations

import argparse
import json

import pytest

from harness import model
from harness.case import Case

KEYS = ["problem", "variant", "kernels", "flops", "bytes_read", "bytes_written", "bytes", "intensity",
        "t_compute_s", "t_memory_s", "t_ideal_s", "bound"]


def run_cli(argv, capsys):
    p = argparse.ArgumentParser(prog="harness")
    sub = p.add_subparsers(dest="cmd", required=True)
    model.add_parser(sub)
    args = p.parse_args(argv)
    try:
        rc = args.func(args)
    except ValueError as e:  # what the lead's cli.py does: one line, exit 2
        return 2, "", str(e)
    out = capsys.readouterr()
    return rc, out.out, out.err


def check_rows(rows, expected):
    assert [r["variant"] for r in rows] == [e["variant"] for e in expected]
    for r, e in zip(rows, expected):
        assert list(r) == KEYS
        for k in ("kernels", "flops", "bytes_read", "bytes_written", "bytes"):
            assert type(r[k]) is int and r[k] == e[k], (r["variant"], k, r[k], e[k])
        for k in ("intensity", "t_compute_s", "t_memory_s", "t_ideal_s"):
            assert isinstance(r[k], float)
            assert r[k] == pytest.approx(e[k], rel=1e-12, abs=0), (r["variant"], k, r[k], e[k])
        assert r["bound"] == e["bound"], r["variant"]


def test_softmax_fp32_by_hand():
    # M=4 rows of N=8, fp32 (4 B), BW = 1e12 B/s, P = 1e13 FLOP/s.
    # fused: F = M*(max 7 + sub 8 + exp 8 + sum 7 + div 8) = 4*38 = 152
    #        read = 4*8*4 = 128, written = 128, Q = 256, I = 152/256 = 0.59375
    #        Tc = 152/1e13 = 1.52e-11, Tm = 256/1e12 = 2.56e-10 -> memory, T_ideal = 2.56e-10
    # naive: max      F=4*7=28  read 128        written 4*4=16   Q=144
    #        subtract F=32      read 128+16=144 written 128      Q=272
    #        exp      F=32      read 128        written 128      Q=256
    #        sum      F=28      read 128        written 16       Q=144
    #        divide   F=32      read 144        written 128      Q=272
    #        F = 152, read = 672, written = 416, Q = 1088 (= (8MN + 4M) * 4 B), I = 152/1088
    #        every kernel memory-bound: T_ideal = 1088/1e12 = 1.088e-9
    case = Case("softmax", {"M": 4, "N": 8}, "float32")
    rows = model.model_rows("softmax", case, 1e12, 1e13)
    check_rows(rows, [
        dict(variant="fused", kernels=1, flops=152, bytes_read=128, bytes_written=128, bytes=256,
             intensity=0.59375, t_compute_s=1.52e-11, t_memory_s=2.56e-10, t_ideal_s=2.56e-10,
             bound="memory"),
        dict(variant="naive", kernels=5, flops=152, bytes_read=672, bytes_written=416, bytes=1088,
             intensity=152 / 1088, t_compute_s=1.52e-11, t_memory_s=1.088e-9, t_ideal_s=1.088e-9,
             bound="memory"),
    ])
    assert model.ideal_time("softmax", case, 1e12, 1e13) == pytest.approx(2.56e-10, rel=1e-12)
    assert model.ideal_time("softmax", case, 1e12, 1e13, "naive") == pytest.approx(1.088e-9, rel=1e-12)


def test_gemm_bf16_mixed_bound_by_hand():
    # M=2, N=3, K=4, bf16 (2 B), bias, gelu; BW = 100 B/s, P = 40 FLOP/s.
    # matmul:   F = 2*2*3*4 = 48, read (8+12)*2 = 40, written 6*2 = 12, Q = 52
    #           Tc = 48/40 = 1.2, Tm = 0.52 -> compute
    # bias add: F = 6, read 12 + 3*2 = 18, written 12, Q = 30; Tc = 0.15, Tm = 0.30 -> memory
    # gelu:     F = 6, read 12, written 12, Q = 24; Tc = 0.15, Tm = 0.24 -> memory
    # unfused: F = 60, read 70, written 36, Q = 106, I = 60/106, Tc = 1.5, Tm = 1.06,
    #          T_ideal = 1.2 + 0.30 + 0.24 = 1.74, bound mixed
    # fused:   F = 48 + 6 + 6 = 60, read 40 + 6 = 46, written 12, Q = 58, I = 60/58,
    #          Tc = 1.5, Tm = 0.58 -> compute, T_ideal = 1.5
    case = Case("gemm_epilogue", {"M": 2, "N": 3, "K": 4}, "bfloat16", {"act": "gelu", "bias": 1})
    rows = model.model_rows("gemm_epilogue", case, 100.0, 40.0)
    check_rows(rows, [
        dict(variant="fused", kernels=1, flops=60, bytes_read=46, bytes_written=12, bytes=58,
             intensity=60 / 58, t_compute_s=1.5, t_memory_s=0.58, t_ideal_s=1.5, bound="compute"),
        dict(variant="unfused", kernels=3, flops=60, bytes_read=70, bytes_written=36, bytes=106,
             intensity=60 / 106, t_compute_s=1.5, t_memory_s=1.06, t_ideal_s=1.74, bound="mixed"),
    ])
    per = model.kernel_rows("gemm_epilogue", case, 100.0, 40.0)["unfused"]
    assert [(k["name"], k["bound"]) for k in per] == [("matmul", "compute"), ("bias add", "memory"),
                                                       ("gelu", "memory")]


def test_gemm_without_bias_or_act():
    # M=N=K=2, fp16, no bias, act none: one matmul kernel in both variants.
    # F = 16, read (4+4)*2 = 16, written 8, Q = 24
    case = Case("gemm_epilogue", {"M": 2, "N": 2, "K": 2}, "float16", {"act": "none", "bias": 0})
    rows = model.model_rows("gemm_epilogue", case, 1.0, 1.0)
    for r in rows:
        assert (r["kernels"], r["flops"], r["bytes_read"], r["bytes_written"]) == (1, 16, 16, 8)
        assert r["t_ideal_s"] == 24.0 and r["bound"] == "memory"


def test_vector_add_variants_by_hand():
    # N = 10, fp16 (2 B); BW = 1e9 B/s, P = 1e9 FLOP/s (so every kernel is memory-bound)
    # add:              F=10, read 2*10*2 = 40, written 20, Q = 60, T = 6e-8
    # add_relu_unfused: add (10, 40, 20) + relu (10, 20, 20): F=20, read 60, written 40, Q=100,
    #                   T_ideal = 60e-9 + 40e-9 = 1e-7
    # add_relu_fused:   F=20, read 40, written 20, Q = 60, T = 6e-8
    # add_add_unfused:  T=X+Y (10, 40, 20) + Z=T+W (10, 40, 20): F=20, read 80, written 40,
    #                   Q = 120, T = 1.2e-7
    # add_add_fused:    F=20, read 3*10*2 = 60, written 20, Q = 80, T = 8e-8
    case = Case("vector_add", {"N": 10}, "float16")
    rows = model.model_rows("vector_add", case, 1e9, 1e9)
    exp = [("add", 1, 10, 40, 20, 60e-9), ("add_relu_unfused", 2, 20, 60, 40, 100e-9),
           ("add_relu_fused", 1, 20, 40, 20, 60e-9), ("add_add_unfused", 2, 20, 80, 40, 120e-9),
           ("add_add_fused", 1, 20, 60, 20, 80e-9)]
    check_rows(rows, [dict(variant=v, kernels=k, flops=f, bytes_read=r, bytes_written=w, bytes=r + w,
                           intensity=f / (r + w), t_compute_s=f / 1e9, t_memory_s=(r + w) / 1e9,
                           t_ideal_s=t, bound="memory") for v, k, f, r, w, t in exp])
    assert model.ideal_time("vector_add", case, 1e9, 1e9) == pytest.approx(60e-9, rel=1e-12)


def test_datasheet_peak_follows_dtype():
    h100 = model.datasheet_hardware("h100", "float32")
    assert (h100.bw, h100.peak) == (3.35e12, 67e12)
    assert "fp32 non-tensor" in h100.peak_source and "datasheet" in h100.peak_source
    assert model.datasheet_hardware("H100-SXM", "bf16").peak == 989.5e12
    assert model.datasheet_hardware("h200", "float16").bw == 4.8e12
    a = model.datasheet_hardware("a100", "bfloat16")
    assert (a.bw, a.peak) == (2.039e12, 312e12)
    assert model.datasheet_hardware("a100", "float32").peak == 19.5e12
    with pytest.raises(ValueError, match="--gpu: unknown GPU 'v100'"):
        model.datasheet_hardware("v100", "float32")


def test_cli_json_softmax_h200(capsys):
    # M=2, N=4, fp32 on the h200 datasheet: BW 4.8e12, P 67e12 (fp32 non-tensor).
    # fused: F = 2*(5*4-2) = 36, read 2*4*4 = 32, written 32, Q = 64
    rc, out, _ = run_cli(["model", "softmax", "--set", "M=2", "--set", "N=4", "--gpu", "h200",
                          "--format", "json"], capsys)
    assert rc == 0
    rows = json.loads(out)
    assert rows[0]["variant"] == "fused" and rows[0]["flops"] == 36 and rows[0]["bytes"] == 64
    assert rows[0]["t_compute_s"] == pytest.approx(36 / 67e12, rel=1e-12)
    assert rows[0]["t_memory_s"] == pytest.approx(64 / 4.8e12, rel=1e-12)


def test_cli_gemm_defaults_to_fp32(capsys):
    # the model's default dtype is float32 for every problem (4-byte elements, fp32 peak),
    # and says that the GEMM implementations themselves take fp16/bf16
    rc, out, _ = run_cli(["model", "gemm_epilogue", "--set", "M=2,N=2,K=2", "--bw", "1", "--peak",
                          "1"], capsys)
    assert rc == 0
    assert "float32" in out and "modeled here at float32" in out
    rc, out, _ = run_cli(["model", "gemm_epilogue", "--set", "M=2,N=2,K=2,bias=0,act=none", "--bw",
                          "1", "--peak", "1", "--format", "json"], capsys)
    r = json.loads(out)[0]
    assert (r["flops"], r["bytes_read"], r["bytes_written"]) == (16, 32, 16)


def test_cli_table_states_conventions(capsys):
    rc, out, _ = run_cli(["model", "softmax", "--set", "M=4096", "--set", "N=1024", "--gpu", "h100"],
                         capsys)
    assert rc == 0
    for needle in ("Conventions", "n-1 FLOPs", "decimal", "sum over its kernels", "H100",
                   "datasheet", "naive (5 kernels)", "· exp", "fp32 non-tensor"):
        assert needle in out, needle


def test_cli_from_results(tmp_path, capsys):
    res = {"machine": {"gpu": "NVIDIA H200"},
           "ceilings": {"copy_bytes_per_s": 4.0e12, "gemm_flops_per_s": {"bfloat16": 7.0e14}}}
    f = tmp_path / "r.json"
    f.write_text(json.dumps(res))
    # bf16: both figures measured
    rc, out, _ = run_cli(["model", "vector_add", "--set", "N=1000", "--dtype", "bf16", "--from", str(f),
                          "--format", "json"], capsys)
    r = json.loads(out)[0]
    assert r["t_memory_s"] == pytest.approx(6000 / 4.0e12, rel=1e-12)
    assert r["t_compute_s"] == pytest.approx(1000 / 7.0e14, rel=1e-12)
    # fp32: measured bandwidth, datasheet fp32 peak of the run's known GPU (and said so)
    hw = model.resolve_hardware("float32", results_path=str(f))
    assert hw.bw == 4.0e12 and hw.peak == 67e12 and "no float32 GEMM ceiling" in hw.peak_source
    # fp16 not measured: a clear error, or --peak fills it
    with pytest.raises(ValueError, match="no float16 GEMM ceiling"):
        model.resolve_hardware("float16", results_path=str(f))
    assert model.resolve_hardware("float16", peak="5e14", results_path=str(f)).peak == 5e14
    # a run on a CPU machine has no copy ceiling
    f2 = tmp_path / "cpu.json"
    f2.write_text(json.dumps({"machine": {"gpu": None}, "ceilings": {"copy_bytes_per_s": None,
                                                                     "gemm_flops_per_s": {}}}))
    with pytest.raises(ValueError, match="no copy bandwidth"):
        model.resolve_hardware("float32", results_path=str(f2))


@pytest.mark.parametrize("argv, msg", [
    (["model", "softmax", "--set", "M=4"], "needs its size"),
    (["model", "softmax", "--set", "M=4,N=x"], "N: size must be a positive integer"),
    (["model", "nope", "--set", "N=4"], "unknown problem 'nope'"),
    (["model", "vector_add", "--set", "N=4", "--gpu", "rtx"], "--gpu: unknown GPU"),
    (["model", "vector_add", "--set", "N=4", "--bw", "fast", "--peak", "1"], "--bw: expected"),
    (["model", "vector_add", "--set", "N=4", "--bw", "-3", "--peak", "1"], "--bw: expected"),
    (["model", "vector_add", "--set", "N=4", "--bw", "1e12"], "--bw and --peak go together"),
    (["model", "vector_add", "--set", "N=4", "--dtype", "int8"], "dtype: unknown dtype"),
    (["model", "vector_add", "--set", "N=4", "--from", "/nonexistent.json"], "--from: no such file"),
    (["model", "vector_add", "--set", "N4"], "--set: expected KEY=VALUE"),
    (["model", "vector_add", "--set", "N=4,Q=2"], "unknown key 'Q'"),
])
def test_cli_errors(argv, msg, capsys):
    rc, _, err = run_cli(argv, capsys)
    assert rc == 2 and msg in err and "\n" not in err


def test_rate_suffixes():
    assert model.parse_rate("4.8T", "--bw") == 4.8e12
    assert model.parse_rate("989.5e12", "--peak") == 989.5e12
    assert model.parse_rate("2 TB/s", "--bw") == 2e12
