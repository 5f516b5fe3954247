"""Pictures of a results JSON (matplotlib, Agg, PNG): ``make_plots(results, outdir) -> [paths]``.

- ``bandwidth_vector_add.png``, ``bandwidth_softmax.png``: effective GB/s vs N per implementation
  (log-2 x axis), with the run's measured copy ceiling and the datasheet bandwidth as lines;
- ``tflops_gemm_epilogue.png``: TFLOP/s vs size per implementation, with the measured vendor GEMM;
- ``loc_vs_ceiling.png``: kernel LOC vs % of the measured ceiling, one point per implementation
  (the median over its timed cases), coloured by layer and labelled; library implementations
  without kernel source of their own are drawn as a labelled horizontal line;
- ``roofline.png``: attained FLOP/s vs intensity F/Q of every timed row under the roofs
  min(P, I·BW) of the run's ceilings (or the datasheet of its GPU).

Only PASS rows with a time are drawn. Missing fields (None, absent) are tolerated: a plot with
nothing to draw is skipped, never an error.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

_EXTRA_COLORS = ["#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#ff7f0e"]
MARKERS = {"vector_add": "o", "softmax": "s", "gemm_epilogue": "^"}
PROBLEM_TITLES = {"vector_add": "vector add (out = x + y)", "softmax": "row softmax",
                  "gemm_epilogue": "GEMM + bias + activation", "attention": "attention forward"}



def _plot_series(ax, series, marker: str, ms: float) -> None:
    """One line per (layer, label) series, sorted by x; a layer's colour, a line style per series."""
    styles = ["-", "--", "-.", ":"]
    per_layer = defaultdict(int)
    for (layer, label), pts in sorted(series.items()):
        pts.sort()
        ls = styles[per_layer[layer] % len(styles)]
        per_layer[layer] += 1
        ax.plot([p[0] for p in pts], [p[1] for p in pts], ls, marker=marker, ms=ms,
                color=layer_color(layer), label=label)

def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def layer_color(layer: str) -> str:
    """The colour the layer's adapter declares (registry.describe_layer), else a stable pick."""
    from .registry import layer_info
    c = layer_info(layer).colour
    return c or _EXTRA_COLORS[sum(map(ord, str(layer))) % len(_EXTRA_COLORS)]


def timed_rows(results: dict) -> list[dict]:
    """PASS rows with a positive median time, with ``_t`` (seconds) attached."""
    out = []
    for r in results.get("rows") or []:
        if not isinstance(r, dict) or r.get("status") != "PASS":
            continue
        t = (r.get("time") or {}).get("median_s") if isinstance(r.get("time"), dict) else None
        if not isinstance(t, (int, float)) or not t > 0:
            continue
        case = r.get("case") or {}
        if not isinstance(case.get("dims"), dict):
            continue
        out.append({**r, "_t": float(t)})
    return out


def _gbps(r) -> float | None:
    if isinstance(r.get("gbps"), (int, float)):
        return float(r["gbps"])
    q = r.get("traffic_bytes")
    return q / r["_t"] / 1e9 if isinstance(q, (int, float)) and q > 0 else None


def _tflops(r) -> float | None:
    if isinstance(r.get("tflops"), (int, float)):
        return float(r["tflops"])
    f = r.get("flops")
    return f / r["_t"] / 1e12 if isinstance(f, (int, float)) and f > 0 else None


def _gpu_label(results: dict) -> str:
    m = results.get("machine") or {}
    return (m.get("gpu") if isinstance(m, dict) else None) or "unknown GPU"


def _datasheet(results: dict):
    from .model import gpu_from_device_name

    return gpu_from_device_name(_gpu_label(results))


def _ceil(results: dict) -> dict:
    c = results.get("ceilings")
    return c if isinstance(c, dict) else {}


def _series_key(r, many_dtypes: bool, extra_dims: tuple[str, ...]) -> str:
    case = r["case"]
    label = r.get("impl") or f"{r.get('layer')}:{r.get('name')}"
    bits = []
    if many_dtypes:
        bits.append(case.get("dtype", "?"))
    bits += [f"{d}={case['dims'][d]}" for d in extra_dims if d in case["dims"]]
    bits += [f"{k}={v}" for k, v in sorted((case.get("params") or {}).items())]
    return label + (f" ({', '.join(bits)})" if bits else "")


