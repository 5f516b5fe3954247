"""softmax: row-wise softmax over the last dim of an [M, N] tensor, fp32 math.

Parameters of a case:
- ``layout``: ``contiguous``; ``strided`` (x is the first N columns of an [M, N+64] tensor);
  ``strided_odd`` (x starts one element into its storage and its row stride is odd, N+2 or N+3,
  so that no row but by chance starts 16-byte aligned, in every dtype).
- ``kind``: ``randn``; ``large`` (1e4 + 1e3*randn: exp overflows unless the max is subtracted);
  ``negative`` (every element <= -100: exp underflows unless the max is subtracted);
  ``neginf`` (about 10 % of each row is -inf, never the whole row).
"""
from __future__ import annotations

import math

import torch

from . import Kernel, Problem, Tolerance, awkward_size, elem_size, generator, randn, register_problem

LAYOUT_PAD = {"contiguous": 0, "strided": 64, "strided_odd": 3}


def row_pad(layout: str, n: int) -> int:
    """Columns of padding after each row: ``strided_odd`` makes the row stride odd (N+2 or N+3),
    so that row r starts at byte (1 + r*stride)*size, 16-byte aligned for few rows at most."""
    if layout == "strided_odd":
        return 3 if n % 2 == 0 else 2
    return LAYOUT_PAD[layout]


def start_offset(layout: str) -> int:
    """Elements between the storage's start and x[0, 0]."""
    return 1 if layout == "strided_odd" else 0


