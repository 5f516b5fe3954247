"""Verification against the float64 reference (docs/DESIGN.md, "Verification").

``check_output(problem, case, out, ref, bound=None)`` compares one output with the reference;
``verify_case(impl, problem, case, device)`` runs one implementation on one case over several
seeds. What a run of ``verify_case`` guarantees:

- every launch writes into a freshly NaN-poisoned ``out`` that sits between guard bands
  (``harness.guard``); a write outside ``out`` fails, naming the bytes and the side;
- every tensor a launch hands back is poisoned before the next launch, and the launch is run
  twice on the first seed (every seed on the GPU): a launch that returns a cached tensor fails;
- the reference lives in another process (``harness.checker``), computed from inputs regenerated
  from the seed; nothing the implementation can reach holds it; an implementation that modifies
  its inputs (padding included) or a harness function (``harness.tamper``) fails;
- ``Unsupported`` is honoured from ``prepare`` only; from ``launch`` it is a FAIL.

The check itself (``check_output``): NaN/inf positions must match; an all-zero or constant output
where the reference varies fails; every element must lie within its bound - the problem's
per-element bound from the arithmetic plus half an ulp of the output dtype at that element where
the problem derives one (GEMM), else ``atol + rtol*|ref|``; the relative error norm must be within
``rel_norm``; and the errors must show no systematic bias (below).

Bias test: the finite elements are binned by the sign and binade of the reference; in each bin
with at least ``BIAS_MIN_N`` distinct reference values the mean signed error (one value per
distinct reference value: repeats of one input value are one observation) is tested against its
standard error.
A bin fails when ``|t| >= BIAS_T`` and the mean error exceeds ``BIAS_FLOOR`` half-ulps of the
output dtype at the bin (at least ``BIAS_FLOOR_FP32`` half-ulps of fp32): a consistently different
function (erf instead of tanh GELU, a low-precision exp) shows up there even when every element
is inside rounding, while unbiased rounding never does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .errors import Unsupported

SEEDS = (0, 1, 2)
CHUNK = 1 << 24  # elements per pass step: bounds the float64 temporaries (~128 MB each)

BIAS_MIN_N = 512
BIAS_T = 10.0
BIAS_FLOOR = 0.02       # of half an ulp of the output dtype at the bin
BIAS_FLOOR_FP32 = 8.0   # half-ulps of fp32: the floor never goes below this
BIAS_BINADES = 40       # bins per sign: binades from the largest |ref| down
BIAS_MAX_CHUNKS = 4     # chunks of CHUNK elements the bias test reads at most (evenly spaced)


class LateDecline(Exception):
    """``Unsupported`` raised by a launch after ``prepare`` accepted the case."""


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


def check_output(problem, case, out, ref: torch.Tensor, bound: torch.Tensor | None = None,
                 systematic: torch.Tensor | None = None) -> Check:
    """Compare ``out`` with the float64 ``ref``.

    ``bound`` (float64, like ``ref``): the problem's per-element error bound before the output
    rounding; half an ulp of the output dtype at max(|ref|, |out|) is added at each element.
    ``systematic``: the part of ``bound`` that may be a bias (the bias test allows it). Without it
    the problem's ``tolerance`` applies (atol + rtol*|ref|). Streams over chunks so the float64
    temporaries stay small for outputs of billions of elements; the sums, counts and extremes stay
    on the device until the end of a pass (a host round trip a chunk costs more than the chunk),
    and the first offending element is searched for only when a count says there is one. The bias
    test reads at most ``BIAS_MAX_CHUNKS`` chunks, evenly spaced over the output (2^26 elements
    test a bias far below its floor; sorting billions of values for it would cost seconds)."""
    if not isinstance(out, torch.Tensor):
        return Check(False, f"output is {type(out).__name__}, not a tensor")
    if tuple(out.shape) != tuple(ref.shape):
        return Check(False, f"output shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if out.dtype != case.torch_dtype:
        return Check(False, f"output dtype {out.dtype} != expected {case.torch_dtype}")
    tol = problem.tolerance(case.dtype)
    shape = tuple(ref.shape)
    o_all = out.detach().to(device=ref.device).reshape(-1)
    r_all = ref.reshape(-1)
    b_all = bound.reshape(-1) if bound is not None else None
    s_all = systematic.reshape(-1) if systematic is not None else None
    n = r_all.numel()
    f64 = dict(dtype=torch.float64, device=ref.device)

    def nan_mismatch(i, j):
        return torch.isnan(o_all[i:j]) != torch.isnan(r_all[i:j])

    def inf_mismatch(i, j):
        o, r = o_all[i:j], r_all[i:j]
        oi, ri = torch.isinf(o), torch.isinf(r)
        return (oi != ri) | (oi & ri & (torch.sign(o) != torch.sign(r)))

    # pass 1: NaN/inf positions, norms, extremes (for the constant-output guard), bias sample
    counts = torch.zeros(3, dtype=torch.int64, device=ref.device)  # NaN mismatches, inf mismatches, finite
    sums = torch.zeros(3, **f64)                                   # sum r^2, sum e^2, max |e|
    ext = torch.tensor([math.inf, -math.inf, math.inf, -math.inf], **f64)  # min/max of r, of o (finite r)
    bias = _BiasStats(case.dtype) if getattr(problem, "bias_check", True) and (
        bound is not None or not getattr(problem, "derives_bound", False)) else None
    n_chunks = -(-n // CHUNK)
    bias_step = max(1, -(-n_chunks // BIAS_MAX_CHUNKS))
    for k, i in enumerate(range(0, n, CHUNK)):
        j = min(n, i + CHUNK)
        o = o_all[i:j].to(torch.float64)
        r = r_all[i:j]
        counts[0] += nan_mismatch(i, j).sum()
        counts[1] += inf_mismatch(i, j).sum()
        fin = torch.isfinite(r)
        counts[2] += fin.sum()
        e = torch.where(fin, o - r, 0.0)
        rz = torch.where(fin, r, 0.0)
        sums[0] += (rz * rz).sum()
        sums[1] += (e * e).sum()
        sums[2] = torch.maximum(sums[2], e.abs().max())
        ext[0] = torch.minimum(ext[0], torch.where(fin, r, math.inf).min())
        ext[1] = torch.maximum(ext[1], torch.where(fin, r, -math.inf).max())
        ext[2] = torch.minimum(ext[2], torch.where(fin, o, math.inf).min())
        ext[3] = torch.maximum(ext[3], torch.where(fin, o, -math.inf).max())
        if bias is not None and k % bias_step == 0:
            rf, ef = r[fin], (o - r)[fin]
            if rf.numel() and bool(torch.isfinite(ef).all()):
                bias.add(rf, ef, s_all[i:j][fin] if s_all is not None else None)

    nan_bad, inf_bad, n_fin = (int(v) for v in counts.tolist())
    sum_r2, sum_e2, max_abs = sums.tolist()
    if nan_bad:
        first = _first_index(n, nan_mismatch)
        what = ("NaN where the reference is finite (unwritten or poisoned output?)"
                if bool(torch.isnan(o_all[first])) else "finite where the reference is NaN")
        where = _index(first, shape)
        return Check(False, f"{nan_bad} element(s) {what}; first at {where}", first_bad=where,
                     max_abs_err=float("nan"))
    if inf_bad:
        where = _index(_first_index(n, inf_mismatch), shape)
        return Check(False, f"{inf_bad} element(s) with inf where the reference differs; "
                            f"first at {where}", first_bad=where, max_abs_err=float("inf"))
    if n_fin == 0:
        return Check(True, "no finite elements to compare", 0.0, 0.0)
    ref_norm, err_norm = math.sqrt(sum_r2), math.sqrt(sum_e2)
    rel = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else math.inf)

    # Guard: an all-zero or constant output where the reference is neither.
    rmin, rmax, omin, omax = ext.tolist()
    if n_fin > 1 and rmin != rmax and omin == omax:
        kind = "all zero" if omin == 0.0 else f"constant ({omin:g})"
        return Check(False, f"output is {kind} where the reference is not", max_abs, rel)

    rms = math.sqrt(sum_r2 / n_fin)
    atol = max(tol.atol_floor, tol.atol_rms * rms)

    def allowed_of(i, j, o, r):
        if b_all is not None:
            return b_all[i:j] + _half_ulp(torch.maximum(r.abs(), o.abs()), case.dtype)
        return atol + tol.rtol * r.abs()

    def over_of(i, j):
        o, r = o_all[i:j].to(torch.float64), r_all[i:j]
        return torch.isfinite(r) & ((o - r).abs() > allowed_of(i, j, o, r))

    # pass 2: every element against its bound; the largest error / bound ratio
    over = torch.zeros((), dtype=torch.int64, device=ref.device)
    ratio_max = torch.zeros((), **f64)
    for i in range(0, n, CHUNK):
        j = min(n, i + CHUNK)
        o, r = o_all[i:j].to(torch.float64), r_all[i:j]
        fin = torch.isfinite(r)
        allowed = allowed_of(i, j, o, r)
        err = (o - r).abs()
        over += (fin & (err > allowed)).sum()
        ratio_max = torch.maximum(ratio_max, torch.where(fin, err / allowed.clamp_min(1e-300), 0.0).max())
    over_n, worst_ratio = int(over), float(ratio_max)
    if over_n:
        first = _first_index(n, over_of)
        where = _index(first, shape)
        got, want = float(o_all[first]), float(r_all[first])
        allowed = float(allowed_of(first, first + 1, o_all[first:first + 1].to(torch.float64),
                                   r_all[first:first + 1])[0])
        what = (f"their bound (fp32 accumulation + half an ulp of {case.dtype})" if b_all is not None
                else f"atol={atol:.3g} + rtol={tol.rtol:.3g}*|ref|")
        return Check(False, f"{over_n} element(s) outside {what}; first at {where}: got {got:.9g}, "
                            f"expected {want:.9g} (allowed error {allowed:.3g})",
                     max_abs, rel, where)
    if rel > tol.rel_norm:
        return Check(False, f"relative error norm {rel:.3g} > {tol.rel_norm:.3g}", max_abs, rel)
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


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal values (NaN payloads included), whatever the strides."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(ints), b.contiguous().view(ints))
    return torch.equal(a, b)


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def share_inputs(inputs, device) -> tuple:
    """CPU inputs go to shared memory at once, so the checker reads them where they are."""
    if torch.device(device).type == "cpu":
        for t in inputs:
            if isinstance(t, torch.Tensor):
                t.share_memory_()
    return inputs


class Launcher:
    """One implementation prepared on one set of inputs, with its guarded output.

    ``run()`` poisons ``out`` (and whatever the previous launch handed back), launches, waits, and
    returns the output tensor (the one returned, else ``out``). ``guard()`` says what was written
    outside ``out``."""

    def __init__(self, impl, problem, case, inputs, device):
        from .guard import GuardedOut

        self.device = device
        self.g = GuardedOut(problem.out_shape(case), case.torch_dtype, device,
                            shared=torch.device(device).type == "cpu")
        self.launch = impl.prepare(case, inputs, self.g.out)  # Unsupported here: a SKIP
        if not callable(self.launch):
            raise TypeError(f"{impl.id}: prepare() returned {type(self.launch).__name__}, not a callable")
        self.returned: torch.Tensor | None = None

    @property
    def out(self) -> torch.Tensor:
        return self.g.out

    def poison(self) -> None:
        self.g.poison()
        r = self.returned
        if r is not None and r.data_ptr() != self.g.out.data_ptr() and r.is_floating_point():
            r.fill_(float("nan"))

    def call(self):
        """The launch itself (no poisoning, no waiting): what the timer brackets."""
        try:
            res = self.launch()
        except Unsupported as e:
            raise LateDecline(f"launch() declined after prepare() accepted the case: {e}") from None
        if isinstance(res, torch.Tensor):
            self.returned = res
        return res

    def result(self, res) -> torch.Tensor:
        return res if isinstance(res, torch.Tensor) else self.g.out

    def run(self) -> torch.Tensor:
        self.poison()
        res = self.call()
        sync(self.device)
        return self.result(res)

    def guard(self) -> str | None:
        return self.g.check()


def _tampered() -> str | None:
    from . import tamper
    bad = tamper.changed()
    if bad:
        tamper.restore()  # report it once; the rows after this one get the harness back
        shown = ", ".join(bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else "")
        return f"the implementation replaced harness code: {shown}"
    return None


def judge(impl, problem, case, seed, inputs, output, device) -> Check:
    """The checker's verdict on one output (plus the worker-side tamper check)."""
    from . import checker

    t = _tampered()
    if t:
        return Check(False, t)
    res = checker.get(device).check(problem.name, case, seed, inputs, output,
                                    roundings=int(impl.extra.get("roundings", 0)))
    return Check.from_dict(res)