def _finish(fig, ax, path: Path, results: dict, legend_cols: int = 1) -> Path:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        # outside the axes, to the right: a legend never hides data
        ax.legend(fontsize=7, ncol=1 if len(handles) <= 22 else 2, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, framealpha=0.9)
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)
    fig.text(0.99, 0.005, f"{_gpu_label(results)} · {results.get('created', '')}".strip(" ·"),
             ha="right", va="bottom", fontsize=7, color="#555555")
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    _plt().close(fig)
    return path


def _spread_labels(ax, pts: list[tuple[float, float, str]], fontsize: float = 8) -> None:
    """Label points so that no two labels overlap: each label starts beside its point and is
    pushed down (in screen space) below the previous one when they would touch; a thin line
    joins a moved label to its point."""
    if not pts:
        return
    fig = ax.figure
    fig.canvas.draw()
    tr = ax.transData
    h = fontsize * 1.35 * fig.dpi / 72.0
    placed: list[tuple[float, float, float]] = []   # (x0, x1, y) of labels in pixels
    for x, y, text in sorted(pts, key=lambda p: -p[1]):
        px, py = tr.transform((x, y))
        w = len(text) * fontsize * 0.6 * fig.dpi / 72.0
        lx, ly = px + 6, py
        for _ in range(200):
            clash = [q for q in placed if not (lx + w < q[0] or lx > q[1]) and abs(ly - q[2]) < h]
            if not clash:
                break
            ly = min(q[2] for q in clash) - h
        placed.append((lx, lx + w, ly))
        dx, dy = (lx - px) * 72.0 / fig.dpi, (ly - py) * 72.0 / fig.dpi
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy - fontsize / 3),
                    fontsize=fontsize, arrowprops=(dict(arrowstyle="-", lw=0.4, color="#777777")
                                                   if abs(dy) > 1 else None))


# -- bandwidth / TFLOP/s vs size ---------------------------------------------------------------
def plot_bandwidth(results: dict, problem: str, outdir: Path) -> Path | None:
    rows = [r for r in timed_rows(results) if r.get("problem") == problem and _gbps(r) is not None
            and "N" in r["case"]["dims"]]
    if not rows:
        return None
    plt = _plt()
    many = len({r["case"].get("dtype") for r in rows}) > 1
    # other sizes (softmax's M) split the series only where they vary for the same N
    extra = tuple(d for d in ("M",) if len({r["case"]["dims"].get(d) for r in rows}) > 1
                  and _varies_at_fixed_n(rows, d))
    series = defaultdict(list)
    for r in rows:
        series[(r.get("layer", ""), _series_key(r, many, extra))].append((r["case"]["dims"]["N"], _gbps(r)))
    fig, ax = plt.subplots(figsize=(9, 5.5))
    _plot_series(ax, series, MARKERS.get(problem, "o"), 4)
    c = _ceil(results).get("copy_bytes_per_s")
    if isinstance(c, (int, float)) and c > 0:
        ax.axhline(c / 1e9, color="black", lw=1, ls=":", label=f"measured copy ceiling {c / 1e12:.2f} TB/s")
    ds = _datasheet(results)
    if ds is not None:
        ax.axhline(ds.bw / 1e9, color="#b22222", lw=1, ls=(0, (6, 3)),
                   label=f"{ds.name} datasheet {ds.bw / 1e12:.2f} TB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (elements per row)" if problem == "softmax" else "N (elements)")
    ax.set_ylabel("effective bandwidth (GB/s, decimal)")
    defn = {"vector_add": "3·N·s bytes", "softmax": "2·M·N·s bytes"}.get(problem, "traffic bytes")
    ax.set_title(f"{PROBLEM_TITLES.get(problem, problem)}: effective bandwidth vs N "
                 f"({defn} / median time)", fontsize=11)
    ax.set_ylim(bottom=0)
    return _finish(fig, ax, outdir / f"bandwidth_{problem}.png", results)


def _varies_at_fixed_n(rows, d) -> bool:
    seen = defaultdict(set)
    for r in rows:
        seen[(r.get("impl"), r["case"]["dims"].get("N"))].add(r["case"]["dims"].get(d))
    return any(len(v) > 1 for v in seen.values())


def _gemm_size(dims: dict) -> float:
    m, n, k = dims.get("M", 0), dims.get("N", 0), dims.get("K", 0)
    return float(m) if m == n == k else (m * n * k) ** (1 / 3)


