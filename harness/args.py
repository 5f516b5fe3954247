"""What the commands share: argument types, the selector options, and ``setup`` (the device, the
plugins, the selected implementations and the planned cases of a verify-like command).

``harness.cli`` builds the parser from these, and so do the commands that add their own
subcommand (``add_parser(subparsers)``); ``harness.compare`` and ``harness.crosscheck`` call
``setup``. Nothing here imports a command module.
"""
from __future__ import annotations

import argparse
import os
import sys


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


def _problem_list(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected a problem name, got {text!r}")
    return names


def _positive(kind, what: str, allow_zero: bool = False):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if v < 0 or (v == 0 and not allow_zero) or v != v:
            raise argparse.ArgumentTypeError(f"{what} must be {'>= 0' if allow_zero else '> 0'}, got {text!r}")
        return v
    return parse


def problems_arg(args) -> list[str]:
    """--problem given as a flat list (repeatable and comma-separated), in order, no repeats."""
    out: list[str] = []
    for group in getattr(args, "problem", None) or []:
        for name in (group if isinstance(group, list) else [group]):
            if name not in out:
                out.append(name)
    return out


#: --layer's help: the layers are the adapters' (and plugins'), which the parser does not load
LAYER_HELP = "a layer's name (torch, a kernel layer, a library, a plugin's; `python -m harness list` shows them)"


def _selectors(p: argparse.ArgumentParser, suite_default: str | None, roles_help: str) -> None:
    from .problems import SUITES, names_help
    p.add_argument("--problem", action="append", type=_problem_list,
                   help=f"{names_help()} (repeatable, or comma-separated)")
    p.add_argument("--layer", help=LAYER_HELP)
    p.add_argument("--impl", action="append", help="implementation id layer:name (repeatable)")
    p.add_argument("--roles", help=roles_help)
    p.add_argument("--all", action="store_true", help="every implementation (same as --roles all)")
    p.add_argument("--suite", default=suite_default, help=" | ".join(SUITES))
    p.add_argument("--dtype", action="append", help="float32|float16|bfloat16 (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="one custom case instead of a suite (needs --problem), e.g. --set M=1823 --set N=781")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE",
                   help="a Python file registering implementations with harness.register (repeatable)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--timeout", type=_positive(float, "--timeout"), default=None,
                   help="seconds without progress before an implementation is killed as hung")
    p.add_argument("--jobs", type=_positive(int, "--jobs"), default=None,
                   help="parallel workers for verification (default: half the cores on a GPU machine, "
                        "one a core without a GPU; at most 8)")
    p.add_argument("--no-isolate", action="store_true",
                   help="run in this process (no crash/hang protection; for debugging)")
    p.add_argument("-v", "--verbose", action="store_true")


def _device(arg: str) -> str:
    from .machine import has_gpu

    if arg == "auto":
        return "cuda" if has_gpu() else "cpu"
    if arg == "cuda" and not has_gpu():
        raise UsageError("--device: cuda requested but no CUDA GPU is visible")
    return arg


def _prepare_env(device: str) -> None:
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")


def _warn_backend_errors() -> None:
    from . import registry
    registry.load_backends()
    for mod, err in registry.BACKEND_ERRORS.items():
        print(f"warning: adapter backends/{mod}.py not loaded, its implementations are missing: "
              f"{err}", file=sys.stderr)


def setup(args, default_roles=None):
    """What verify and compare share: the device (and the CPU mode's environment), the plugins,
    the selected implementations and the planned cases."""
    from . import plan as P
    from . import registry

    device = _device(args.device)
    _prepare_env(device)
    registry.load_plugins(args.plugin)
    _warn_backend_errors()
    roles = None if args.all else P.parse_roles(args.roles, default_roles)
    sel = P.Selection(problems=problems_arg(args), layer=args.layer, impls=args.impl, roles=roles)
    impls = P.select(sel)
    plan = P.plan_cases(sel.problems, args.suite, args.dtype, args.set)
    return device, impls, plan
