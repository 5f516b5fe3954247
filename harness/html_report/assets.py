"""The report's own CSS and JavaScript, inlined into every page (no network, no CDN)."""

CSS = """
:root { --fg: #1d232b; --dim: #6a7380; --line: #d5dae0; --bg: #ffffff; --band: #f4f6f8;
        --k: #fde9c4; --h: #d9ecfb; --p: #e3f3dc; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; padding: 0 24px 48px; }
header { border-bottom: 2px solid var(--fg); margin: 0 -24px 16px; padding: 14px 24px; background: var(--band); }
header h1 { margin: 0; font-size: 20px; }
header p { margin: 4px 0 0; color: var(--dim); }
h2 { margin: 28px 0 8px; font-size: 18px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { margin: 18px 0 6px; font-size: 15px; }
nav a { margin-right: 14px; }
a { color: #0b5cad; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: var(--band); font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort="ascending"]::after { content: " \\25B2"; }
table.sortable th[aria-sort="descending"]::after { content: " \\25BC"; }
.PASS { color: #17663a; } .FAIL { color: #b3261e; font-weight: 600; } .SKIP { color: var(--dim); }
.charts { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.chart { border: 1px solid var(--line); padding: 6px; background: #fff; margin: 0; }
.chart figcaption { font-size: 12px; color: var(--dim); margin-top: 2px; max-width: 560px; }
.side { display: flex; flex-wrap: wrap; gap: 20px; align-items: flex-start; }
.side > div { min-width: 0; }
.note { color: var(--dim); font-size: 12px; }
.src { display: grid; grid-template-columns: minmax(420px, 46%) 1fr; gap: 18px; align-items: start; }
.src .numbers { position: sticky; top: 8px; max-height: 96vh; overflow: auto; }
pre.code { margin: 0 0 14px; font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
           border: 1px solid var(--line); overflow-x: auto; background: #fff; }
pre.code span.l { display: block; white-space: pre; padding-right: 8px; }
pre.code span.l::before { content: attr(data-n); display: inline-block; width: 4.2em; color: var(--dim);
           text-align: right; padding-right: 10px; margin-right: 8px; border-right: 1px solid var(--line); }
pre.code span.k { background: var(--k); }
pre.code span.h { background: var(--h); }
pre.code span.p { background: var(--p); }
pre.code span.u { border-top: 1px dashed #b9a46a; }
.key span { padding: 0 6px; margin-right: 8px; border: 1px solid var(--line); }
.key .k { background: var(--k); } .key .h { background: var(--h); } .key .p { background: var(--p); }
details { margin: 6px 0; } summary { cursor: pointer; }
"""

JS = r"""
(function () {
  "use strict";
  function cellValue(td) {
    var v = td.getAttribute("data-v");
    if (v !== null && v !== "") { var x = parseFloat(v); if (!isNaN(x)) { return x; } }
    return td.textContent.trim().toLowerCase();
  }
  function compare(a, b) {
    var na = typeof a === "number", nb = typeof b === "number";
    if (na && nb) { return a - b; }
    if (na) { return -1; }
    if (nb) { return 1; }
    return a < b ? -1 : (a > b ? 1 : 0);
  }
  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    rows.sort(function (r1, r2) {
      return dir * compare(cellValue(r1.cells[col]), cellValue(r2.cells[col]));
    });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { c.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
    rows.forEach(function (r) { body.appendChild(r); });
  }
  function init() {
    var tables = document.querySelectorAll("table.sortable");
    Array.prototype.forEach.call(tables, function (table) {
      if (!table.tHead || !table.tBodies.length) { return; }
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
        th.setAttribute("title", "sort by this column");
        th.addEventListener("click", function () { sortBy(table, i, th); });
      });
    });
    document.documentElement.setAttribute("data-ready", "1");
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); }
  else { init(); }
})();
"""