def plot_gemm(results: dict, outdir: Path, problem: str = "gemm_epilogue") -> Path | None:
    rows = [r for r in timed_rows(results) if r.get("problem") == problem and _tflops(r) is not None]
    if not rows:
        return None
    plt = _plt()
    many = len({r["case"].get("dtype") for r in rows}) > 1
    series = defaultdict(list)
    nonsquare = False
    for r in rows:
        d = r["case"]["dims"]
        nonsquare |= not (d.get("M") == d.get("N") == d.get("K"))
        series[(r.get("layer", ""), _series_key(r, many, ()))].append((_gemm_size(d), _tflops(r)))
    fig, ax = plt.subplots(figsize=(9, 5.5))
    _plot_series(ax, series, "^", 5)
    g = _ceil(results).get("gemm_flops_per_s") or {}
    for k, (dt, v) in enumerate(sorted(g.items()) if isinstance(g, dict) else []):
        if isinstance(v, (int, float)) and v > 0:
            ax.axhline(v / 1e12, color="black", lw=1, ls=[":", "-."][k % 2],
                       label=f"measured vendor GEMM {dt}: {v / 1e12:.0f} TFLOP/s")
    ds = _datasheet(results)
    if ds is not None:
        ax.axhline(ds.tensor16 / 1e12, color="#b22222", lw=1, ls=(0, (6, 3)),
                   label=f"{ds.name} datasheet dense fp16/bf16 {ds.tensor16 / 1e12:.0f} TFLOP/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size M = N = K" + (" (non-square: (M·N·K)^(1/3))" if nonsquare else ""))
    ax.set_ylabel("TFLOP/s (2·M·N·K / median time)")
    ax.set_title(f"{PROBLEM_TITLES.get(problem, problem)}: throughput vs size", fontsize=11)
    ax.set_ylim(bottom=0)
    return _finish(fig, ax, outdir / f"tflops_{problem}.png", results)


# -- LOC vs % of ceiling -----------------------------------------------------------------------
def _loc(r) -> int | None:
    loc = r.get("loc")
    v = loc.get("kernel") if isinstance(loc, dict) else None
    return v if isinstance(v, int) and v > 0 else None


def _loc_axis(problem: str) -> tuple[str, str]:
    """(row key, y label) of a problem's LOC panel: % of the vendor kernel at the same shape where
    the problem names one that solves the problem itself (attention: cuDNN), else % of the
    measured ceiling (copy for memory-bound problems, torch.mm 8192^3 for GEMM)."""
    from . import problems
    try:
        p = problems.get(problem)
    except Exception:
        p = None
    vendor = getattr(p, "vendor_name", None)
    if vendor:
        return "pct_vendor_same_shape", f"% of {vendor} at the same shape (median over its cases)"
    metric = "GEMM" if getattr(p, "metric", "") == "TFLOP/s" else "copy"
    return "pct_ceiling", f"% of measured {metric} ceiling (median over its cases)"


