"""Metrics on finished rows, and the report: rich tables, JSON, CSV, markdown."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from rich.console import Console

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


def _baseline_times(rows: list[dict]) -> dict[tuple, tuple]:
    """(problem, case id) -> (median seconds, impl) of the baseline's timed PASS row."""
    from . import registry

    base_time: dict[tuple, tuple] = {}
    baseline_ids = {i.key for i in registry.all_impls() if i.baseline}
    for r in rows:
        is_base = r.get("role") == "baseline" or f"{r['problem']}/{r['impl']}" in baseline_ids
        if r.get("time") and is_base and r["status"] == "PASS" and r.get("phase", "timed") == "timed":
            base_time[(r["problem"], r["case"]["id"])] = (r["time"]["median_s"], r["impl"])
    return base_time


def _modelled_only(r: dict, p, case, model_gpu: str | None, _model) -> None:
    """An untimed row: what its case would take on a named GPU (modelled, no measurement)."""
    if model_gpu and _model is not None and r.get("phase", "timed") == "timed":
        try:
            g = _model.gpu_by_name(model_gpu)
            peak = g.fp32 if case.dtype == "float32" else g.tensor16
            r["model_ideal_s"] = _model.ideal_time(p.name, case, g.bw, peak)
            r["model_gpu"] = g.key
        except Exception as e:
            r["model_note"] = f"model failed: {e}"


def _ceiling_metrics(r: dict, p, dt: str, t: float, ceilings: dict | None, ds) -> None:
    """% of the same-size copy timed beside the row, of the run's large streams / vendor GEMM,
    and of the datasheet."""
    if p.metric == "GB/s":
        # % of a copy of the same bytes and read:write mix timed beside the row in the same
        # run (launch-bound where the row is); never the large copy under another name
        cc = r.get("copy_ceiling") or {}
        if cc.get("per_s"):
            r["pct_ceiling"] = 100 * r["traffic_bytes"] / t / cc["per_s"]
            r["ceiling_mix"] = cc.get("mix")
    if ceilings:
        if p.metric == "GB/s":
            bw = ceiling_bw(ceilings, p.mix)
            if bw:
                # % of the large (1 GiB class) stream of the same mix: the HBM share
                r["pct_hbm"] = 100 * r["traffic_bytes"] / t / bw
                r.setdefault("ceiling_mix", None)
                r["hbm_mix"] = p.mix if (ceilings.get("stream_bytes_per_s") or {}).get(p.mix) else "1:1"
        elif p.metric == "TFLOP/s" and (ceilings.get("gemm_flops_per_s") or {}).get(dt):
            r["pct_ceiling"] = 100 * r["flops"] / t / ceilings["gemm_flops_per_s"][dt]
        if p.metric == "TFLOP/s" and ceilings.get("copy_bytes_per_s"):
            r["pct_hbm"] = 100 * r["traffic_bytes"] / t / ceilings["copy_bytes_per_s"]
    if ds:
        if p.metric == "GB/s":
            r["pct_datasheet"] = 100 * r["traffic_bytes"] / t / ds.bw
        else:
            r["pct_datasheet"] = 100 * r["flops"] / t / (ds.fp32 if dt == "float32" else ds.tensor16)


def _model_metrics(r: dict, p, case, t: float, ceilings: dict | None, ds, _model) -> None:
    """The model's ideal time and measured / ideal: the run's measured ceilings where there are
    (copy; vendor GEMM per 16-bit dtype), the datasheet otherwise (fp32 arithmetic is never
    measured: datasheet)."""
    from . import registry

    dt = case.dtype
    ds_peak = (ds.fp32 if dt == "float32" else ds.tensor16) if ds else None
    bw = (ceilings or {}).get("copy_bytes_per_s") or (ds.bw if ds else None)
    peak = ((ceilings or {}).get("gemm_flops_per_s") or {}).get(dt) or ds_peak
    if not (bw and peak):
        return
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


