"""``python -m harness grid PROBLEM IMPL [--set KEY=VALUE ...] [--dtype D] [--format table|json]``.

The blocks-and-masks picture: the launch grid an implementation uses for one case and, per
program, the element range it covers and how many lanes its mask keeps and drops (the first and
last programs when the grid is large). The numbers come from the implementation itself through
its ``grid`` hook (``register(..., grid=fn)``, ``fn(case) -> dict``; see
docs/CONTRIBUTING-LAYERS.md)::

    {"grid": [gx, gy, gz], "block": {"BLOCK_SIZE": 1024, "num_warps": 4},
     "programs": [{"pid": [0, 0, 0], "covers": "elements 0..1023", "kept": 1024, "dropped": 0}, ...],
     "note": "optional free text"}

The helpers below build that dict from a real block size for the three usual shapes of work
(1-D blocks, one row per program, 2-D output tiles), so an adapter's hook can be one line, e.g.
``grid=lambda case: grid.blocks_1d(case.N, BLOCK_SIZE, num_warps=4)``.
"""
from __future__ import annotations

import argparse
import json

SHOW = 3  # programs shown at each end of a large grid


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _ends(count: int, show: int) -> list[int]:
    if count <= 2 * show:
        return list(range(count))
    return list(range(show)) + list(range(count - show, count))


def _pos(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    return v


def blocks_1d(n: int, block: int, show: int = SHOW, **block_info) -> dict:
    """A 1-D grid of cdiv(n, block) programs, program p covering elements p*block .. p*block+block-1
    with the lanes at or past n masked off."""
    n, block = _pos("n", n), _pos("block", block)
    count = _cdiv(n, block)
    progs = []
    for p in _ends(count, show):
        start = p * block
        kept = min(block, n - start)
        progs.append({"pid": [p, 0, 0], "covers": f"elements {start}..{start + kept - 1}",
                      "kept": kept, "dropped": block - kept})
    return {"grid": [count, 1, 1], "block": {"BLOCK_SIZE": block, **block_info}, "programs": progs,
            "total": {"programs": count, "lanes": count * block, "kept": n, "dropped": count * block - n}}


def rows(m: int, n: int, block_n: int, rows_per_program: int = 1, show: int = SHOW, **block_info) -> dict:
    """One (or ``rows_per_program``) row(s) per program; each row is swept in cdiv(n, block_n)
    chunks of block_n lanes (one chunk when block_n >= n), the lanes past n masked off."""
    m, n, block_n, rpp = _pos("m", m), _pos("n", n), _pos("block_n", block_n), _pos("rows_per_program",
                                                                                   rows_per_program)
    count = _cdiv(m, rpp)
    chunks = _cdiv(n, block_n)
    lanes_row = chunks * block_n
    progs = []
    for p in _ends(count, show):
        r0, r1 = p * rpp, min(p * rpp + rpp, m) - 1
        nrows = r1 - r0 + 1
        rows_txt = f"row {r0}" if nrows == 1 else f"rows {r0}..{r1}"
        sweep = "" if chunks == 1 else f" in {chunks} chunks of {block_n}"
        progs.append({"pid": [p, 0, 0], "covers": f"{rows_txt}, columns 0..{n - 1}{sweep}",
                      "kept": nrows * n, "dropped": rpp * lanes_row - nrows * n})
    info = {"BLOCK_N": block_n, **({"ROWS_PER_PROGRAM": rpp} if rpp != 1 else {}), **block_info}
    return {"grid": [count, 1, 1], "block": info, "programs": progs,
            "total": {"programs": count, "lanes": count * rpp * lanes_row, "kept": m * n,
                      "dropped": count * rpp * lanes_row - m * n}}


def tiles_2d(m: int, n: int, block_m: int, block_n: int, show: int = SHOW, **block_info) -> dict:
    """A [cdiv(m, block_m), cdiv(n, block_n)] grid of output tiles, program (i, j) covering rows
    i*block_m.. and columns j*block_n.., the lanes outside m x n masked off. (An implementation
    that launches a 1-D grid with grouped ordering describes its own mapping instead.)"""
    m, n, bm, bn = _pos("m", m), _pos("n", n), _pos("block_m", block_m), _pos("block_n", block_n)
    gm, gn = _cdiv(m, bm), _cdiv(n, bn)
    count = gm * gn
    progs = []
    for p in _ends(count, show):
        j, i = divmod(p, gm)  # x (the row-tile index) varies fastest, as blockIdx.x does
        r1, c1 = min(i * bm + bm, m) - 1, min(j * bn + bn, n) - 1
        kept = (r1 - i * bm + 1) * (c1 - j * bn + 1)
        progs.append({"pid": [i, j, 0], "covers": f"rows {i * bm}..{r1}, columns {j * bn}..{c1}",
                      "kept": kept, "dropped": bm * bn - kept})
    return {"grid": [gm, gn, 1], "block": {"BLOCK_M": bm, "BLOCK_N": bn, **block_info}, "programs": progs,
            "total": {"programs": count, "lanes": count * bm * bn, "kept": m * n,
                      "dropped": count * bm * bn - m * n}}


# -- command -----------------------------------------------------------------------------------
def describe(impl, case) -> dict:
    """Call the implementation's grid hook and check what it returned."""
    fn = impl.extra.get("grid")
    if fn is None:
        raise ValueError(f"grid: {impl.id} ({impl.problem}) provides no grid description; its adapter "
                         f"can register one with grid=fn(case) -> dict (docs/CONTRIBUTING-LAYERS.md)")
    if not callable(fn):
        raise ValueError(f"grid: {impl.id}'s grid hook is {type(fn).__name__}, not a callable")
    d = fn(case)
    where = f"grid: {impl.id}'s grid hook returned"
    if not isinstance(d, dict):
        raise ValueError(f"{where} {type(d).__name__}, not a dict")
    g = d.get("grid")
    if (not isinstance(g, (list, tuple)) or not 1 <= len(g) <= 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in g)):
        raise ValueError(f"{where} grid={g!r}; expected [gx, gy, gz] of non-negative integers")
    progs = d.get("programs", [])
    if not isinstance(progs, list):
        raise ValueError(f"{where} programs={type(progs).__name__}; expected a list")
    for k, p in enumerate(progs):
        if not isinstance(p, dict) or "pid" not in p:
            raise ValueError(f"{where} programs[{k}] without a 'pid'")
    if not isinstance(d.get("block", {}), dict):
        raise ValueError(f"{where} block={d.get('block')!r}; expected a dict")
    out = {"problem": impl.problem, "impl": impl.id, "case": case.to_json(),
           "grid": list(g) + [1] * (3 - len(g)), "block": dict(d.get("block", {})),
           "programs": [dict(p) for p in progs]}
    for k in ("total", "note"):
        if k in d:
            out[k] = d[k]
    return out


