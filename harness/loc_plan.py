"""A default's lines of code, derived from its planner (docs/DESIGN.md, "Lines of code").

A layer registers its default with ``sources=harness.planned(dispatch.plan, problem, common)``:
``PlannedSources``. Its Sources are not listed: ``plan(problem, facts)`` runs over every case of
every suite (``harness.meta_inputs.case_facts``, the H200 the reference run used) under a line
tracer, and

* the Sources are the ``Plan.sources`` of those plans (the kernels the default can launch and the
  host entries that bind them), then ``common`` (the layer's launcher: what binds every plan);
* the plan column is the lines those ``plan`` calls ran (``plan_lines``): each statement that ran,
  whole (its continuation lines too), the headers of the blocks it ran in, the functions' ``def``
  lines, and the module-level tables and classes those statements read. A switched-off rule, an
  unreachable branch, a planner function no case calls: never run, never counted;
* the planner's units (``planner_units``: the functions ``plan`` reaches, and those that ran) are
  the plan column's alone: the host reach stops at them.

``harness.loc`` does the counting; this module only runs the planner and reads what ran.
"""
from __future__ import annotations

import ast
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from .loc import PY_SUFFIXES, REPO_ROOT, TOOL_PACKAGES, _module, _Policy, _resolve

__all__ = ["PlannedSources", "planned", "plan_lines", "planner_units"]


def planned(plan, problem: str, common=()) -> "PlannedSources":
    """A default's Sources derived from its layer's ``plan`` (see the module docstring)."""
    if not callable(plan):
        raise TypeError(f"plan: expected the layer's plan(problem, facts) function, got {plan!r}")
    from . import problems
    problems.get(problem)   # ValueError naming an unknown problem
    for s in common:
        if not hasattr(s, "path") or not hasattr(s, "host"):
            raise TypeError(f"common: expected Source objects, got {s!r}")
    return PlannedSources(plan, problem, tuple(common))


def _project_file(filename: str) -> Path | None:
    """The project file a code object comes from (None: a library's, or the harness's tools)."""
    if not filename or filename.startswith("<"):   # code made at run time (exec, a template)
        return None
    try:
        p = Path(filename).resolve()
    except (OSError, ValueError):
        return None
    root = REPO_ROOT.resolve()
    if root not in p.parents or p.suffix != ".py" or not p.is_file():
        return None
    if any((root / t) in p.parents for t in TOOL_PACKAGES):
        return None
    return p


class PlannedSources(Sequence):
    """The Sources of a default, found by running its planner over the suites' cases (lazily, once
    per process): a sequence of ``Source`` like any implementation's, plus what the run found:
    ``choices`` (variant -> cases), ``ran`` ({file: line numbers executed}), ``plan`` and
    ``problem``."""

    def __init__(self, plan, problem: str, common: tuple):
        self.plan, self.problem, self.common = plan, problem, common
        self._sources: tuple | None = None
        self.choices: Counter = Counter()
        self.ran: dict[Path, set[int]] = {}

    def _resolve(self) -> tuple:
        if self._sources is None:
            from dataclasses import replace

            from . import problems
            from .meta_inputs import case_facts
            from .problems import SUITES
            cases = [c for s in SUITES for c in problems.get(self.problem).cases(s)]
            plans, self.ran = _traced(lambda: [self.plan(self.problem, case_facts(c)) for c in cases])
            srcs: dict = {}
            for p in plans:
                self.choices[p.variant] += 1
                for s in p.sources:
                    srcs.setdefault(replace(s, variant=p.variant), None)
            self._sources = tuple(srcs) + tuple(self.common)
        return self._sources

    def __getitem__(self, i):
        return self._resolve()[i]

    def __len__(self) -> int:
        return len(self._resolve())

    def __add__(self, other) -> list:
        """The resolved Sources and ``other``'s, as a plain list (e.g. a candidate's: the default's
        and a kernel of its own)."""
        return list(self._resolve()) + list(other)

    def __radd__(self, other) -> list:
        return list(other) + list(self._resolve())

    @property
    def variants(self) -> dict:
        """The layer's ``VARIANTS[problem]`` (the words the planner chooses among)."""
        mod = sys.modules.get(getattr(self.plan, "__module__", ""), None)
        return dict(getattr(mod, "VARIANTS", {}).get(self.problem, {}))

    def trace_key(self, layer: str) -> list:
        """What the count depends on beyond the files it reads: the lines that ran, and the
        kernels the layer's other ids name."""
        self._resolve()
        return [sorted([str(f), sorted(ls)] for f, ls in self.ran.items()),
                sorted([str(f), k] for f, k in _layer_kernels(layer))]

    def derived(self, layer: str) -> dict:
        """What the count needs beyond the Sources: the plan column's lines (what the planner
        ran), their explanation, and the policy of the reach -- the planner's units and the
        kernels of the layer's other ids are no host code; the files of variants the planner
        never chose count nowhere."""
        self._resolve()
        plan, spans = plan_lines(self.ran)
        chosen = {_resolve(s.path, REPO_ROOT) for s in self}
        dead = {_resolve(s.path, REPO_ROOT) for w, srcs in self.variants.items() if w not in self.choices
                for s in srcs} - chosen
        barrier = set(planner_units(self.plan, self.ran)) | _layer_kernels(layer)
        return {"plan": plan, "spans": spans, "policy": _Policy(frozenset(barrier), frozenset(dead))}


