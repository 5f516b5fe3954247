"""Argument checks of every entry point: a ``TypeError`` / ``ValueError`` naming the argument,
never a crash or a silent wrong answer."""
from __future__ import annotations

import torch

from . import interpreting

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HALF_DTYPES = (torch.float16, torch.bfloat16)
ACTS = {"none": 0, "relu": 1, "gelu": 2}


def check_tensor(name: str, t, *, dtypes=FLOAT_DTYPES, ndim: int | None = None) -> torch.Tensor:
    """TypeError / ValueError naming ``name`` unless ``t`` is a tensor of an allowed dtype and rank
    on a device this process can run Triton on (CUDA, or CPU under the interpreter)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(f"{name}: dtype {t.dtype} is not one of {', '.join(map(str, dtypes))}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d tensor, got shape {tuple(t.shape)}")
    if t.device.type == "cuda":
        if interpreting():
            raise ValueError(f"{name}: CUDA tensor given while Triton's interpreter is on (it runs "
                             f"on CPU tensors)")
    elif t.device.type == "cpu":
        if not interpreting():
            raise ValueError(f"{name}: CPU tensor given; Triton runs CPU tensors only under its "
                             f"interpreter (TRITON_INTERPRET=1 before triton is imported)")
    else:
        raise ValueError(f"{name}: device {t.device} is not supported (cuda, or cpu under the interpreter)")
    return t


def check_same_device(**tensors) -> None:
    items = [(k, v) for k, v in tensors.items() if v is not None]
    first_name, first = items[0]
    for k, v in items[1:]:
        if v.device != first.device:
            raise ValueError(f"{k}: on {v.device}, but {first_name} is on {first.device}")


def vector_add_args(x, y, out):
    """Checks of out = x + y; returns ``out`` (allocated when None)."""
    check_tensor("x", x, ndim=1)
    check_tensor("y", y, ndim=1)
    if y.dtype != x.dtype:
        raise TypeError(f"y: dtype {y.dtype} differs from x's {x.dtype}")
    if y.shape != x.shape:
        raise ValueError(f"y: shape {tuple(y.shape)} differs from x's {tuple(x.shape)}")
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    check_tensor("out", out, ndim=1)
    if out.dtype != x.dtype or out.shape != x.shape:
        raise ValueError(f"out: expected {tuple(x.shape)} {x.dtype}, got {tuple(out.shape)} {out.dtype}")
    for name, t in (("x", x), ("y", y), ("out", out)):
        if t.numel() > 1 and t.stride(0) != 1:
            raise ValueError(f"{name}: must be contiguous (stride 1), got stride {t.stride(0)}")
    check_same_device(x=x, y=y, out=out)
    return out


def softmax_args(x, out):
    """Checks of a row softmax of x [M, N] (unit column stride, any row stride); returns
    (M, N, out), ``out`` allocated when None."""
    check_tensor("x", x, ndim=2)
    M, N = x.shape
    if M == 0 or N == 0:
        raise ValueError(f"x: empty shape {tuple(x.shape)}")
    if N > 1 and x.stride(1) != 1:
        raise ValueError(f"x: columns must be contiguous (x.stride(1) == 1), got strides {x.stride()}")
    if x.stride(0) < 0:
        raise ValueError(f"x: negative row stride {x.stride(0)}")
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    check_tensor("out", out, ndim=2)
    if tuple(out.shape) != (M, N):
        raise ValueError(f"out: shape {tuple(out.shape)} != x's {(M, N)}")
    if out.dtype != x.dtype:
        raise TypeError(f"out: dtype {out.dtype} != x's {x.dtype}")
    if N > 1 and out.stride(1) != 1:
        raise ValueError(f"out: columns must be contiguous, got strides {out.stride()}")
    check_same_device(x=x, out=out)
    return M, N, out


def gemm_args(a, b, bias, act, out):
    """Checks of C = act(a @ b + bias); returns (M, N, K, out), ``out`` allocated when None.
    Any strides (the kernels take both strides of every operand)."""
    check_tensor("a", a, dtypes=HALF_DTYPES, ndim=2)
    check_tensor("b", b, dtypes=HALF_DTYPES, ndim=2)
    if b.dtype != a.dtype:
        raise TypeError(f"b: dtype {b.dtype} differs from a's {a.dtype}")
    M, K = a.shape
    K2, N = b.shape
    if K2 != K:
        raise ValueError(f"b: shape {tuple(b.shape)} does not match a's {tuple(a.shape)} (K = {K})")
    if min(M, N, K) == 0:
        raise ValueError(f"a, b: empty GEMM (M, N, K) = {(M, N, K)}")
    if act not in ACTS:
        raise ValueError(f"act: {act!r} is not one of {', '.join(ACTS)}")
    if bias is not None:
        check_tensor("bias", bias, dtypes=HALF_DTYPES, ndim=1)
        if bias.dtype != a.dtype:
            raise TypeError(f"bias: dtype {bias.dtype} differs from a's {a.dtype}")
        if bias.shape[0] != N:
            raise ValueError(f"bias: length {bias.shape[0]} != N = {N}")
    if out is None:
        out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    check_tensor("out", out, dtypes=HALF_DTYPES, ndim=2)
    if tuple(out.shape) != (M, N) or out.dtype != a.dtype:
        raise ValueError(f"out: expected {(M, N)} {a.dtype}, got {tuple(out.shape)} {out.dtype}")
    check_same_device(a=a, b=b, bias=bias, out=out)
    return M, N, K, out


def attention_args(q, k, v, out, causal: int):
    """Checks of O = attention(Q, K, V): q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] (any strides
    with a unit last one), Hq a multiple of Hkv, D 64 or 128, 16-bit, one dtype; ``out``
    [B, Hq, Sq, D] (allocated when None). Returns out."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, dtypes=HALF_DTYPES, ndim=4)
        if t.stride(3) != 1:
            raise ValueError(f"{name}: the head dim must be contiguous (stride(3) == 1), got strides {t.stride()}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from q's {q.dtype}")
    B, Hq, Sq, D = q.shape
    if D not in (64, 128):
        raise ValueError(f"q: head dim {D} is not 64 or 128")
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"k, v: expected [{B}, Hkv, Sk, {D}] alike, got {tuple(k.shape)} and {tuple(v.shape)}")
    if min(q.shape) == 0 or min(k.shape) == 0:
        raise ValueError(f"q, k: empty shapes {tuple(q.shape)}, {tuple(k.shape)}")
    if Hq % k.shape[1]:
        raise ValueError(f"k: {k.shape[1]} heads do not divide q's {Hq}")
    if causal and Sq > k.shape[2]:
        raise ValueError(f"q: causal attention needs Sq <= Sk, got {Sq} > {k.shape[2]}")
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    check_tensor("out", out, dtypes=HALF_DTYPES, ndim=4)
    if out.shape != q.shape or out.dtype != q.dtype or out.stride(3) != 1:
        raise ValueError(f"out: expected {tuple(q.shape)} {q.dtype} with a unit last stride, "
                         f"got {tuple(out.shape)} {out.dtype} strides {out.stride()}")
    check_same_device(q=q, k=k, v=v, out=out)
    return out
