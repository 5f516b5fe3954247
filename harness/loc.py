"""Lines of code, counted from the real source files: kernel (device) lines and host lines.

Public API::

    count_source(src, root=REPO_ROOT) -> {"kernel": int, "host": int, "kernel_units": [...],
                                          "host_units": [...], "file": str}
    count_impl(impl) -> {"kernel": int | None, "host": int | None, "files": [...]}

What counts as a line: a physical line that is not blank and carries code once comments and
docstrings are taken out. Strings are code: a ``#`` inside a Python string or ``//`` inside a C++
string literal starts no comment, and every non-blank line of a multi-line (non-docstring) string
or a C++ raw string counts.

Which lines: the *units* (functions, methods, classes, structs) reached from a ``Source``'s named
entry points - in its own file and in every project file it reaches (Python imports of the
project's modules, ``from .x import helper`` or ``import pkg.mod as m; m.helper``; C++ quoted
``#include "x.cuh"``), each line counted once. One rule for every layer: a kernel's own lines plus
every helper it reaches, in any file; nothing it does not reach. The harness's own files are never
reached.

* Python (``.py``; parsed with ``ast``, lines classified with ``tokenize``; never imported).
  Kernel units are the named ``kernels`` -- or, when ``kernels`` is None, every function or method
  decorated with ``@triton.jit`` / ``@triton.autotune`` / ``@triton.heuristics`` /
  ``@cute.kernel`` / ``@cute.jit`` / ``@cutlass.jit`` style decorators (final attribute
  jit/kernel/autotune/heuristics under a triton/tl/cute/cutlass prefix, or such a bare name
  imported from those packages, or a bare ``@jit``) -- plus the same-module functions and methods
  they reference, transitively (``helper(...)``, ``tl.reduce(x, 0, combine)``, ``self.helper``,
  ``this_module.helper``). Host units are the named ``host`` entries plus the same-module
  non-kernel functions, methods and classes they reference, transitively. Names are ``func``,
  ``Class.method`` or ``Class`` (the whole class body). Decorator lines belong to their unit;
  nested functions and lambdas belong to the unit that holds them.
* C++/CUDA (``.cu .cuh .cpp .cc .cxx .h .hpp .hh``): comments are stripped by a small lexer that
  knows string, char and raw-string literals and digit separators; top-level function definitions
  and struct/class/union definitions are found by brace matching (``namespace``/``extern "C"``
  blocks are entered). Kernel units are the named ``kernels`` -- or every ``__global__`` function
  when ``kernels`` is None -- plus the ``__device__`` (and ``constexpr``) functions and the
  structs of the same file they reference by identifier, transitively. Host units are the named
  ``host`` functions plus the host functions (neither ``__device__`` nor ``__global__``) and the
  structs of the same file they reference, transitively. Preprocessor lines inside a unit count;
  those outside every unit do not.

A line that is both kernel and host (e.g. a kernel method inside a host class) counts as kernel;
a decorated Python function named in ``host`` (e.g. a ``@cute.jit`` launcher) is host. Units
reached from several Sources of one implementation are counted once. References are resolved by
name only (no types, no overload resolution): a same-named unit elsewhere in the file is reached
too, and a C++ name reached (not named) takes only its overloads of the right kind.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

REPO_ROOT = Path(__file__).resolve().parent.parent

PY_SUFFIXES = (".py",)
#: the project's tools (the harness, the ptxas tool): no layer's code, never reached
TOOL_PACKAGES = ("harness", "kltools")
CPP_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp", ".hh")

__all__ = ["count_source", "count_impl", "explain_text", "is_planner", "line_sets", "REPO_ROOT"]


# -- public API --------------------------------------------------------------------------------
def count_source(src, root: Path | str = REPO_ROOT) -> dict:
    """Count the kernel and host lines that one ``Source`` reaches, in its file and in every
    project file it reaches (Python imports, C++ ``#include "..."``)."""
    path = _resolve(src.path, root)
    a = _reach(path, _names(src.kernels, "kernels") if src.kernels is not None else None,
               _names(src.host, "host"))
    k = sum(len(v) for v in a.kernel_lines.values())
    h = sum(len(a.host_lines.get(f, set()) - a.kernel_lines.get(f, set())) for f in a.host_lines)
    return {"kernel": k, "host": h, "kernel_units": list(a.kernel_units),
            "host_units": list(a.host_units), "file": _display(path, root),
            "files": [_display(f, root) for f in a.files]}


def is_planner(path) -> bool:
    """Whether a file holds a layer's planner (the ``plan`` column): ``<layer>_src/dispatch.py``,
    ``<layer>_src/dispatch_<part>.py`` or any module of a ``<layer>_src/dispatch/`` package (a
    planner spread over several files)."""
    p = Path(path)
    if p.suffix != ".py":
        return False
    if p.parent.name == "dispatch" and p.parent.parent.name.endswith("_src"):
        return True
    return p.parent.name.endswith("_src") and (p.stem == "dispatch" or p.stem.startswith("dispatch_"))


def count_impl(impl, root: Path | str = REPO_ROOT, explain: bool = False) -> dict:
    """Sum over ``impl.sources``; a line reached by several Sources counts once.

    Counts are kept on disk between runs (``~/.cache/kernel-layers/loc``, see ``_cached``): keyed
    by the Sources, the role and this counter's own code, and valid while every file the count
    reached (and the listing of each of their folders) has the same contents.

    Columns: ``kernel`` (device code), ``host`` (launch/binding code outside the planner) and
    ``plan`` (host code in the planner's files, ``is_planner``: the rules and tables choosing among
    the variants). No sources (torch baselines, plugins that declare none) -> all None. With
    ``explain``, ``spans`` lists every counted unit as (file, first, last, column, unit, why, lines)."""
    sources = tuple(getattr(impl, "sources", ()) or ())
    if not sources:
        return {"kernel": None, "host": None, "plan": None, "files": []}
    if explain:
        return _count_impl(impl, sources, root, explain)
    return _cached(impl, sources, root)


def _cache_dir() -> Path:
    from kltools.cache import cache_dir
    return cache_dir("loc")


def _digest(path: Path) -> str | None:
    import hashlib
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _listing(folder: Path) -> str:
    """The names in ``folder`` (a new module beside a reached file can change what an import reaches)."""
    import hashlib
    try:
        return hashlib.sha256("\0".join(sorted(p.name for p in folder.iterdir())).encode()).hexdigest()
    except OSError:
        return ""


def _cached(impl, sources, root) -> dict:
    """``_count_impl`` through the disk cache: the entry of (Sources, role, root, this file's
    code) holds the count and the digest of every file it reached and of their folders' listings;
    it is used only while all of them are unchanged, else counted afresh and rewritten."""
    import hashlib
    import json
    rootp = Path(root).resolve()
    spec = [str(rootp), getattr(impl, "role", None), _digest(Path(__file__)),
            [[s.path, list(s.kernels) if s.kernels is not None else None, list(s.host),
              getattr(s, "variant", None)] for s in sources]]
    if _is_planned(impl):   # derived from what the planner ran and the layer's other kernels
        spec += [_digest(Path(__file__).with_name("loc_plan.py")), impl.sources.trace_key(impl.layer)]
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]
    path = _cache_dir() / f"{key}.json"
    try:
        entry = json.loads(path.read_text())
        if entry.get("spec") == spec and all(_digest(_resolve(f, rootp)) == d for f, d in entry["files"].items()) \
                and all(_listing(Path(d)) == h for d, h in entry["folders"].items()):
            return dict(entry["count"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    out = _count_impl(impl, sources, root, False)
    files = {f: _digest(_resolve(f, rootp)) for f in out["files"]}
    if all(files.values()):
        folders = {str(_resolve(f, rootp).parent): "" for f in out["files"]}
        entry = {"spec": spec, "files": files, "folders": {d: _listing(Path(d)) for d in folders},
                 "count": out}
        from kltools.cache import write_atomic
        write_atomic(path, json.dumps(entry))
    return out


def line_sets(impl, root: Path | str = REPO_ROOT) -> tuple[dict, dict, dict, list, list]:
    """({file: kernel lines}, {file: host lines}, {file: plan lines}, files, spans) of an
    implementation: the line sets ``count_impl`` sums (the HTML report marks them). A default
    registered with ``harness.planned`` is derived from its planner (``_derived``); every other
    implementation counts what its Sources reach, the host lines in planner files
    (``is_planner``) in the plan column."""
    sources = tuple(getattr(impl, "sources", ()) or ())
    derived = _derived(impl) if _is_planned(impl) else None
    kernel: dict[Path, set[int]] = {}
    host: dict[Path, set[int]] = {}
    files: list[str] = []
    spans: list = []
    for src in sources:
        path = _resolve(src.path, root)
        a = _reach(path, _names(src.kernels, "kernels") if src.kernels is not None else None,
                   _names(src.host, "host"), derived["policy"] if derived else None)
        for f, ls in a.kernel_lines.items():
            kernel.setdefault(f, set()).update(ls)
        for f, ls in a.host_lines.items():
            host.setdefault(f, set()).update(ls)
        files += [_display(f, root) for f in a.files if _display(f, root) not in files]
        var = getattr(src, "variant", None)
        spans.extend(sp if not var or "named as" not in sp[5] else
                     sp[:5] + (f"{sp[5]} (variant {var!r}, which the planner chose)",)
                     for sp in a.spans)
    host = {f: ls - kernel.get(f, set()) for f, ls in host.items()}
    if derived:
        plan = {f: ls - kernel.get(f, set()) for f, ls in derived["plan"].items()}
        host = {f: ls - plan.get(f, set()) for f, ls in host.items()}
        files += [_display(f, root) for f in plan if _display(f, root) not in files]
        spans += [(f, a, b, "plan", unit, why) for f, a, b, unit, why in derived["spans"]]
    else:
        plan = {f: ls for f, ls in host.items() if is_planner(f)}
        host = {f: ls for f, ls in host.items() if f not in plan}
        spans = [sp if not (sp[3] == "host" and is_planner(sp[0])) else sp[:3] + ("plan",) + sp[4:]
                 for sp in spans]
    if getattr(impl, "role", None) == "simple":
        # a teaching twin runs one kernel: no planner chooses for it (what it reaches of one
        # is not its code), so its plan column is 0 by the rule
        plan = {}
        spans = [sp for sp in spans if sp[3] != "plan"]
    return kernel, host, plan, files, spans


def _count_impl(impl, sources, root, explain: bool) -> dict:
    kernel, host, plan, files, spans = line_sets(impl, root)
    out = {"kernel": sum(len(v) for v in kernel.values()),
           "host": sum(len(v) for v in host.values()),
           "plan": sum(len(v) for v in plan.values()),
           "files": files}
    if _is_planned(impl):
        out["choices"] = dict(impl.sources.choices)
    if explain:
        seen, rows = set(), []
        cols = {"kernel": kernel, "host": host, "plan": plan}
        for f, first, last, col, unit, why in spans:
            mine = {n for n in cols[col].get(f, set()) if first <= n <= last and (f, n) not in seen}
            if not mine:
                continue
            seen |= {(f, n) for n in mine}
            rows.append((_display(f, root), first, last, col, unit, why, len(mine), sorted(mine)))
        out["spans"] = rows
    return out


def _is_planned(impl) -> bool:
    """A default registered with ``harness.planned`` (``harness.loc_plan.PlannedSources``)."""
    return hasattr(getattr(impl, "sources", None), "derived")


def _derived(impl) -> dict:
    """What a planned default's count needs beyond its Sources (``PlannedSources.derived``): the
    plan column's lines and their explanation, and the ``_Policy`` of the reach."""
    return impl.sources.derived(impl.layer)


def explain_text(impl, root: Path | str = REPO_ROOT, lines: bool = False) -> str:
    """``loc IMPL --explain``: every counted span, its column and why it counts, then the sums;
    ``lines``: under each span, every counted line with its number and text."""
    c = count_impl(impl, root, explain=True)
    if c["kernel"] is None:
        return f"{impl.id}: no sources registered (a library call): no lines counted"
    out = [f"{impl.id} ({impl.problem}, {impl.role}): kernel {c['kernel']} / host {c['host']} / "
           f"plan {c['plan']}"]
    if c.get("choices"):
        out.append("  plan() over every suite's case: " + ", ".join(f"{w} {n}" for w, n in sorted(c["choices"].items())))
    for f, first, last, col, unit, why, n, nums in sorted(c["spans"], key=lambda r: (r[3], r[0], r[1])):
        out.append(f"  {f}:{first}-{last}  {col:6s} {n:4d}  {unit}: {why}")
        if lines:
            text = _resolve(f, root).read_text(encoding="utf-8", errors="replace").splitlines()
            out += [f"      {k:5d}  {text[k - 1]}" for k in nums]
    return "\n".join(out)


def add_parser(subparsers):
    p = subparsers.add_parser("loc", help="lines of code of implementations (kernel / host / plan)",
                              description="Count an implementation's lines by the one rule of "
                                          "harness.loc; --explain prints every counted span.")
    p.add_argument("impl", nargs="+", help="implementation id layer:name (several allowed)")
    p.add_argument("--problem", default=None, help="needed when the id exists for several problems")
    p.add_argument("--explain", action="store_true", help="every counted span, its column and why")
    p.add_argument("--lines", action="store_true", help="with --explain: every counted line, under its span")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE")
    p.set_defaults(func=_main)
    return p


def _main(args) -> int:
    from . import registry
    registry.load_plugins(getattr(args, "plugin", None))
    for iid in args.impl:
        impls = [i for i in registry.all_impls() if i.id == iid and args.problem in (None, i.problem)]
        if not impls:
            raise ValueError(f"impl: {iid!r} is not registered"
                             + (f" for problem {args.problem!r}" if args.problem else ""))
        for impl in impls:
            if args.explain:
                print(explain_text(impl, lines=args.lines))
            else:
                c = count_impl(impl)
                print(f"{impl.id} ({impl.problem}): kernel {c['kernel']} / host {c['host']} / plan {c['plan']}")
    return 0


# -- helpers shared by both languages ----------------------------------------------------------

def _names(value, arg: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    try:
        names = tuple(value)
    except TypeError:
        raise TypeError(f"Source.{arg}: expected a tuple of names, got {value!r}") from None
    for n in names:
        if not isinstance(n, str) or not n:
            raise TypeError(f"Source.{arg}: expected non-empty names, got {n!r}")
    return names


def _resolve(path, root) -> Path:
    p = Path(path)
    if not p.is_absolute():
        p = Path(root) / p
    if not p.is_file():
        raise FileNotFoundError(f"LOC: source file not found: {path} (looked at {p})")
    return p.resolve()


def _display(path: Path, root) -> str:
    try:
        return path.relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(path)


@dataclass
class _Reach:
    kernel_lines: dict          # Path -> set of line numbers
    host_lines: dict
    kernel_units: tuple[str, ...]
    host_units: tuple[str, ...]
    files: tuple                # every file that contributed lines, the source's own first
    #: (file, first, last, column, unit, why) of every counted unit (``loc --explain``)
    spans: tuple = ()


_MODS: dict[tuple, object] = {}


def _module(path: Path):
    """The parsed file (cached while it is unchanged)."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _MODS:
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix in PY_SUFFIXES:
            _MODS[key] = _PyModule(text, path)
        elif path.suffix in CPP_SUFFIXES:
            _MODS[key] = _CppFile(text, path)
        else:
            raise ValueError(f"LOC: {path}: unknown language (suffix {path.suffix!r}); expected "
                             f"one of {', '.join(PY_SUFFIXES + CPP_SUFFIXES)}")
    return _MODS[key]


_REACH: dict[tuple, tuple] = {}   # (key, stamp) -> (((file, stamp) of its files), _Reach)


@dataclass(frozen=True)
class _Policy:
    """What a derived count keeps the reach out of (harness.loc_plan): ``barrier`` units (file,
    name) the host reach never enters -- the planner's own units (counted by execution, in the
    plan column) and the kernels of variants the default never launches -- and ``dead_files``,
    the files only such variants use."""
    barrier: frozenset = frozenset()
    dead_files: frozenset = frozenset()


def _reach(path: Path, kernels: tuple[str, ...] | None, host: tuple[str, ...],
           policy: _Policy | None = None) -> _Reach:
    mod = _module(path)
    key = (str(path), kernels, host, policy)
    files = (mod.files() if isinstance(mod, _CppFile) else None)
    stamp = tuple((str(f), f.stat().st_mtime_ns) for f in (files or [path]))
    hit = _REACH.get((key, stamp))
    # valid while every file that contributed lines (a Python helper in an imported module too)
    # is unchanged
    if hit is not None and all(_stamp(f) == st for f, st in hit[0]):
        return hit[1]
    if isinstance(mod, _PyModule):
        r = _py_reach(mod, kernels, host, policy or _Policy())
    else:
        r = _CppProgram(mod).analyze(kernels, host)
    _REACH[(key, stamp)] = (tuple((f, _stamp(f)) for f in r.files), r)
    return r


def _stamp(f) -> tuple | None:
    try:
        st = Path(f).stat()
        return (st.st_mtime_ns, st.st_size)
    except OSError:
        return None


def _closure(start: Iterable[str], refs, allowed, via: dict | None = None) -> list[str]:
    """Names reachable from ``start`` through ``refs(name)``, following only ``allowed`` names;
    ``via`` (if given) records the name each one was first reached from."""
    seen: list[str] = []
    todo = [(s, None) for s in start]
    while todo:
        n, parent = todo.pop(0)
        if n in seen:
            continue
        seen.append(n)
        if via is not None:
            via.setdefault(n, parent)
        todo.extend((r, n) for r in refs(n) if r not in seen and allowed(r))
    return seen


def _unknown(path: Path, arg: str, name: str, known: Iterable[str]) -> ValueError:
    known = sorted(set(known))
    hint = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
    return ValueError(f"LOC: Source.{arg}: {name!r} is not defined in {path} "
                      f"(found: {hint or 'nothing'})")


# -- Python ------------------------------------------------------------------------------------
_KERNEL_ATTRS = {"jit", "kernel", "autotune", "heuristics"}
_MARKS = ("compile_step", "interpreter_only", "interpreter_flag")   # kltools.loc_marks
_KERNEL_ROOTS = {"triton", "tl", "cute", "cutlass"}
_SKIP_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}


@dataclass
class _PyUnit:
    name: str
    node: ast.AST
    cls: str | None          # enclosing class for methods
    is_class: bool
    decorated_kernel: bool
    first: int
    last: int
    is_table: bool = False   # a module-level assignment (a plain-data table or constant)
    mark: str | None = None  # a kltools.loc_marks decorator: compile_step, interpreter_only, ...


class _PyModule:
    def __init__(self, text: str, path: Path):
        self.path = path
        self.lines = text.splitlines()
        try:
            self.tree = ast.parse(text, filename=str(path))
        except SyntaxError as e:
            raise ValueError(f"LOC: {path}:{e.lineno}: cannot parse: {e.msg}") from None
        self._imports()
        self.units: dict[str, _PyUnit] = {}
        self._collect(self.tree.body, cls=None)
        self.code_lines = self._code_lines(text)

    # structure
    def _imports(self) -> None:
        """Aliases bound by imports: name -> imported module (or module.name); and, for the
        project's own modules, where each imported name is defined (``ext_symbols``: name ->
        (file, symbol)) or which file an imported module is (``ext_modules``: alias -> file)."""
        self.aliases: dict[str, str] = {}
        self.ext_symbols: dict[str, tuple[Path, str]] = {}
        self.ext_modules: dict[str, Path] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                    f = _module_file(self.path, a.name, 0)
                    if f is not None and a.asname:
                        self.ext_modules[a.asname] = f
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module or ''}.{a.name}".lstrip(".")
                    sub = _module_file(self.path, f"{node.module}.{a.name}" if node.module else a.name,
                                       node.level)
                    if sub is not None:
                        self.ext_modules[a.asname or a.name] = sub
                        continue
                    f = _module_file(self.path, node.module or "", node.level)
                    if f is not None:
                        self.ext_symbols[a.asname or a.name] = (f, a.name)

    def _is_kernel_decorator(self, dec: ast.expr) -> bool:
        if isinstance(dec, ast.Call):
            dec = dec.func
        parts: list[str] = []
        while isinstance(dec, ast.Attribute):
            parts.append(dec.attr)
            dec = dec.value
        if not isinstance(dec, ast.Name):
            return False
        parts.append(dec.id)
        parts.reverse()                       # e.g. ["triton", "jit"], ["cute", "kernel"], ["jit"]
        if parts[-1] not in _KERNEL_ATTRS:
            return False
        origin = self.aliases.get(parts[0], parts[0]).split(".")
        if len(parts) == 1:                   # bare @jit / @kernel / @autotune
            if parts[0] in self.aliases:
                return origin[0] in _KERNEL_ROOTS or "cute" in origin
            return parts[0] == "jit"
        return parts[0] in _KERNEL_ROOTS or origin[0] in _KERNEL_ROOTS or "cute" in origin

    def _collect(self, body: list[ast.stmt], cls: str | None) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{cls}.{node.name}" if cls else node.name
                self._add(_PyUnit(name, node, cls, False,
                                  any(self._is_kernel_decorator(d) for d in node.decorator_list),
                                  *self._span(node), mark=self._mark_of(node.decorator_list)))
            elif isinstance(node, ast.ClassDef):
                if cls is None:
                    self._add(_PyUnit(node.name, node, None, True, False, *self._span(node)))
                    self._collect(node.body, cls=node.name)
            elif cls is None and isinstance(node, (ast.Assign, ast.AnnAssign)):
                # a module-level table or constant: counted where a unit reading it is counted
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for nm in ([t] if isinstance(t, ast.Name) else
                               [e for e in getattr(t, "elts", []) if isinstance(e, ast.Name)]):
                        if nm.id not in self.units or self.units[nm.id].is_table:
                            self._add(_PyUnit(nm.id, node, None, False, False, node.lineno,
                                              node.end_lineno, is_table=True))
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.AsyncWith)) or (
                    hasattr(ast, "TryStar") and isinstance(node, ast.TryStar)):
                for part in ("body", "orelse", "finalbody"):
                    self._collect(getattr(node, part, []) or [], cls)
                for h in getattr(node, "handlers", []) or []:
                    self._collect(h.body, cls)

    def _add(self, unit: _PyUnit) -> None:
        # a redefinition (e.g. under if/else) widens the unit to both definitions
        old = self.units.get(unit.name)
        if old is not None and unit.is_table:
            return                            # a table rebound: its first binding counts
        if old is not None and old.is_table:
            old = None                        # a function or class of the same name wins
        if old is not None:
            unit.first, unit.last = min(old.first, unit.first), max(old.last, unit.last)
            unit.decorated_kernel = unit.decorated_kernel or old.decorated_kernel
            unit.mark = unit.mark or old.mark
            unit.node = ast.Module(body=[old.node, unit.node], type_ignores=[])
        self.units[unit.name] = unit

    def _mark_of(self, decorators) -> str | None:
        """The ``kltools.loc_marks`` mark among ``decorators`` (``@compile_step``,
        ``@loc_marks.compile_step``...), if any."""
        for dec in decorators:
            name = dec.attr if isinstance(dec, ast.Attribute) else getattr(dec, "id", None)
            root = dec
            while isinstance(root, ast.Attribute):
                root = root.value
            origin = self.aliases.get(getattr(root, "id", ""), "")
            if name in _MARKS and origin.startswith("kltools"):
                return name
        return None

    def dead(self) -> tuple[frozenset, frozenset]:
        """(line numbers, ids of AST nodes) of the branches a GPU run never takes: those an
        ``@interpreter_flag`` function's call guards (``if flag():`` its body, ``if not flag():``
        its else part, ``a if flag() else b`` its ``a``). Counted nowhere, followed nowhere."""
        if getattr(self, "_dead", None) is None:
            lines: set[int] = set()
            nodes: set[int] = set()
            for node in ast.walk(self.tree):
                if not isinstance(node, (ast.If, ast.IfExp)):
                    continue
                test, negated = node.test, False
                if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                    test, negated = test.operand, True
                if not (isinstance(test, ast.Call) and self._is_flag(test.func)):
                    continue
                dead = node.orelse if negated else node.body
                for d in (dead if isinstance(dead, list) else [dead]):
                    lines.update(range(d.lineno, d.end_lineno + 1))
                    nodes.update(id(n) for n in ast.walk(d))
                if isinstance(node, ast.If) and node.orelse and negated:   # the "else:" line itself
                    lines.update(range(node.body[-1].end_lineno + 1, node.orelse[0].lineno))
            self._dead = (frozenset(lines), frozenset(nodes))
        return self._dead

    def _is_flag(self, func) -> bool:
        r = self._ref(func, None)
        if isinstance(r, str):
            return self.units[r].mark == "interpreter_flag"
        if isinstance(r, tuple):
            return _module(r[0]).units[r[1]].mark == "interpreter_flag"
        return False

    @staticmethod
    def _span(node) -> tuple[int, int]:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return first, node.end_lineno

    # references
    def _refs(self, name: str, skip: set[int]) -> list:
        """Units referenced from unit ``name`` (names here, (file, name) elsewhere), ignoring the
        subtrees of units whose ids are in skip."""
        unit = self.units[name]
        out: list[str] = []
        # a name a function binds (a parameter, an assignment) is its own, not the module's unit of
        # that name: a function passed in as ``plan`` is the caller's argument, referenced there
        local = _local_reads(unit.node)
        dead = self.dead()[1]
        stack = [unit.node]
        while stack:
            node = stack.pop()
            for child in ast.iter_child_nodes(node):
                if (id(child) in skip or id(child) in dead) and child is not unit.node:
                    continue
                stack.append(child)
            if id(node) in local:
                continue
            r = self._ref(node, unit.cls if not unit.is_class else unit.name)
            if r and r != name and r not in out:
                out.append(r)
        return out

    def _ref(self, node: ast.AST, cls: str | None):
        """A unit this node refers to: its name in this file, or (file, name) in another project
        file reached through an import; None otherwise."""
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in self.units and "." not in node.id:
                return node.id
            if node.id in self.ext_symbols:
                f, sym = self.ext_symbols[node.id]
                if f != self.path and sym in _module(f).units:
                    return (f, sym)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base, attr = node.value.id, node.attr
            if base in self.ext_modules and base not in ("self", "cls"):
                f = self.ext_modules[base]
                if f != self.path:
                    return (f, attr) if attr in _module(f).units else None
            if base in ("self", "cls") and cls and f"{cls}.{attr}" in self.units:
                return f"{cls}.{attr}"
            if f"{base}.{attr}" in self.units:
                return f"{base}.{attr}"
            if attr in self.units and not self.units[attr].is_class and "." not in attr:
                if base in self.aliases:      # only a module importing itself: this_module.helper
                    if self.aliases[base].split(".")[-1] != self.path.stem:
                        return None
                return attr
        return None

    # lines
    def _docstring_spans(self) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        spans = []
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                        and isinstance(body[0].value.value, str)):
                    c = body[0].value
                    spans.append(((c.lineno, self._char_col(c.lineno, c.col_offset)),
                                  (c.end_lineno, self._char_col(c.end_lineno, c.end_col_offset))))
        return spans

    def _char_col(self, lineno: int, byte_col: int) -> int:
        line = self.lines[lineno - 1] if lineno - 1 < len(self.lines) else ""
        return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def _code_lines(self, text: str) -> frozenset[int]:
        docs = self._docstring_spans()
        lines: set[int] = set()
        try:
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                if tok.type in _SKIP_TOKENS:
                    continue
                if any(a <= tok.start and tok.end <= b for a, b in docs):
                    continue
                lines.update(range(tok.start[0], tok.end[0] + 1))
        except (tokenize.TokenError, SyntaxError) as e:
            raise ValueError(f"LOC: {self.path}: cannot tokenize: {e}") from None
        return frozenset(n for n in lines if n - 1 < len(self.lines) and self.lines[n - 1].strip())

    def _lines_of(self, names: Iterable[str]) -> set[int]:
        out: set[int] = set()
        for n in names:
            u = self.units[n]
            out.update(range(u.first, u.last + 1))
        return (out & self.code_lines) - self.dead()[0]

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _bound(fn) -> set[str]:
    """The names function ``fn`` binds in its own scope (Python's rule): its parameters and the
    names it assigns, defines or catches -- not those of the functions nested in it -- less the
    ones it declares ``global`` or ``nonlocal``. An import inside it is left out: the name is the
    imported unit, which the module's imports resolve."""
    a = fn.args
    names = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None}
    free: set[str] = set()
    todo = list(fn.body) if isinstance(fn.body, list) else [fn.body]
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            free.update(n.names)
        elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        if isinstance(n, _SCOPES):
            continue   # a nested function's names are its own
        todo.extend(ast.iter_child_nodes(n))
    return names - free