class Softmax(Problem):
    name = "softmax"
    description = "row-wise softmax of an [M, N] tensor (fp32 math, output in the input dtype)"
    dim_names = ("M", "N")
    input_names = ("x",)
    metric = "GB/s"
    ref_f64_inputs = 1    # x in float64 while the reference is computed
    ref_f64_outputs = 3   # the reference, |ref| and the systematic part
    param_choices = {"layout": tuple(LAYOUT_PAD), "kind": ("randn", "large", "negative", "neginf")}
    value_params = ("kind",)
    param_defaults = {}

    def cases(self, suite):
        c = self.case
        if suite == "smoke":
            return [c(M=4, N=33), c(M=3, N=98, dtype="float16"), c(M=5, N=70, layout="strided")]
        if suite == "verify":
            out = []
            for dt in self.dtypes:
                out += [c(M=1823, N=781, dtype=dt), c(M=1, N=1, dtype=dt), c(M=3, N=4097, dtype=dt),
                        c(M=37, N=1000, dtype=dt, layout="strided")]
            out += [c(M=1, N=98_432), c(M=129, N=1), c(M=64, N=2048),
                    c(M=1823, N=781, layout="strided"), c(M=300, N=777, layout="strided_odd"),
                    c(M=64, N=1000, kind="large"), c(M=64, N=1000, kind="large", dtype="float16"),
                    c(M=64, N=1000, kind="negative"), c(M=64, N=1000, kind="neginf"),
                    c(M=64, N=1000, kind="neginf", dtype="bfloat16"),
                    c(M=4, N=32_768, kind="neginf"), c(M=3, N=262_147), c(M=2, N=131_072,
                                                                            dtype="bfloat16"),
                    # many rows: a grid or a persistent loop that stops early is caught
                    c(M=2053, N=96), c(M=4099, N=33, dtype="bfloat16", layout="strided_odd"),
                    c(M=2048, N=2050, dtype="float16"),
                    # odd stride and an odd start in the 16-bit dtypes too
                    c(M=33, N=3001, dtype="bfloat16", layout="strided_odd"),
                    c(M=17, N=40_000, dtype="float16", layout="strided_odd"),
                    # odd strides on rows past what the CTAs of a row hold on chip (the rules
                    # whose other choices need 16-byte rows): kernels first planned by the
                    # awkward suite (the CUDA C++ and Gluon defaults' online kernels)
                    c(M=2, N=1_000_003, layout="strided_odd"), c(M=129, N=17_858, dtype="float16", layout="strided_odd")]
            return out
        if suite == "models":
            # public model configurations. LM-head logits over the vocabulary, 4096 tokens:
            # Llama 2 (32000), GPT-2 (50257), Llama 3 (128256), Qwen 2 (151936)
            out = [c(M=4096, N=v, dtype=dt) for dt in ("bfloat16", "float32")
                   for v in (32_000, 50_257, 128_256, 151_936)]
            # ... and in fp16 (Llama 2 and Llama 3 vocabularies)
            out += [c(M=4096, N=v, dtype="float16") for v in (32_000, 128_256)]
            # attention-score rows (keys per query): 32768 query rows of 512, 1024 and 4096 keys
            out += [c(M=32_768, N=n, dtype="bfloat16") for n in (512, 1024, 4096)]
            # GPT-2 style context of 2048 keys, fp16 scores
            out += [c(M=8192, N=2048, dtype="float16")]
            return out
        if suite == "edge":
            # beyond the suites' shapes, each class the planners must reason about:
            # few rows of long rows (M from 1 to 128: one row cannot fill 132 SMs)
            out = [c(M=1, N=786_433, dtype="float32"), c(M=8, N=200_003, dtype="bfloat16"),
                   c(M=48, N=65_536, dtype="float16"), c(M=96, N=100_000, dtype="bfloat16")]
            # tiny totals (under 32 MB: launch- and tail-bound)
            out += [c(M=256, N=1024, dtype="float16"), c(M=1000, N=3000, dtype="bfloat16")]
            # very short rows (N <= 128: many rows a program or a warp)
            out += [c(M=65_536, N=128, dtype="float32"), c(M=131_072, N=96, dtype="float16"),
                    c(M=80_000, N=48, dtype="bfloat16")]
            return out
        if suite == "bench":
            return ([c(M=4096, N=n) for n in (1024, 2048, 4096, 8192, 16384)]
                    + [c(M=8192, N=n) for n in (32768, 131072, 262144)])
        if suite == "full":
            out = []
            for dt in self.dtypes:
                out += [c(M=4096, N=2 ** e, dtype=dt) for e in range(7, 15)]
                out += [c(M=8192, N=2 ** e, dtype=dt) for e in range(15, 19)]
            return out
        if suite == "awkward":
            return self.awkward_cases()
        raise ValueError(f"suite: unknown suite {suite!r}")

    def draw(self, rng):
        """An awkward softmax case: up to 2^26 elements, a few very long rows one time in seven."""
        M, N = awkward_size(rng, 70_000), awkward_size(rng, 300_000)
        if rng.random() < 0.15:
            M, N = rng.choice((1, 2, 3, 5)), rng.choice((262_145, 1_000_003, 2_000_000))
        if M * N > 2 ** 26:
            return None
        return self.case(M=M, N=N, dtype=rng.choice(self.dtypes), layout=rng.choice(sorted(LAYOUT_PAD)))

    def make_inputs(self, case, device, seed):
        g = generator(device, seed)
        M, N = case.M, case.N
        layout = case.params.get("layout", "contiguous")
        pad, off = row_pad(layout, N), start_offset(layout)
        kind = case.params.get("kind", "randn")
        base = torch.randn((M, N + pad), generator=g, device=device, dtype=torch.float32)
        if kind == "large":
            base = 1e4 + 1e3 * base
        elif kind == "negative":
            base = -100.0 - 10.0 * base.abs()
        elif kind == "neginf":
            drop = torch.rand((M, N + pad), generator=g, device=device) < 0.1
            drop[:, 0] = False  # keep one finite element per row; its place still varies below
            perm = torch.randperm(N, generator=g, device=device)
            drop[:, :N] = drop[:, :N][:, perm]
            base = base.masked_fill(drop, float("-inf"))
        if off:
            flat = torch.empty(off + M * (N + pad), device=device, dtype=case.torch_dtype)
            flat[:off] = 0
            x = flat[off:].view(M, N + pad)
            x.copy_(base)
            return (x[:, :N],)
        x = base.to(case.torch_dtype)
        return (x[:, :N],)

    def out_shape(self, case):
        return (case.M, case.N)

    def reference(self, inputs, case):
        (x,) = inputs
        return torch.softmax(x.double(), dim=-1)

    def reference_and_bound(self, inputs, case, roundings: int = 0):
        """The reference; no per-element bound (``tolerance`` decides), but the part of the error
        that may legitimately be systematic: the row sum in fp32 carries a relative error of up to
        about lam sqrt(N) u32 (probabilistic bound, lam = 6), which scales every element of the
        row alike, plus a few ulps of the exp."""
        ref = self.reference(inputs, case)
        n = ref.shape[-1] if ref.dim() else 1
        systematic = (6.0 * math.sqrt(max(n, 1)) + 8.0) * 2.0 ** -24 * ref.abs()
        return ref, None, systematic

    def tolerance(self, dtype):
        return {
            "float32": Tolerance(rel_norm=1e-5, rtol=1e-4, atol_floor=1e-7),
            "float16": Tolerance(rel_norm=1e-3, rtol=2e-3, atol_floor=1e-6),
            "bfloat16": Tolerance(rel_norm=8e-3, rtol=1.6e-2, atol_floor=1e-5),
        }[dtype]

    def traffic(self, case):
        return 2 * case.M * case.N * elem_size(case.dtype)

    def flops(self, case):
        # max (N-1), subtract N, exp N, sum (N-1), divide N per row
        return case.M * (5 * case.N - 2)

    def variants(self, case):
        s, M, N = elem_size(case.dtype), case.M, case.N
        MN = M * N
        return {
            "fused": [Kernel("softmax", M * (5 * N - 2), MN * s, MN * s)],
            "naive": [Kernel("max", M * (N - 1), MN * s, M * s),
                      Kernel("subtract", MN, MN * s + M * s, MN * s),
                      Kernel("exp", MN, MN * s, MN * s),
                      Kernel("sum", M * (N - 1), MN * s, M * s),
                      Kernel("divide", MN, MN * s + M * s, MN * s)],
        }


register_problem(Softmax())
