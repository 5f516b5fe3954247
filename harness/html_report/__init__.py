"""``python -m harness report RUN [RUN...] --html OUT/``: a self-contained static site.

``OUT/index.html``: the runs (machine, versions, command), then per problem the LOC vs % of ceiling
chart of every run side by side (``chart.svg``), the headline table of every run, the per-case
table (click a header to sort), the verify results, the machine and its measured ceilings.
``OUT/impl/<problem>--<layer>-<name>.html``: one page per implementation, its numbers in every run
beside its source files, the counted lines marked (kernel, host) as the LOC tool counts them now.

Everything is inline (CSS, JavaScript, SVG written here): the pages open from the disk with no
network. The HTML is written into a temporary folder and moved into place at the end, so a report
that fails leaves nothing half-written.
"""
from __future__ import annotations

import html
import os
import re
import shutil
import tempfile
from pathlib import Path

from . import chart
from .assets import CSS, JS

e = html.escape


class ReportTargetError(ValueError):
    """A bad --html target (the CLI's one line, exit 2)."""


def check_target(out: Path | str) -> Path:
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise ReportTargetError(f"report --html: {p} exists and is not a folder")
    if p.is_dir() and any(x for x in p.iterdir() if x.name not in ("index.html", "impl")):
        raise ReportTargetError(f"report --html: {p} holds other files (give a new or empty folder, "
                                f"or a previous report's)")
    if not p.exists() and not p.parent.exists():
        raise ReportTargetError(f"report --html: the folder {p.parent} does not exist")
    return p


def _slug(problem: str, impl: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{problem}--{impl}") + ".html"


def _page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{e(title)}</title><style>{CSS}</style></head><body>{body}"
            f"<script>{JS}</script></body></html>\n")


def _label(doc: dict, k: int) -> str:
    sr = doc.get("store_run") or {}
    return sr.get("label") or (f"run {sr['id']}" if sr.get("id") else f"run #{k + 1}")


def _gpu(doc: dict) -> str:
    m = doc.get("machine") or {}
    return m.get("gpu") or f"no GPU ({m.get('hostname') or 'cpu'})"


def _num(v, fmt="{:.3g}", unit="") -> tuple[str, str]:
    """(text, sort value) of a number cell."""
    if v is None or (isinstance(v, float) and v != v):
        return "-", ""
    return fmt.format(v) + unit, repr(float(v))


def _td_num(v, fmt="{:.3g}", unit="") -> str:
    t, s = _num(v, fmt, unit)
    return f'<td class="n" data-v="{s}">{e(t)}</td>'


def _time_us(t: dict | None) -> float | None:
    m = (t or {}).get("median_s")
    return m * 1e6 if m else None


SUMMARY_ROLES = ("baseline", "default", "simple", "library")


def _summary(doc: dict) -> dict:
    """The headline summary of a run (``harness.summary``), the library rows included. Rows that
    carry no line counts (a ``verify`` run records none) get the current sources' counts."""
    from ..summary import summarize
    rows = doc.get("rows") or []
    if any("loc" not in r for r in rows):
        rows = [r if "loc" in r else dict(r, loc=_loc_now(r.get("problem"), r.get("impl"))) for r in rows]
    return summarize(rows, roles=SUMMARY_ROLES)


_LOC_NOW: dict = {}


def _loc_now(problem, impl) -> dict:
    if (problem, impl) not in _LOC_NOW:
        from .. import loc, registry
        try:
            c = loc.count_impl(registry.get(problem, impl))
            _LOC_NOW[(problem, impl)] = {k: c.get(k) for k in ("kernel", "host", "plan")}
        except Exception:  # not registered here, or its source unreadable: no count
            _LOC_NOW[(problem, impl)] = {}
    return _LOC_NOW[(problem, impl)]


PROBLEM_ORDER = ("vector_add", "softmax", "gemm_epilogue")


def _problems(docs) -> list[str]:
    seen = []
    for d in docs:
        for r in d.get("rows") or []:
            if r.get("problem") not in seen:
                seen.append(r.get("problem"))
    return [p for p in PROBLEM_ORDER if p in seen] + [p for p in seen if p not in PROBLEM_ORDER]