def _local_reads(root: ast.AST) -> set[int]:
    """ids of the ``Name`` nodes under ``root`` that read a name local to their enclosing
    function (``_bound``); a function's decorators, defaults and annotations read the scope
    around it."""
    out: set[int] = set()
    todo: list = [(root, frozenset())]
    while todo:
        n, local = todo.pop()
        if isinstance(n, _SCOPES):
            a = n.args
            outer = [*getattr(n, "decorator_list", []), *a.defaults, *(d for d in a.kw_defaults if d is not None),
                     *(x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                       if x is not None and x.annotation is not None), *([n.returns] if getattr(n, "returns", None)
                                                                          else [])]
            inner = local | _bound(n)
            todo += [(c, local) for c in outer]
            todo += [(c, inner) for c in (n.body if isinstance(n.body, list) else [n.body])]
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in local:
            out.add(id(n))
        todo += [(c, local) for c in ast.iter_child_nodes(n)]
    return out


def _module_file(importer: Path, dotted: str, level: int) -> Path | None:
    """The project file a (possibly relative) module name refers to, or None (a package from
    elsewhere, or the harness itself: its code is no layer's)."""
    if level:
        base = importer.parent
        for _ in range(level - 1):
            base = base.parent
    else:
        base = REPO_ROOT
    parts = [p for p in dotted.split(".") if p]
    if not parts and level:
        cand = [base / "__init__.py"]
    elif not parts:
        return None
    else:
        stem = base.joinpath(*parts)
        cand = [stem.with_suffix(".py"), stem / "__init__.py"]
    root = REPO_ROOT.resolve()
    for c in cand:
        if c.is_file():
            c = c.resolve()
            if root in c.parents and not any((root / t) in c.parents for t in TOOL_PACKAGES):
                return c
    return None


