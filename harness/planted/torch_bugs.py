"""torch implementations with planted bugs, and their correct twin."""
from __future__ import annotations

import torch


def prepare_softmax(case, inputs, out):
    """Correct: fp32 softmax written into the harness's output."""
    (x,) = inputs
    return lambda: out.copy_(torch.softmax(x.float(), dim=-1).to(out.dtype))


_FIRST_INPUTS: dict = {}


def prepare_softmax_first_inputs(case, inputs, out):
    """BUG (stale binding): a launch cache keyed by the case keeps the first seed's input tensors,
    so every later seed's launch still reads them (right on the first seed only)."""
    (x,) = _FIRST_INPUTS.setdefault(case.id, inputs)
    return lambda: out.copy_(torch.softmax(x.float(), dim=-1).to(out.dtype))


def prepare_softmax_zeros(case, inputs, out):
    """BUG: writes zeros (a kernel that never stores its result, into a zeroed buffer)."""
    return lambda: out.zero_()


def prepare_softmax_in_place(case, inputs, out):
    """BUG (input-mutating): subtracts the row max and exponentiates x in place."""
    (x,) = inputs

    def launch():
        x.sub_(x.amax(dim=-1, keepdim=True))
        x.exp_()
        out.copy_((x.float() / x.float().sum(dim=-1, keepdim=True)).to(out.dtype))
    return launch


def prepare_softmax_mutates_on_repeat(case, inputs, out):
    """BUG (input-mutating on a repeat): the first launch is clean; every later one writes the same
    output, then scales x in place (its output bits equal the checked first launch's)."""
    (x,) = inputs
    calls = []

    def launch():
        out.copy_(torch.softmax(x.float(), dim=-1).to(out.dtype))
        if calls:
            x.mul_(2.0)
        calls.append(1)
    return launch


# -- the verifier's own blind spots (each class must FAIL) ------------------------------------
def prepare_add(case, inputs, out):
    """Correct vector add."""
    x, y = inputs
    return lambda: torch.add(x, y, out=out)


def prepare_add_noop_after_verify(case, inputs, out):
    """BUG (timing no-op): correct for the first 3 calls of each prepared launch (the verified
    ones), then returns at once, so that the timed launches cost nothing."""
    x, y = inputs
    calls = [0]

    def launch():
        calls[0] += 1
        if calls[0] <= 3:
            torch.add(x, y, out=out)
    return launch


def prepare_add_scribbles_when_timed(case, inputs, out):
    """BUG (scribbles when timed): correct on the verified launches (at most two a prepared
    launch); from the third call on, the same output, then the first element of x's storage, before
    its view (a misaligned case), overwritten. The timing's checks pass an output with the verified
    bits on those bits alone, so only their check of the inputs can see this."""
    x, y = inputs
    calls = [0]
    whole = torch.empty(0, dtype=x.dtype, device=x.device).set_(x.untyped_storage())

    def launch():
        calls[0] += 1
        torch.add(x, y, out=out)
        if calls[0] > 2 and x.storage_offset() > 0:
            whole[0] = 7.0
    return launch


def prepare_add_overrun(case, inputs, out):
    """BUG (overrun): correct, and one more element written past the end of ``out``."""
    x, y = inputs
    n = out.numel()

    def launch():
        torch.add(x, y, out=out)
        torch.as_strided(out, (n + 1,), (1,))[n:].fill_(1.0)
    return launch


def prepare_add_late_decline(case, inputs, out):
    """BUG (late decline): prepare() accepts the case, launch() raises Unsupported."""
    from harness.errors import Unsupported

    def launch():
        raise Unsupported("this size is not supported after all")
    return launch


def prepare_softmax_cached(case, inputs, out):
    """BUG (cached return): computes once, then returns the same tensor on every call."""
    (x,) = inputs
    cache = []

    def launch():
        if not cache:
            cache.append(torch.softmax(x.float(), dim=-1).to(x.dtype))
        return cache[0]
    return launch


