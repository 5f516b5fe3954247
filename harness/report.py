"""Metrics on finished rows, and the report: rich tables, JSON, CSV, markdown."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

SCHEMA = "kernel-layers/results/1"


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-6:
        return f"{s * 1e9:.1f} ns"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.3f} ms"
    return f"{s:.3f} s"


def add_metrics(rows: list[dict], ceilings: dict | None, vendor: dict, gpu: str | None) -> None:
    """Fill gbps / tflops / % of ceiling / speed-up / model columns of every timed row."""
    from . import problems, registry
    from .case import Case
    from .machine import datasheet_for

    try:
        from . import model as _model
    except Exception:  # the model module is optional for the comparison
        _model = None
    ds = datasheet_for(gpu)
    base_time: dict[tuple, float] = {}
    baseline_ids = {i.key for i in registry.all_impls() if i.baseline}
    for r in rows:
        if r.get("time") and f"{r['problem']}/{r['impl']}" in baseline_ids and r["status"] == "PASS":
            base_time[(r["problem"], r["case"]["id"])] = (r["time"]["median_s"], r["impl"])
    for r in rows:
        t = (r.get("time") or {}).get("median_s") if r["status"] == "PASS" else None
        p = problems.get(r["problem"])
        case = Case.from_json(r["case"])
        r["metric"] = p.metric
        for k in ("gbps", "tflops", "pct_ceiling", "pct_datasheet", "pct_vendor_same_shape",
                  "speedup_vs_baseline", "model_ideal_s", "measured_over_ideal"):
            r.setdefault(k, None)
        if not t:
            continue
        r["gbps"] = r["traffic_bytes"] / t / 1e9
        r["tflops"] = r["flops"] / t / 1e12 if r["flops"] else None
        dt = case.dtype
        if ceilings:
            if p.metric == "GB/s" and ceilings.get("copy_bytes_per_s"):
                r["pct_ceiling"] = 100 * r["traffic_bytes"] / t / ceilings["copy_bytes_per_s"]
            elif p.metric == "TFLOP/s" and (ceilings.get("gemm_flops_per_s") or {}).get(dt):
                r["pct_ceiling"] = 100 * r["flops"] / t / ceilings["gemm_flops_per_s"][dt]
        ds_peak = (ds.fp32 if dt == "float32" else ds.tensor16) if ds else None
        if ds:
            if p.metric == "GB/s":
                r["pct_datasheet"] = 100 * r["traffic_bytes"] / t / ds.bw
            else:
                r["pct_datasheet"] = 100 * r["flops"] / t / ds_peak
        v = vendor.get(case.id)
        if v and v.get("flops_per_s"):
            r["pct_vendor_same_shape"] = 100 * r["flops"] / t / v["flops_per_s"]
        b = base_time.get((r["problem"], case.id))
        if b:
            r["speedup_vs_baseline"] = b[0] / t
            r["baseline_impl"] = b[1]
        if _model is not None:
            # the run's measured ceilings where there are (copy; vendor GEMM per 16-bit dtype),
            # the datasheet otherwise (fp32 arithmetic is never measured: datasheet)
            bw = (ceilings or {}).get("copy_bytes_per_s") or (ds.bw if ds else None)
            peak = ((ceilings or {}).get("gemm_flops_per_s") or {}).get(dt) or ds_peak
            if bw and peak:
                try:
                    impl = registry.get(p.name, r["impl"])
                    variant = _model.variant_of(impl)
                except Exception:
                    variant = None
                try:
                    ideal = _model.ideal_time(p.name, case, bw, peak, variant=variant)
                    r["model_variant"] = variant or "fused"
                    r["model_ideal_s"] = ideal
                    r["measured_over_ideal"] = t / ideal if ideal else None
                except Exception as e:
                    r["model_note"] = f"model failed: {e}"


def results_doc(rows, *, command: str, machine: dict, ceilings, vendor, timing: dict,
                suite: str, created: str) -> dict:
    return {"schema": SCHEMA, "created": created, "command": command, "suite": suite,
            "machine": machine, "ceilings": ceilings, "vendor_same_shape": vendor,
            "timing": timing, "rows": rows}


# -- terminal ----------------------------------------------------------------------------------
def _status_cell(r: dict) -> str:
    st = r["status"]
    colour = {"PASS": "green", "FAIL": "red", "SKIP": "yellow"}.get(st, "white")
    reason = r.get("reason") or r.get("time_note") or ""
    if st == "PASS" and r.get("time_note"):
        reason = r["time_note"]
    cell = f"[{colour}]{st}[/{colour}]"
    return f"{cell} {reason}" if reason else cell


def _regs(r) -> str:
    c = r.get("compile") or {}
    regs, spills = c.get("registers"), c.get("spills")
    if regs is None and spills is None:
        return "-"
    return f"{regs if regs is not None else '?'}/{spills if spills is not None else '?'}"


def _first_call(r) -> str:
    c = r.get("compile") or {}
    v = c.get("compile_s", c.get("first_call_s"))
    return f"{v:.2f}" if isinstance(v, (int, float)) else "-"


def print_verify(rows: list[dict], console: Console) -> None:
    by_problem: dict[str, list] = {}
    for r in rows:
        by_problem.setdefault(r["problem"], []).append(r)
    for prob, rs in by_problem.items():
        t = Table(title=f"verify: {prob}", show_lines=False, expand=False)
        for col in ("implementation", "case", "status", "max abs err", "rel err"):
            t.add_column(col, overflow="fold")
        for r in rs:
            t.add_row(r["impl"], _case_label(r), _status_cell(r),
                      _num(r.get("max_abs_err")), _num(r.get("rel_err")))
        console.print(t)


def _num(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{x:.3g}"


def _case_label(r) -> str:
    c = r["case"]
    dims = "x".join(str(v) for v in c["dims"].values())
    extra = " ".join(f"{k}={v}" for k, v in sorted(c.get("params", {}).items()))
    return f"{dims} {c['dtype']}" + (f" {extra}" if extra else "")


def print_compare(doc: dict, console: Console) -> None:
    rows = doc["rows"]
    gpu = doc["machine"].get("gpu")
    ceil = doc.get("ceilings") or {}
    head = f"device: {gpu or 'no GPU (CPU mode)'}"
    if ceil.get("copy_bytes_per_s"):
        head += f" | copy ceiling {ceil['copy_bytes_per_s'] / 1e12:.2f} TB/s"
    for dt, v in (ceil.get("gemm_flops_per_s") or {}).items():
        head += f" | {dt} mm {v / 1e12:.0f} TFLOP/s"
    console.print(head)
    console.print(f"timing: {doc['timing'].get('description', '')}")
    cases: dict[tuple, list] = {}
    for r in rows:
        if r.get("phase") == "verify-suite":
            continue
        cases.setdefault((r["problem"], r["case"]["id"]), []).append(r)
    for (prob, cid), rs in cases.items():
        metric = rs[0].get("metric") or ("TFLOP/s" if prob == "gemm_epilogue" else "GB/s")
        title = f"{prob}  {_case_label(rs[0])}"
        v = (doc.get("vendor_same_shape") or {}).get(cid)
        if v and v.get("flops_per_s"):
            title += f"  (torch.mm at this shape: {v['flops_per_s'] / 1e12:.0f} TFLOP/s)"
        t = Table(title=title, expand=False)
        for col in ("implementation", "layer", "kernel LOC", "host LOC", "time (median)", "IQR",
                    metric, "% ceiling", "vs eager", "model ideal", "meas/ideal",
                    "first call s", "host us", "regs/spills", "status"):
            t.add_column(col, overflow="fold")
        for r in sorted(rs, key=lambda r: ((r.get("time") or {}).get("median_s") or 1e99)):
            tm = r.get("time") or {}
            val = r.get("tflops") if metric == "TFLOP/s" else r.get("gbps")
            loc = r.get("loc") or {}
            t.add_row(r["impl"], r["layer"], _int(loc.get("kernel")), _int(loc.get("host")),
                      _fmt_time(tm.get("median_s")) if tm else ("needs GPU" if r["status"] == "PASS" else "-"),
                      _fmt_time(tm.get("iqr_s")) if tm else "-",
                      _sig(val), _sig(r.get("pct_ceiling"), "%"),
                      f"{r['speedup_vs_baseline']:.2f}x" if r.get("speedup_vs_baseline") else "-",
                      _fmt_time(r.get("model_ideal_s")),
                      f"{r['measured_over_ideal']:.2f}" if r.get("measured_over_ideal") else "-",
                      _first_call(r), _sig(tm.get("host_us")) if tm else "-", _regs(r),
                      _status_cell(r))
        console.print(t)


def _sig(x, unit: str = "") -> str:
    """Three significant digits at most, without scientific notation for table cells."""
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:.0f}{unit}"
    if x >= 1:
        return f"{x:.3g}{unit}"
    return f"{x:.2g}{unit}"


def _int(x) -> str:
    return "-" if x is None else str(x)


# -- files -------------------------------------------------------------------------------------
CSV_FIELDS = ["problem", "case", "dtype", "impl", "layer", "status", "kind", "kernel_loc", "host_loc",
              "median_s", "q1_s", "q3_s", "samples", "host_us", "gbps", "tflops", "pct_ceiling", "pct_datasheet",
              "pct_vendor_same_shape", "speedup_vs_baseline", "model_ideal_s", "measured_over_ideal",
              "first_call_s", "compile_s", "registers", "spills", "max_abs_err", "rel_err", "reason"]


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    w.writeheader()
    for r in rows:
        tm, c, loc = r.get("time") or {}, r.get("compile") or {}, r.get("loc") or {}
        w.writerow({"problem": r["problem"], "case": r["case"]["id"], "dtype": r["case"]["dtype"],
                    "impl": r["impl"], "layer": r["layer"], "status": r["status"], "kind": r.get("kind"),
                    "kernel_loc": loc.get("kernel"), "host_loc": loc.get("host"),
                    "median_s": tm.get("median_s"), "q1_s": tm.get("q1_s"), "q3_s": tm.get("q3_s"),
                    "samples": tm.get("samples"), "host_us": tm.get("host_us"), "gbps": r.get("gbps"), "tflops": r.get("tflops"),
                    "pct_ceiling": r.get("pct_ceiling"), "pct_datasheet": r.get("pct_datasheet"),
                    "pct_vendor_same_shape": r.get("pct_vendor_same_shape"),
                    "speedup_vs_baseline": r.get("speedup_vs_baseline"),
                    "model_ideal_s": r.get("model_ideal_s"), "measured_over_ideal": r.get("measured_over_ideal"),
                    "first_call_s": c.get("first_call_s"), "compile_s": c.get("compile_s"),
                    "registers": c.get("registers"), "spills": c.get("spills"),
                    "max_abs_err": r.get("max_abs_err"), "rel_err": r.get("rel_err"),
                    "reason": r.get("reason") or r.get("time_note") or ""})
    return buf.getvalue()


def to_markdown(doc: dict) -> str:
    lines = [f"# kernel-layers results", "",
             f"- created: {doc['created']}", f"- command: `{doc['command']}`",
             f"- device: {doc['machine'].get('gpu') or 'CPU only'}"]
    c = doc.get("ceilings") or {}
    if c.get("copy_bytes_per_s"):
        lines.append(f"- copy ceiling: {c['copy_bytes_per_s'] / 1e12:.3f} TB/s")
    for dt, v in (c.get("gemm_flops_per_s") or {}).items():
        lines.append(f"- {dt} torch.mm {c.get('gemm_size', '')}^3: {v / 1e12:.1f} TFLOP/s")
    lines.append(f"- timing: {doc['timing'].get('description', '')}")
    lines.append("")
    lines.append("| problem | case | implementation | kernel LOC | host LOC | median | metric | % ceiling | vs eager | status |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in doc["rows"]:
        if r.get("phase") == "verify-suite":
            continue
        tm, loc = r.get("time") or {}, r.get("loc") or {}
        val = r.get("tflops") if r.get("metric") == "TFLOP/s" else r.get("gbps")
        unit = r.get("metric") or ""
        reason = (r.get("reason") or r.get("time_note") or "").replace("|", "/")
        lines.append("| " + " | ".join([
            r["problem"], _case_label(r), r["impl"], _int(loc.get("kernel")), _int(loc.get("host")),
            _fmt_time(tm.get("median_s")) if tm else "-",
            f"{val:.1f} {unit}" if val else "-",
            f"{r['pct_ceiling']:.1f}%" if r.get("pct_ceiling") else "-",
            f"{r['speedup_vs_baseline']:.2f}x" if r.get("speedup_vs_baseline") else "-",
            r["status"] + (f": {reason}" if reason else "")]) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(doc: dict, outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / "results.json", outdir / "results.csv", outdir / "results.md"]
    paths[0].write_text(json.dumps(doc, indent=1, default=str))
    paths[1].write_text(to_csv(doc["rows"]))
    paths[2].write_text(to_markdown(doc))
    return paths