def _py_spans(here: Path, unit, kernel_nodes, host_nodes, via: dict, hvia: dict):
    """(kernel labels, host labels, spans with the reason each is counted) of a reach."""
    def label(node):
        return node[1] if node[0] == here else f"{_display(node[0], REPO_ROOT)}:{node[1]}"

    def why(node, parents, named):
        p = parents.get(node)
        kind = "table" if unit(node).is_table else ("class" if unit(node).is_class else "function")
        if p is None:
            return f"{kind} named as {named} of the Source {_display(here, REPO_ROOT)}"
        return f"{kind} reached from {label(p)}"

    spans = [(path, unit((path, n)).first, unit((path, n)).last, "kernel", label((path, n)),
              why((path, n), via, "kernels")) for path, n in kernel_nodes]
    spans += [(path, unit((path, n)).first, unit((path, n)).last, "host", label((path, n)),
               why((path, n), hvia, "host")) for path, n in host_nodes]
    return tuple(label(n) for n in kernel_nodes), tuple(label(n) for n in host_nodes), tuple(spans)


def _py_reach(mod: "_PyModule", kernels: tuple[str, ...] | None, host: tuple[str, ...],
              policy: _Policy = _Policy()) -> _Reach:
    """Kernel and host units reached from the named entry points of ``mod``, across files."""
    for arg, names in (("kernels", kernels or ()), ("host", host)):
        for n in names:
            if n not in mod.units:
                raise _unknown(mod.path, arg, n, mod.units)
    if kernels is None:   # auto-detect; a decorated function named as host stays host
        kernels = tuple(n for n, u in mod.units.items() if u.decorated_kernel and n not in host)
    here = mod.path

    def m(path):
        return mod if path == here else _module(path)

    def node_refs(node, skip_of):
        path, name = node
        out = []
        for r in m(path)._refs(name, skip_of(path)):
            nr = (path, r) if isinstance(r, str) else r
            if nr not in out:
                out.append(nr)
        return out

    def unit(node):
        return m(node[0]).units[node[1]]

    def blocked(node):
        """Counted in no column (a mark of kltools.loc_marks, or a file of a dead variant)."""
        return node[0] in policy.dead_files or unit(node).mark in ("compile_step", "interpreter_only")

    via: dict = {}
    kernel_nodes = _closure([(here, k) for k in kernels], lambda n: node_refs(n, lambda p: set()),
                            lambda r: not unit(r).is_class and not blocked(r), via)
    kset = set(kernel_nodes)

    def is_device(node):
        u = unit(node)
        return node in kset or (u.decorated_kernel and not (node[0] == here and node[1] in host))

    knodes: dict[Path, set[int]] = {}

    def skip_of(path):
        if path not in knodes:
            ids: set[int] = set()
            for n, u in m(path).units.items():
                if is_device((path, n)):
                    ids.add(id(u.node))
                    if isinstance(u.node, ast.Module):      # a redefined name: both definitions
                        ids.update(id(b) for b in u.node.body)
            knodes[path] = ids
        return knodes[path]

    def host_ok(r):
        return r not in kset and not unit(r).decorated_kernel and r not in policy.barrier and not blocked(r)

    hvia: dict = {}
    start = [(here, h) for h in host if (here, h) not in policy.barrier and not blocked((here, h))]
    host_nodes = [n for n in _closure(start, lambda n: node_refs(n, skip_of), host_ok, hvia) if n not in kset]
    klines: dict[Path, set[int]] = {}
    hlines: dict[Path, set[int]] = {}
    for path, name in kernel_nodes:
        klines.setdefault(path, set()).update(m(path)._lines_of([name]))
    for path, name in host_nodes:
        hlines.setdefault(path, set()).update(m(path)._lines_of([name]))
    for path in hlines:
        # device code is never host code: a kernel method inside a host class is left out,
        # unless it is named as host itself
        dev = m(path)._lines_of(n for n, u in m(path).units.items() if is_device((path, n)) or (
            u.decorated_kernel and not (path == here and n in host)))
        hlines[path] = hlines[path] - klines.get(path, set()) - dev
    files = [here] + [p for p in dict.fromkeys(list(klines) + list(hlines)) if p != here]
    klabels, hlabels, spans = _py_spans(here, unit, kernel_nodes, host_nodes, via, hvia)
    return _Reach(klines, hlines, klabels, hlabels, tuple(files), spans)


