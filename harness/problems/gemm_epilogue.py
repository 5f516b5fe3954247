"""gemm_epilogue: C = act(A @ B + bias); A [M, K], B [K, N] row-major, bias [N] optional.

fp16/bf16 in, fp32 accumulate, output in the input dtype. ``act`` is none, relu or gelu (the tanh
approximation); ``bias`` is 1 (present) or 0 (absent: the third input is None).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import Kernel, Problem, Tolerance, awkward_size, elem_size, generator, randn, register_problem

ACTS = ("none", "relu", "gelu")


def apply_act(y: torch.Tensor, act: str) -> torch.Tensor:
    if act == "relu":
        return torch.relu(y)
    if act == "gelu":
        return F.gelu(y, approximate="tanh")
    return y


# Error bound of the fp32 accumulation over K (per element). Higham & Mary's probabilistic bound
# for a sum of K terms in precision u: |computed - exact| <= lam * sqrt(K) * u * sum|a_k b_k|,
# which holds with probability >= 1 - 2K exp(-lam^2 (1-u)^2 / 2) for independent rounding errors
# (lam = 6: about 1 - 2K * 1.5e-8 per element). The worst-case K * u is 30-170 times looser on
# these shapes and would let a different activation pass.
U32 = 2.0 ** -24
ACC_LAMBDA = 6.0
# Tensor-core accumulation is not round-to-nearest. Hopper's MMA (wgmma, mma.sync) adds each
# 16-deep step of products into the fp32 accumulator and rounds the sum toward zero, so one K chain
# drifts toward zero by about half an fp32 ulp of the running sum a step: a bias, not noise. For
# randn inputs the running sum's drift part grows linearly to y, so the expected drift of the
# result is about (K / 16) x U32 x |y| x c with c ~ 0.4 in a float64 model of the rounding (the
# sum of each 16 products exact, the accumulator rounded toward zero after each step; K = 8192:
# -0.00052 at |y| in [32, 64), -0.00026 with K split in two, 0 with round-to-nearest; the H200
# measured -0.00042 for one unsplit chain). The bias test allows TC_DRIFT x steps x U32 x |A @ B|
# of the mean error (``systematic``); an implementation that splits K drifts less, never more.
TC_STEP = 16
TC_DRIFT = 0.5
# GELU's derivative: its largest value (about 1.129 at y = 1.4185) and its most negative value
# (about -0.129 at y = -1.4185); between and beyond the two critical points it is monotonic.
_GELU_CRIT = ((-1.4185, 0.12900), (1.4185, 1.12900))


def _gelu_slope(y: torch.Tensor) -> torch.Tensor:
    y = y.clamp(-1e4, 1e4)
    k0, k1 = 0.7978845608028654, 0.044715
    u = k0 * (y + k1 * y ** 3)
    t = torch.tanh(u)
    return 0.5 * (1 + t) + 0.5 * y * (1 - t * t) * k0 * (1 + 3 * k1 * y * y)


def act_lipschitz(y: torch.Tensor, e: torch.Tensor, act: str) -> torch.Tensor:
    """The largest |act'| on [y - e, y + e] (elementwise), so that an error e in the
    accumulator moves act(y) by at most this times e."""
    if act == "none":
        return torch.ones_like(y)
    if act == "relu":
        return ((y + e) > 0).to(y.dtype)
    lo, hi = y - e, y + e
    slope = torch.maximum(_gelu_slope(lo).abs(), _gelu_slope(hi).abs())
    for c, v in _GELU_CRIT:
        slope = torch.where((lo <= c) & (hi >= c), torch.clamp(slope, min=v), slope)
    return slope * 1.01


def half_ulp(x: torch.Tensor, dtype: str) -> torch.Tensor:
    """Half a unit in the last place of ``dtype`` at |x| (float64; subnormals included)."""
    bits, emin = {"float32": (23, -126), "float16": (10, -14), "bfloat16": (7, -126)}[dtype]
    _, e = torch.frexp(x.abs())  # |x| = m 2^e, m in [0.5, 1): the binade's ulp is 2^(e-1-bits)
    e = torch.where(x == 0, emin, torch.clamp(e - 1, min=emin))
    return torch.ldexp(torch.full_like(x, 0.5), (e - bits).to(torch.int32))


class GemmEpilogue(Problem):
    name = "gemm_epilogue"
    description = "C = act(A @ B + bias), fp32 accumulation, act in none/relu/gelu(tanh)"
    dim_names = ("M", "N", "K")
    dtypes = ("float16", "bfloat16")
    input_names = ("a", "b", "bias")
    metric = "TFLOP/s"
    derives_bound = True
    # A and B in float64 beside their absolute values' product; y, s, e and their temporaries,
    # then the reference, drift, slope, bound and systematic part
    ref_f64_inputs = 2
    ref_f64_outputs = 9
    param_choices = {"act": ACTS, "bias": (1, 0)}
    param_defaults = {"act": "relu", "bias": 1}

    def case(self, dtype="bfloat16", **kw):
        return super().case(dtype=dtype, **kw)

    def cases(self, suite):
        c = self.case
        if suite == "smoke":
            return [c(M=64, N=48, K=32), c(M=17, N=33, K=40, dtype="float16", act="gelu")]
        if suite == "verify":
            out = []
            for dt in self.dtypes:
                for act in ACTS:
                    out += [c(M=1, N=17, K=33, dtype=dt, act=act), c(M=127, N=65, K=129, dtype=dt, act=act),
                            c(M=1025, N=769, K=513, dtype=dt, act=act)]
                out += [c(M=1025, N=769, K=513, dtype=dt, act="relu", bias=0),
                        c(M=256, N=256, K=256, dtype=dt, act="gelu", bias=0),
                        c(M=512, N=384, K=1024, dtype=dt, act="relu"),
                        # TMA-legal strides (N, K multiples of 8) but ragged tiles: partial M and N
                        # tiles, K not a multiple of 64, an odd number of M tiles
                        c(M=129, N=264, K=72, dtype=dt, act="relu"),
                        c(M=640, N=136, K=4104, dtype=dt, act="gelu", bias=0),
                        # aligned strides with GELU and bias (what the TMA kernels take), a GEMV
                        # with aligned strides, and a long K with few rows (split-K territory)
                        c(M=257, N=392, K=200, dtype=dt, act="gelu"),
                        c(M=1, N=1024, K=512, dtype=dt, act="gelu"),
                        c(M=16, N=520, K=8192, dtype=dt, act="none"),
                        # split-K with ragged edges: a partial row tile, N odd, GELU + bias; few
                        # rows, no bias, many N tiles
                        c(M=33, N=1001, K=3000, dtype=dt, act="gelu"),
                        c(M=7, N=4000, K=2048, dtype=dt, act="relu", bias=0)]
                # N or K not a multiple of 8 on a larger problem, and many row tiles; a small
                # odd GEMM of a few tiles (Triton's default plans its twin's kernel there)
                out += [c(M=2050, N=1001, K=136, dtype=dt, act="gelu"), c(M=134, N=53, K=35, dtype=dt, act="gelu")]
            return out
        if suite == "models":
            # linear layers of public model configurations (N = output features, K = input
            # features) at three token counts (decode, a small batch, prefill), bf16 with bias:
            shapes = ((6144, 4096, "none"),    # Llama 3 8B: fused QKV projection (32 + 2 x 8 heads of 128)
                      (28672, 4096, "gelu"),   # Llama 3 8B: fused MLP gate + up (2 x 14336)
                      (4096, 14336, "none"),   # Llama 3 8B: MLP down (14336 -> 4096)
                      (8192, 28672, "none"),   # Llama 3 70B: MLP down (28672 -> 8192)
                      (50257, 768, "none"))    # GPT-2: LM head (N = 50257, not a multiple of 8)
            out = [c(M=m, N=n, K=k, act=act, bias=1) for m in (16, 256, 4096) for n, k, act in shapes]
            # fp16, and bias off (Llama's and GPT-2's head linears have none), few cases:
            out += [
                # Llama 2 70B: attention output projection (8192 -> 8192), 128 tokens, + bias + ReLU:
                # one unsplit K = 8192 chain on the tensor cores (the case of issue 29)
                c(M=128, N=8192, K=8192, dtype="float16", act="relu", bias=1),
                # Llama 3 8B: fused QKV projection at decode, no bias
                c(M=16, N=6144, K=4096, dtype="float16", act="none", bias=0),
                # Llama 3 8B: fused MLP gate + up, a small batch, no bias
                c(M=256, N=28672, K=4096, dtype="float16", act="gelu", bias=0),
                # GPT-2: LM head (tied embedding, no bias), a small batch
                c(M=256, N=50257, K=768, dtype="float16", act="none", bias=0),
                # Llama 3 8B: MLP down at prefill, bf16 without bias
                c(M=4096, N=4096, K=14336, dtype="bfloat16", act="none", bias=0)]
            return out
        if suite == "edge":
            # beyond the suites' shapes: every dimension odd and under 1024 (no 16-byte strides, a
            # fraction of a wave), skinny M with a large N x K, small K (the epilogue and the
            # store dominate), fp16 and bf16
            return [c(M=411, N=733, K=957, dtype="float16", act="gelu"),
                    c(M=97, N=211, K=389, dtype="bfloat16", act="relu"),
                    c(M=64, N=18_432, K=5_120, dtype="bfloat16", act="gelu"),
                    c(M=96, N=12_288, K=4_096, dtype="float16", act="none", bias=0),
                    c(M=4096, N=4096, K=128, dtype="bfloat16", act="relu"),
                    c(M=3072, N=8192, K=192, dtype="float16", act="gelu"),
                    c(M=8192, N=2048, K=64, dtype="bfloat16", act="none", bias=0)]
        if suite == "bench":
            return ([c(M=s, N=s, K=s) for s in (2048, 4096, 8192)]
                    + [c(M=4096, N=4096, K=4096, act="gelu"), c(M=4096, N=4096, K=4096, act="none", bias=0),
                       c(M=8192, N=8192, K=8192, act="gelu")])
        if suite == "full":
            out = []
            for dt in self.dtypes:
                for act in ACTS:
                    out += [c(M=s, N=s, K=s, dtype=dt, act=act) for s in (1024, 2048, 4096, 8192)]
            out += [c(M=8192, N=4096, K=1024), c(M=1024, N=8192, K=8192)]
            return out
        if suite == "awkward":
            return self.awkward_cases()
        raise ValueError(f"suite: unknown suite {suite!r}")

    def draw(self, rng):
        """An awkward GEMM: operands of at most 2^26 elements, at most 2^37 multiply-adds."""
        M, N, K = awkward_size(rng, 20_000), awkward_size(rng, 60_000), awkward_size(rng, 30_000)
        if max(M * N, M * K, N * K) > 2 ** 26 or M * N * K > 2 ** 37:
            return None
        return self.case(M=M, N=N, K=K, dtype=rng.choice(self.dtypes), act=rng.choice(ACTS), bias=rng.choice((0, 1)))

    def make_inputs(self, case, device, seed):
        g = generator(device, seed)
        dt = case.torch_dtype
        a = randn((case.M, case.K), g, device, dt)
        b = randn((case.K, case.N), g, device, dt)
        bias = randn((case.N,), g, device, dt) if int(case.params.get("bias", 1)) else None
        return a, b, bias

    def out_shape(self, case):
        return (case.M, case.N)

    def reference(self, inputs, case):
        a, b, bias = inputs
        y = a.double() @ b.double()
        if bias is not None:
            y = y + bias.double()
        return apply_act(y, case.params.get("act", "relu"))

    def reference_and_bound(self, inputs, case, roundings: int = 0):
        """The reference and the per-element bound before the output rounding:
        act' x (fp32 accumulation error + the declared intermediate roundings) + the error of
        evaluating the activation in fp32 (a few ulps of its terms)."""
        a, b, bias = inputs
        act = case.params.get("act", "relu")
        A, B = a.double(), b.double()
        y = A @ B
        s = A.abs() @ B.abs()
        if bias is not None:
            y = y + bias.double()
            s = s + bias.double().abs()
        K = a.shape[1]
        e = ACC_LAMBDA * math.sqrt(max(K, 1)) * U32 * s + 2 * U32 * y.abs()
        del s
        ref = apply_act(y, act)
        # an intermediate result rounded to the output dtype (declared by eager op chains): half
        # an ulp each time; through a curved activation its (unbiased) error becomes a bias
        # (the intermediate is A @ B or A @ B + bias: the larger of the two sets the ulp)
        rounded = None
        if roundings:
            mag = y.abs() if bias is None else torch.maximum(y.abs(), (y - bias.double()).abs())
            rounded = roundings * half_ulp(mag + e, case.dtype)
        if rounded is not None:
            e = e + rounded
        # the tensor-core drift toward zero (see TC_DRIFT): a bias the test allows, and in the bound
        acc_mag = y.abs() if bias is None else (y - bias.double()).abs()
        drift = TC_DRIFT * math.ceil(max(K, 1) / TC_STEP) * U32 * acc_mag
        del acc_mag
        e = e + drift
        slope = act_lipschitz(y, e, act)
        bound = slope * e
        systematic = slope * (drift if rounded is None else drift + rounded)
        if act == "gelu":
            # 0.5 y (1 + tanh(u)) in fp32: a few ulps of each term; where tanh(u) rounds to -1
            # the result is 0 instead of a tiny negative number, every time (a legitimate bias)
            ev = 8 * U32 * (0.5 * y.abs() + ref.abs())
            bound = bound + ev
            systematic = ev if systematic is None else systematic + ev
        return ref, bound, systematic

    def tolerance(self, dtype):
        # only for checks without inputs (tools comparing two outputs); the verifier uses the
        # per-element bound of reference_and_bound
        return {
            "float16": Tolerance(rel_norm=1e-3, rtol=2e-3, atol_floor=1e-5, atol_rms=2e-3),
            "bfloat16": Tolerance(rel_norm=8e-3, rtol=1.6e-2, atol_floor=1e-4, atol_rms=1.6e-2),
        }[dtype]

    def vendor_launch(self, case, inputs):
        """torch.mm on the same A and B: the vendor GEMM at this very shape, timed beside the rows."""
        a, b, _ = inputs
        return lambda: torch.mm(a, b)

    def traffic(self, case):
        s = elem_size(case.dtype)
        M, N, K = case.M, case.N, case.K
        bias = N * s if int(case.params.get("bias", 1)) else 0
        return (M * K + K * N) * s + bias + M * N * s

    def flops(self, case):
        return 2 * case.M * case.N * case.K

    def variants(self, case):
        s = elem_size(case.dtype)
        M, N, K = case.M, case.N, case.K
        has_bias = int(case.params.get("bias", 1))
        act = case.params.get("act", "relu")
        MN = M * N
        epi_flops = (MN if has_bias else 0) + (MN if act != "none" else 0)
        fused = [Kernel("gemm+epilogue", 2 * M * N * K + epi_flops,
                        (M * K + K * N) * s + (N * s if has_bias else 0), MN * s)]
        unfused = [Kernel("matmul", 2 * M * N * K, (M * K + K * N) * s, MN * s)]
        if has_bias:
            unfused.append(Kernel("bias add", MN, MN * s + N * s, MN * s))
        if act != "none":
            unfused.append(Kernel(act, MN, MN * s, MN * s))
        return {"fused": fused, "unfused": unfused}


register_problem(GemmEpilogue())
