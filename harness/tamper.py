"""Detects an implementation that patches the harness.

``baseline()`` records the identity of every function, class and method of the harness's own
modules (taken before any plugin or backend code runs in a worker); ``changed()`` lists what is no
longer the same object. The verdict itself comes from the checker process, which no patch in the
worker reaches; this makes the attempt visible and a FAIL of its own.
"""
from __future__ import annotations

import importlib
import sys
import types

# every harness module the verification path goes through, imported before the baseline
WATCHED = ("harness", "harness.case", "harness.errors", "harness.registry", "harness.verify",
           "harness.guard", "harness.checker", "harness.timing", "harness.worker", "harness.tamper",
           "harness.problems", "harness.problems.vector_add", "harness.problems.softmax",
           "harness.problems.gemm_epilogue")

_BASE: dict[str, tuple] | None = None


def _entries() -> dict[str, tuple]:
    """name -> (owner, attribute, object) for every watched function, class and method."""
    out = {}
    for name in WATCHED:
        mod = sys.modules.get(name)
        if mod is None:
            continue
        for attr, obj in list(vars(mod).items()):
            if isinstance(obj, (types.FunctionType, type)) or (
                    callable(obj) and getattr(obj, "__module__", "").startswith("harness")):
                out[f"{name}.{attr}"] = (mod, attr, obj)
                if isinstance(obj, type) and obj.__module__ == name:
                    for m, f in list(vars(obj).items()):
                        if isinstance(f, (types.FunctionType, staticmethod, classmethod, property)):
                            out[f"{name}.{attr}.{m}"] = (obj, m, f)
    # the registered problem objects: their class, and any per-instance override
    from . import problems
    for pname, p in problems._REGISTRY.items():
        out[f"problem:{pname}.__class__"] = (p, "__class__", type(p))
        for m, f in vars(p).items():
            out[f"problem:{pname}.{m}"] = (p, m, f)
    return out


def baseline() -> None:
    """Record the harness as it is now (once per process)."""
    global _BASE
    if _BASE is None:
        for name in WATCHED:
            importlib.import_module(name)
        from . import problems
        problems._load()
        _BASE = _entries()


def changed() -> list[str]:
    """Names of harness functions, classes or methods replaced since ``baseline()``."""
    if _BASE is None:
        baseline()
        return []
    now = _entries()
    return sorted(k for k in set(_BASE) | set(now)
                  if k not in _BASE or k not in now or _BASE[k][2] is not now[k][2])


def restore() -> None:
    """Put back what ``changed()`` reports (after a tamper has been reported)."""
    if _BASE is None:
        return
    now = _entries()
    for k in set(_BASE) | set(now):
        if k in _BASE and (k not in now or now[k][2] is not _BASE[k][2]):
            owner, attr, obj = _BASE[k]
            setattr(owner, attr, obj)
        elif k not in _BASE:
            owner, attr, _ = now[k]
            try:
                delattr(owner, attr)
            except AttributeError:
                pass