def add_metrics(rows: list[dict], ceilings: dict | None, vendor: dict, gpu: str | None,
                l2_bytes: int = 0, model_gpu: str | None = None) -> None:
    """Fill gbps / tflops / % of ceiling / speed-up / model columns of every timed row, after
    failing the rows that are faster than the hardware allows (``mark_implausible``)."""
    from . import model as _model
    from . import problems
    from .case import Case
    from .machine import datasheet_for

    mark_implausible(rows, ceilings, gpu, l2_bytes)
    ds = datasheet_for(gpu)
    base_time = _baseline_times(rows)
    for r in rows:
        t = (r.get("time") or {}).get("median_s") if r["status"] == "PASS" else None
        p = problems.get(r["problem"])
        case = Case.from_json(r["case"])
        r["metric"] = p.metric
        for k in ("gbps", "tflops", "pct_ceiling", "pct_hbm", "pct_datasheet", "pct_vendor_same_shape",
                  "speedup_vs_baseline", "model_ideal_s", "measured_over_ideal"):
            r.setdefault(k, None)
        if not t:
            _modelled_only(r, p, case, model_gpu, _model)
            continue
        r["gbps"] = r["traffic_bytes"] / t / 1e9
        r["tflops"] = r["flops"] / t / 1e12 if r["flops"] else None
        _ceiling_metrics(r, p, case.dtype, t, ceilings, ds)
        v = vendor.get(case.id)
        if v and v.get("flops_per_s"):
            r["pct_vendor_same_shape"] = 100 * r["flops"] / t / v["flops_per_s"]
        b = base_time.get((r["problem"], case.id))
        if b:
            r["speedup_vs_baseline"] = b[0] / t
            r["baseline_impl"] = b[1]
        _model_metrics(r, p, case, t, ceilings, ds, _model)


def ceiling_bw(ceilings: dict | None, mix: str) -> float | None:
    """The run's measured streaming bandwidth for a read:write mix (the 1:1 copy if that mix was
    not measured)."""
    c = ceilings or {}
    m = (c.get("stream_bytes_per_s") or {}).get(mix) or {}
    return m.get("per_s") or c.get("copy_bytes_per_s")


# A row above the hardware is a FAIL, never a figure. Allowed: the measured ceiling of its kind
# plus this margin plus twice the relative spread of the ceiling and of the row (their noise),
# and never more than the datasheet.
PLAUSIBLE_MARGIN = 0.05


def mark_implausible(rows: list[dict], ceilings: dict | None, gpu: str | None, l2_bytes: int = 0) -> None:
    """FAIL (kind ``implausible``) every timed row faster than the hardware allows: effective
    bandwidth above the measured ceiling of its read:write mix (beyond the noise) or above the
    datasheet; TFLOP/s above the measured vendor GEMM x 1.35 or above the datasheet peak. In
    graph mode (warm L2) the bandwidth test counts only the bytes that cannot be in L2."""
    from . import problems
    from .case import Case
    from .machine import datasheet_for

    ds = datasheet_for(gpu)
    c = ceilings or {}
    for r in rows:
        tm = r.get("time") or {}
        t = tm.get("median_s")
        if r.get("status") != "PASS" or not t:
            continue
        p = problems.get(r["problem"])
        case = Case.from_json(r["case"])
        row_noise = (tm.get("iqr_s") or 0.0) / t
        why = None
        if p.metric == "TFLOP/s" and r.get("flops"):
            rate = r["flops"] / t
            vend = (c.get("gemm_flops_per_s") or {}).get(case.dtype)
            limit = min(x for x in (vend * 1.35 if vend else None,
                                    ds.tensor16 * 1.02 if ds else None) if x) if (vend or ds) else None
            if limit and rate > limit:
                why = (f"{rate / 1e12:.0f} TFLOP/s is above what this GPU can do ({limit / 1e12:.0f}: "
                       f"the measured vendor GEMM x 1.35 or the datasheet peak)")
        if why is None and r.get("traffic_bytes"):
            bytes_ = r["traffic_bytes"]
            if r.get("timing_mode") == "graph":
                bytes_ = max(0, bytes_ - 2 * (l2_bytes or 0))  # a warm L2 may serve the rest
            rate = bytes_ / t
            bw = ceiling_bw(c, p.mix)
            mix_noise = ((c.get("stream_bytes_per_s") or {}).get(p.mix) or {}).get("rel_iqr", 0.0)
            limits = []
            if bw:
                limits.append(bw * (1 + PLAUSIBLE_MARGIN + 2 * (mix_noise + row_noise)))
            if ds:
                limits.append(ds.bw * 1.02)
            if limits and bytes_ and rate > min(limits):
                why = (f"{rate / 1e9:.0f} GB/s from memory is above what this GPU can move "
                       f"({min(limits) / 1e9:.0f} GB/s: the measured {p.mix} ceiling plus its noise, "
                       f"or the datasheet)")
        if why:
            r.update(status="FAIL", kind="implausible", reason=f"implausible: {why}; the time is not "
                     f"reported as a result (did the launch do the work?)")
            r["implausible_time"], r["time"] = r.get("time"), None
            for k in ("gbps", "tflops", "pct_ceiling", "pct_hbm", "pct_datasheet", "pct_vendor_same_shape",
                      "speedup_vs_baseline", "measured_over_ideal"):
                r[k] = None


