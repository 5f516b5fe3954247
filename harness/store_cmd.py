"""``python -m harness runs | diff | import | export``: the results store's commands.

- ``runs``: every run in the store (id, date, GPU, command, rows, PASS/FAIL/SKIP);
- ``diff RUN_A RUN_B``: per implementation x case in both runs, the time ratio B/A beside both
  runs' spread (IQR relative to the median), flagged where the change exceeds the measured noise;
  status changes; a summary per layer; ``--fail-on-regression PCT`` exits 1 where a flagged
  slow-down exceeds PCT % (or a row that passed in A fails in B);
- ``import DIR...``: old run folders (``results.json``, or ``run.json`` + ``rows.jsonl``) into the
  store; importing a folder again changes nothing;
- ``export RUN --format json|csv``: a run as ``results.json`` / ``results.csv`` text.

RUN is a run id from ``runs`` or a run folder (read directly, no import needed). Every command takes
``--store`` (default ``results/runs.sqlite``; ``postgresql://user@host/db``).

The noise rule of ``diff``: each run's relative spread is its IQR over its median
(``(q3 - q1) / median`` of the timed samples); a change is flagged when it exceeds the larger of the
two (slower: ``B/A - 1 > noise``; faster: ``A/B - 1 > noise``); anything inside is "within noise".
"""
from __future__ import annotations

import argparse
import math
import sys

from .store import StoreError, describe, import_folder, open_store, resolve, run_folders

STORE_HELP = ("the results store: an SQLite file (default results/runs.sqlite under the current "
              "folder) or postgresql://user@host/db")


def add_store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, metavar="URL", help=STORE_HELP)


def _pct(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"--fail-on-regression must be >= 0, got {text!r}")
    return v