def _layer_kernels(layer: str) -> set:
    """(file, name) of every kernel entry point a registered implementation (or candidate) of
    ``layer`` names: the host reach of a default never counts one (the default's own are kernel
    lines; another variant's count nowhere in it)."""
    from . import registry
    out = set()
    for i in registry.all_impls() + registry.candidates():
        if i.layer != layer or isinstance(i.sources, PlannedSources):
            continue
        for s in i.sources:
            if s.kernels and s.path.endswith(PY_SUFFIXES):
                out |= {(_resolve(s.path, REPO_ROOT), k) for k in s.kernels}
    return out


def _importing(frame, base) -> bool:
    """``frame`` runs under a module's import (a ``<module>`` frame between it and ``base``): code
    that runs once per process, whenever the module is first imported, not per call of the
    planner (counting it would make the count depend on what the process imported before)."""
    while frame is not None and frame is not base:
        if frame.f_code.co_name == "<module>":
            return True
        frame = frame.f_back
    return False


def _traced(fn):
    """(fn(), {project file: line numbers executed while it ran}), import-time code left out."""
    ran: dict[Path, set[int]] = {}
    files: dict[str, Path | None] = {}
    base = sys._getframe()

    def local(frame, event, arg):
        if event == "line":
            ran.setdefault(files[frame.f_code.co_filename], set()).add(frame.f_lineno)
        return local

    def glob(frame, event, arg):
        name = frame.f_code.co_filename
        if name not in files:
            files[name] = _project_file(name)
        return None if files[name] is None or _importing(frame, base) else local

    old = sys.gettrace()
    sys.settrace(glob)
    try:
        out = fn()
    finally:
        sys.settrace(old)
    return out, ran


# -- what ran, as whole statements --------------------------------------------------------------
def _statement_lines(stmt: ast.stmt, ran: set[int], out: set[int]) -> bool:
    """Add the lines of ``stmt`` that a run of these lines counts: a simple statement whole; a
    block's header (an ``if`` and its test, a ``for``, a ``def``) with the parts of its body that
    ran, and not at all when none did (a rule whose branch is never taken counts nowhere, its test
    included). Returns whether any of it ran."""
    bodies = [getattr(stmt, f, None) for f in ("body", "orelse", "finalbody")]
    bodies = [b for b in bodies if isinstance(b, list) and b and isinstance(b[0], ast.stmt)]
    handlers = getattr(stmt, "handlers", None) or []
    if not bodies and not handlers:
        lines = set(range(stmt.lineno, stmt.end_lineno + 1))
        if lines & ran:
            out |= lines
            return True
        return False
    first_child = min(b[0].lineno for b in bodies + [h.body for h in handlers])
    decos = [d.lineno for d in getattr(stmt, "decorator_list", [])]
    header = set(range(min([stmt.lineno] + decos), first_child))
    any_ran = False   # a header counts with the part of its block that ran: an untaken branch, its test too
    for b in bodies:
        part = False
        for s in b:
            part = _statement_lines(s, ran, out) or part
        if part and b is getattr(stmt, "orelse", None) and not isinstance(b[0], ast.If):
            out.update(range(stmt.body[-1].end_lineno + 1, b[0].lineno))   # the "else:" line
        elif part and b is getattr(stmt, "finalbody", None):
            out.add(b[0].lineno - 1)
        any_ran = any_ran or part
    for h in handlers:
        part = False
        for s in h.body:
            part = _statement_lines(s, ran, out) or part
        if part:
            out.update(range(h.lineno, h.body[0].lineno))
            any_ran = True
    if any_ran:
        out |= header
    return any_ran