def plot_loc(results: dict, outdir: Path) -> Path | None:
    rows = [r for r in timed_rows(results) if isinstance(r.get(_loc_axis(r.get("problem", ""))[0]), (int, float))]
    if not rows:
        return None
    plt = _plt()
    problems_present = [p for p in ("vector_add", "softmax", "gemm_epilogue")
                        if any(r.get("problem") == p for r in rows)]
    problems_present += sorted({r.get("problem") for r in rows} - set(problems_present))
    fig, axes = plt.subplots(1, len(problems_present), figsize=(max(7.0, 5.2 * len(problems_present)), 5),
                             squeeze=False)
    for ax, prob in zip(axes[0], problems_present):
        by_impl = defaultdict(list)
        for r in rows:
            if r.get("problem") == prob:
                by_impl[(r.get("layer", ""), r.get("impl", "?"))].append(r)
        key, ylabel = _loc_axis(prob)
        xs_all = []
        library = []
        placed = []
        for (layer, impl), rs in sorted(by_impl.items()):
            pct = statistics.median(r[key] for r in rs)
            loc = _loc(rs[0])
            if loc is None:
                library.append((layer, impl, pct))
                continue
            xs_all.append(loc)
            placed.append((loc, pct, layer, impl))
        xmax = max(xs_all, default=1) * 1.35 + 5
        for loc, pct, layer, impl in placed:
            ax.scatter([loc], [pct], s=55, color=layer_color(layer), edgecolor="black", lw=0.5, zorder=3,
                       marker=MARKERS.get(prob, "o"))
        top = max([r[key] for r in rows if r.get("problem") == prob] + [100])
        ax.set_ylim(0, top * 1.12)
        ax.set_xlim(0, xmax)
        _spread_labels(ax, [(loc, pct, impl) for loc, pct, _, impl in placed])
        for layer in sorted({k[0] for k in by_impl if k[1] not in {l[1] for l in library}}):
            ax.scatter([], [], color=layer_color(layer), edgecolor="black", lw=0.5, label=layer,
                       marker=MARKERS.get(prob, "o"))
        for k, (layer, impl, pct) in enumerate(library):
            ax.axhline(pct, color=layer_color(layer), lw=1.2, ls=[":", "--", "-."][k % 3], zorder=1,
                       label=f"{impl}: {pct:.0f}% (library, no kernel LOC)")
        ax.set_title(f"{PROBLEM_TITLES.get(prob, prob)}", fontsize=10)
        ax.set_xlabel("kernel lines of code (device code, counted by the tool)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, framealpha=0.9)
    fig.suptitle("kernel LOC vs % of the measured ceiling\n(one point per implementation)", fontsize=11)
    fig.text(0.99, 0.005, f"{_gpu_label(results)} · {results.get('created', '')}".strip(" ·"),
             ha="right", va="bottom", fontsize=7, color="#555555")
    fig.tight_layout()
    path = outdir / "loc_vs_ceiling.png"
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


# -- roofline ----------------------------------------------------------------------------------
def plot_roofline(results: dict, outdir: Path) -> Path | None:
    rows = []
    for r in timed_rows(results):
        f, q = r.get("flops"), r.get("traffic_bytes")
        if isinstance(f, (int, float)) and isinstance(q, (int, float)) and f > 0 and q > 0:
            rows.append((r, f / q, f / r["_t"]))
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 6))
    ceil = _ceil(results)
    bw = ceil.get("copy_bytes_per_s")
    ds = _datasheet(results)
    bw_src = "measured copy"
    if not (isinstance(bw, (int, float)) and bw > 0):
        bw, bw_src = (ds.bw, f"{ds.name} datasheet") if ds else (None, "")
    peaks = {}
    g = ceil.get("gemm_flops_per_s") or {}
    for dt, v in (g.items() if isinstance(g, dict) else []):
        if isinstance(v, (int, float)) and v > 0:
            peaks[f"measured {dt} GEMM"] = v
    if ds is not None:
        peaks.setdefault(f"{ds.name} fp32 datasheet", ds.fp32)
        if not g:
            peaks[f"{ds.name} fp16/bf16 tensor datasheet"] = ds.tensor16
    imin = min(i for _, i, _ in rows) / 4
    imax = max(i for _, i, _ in rows) * 4
    if bw:
        imax = max(imax, max(peaks.values(), default=0) / bw * 4)
        xs = [imin * (imax / imin) ** (k / 200) for k in range(201)]
        for k, (label, p) in enumerate(sorted(peaks.items(), key=lambda kv: -kv[1])):
            ax.plot(xs, [min(p, x * bw) / 1e12 for x in xs], color="black", lw=1.2 - 0.3 * min(k, 2),
                    ls=["-", "--", ":"][k % 3], label=f"roof: {label} {p / 1e12:.0f} TFLOP/s")
        if not peaks:
            ax.plot(xs, [x * bw / 1e12 for x in xs], color="black", lw=1.2, label="memory roof")
        ridge = max(peaks.values(), default=imax * bw) / bw
        xt = max(imin * 2, ridge / 300)
        ax.text(xt, xt * bw / 1e12 * 1.6, f"memory roof: BW = {bw / 1e12:.2f} TB/s ({bw_src})",
                fontsize=8, color="#333333", ha="left", va="bottom")
    for layer in sorted({r.get("layer", "") for r, _, _ in rows}):
        pts = [(i, p) for r, i, p in rows if r.get("layer", "") == layer]
        for prob in sorted({r.get("problem") for r, _, _ in rows if r.get("layer", "") == layer}):
            pp = [(i, p) for r, i, p in rows if r.get("layer", "") == layer and r.get("problem") == prob]
            ax.scatter([i for i, _ in pp], [p / 1e12 for _, p in pp], s=28, color=layer_color(layer),
                       marker=MARKERS.get(prob, "o"), edgecolor="black", lw=0.4, zorder=3,
                       label=f"{layer} · {prob}")
        del pts
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity I = F / Q (FLOP per byte, fewest bytes moved)")
    ax.set_ylabel("attained TFLOP/s (F / median time)")
    ax.set_title("roofline: every timed PASS row under the run's ceilings", fontsize=11)
    return _finish(fig, ax, outdir / "roofline.png", results, legend_cols=2)


