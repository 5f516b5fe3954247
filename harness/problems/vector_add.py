"""vector_add: out = x + y over N elements (fp32 / fp16 / bf16).

``misalign=k`` makes x and y views that start k elements into their buffers, so a kernel that
assumes 16-byte aligned pointers is caught.
"""
from __future__ import annotations

import torch

from . import Kernel, Problem, Tolerance, awkward_size, elem_size, generator, randn, register_problem

_ULP = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


class VectorAdd(Problem):
    name = "vector_add"
    description = "out = x + y, elementwise over N elements"
    dim_names = ("N",)
    input_names = ("x", "y")
    metric = "GB/s"
    mix = "2:1"
    ref_f64_inputs = 1    # x and y in float64
    ref_f64_outputs = 1
    param_choices = {"misalign": None}
    param_defaults = {}

    def cases(self, suite):
        c = self.case
        if suite == "smoke":
            return [c(N=1), c(N=98_432), c(N=1000, dtype="float16")]
        if suite == "verify":
            out = []
            for dt in self.dtypes:
                out += [c(N=n, dtype=dt) for n in (1, 3, 127, 98_432, 1_000_003)]
            out += [c(N=98_432, misalign=1), c(N=4099, dtype="float16", misalign=3),
                    c(N=4099, dtype="bfloat16", misalign=1)]
            return out
        if suite == "bench":
            return [c(N=2 ** e) for e in range(12, 29, 2)]
        if suite == "models":
            # residual adds of hidden states (tokens x hidden): Llama 3 8B (hidden 4096) at 16 and
            # 4096 tokens, Llama 3 70B (hidden 8192) at 8192 tokens; and odd lengths in fp32 / fp16
            return [c(N=16 * 4096, dtype="bfloat16"), c(N=4096 * 4096, dtype="bfloat16"),
                    c(N=8192 * 8192, dtype="bfloat16"), c(N=2 ** 27 + 1, dtype="float32"),
                    c(N=12_345_679, dtype="float16")]
        if suite == "edge":
            # launch-bound totals (a few KB to a few MB: no grid fills the GPU for long), odd lengths,
            # a misaligned start, every dtype
            return [c(N=4_097, dtype="float32"), c(N=100_001, dtype="bfloat16"),
                    c(N=524_289, dtype="float16", misalign=1), c(N=3_000_017, dtype="float32")]
        if suite == "full":
            return [c(N=2 ** e, dtype=dt) for dt in self.dtypes for e in range(10, 29)]
        if suite == "awkward":
            return self.awkward_cases()
        raise ValueError(f"suite: unknown suite {suite!r}")

    def draw(self, rng):
        """An awkward vector add: up to 2^27 elements, a start 0, 1 or 3 elements into its storage."""
        return self.case(N=awkward_size(rng, 2 ** 27), dtype=rng.choice(self.dtypes), misalign=rng.choice((0, 0, 1, 3)))

    def make_inputs(self, case, device, seed):
        g = generator(device, seed)
        off = int(case.params.get("misalign", 0))
        n = case.N
        x = randn((n + off,), g, device, case.torch_dtype)[off:]
        y = randn((n + off,), g, device, case.torch_dtype)[off:]
        return x, y

    def out_shape(self, case):
        return (case.N,)

    def reference(self, inputs, case):
        x, y = inputs
        return x.double() + y.double()

    def tolerance(self, dtype):
        u = _ULP[dtype]
        # one rounding of the exact sum: at most half an ulp; allow one ulp
        return Tolerance(rel_norm=u, rtol=u, atol_floor=0.0)

    def traffic(self, case):
        return 3 * case.N * elem_size(case.dtype)

    def flops(self, case):
        return case.N

    def variants(self, case):
        """The single add (what every implementation computes), then two teaching chains, each
        as two kernels (the intermediate T goes through HBM) and as one fused kernel:
        add->ReLU (Z = relu(X + Y)) and add->add (T = X + Y, Z = T + W)."""
        s, n = elem_size(case.dtype), case.N
        return {
            "add": [Kernel("add", n, 2 * n * s, n * s)],
            "add_relu_unfused": [Kernel("add", n, 2 * n * s, n * s),
                                 Kernel("relu", n, n * s, n * s)],
            "add_relu_fused": [Kernel("add+relu", 2 * n, 2 * n * s, n * s)],
            "add_add_unfused": [Kernel("add T=X+Y", n, 2 * n * s, n * s),
                                Kernel("add Z=T+W", n, 2 * n * s, n * s)],
            "add_add_fused": [Kernel("add Z=X+Y+W", 2 * n, 3 * n * s, n * s)],
        }


register_problem(VectorAdd())