# -- C++ / CUDA --------------------------------------------------------------------------------
_RAW_PREFIXES = {"R", "u8R", "uR", "UR", "LR"}
_STR_PREFIXES = {"u8", "u", "U", "L"}
_IDENT = re.compile(r"[A-Za-z_]\w*")
_ATTR_CALLS = {"__launch_bounds__", "__attribute__", "__declspec", "alignas", "__align__",
               "__cluster_dims__", "__maxnreg__", "__grid_constant__", "decltype", "noexcept"}
_STRUCT_KW = {"struct", "class", "union"}
_QUALIFIERS = {"const", "volatile", "noexcept", "override", "final", "throw", "requires",
               "mutable", "try"}


def _blank(buf: list, a: int, b: int, keep_quotes: bool = False) -> None:
    """Spaces over buf[a:b], newlines kept (``keep_quotes``: a literal keeps its two quotes)."""
    for k in range(a, b):
        if buf[k] != "\n":
            buf[k] = " "
    if keep_quotes and b - a >= 2:
        buf[a] = buf[b - 1] = '"'


def _line_comment_end(text: str, i: int) -> int:
    """End of the ``//`` comment at ``i``: the newline, past backslash-newline continuations."""
    n, j = len(text), i
    while j < n and text[j] != "\n":
        if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
            j += 2
            continue
        j += 1
    return j