def results_doc(rows, *, command: str, machine: dict, ceilings, vendor, timing: dict,
                suite: str, created: str) -> dict:
    return {"schema": SCHEMA, "created": created, "command": command, "suite": suite,
            "machine": machine, "ceilings": ceilings, "vendor_same_shape": vendor,
            "timing": timing, "rows": rows}


# -- line counts and committed measurements ----------------------------------------------------
def attach_loc(rows) -> None:
    """``loc`` {kernel, host, plan} of every row, counted once per implementation."""
    from . import registry

    try:
        from . import loc
    except ImportError:
        return
    cache = {}
    for r in rows:
        key = f"{r['problem']}/{r['impl']}"
        if key not in cache:
            try:
                impl = registry.get(r["problem"], r["impl"])
                cache[key] = loc.count_impl(impl)
            except Exception as e:
                cache[key] = {"kernel": None, "host": None, "plan": None, "error": str(e)}
        r["loc"] = {k: cache[key].get(k) for k in ("kernel", "host", "plan")}


_COMMITTED: dict | None = None


def committed_figures(root: Path | None = None) -> dict:
    """(impl, case id) -> the newest committed GPU measurement of it under docs/results/:
    {"value", "unit", "pct_ceiling", "gpu", "date", "file"} (what the CPU mode shows, labelled)."""
    global _COMMITTED
    if _COMMITTED is not None and root is None:
        return _COMMITTED
    base = Path(root) if root else Path(__file__).resolve().parent.parent / "docs" / "results"
    out: dict = {}
    for f in sorted(base.rglob("results.json")) if base.is_dir() else []:
        try:
            doc = json.loads(f.read_text())
        except Exception:
            continue
        gpu = (doc.get("machine") or {}).get("gpu")
        if not gpu:
            continue
        date = str(doc.get("created", ""))[:10]
        for r in doc.get("rows", []):
            if r.get("status") != "PASS" or not (r.get("time") or {}).get("median_s"):
                continue
            tflops = r.get("metric") == "TFLOP/s"
            val = r.get("tflops") if tflops else r.get("gbps")
            if val is None:
                continue
            key = (r["impl"], r["case"]["id"])
            if key in out and out[key]["date"] > date:
                continue
            out[key] = {"value": val, "unit": "TFLOP/s" if tflops else "GB/s",
                        "pct_ceiling": r.get("pct_ceiling"), "gpu": gpu, "date": date,
                        "file": str(f.relative_to(base.parent.parent)) if base.parent.parent in f.parents else str(f)}
    if root is None:
        _COMMITTED = out
    return out


