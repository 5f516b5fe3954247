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


CHUNK = 1 << 24  # elements per pass step: bounds the float64 temporaries (~128 MB each)


def check_output(problem, case, out, ref: torch.Tensor) -> Check:
    """Compare ``out`` with the float64 ``ref`` under ``problem.tolerance(case.dtype)``.

    Two streaming passes over chunks of the flattened tensors, so that the float64 temporaries
    stay small even for outputs of billions of elements: the first checks NaN/inf positions and
    gathers the norms, the maximum error and the constant-output guard; the second applies the
    element-wise bound (whose atol may depend on the reference's RMS)."""
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
    n = r_all.numel()

    nan_bad = inf_bad = 0
    nan_first = inf_first = None
    nan_what = ""
    n_fin = 0
    sum_r2 = sum_e2 = 0.0
    max_abs = 0.0
    r0 = o0 = None
    ref_varies = out_varies = False
    for i in range(0, n, CHUNK):
        o = o_all[i:i + CHUNK].to(torch.float64)
        r = r_all[i:i + CHUNK]
        on, rn = torch.isnan(o), torch.isnan(r)
        d = on != rn
        if bool(d.any()):
            nan_bad += int(d.sum())
            if nan_first is None:
                j = int(torch.nonzero(d)[0])
                nan_first = i + j
                nan_what = ("NaN where the reference is finite (unwritten or poisoned output?)"
                            if bool(on[j]) else "finite where the reference is NaN")
        oi, ri = torch.isinf(o), torch.isinf(r)
        d = (oi != ri) | (oi & ri & (torch.sign(o) != torch.sign(r)))
        if bool(d.any()):
            inf_bad += int(d.sum())
            if inf_first is None:
                inf_first = i + int(torch.nonzero(d)[0])
        fin = torch.isfinite(r)
        rf, of = r[fin], o[fin]
        if rf.numel() == 0:
            continue
        e = of - rf
        n_fin += rf.numel()
        sum_r2 += float((rf * rf).sum())
        sum_e2 += float((e * e).sum())
        max_abs = max(max_abs, float(e.abs().max()))
        if r0 is None:
            r0, o0 = float(rf[0]), float(of[0])
        ref_varies = ref_varies or bool((rf != r0).any())
        out_varies = out_varies or bool((of != o0).any())

    if nan_bad:
        where = _index(nan_first, shape)
        return Check(False, f"{nan_bad} element(s) {nan_what}; first at {where}", first_bad=where,
                     max_abs_err=float("nan"))
    if inf_bad:
        where = _index(inf_first, shape)
        return Check(False, f"{inf_bad} element(s) with inf where the reference differs; "
                            f"first at {where}", first_bad=where, max_abs_err=float("inf"))
    if n_fin == 0:
        return Check(True, "no finite elements to compare", 0.0, 0.0)
    ref_norm, err_norm = math.sqrt(sum_r2), math.sqrt(sum_e2)
    rel = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else math.inf)

    # Guard: an all-zero or constant output where the reference is neither.
    if n_fin > 1 and ref_varies and not out_varies:
        kind = "all zero" if o0 == 0.0 else f"constant ({o0:g})"
        return Check(False, f"output is {kind} where the reference is not", max_abs, rel)

    rms = math.sqrt(sum_r2 / n_fin)
    atol = max(tol.atol_floor, tol.atol_rms * rms)
    over_n, first = 0, None
    for i in range(0, n, CHUNK):
        o = o_all[i:i + CHUNK].to(torch.float64)
        r = r_all[i:i + CHUNK]
        fin = torch.isfinite(r)
        over = fin & ((o - r).abs() > atol + tol.rtol * r.abs())
        if bool(over.any()):
            over_n += int(over.sum())
            if first is None:
                first = i + int(torch.nonzero(over)[0])
    if over_n:
        where = _index(first, shape)
        got, want = float(o_all[first]), float(r_all[first])
        return Check(False, f"{over_n} element(s) outside atol={atol:.3g} + rtol={tol.rtol:.3g}*|ref|; "
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