def _block_comment_end(text: str, i: int) -> int:
    j = text.find("*/", i + 2)
    return len(text) if j < 0 else j + 2


def _directive_end(text: str, i: int, code: list) -> int:
    """End of the preprocessor directive at ``i`` (to the end of the line, with continuations);
    the comments inside it are blanked in ``code``."""
    n, j = len(text), i
    while j < n and text[j] != "\n":
        if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
            j += 2
            continue
        if text.startswith("//", j) or text.startswith("/*", j):
            k = _line_comment_end(text, j) if text[j + 1] == "/" else _block_comment_end(text, j)
            _blank(code, j, k)
            j = k
            continue
        if text[j] in "\"'":
            j = _skip_quoted(text, j)
            continue
        j += 1
    return j


def _number_end(text: str, i: int) -> int:
    n, j = len(text), i + 1
    while j < n and (text[j].isalnum() or text[j] in "_.'" or (text[j] in "+-" and text[j - 1] in "eEpP")):
        j += 1
    return j


def _word_end(text: str, i: int, masked: list) -> int:
    """End of the identifier at ``i``, or of the string literal it prefixes (blanked in ``masked``)."""
    n = len(text)
    m = _IDENT.match(text, i)
    j = m.end()
    word = m.group()
    if j < n and text[j] == '"' and word in _RAW_PREFIXES:
        end = _skip_raw(text, j)
    elif j < n and text[j] in "\"'" and word in _STR_PREFIXES:
        end = _skip_quoted(text, j)
    else:
        return j
    _blank(masked, i, end, keep_quotes=True)
    return end


