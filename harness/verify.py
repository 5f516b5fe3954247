"""Verification against the float64 reference (docs/DESIGN.md, "Verification").

``check_output(problem, case, out, ref, bound=None)`` (``harness.output_check``) compares one output with the reference;
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

import torch

from .errors import Unsupported
from .output_check import Check, check_output, same_bits  # noqa: F401  (check_output: public here too)

SEEDS = (0, 1, 2)


class LateDecline(Exception):
    """``Unsupported`` raised by a launch after ``prepare`` accepted the case."""


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


def judge(impl, problem, case, seed, inputs, output, device, expect: str | None = None,
          fingerprint: bool = False) -> Check:
    """The checker's verdict on one output (plus the worker-side tamper check); ``output`` None:
    on the inputs alone (unchanged by the launches). ``expect``: the fingerprint of an output of
    this implementation that passed on this case and seed (the same bits pass without the float64
    reference); ``fingerprint``: a passing output's fingerprint comes back in ``details["bits"]``."""
    from . import checker

    t = _tampered()
    if t:
        return Check(False, t)
    res = checker.get(device).check(problem.name, case, seed, inputs, output,
                                    roundings=int(impl.extra.get("roundings", 0)), expect=expect,
                                    fingerprint=fingerprint)
    return Check.from_dict(res)


class _PartClock:
    """Where a verification's seconds go, summed into ``details["parts"]`` (which a later call on
    the same implementation and case continues): ``inputs_s`` (making and sharing the inputs),
    ``launch_s`` (prepare and launch to completion, first calls included), ``guard_s`` (the output
    guards, the repeat's copy and comparison), ``check_s`` (the checker's round trips) and, of
    those, what the checker reports: ``reference_s`` (float64 references and bounds computed;
    ``references`` counts them: a reference in hand costs none), ``inputs_check_s`` (the pristine
    inputs made, once a case and seed, and the inputs against them), ``compare_s`` (the outputs
    against the reference; ``compares`` counts them: a repeat with the first launch's bits is not
    compared again) and ``fingerprint_s`` (the first seed's passing output's fingerprint)."""

    def __init__(self, details: dict):
        import time
        self.parts = details.setdefault("parts", {})
        self.now = time.perf_counter
        self.t = self.now()

    def _add(self, key: str, s: float) -> None:
        self.parts[key] = round(self.parts.get(key, 0.0) + s, 4)

    def lap(self, key: str) -> None:
        t = self.now()
        self._add(key, t - self.t)
        self.t = t

    def judged(self, c: Check) -> Check:
        """A checker's verdict: its round trip and the checker's own seconds, counted."""
        self.lap("check_s")
        times = c.details.pop("checker_s", None) or {}
        for k, name in (("reference_s", "reference_s"), ("inputs_s", "inputs_check_s"), ("compare_s", "compare_s"),
                        ("fingerprint_s", "fingerprint_s")):
            if k in times:
                self._add(name, float(times[k]))
        for k, count in (("reference_s", "references"), ("compare_s", "compares")):
            if k in times:
                self.parts[count] = self.parts.get(count, 0) + 1
        return c


def verify_case(impl, problem, case, device, seeds=SEEDS, repeat: bool = True,
                so_far: Check | None = None, bits: bool = True) -> Check:
    """Run ``impl`` on ``case`` for each seed and check every output; the first failure wins.

    The first seed's launch runs twice (every seed's with ``repeat`` on the GPU), the second time
    into re-poisoned buffers; a result that moves between the two launches is reported (a race).
    ``so_far``: the passing verdict of an earlier call on the same implementation and case (its
    first seed, compile time and worst figures), which this call's seeds continue - a worker can
    check every implementation of a case on one seed before the next seed (one reference a seed).
    ``bits``: the passing first seed's output fingerprint in ``details["bits"]`` (the timing's)."""
    import time

    from . import tamper

    tamper.baseline()
    worst = so_far if so_far is not None else Check(True, "", 0.0, 0.0)
    clock = _PartClock(worst.details)
    for n, seed in enumerate(seeds, start=0 if so_far is None else 1):
        inputs = share_inputs(problem.make_inputs(case, device, seed), device)
        clock.lap("inputs_s")
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
        clock.lap("launch_s")
        g = L.guard()
        clock.lap("guard_s")
        if g:
            return Check(False, f"seed {seed}: {g}", details=worst.details)
        # (the timing's checks pass a launch with the first seed's passing bits on them)
        c = clock.judged(judge(impl, problem, case, seed, inputs, got, device, fingerprint=bits and n == 0))
        if not c.ok:
            c.reason = f"seed {seed}: {c.reason}"
            c.details.update(worst.details)
            return c
        if n == 0 and c.details.get("bits"):
            worst.details["bits"] = c.details["bits"]
        worst.details["worst_ratio"] = max(worst.details.get("worst_ratio", 0.0),
                                           c.details.get("worst_ratio") or 0.0)
        if (c.details.get("bias") or {}).get("t") is not None:
            prev = worst.details.get("bias")
            if prev is None or abs(c.details["bias"]["t"]) > abs(prev["t"]):
                worst.details["bias"] = c.details["bias"]
        if n == 0 or (repeat and torch.device(device).type == "cuda"):
            first = got.clone()
            clock.lap("guard_s")
            try:
                again = L.run()
            except LateDecline as e:
                return Check(False, str(e), details=worst.details)
            clock.lap("launch_s")
            g = L.guard()
            clock.lap("guard_s")
            if g:
                return Check(False, f"seed {seed}, second launch: {g}", details=worst.details)
            # the same bits as the checked first launch: the same verdict on the output, so the
            # checker only compares the inputs again; other bits: the whole check
            same = same_bits(first, again)
            clock.lap("guard_s")
            c2 = clock.judged(judge(impl, problem, case, seed, inputs, None if same else again, device))
            if not c2.ok:
                c2.reason = f"seed {seed}, second launch: {c2.reason}"
                c2.details.update(worst.details)
                return c2
            if not same:
                worst.details["nondeterministic"] = True
        worst.max_abs_err = max(worst.max_abs_err or 0.0, c.max_abs_err or 0.0)
        worst.rel_err = max(worst.rel_err or 0.0, c.rel_err or 0.0)
        del L, inputs
    if worst.details.get("nondeterministic"):
        worst.reason = "passes, but two launches on the same inputs gave different bits"
        worst.details.pop("bits", None)   # no launch of it need match those bits
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
