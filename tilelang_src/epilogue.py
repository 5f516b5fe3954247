"""The GEMM epilogue as TileLang expressions: bias + activation on an fp32 accumulator value.

GELU is the tanh form: 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))).
"""
import tilelang.language as T

ACTS = ("none", "relu", "gelu")
SQRT_2_OVER_PI = 0.7978845608028654


def act(v, kind: str):
    if kind == "relu":
        return T.max(v, T.float32(0.0))
    if kind == "gelu":
        return 0.5 * v * (1.0 + T.tanh(SQRT_2_OVER_PI * (v + 0.044715 * v * v * v)))
    if kind == "none":
        return v
    raise ValueError(f"act: none, relu or gelu, not {kind!r}")


def bias_act(acc, bias, col, N, kind: str):
    """act(acc + bias[col]) for an accumulator element in column ``col`` (< N or a padding column
    of the last tile, where bias is not read)."""
    if bias is not None:
        acc = acc + T.if_then_else(col < N, T.cast(bias[col], "float32"), T.float32(0.0))
    return act(acc, kind)
