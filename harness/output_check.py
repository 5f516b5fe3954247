"""Comparing one output with its float64 reference: ``check_output`` and ``same_bits``.

The check the checker process applies (``harness.checker``) and the worker-side tests reuse; it
knows nothing of workers, launches or processes (docs/DESIGN.md, "Verification"; the rules are
listed in ``harness.verify``'s docstring).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

CHUNK = 1 << 24  # elements per pass step: bounds the float64 temporaries (~128 MB each)

BIAS_MIN_N = 512
BIAS_T = 10.0
BIAS_FLOOR = 0.02       # of half an ulp of the output dtype at the bin
BIAS_FLOOR_FP32 = 8.0   # half-ulps of fp32: the floor never goes below this
BIAS_BINADES = 40       # bins per sign: binades from the largest |ref| down
BIAS_MAX_CHUNKS = 4     # chunks of CHUNK elements the bias test reads at most (evenly spaced)


@dataclass
class Check:
    ok: bool
    reason: str = ""
    max_abs_err: float | None = None
    rel_err: float | None = None
    first_bad: list | None = None
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "reason": self.reason, "max_abs_err": self.max_abs_err,
                "rel_err": self.rel_err, "first_bad": self.first_bad, "details": self.details}

    def to_json(self) -> dict:
        from .jsonsafe import clean
        return clean(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict) -> "Check":
        return cls(bool(d["ok"]), d.get("reason", ""), d.get("max_abs_err"), d.get("rel_err"),
                   d.get("first_bad"), dict(d.get("details") or {}))


# how far past the correctly rounded reference's own relative error norm an output may be where
# that error alone exceeds the dtype's rel_norm (a kernel's fp32 arithmetic before the rounding)
ROUNDING_NORM_FACTOR = 1.5

def _index(flat_idx: int, shape) -> list[int]:
    idx = []
    for s in reversed(shape):
        idx.append(int(flat_idx % s))
        flat_idx //= s
    return list(reversed(idx))


def _half_ulp(x: torch.Tensor, dtype: str) -> torch.Tensor:
    from .problems.gemm_epilogue import half_ulp
    return half_ulp(x, dtype)


def _repeats(r: torch.Tensor) -> bool:
    """Whether reference values repeat enough to matter (judged on a sample: sorting billions
    of distinct values to find none would cost more than the check)."""
    if r.numel() <= 65536:
        return True
    idx = torch.randint(0, r.numel(), (8192,), generator=torch.Generator().manual_seed(0)).to(r.device)
    return torch.unique(r[idx]).numel() < 0.98 * 8192


class _BiasStats:
    """Per-bin sums of the signed error, binned by sign and binade of the reference."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.n = torch.zeros(2 * BIAS_BINADES, dtype=torch.float64)
        self.s1 = torch.zeros_like(self.n)
        self.s2 = torch.zeros_like(self.n)
        self.sys = torch.zeros_like(self.n)
        self.top = None

    def add(self, r: torch.Tensor, e: torch.Tensor, sys: torch.Tensor | None = None) -> None:
        nz = r != 0
        r, e = r[nz], e[nz]
        sys = sys[nz] if sys is not None else None
        if r.numel() == 0:
            return
        # one sample per distinct reference value: outputs computed from few distinct inputs (a
        # softmax of bf16 values) repeat the same rounding error thousands of times, which is
        # no evidence of a bias; their mean error per distinct value is one observation
        if _repeats(r):
            r, inv, cnt = torch.unique(r, return_inverse=True, return_counts=True)
            e = torch.zeros_like(r).index_add_(0, inv, e) / cnt
            if sys is not None:
                sys = torch.zeros_like(r).index_add_(0, inv, sys) / cnt
        if r.numel() == 0:
            return
        _, ex = torch.frexp(r.abs())
        if self.top is None:
            self.top = int(ex.max())
        b = (self.top - ex).clamp(0, BIAS_BINADES - 1) + BIAS_BINADES * (r < 0).long()
        self.n += torch.bincount(b, minlength=2 * BIAS_BINADES).double().cpu()
        self.s1 += torch.bincount(b, weights=e, minlength=2 * BIAS_BINADES).cpu()
        self.s2 += torch.bincount(b, weights=e * e, minlength=2 * BIAS_BINADES).cpu()
        if sys is not None:
            self.sys += torch.bincount(b, weights=sys, minlength=2 * BIAS_BINADES).cpu()

    def worst(self) -> dict | None:
        """The most biased bin (by t) among those that fail, else the largest |t| seen."""
        if self.top is None:
            return None
        best = None
        for i in range(2 * BIAS_BINADES):
            n = float(self.n[i])
            if n < BIAS_MIN_N:
                continue
            mean = float(self.s1[i]) / n
            var = max(float(self.s2[i]) / n - mean * mean, 0.0)
            se = math.sqrt(var / (n - 1)) if n > 1 else float("inf")
            t = mean / se if se > 0 else (0.0 if mean == 0 else math.inf)
            sign = -1 if i >= BIAS_BINADES else 1
            e = self.top - (i % BIAS_BINADES)  # |ref| in [2^(e-1), 2^e)
            mid = torch.tensor([1.5 * 2.0 ** (e - 1)], dtype=torch.float64)
            unit = max(BIAS_FLOOR * float(_half_ulp(mid, self.dtype)),
                       BIAS_FLOOR_FP32 * float(_half_ulp(mid, "float32"))) + float(self.sys[i]) / n
            fails = abs(t) >= BIAS_T and abs(mean) >= unit
            info = {"bin": f"{'-' if sign < 0 else ''}[2^{e - 1}, 2^{e})", "n": int(n), "mean_err": mean,
                    "t": t, "floor": unit, "fails": fails}
            key = (fails, abs(t) if math.isfinite(t) else 1e300)
            if best is None or key > best[0]:
                best = (key, info)
        return best[1] if best else None