def render(desc: dict) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    buf = StringIO()
    con = Console(file=buf, width=160, highlight=False, color_system=None)
    gx, gy, gz = desc["grid"]
    n_prog = gx * gy * gz
    con.print(f"{desc['impl']} on {desc['problem']} {desc['case']['dtype']} "
              f"{' '.join(f'{k}={v}' for k, v in desc['case']['dims'].items())}"
              + "".join(f" {k}={v}" for k, v in sorted(desc["case"]["params"].items())))
    con.print(f"  grid = ({gx}, {gy}, {gz}) -> {n_prog:,} program(s)")
    if desc["block"]:
        con.print("  block: " + ", ".join(f"{k}={v}" for k, v in desc["block"].items()))
    if desc.get("total"):
        t = desc["total"]
        con.print("  all programs: " + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}"
                                                 for k, v in t.items()))
    if desc.get("note"):
        con.print(f"  note: {desc['note']}")
    tab = Table()
    for col, just in (("pid", "left"), ("covers", "left"), ("lanes kept", "right"),
                      ("lanes dropped", "right")):
        tab.add_column(col, justify=just)
    prev = None
    for p in desc["programs"]:
        pid = list(p["pid"]) + [0] * (3 - len(p["pid"]))
        flat = pid[0] + gx * (pid[1] + gy * pid[2]) if len(pid) == 3 else None
        if prev is not None and flat is not None and flat != prev + 1:
            tab.add_row("...", f"({flat - prev - 1:,} programs not shown)", "", "")
        prev = flat
        tab.add_row(str(tuple(pid)), str(p.get("covers", "")), _num(p.get("kept")), _num(p.get("dropped")))
    con.print(tab)
    return buf.getvalue()


def _num(v) -> str:
    return f"{v:,}" if isinstance(v, int) else ("" if v is None else str(v))


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "grid", help="launch grid of one implementation for one case, with per-program mask counts",
        description="Show the launch grid, block parameters and, for the first and last programs, "
                    "the elements each covers and the lanes its mask keeps and drops.")
    from .problems import names_help
    p.add_argument("problem", help=names_help())
    p.add_argument("impl", help="implementation id layer:name (see `python -m harness list`)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="sizes and parameters, e.g. --set N=98432")
    p.add_argument("--dtype", default=None, help="float32 | float16 | bfloat16 (default: the problem's first)")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE",
                   help="a Python file registering implementations (repeatable)")
    p.add_argument("--format", default="table", choices=("table", "json"))
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    from . import registry
    from .model import build_case

    registry.load_plugins(getattr(args, "plugin", None))
    case = build_case(args.problem, args.set, args.dtype)
    impl = registry.get(args.problem, args.impl)
    desc = describe(impl, case)
    why = impl.supports(case)
    if why:
        desc["unsupported"] = why
    if args.format == "json":
        print(json.dumps(desc, indent=2))
    else:
        out = render(desc)
        if why:
            out += f"note: {impl.id} declines this case: {why}\n"
        print(out, end="")
    return 0