# -- terminal ----------------------------------------------------------------------------------
def _short_status(r: dict) -> str:
    st = r["status"]
    colour = {"PASS": "green", "FAIL": "red", "SKIP": "yellow"}.get(st, "white")
    kind = r.get("kind") or ""
    extra = f" {kind}" if st != "PASS" and kind else ""
    return f"[{colour}]{st}[/{colour}]{extra}"


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


def _table(title: str, cols: list[tuple[str, int]]):
    from rich.table import Table
    t = Table(title=title, title_justify="left", pad_edge=False)
    for name, width in cols:
        t.add_column(name, overflow="ellipsis", no_wrap=True, max_width=width)
    return t


def _notes(console, notes: list[str]) -> None:
    for i, n in enumerate(notes, 1):
        console.print(f"  [{i}] {n}", overflow="ellipsis", no_wrap=True, highlight=False)


def print_verify(rows: list[dict], console: Console) -> None:
    """Per implementation: PASS / FAIL / SKIP counts and the first failure; FAIL rows listed."""
    by: dict[tuple, list] = {}
    for r in rows:
        by.setdefault((r["problem"], r["impl"]), []).append(r)
    t = _table("verification against the float64 reference",
               [("problem", 14), ("implementation", 30), ("pass", 5), ("fail", 5), ("skip", 5),
                ("first failure or skip reason", 90)])
    notes = []
    for (prob, impl), rs in by.items():
        n = {s: sum(r["status"] == s for r in rs) for s in ("PASS", "FAIL", "SKIP")}
        bad = next((r for r in rs if r["status"] == "FAIL"), None) or next(
            (r for r in rs if r["status"] == "SKIP"), None)
        first = f"{_case_label(bad)}: {bad.get('reason', '')}" if bad else ""
        t.add_row(prob, impl, str(n["PASS"]), f"[red]{n['FAIL']}[/red]" if n["FAIL"] else "0",
                  str(n["SKIP"]), first)
        notes += [f"{impl} {_case_label(r)}: {r.get('reason', '')}" for r in rs if r["status"] == "FAIL"]
    console.print(t)
    if notes:
        console.print("failures:")
        _notes(console, notes)