def add_parser(sub) -> None:
    # verify and compare write their runs into the store: they take --store too
    for name in ("verify", "compare"):
        p = sub.choices.get(name)
        if p is not None and not any("--store" in a.option_strings for a in p._actions):
            add_store_arg(p)
    p = sub.add_parser("runs", help="the runs in the results store")
    add_store_arg(p)
    p.add_argument("--gpu", help="only the runs on this GPU (as `runs` shows it)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("diff", help="what changed between two runs (time ratios against the noise)")
    p.add_argument("run_a", metavar="RUN_A", help="a run id (see `runs`) or a run folder")
    p.add_argument("run_b", metavar="RUN_B", help="a run id (see `runs`) or a run folder")
    add_store_arg(p)
    p.add_argument("--problem", action="append", help="only this problem (repeatable)")
    p.add_argument("--fail-on-regression", type=_pct, metavar="PCT", default=None,
                   help="exit 1 when a flagged slow-down exceeds PCT %% (or a PASS became a FAIL)")
    p.add_argument("--all-rows", action="store_true", help="list rows within the noise too")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("import", help="old run folders into the results store (idempotent)")
    p.add_argument("dirs", nargs="+", metavar="DIR", help="a run folder, or a folder of run folders")
    add_store_arg(p)
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("export", help="a run as results.json or results.csv text")
    p.add_argument("run", metavar="RUN", help="a run id (see `runs`) or a run folder")
    add_store_arg(p)
    p.add_argument("--format", choices=("json", "csv"), default="json")
    p.add_argument("--out", metavar="FILE", help="write here (a new file) instead of stdout")
    p.set_defaults(func=cmd_export)


# -- runs --------------------------------------------------------------------------------------
def cmd_runs(args, console) -> int:
    with open_store(args.store, create=False) as st:
        runs = st.list_runs(gpu=args.gpu)
    if args.format == "json":
        from .jsonsafe import dumps
        print(dumps(runs, indent=1))
        return 0
    from rich.table import Table
    t = Table(title=f"runs in {describe(args.store)}")
    for c in ("id", "date", "kind", "state", "GPU", "host", "command", "rows", "P/F/S"):
        t.add_column(c, overflow="fold", justify="right" if c in ("id", "rows") else "left")
    for r in runs:
        t.add_row(str(r["id"]), (r["created"] or "-").replace("T", " ")[:19], r["kind"], r["state"],
                  r["gpu"] or (r["device"] or "cpu"), r["hostname"] or "-", (r["command"] or "-"),
                  str(r["rows"]), f"{r['PASS']}/{r['FAIL']}/{r['SKIP']}")
    console.print(t)
    if not runs:
        console.print("no runs recorded" + (f" on {args.gpu}" if args.gpu else ""))
    return 0


# -- diff --------------------------------------------------------------------------------------
def _spread(t: dict) -> float | None:
    """Relative IQR of a row's time (None without samples)."""
    m = t.get("median_s")
    if not m:
        return None
    iqr = t.get("iqr_s")
    if iqr is None and t.get("q1_s") is not None and t.get("q3_s") is not None:
        iqr = t["q3_s"] - t["q1_s"]
    return None if iqr is None else abs(iqr) / m


def _timed(doc: dict, problems) -> dict:
    out = {}
    for r in doc.get("rows", []):
        if r.get("phase", "timed") != "timed" or (problems and r.get("problem") not in problems):
            continue
        out[(r["problem"], r["impl"], (r.get("case") or {}).get("id"))] = r
    return out


def diff_docs(a: dict, b: dict, problems=None) -> dict:
    """The comparison of two results documents (see the module docstring for the noise rule)."""
    ra, rb = _timed(a, problems), _timed(b, problems)
    keys = [k for k in ra if k in rb]
    lines = []
    for k in keys:
        x, y = ra[k], rb[k]
        tx, ty = x.get("time") or {}, y.get("time") or {}
        line = {"problem": k[0], "impl": k[1], "case": k[2], "layer": y.get("layer") or x.get("layer"),
                "role": y.get("role") or x.get("role"), "status_a": x.get("status"), "status_b": y.get("status"),
                "median_a_s": tx.get("median_s"), "median_b_s": ty.get("median_s"),
                "spread_a": _spread(tx), "spread_b": _spread(ty), "ratio": None, "flag": None}
        if x.get("status") != y.get("status"):
            line["flag"] = ("broke" if x.get("status") == "PASS" and y.get("status") == "FAIL" else
                            "fixed" if y.get("status") == "PASS" and x.get("status") == "FAIL" else "status")
        if line["median_a_s"] and line["median_b_s"] and x.get("status") == "PASS" and y.get("status") == "PASS":
            ratio = line["median_b_s"] / line["median_a_s"]
            line["ratio"] = ratio
            noise = max(line["spread_a"] or 0.0, line["spread_b"] or 0.0)
            line["noise"] = noise
            if ratio - 1 > noise:
                line["flag"] = "slower"
            elif 1 / ratio - 1 > noise:
                line["flag"] = "faster"
            else:
                line["flag"] = "within noise"
        lines.append(line)
    layers: dict = {}
    for ln in lines:
        s = layers.setdefault(ln["layer"] or "?", {"rows": 0, "timed": 0, "slower": 0, "faster": 0,
                                                   "within noise": 0, "broke": 0, "fixed": 0, "status": 0,
                                                   "_logs": []})
        s["rows"] += 1
        if ln["ratio"]:
            s["timed"] += 1
            s["_logs"].append(math.log(ln["ratio"]))
        if ln["flag"]:
            s[ln["flag"]] += 1
    for s in layers.values():
        logs = s.pop("_logs")
        s["geomean_ratio"] = math.exp(sum(logs) / len(logs)) if logs else None
    only_a = sorted(f"{k[1]} {k[2]}" for k in ra if k not in rb)
    only_b = sorted(f"{k[1]} {k[2]}" for k in rb if k not in ra)

    def who(d):
        m = d.get("machine") or {}
        sr = d.get("store_run") or {}
        return {"label": sr.get("label"), "id": sr.get("id"), "gpu": m.get("gpu"), "hostname": m.get("hostname"),
                "created": d.get("created"), "command": d.get("command"),
                "versions": {k: m.get(k) for k in ("torch", "triton", "cutlass_dsl", "driver") if m.get(k)}}
    wa, wb = who(a), who(b)
    return {"a": wa, "b": wb, "same_gpu": wa["gpu"] == wb["gpu"], "rows": lines, "layers": layers,
            "only_a": only_a, "only_b": only_b}


def regressions(d: dict, pct: float) -> list[dict]:
    return [ln for ln in d["rows"] if ln["flag"] == "broke"
            or (ln["flag"] == "slower" and (ln["ratio"] - 1) * 100 > pct)]


def _f(x, fmt="{:.3f}") -> str:
    return "-" if x is None else fmt.format(x)


def cmd_diff(args, console) -> int:
    a = resolve(args.run_a, args.store)
    b = resolve(args.run_b, args.store)
    d = diff_docs(a, b, args.problem)
    bad = regressions(d, args.fail_on_regression) if args.fail_on_regression is not None else []
    if args.format == "json":
        from .jsonsafe import dumps
        print(dumps(dict(d, regressions=bad), indent=1))
    else:
        from rich.table import Table
        for side in ("a", "b"):
            w = d[side]
            vers = ", ".join(f"{k} {v}" for k, v in w["versions"].items())
            console.print(f"{side.upper()}: {w['label']}: {w['gpu'] or 'no GPU'} on {w['hostname'] or '?'}, "
                          f"{w['created']}; {vers}\n   {w['command']}")
        if not d["same_gpu"]:
            console.print(f"[yellow]different GPUs: the ratios are {d['b']['gpu'] or 'no GPU'} against "
                          f"{d['a']['gpu'] or 'no GPU'}[/yellow]")
        shown = [ln for ln in d["rows"] if args.all_rows or ln["flag"] not in (None, "within noise")]
        if shown:
            t = Table(title="rows that changed (ratio = time B / time A; spread = IQR / median)")
            for c in ("problem", "implementation", "case", "A", "B", "ratio", "spread A", "spread B", "flag"):
                t.add_column(c, overflow="fold")
            for ln in shown:
                t.add_row(ln["problem"], ln["impl"], ln["case"] or "-",
                          _ms(ln["median_a_s"], ln["status_a"]), _ms(ln["median_b_s"], ln["status_b"]),
                          _f(ln["ratio"]), _f(ln["spread_a"], "{:.1%}"), _f(ln["spread_b"], "{:.1%}"),
                          ln["flag"] or "")
            console.print(t)
        t = Table(title="per layer (geomean ratio over the rows timed in both)")
        for c in ("layer", "rows in both", "timed", "geomean B/A", "slower", "faster", "within noise",
                  "PASS->FAIL", "FAIL->PASS"):
            t.add_column(c)
        for layer, s in sorted(d["layers"].items()):
            t.add_row(layer, str(s["rows"]), str(s["timed"]), _f(s["geomean_ratio"]), str(s["slower"]),
                      str(s["faster"]), str(s["within noise"]), str(s["broke"]), str(s["fixed"]))
        console.print(t)
        if not d["rows"]:
            console.print("no timed case in both runs")
        elif not any(ln["ratio"] for ln in d["rows"]):
            console.print("no row timed in both runs (a run without a GPU times nothing): statuses compared")
        if d["only_a"] or d["only_b"]:
            console.print(f"{len(d['only_a'])} row(s) only in A, {len(d['only_b'])} only in B")
        if args.fail_on_regression is not None:
            console.print(f"{len(bad)} regression(s) beyond {args.fail_on_regression:g}% and the noise")
    return 1 if bad else 0


def _ms(s, status) -> str:
    if not s:
        return status or "-"
    return f"{s * 1e6:.2f} us" if status == "PASS" else f"{s * 1e6:.2f} us {status}"


# -- import / export ---------------------------------------------------------------------------
def cmd_import(args, console) -> int:
    from .store import folder_doc, parse_url
    parse_url(args.store)      # a malformed URL is named first
    folders = run_folders(args.dirs)
    if not folders:
        raise StoreError(f"import: no run folder (results.json, or run.json + rows.jsonl) under "
                         f"{' '.join(args.dirs)}")
    for f in folders:          # every folder readable before anything is written
        folder_doc(f)
    total, new = 0, 0
    with open_store(args.store) as st:
        for f in folders:
            run_id, n, created = import_folder(st, f)
            total += n
            new += created
            print(f"run {run_id}: {f} ({n} rows){'' if created else ' - already in the store'}")
    print(f"{len(folders)} run folder(s), {total} rows; {new} new run(s) in {describe(args.store)}")
    return 0


def cmd_export(args, console) -> int:
    from pathlib import Path
    doc = resolve(args.run, args.store)
    if args.out and Path(args.out).exists():
        raise StoreError(f"export --out: {args.out} exists (give a new file)")
    if args.format == "json":
        from .jsonsafe import dumps
        text = dumps(doc, indent=1) + "\n"
    else:
        from .report import to_csv
        text = to_csv(doc["rows"])
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0