def prepare_softmax_frame_tamper(case, inputs, out):
    """BUG (reference tamper): writes a uniform row (1/N), then walks up the call stack and
    overwrites every float64 tensor of the output's shape it finds (the reference, if the
    verifier kept one in reach) with the same values."""
    import sys
    (x,) = inputs

    def launch():
        out.fill_(1.0 / x.shape[1])
        f = sys._getframe(1)
        while f is not None:
            for v in list(f.f_locals.values()):
                if isinstance(v, torch.Tensor) and v.dtype == torch.float64 and v.shape == out.shape:
                    v.copy_(out.double())
            f = f.f_back
    return launch


def prepare_softmax_patch_verifier(case, inputs, out):
    """BUG (monkeypatch): writes a uniform row and replaces the harness's output check by one
    that always passes."""
    import harness.verify as hv
    (x,) = inputs

    def launch():
        out.fill_(1.0 / x.shape[1])
        hv.check_output = lambda *a, **k: hv.Check(True)
    return launch


def prepare_softmax_row_cap(case, inputs, out):
    """BUG (row cap): a grid that stops at 2048 rows; rows beyond stay unwritten."""
    (x,) = inputs

    def launch():
        m = min(x.shape[0], 2048)
        out[:m] = torch.softmax(x[:m].float(), dim=-1).to(out.dtype)
    return launch


def prepare_softmax_toward_zero(case, inputs, out):
    """BUG (rounding): fp32 softmax converted to the output dtype rounding toward zero (a truncating
    conversion), not to nearest."""
    (x,) = inputs

    def launch():
        y = torch.softmax(x.float(), dim=-1)
        r = y.to(out.dtype)
        out.copy_(torch.where(r.float() > y, torch.nextafter(r, torch.zeros_like(r)), r))
    return launch


def prepare_softmax_fp16_exp(case, inputs, out):
    """BUG (low-precision exp): exp evaluated in float16, the rest in fp32."""
    (x,) = inputs

    def launch():
        z = x.float() - x.float().amax(dim=-1, keepdim=True)
        e = torch.exp(z.half()).float()
        out.copy_((e / e.sum(dim=-1, keepdim=True)).to(out.dtype))
    return launch


def _gemm(act_fn, acc_bf16_tile: int = 0):
    def prepare(case, inputs, out):
        a, b, bias = inputs
        act = case.params.get("act", "relu")

        def launch():
            if acc_bf16_tile:
                acc = None
                for k in range(0, a.shape[1], acc_bf16_tile):
                    p = a[:, k:k + acc_bf16_tile].float() @ b[k:k + acc_bf16_tile].float()
                    acc = (p if acc is None else acc.float() + p).to(a.dtype)
                y = acc.float()
            else:
                y = a.float() @ b.float()
            if bias is not None:
                y = y + bias.float()
            out.copy_(act_fn(y, act).to(out.dtype))
        return launch
    return prepare


def _act(y, act):
    import torch.nn.functional as F
    return torch.relu(y) if act == "relu" else (F.gelu(y, approximate="tanh") if act == "gelu" else y)


def _erf_gelu(y, act):
    import torch.nn.functional as F
    return F.gelu(y) if act == "gelu" else _act(y, act)


def _relu_for_gelu(y, act):
    return _act(y, "relu" if act == "gelu" else act)


prepare_gemm = _gemm(_act)
prepare_gemm.__doc__ = "Correct: fp32 accumulation, bias and activation on fp32, one rounding."
prepare_gemm_erf_gelu = _gemm(_erf_gelu)
prepare_gemm_erf_gelu.__doc__ = "BUG (activation substitution): exact-erf GELU where tanh GELU is specified."
prepare_gemm_relu_for_gelu = _gemm(_relu_for_gelu)
prepare_gemm_relu_for_gelu.__doc__ = "BUG (activation substitution): ReLU where GELU is specified."
prepare_gemm_bf16_acc = _gemm(_act, acc_bf16_tile=64)
prepare_gemm_bf16_acc.__doc__ = "BUG (precision): the accumulator rounded to 16 bits after every 64-wide K tile."