def _lex_cpp(text: str) -> tuple[str, str]:
    """Return (code, masked), both the same length as ``text`` with newlines kept.

    code:   comments replaced by spaces (for counting lines).
    masked: also string/char literal contents and preprocessor directives blanked (for structure)."""
    n = len(text)
    code = list(text)
    masked = list(text)
    i = 0
    line_start = True          # only whitespace since the last (unspliced) newline
    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
        elif c in " \t\r\f\v":
            i += 1
        elif c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
        elif c == "/" and (text.startswith("//", i) or text.startswith("/*", i)):
            j = _line_comment_end(text, i) if text[i + 1] == "/" else _block_comment_end(text, i)
            _blank(code, i, j)
            _blank(masked, i, j)
            i = j
        elif c == "#" and line_start:
            j = _directive_end(text, i, code)
            _blank(masked, i, j)
            i = j
            line_start = False
        else:
            line_start = False
            if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
                i = _number_end(text, i)
            elif c.isalpha() or c == "_":
                i = _word_end(text, i, masked)
            elif c in "\"'":
                end = _skip_quoted(text, i)
                _blank(masked, i, end, keep_quotes=True)
                i = end
            else:
                i += 1
    return "".join(code), "".join(masked)


def _skip_quoted(text: str, i: int) -> int:
    q = text[i]
    j = i + 1
    n = len(text)
    while j < n:
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == q:
            return j + 1
        if ch == "\n":               # unterminated: stop at the end of the line
            return j
        j += 1
    return n


