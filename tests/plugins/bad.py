"""Wrong plugin implementations, one per bug the verification policy targets (each must FAIL)."""
import torch

from harness import register


def _pad_pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


@register(problem="softmax", layer="bad", name="zero_pad")
def zero_pad(case, inputs, out):
    """pads rows with 0.0 instead of -inf before max/sum"""
    (x,) = inputs

    def launch():
        n = x.shape[1]
        xp = torch.zeros(x.shape[0], _pad_pow2(n), dtype=torch.float32, device=x.device)
        xp[:, :n] = x.float()
        out.copy_(torch.softmax(xp, -1)[:, :n].to(out.dtype))
    return launch


@register(problem="softmax", layer="bad", name="no_max")
def no_max(case, inputs, out):
    """exp without subtracting the row max: overflows on large inputs"""
    (x,) = inputs

    def launch():
        e = torch.exp(x.float())
        out.copy_((e / e.sum(-1, keepdim=True)).to(out.dtype))
    return launch


@register(problem="softmax", layer="bad", name="row_stride")
def row_stride(case, inputs, out):
    """assumes contiguous rows (stride N) even when the rows are strided"""
    (x,) = inputs

    def launch():
        m, n = x.shape
        flat = torch.as_strided(x, (m, n), (n, 1))
        out.copy_(torch.softmax(flat.float(), -1).to(out.dtype))
    return launch


@register(problem="softmax", layer="bad", name="writes_padding")
def writes_padding(case, inputs, out):
    """correct output, but scribbles on the input's storage outside its view"""
    (x,) = inputs

    def launch():
        out.copy_(torch.softmax(x.float(), -1).to(out.dtype))
        if x.stride(0) > x.shape[1]:
            x.as_strided((x.shape[0],), (x.stride(0),), x.storage_offset() + x.shape[1]).fill_(7)
    return launch


@register(problem="softmax", layer="bad", name="half_math")
def half_math(case, inputs, out):
    """computes in bfloat16 whatever the input dtype: too inaccurate for fp32"""
    (x,) = inputs

    def launch():
        out.copy_(torch.softmax(x.to(torch.bfloat16), -1).to(out.dtype))
    return launch


@register(problem="vector_add", layer="bad", name="no_tail")
def no_tail(case, inputs, out):
    """processes whole blocks of 1024 only: the tail stays unwritten"""
    x, y = inputs

    def launch():
        n = (x.numel() // 1024) * 1024
        out[:n] = x[:n] + y[:n]
    return launch


@register(problem="vector_add", layer="bad", name="last_unwritten")
def last_unwritten(case, inputs, out):
    """off by one: the last element is never written"""
    x, y = inputs

    def launch():
        out[:-1] = x[:-1] + y[:-1]
    return launch


@register(problem="vector_add", layer="bad", name="mutates")
def mutates(case, inputs, out):
    """right answer, but adds in place into x"""
    x, y = inputs

    def launch():
        out.copy_(x + y)
        x.add_(y)
    return launch


@register(problem="vector_add", layer="bad", name="zeros")
def zeros(case, inputs, out):
    """writes zeros"""
    return lambda: out.zero_()


@register(problem="vector_add", layer="bad", name="fp32_out")
def fp32_out(case, inputs, out):
    """returns a float32 tensor whatever the case's dtype"""
    x, y = inputs
    return lambda: x.float() + y.float()


@register(problem="gemm_epilogue", layer="bad", name="no_bias")
def no_bias(case, inputs, out):
    """forgets the bias"""
    a, b, bias = inputs
    act = case.params["act"]

    def launch():
        y = a.float() @ b.float()
        if act == "relu":
            y = torch.relu(y)
        elif act == "gelu":
            y = torch.nn.functional.gelu(y, approximate="tanh")
        out.copy_(y.to(out.dtype))
    return launch


@register(problem="gemm_epilogue", layer="bad", name="k_tail")
def k_tail(case, inputs, out):
    """drops the K remainder past a multiple of 32"""
    a, b, bias = inputs

    def launch():
        k = max(32, (a.shape[1] // 32) * 32)
        y = a[:, :k].float() @ b[:k].float()
        if bias is not None:
            y += bias.float()
        out.copy_(torch.relu(y).to(out.dtype) if case.params["act"] == "relu" else y.to(out.dtype))
    return launch
