"""grid (hook contract + helpers) and inspect (per-layer fallbacks), without a GPU."""
from __future__ import annotations

import argparse
import json
import shutil

import pytest
import triton
import triton.language as tl
from pathlib import Path

from harness import grid as G
from harness import inspect_cmd, registry
from harness.registry import Implementation, Source
from triton_src import interpreting


def cli(module, argv, capsys):
    p = argparse.ArgumentParser(prog="harness")
    module.add_parser(p.add_subparsers(dest="cmd", required=True))
    args = p.parse_args(argv)
    try:
        rc = args.func(args)
    except ValueError as e:
        return 2, "", str(e)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _noop(case, inputs, out):
    return lambda: None


@pytest.fixture
def fake_impl(monkeypatch):
    """Register an implementation for one test only."""
    registry.all_impls()

    def add(impl):
        monkeypatch.setitem(registry._IMPLS, impl.key, impl)
        return impl
    return add


# -- grid helpers: numbers worked out by hand --------------------------------------------------
def test_blocks_1d_ragged():
    # N = 98,432 with BLOCK 1024: 97 programs (96 full + one of 128), 99,328 lanes, 896 dropped
    d = G.blocks_1d(98_432, 1024, num_warps=4)
    assert d["grid"] == [97, 1, 1] and d["block"] == {"BLOCK_SIZE": 1024, "num_warps": 4}
    assert [p["pid"][0] for p in d["programs"]] == [0, 1, 2, 94, 95, 96]
    assert d["programs"][-1] == {"pid": [96, 0, 0], "covers": "elements 98304..98431", "kept": 128,
                                 "dropped": 896}
    assert d["total"] == {"programs": 97, "lanes": 99_328, "kept": 98_432, "dropped": 896}


def test_rows_and_tiles():
    # softmax 5 x 1000, BLOCK_N 1024: 5 programs, each keeps 1000 lanes and drops 24
    d = G.rows(5, 1000, 1024)
    assert d["grid"] == [5, 1, 1] and all(p["kept"] == 1000 and p["dropped"] == 24 for p in d["programs"])
    # 1000 columns swept in chunks of 256: 4 chunks = 1024 lanes per row
    assert G.rows(2, 1000, 256)["programs"][0]["covers"] == "row 0, columns 0..999 in 4 chunks of 256"
    # 1025 x 769 output in 128 x 64 tiles: 9 x 13 grid; the corner tile keeps 1 x 1 of 8192 lanes
    t = G.tiles_2d(1025, 769, 128, 64)
    assert t["grid"] == [9, 13, 1]
    assert t["programs"][-1] == {"pid": [8, 12, 0], "covers": "rows 1024..1024, columns 768..768",
                                 "kept": 1, "dropped": 8191}
    assert t["total"]["kept"] == 1025 * 769 and t["total"]["lanes"] == 117 * 8192


def test_grid_command(fake_impl, capsys):
    fake_impl(Implementation("vector_add", "plugin", "blk", _noop,
                             extra={"grid": lambda c: G.blocks_1d(c.N, 256, num_warps=2)}))
    rc, out, _ = cli(G, ["grid", "vector_add", "plugin:blk", "--set", "N=1000"], capsys)
    assert rc == 0
    assert "grid = (4, 1, 1)" in out and "elements 768..999" in out and "BLOCK_SIZE=256" in out
    rc, out, _ = cli(G, ["grid", "vector_add", "plugin:blk", "--set", "N=1000", "--format", "json"], capsys)
    d = json.loads(out)
    assert d["grid"] == [4, 1, 1] and d["programs"][-1]["dropped"] == 24


def test_grid_errors(fake_impl, capsys):
    rc, _, err = cli(G, ["grid", "softmax", "torch:softmax", "--set", "M=2,N=3"], capsys)
    assert rc == 2 and "provides no grid description" in err
    fake_impl(Implementation("vector_add", "plugin", "bad", _noop, extra={"grid": lambda c: {"grid": "x"}}))
    rc, _, err = cli(G, ["grid", "vector_add", "plugin:bad", "--set", "N=4"], capsys)
    assert rc == 2 and "expected [gx, gy, gz]" in err
    rc, _, err = cli(G, ["grid", "vector_add", "nope:x", "--set", "N=4"], capsys)
    assert rc == 2 and "not registered" in err