def _skip_raw(text: str, q: int) -> int:
    """``q`` is the index of the opening quote of R"delim( ... )delim"."""
    p = text.find("(", q + 1)
    if p < 0 or p - q - 1 > 16:
        return _skip_quoted(text, q)
    delim = text[q + 1:p]
    end = text.find(")" + delim + '"', p + 1)
    return len(text) if end < 0 else end + len(delim) + 2


@dataclass
class _CppUnit:
    name: str
    kind: str                # "global" | "device" | "host" | "struct"
    constexpr: bool
    start: int               # char offsets into the file
    end: int
    first: int = 0           # lines
    last: int = 0
    refs: set[str] = field(default_factory=set)
    file: Path | None = None


class _CppFile:
    def __init__(self, text: str, path: Path):
        self.path = path
        self.text = text
        self.code, self.masked = _lex_cpp(text)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        code_lines = self.code.split("\n")
        self.code_lines = frozenset(k + 1 for k, l in enumerate(code_lines) if l.strip())
        self.units: list[_CppUnit] = []
        self._parse()
        for u in self.units:
            u.file = path
        self.includes = [f for f in (path.parent / m.group(1) for m in
                                     re.finditer(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', text, re.M))
                         if f.is_file()]
        self.by_name: dict[str, list[_CppUnit]] = {}
        for u in self.units:
            self.by_name.setdefault(u.name, []).append(u)
            if "::" in u.name:
                self.by_name.setdefault(u.name.rsplit("::", 1)[1], []).append(u)

    def files(self) -> list[Path]:
        """This file and every project header it includes, transitively (quoted includes)."""
        out, todo = [], [self.path]
        while todo:
            f = todo.pop(0).resolve()
            if f in out:
                continue
            out.append(f)
            todo.extend(_module(f).includes if f != self.path else self.includes)
        return out

    def _line(self, offset: int) -> int:
        lo, hi = 0, len(self.line_starts)
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if self.line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid
        return lo + 1

    # tokens of the masked text: identifiers, '::', and single punctuation characters
    def _tokens(self):
        for m in re.finditer(r"[A-Za-z_]\w*|::|\d[\w.']*|\"[^\"\n]*\"|\S", self.masked):
            yield m.start(), m.group()

    def _parse(self) -> None:
        toks = list(self._tokens())
        self.toks = toks
        i = 0
        head_start = 0           # index of the first token of the current declaration head
        depth_stack: list[str] = []   # "ns" for namespace/extern blocks we descended into
        n = len(toks)
        paren = 0
        while i < n:
            off, t = toks[i]
            if t in "([":
                paren += 1
            elif t in ")]":
                paren = max(0, paren - 1)
            elif t == ";" and paren == 0:
                head_start = i + 1
            elif t == "}" and paren == 0:
                if depth_stack:
                    depth_stack.pop()
                head_start = i + 1
            elif t == "{":
                close = self._match_brace(toks, i)
                if paren > 0:                  # a braced default argument inside the head
                    i = close + 1
                    continue
                head = toks[head_start:i]
                kind = self._classify(head)
                if kind == "ns":
                    depth_stack.append("ns")
                    head_start = i + 1
                    i += 1
                    continue
                if kind is not None:
                    name, ukind, constexpr = kind
                    end_off = toks[close][0] + 1 if close < n else len(self.masked)
                    # a struct's terminating ';' (and any declarators) belong to it
                    if ukind == "struct":
                        k = close + 1
                        while k < n and toks[k][1] not in (";", "{", "}") and \
                                self._line(toks[k][0]) == self._line(toks[close][0]):
                            k += 1
                        if k < n and toks[k][1] == ";":
                            end_off = toks[k][0] + 1
                            close = k
                    u = _CppUnit(name, ukind, constexpr, head[0][0], end_off)
                    u.first, u.last = self._line(u.start), self._line(u.end - 1)
                    u.refs = {t for _, t in toks[head_start:close + 1] if _IDENT.fullmatch(t)}
                    self.units.append(u)
                i = close + 1
                head_start = i
                continue
            i += 1

    @staticmethod
    def _match_brace(toks, i: int) -> int:
        depth = 0
        for k in range(i, len(toks)):
            t = toks[k][1]
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
                if depth == 0:
                    return k
        return len(toks) - 1

    def _classify(self, head):
        """None (not a unit), "ns" (descend), or (name, kind, constexpr)."""
        words = [t for _, t in head]
        if not words:
            return None
        if words[0] == "namespace" or (words[:2] == ["inline", "namespace"]):
            return "ns"
        if words[0] == "extern" and len(words) == 2 and words[1].startswith('"'):
            return "ns"
        # drop template<...> groups, attribute calls and [[...]]
        toks: list[str] = []
        k = 0
        while k < len(words):
            w = words[k]
            if w == "template" and k + 1 < len(words) and words[k + 1] == "<":
                k = self._skip_group(words, k + 1, "<", ">")
                continue
            if w in _ATTR_CALLS and k + 1 < len(words) and words[k + 1] == "(":
                k = self._skip_group(words, k + 1, "(", ")")
                continue
            if w == "[" and k + 1 < len(words) and words[k + 1] == "[":
                k = self._skip_group(words, k, "[", "]")
                continue
            toks.append(w)
            k += 1
        if not toks:
            return None
        specs = set(toks)
        if toks[0] in ("typedef", "using", "enum") or (toks[0] == "extern" and "(" not in toks):
            return None
        # struct/class/union definition
        lead = [t for t in toks if t not in ("static", "inline", "extern", "typedef", "const",
                                             "constexpr", "volatile") and not t.startswith('"')]
        if lead and lead[0] in _STRUCT_KW:
            name = next((t for t in lead[1:] if _IDENT.fullmatch(t) and t not in _STRUCT_KW
                         and t != "final"), None)
            if name is None or "=" in toks:
                return None
            return name, "struct", False
        # function definition: the parameter list is the first '(' group at depth 0 (angles
        # included) that is not followed by another declarator, as after a macro attribute like
        # `KL_CLUSTER_DIMS(C) kernel(...)`; no '=' before it
        depth = 0
        k = -1
        while k + 1 < len(toks):
            k += 1
            w = toks[k]
            if w == "<":
                depth += 1
            elif w == ">" and depth:
                depth -= 1
            elif w == "=" and depth == 0:
                return None
            elif w == "(" and depth == 0:
                close = self._skip_group(toks, k, "(", ")")
                if close < len(toks) and _IDENT.fullmatch(toks[close]) and \
                        toks[close] not in _QUALIFIERS:
                    k = close - 1
                    continue
                name = self._name_before(toks, k)
                if name is None:
                    return None
                if "__global__" in specs:
                    kind = "global"
                elif "__device__" in specs:
                    kind = "device"
                else:
                    kind = "host"
                return name, kind, "constexpr" in specs or "consteval" in specs
        return None

    @staticmethod
    def _skip_group(words, k: int, open_: str, close: str) -> int:
        depth = 0
        while k < len(words):
            if words[k] == open_:
                depth += 1
            elif words[k] == close:
                depth -= 1
                if depth == 0:
                    return k + 1
            k += 1
        return k

    @staticmethod
    def _name_before(toks: list[str], k: int) -> str | None:
        j = k - 1
        if j >= 0 and toks[j] == ">":            # explicit specialisation f<T>(...)
            depth = 0
            while j >= 0:
                if toks[j] == ">":
                    depth += 1
                elif toks[j] == "<":
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            j -= 1
        if j < 0 or not _IDENT.fullmatch(toks[j]):
            return None
        name = toks[j]
        if j >= 1 and toks[j - 1] == "operator":
            name = "operator" + name
        while j >= 2 and toks[j - 1] == "::" and _IDENT.fullmatch(toks[j - 2]):
            name = f"{toks[j - 2]}::{name}"
            j -= 2
        return name

    def _lines_of(self, units) -> set[int]:
        out: set[int] = set()
        for u in units:
            out.update(range(u.first, u.last + 1))
        return out & self.code_lines


class _CppProgram:
    """A .cu/.cpp file together with the headers it includes: names resolve across all of them,
    so a kernel's count takes the helpers it calls from a shared header, and only those."""

    def __init__(self, main: _CppFile):
        self.main = main
        self.mods = [main] + [_module(f) for f in main.files()[1:]]
        self.by_name: dict[str, list[_CppUnit]] = {}
        for mod in self.mods:
            for name, us in mod.by_name.items():
                self.by_name.setdefault(name, []).extend(us)

    def analyze(self, kernels: tuple[str, ...] | None, host: tuple[str, ...]) -> _Reach:
        for arg, names in (("kernels", kernels or ()), ("host", host)):
            for nm in names:
                if nm not in self.main.by_name:
                    raise _unknown(self.main.path, arg, nm, self.main.by_name)
        if kernels is None:
            kernels = tuple(dict.fromkeys(u.name for u in self.main.units if u.kind == "global"))

        def refs(name):
            out: list[str] = []
            for u in self.by_name.get(name, []):
                for r in sorted(u.refs):
                    if r != name and r in self.by_name and r not in out:
                        out.append(r)
            return out

        def device_ok(r):
            return any(u.kind in ("device", "global", "struct") or u.constexpr for u in self.by_name[r])

        via: dict = {}
        kunits = _closure(kernels, refs, device_ok, via)
        kset = set(kunits)

        def host_ok(r):
            return r not in kset and any(u.kind in ("host", "struct") for u in self.by_name[r])

        hvia: dict = {}
        hunits = [n for n in _closure(host, refs, host_ok, hvia) if n not in kset]
        named = set(kernels) | set(host)

        def units_of(names, ok):
            # the named entry points are the main file's; of names reached, every file's ok ones
            return [u for n in names for u in self.by_name[n]
                    if (n in named and u.file == self.main.path) or (n not in named and ok(u))]

        kcount = units_of(kunits, lambda u: u.kind != "host" or u.constexpr)
        hcount = units_of(hunits, lambda u: u.kind in ("host", "struct"))
        klines: dict[Path, set[int]] = {}
        hlines: dict[Path, set[int]] = {}
        for us, into in ((kcount, klines), (hcount, hlines)):
            for u in us:
                mod = next(m for m in self.mods if m.path == u.file)
                into.setdefault(u.file, set()).update(mod._lines_of([u]))
        for f in hlines:
            hlines[f] -= klines.get(f, set())
        files = [self.main.path] + [f for f in dict.fromkeys(list(klines) + list(hlines)) if f != self.main.path]
        def why(u, parents, named):
            p = parents.get(u.name)
            return (f"{u.kind} named as {named} of the Source {_display(self.main.path, REPO_ROOT)}"
                    if p is None else f"{u.kind} reached from {p}")
        spans = tuple([(u.file, u.first, u.last, "kernel", u.name, why(u, via, "kernels")) for u in kcount]
                      + [(u.file, u.first, u.last, "host", u.name, why(u, hvia, "host"))
                         for u in hcount if u not in kcount])
        return _Reach(klines, hlines, tuple(dict.fromkeys(u.name for u in kcount)),
                      tuple(dict.fromkeys(u.name for u in hcount if u not in kcount)), tuple(files),
                      spans)