def verify_case(impl, problem, case, device, seeds=SEEDS, repeat: bool = True) -> Check:
    """Run ``impl`` on ``case`` for each seed and check every output; the first failure wins.

    The first seed's launch runs twice (every seed's with ``repeat`` on the GPU), the second time
    into re-poisoned buffers; a result that moves between the two launches is reported (a race)."""
    import time

    from . import tamper

    tamper.baseline()
    worst = Check(True, "", 0.0, 0.0)
    for n, seed in enumerate(seeds):
        inputs = share_inputs(problem.make_inputs(case, device, seed), device)
        t0 = time.perf_counter()
        L = Launcher(impl, problem, case, inputs, device)
        try:
            got = L.run()
        except LateDecline as e:
            return Check(False, str(e), details=worst.details)
        if n == 0:
            # first prepare + launch + sync: JIT compile and autotuning included
            worst.details["first_call_s"] = time.perf_counter() - t0
            info = getattr(L.launch, "info", None)
            worst.details["info"] = dict(info) if isinstance(info, dict) else {}
        g = L.guard()
        if g:
            return Check(False, f"seed {seed}: {g}", details=worst.details)
        c = judge(impl, problem, case, seed, inputs, got, device)
        if not c.ok:
            c.reason = f"seed {seed}: {c.reason}"
            c.details.update(worst.details)
            return c
        worst.details["worst_ratio"] = max(worst.details.get("worst_ratio", 0.0),
                                           c.details.get("worst_ratio") or 0.0)
        if (c.details.get("bias") or {}).get("t") is not None:
            prev = worst.details.get("bias")
            if prev is None or abs(c.details["bias"]["t"]) > abs(prev["t"]):
                worst.details["bias"] = c.details["bias"]
        if n == 0 or (repeat and torch.device(device).type == "cuda"):
            first = got.clone()
            try:
                again = L.run()
            except LateDecline as e:
                return Check(False, str(e), details=worst.details)
            g = L.guard()
            if g:
                return Check(False, f"seed {seed}, second launch: {g}", details=worst.details)
            c2 = judge(impl, problem, case, seed, inputs, again, device)
            if not c2.ok:
                c2.reason = f"seed {seed}, second launch: {c2.reason}"
                c2.details.update(worst.details)
                return c2
            if not same_bits(first, again):
                worst.details["nondeterministic"] = True
        worst.max_abs_err = max(worst.max_abs_err or 0.0, c.max_abs_err or 0.0)
        worst.rel_err = max(worst.rel_err or 0.0, c.rel_err or 0.0)
        del L, inputs
    if worst.details.get("nondeterministic"):
        worst.reason = "passes, but two launches on the same inputs gave different bits"
    return worst


def graph_replay(impl, problem, case, device="cuda", seed: int = 0) -> Check:
    """Capture one launch into a CUDA graph, poison the output, replay and verify: a kernel that
    escapes the capture (another stream, work done at capture time) leaves the output unwritten."""
    inputs = share_inputs(problem.make_inputs(case, device, seed), device)
    L = Launcher(impl, problem, case, inputs, device)
    L.run()  # compiles and allocates outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        res = L.call()
    L.poison()
    g.replay()
    sync(device)
    bad = L.guard()
    if bad:
        return Check(False, bad)
    return judge(impl, problem, case, seed, inputs, L.result(res), device)


__all__ = ["Check", "check_output", "verify_case", "Launcher", "judge", "graph_replay", "Unsupported",
           "LateDecline", "SEEDS", "same_bits"]
