"""Planning a run: which implementations, on which cases, in which tasks.

A *task* is one case with the implementations to run on it (a worker verifies each, and in a
timed task times them interleaved). ``select`` applies the selectors; ``plan_cases`` turns a suite
or a ``--set`` case into cases; ``make_tasks`` pairs them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .registry import ROLES

# What ``compare`` runs unless told otherwise: each layer's default implementation beside the
# torch baseline (the headline question). ``--roles`` or ``--impl`` widen it.
COMPARE_ROLES = ("baseline", "default")


class PlanError(ValueError):
    """Selectors that name nothing or something unknown (the CLI's one-line error, exit 2)."""


@dataclass
class Selection:
    problems: list[str]
    layer: str | None = None
    impls: list[str] | None = None
    roles: tuple[str, ...] | None = None   # None: every role


def parse_roles(text: str | None, default: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if text is None:
        return default
    if text.strip() == "all":
        return None
    roles = tuple(r.strip() for r in text.split(",") if r.strip())
    bad = [r for r in roles if r not in ROLES]
    if bad or not roles:
        raise PlanError(f"--roles: {', '.join(bad) or repr(text)} is not a role; choose from "
                        f"{', '.join(ROLES)} or all")
    return roles


def select(sel: Selection) -> list:
    """The implementations the selectors name (roles apply unless ``--impl`` names them)."""
    from . import registry

    impls = []
    try:
        for name in sel.problems or [None]:
            impls += registry.select(problem=name, layer=sel.layer, impl=sel.impls)
    except ValueError as e:
        raise PlanError(str(e)) from None
    if sel.roles is not None and not sel.impls:
        impls = [i for i in impls if i.role in sel.roles]
    if not impls:
        raise PlanError("no implementation matches the selectors (see `python -m harness list`)")
    return impls


def parse_sets(problem, sets: list[str], dtype: str | None):
    """One case from ``--set KEY=VALUE`` items; a key given twice is an error."""
    kw: dict[str, str] = {}
    for s in sets:
        if "=" not in s:
            raise PlanError(f"--set: expected KEY=VALUE, got {s!r}")
        k, v = (t.strip() for t in s.split("=", 1))
        if not k:
            raise PlanError(f"--set: expected KEY=VALUE, got {s!r}")
        if k in kw:
            raise PlanError(f"--set: {k} given twice ({k}={kw[k]} and {k}={v})")
        kw[k] = v
    if dtype:
        kw["dtype"] = dtype
    try:
        return problem.case(**kw)
    except ValueError as e:
        raise PlanError(str(e)) from None


def plan_cases(problem_names: list[str], suite: str, dtypes: list[str] | None, sets: list[str]):
    """[(problem, [cases])] for a suite (or the one ``--set`` case)."""
    from . import problems
    from .case import dtype_name
    from .problems import SUITES

    suites = [s.strip() for s in suite.split(",") if s.strip()]
    bad = [s for s in suites if s not in SUITES]
    if bad or not suites:
        raise PlanError(f"--suite: unknown suite {(bad or [suite])[0]!r}; choose from {', '.join(SUITES)} "
                        "(several: comma-separated)")
    try:
        dts = [dtype_name(d) for d in dtypes] if dtypes else None
        probs = [problems.get(n) for n in problem_names] if problem_names else problems.all_problems()
    except ValueError as e:
        raise PlanError(str(e)) from None
    if sets:
        if len(problem_names) != 1:
            raise PlanError("--set needs exactly one --problem")
        p = probs[0]
        return [(p, [parse_sets(p, sets, d) for d in (dts or [None])])]
    plan = []
    for p in probs:
        cases = list({c.id: c for s in suites for c in p.cases(s)}.values())
        if dts:
            bad = [d for d in dts if d not in p.dtypes]
            if problem_names and bad:
                raise PlanError(f"--dtype: {p.name} takes {', '.join(p.dtypes)}, not {', '.join(bad)}")
            cases = [c for c in cases if c.dtype in dts]
        if cases:
            plan.append((p, cases))
    return plan


def make_tasks(plan, impls, *, seeds=None, time=False, phase="timed", prefix="t",
               split_by_layer=False) -> list[dict]:
    """One task per case (``split_by_layer``: per case and layer, so that parallel workers each
    keep one layer's compile caches warm)."""
    tasks = []
    for p, cases in plan:
        ids = [i.id for i in impls if i.problem == p.name]
        if not ids:
            continue
        groups = [ids]
        if split_by_layer:
            layers: dict[str, list[str]] = {}
            for i in ids:
                layers.setdefault(i.split(":")[0], []).append(i)
            groups = list(layers.values())
        for c in cases:
            for g in groups:
                t = {"id": f"{prefix}{len(tasks)}", "problem": p.name, "case": c.to_json(),
                     "impls": g, "time": time, "phase": phase}
                if seeds is not None:
                    t["seeds"] = list(seeds)
                tasks.append(t)
    return tasks