def _first_index(n: int, bad_of_chunk) -> int:
    """The flat index of the first element ``bad_of_chunk(i, j)`` (a boolean chunk [i, j)) marks;
    only called once a count said there is one."""
    for i in range(0, n, CHUNK):
        d = bad_of_chunk(i, min(n, i + CHUNK))
        if bool(d.any()):
            return i + int(torch.nonzero(d)[0])
    return 0


class _Flat:
    """The output and the reference (bound, systematic part) as flat views on the reference's
    device, with the per-chunk mismatch masks the passes and the first-offender search share."""

    def __init__(self, case, out, ref, bound, systematic):
        self.case, self.shape = case, tuple(ref.shape)
        self.o = out.detach().to(device=ref.device).reshape(-1)
        self.r = ref.reshape(-1)
        self.b = bound.reshape(-1) if bound is not None else None
        self.s = systematic.reshape(-1) if systematic is not None else None
        self.n = self.r.numel()
        self.f64 = dict(dtype=torch.float64, device=ref.device)

    def nan_mismatch(self, i, j):
        return _nan_mismatch(self.o[i:j], self.r[i:j])

    def inf_mismatch(self, i, j):
        return _inf_mismatch(self.o[i:j], self.r[i:j])


def _nan_mismatch(o, r):
    """NaN in the output where the reference has none, or the reverse."""
    return torch.isnan(o) != torch.isnan(r)


def _inf_mismatch(o, r):
    """Where the reference is inf, an output other than that same inf; elsewhere an inf output."""
    return torch.where(torch.isinf(r), o != r, torch.isinf(o))


