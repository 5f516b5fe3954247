"""``python -m harness report RESULTS``: tables from a results file, and the README's figures.

Every figure the README quotes sits in a generated block::

    <!-- report docs/results/<run>/results.json --section summary -->
    ...what `python -m harness report docs/results/<run>/results.json --section summary` prints...
    <!-- /report -->

``--update-readme README.md`` rewrites every block from the JSON it names; ``--check-readme`` (and
the test suite) fails when a block differs from what its JSON gives, or when a figure (%, GB/s,
TB/s, TFLOP/s, us) appears in the README outside a block.
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"<!-- report (?P<args>[^>]*?) -->\n(?P<body>.*?)<!-- /report -->", re.S)
FIGURE = re.compile(r"\d+(?:\.\d+)?\s*(?:%|GB/s|TB/s|TFLOP/s|µs|us\b)")
SECTIONS = ("summary", "cases", "verify", "machine", "loc", "wall")


def load(path: str | Path) -> dict:
    import json
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    if not p.is_absolute() and not p.exists():
        p = ROOT / p
    if not p.is_file():
        raise FileNotFoundError(f"report: no results file at {path}")
    return json.loads(p.read_text())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="report", add_help=False)
    p.add_argument("results")
    p.add_argument("--section", choices=SECTIONS, default="summary")
    p.add_argument("--problem", action="append")
    p.add_argument("--impl", action="append")
    p.add_argument("--roles", default="baseline,default,simple")
    return p


def render(doc: dict, section: str = "summary", problems=None, impls=None,
           roles: str = "baseline,default,simple") -> str:
    """Markdown for one section of a results document (deterministic: the README test compares)."""
    from . import summary as S
    from .report import _case_label, _fmt_time, _sig

    if section == "wall":
        from .wall import render as render_wall
        return render_wall(doc.get("wall"))
    rows = [dict(r) for r in doc["rows"] if (not problems or r["problem"] in problems)
            and (not impls or r["impl"] in impls)]
    _count_now(rows)
    role_set = None if roles == "all" else tuple(x.strip() for x in roles.split(","))
    if role_set is not None and not impls:
        rows = [r for r in rows if r.get("role", "variant") in role_set]
    if section == "machine":
        m, c = doc.get("machine") or {}, doc.get("ceilings") or {}
        out = [f"- GPU: {m.get('gpu') or 'none'}; driver {m.get('driver', '-')}; torch {m.get('torch')}, "
               f"triton {m.get('triton')}, nvidia-cutlass-dsl {m.get('cutlass_dsl')}; run {doc.get('created')}",
               f"- command: `{doc.get('command')}`"]
        for mix, v in (c.get("stream_bytes_per_s") or {}).items():
            out.append(f"- measured {mix} streaming ceiling: {v['per_s'] / 1e12:.2f} TB/s")
        if c.get("copy_bytes_per_s") and not c.get("stream_bytes_per_s"):
            out.append(f"- measured copy ceiling: {c['copy_bytes_per_s'] / 1e12:.2f} TB/s")
        for dt, v in (c.get("gemm_flops_per_s") or {}).items():
            out.append(f"- measured {dt} torch.mm {c.get('gemm_size')}^3: {v / 1e12:.0f} TFLOP/s")
        return "\n".join(out) + "\n"
    if section == "loc":
        # lines of code of every registered implementation (of the run's problems), counted now
        # from the sources by the tool's one rule: a property of the code, not of the run
        from . import loc, registry
        from .summary import ROLE_ORDER
        probs = problems or list(dict.fromkeys(r["problem"] for r in doc["rows"]))
        out = ["| problem | implementation | role | kernel | host |", "|---|---|---|---|---|"]
        for i in sorted(registry.all_impls(), key=lambda i: (probs.index(i.problem) if i.problem in probs else 99,
                                                            registry.layer_info(i.layer).order,
                                                            ROLE_ORDER.get(i.role, 9), i.name)):
            if i.problem not in probs or (impls and i.id not in impls) or (role_set and i.role not in role_set):
                continue
            c = loc.count_impl(i)
            if c.get("kernel") is not None:
                out.append(f"| {i.problem} | {i.id} | {i.role} | {c['kernel']} | {c['host']} |")
        return "\n".join(out) + "\n"
    if section == "summary":
        return "\n".join(S.render_md(S.summarize(rows, roles=role_set or tuple(S.ROLE_ORDER)))).rstrip() + "\n"
    if section == "verify":
        suite = [r for r in rows if r.get("phase") in ("verify-suite", "verify")]
        by: dict[str, list] = {}
        for r in suite:
            by.setdefault(f"{r['problem']} {r['impl']}", []).append(r)
        out = ["| problem, implementation | pass | fail | skip |", "|---|---|---|---|"]
        for k, rs in by.items():
            out.append(f"| {k} | " + " | ".join(str(sum(r["status"] == s for r in rs))
                                                for s in ("PASS", "FAIL", "SKIP")) + " |")
        return "\n".join(out) + "\n"
    out = ["| problem | case | implementation | median | rate | % ceiling | % datasheet | vs eager | status |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("phase", "timed") != "timed":
            continue
        tm = r.get("time") or {}
        unit = r.get("metric") or ("TFLOP/s" if r["problem"] == "gemm_epilogue" else "GB/s")
        val = r.get("tflops") if unit == "TFLOP/s" else r.get("gbps")
        out.append(f"| {r['problem']} | {_case_label(r)} | {r['impl']} | {_fmt_time(tm.get('median_s'))} | "
                   f"{_sig(val)} {unit if val else ''} | {_sig(r.get('pct_ceiling'), '%')} | {_sig(r.get('pct_datasheet'), '%')} | "
                   + (f"{r['speedup_vs_baseline']:.2f}x" if r.get("speedup_vs_baseline") else "-")
                   + f" | {r['status']}{(' ' + r['kind']) if r['status'] != 'PASS' and r.get('kind') else ''} |")
    return "\n".join(out) + "\n"


def _count_now(rows) -> None:
    """Lines of code are a property of the code, not of the run: where the implementation exists
    today, its count comes from the current sources (the tool's one rule); others keep the count
    their run recorded."""
    from . import loc, registry
    cache: dict = {}
    for r in rows:
        k = (r["problem"], r["impl"])
        if k not in cache:
            try:
                c = loc.count_impl(registry.get(*k))
                cache[k] = {"kernel": c.get("kernel"), "host": c.get("host"), "plan": c.get("plan")}
            except Exception:
                cache[k] = None
        if cache[k] is not None:
            r["loc"] = cache[k]


def render_block(args_text: str) -> str:
    a = _parser().parse_args(shlex.split(args_text))
    return render(load(a.results), a.section, a.problem, a.impl, a.roles)


def readme_problems(text: str) -> list[str]:
    """What is wrong with the README's figures: stale blocks, figures outside blocks."""
    bad = []
    for m in BLOCK.finditer(text):
        try:
            want = render_block(m.group("args"))
        except Exception as e:
            bad.append(f"block `{m.group('args')}`: {type(e).__name__}: {e}")
            continue
        if m.group("body") != want:
            bad.append(f"block `{m.group('args')}` differs from what its JSON gives "
                       f"(run `python -m harness report --update-readme README.md`)")
    outside = BLOCK.sub("", text)
    outside = re.sub(r"```.*?```", "", outside, flags=re.S)
    for line in outside.splitlines():
        for f in FIGURE.findall(line):
            bad.append(f"figure {f!r} outside a generated block: {line.strip()[:100]}")
    return bad


def update_readme(path: Path) -> int:
    text = path.read_text()
    new = BLOCK.sub(lambda m: f"<!-- report {m.group('args')} -->\n{render_block(m.group('args'))}"
                              f"<!-- /report -->", text)
    path.write_text(new)
    return sum(1 for _ in BLOCK.finditer(new))


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("report", help="tables from a results file; the README's generated figures",
                              description="Render a section of a results.json as markdown, or rewrite / "
                                          "check the README's generated blocks.")
    p.add_argument("results", nargs="*", metavar="RUN",
                   help="a results folder or results.json (with --html: run ids from `runs` or run folders)")
    p.add_argument("--html", metavar="OUT", help="write a self-contained static site of the run(s) into OUT/")
    p.add_argument("--store", metavar="URL", default=None, help="the results store the run ids are in "
                   "(default results/runs.sqlite; postgresql://user@host/db)")
    p.add_argument("--section", choices=SECTIONS, default="summary")
    p.add_argument("--problem", action="append")
    p.add_argument("--impl", action="append")
    p.add_argument("--roles", default="baseline,default,simple", help="roles to show, or all")
    p.add_argument("--update-readme", metavar="README", help="rewrite every generated block of this file")
    p.add_argument("--check-readme", metavar="README", help="exit 1 if a block is stale or a figure is "
                                                            "outside a block")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    if args.update_readme:
        n = update_readme(Path(args.update_readme))
        print(f"{n} block(s) written")
        return 0
    if args.check_readme:
        bad = readme_problems(Path(args.check_readme).read_text())
        for b in bad:
            print(b, file=sys.stderr)
        return 1 if bad else 0
    if not args.results:
        raise ValueError("report: give a results folder or file (or --update-readme / --check-readme)")
    if args.html:
        from .html_report import check_target, write_site
        from .store import resolve
        check_target(args.html)
        docs = [resolve(r, args.store) for r in args.results]
        paths = write_site(docs, args.html)
        print(f"report: {len(paths)} page(s) written: {Path(args.html) / 'index.html'}")
        return 0
    if len(args.results) > 1:
        raise ValueError("report: one results folder or file (several runs need --html OUT)")
    print(render(load(args.results[0]), args.section, args.problem, args.impl, args.roles), end="")
    return 0
