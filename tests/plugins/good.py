"""Correct plugin implementations (they must PASS)."""
import torch

from harness import register


@register(problem="softmax", layer="plugin", name="good")
def prepare(case, inputs, out):
    (x,) = inputs

    def launch():
        out.copy_(torch.softmax(x.float(), dim=-1).to(out.dtype))
    return launch


@register(problem="vector_add", layer="plugin", name="good")
def prepare_add(case, inputs, out):
    x, y = inputs
    return lambda: torch.add(x, y, out=out)


@register(problem="gemm_epilogue", layer="plugin", name="good")
def prepare_gemm(case, inputs, out):
    a, b, bias = inputs
    act = case.params["act"]

    def launch():
        y = a.float() @ b.float()
        if bias is not None:
            y += bias.float()
        if act == "relu":
            y = torch.relu(y)
        elif act == "gelu":
            y = torch.nn.functional.gelu(y, approximate="tanh")
        out.copy_(y.to(out.dtype))
    return launch
