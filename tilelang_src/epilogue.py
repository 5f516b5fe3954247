"""The GEMM epilogue as TileLang expressions: bias + activation on an fp32 accumulator value.

The activation is a run-time argument of the kernels (``ACT_CODE``: 0 none, 1 relu, 2 gelu), so
one compile serves all three; GELU is the tanh form: 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))).
"""
import tilelang.language as T

ACT_CODE = {"none": 0, "relu": 1, "gelu": 2}
SQRT_2_OVER_PI = 0.7978845608028654


def act_code(kind: str) -> int:
    if kind not in ACT_CODE:
        raise ValueError(f"act: none, relu or gelu, not {kind!r}")
    return ACT_CODE[kind]


def act(v, code):
    """The activation ``code`` (a run-time int32) selects."""
    gelu = 0.5 * v * (1.0 + T.tanh(SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)))
    return T.if_then_else(code == 1, T.max(v, T.float32(0.0)), T.if_then_else(code == 2, gelu, v))


def bias_act(acc, bias, col, N, kind):
    """act(acc + bias[col]) for an accumulator element in column ``col`` (< N or a padding column
    of the last tile, where bias is not read)."""
    if bias is not None:
        acc = acc + T.if_then_else(col < N, T.cast(bias[col], "float32"), T.float32(0.0))
    return act(acc, kind)
