"""Verification against the float64 reference (DESIGN.md's policy).

``check_output(problem, case, out, ref)`` compares one output; ``verify_case`` runs one
implementation on one case over several seeds: fresh inputs, a NaN-poisoned output, cloned
inputs with a mutation check, and the checks below. Each returns a ``Check``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .errors import Unsupported

SEEDS = (0, 1, 2)


@dataclass
class Check:
    ok: bool
    reason: str = ""
    max_abs_err: float | None = None
    rel_err: float | None = None
    first_bad: list | None = None
    details: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"ok": self.ok, "reason": self.reason, "max_abs_err": _num(self.max_abs_err),
                "rel_err": _num(self.rel_err), "first_bad": self.first_bad}


def _num(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else str(x)


def _index(flat_idx: int, shape) -> list[int]:
    idx = []
    for s in reversed(shape):
        idx.append(int(flat_idx % s))
        flat_idx //= s
    return list(reversed(idx))


def check_output(problem, case, out, ref: torch.Tensor) -> Check:
    """Compare ``out`` with the float64 ``ref`` under ``problem.tolerance(case.dtype)``."""
    if not isinstance(out, torch.Tensor):
        return Check(False, f"output is {type(out).__name__}, not a tensor")
    if tuple(out.shape) != tuple(ref.shape):
        return Check(False, f"output shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if out.dtype != case.torch_dtype:
        return Check(False, f"output dtype {out.dtype} != expected {case.torch_dtype}")
    tol = problem.tolerance(case.dtype)
    o = out.detach().to(device=ref.device, dtype=torch.float64)
    r = ref

    # NaN and inf positions (and inf signs) must match the reference exactly.
    on, rn = torch.isnan(o), torch.isnan(r)
    if not torch.equal(on, rn):
        bad = torch.nonzero((on != rn).flatten())[0].item()
        where = _index(bad, o.shape)
        what = "NaN where the reference is finite (unwritten or poisoned output?)" if on.flatten()[bad] \
            else "finite where the reference is NaN"
        n = int((on != rn).sum())
        return Check(False, f"{n} element(s) {what}; first at {where}", first_bad=where,
                     max_abs_err=float("nan"))
    oi, ri = torch.isinf(o), torch.isinf(r)
    if not torch.equal(oi, ri) or not torch.equal(torch.sign(o[oi]), torch.sign(r[ri])):
        diff = (oi != ri) | (oi & ri & (torch.sign(o) != torch.sign(r)))
        bad = torch.nonzero(diff.flatten())[0].item()
        where = _index(bad, o.shape)
        return Check(False, f"{int(diff.sum())} element(s) with inf where the reference differs; "
                            f"first at {where}", first_bad=where, max_abs_err=float("inf"))

    fin = torch.isfinite(r)
    of, rf = o[fin], r[fin]
    if rf.numel() == 0:
        return Check(True, "no finite elements to compare", 0.0, 0.0)
    err = (of - rf).abs()
    max_abs = float(err.max())
    ref_norm = float(torch.linalg.vector_norm(rf))
    err_norm = float(torch.linalg.vector_norm(of - rf))
    rel = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else math.inf)

    # Guard: an all-zero or constant output where the reference is neither.
    if rf.numel() > 1:
        ref_const = bool((rf == rf[0]).all())
        if not ref_const and bool((of == of[0]).all()):
            kind = "all zero" if float(of[0]) == 0.0 else f"constant ({float(of[0]):g})"
            return Check(False, f"output is {kind} where the reference is not", max_abs, rel)

    rms = float(torch.sqrt((rf * rf).mean()))
    atol = max(tol.atol_floor, tol.atol_rms * rms)
    limit = atol + tol.rtol * rf.abs()
    over = err > limit
    if bool(over.any()):
        pos = torch.nonzero(fin.flatten())[torch.nonzero(over)[0].item()].item()
        where = _index(pos, o.shape)
        got, want = float(o.flatten()[pos]), float(r.flatten()[pos])
        return Check(False, f"{int(over.sum())} element(s) outside atol={atol:.3g} + rtol={tol.rtol:.3g}*|ref|; "
                            f"first at {where}: got {got:.9g}, expected {want:.9g}",
                     max_abs, rel, where)
    if rel > tol.rel_norm:
        return Check(False, f"relative error norm {rel:.3g} > {tol.rel_norm:.3g}", max_abs, rel)
    return Check(True, "", max_abs, rel)


def _bytes(storage, device) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=device).set_(storage)


def snapshot(inputs) -> list:
    """Copies of the tensor inputs for the mutation check (None stays None).

    The whole underlying storage is copied and the copy viewed with the same offset, sizes and
    strides, so the reference sees the same layout and a write outside the view (into the
    padding of a strided input) is caught too."""
    saved = []
    for t in inputs:
        if not isinstance(t, torch.Tensor):
            saved.append(t)
            continue
        st = t.detach().untyped_storage().clone()
        saved.append(torch.empty(0, dtype=t.dtype, device=t.device).set_(
            st, t.storage_offset(), t.shape, t.stride()))
    return saved


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal values (NaN payloads included), whatever the strides."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(ints), b.contiguous().view(ints))
    return torch.equal(a, b)


def mutated(inputs, saved, names) -> str | None:
    for name, t, s in zip(names, inputs, saved):
        if not isinstance(t, torch.Tensor):
            continue
        now, before = _bytes(t.untyped_storage(), t.device), _bytes(s.untyped_storage(), s.device)
        if not torch.equal(now, before):
            inside = _same_bits(t, s)
            where = "outside its view (in the padding of its storage)" if inside else ""
            return f"input {name!r} was modified by the implementation {where}".strip()
    return None


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def run_once(impl, problem, case, inputs, device):
    """prepare + one launch into a fresh poisoned output; returns (output tensor, launch)."""
    out = problem.alloc_out(case, device)
    launch = impl.prepare(case, inputs, out)
    if not callable(launch):
        raise TypeError(f"{impl.id}: prepare() returned {type(launch).__name__}, not a callable")
    res = launch()
    sync(device)
    return (res if isinstance(res, torch.Tensor) else out), launch, out


def verify_case(impl, problem, case, device, seeds=SEEDS, repeat: bool = True) -> Check:
    """Run ``impl`` on ``case`` for each seed and check every output; the first failure wins.

    With ``repeat`` the launch runs a second time into a re-poisoned output, and a result that
    differs from the first bit for bit is reported (a moving result points at a race)."""
    import time

    worst = Check(True, "", 0.0, 0.0)
    for n, seed in enumerate(seeds):
        inputs = problem.make_inputs(case, device, seed)
        saved = snapshot(inputs)
        ref = problem.reference(saved, case)
        t0 = time.perf_counter()
        got, launch, out = run_once(impl, problem, case, inputs, device)
        if n == 0:
            # first prepare + launch + sync: JIT compile and autotuning included
            worst.details["first_call_s"] = time.perf_counter() - t0
            info = getattr(launch, "info", None)
            worst.details["info"] = dict(info) if isinstance(info, dict) else {}
        if (m := mutated(inputs, saved, problem.input_names)):
            return Check(False, m)
        c = check_output(problem, case, got, ref)
        if not c.ok:
            c.reason = f"seed {seed}: {c.reason}"
            c.details.update(worst.details)
            return c
        if repeat:
            first = got.clone()
            if got.data_ptr() == out.data_ptr():
                out.fill_(float("nan"))
            res = launch()
            sync(device)
            again = res if isinstance(res, torch.Tensor) else out
            c2 = check_output(problem, case, again, ref)
            if not c2.ok:
                c2.reason = f"seed {seed}, second launch: {c2.reason}"
                return c2
            if not _same_bits(first, again.clone()):
                worst.details["nondeterministic"] = True
        worst.max_abs_err = max(worst.max_abs_err or 0.0, c.max_abs_err or 0.0)
        worst.rel_err = max(worst.rel_err or 0.0, c.rel_err or 0.0)
    if worst.details.get("nondeterministic"):
        worst.reason = "passes, but two launches on the same inputs gave different bits"
    return worst


__all__ = ["Check", "check_output", "verify_case", "run_once", "Unsupported", "SEEDS"]
