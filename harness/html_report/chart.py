"""The LOC vs % of ceiling chart as inline SVG, drawn here (no plotting library, no script).

One chart per problem and run: x = kernel lines of code (counted by the tool, as the run recorded
them), y = the geometric mean of % of the measured ceiling over the cases every line timed (the
headline summary's figure). Two labelled points per layer - the tuned default (filled circle) and
the teaching twin (hollow square) - and every line without a kernel source of its own (torch, a
library) as a dashed horizontal line at its %. A run that timed nothing (no GPU) draws its points
on the x axis, hollow, and says so; a run without line counts (``verify``) gets the current
sources' counts.
"""
from __future__ import annotations

import html
import math

W, H = 560, 360
ML, MR, MT, MB = 56, 150, 46, 46   # margins: the right one holds the library lines' labels

_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
            "#7f7f7f", "#bcbd22")


def layer_colour(layer: str) -> str:
    try:
        from ..registry import layer_info
        c = layer_info(layer).colour
    except Exception:
        c = None
    return c or _PALETTE[sum(map(ord, str(layer))) % len(_PALETTE)]


def _nice_ticks(hi: float, n: int = 5) -> list[float]:
    if hi <= 0:
        return [0.0]
    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw), default=raw)
    k = 0
    out = []
    while k * step <= hi * 1.0001:
        out.append(k * step)
        k += 1
    return out


def _fmt_tick(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:g}"


def points(summary_lines: list[dict]) -> tuple[list[dict], list[dict]]:
    """(points, library lines) of one problem's summary lines."""
    pts, libs = [], []
    for ln in summary_lines:
        y = ln.get("geomean_pct_ceiling")
        if ln.get("loc_kernel") is None or ln.get("role") == "library":
            if ln.get("role") in ("baseline", "default", "simple", "library"):
                libs.append({"impl": ln["impl"], "layer": ln["layer"], "y": y})
            continue
        if ln.get("role") not in ("default", "simple"):
            continue
        pts.append({"impl": ln["impl"], "layer": ln["layer"], "role": ln["role"], "x": ln["loc_kernel"],
                    "host": ln.get("loc_host"), "y": y})
    return pts, libs


class _Frame:
    """The plot area: data -> pixel coordinates."""

    def __init__(self, xmax: float, ymax: float):
        self.xmax, self.ymax = xmax, ymax
        self.pw, self.ph = W - ML - MR, H - MT - MB

    def X(self, v):
        return ML + self.pw * v / self.xmax

    def Y(self, v):
        return MT + self.ph * (1 - v / self.ymax)


