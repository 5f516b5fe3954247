"""``python -m harness plan IMPL --set KEY=VALUE ... [--dtype D]``: what an implementation runs for
one case, without a GPU -- the planner that decides, its answer (variant, configuration, why), the
kernel files and entry points it launches and the host entries that bind them. ``--suite S``: the
variant of every case of a suite instead. A default asks its layer's ``plan`` (the one
``harness.planned`` registered, docs/DESIGN.md "One contract per layer"); a twin or a variant runs
its own kernel, named by its Sources.
"""
from __future__ import annotations

import inspect
import json
from pathlib import Path

from .loc import REPO_ROOT


def add_parser(subparsers):
    p = subparsers.add_parser("plan", help="what an implementation runs for a case: planner, variant, kernel files",
                              description="The planner's answer for one case (--set, --dtype) or for every "
                                          "case of a suite (--suite): variant, configuration, kernel files.")
    p.add_argument("impl", help="implementation id layer:name, e.g. cutile:softmax")
    p.add_argument("--problem", default=None, help="needed when the id exists for several problems")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a size or parameter")
    p.add_argument("--dtype", default=None)
    p.add_argument("--suite", default=None, help="every case of this suite (one line each)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE")
    p.set_defaults(func=_main)
    return p


def _where(fn) -> str:
    """``file:line`` of a function, relative to the repository."""
    path = Path(inspect.getsourcefile(fn) or "?").resolve()
    try:
        path = path.relative_to(REPO_ROOT.resolve())
    except ValueError:
        pass
    return f"{path.as_posix()}:{inspect.getsourcelines(fn)[1]}"


def _sources(srcs) -> list[dict]:
    return [{"file": s.path, "kernels": list(s.kernels or ()), "host": list(s.host)} for s in srcs]


def describe(impl, case) -> dict:
    """The plan of ``impl`` for ``case`` as plain data (see the module docstring)."""
    from .meta_inputs import case_facts
    out = {"impl": impl.id, "role": impl.role, "case": case.id}
    srcs = impl.sources
    if not hasattr(srcs, "plan"):
        out["planner"] = None
        out["launches"] = _sources(srcs)
        return out
    p = srcs.plan(impl.problem, case_facts(case))
    out.update(planner=f"{srcs.plan.__module__}.{srcs.plan.__name__}", planner_at=_where(srcs.plan),
               device=case_facts(case).device.name, variant=p.variant, why=p.why,
               config=json.loads(json.dumps(dict(p.config), default=str)),
               launches=_sources(p.sources), binding=_sources(srcs.common))
    return out


def text(d: dict) -> str:
    lines = [f"{d['impl']} ({d['role']})  {d['case']}"]
    if d["planner"] is None:
        lines.append("  planner   none: it runs its own kernel")
    else:
        lines += [f"  planner   {d['planner']}(problem, facts)  ({d['planner_at']}; planned for an {d['device']})",
                  f"  variant   {d['variant']}" + (f"  -- {d['why']}" if d["why"] else ""),
                  f"  config    {json.dumps(d['config'], sort_keys=True)}"]
    for s in d["launches"]:
        lines.append(f"  kernel    {s['file']}: {', '.join(s['kernels']) or '-'}"
                     + (f"  (bound by {', '.join(s['host'])})" if s["host"] else ""))
    for s in d.get("binding", []):
        lines.append(f"  binding   {s['file']}: {', '.join(s['host'])}")
    lines.append(f"  lines     python -m harness loc {d['impl']} --explain")
    return "\n".join(lines)


def _main(args) -> int:
    from . import registry
    from .plan import parse_sets, plan_cases
    registry.load_plugins(args.plugin)
    impls = [i for i in registry.all_impls() + registry.candidates()   # candidates: what _next would run
             if i.id == args.impl and args.problem in (None, i.problem)]
    if not impls:
        raise ValueError(f"impl: {args.impl!r} is not registered" + (f" for problem {args.problem!r}" if args.problem else ""))
    if len(impls) > 1:
        raise ValueError(f"impl: {args.impl} exists for {', '.join(i.problem for i in impls)}: pass --problem")
    impl = impls[0]
    from . import problems
    prob = problems.get(impl.problem)
    if args.suite:
        if args.set:
            raise ValueError("--suite and --set: one or the other")
        cases = plan_cases([impl.problem], args.suite, [args.dtype] if args.dtype else None, [])[0][1]
    else:
        if not args.set:
            raise ValueError("--set: give the case's sizes (e.g. --set M=4096 --set N=151936), or --suite")
        cases = [parse_sets(prob, args.set, args.dtype)]
    found = [describe(impl, c) for c in cases]
    if args.format == "json":
        print(json.dumps(found if args.suite else found[0], indent=2))
    elif args.suite:
        for d in found:
            print(f"{d['case']:60s} {d.get('variant', '-')}")
    else:
        print(text(found[0]))
    return 0