def _form_failure(case, out, ref) -> Check | None:
    if not isinstance(out, torch.Tensor):
        return Check(False, f"output is {type(out).__name__}, not a tensor")
    if tuple(out.shape) != tuple(ref.shape):
        return Check(False, f"output shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if out.dtype != case.torch_dtype:
        return Check(False, f"output dtype {out.dtype} != expected {case.torch_dtype}")
    return None


def reference_stats(case, ref: torch.Tensor) -> dict:
    """What the check needs of the reference alone, computed once a reference (the checker keeps
    it beside the reference, so the rows checked against one reference share it): the finite
    elements' count, sum of squares, extremes and first index, and the sum of squares of the
    reference's own rounding error in the output dtype (the best output the dtype can hold)."""
    r = ref.reshape(-1)
    n = r.numel()
    f64 = dict(dtype=torch.float64, device=ref.device)
    n_fin = torch.zeros((), dtype=torch.int64, device=ref.device)
    sums = torch.zeros(2, **f64)                          # sum r^2, sum (round(r) - r)^2
    ext = torch.tensor([math.inf, -math.inf], **f64)      # min, max of the finite values
    for i in range(0, n, CHUNK):
        c = r[i:i + CHUNK]
        fin = torch.isfinite(c)
        n_fin += fin.sum()
        rz = torch.where(fin, c, 0.0)
        sums[0] += (rz * rz).sum()
        rr = torch.where(fin, c.to(case.torch_dtype).to(torch.float64) - c, 0.0)
        sums[1] += (rr * rr).sum()
        ext[0] = torch.minimum(ext[0], torch.where(fin, c, math.inf).min())
        ext[1] = torch.maximum(ext[1], torch.where(fin, c, -math.inf).max())
    n_fin = int(n_fin)
    (sum_r2, sum_round2), (rmin, rmax) = sums.tolist(), ext.tolist()
    first = _first_index(n, lambda i, j: torch.isfinite(r[i:j])) if n_fin else 0
    return {"n_fin": n_fin, "sum_r2": sum_r2, "sum_round2": sum_round2, "rmin": rmin, "rmax": rmax,
            "first_fin": first}


def _pass(f: _Flat, bias, allowed_of, o_fill):
    """The one pass over the chunks: NaN/inf mismatch counts, elements past their bound, the error's
    sum of squares, largest error and largest error / bound ratio, the output's extremes where the
    reference is finite (``o_fill`` elsewhere: an output value there, for the constant-output
    guard), and the bias sample. Returns (counts, sums, extremes) as lists."""
    counts = torch.zeros(3, dtype=torch.int64, device=f.r.device)  # NaN mismatches, inf mismatches, over
    sums = torch.zeros(3, **f.f64)            # sum e^2, max |e|, max |e| / allowed
    ext = torch.tensor([math.inf, -math.inf], **f.f64)  # min/max of o where r is finite
    n_chunks = -(-f.n // CHUNK)
    bias_step = max(1, -(-n_chunks // BIAS_MAX_CHUNKS))
    for k, i in enumerate(range(0, f.n, CHUNK)):
        j = min(f.n, i + CHUNK)
        o = f.o[i:j].to(torch.float64)
        r = f.r[i:j]
        counts[0] += _nan_mismatch(o, r).sum()
        counts[1] += _inf_mismatch(o, r).sum()
        fin = torch.isfinite(r)
        e = torch.where(fin, o - r, 0.0)
        err = e.abs()
        sums[0] += (e * e).sum()
        sums[1] = torch.maximum(sums[1], err.max())
        allowed = allowed_of(i, j, o, r)
        counts[2] += (fin & (err > allowed)).sum()
        sums[2] = torch.maximum(sums[2], torch.where(fin, err / allowed.clamp_min(1e-300), 0.0).max())
        lo, hi = torch.aminmax(torch.where(fin, o, o_fill))
        ext[0] = torch.minimum(ext[0], lo)
        ext[1] = torch.maximum(ext[1], hi)
        if bias is not None and k % bias_step == 0:
            # the error against the correctly rounded reference: rounding itself is no bias, also
            # where a binade holds only a few representable values (fp16 subnormals), whose
            # rounding errors need not average out
            rr = r.to(f.case.torch_dtype).to(torch.float64) - r
            rf, ef = r[fin], (o - r - rr)[fin]
            if rf.numel() and bool(torch.isfinite(ef).all()):
                bias.add(rf, ef, f.s[i:j][fin] if f.s is not None else None)
    return counts.tolist(), sums.tolist(), ext.tolist()


def _position_failure(f: _Flat, nan_bad: int, inf_bad: int) -> Check | None:
    """NaN or inf where the reference has none (or the reverse): the count and the first."""
    if nan_bad:
        first = _first_index(f.n, f.nan_mismatch)
        what = ("NaN where the reference is finite (unwritten or poisoned output?)"
                if bool(torch.isnan(f.o[first])) else "finite where the reference is NaN")
        where = _index(first, f.shape)
        return Check(False, f"{nan_bad} element(s) {what}; first at {where}", first_bad=where,
                     max_abs_err=float("nan"))
    if inf_bad:
        where = _index(_first_index(f.n, f.inf_mismatch), f.shape)
        return Check(False, f"{inf_bad} element(s) with inf where the reference differs; "
                            f"first at {where}", first_bad=where, max_abs_err=float("inf"))
    return None


def _element_failure(f: _Flat, allowed_of, what: str, over_n: int, max_abs: float, rel: float):
    """The first of the ``over_n`` elements past their bound (the pass counted them), as a Check."""
    def over_of(i, j):
        o, r = f.o[i:j].to(torch.float64), f.r[i:j]
        return torch.isfinite(r) & ((o - r).abs() > allowed_of(i, j, o, r))

    first = _first_index(f.n, over_of)
    where = _index(first, f.shape)
    got, want = float(f.o[first]), float(f.r[first])
    allowed = float(allowed_of(first, first + 1, f.o[first:first + 1].to(torch.float64), f.r[first:first + 1])[0])
    return Check(False, f"{over_n} element(s) outside {what}; first at {where}: got {got:.9g}, "
                        f"expected {want:.9g} (allowed error {allowed:.3g})", max_abs, rel, where)


def _bias_verdict(bias, worst_ratio: float, max_abs: float, rel: float) -> Check:
    worst = bias.worst() if bias is not None else None
    details = {"bias": worst} if worst else {}
    details["worst_ratio"] = worst_ratio
    if worst and worst["fails"]:
        return Check(False, f"systematic error: in the {worst['n']} elements with reference in "
                            f"{worst['bin']} the mean error is {worst['mean_err']:.3g} "
                            f"(t = {worst['t']:.1f}; unbiased rounding stays under "
                            f"{worst['floor']:.3g}): a different function or precision?",
                     max_abs, rel, details=details)
    return Check(True, "", max_abs, rel, details=details)


def check_output(problem, case, out, ref: torch.Tensor, bound: torch.Tensor | None = None,
                 systematic: torch.Tensor | None = None, stats: dict | None = None) -> Check:
    """Compare ``out`` with the float64 ``ref``.

    ``bound`` (float64, like ``ref``): the problem's per-element error bound before the output
    rounding; half an ulp of the output dtype at max(|ref|, |out|) is added at each element.
    ``systematic``: the part of ``bound`` that may be a bias (the bias test allows it). Without it
    the problem's ``tolerance`` applies (atol + rtol*|ref|). ``stats``: the reference's own figures
    (``reference_stats``; computed here when not given). One pass over chunks, so the float64
    temporaries stay small for outputs of billions of elements; the sums, counts and extremes stay
    on the device until the end of the pass (a host round trip a chunk costs more than the chunk),
    and the first offending element is searched for only when a count says there is one. The bias
    test reads at most ``BIAS_MAX_CHUNKS`` chunks, evenly spaced over the output (2^26 elements
    test a bias far below its floor; sorting billions of values for it would cost seconds)."""
    bad = _form_failure(case, out, ref)
    if bad:
        return bad
    tol = problem.tolerance(case.dtype)
    st = stats if stats is not None else reference_stats(case, ref)
    f = _Flat(case, out, ref, bound, systematic)
    bias = _BiasStats(case.dtype) if getattr(problem, "bias_check", True) and (
        bound is not None or not getattr(problem, "derives_bound", False)) else None
    n_fin, sum_r2 = st["n_fin"], st["sum_r2"]
    atol = max(tol.atol_floor, tol.atol_rms * math.sqrt(sum_r2 / n_fin)) if n_fin else tol.atol_floor

    def allowed_of(i, j, o, r):
        if f.b is not None:
            return f.b[i:j] + _half_ulp(torch.maximum(r.abs(), o.abs()), case.dtype)
        return atol + tol.rtol * r.abs()

    o_fill = f.o[st["first_fin"]].to(torch.float64) if n_fin else torch.zeros((), **f.f64)
    (nan_bad, inf_bad, over_n), (sum_e2, max_abs, worst_ratio), (omin, omax) = _pass(f, bias, allowed_of, o_fill)
    bad = _position_failure(f, int(nan_bad), int(inf_bad))
    if bad:
        return bad
    if n_fin == 0:
        return Check(True, "no finite elements to compare", 0.0, 0.0)
    ref_norm, err_norm = math.sqrt(sum_r2), math.sqrt(sum_e2)
    rel = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else math.inf)
    # The norm bound never asks for less error than the output dtype allows: where the correctly
    # rounded reference itself is past rel_norm (fp16 softmax rows of 10^5 columns, whose values
    # sit among fp16's subnormals, each rounded to 2^-24), ROUNDING_NORM_FACTOR times its error is
    # the bound instead.
    rel_round = math.sqrt(st["sum_round2"]) / ref_norm if ref_norm > 0 else 0.0
    rel_bound = max(tol.rel_norm, ROUNDING_NORM_FACTOR * rel_round)

    # Guard: an all-zero or constant output where the reference is neither.
    if n_fin > 1 and st["rmin"] != st["rmax"] and omin == omax:
        kind = "all zero" if omin == 0.0 else f"constant ({omin:g})"
        return Check(False, f"output is {kind} where the reference is not", max_abs, rel)

    what = (f"their bound (fp32 accumulation + half an ulp of {case.dtype})" if f.b is not None
            else f"atol={atol:.3g} + rtol={tol.rtol:.3g}*|ref|")
    if over_n:
        return _element_failure(f, allowed_of, what, int(over_n), max_abs, rel)
    if rel > rel_bound:
        floor = (f" (the correctly rounded reference's own error is {rel_round:.3g})"
                 if rel_bound > tol.rel_norm else "")
        return Check(False, f"relative error norm {rel:.3g} > {rel_bound:.3g}{floor}", max_abs, rel)
    return _bias_verdict(bias, worst_ratio, max_abs, rel)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal values (NaN payloads included), whatever the strides."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(ints), b.contiguous().view(ints))
    return torch.equal(a, b)


FP_BLOCK = 1 << 22           # 32-bit words a block of the fingerprint: bounds its int64 temporaries
_FP_MULT = 0x100000001B3     # chains the blocks' sums (h = h * _FP_MULT + sum): a block's place counts
_FP_WEIGHTS: dict = {}       # device -> the two fixed weight rows (one per lane of the digest)


def _fp_weights(device) -> torch.Tensor:
    w = _FP_WEIGHTS.get(str(device))
    if w is None:
        g = torch.Generator(device="cpu").manual_seed(0x6B6C)
        w = torch.randint(-(2 ** 62), 2 ** 62, (2, FP_BLOCK), generator=g, dtype=torch.int64) | 1
        w = _FP_WEIGHTS[str(device)] = w.to(device)
    return w


def fingerprint(t: torch.Tensor) -> str:
    """A digest of a tensor's values bit for bit (its dtype and shape too), computed where the tensor
    lives: the view's elements as 32-bit words, each times a fixed odd pseudo-random weight of its
    place in a block, summed a block and the blocks chained, modulo 2^64, in two lanes. Two outputs
    with different bits collide with a chance of about 2^-64 a lane; the same bits always agree.
    The checker uses it to see that a timed launch wrote exactly the bits it verified before."""
    import hashlib
    x = t.detach().reshape(-1)
    if not x.is_contiguous() or (x.storage_offset() * x.element_size()) % 4:
        x = x.clone()
    b = x.view(torch.uint8)
    whole = b.numel() - b.numel() % 4
    words = b[:whole].view(torch.int32)
    w = _fp_weights(x.device)
    h = torch.zeros(2, dtype=torch.int64, device=x.device)
    for i in range(0, words.numel(), FP_BLOCK):
        c = words[i:i + FP_BLOCK].to(torch.int64)
        h = h * _FP_MULT + (c.unsqueeze(0) * w[:, :c.numel()]).sum(dim=1)
    if whole < b.numel():
        tail = b[whole:].to(torch.int64)
        h = h * _FP_MULT + (tail.unsqueeze(0) * w[:, :tail.numel()]).sum(dim=1)
    meta = f"{t.dtype}|{tuple(t.shape)}|{h.tolist()}"
    return hashlib.sha256(meta.encode()).hexdigest()[:32]