def _refs_that_ran(mod, u, got: set[int]) -> list:
    """The units referenced from the statements of unit ``u`` that ran (lines ``got``); names bound
    inside the unit shadow the module's tables."""
    local = {n.arg for n in ast.walk(u.node) if isinstance(n, ast.arg)} | \
        {n.id for n in ast.walk(u.node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} | \
        {a.asname or a.name.split(".")[0] for n in ast.walk(u.node) if isinstance(n, (ast.Import, ast.ImportFrom))
         for a in n.names}
    out = []
    for node in ast.walk(u.node):
        if getattr(node, "lineno", None) not in got:
            continue
        if isinstance(node, ast.Name) and node.id in local:
            continue
        r = mod._ref(node, u.cls)
        if r is None or r == u.name or r in out:
            continue
        out.append(r)
    return out


def _calls_source(node) -> bool:
    return any(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "Source"
               for n in ast.walk(node))


def _declares_sources(mod, unit) -> bool:
    """Whether a table declares ``Source`` objects (``VARIANTS``: the files and entry points the
    LOC counter reads, directly or through a helper of its module that makes them): a declaration
    for the tools, which counts nowhere, as the adapters' Source tables never did."""
    if _calls_source(unit.node):
        return True
    names = {n.func.id for n in ast.walk(unit.node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return any(n in mod.units and not mod.units[n].is_table and _calls_source(mod.units[n].node) for n in names)


def plan_lines(ran: dict[Path, set[int]]) -> tuple[dict[Path, set[int]], list]:
    """({file: counted plan lines}, spans) from the lines that ran: each function that ran counted
    by its statements that ran, plus every module-level table or class those statements read
    (in any project file). Spans: (file, first, last, unit, why) for ``loc --explain``."""
    out: dict[Path, set[int]] = {}
    spans: list = []
    tables: list = []
    for path, lines in ran.items():
        mod = _module(path)
        for name, u in mod.units.items():
            if u.is_table or u.is_class or not isinstance(u.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            got: set[int] = set()
            if _statement_lines(u.node, lines, got):
                got = (got & mod.code_lines) - mod.dead()[0]
                out.setdefault(path, set()).update(got)
                spans.append((path, u.first, u.last, name, "ran for the suites' cases"))
                tables += [(path, name, r) for r in _refs_that_ran(mod, u, got)]
    for path, reader, ref in tables:
        tp, tn = (path, ref) if isinstance(ref, str) else ref
        tu = _module(tp).units.get(tn)
        if tu is None or not (tu.is_table or tu.is_class):
            continue
        mod = _module(tp)
        if _declares_sources(mod, tu):
            continue
        lines = mod._lines_of([tn])
        if tu.is_class:   # its fields and class-level statements: its methods count as they ran
            lines -= {n for m, mu in mod.units.items() if mu.cls == tn for n in range(mu.first, mu.last + 1)}
        new = lines - out.get(tp, set())
        if new:
            out.setdefault(tp, set()).update(new)
            kind = "class" if tu.is_class else "table"
            spans.append((tp, tu.first, tu.last, tn, f"{kind} read by {reader}, which ran"))
    return out, spans


def planner_units(plan, ran: dict[Path, set[int]]) -> frozenset:
    """(file, unit) of the planner: the functions ``plan`` calls, transitively, in the project's
    files (not through tables or classes), and every function that ran while it planned. The host
    reach never counts them."""
    path = _project_file(plan.__code__.co_filename)
    units: set = set()
    todo = [(path, plan.__name__)] if path is not None else []
    while todo:
        node = todo.pop()
        if node in units:
            continue
        units.add(node)
        mod = _module(node[0])
        for r in mod._refs(node[1], set()):
            f, name = (node[0], r) if isinstance(r, str) else r
            u = _module(f).units.get(name)
            if u is not None and not u.is_table and not u.is_class:
                todo.append((f, name))
    for p, lines in ran.items():
        for name, u in _module(p).units.items():
            if not u.is_table and not u.is_class and any(u.first <= n <= u.last for n in lines):
                units.add((p, name))
    return frozenset(units)