def print_compare(doc: dict, console: Console) -> None:
    from . import summary as S

    rows = doc["rows"]
    gpu = doc["machine"].get("gpu")
    ceil = doc.get("ceilings") or {}
    head = f"device: {gpu or 'no GPU (CPU mode): nothing timed; checks, compile facts, line counts and the model'}"
    for mix, v in (ceil.get("stream_bytes_per_s") or {}).items():
        head += f" | {mix} {v['per_s'] / 1e12:.2f} TB/s"
    if ceil.get("copy_bytes_per_s") and not ceil.get("stream_bytes_per_s"):
        head += f" | copy {ceil['copy_bytes_per_s'] / 1e12:.2f} TB/s"
    for dt, v in (ceil.get("gemm_flops_per_s") or {}).items():
        head += f" | {dt} mm {v / 1e12:.0f} TFLOP/s"
    console.print(head, highlight=False)
    console.print(f"timing: {doc['timing'].get('description', '')}", highlight=False)
    if doc.get("interrupted"):
        console.print(f"[red]{doc['interrupted']}: the tables hold the rows that finished[/red]")
    suite = [r for r in rows if r.get("phase") == "verify-suite"]
    if suite:
        print_verify(suite, console)
    timed = [r for r in rows if r.get("phase", "timed") == "timed"]
    measured = any((r.get("time") or {}).get("median_s") for r in timed)
    committed = committed_figures() if not measured else {}
    probs: dict[str, list] = {}
    for r in timed:
        probs.setdefault(r["problem"], []).append(r)
    for prob, rs in probs.items():
        metric = rs[0].get("metric") or ("TFLOP/s" if prob == "gemm_epilogue" else "GB/s")
        notes: list[str] = []
        if measured:
            t = _table(f"{prob}: timed cases", [
                ("case", 30), ("implementation", 30), ("LOC k/h/p", 11), ("median", 9), (metric, 7),
                ("% ceil", 6), ("vs eager", 8), ("host us", 7), ("meas/ideal", 10), ("status", 22)])
        else:
            model_gpu = next((r.get("model_gpu") for r in rs if r.get("model_gpu")), None)
            t = _table(f"{prob}: cases (no GPU: what was checked, compiled and modelled)", [
                ("case", 30), ("implementation", 30), ("LOC k/h/p", 11), ("status", 24), ("regs/spills", 11),
                (f"ideal on {model_gpu or 'a GPU'}", 16), ("committed GPU measurement", 44)])
        last_case = None
        order = {"baseline": 0, "library": 1, "default": 2, "simple": 3, "variant": 4}
        for r in sorted(rs, key=lambda r: (list(dict.fromkeys(x["case"]["id"] for x in rs)).index(r["case"]["id"]),
                                           order.get(r.get("role"), 9), r["impl"])):
            case = _case_label(r) if r["case"]["id"] != last_case else ""
            last_case = r["case"]["id"]
            loc = r.get("loc") or {}
            locs = f"{_int(loc.get('kernel'))}/{_int(loc.get('host'))}/{_int(loc.get('plan'))}"
            status = _short_status(r)
            if r["status"] != "PASS" and r.get("reason"):
                notes.append(f"{r['impl']} {_case_label(r)}: {r['reason']}")
                status += f" [{len(notes)}]"
            if measured:
                tm = r.get("time") or {}
                val = r.get("tflops") if metric == "TFLOP/s" else r.get("gbps")
                t.add_row(case, r["impl"], locs, _fmt_time(tm.get("median_s")), _sig(val),
                          _sig(r.get("pct_ceiling"), "%"),
                          f"{r['speedup_vs_baseline']:.2f}x" if r.get("speedup_vs_baseline") else "-",
                          _sig(tm.get("host_us")),
                          f"{r['measured_over_ideal']:.2f}" if r.get("measured_over_ideal") else "-", status)
            else:
                cm = committed.get((r["impl"], r["case"]["id"]))
                cfig = (f"{_sig(cm['value'])} {cm['unit']} ({cm['gpu']}, {cm['date']})" if cm else "-")
                t.add_row(case, r["impl"], locs, status, _regs(r), _fmt_time(r.get("model_ideal_s")), cfig)
        console.print(t)
        if notes:
            _notes(console, notes)
    summ = doc.get("summary") or S.summarize(rows)
    S.render_rich(summ, console)


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
CSV_FIELDS = ["problem", "phase", "case", "dtype", "impl", "layer", "role", "status", "kind", "kernel_loc",
              "host_loc", "plan_loc", "median_s", "q1_s", "q3_s", "samples", "host_us", "gbps", "tflops", "pct_ceiling",
              "pct_hbm", "pct_datasheet", "pct_vendor_same_shape", "speedup_vs_baseline", "model_ideal_s",
              "measured_over_ideal", "first_call_s", "compile_s", "registers", "spills", "max_abs_err",
              "rel_err", "reason"]


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    w.writeheader()
    for r in rows:
        tm, c, loc = r.get("time") or {}, r.get("compile") or {}, r.get("loc") or {}
        w.writerow({"problem": r["problem"], "phase": r.get("phase", "timed"), "case": r["case"]["id"],
                    "dtype": r["case"]["dtype"], "impl": r["impl"], "layer": r["layer"],
                    "role": r.get("role"), "status": r["status"], "kind": r.get("kind"),
                    "kernel_loc": loc.get("kernel"), "host_loc": loc.get("host"),
                    "plan_loc": loc.get("plan"), "median_s": tm.get("median_s"), "q1_s": tm.get("q1_s"), "q3_s": tm.get("q3_s"),
                    "samples": tm.get("samples"), "host_us": tm.get("host_us"), "gbps": r.get("gbps"),
                    "tflops": r.get("tflops"), "pct_ceiling": r.get("pct_ceiling"),
                    "pct_hbm": r.get("pct_hbm"), "pct_datasheet": r.get("pct_datasheet"),
                    "pct_vendor_same_shape": r.get("pct_vendor_same_shape"),
                    "speedup_vs_baseline": r.get("speedup_vs_baseline"),
                    "model_ideal_s": r.get("model_ideal_s"), "measured_over_ideal": r.get("measured_over_ideal"),
                    "first_call_s": c.get("first_call_s"), "compile_s": c.get("compile_s"),
                    "registers": c.get("registers"), "spills": c.get("spills"),
                    "max_abs_err": r.get("max_abs_err"), "rel_err": r.get("rel_err"),
                    "reason": r.get("reason") or r.get("time_note") or ""})
    return buf.getvalue()


