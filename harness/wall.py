"""Where a compare run's wall time went (``results.json`` ``wall``; ``report RUN --section wall``).

The phases as measured by the parent (the parallel phase: compile ahead + verify suite + the timed
cases' verification; the timed phase: one worker, the GPU to itself), the compile-ahead pool
(processes, units, CPU seconds, when it finished), the workers' start-up, and the seconds the rows
report, summed: compile (the pool's units; a GPU worker's first call, JIT included), verify (the
checks after the first call), timing (per timed case: preparing the launches, then sampling).
Summed seconds of parallel work exceed the wall time they overlap; the phase shares do not.
"""
from __future__ import annotations


def _sum(values) -> float:
    return round(sum(v for v in values if v), 1)


def breakdown(rows: list[dict], facts: list[dict], wall_s: float) -> dict:
    """The breakdown from the run's rows and the facts the parent noted (``_Recorder.note``)."""
    phases = {f["name"]: {"start_s": f["start_s"], "end_s": f["end_s"], "s": round(f["end_s"] - f["start_s"], 1)}
              for f in facts if f["_event"] == "phase"}
    pool = next((f for f in facts if f["_event"] == "compile_ahead"), None)
    ready = [f for f in facts if f["_event"] == "worker_ready"]
    done = [f for f in facts if f["_event"] == "worker_done"]
    timed = [f for f in facts if f["_event"] == "timed_case"]
    comp = [r.get("compile") or {} for r in rows]
    first = _sum(c.get("first_call_s") for c in comp)
    out = {
        "wall_s": wall_s,
        "phases": phases,
        "compile_ahead": {k: v for k, v in (pool or {}).items() if k != "_event"} or None,
        "workers": {"started": len(ready), "startup_s": _sum(f.get("startup_s") for f in ready),
                    "startup_cpu_s": _sum(f.get("startup_cpu_s") for f in ready),
                    "cpu_s": _sum(f.get("cpu_s") for f in done),
                    "checker_cpu_s": _sum(f.get("checker_cpu_s") for f in done)},
        "rows": {"n": len(rows),
                 "compile_only_s": _sum(c.get("compile_s") for r, c in zip(rows, comp)
                                        if r.get("kind") == "compile-only" and not c.get("from_cache")),
                 "first_call_s": first,
                 "verify_s": round(_sum(r.get("verify_s") for r in rows) - first, 1)},
        "verify_parts": _parts(rows),
        "timed": _timed(timed, phases.get("timed")),
    }
    return out


def _timed(timed: list[dict], phase: dict | None) -> dict:
    """The timed cases' seconds, summed: preparing, sampling (the checks of each row's first and
    last timed launch included: ``check_s``, with how many checks and how many passed on the bits
    the row's verification passed with), and the rest of the timed phase (``between_s``: settling
    the rows, the hand-over of cases and rows, giving memory back) where the phase finished."""
    out = {"cases": len(timed), "prepare_s": _sum(f["prepare_s"] for f in timed),
           "sample_s": _sum(f["sample_s"] for f in timed),
           "check_s": _sum(f.get("check_s") for f in timed) if any("check_s" in f for f in timed) else None}
    if any(f.get("checks") is not None for f in timed):
        out["checks"] = sum(int(f.get("checks") or 0) for f in timed)
        out["same_bits"] = sum(int(f.get("same_bits") or 0) for f in timed)
    if phase is not None and timed:
        out["between_s"] = round(max(0.0, phase["s"] - out["prepare_s"] - out["sample_s"]), 1)
    return out


#: the parts of a verification (``verify._PartClock``), in the order the report names them
PARTS = (("inputs_s", "inputs"), ("launch_s", "launches (first calls included)"), ("guard_s", "output guards"),
         ("check_s", "checker round trips"), ("reference_s", "float64 references"),
         ("inputs_check_s", "input comparisons"), ("compare_s", "output comparisons"),
         ("fingerprint_s", "fingerprints of the first seed's output"))


def _parts(rows: list[dict]) -> dict | None:
    """The rows' verification parts, summed (None where no row has them: runs before they were
    recorded, or nothing verified)."""
    have = [r["verify_parts"] for r in rows if r.get("verify_parts")]
    if not have:
        return None
    out = {k: _sum(p.get(k) for p in have) for k, _ in PARTS}
    for count in ("references", "compares"):
        out[count] = sum(int(p.get(count, 0)) for p in have)
    out["rows"] = len(have)
    return out


def _pct(part, whole) -> str:
    return f"{100.0 * part / whole:.0f} %" if part is not None and whole else "-"


def render(w: dict | None) -> str:
    """Markdown lines: the phases with their share of the wall time, then what was summed in them."""
    if not w:
        return "no wall-time breakdown in this run (recorded by compare since issue 40)\n"
    wall = w.get("wall_s") or 0.0
    out = [f"- wall: {wall:.1f} s (the parent's, from planning done to the files written)"]
    for name, p in (w.get("phases") or {}).items():
        out.append(f"- {name} phase: {p['s']:.1f} s ({_pct(p['s'], wall)}), from {p['start_s']:.1f} s")
    pool = w.get("compile_ahead")
    if pool:
        out.append(f"- compile ahead: {pool['units']} unit(s) on {pool['processes']} process(es), "
                   f"{pool['cpu_s']:.1f} CPU s, {pool['wall_s']:.1f} s wall"
                   + (f", done at {pool['done_at_s']:.1f} s" if pool.get("done_at_s") is not None else ""))
    wk, rs, tm = w.get("workers") or {}, w.get("rows") or {}, w.get("timed") or {}
    out.append(f"- workers: {wk.get('started', 0)} started, {wk.get('startup_s', 0):.1f} s of start-up "
               f"({wk.get('startup_cpu_s', 0):.1f} CPU s), {wk.get('cpu_s', 0):.1f} CPU s in all, "
               f"their checkers {wk.get('checker_cpu_s', 0):.1f} CPU s")
    out.append(f"- rows ({rs.get('n', 0)}), summed: compile-only {rs.get('compile_only_s', 0):.1f} s, "
               f"first calls (compile included) {rs.get('first_call_s', 0):.1f} s, "
               f"verify after the first call {rs.get('verify_s', 0):.1f} s")
    vp = w.get("verify_parts")
    if vp:
        named = ", ".join(f"{label} {vp.get(k, 0):.1f} s" for k, label in PARTS[:4])
        inside = ", ".join(f"{label} {vp.get(k, 0):.1f} s" for k, label in PARTS[4:])
        out.append(f"- verification of {vp['rows']} row(s), summed: {named}; in the checker: {inside} "
                   f"({vp.get('references', 0)} reference(s) computed, {vp.get('compares', 0)} output(s) compared)")
    if tm.get("cases"):
        checks = (f" (of which checking each row's first and last timed launch {tm['check_s']:.1f} s"
                  + (f": {tm['checks']} checks, {tm['same_bits']} passed on the bits the row's verification "
                     f"passed with" if tm.get("checks") is not None else "") + ")"
                  if tm.get("check_s") is not None else "")
        between = (f"; the rest of the timed phase (settling rows, handing cases and rows over, memory "
                   f"given back) {tm['between_s']:.1f} s" if tm.get("between_s") is not None else "")
        out.append(f"- timed cases ({tm['cases']}): preparing {tm['prepare_s']:.1f} s, sampling {tm['sample_s']:.1f} s"
                   + checks + between)
    return "\n".join(out) + "\n"
