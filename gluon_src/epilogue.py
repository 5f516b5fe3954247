"""The GEMM epilogue on the fp32 accumulator, in registers: + bias, then the activation."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def bias_act(acc, bias_ptr, offs_n, N, HAS_BIAS: gl.constexpr, ACT: gl.constexpr):
    """ACT: 0 none, 1 relu, 2 gelu (tanh form); offs_n in the accumulator's column slice layout."""
    if HAS_BIAS:
        b = gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(gl.float32)
        acc = acc + b[None, :]
    if ACT == 1:
        acc = gl.maximum(acc, 0.0)
    elif ACT == 2:
        # 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3), is x - x / (1 + exp(2u)):
        # tanh(u) = 1 - 2 / (exp(2u) + 1). exp(2u) = exp2(x (C1 + C2 x^2)), C1 = 2 sqrt(2 / pi) log2(e)
        C1: gl.constexpr = 2.302208198144325
        C2: gl.constexpr = 0.1029432395800235
        acc = acc - acc / (1.0 + gl.exp2(acc * (C1 + C2 * acc * acc)))
    return acc


ACTS = {"none": 0, "relu": 1, "gelu": 2}