# -- inspect -----------------------------------------------------------------------------------
def test_inspect_triton_kernels_hook(fake_impl, tmp_path, capsys):
    from harness.planted import triton_bugs  # plain @triton.jit kernels (not interpreted here)

    spec = lambda c: [{"kernel": triton_bugs.add_kernel, "num_warps": 4,  # noqa: E731
                       "signature": {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                       "constexprs": {"BLOCK": 1024}}]
    fake_impl(Implementation("vector_add", "triton", "hooked", _noop, extra={"triton_kernels": spec}))
    rc, out, err = cli(inspect_cmd, ["inspect", "triton:hooked", "--problem", "vector_add", "--set",
                                     "N=4096", "--out", str(tmp_path), "--format", "json"], capsys)
    assert rc == 0, err
    rep = json.loads(out)
    names = {p.split("/")[-1] for p in (a["path"] for a in rep["artifacts"])}
    for ext in ("ttir", "ttgir", "llir", "ptx"):
        assert f"add_kernel.{ext}" in names
    if rep["ptxas"]:  # a ptxas that takes Triton's PTX was found
        assert rep["ptxas"]["add_kernel"]["registers"] > 0


@triton.jit
def _zeros_kernel(out_ptr, BLOCK: tl.constexpr):
    """Calls a standard-library @triton.jit helper (tl.zeros): under the interpreter that nested
    call patches triton.language.core and never undoes it (triton 3.9)."""
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32))


@pytest.mark.skipif(not interpreting(), reason="the leak comes from Triton's CPU interpreter")
def test_inspect_triton_kernels_hook_after_an_interpreted_launch(fake_impl, tmp_path, capsys,
                                                                 monkeypatch):
    """An interpreted launch earlier in the process (as test_helion_layer's runs) must not break
    the hook's sm_90 compile; a fresh Triton cache makes the compile really run."""
    import torch
    out = torch.full((16,), float("nan"))
    _zeros_kernel[(1,)](out, BLOCK=16)
    assert torch.equal(out, torch.zeros(16))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    test_inspect_triton_kernels_hook(fake_impl, tmp_path / "out", capsys)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_inspect_cuda_fallback(fake_impl, tmp_path, capsys):
    cu = tmp_path / "tiny.cu"
    cu.write_text("__global__ void tiny_add(const float* x, float* y, int n) {\n"
                  "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] += x[i];\n}\n")
    fake_impl(Implementation("vector_add", "cuda", "tiny", _noop,
                             sources=(Source(str(cu), kernels=("tiny_add",)),)))
    rc, out, err = cli(inspect_cmd, ["inspect", "cuda:tiny", "--problem", "vector_add",
                                     "--out", str(tmp_path / "o")], capsys)
    assert rc == 0, err
    assert (tmp_path / "o" / "tiny.sm_90a.ptx").read_text().count(".entry") == 1
    assert "tiny_add" in out and "registers" in out


def test_inspect_errors(tmp_path, capsys):
    rc, _, err = cli(inspect_cmd, ["inspect", "torch:vector_add", "--out", str(tmp_path)], capsys)
    assert rc == 2 and "no kernel source of ours" in err
    good = str(Path(__file__).parent / "plugins" / "good.py")
    rc, _, err = cli(inspect_cmd, ["inspect", "plugin:good", "--plugin", good, "--out", str(tmp_path)], capsys)
    assert rc == 2 and "pick one with --problem" in err
    rc, _, err = cli(inspect_cmd, ["inspect", "nope:x", "--out", str(tmp_path)], capsys)
    assert rc == 2 and "unknown implementation" in err


@pytest.mark.parametrize("impl,files", [
    ("triton:vector_add", ("vector_add_unmasked_kernel.ttir", "vector_add_unmasked_kernel.ttgir",
                           "vector_add_unmasked_kernel.llir", "vector_add_unmasked_kernel.ptx")),
    ("cute:vector_add", ("cute_vector_add.ptx",)),
    ("cuda:vector_add", ("vector_add_unmasked.sm_90a.ptx",)),
])
def test_inspect_real_implementations(impl, files, tmp_path):
    """the real adapters, compiled for sm_90 without a GPU: IR files and the ptxas facts; the
    temporary folders the tool makes on the way (kl-*) are gone when it exits"""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    if impl.startswith("cute"):
        pytest.importorskip("cutlass")
    if impl.startswith("cuda") and not (shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc")):
        pytest.skip("needs nvcc (the CUDA toolkit)")
    root = Path(__file__).resolve().parent.parent
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "harness", "inspect", impl, "--problem", "vector_add",
                        "--set", "N=98432", "--out", str(out)], capture_output=True, text=True,
                       cwd=root, timeout=600, env=dict(os.environ, TMPDIR=str(tmp)))
    assert r.returncode == 0, r.stderr[-2000:]
    for f in files:
        assert (out / f).stat().st_size > 0, f
    assert "Used" in r.stdout and "registers" in r.stdout
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("kl-")]