def to_markdown(doc: dict) -> str:
    from . import summary as S

    lines = ["# kernel-layers results", "",
             f"- created: {doc['created']}", f"- command: `{doc['command']}`",
             f"- device: {doc['machine'].get('gpu') or 'CPU only'}"]
    c = doc.get("ceilings") or {}
    for mix, v in (c.get("stream_bytes_per_s") or {}).items():
        lines.append(f"- {mix} streaming ceiling: {v['per_s'] / 1e12:.3f} TB/s")
    if c.get("copy_bytes_per_s") and not c.get("stream_bytes_per_s"):
        lines.append(f"- copy ceiling: {c['copy_bytes_per_s'] / 1e12:.3f} TB/s")
    for dt, v in (c.get("gemm_flops_per_s") or {}).items():
        lines.append(f"- {dt} torch.mm {c.get('gemm_size', '')}^3: {v / 1e12:.1f} TFLOP/s")
    lines.append(f"- timing: {doc['timing'].get('description', '')}")
    if doc.get("interrupted"):
        lines.append(f"- **{doc['interrupted']}**: only the rows that finished")
    lines.append("")
    lines += S.render_md(doc.get("summary") or S.summarize(doc["rows"]))
    lines.append("| problem | case | implementation | kernel LOC | host LOC | median | metric | % ceiling | vs eager | host us | status |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in doc["rows"]:
        if r.get("phase", "timed") != "timed":
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
            _sig(tm.get("host_us")) if tm else "-",
            r["status"] + (f": {reason}" if reason else "")]) + " |")
    suite = [r for r in doc["rows"] if r.get("phase") == "verify-suite"]
    if suite:
        lines += ["", "## verify suite", "", "| implementation | pass | fail | skip | first failure |",
                  "|---|---|---|---|---|"]
        by: dict[str, list] = {}
        for r in suite:
            by.setdefault(f"{r['problem']}/{r['impl']}", []).append(r)
        for k, rs in by.items():
            bad = next((r for r in rs if r["status"] == "FAIL"), None)
            lines.append(f"| {k} | {sum(r['status'] == 'PASS' for r in rs)} | "
                         f"{sum(r['status'] == 'FAIL' for r in rs)} | {sum(r['status'] == 'SKIP' for r in rs)} | "
                         + (f"{_case_label(bad)}: {bad.get('reason', '')}".replace("|", "/") if bad else "") + " |")
    return "\n".join(lines) + "\n"


def write_outputs(doc: dict, outdir: Path) -> list[Path]:
    from . import summary as S
    from .jsonsafe import dumps

    doc.setdefault("summary", S.summarize(doc["rows"]))
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / "results.json", outdir / "results.csv", outdir / "results.md"]
    paths[0].write_text(dumps(doc, indent=1))
    paths[1].write_text(to_csv(doc["rows"]))
    paths[2].write_text(to_markdown(doc))
    return paths