def _axes(f: _Frame, timed: bool) -> list[str]:
    X, Y, pw, ph = f.X, f.Y, f.pw, f.ph
    out = []
    for t in _nice_ticks(f.xmax):
        out.append(f'<line x1="{X(t):.1f}" y1="{MT}" x2="{X(t):.1f}" y2="{MT + ph}" stroke="#eceff2"/>'
                   f'<text x="{X(t):.1f}" y="{MT + ph + 14}" font-size="10" text-anchor="middle" '
                   f'fill="#555">{_fmt_tick(t)}</text>')
    for t in _nice_ticks(f.ymax):
        out.append(f'<line x1="{ML}" y1="{Y(t):.1f}" x2="{ML + pw}" y2="{Y(t):.1f}" stroke="#eceff2"/>'
                   f'<text x="{ML - 5}" y="{Y(t) + 3:.1f}" font-size="10" text-anchor="end" '
                   f'fill="#555">{_fmt_tick(t)}</text>')
    out.append(f'<rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
    out.append(f'<text x="{ML + pw / 2}" y="{H - 8}" font-size="11" text-anchor="middle">kernel lines of '
               f'code (counted by the tool)</text>')
    out.append(f'<text transform="translate(14 {MT + ph / 2}) rotate(-90)" font-size="11" '
               f'text-anchor="middle">% of measured ceiling (geomean)</text>')
    if not timed:
        out.append(f'<text x="{ML + pw / 2}" y="{MT + ph / 2}" font-size="12" text-anchor="middle" '
                   f'fill="#888">not timed in this run (verify only, or no GPU): lines of code</text>')
    return out


def _library_lines(f: _Frame, libs: list[dict]) -> list[str]:
    e, out = html.escape, []
    for k, lb in enumerate(libs):
        if lb["y"] is None:
            continue
        c = layer_colour(lb["layer"])
        y = f.Y(lb["y"])
        out.append(f'<g class="lib" data-impl="{e(lb["impl"])}"><line x1="{ML}" y1="{y:.1f}" x2="{ML + f.pw}" '
                   f'y2="{y:.1f}" stroke="{c}" stroke-width="1.4" stroke-dasharray="{6 - 2 * (k % 2)} 3"/>'
                   f'<text x="{ML + f.pw + 4}" y="{y + 3:.1f}" font-size="10" fill="{c}">'
                   f'{e(lb["impl"])} {lb["y"]:.0f}%</text><title>{e(lb["impl"])}: {lb["y"]:.1f}% '
                   f'(no kernel source of its own)</title></g>')
    return out


def _point(f: _Frame, p: dict, placed: list[tuple[float, float, float]]) -> str:
    """One implementation's mark and label; the label moves up past labels already ``placed``."""
    e = html.escape
    c = layer_colour(p["layer"])
    cx, cy = f.X(p["x"]), f.Y(p["y"] if p["y"] is not None else 0)
    twin = p["role"] == "simple"
    label = f'{p["layer"]} {"twin" if twin else "default"}'
    tip = (f'{p["impl"]} ({"teaching twin" if twin else "tuned default"}): {p["x"]} kernel lines'
           + (f', {p["host"]} host' if p["host"] is not None else "")
           + (f'; {p["y"]:.1f}% of ceiling' if p["y"] is not None else "; not timed"))
    fill = "none" if (twin or p["y"] is None) else c
    if twin:
        mark = (f'<rect class="pt" x="{cx - 5:.1f}" y="{cy - 5:.1f}" width="10" height="10" fill="{fill}" '
                f'stroke="{c}" stroke-width="2"/>')
    else:
        mark = (f'<circle class="pt" cx="{cx:.1f}" cy="{cy:.1f}" r="5.5" fill="{fill}" stroke="{c}" '
                f'stroke-width="2"/>')
    anchor = "end" if cx > ML + f.pw - 80 else "start"
    lx = cx - 6 if anchor == "end" else cx + 6
    width = 5.6 * len(label)          # about, at font-size 10
    x0, x1 = (lx - width, lx) if anchor == "end" else (lx, lx + width)
    ly = cy - 8
    while any(abs(ly - py) < 11 and x0 < q1 and q0 < x1 for q0, q1, py in placed):
        ly -= 11
    placed.append((x0, x1, ly))
    return (f'<g class="point" data-impl="{e(p["impl"])}" data-role="{e(p["role"])}">{mark}'
            f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="10" text-anchor="{anchor}" fill="{c}">'
            f'{e(label)}</text><title>{e(tip)}</title></g>')


def _key(f: _Frame) -> str:
    """The key, between the title and the plot."""
    ky = 32
    kx = ML + f.pw - 250
    return (f'<g class="key"><circle cx="{kx + 5}" cy="{ky}" r="4.5" fill="#555"/>'
            f'<text x="{kx + 13}" y="{ky + 3}" font-size="10">tuned default</text>'
            f'<rect x="{kx + 86}" y="{ky - 4.5}" width="9" height="9" fill="none" stroke="#555" '
            f'stroke-width="2"/><text x="{kx + 99}" y="{ky + 3}" font-size="10">teaching twin</text>'
            f'<line x1="{kx + 172}" y1="{ky}" x2="{kx + 186}" y2="{ky}" stroke="#555" '
            f'stroke-dasharray="4 2"/><text x="{kx + 190}" y="{ky + 3}" font-size="10">torch / library'
            f'</text></g>')


def svg(problem: str, summary_lines: list[dict], title: str, chart_id: str) -> str:
    pts, libs = points(summary_lines)
    timed = any(p["y"] is not None for p in pts) or any(lb["y"] is not None for lb in libs)
    f = _Frame(max([p["x"] for p in pts] + [10]) * 1.15,
               max([p["y"] or 0 for p in pts] + [lb["y"] or 0 for lb in libs] + [100]) * 1.08)
    e = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="loc-chart" id="{e(chart_id)}" '
           f'data-problem="{e(problem)}" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" '
           f'aria-label="{e(title)}">',
           f'<rect x="0" y="0" width="{W}" height="{H}" fill="#ffffff"/>',
           f'<text x="{ML}" y="18" font-size="13" font-weight="600">{e(title)}</text>']
    out += _axes(f, timed)
    out += _library_lines(f, libs)
    placed: list[tuple[float, float, float]] = []   # labels: x from, x to, baseline
    out += [_point(f, p, placed) for p in sorted(pts, key=lambda p: (p["x"], p["y"] or 0))]
    out.append(_key(f))
    out.append("</svg>")
    return "".join(out)