def _case_label(r: dict) -> str:
    c = r.get("case") or {}
    dims = ",".join(f"{k}={v}" for k, v in (c.get("dims") or {}).items())
    params = ",".join(f"{k}={v}" for k, v in (c.get("params") or {}).items())
    return " ".join(x for x in (dims, c.get("dtype") or "", params) if x)


def _status(r: dict) -> str:
    s = r.get("status") or "-"
    kind = r.get("kind") if s != "PASS" and r.get("kind") else ""
    return f'<td class="{e(s)}" title="{e(r.get("reason") or "")}">{e(s)}{(" " + e(kind)) if kind else ""}</td>'


# -- sections ----------------------------------------------------------------------------------
def _runs_table(docs) -> str:
    out = ['<table id="runs"><thead><tr><th>run</th><th>GPU</th><th>host</th><th>created</th>'
           '<th>versions</th><th>command</th><th>rows P/F/S</th><th>state</th></tr></thead><tbody>']
    for k, d in enumerate(docs):
        m = d.get("machine") or {}
        rows = d.get("rows") or []
        pfs = "/".join(str(sum(r.get("status") == s for r in rows)) for s in ("PASS", "FAIL", "SKIP"))
        vers = ", ".join(f"{n} {m[n]}" for n in ("torch", "triton", "cutlass_dsl", "cupy", "driver", "python")
                         if m.get(n))
        state = d.get("interrupted") or (d.get("store_run") or {}).get("state") or "done"
        out.append(f"<tr><td>{e(_label(d, k))}</td><td>{e(_gpu(d))}</td><td>{e(m.get('hostname') or '-')}</td>"
                   f"<td>{e(str(d.get('created') or '-'))}</td><td>{e(vers)}</td>"
                   f"<td><code>{e(d.get('command') or '-')}</code></td><td>{len(rows)}: {pfs}</td>"
                   f"<td>{e(str(state))}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _headline(doc: dict, prob: str, s: dict) -> str:
    measured = s.get("measured")
    lines = s.get("lines") or []
    extra = [(k, c, f) for k, c, f in (("compile_s", "compile s", "{:.2f}"), ("host_us", "host us", "{:.1f}"),
                                       ("tune_s", "tune s", "{:.1f}"))
             if any(ln.get(k) is not None for ln in lines)]
    cols = ["implementation", "role", "kernel LOC", "host LOC", "plan LOC"]
    cols += ["% ceiling (geomean)", "vs eager (geomean)", "worst case"] if measured else ["verify suite P/F/S"]
    cols += [c for _, c, _ in extra] + ["timed P/F/S"]
    out = [f'<table class="headline sortable" data-problem="{e(prob)}"><thead><tr>'
           + "".join(f"<th>{c}</th>" for c in cols) + "</tr></thead><tbody>"]
    for ln in s["lines"]:
        link = f'<a href="impl/{_slug(prob, ln["impl"])}">{e(ln["impl"])}</a>'
        cells = [f"<td>{link}</td>", f"<td>{e(ln.get('role') or '')}</td>",
                 _td_num(ln.get("loc_kernel"), "{:.0f}"), _td_num(ln.get("loc_host"), "{:.0f}"),
                 _td_num(ln.get("loc_plan"), "{:.0f}")]
        if measured:
            w = ln.get("worst") or {}
            worst = (f"{w.get('case')}: " + (f"{w['vs_eager']:.2f}x" if w.get("vs_eager") else "")
                     + (f" {w['pct_ceiling']:.1f}%" if w.get("pct_ceiling") else "")) if w else "-"
            cells += [_td_num(ln.get("geomean_pct_ceiling"), "{:.1f}", "%"),
                      _td_num(ln.get("geomean_vs_eager"), "{:.2f}", "x"), f"<td>{e(worst)}</td>"]
        else:
            v = ln.get("verify_suite") or {}
            cells.append(f"<td>{v.get('PASS', 0)}/{v.get('FAIL', 0)}/{v.get('SKIP', 0)}</td>")
        cells += [_td_num(ln.get(k), f) for k, _, f in extra]
        cells.append(f"<td>{ln.get('pass', 0)}/{ln.get('fail', 0)}/{ln.get('skip', 0)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    if measured:
        out.append(f'<p class="note">geometric means over the {s.get("common_cases")} of {s.get("cases")} '
                   f'case(s) every line timed' + "".join(
                       f'; left out: {e(x["case"])} (not timed: {e(", ".join(x["not_timed"]))})'
                       for x in s.get("excluded") or []) + "</p>")
    return "".join(out)


def _case_table(docs, prob: str, impl: str | None = None, table_id: str = "") -> str:
    many = len(docs) > 1
    cols = (["run"] if many else []) + ["case", "implementation", "role", "median", "rate", "% ceiling",
                                        "vs eager", "status"]
    out = [f'<table class="cases sortable"{f" id={chr(34)}{e(table_id)}{chr(34)}" if table_id else ""} '
           f'data-problem="{e(prob)}"><thead><tr>' + "".join(f"<th>{c}</th>" for c in cols)
           + "</tr></thead><tbody>"]
    n = 0
    for k, d in enumerate(docs):
        for r in d.get("rows") or []:
            if r.get("problem") != prob or r.get("phase", "timed") != "timed":
                continue
            if impl is not None and r.get("impl") != impl:
                continue
            unit = r.get("metric") or ("TFLOP/s" if prob == "gemm_epilogue" else "GB/s")
            rate = r.get("tflops") if unit == "TFLOP/s" else r.get("gbps")
            cells = ([f"<td>{e(_label(d, k))} ({e(_gpu(d))})</td>"] if many else [])
            cells += [f"<td>{e(_case_label(r))}</td>",
                      f'<td><a href="{"" if impl else "impl/"}{_slug(prob, r["impl"])}">{e(r["impl"])}</a></td>',
                      f"<td>{e(r.get('role') or '')}</td>",
                      _td_num(_time_us(r.get("time")), "{:.2f}", " us"), _td_num(rate, "{:.4g}", " " + unit),
                      _td_num(r.get("pct_ceiling"), "{:.1f}", "%"),
                      _td_num(r.get("speedup_vs_baseline"), "{:.2f}", "x"), _status(r)]
            out.append("<tr>" + "".join(cells) + "</tr>")
            n += 1
    out.append("</tbody></table>")
    if not n:
        return '<p class="note">no timed case</p>'
    return "".join(out)


def _verify(docs, prob: str) -> str:
    out = []
    for k, d in enumerate(docs):
        suite = [r for r in d.get("rows") or [] if r.get("problem") == prob
                 and r.get("phase") in ("verify-suite", "verify")]
        if not suite:
            continue
        by: dict = {}
        for r in suite:
            by.setdefault(r["impl"], []).append(r)
        head = f"<h4>{e(_label(d, k))} ({e(_gpu(d))})</h4>" if len(docs) > 1 else ""
        t = [head + '<table class="verify sortable"><thead><tr><th>implementation</th><th>pass</th>'
             '<th>fail</th><th>skip</th><th>first failure</th></tr></thead><tbody>']
        for impl, rs in by.items():
            cnt = [sum(r["status"] == s for r in rs) for s in ("PASS", "FAIL", "SKIP")]
            fail = next((r for r in rs if r["status"] == "FAIL"), None)
            why = f"{_case_label(fail)}: {fail.get('reason') or fail.get('kind') or ''}" if fail else ""
            t.append(f"<tr><td>{e(impl)}</td>" + "".join(f'<td class="n" data-v="{c}">{c}</td>' for c in cnt)
                     + f'<td class="{"FAIL" if fail else ""}">{e(why)}</td></tr>')
        t.append("</tbody></table>")
        out.append("".join(t))
    return "".join(out) or '<p class="note">no verify-suite rows in the run(s)</p>'


def _machine(doc: dict, k: int) -> str:
    m = doc.get("machine") or {}
    c = doc.get("ceilings") or {}
    out = [f"<div><h3>{e(_label(doc, k))}: {e(_gpu(doc))}</h3><table class=\"machine\"><tbody>"]
    for key, v in m.items():
        if isinstance(v, (dict, list)):
            continue
        out.append(f"<tr><th>{e(str(key))}</th><td>{e(str(v))}</td></tr>")
    out.append("</tbody></table>")
    rows = []
    for mix, v in (c.get("stream_bytes_per_s") or {}).items():
        rows.append((f"streaming {mix}", f"{v['per_s'] / 1e12:.3f} TB/s" if isinstance(v, dict) and v.get("per_s")
                     else str(v)))
    if c.get("copy_bytes_per_s") and not c.get("stream_bytes_per_s"):
        rows.append(("copy", f"{c['copy_bytes_per_s'] / 1e12:.3f} TB/s"))
    for dt, v in (c.get("gemm_flops_per_s") or {}).items():
        rows.append((f"torch.mm {dt} {c.get('gemm_size')}^3", f"{v / 1e12:.1f} TFLOP/s"))
    if rows:
        out.append('<table class="ceilings"><thead><tr><th>measured ceiling</th><th>value</th></tr></thead><tbody>'
                   + "".join(f"<tr><td>{e(a)}</td><td class=\"n\">{e(b)}</td></tr>" for a, b in rows)
                   + "</tbody></table>")
    else:
        out.append('<p class="note">no ceilings measured (no GPU, or --no-ceilings)</p>')
    t = doc.get("timing") or {}
    if t.get("description"):
        out.append(f'<p class="note">timing: {e(str(t["description"]))}</p>')
    out.append("</div>")
    return "".join(out)


# -- the source pages --------------------------------------------------------------------------
def counted_lines(impl) -> tuple[dict, dict, dict]:
    """({file: kernel line numbers}, {file: host line numbers}, {file: plan line numbers}) of an
    implementation's sources: the line sets ``loc.count_impl`` sums (``loc.line_sets``)."""
    from .. import loc
    kernel, host, plan, _, _ = loc.line_sets(impl)
    return kernel, host, plan


def _spans(impl) -> dict:
    """{(file as the LOC tool names it, first line): (column, unit, why)} from ``count_impl``'s
    explanation, where this checkout's LOC tool gives one."""
    from .. import loc
    try:
        res = loc.count_impl(impl, explain=True)
    except TypeError:
        return {}
    return {(sp[0], sp[1]): (sp[3], sp[4], sp[5]) for sp in res.get("spans") or []}


def _source_html(impl) -> tuple[str, dict]:
    from .. import loc
    try:
        kernel, host, plan = counted_lines(impl)
        counts = loc.count_impl(impl)
        spans = _spans(impl)
    except Exception as ex:  # a source that cannot be read today: say so on the page
        return f'<p class="note">source not available: {e(type(ex).__name__)}: {e(str(ex))}</p>', {}
    files = list(dict.fromkeys(list(kernel) + list(host) + list(plan)))
    if not files:
        return '<p class="note">no kernel source of its own (a library or the torch baseline)</p>', counts
    out = []
    for f in files:
        try:
            text = Path(f).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as ex:
            out.append(f'<p class="note">{e(str(f))}: {e(str(ex))}</p>')
            continue
        ks, hs, ps = kernel.get(f, set()), host.get(f, set()), plan.get(f, set())
        try:
            name = Path(f).resolve().relative_to(loc.REPO_ROOT.resolve()).as_posix()
        except ValueError:
            name = str(f)
        lines = []
        for i, line in enumerate(text, 1):
            cls = "l k" if i in ks else "l h" if i in hs else "l p" if i in ps else "l"
            sp = spans.get((name, i))
            tip = f' title="{e(sp[0])}: {e(sp[1])} ({e(sp[2])})"' if sp else ""
            lines.append(f'<span class="{cls}{" u" if sp else ""}" data-n="{i}"{tip}>{e(line) or " "}</span>')
        out.append(f'<details open><summary><code>{e(name)}</code>: {len(ks)} kernel, {len(hs)} host, '
                   f'{len(ps)} plan line(s) counted</summary><pre class="code">{"".join(lines)}</pre></details>')
    return "".join(out), counts


def _impl_page(docs, prob: str, impl_id: str) -> str:
    from .. import registry
    try:
        impl = registry.get(prob, impl_id)
    except Exception:
        impl = None
    if impl is None:
        src, counts = '<p class="note">this implementation is not registered in this checkout</p>', {}
    else:
        src, counts = _source_html(impl)
    recorded = next(((r.get("loc") or {}) for d in docs for r in d.get("rows") or []
                     if r.get("problem") == prob and r.get("impl") == impl_id and r.get("loc")), {})
    desc = getattr(impl, "description", "") if impl else ""
    now = ", ".join(f"{k} {counts[k]}" for k in ("kernel", "host", "plan") if counts.get(k) is not None)
    rec = ", ".join(f"{k} {recorded[k]}" for k in ("kernel", "host", "plan") if recorded.get(k) is not None)
    body = [f'<header><h1>{e(impl_id)} <small>({e(prob)})</small></h1><p>{e(desc)}</p>'
            f'<p><a href="../index.html">back to the report</a></p></header>',
            f'<p>lines of code counted now: {e(now or "-")}; as the run(s) recorded: {e(rec or "-")}. '
            f'<span class="key"><span class="k">kernel line</span><span class="h">host line</span>'
            f'<span class="p">plan line</span>uncounted lines plain; a unit\'s first line says why it '
            f'counts</span></p>',
            '<div class="src"><div class="numbers"><h2>numbers</h2>',
            _case_table(docs, prob, impl_id, table_id="impl-cases"), "</div>",
            f'<div class="source"><h2>source</h2>{src}</div></div>']
    return _page(f"{impl_id} - kernel-layers", "".join(body))


# -- the site ----------------------------------------------------------------------------------
def build_index(docs) -> str:
    probs = _problems(docs)
    sums = [_summary(d) for d in docs]
    gpus = sorted({_gpu(d) for d in docs})
    body = ['<header><h1>kernel-layers report</h1>'
            f'<p>{len(docs)} run(s) on {e(", ".join(gpus))}</p><nav>'
            + "".join(f'<a href="#{e(p)}">{e(p)}</a>' for p in probs)
            + '<a href="#machine">machine</a></nav></header>', "<h2>runs</h2>", _runs_table(docs)]
    for p in probs:
        body.append(f'<section id="{e(p)}"><h2>{e(p)}</h2><div class="charts">')
        for k, (d, s) in enumerate(zip(docs, sums)):
            if p not in s:
                continue
            title = f"{p}: {_gpu(d)} - {_label(d, k)}"
            body.append(f'<figure class="chart">{chart.svg(p, s[p]["lines"], title, f"chart-{p}-{k}")}'
                        f'<figcaption>one point per layer for its tuned default and its teaching twin; '
                        f'dashed: lines without a kernel source of their own</figcaption></figure>')
        body.append('</div><h3>headline</h3><div class="side">')
        for k, (d, s) in enumerate(zip(docs, sums)):
            if p in s:
                head = f"<h4>{e(_label(d, k))} ({e(_gpu(d))})</h4>" if len(docs) > 1 else ""
                body.append(f"<div>{head}{_headline(d, p, s[p])}</div>")
        body.append("</div><h3>per case</h3>")
        body.append(_case_table(docs, p, table_id=f"cases-{p}"))
        body.append(f"<h3>verify suite</h3>{_verify(docs, p)}</section>")
    body.append('<section id="machine"><h2>machine and ceilings</h2><div class="side">'
                + "".join(_machine(d, k) for k, d in enumerate(docs)) + "</div></section>")
    return _page("kernel-layers report", "".join(body))


def write_site(docs: list[dict], out: Path | str) -> list[Path]:
    """Write the site for these results documents into ``out`` (new, empty, or a previous
    report's folder); returns the files written."""
    if not docs:
        raise ValueError("report --html: no run given")
    out = check_target(out)
    from .. import registry
    try:
        registry.load_backends()
    except Exception:  # the sources are then shown as not registered
        pass
    tmp = Path(tempfile.mkdtemp(prefix=".report-", dir=str(out.parent if not out.exists() else out)))
    try:
        (tmp / "impl").mkdir()
        (tmp / "index.html").write_text(build_index(docs), encoding="utf-8")
        pairs = list(dict.fromkeys((r.get("problem"), r.get("impl")) for d in docs for r in d.get("rows") or []
                                   if r.get("problem") and r.get("impl")))
        for prob, impl in pairs:
            (tmp / "impl" / _slug(prob, impl)).write_text(_impl_page(docs, prob, impl), encoding="utf-8")
        out.mkdir(exist_ok=True)
        if (out / "impl").exists():
            shutil.rmtree(out / "impl")
        os.replace(tmp / "impl", out / "impl")
        os.replace(tmp / "index.html", out / "index.html")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [out / "index.html"] + sorted((out / "impl").iterdir())