# -- without timings (CPU mode): what the run does know -----------------------------------------
def plot_loc_bars(results: dict, outdir: Path) -> Path | None:
    """Kernel and host lines of code of every implementation, one panel per problem."""
    per: dict[str, dict[str, tuple]] = defaultdict(dict)
    for r in results.get("rows") or []:
        loc = r.get("loc") or {}
        if isinstance(loc.get("kernel"), int):
            per[r["problem"]][r["impl"]] = (r.get("layer", ""), loc["kernel"], loc.get("host") or 0)
    if not per:
        return None
    plt = _plt()
    probs = list(per)
    fig, axes = plt.subplots(1, len(probs), figsize=(5.5 * len(probs), 4.5), squeeze=False)
    for ax, prob in zip(axes[0], probs):
        items = sorted(per[prob].items(), key=lambda kv: (kv[1][0], kv[0]))
        ys = range(len(items))
        ax.barh(ys, [v[1] for _, v in items], color=[layer_color(v[0]) for _, v in items],
                edgecolor="black", lw=0.4, label="kernel")
        ax.barh(ys, [v[2] for _, v in items], left=[v[1] for _, v in items], color="#dddddd",
                edgecolor="black", lw=0.4, label="host (launch)")
        ax.set_yticks(list(ys), [k for k, _ in items], fontsize=7)
        ax.set_xlabel("lines of code (counted by the tool)")
        ax.set_title(PROBLEM_TITLES.get(prob, prob), fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("lines of code per implementation (kernel in the layer's colour, host in grey)", fontsize=11)
    fig.tight_layout()
    path = outdir / "loc.png"
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_model(results: dict, outdir: Path) -> Path | None:
    """The roofline model's ideal time per case (a named GPU's datasheet; no measurement)."""
    pts = defaultdict(dict)
    gpu = None
    for r in results.get("rows") or []:
        if r.get("model_ideal_s") and r.get("phase", "timed") == "timed":
            label = "x".join(str(v) for v in r["case"]["dims"].values()) + f" {r['case']['dtype'][:4]}"
            pts[r["problem"]][label] = r["model_ideal_s"]
            gpu = gpu or r.get("model_gpu")
    if not pts:
        return None
    plt = _plt()
    probs = list(pts)
    fig, axes = plt.subplots(1, len(probs), figsize=(5.5 * len(probs), 4.5), squeeze=False)
    for ax, prob in zip(axes[0], probs):
        items = list(pts[prob].items())
        ax.barh(range(len(items)), [v * 1e6 for _, v in items], color="#999999", edgecolor="black", lw=0.4)
        ax.set_yticks(range(len(items)), [k for k, _ in items], fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("ideal time (us): max(F / peak, Q / bandwidth)")
        ax.set_title(PROBLEM_TITLES.get(prob, prob), fontsize=10)
    fig.suptitle(f"roofline model on the {gpu or 'named'} datasheet (modelled, not measured)", fontsize=11)
    fig.tight_layout()
    path = outdir / "model.png"
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def make_plots(results: dict, outdir: Path) -> list[Path]:
    """Write every plot there is data for into ``outdir``; returns the PNG paths. Without timed
    rows (the CPU mode) that is the line counts and the model's ideal times."""
    if not isinstance(results, dict):
        raise ValueError("results: expected the results JSON object")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    made = [plot_bandwidth(results, "vector_add", outdir), plot_bandwidth(results, "softmax", outdir),
            plot_gemm(results, outdir), plot_loc(results, outdir), plot_roofline(results, outdir)]
    if not timed_rows(results):
        made += [plot_loc_bars(results, outdir), plot_model(results, outdir)]
    return [p for p in made if p is not None]


__all__ = ["make_plots", "timed_rows", "layer_color"]
