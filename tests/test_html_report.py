"""``report --html``: the static site's content, its bad input, and the site in a real browser
(Debian's headless chromium driven by Playwright; KL_TEST_CHROMIUM or /usr/bin/chromium; skipped,
saying why, where neither the browser nor the driver is installed - .ci/run installs both)."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from fixtures.store_support import (SMALL_COMPARE, harness, small_reference,  # noqa: F401
                                    store_url, write_run_folder)
from harness.cli import main


def _cli(capsys, *args):
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def two_gpu_site(tmp_path_factory):
    """A site of two runs: the reference H200 run (softmax and vector add) and the same rows as if
    from another GPU, 20 % slower - the charts side by side."""
    base = tmp_path_factory.mktemp("site")
    ref = small_reference(("vector_add", "softmax"))
    other = json.loads(json.dumps(ref))
    other["machine"]["gpu"] = "NVIDIA H100 80GB HBM3"
    for r in other["rows"]:
        if r.get("pct_ceiling"):
            r["pct_ceiling"] /= 1.2
    a = write_run_folder(base / "h200", ref)
    b = write_run_folder(base / "h100", other)
    out = base / "out"
    rc = main(["report", str(a), str(b), "--html", str(out)])
    assert rc == 0
    return out, ref


def test_site_content(two_gpu_site):
    out, ref = two_gpu_site
    index = (out / "index.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", index)          # nothing from the network
    assert "<script src" not in index and "<link" not in index
    assert index.count('class="loc-chart"') == 4                                # 2 problems x 2 runs
    assert "NVIDIA H200" in index and "NVIDIA H100 80GB HBM3" in index
    for cls in ("headline sortable", "cases sortable", "verify sortable", 'class="ceilings"'):
        assert cls in index
    timed = [r for r in ref["rows"] if r.get("phase") == "timed" and r["problem"] == "softmax"]
    m = re.search(r'<table class="cases sortable" id="cases-softmax".*?</table>', index, re.S)
    assert m and m.group(0).count("<tr>") == 2 * len(timed) + 1                 # header + both runs' rows
    # one page per implementation, its source with the counted lines marked as the LOC tool counts
    from harness import loc, registry
    impl = registry.get("vector_add", "triton:vector_add")
    page = (out / "impl" / "vector_add--triton-vector_add.html").read_text()
    counts = loc.count_impl(impl)
    assert page.count('class="l k') == counts["kernel"]
    assert page.count('class="l h') == counts["host"]
    assert page.count('class="l p') == (counts.get("plan") or 0)
    assert "why it counts" in page and ' u"' in page          # the LOC tool's spans, explained
    assert (out / "impl" / "vector_add--torch-vector_add.html").is_file()


def test_chart_points_are_the_summary(two_gpu_site):
    """Two labelled points per layer at most (the default and the twin) at (kernel LOC, geomean %)."""
    from harness.html_report import SUMMARY_ROLES
    from harness.html_report.chart import points
    from harness.summary import summarize
    out, ref = two_gpu_site
    s = summarize(ref["rows"], roles=SUMMARY_ROLES)["vector_add"]
    pts, libs = points(s["lines"])
    assert pts and {p["role"] for p in pts} <= {"default", "simple"}
    for p in pts:
        ln = next(x for x in s["lines"] if x["impl"] == p["impl"])
        assert (p["x"], p["y"]) == (ln["loc_kernel"], ln["geomean_pct_ceiling"])
    assert libs and sorted(lb["impl"] for lb in libs) == sorted(
        ln["impl"] for ln in s["lines"] if ln["role"] in ("baseline", "library"))
    layers = [p["layer"] for p in pts]
    assert all(layers.count(x) <= 2 for x in layers)


def test_report_target_that_is_a_file(tmp_path, capsys):
    a = write_run_folder(tmp_path / "a", small_reference())
    target = tmp_path / "site.html"
    target.write_text("keep me")
    rc, out, err = _cli(capsys, "report", a, "--html", target)
    assert rc == 2 and "is not a folder" in err and len(err.strip().splitlines()) == 1
    assert target.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "site.html"]


def test_report_of_an_unknown_run_writes_nothing(tmp_path, capsys):
    a = write_run_folder(tmp_path / "a", small_reference())
    rc, out, err = _cli(capsys, "report", a, "7", "--html", tmp_path / "site", "--store", tmp_path / "none.sqlite")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "site").exists() and not (tmp_path / "none.sqlite").exists()


# -- in a real browser -------------------------------------------------------------------------
def _chromium() -> str:
    exe = os.environ.get("KL_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe or not Path(exe).exists():
        pytest.skip("no chromium browser installed (.ci/run installs Debian's chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("the playwright driver is not installed (the [test] extra)")
    return exe


def _not_blank(png: bytes) -> bool:
    from PIL import Image
    import io
    im = Image.open(io.BytesIO(png)).convert("L")
    lo, hi = im.getextrema()
    colours = len(im.getcolors(maxcolors=1 << 16) or [])
    return hi - lo > 100 and colours > 20


def check_in_browser(index: Path, shot: Path, n_charts: int, sort_by: str) -> None:
    from playwright.sync_api import sync_playwright
    exe = _chromium()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            problems: list[str] = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda ex: problems.append(f"page error: {ex}"))
            page.on("request", lambda r: problems.append(f"network: {r.url}")
                    if not r.url.startswith(("file:", "data:", "about:")) else None)
            page.goto(index.as_uri())
            page.wait_for_selector("html[data-ready='1']", timeout=30000)
            # every chart renders: an SVG with a real box and its points inside the plot
            charts = page.query_selector_all("svg.loc-chart")
            assert len(charts) == n_charts
            for c in charts:
                box = c.bounding_box()
                assert box and box["width"] > 300 and box["height"] > 200
                marks = c.query_selector_all(".pt")
                assert marks, "a chart without points"
                for m in marks:
                    b = m.bounding_box()
                    assert b and b["width"] > 0 and b["x"] >= box["x"] and b["x"] <= box["x"] + box["width"]
            # sorting: click a header of a per-case table, twice
            table = page.query_selector("table.cases")
            heads = [h.inner_text().strip() for h in table.query_selector_all("thead th")]
            col = heads.index(sort_by)

            def column():
                vals = table.eval_on_selector_all(
                    "tbody tr", f"rs => rs.map(r => [r.cells[{col}].getAttribute('data-v'), "
                                f"r.cells[{col}].textContent.trim().toLowerCase()])")
                return [float(v) if v else t for v, t in vals]
            before = column()
            th = table.query_selector_all("thead th")[col]
            th.click()
            asc = column()
            assert th.get_attribute("aria-sort") == "ascending"
            th.click()
            desc = column()
            assert th.get_attribute("aria-sort") == "descending"
            assert sorted(before) == asc and sorted(before, reverse=True) == desc
            assert len(set(before)) > 1, "a column with one value tests no sorting"
            # an implementation's page opens from the table too
            png = page.screenshot(full_page=False)
            shot.write_bytes(png)
            assert _not_blank(png), "the screenshot is blank"
            link = page.query_selector("table.headline a[href*='triton']")
            link.click()
            page.wait_for_selector("html[data-ready='1']", timeout=30000)
            assert page.query_selector_all("pre.code span.l.k"), "no counted kernel line marked"
            assert not problems, problems
        finally:
            browser.close()


def test_site_in_chromium(two_gpu_site):
    out, _ = two_gpu_site
    check_in_browser(out / "index.html", out / "screenshot.png", n_charts=4, sort_by="median")


@pytest.mark.slow
def test_two_compares_report_in_chromium(store_url, tmp_path):
    """The acceptance path: compare twice into a store (SQLite, PostgreSQL), `report --html` of both
    runs by id, opened in the browser."""
    _chromium()
    for k in range(2):
        r = harness(*SMALL_COMPARE, "--store", store_url, "--out", tmp_path / f"out{k}", cwd=tmp_path)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    r = harness("runs", "--store", store_url, "--format", "json", cwd=tmp_path)
    ids = [str(x["id"]) for x in json.loads(r.stdout)]
    assert len(ids) == 2
    r = harness("report", *ids, "--store", store_url, "--html", tmp_path / "site", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    check_in_browser(tmp_path / "site" / "index.html", tmp_path / "shot.png", n_charts=2, sort_by="case")


def test_rows_without_line_counts_get_the_current_counts():
    """A verify run records no line counts: the chart takes the current sources' counts."""
    from harness import loc, registry
    from harness.html_report import _summary
    doc = small_reference()
    for r in doc["rows"]:
        r.pop("loc", None)
    lines = {ln["impl"]: ln for ln in _summary(doc)["vector_add"]["lines"]}
    want = loc.count_impl(registry.get("vector_add", "triton:vector_add"))
    assert lines["triton:vector_add"]["loc_kernel"] == want["kernel"]
    assert lines["torch:vector_add"]["loc_kernel"] is None
