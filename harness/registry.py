"""The registry: every implementation of every layer, behind one interface.

Public API (plugins use exactly this)::

    from harness import register

    @register(problem="softmax", layer="plugin", name="mine")
    def prepare(case, inputs, out):
        (x,) = inputs
        def launch():
            out.copy_(torch.softmax(x.float(), dim=-1).to(out.dtype))
        return launch

Backends pass more keywords: ``description``, ``sources`` (for the LOC counter), ``available``
(``() -> None | reason``), ``supports`` (``(case) -> None | reason``), ``devices`` (``"cuda"``,
``"cpu"``), ``compile_only`` (``(case) -> dict`` of compile facts, used without a GPU),
``baseline`` (the eager op the speed-up column is relative to), ``role``.

Naming (the same in every layer): a layer's default implementation of a problem - the one the
headline summary uses, which must run every valid case - is ``layer:<problem>`` (``cuda:softmax``,
``triton:gemm_epilogue``); its teaching twin, the shortest correct kernel, is
``layer:<problem>_simple``; tuned variants are ``layer:<problem>_<algorithm>`` with one word per
algorithm across layers (``softmax_split``, ``softmax_online``, ``gemm_epilogue_pingpong``...).
``role`` follows from the name (``default``, ``simple``, ``variant``; ``baseline`` for the eager op
the speed-up column divides by) unless given.
"""
from __future__ import annotations

import importlib.util
import sys
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

ROLES = ("baseline", "default", "simple", "variant", "library")


@dataclass
class LayerInfo:
    """What an adapter tells the harness about its layer (the harness names no layer itself):
    its place in tables, its colour in plots, and how ``inspect`` gets its compile artifacts."""

    name: str
    order: int = 50
    colour: str | None = None
    #: ``artifacts(impl, case, art)`` writes the layer's compile artifacts (harness.inspect_cmd)
    artifacts: Callable | None = None
    #: ptxas facts only for the kernels the implementation's sources name (a module holds many)
    ptxas_named_kernels: bool = False
    #: why the layer has no kernel source to inspect (a library's own kernels)
    no_source: str | None = None
    #: whether compile_only(case) fills the disk cache the GPU's prepare reads (on an sm_90 GPU),
    #: so that compare's compile-ahead pool builds the layer's kernels on every CPU core
    #: (harness.ahead); off for a layer built at install time or whose GPU path compiles anew
    compile_ahead: bool = True


_LAYER_INFO: dict[str, LayerInfo] = {}


def describe_layer(name: str, **info) -> LayerInfo:
    """Declare (or add to) a layer's description; adapters call this at import."""
    cur = _LAYER_INFO.get(name) or LayerInfo(name)
    for k, v in info.items():
        if not hasattr(cur, k):
            raise TypeError(f"describe_layer: unknown field {k!r}")
        setattr(cur, k, v)
    _LAYER_INFO[name] = cur
    return cur


def layer_info(name: str) -> LayerInfo:
    load_backends()
    return _LAYER_INFO.get(name) or LayerInfo(name)


def role_of(problem: str, name: str, baseline: bool = False) -> str:
    """The role a name implies: ``<problem>`` is the default, ``<problem>_simple`` the twin."""
    if baseline:
        return "baseline"
    if name == problem:
        return "default"
    if name == f"{problem}_simple":
        return "simple"
    return "variant"


# where the LOC counter looks (the kernel folders name their variants' files with it too)
from kltools.plan import Source  # noqa: E402


def planned_sources(variants, reachable, common=()) -> list[Source]:
    """A default's Sources from a list of the variants it may run: the Sources of each variant in
    ``reachable``, then ``common`` (the host and planner Sources every variant shares). What a
    layer whose planner cannot be imported (its package missing) counts; a layer's default is
    derived from its planner instead (``harness.planned``, harness/loc_plan.py).

    ``variants`` maps a variant name to its Source or Sources (a table of every variant the layer
    has); a reachable variant missing from it is a ValueError naming it."""
    if not hasattr(variants, "items"):
        raise TypeError(f"variants: expected a mapping of variant -> Source(s), got {type(variants).__name__}")
    reach = [reachable] if isinstance(reachable, str) else list(reachable)
    if not reach:
        raise ValueError("reachable: the planner chooses no variant")
    out: list[Source] = []
    for v in reach:
        if v not in variants:
            raise ValueError(f"reachable: the planner can choose {v!r}, which has no Sources here "
                             f"(known: {', '.join(sorted(variants))})")
        srcs = variants[v]
        for src in ([srcs] if isinstance(srcs, Source) else list(srcs)):
            if not isinstance(src, Source):
                raise TypeError(f"variants[{v!r}]: expected Source objects, got {src!r}")
            out.append(replace(src, variant=v))
    for src in common:
        if not isinstance(src, Source):
            raise TypeError(f"common: expected Source objects, got {src!r}")
        out.append(src)
    return out


@dataclass
class Implementation:
    problem: str
    layer: str
    name: str
    prepare: Callable
    description: str = ""
    sources: tuple[Source, ...] = ()
    devices: tuple[str, ...] = ("cuda",)
    available_fn: Callable[[], str | None] | None = None
    supports_fn: Callable[..., str | None] | None = None
    compile_only_fn: Callable | None = None
    baseline: bool = False
    role: str = "variant"  # baseline | default | simple | variant (see the module docstring)
    origin: str = ""  # module or plugin file that registered it
    extra: dict = field(default_factory=dict)
    #: the ``backends`` module whose import registered it (None: a plugin); a worker process
    #: imports only the adapters of the implementations it runs (``load_backends(modules)``)
    adapter: str | None = None

    @property
    def id(self) -> str:
        return f"{self.layer}:{self.name}"

    @property
    def key(self) -> str:
        return f"{self.problem}/{self.id}"

    def available(self) -> str | None:
        if self.available_fn is None:
            return None
        try:
            return self.available_fn()
        except Exception as e:  # an availability probe must never take the run down
            return f"availability check failed: {type(e).__name__}: {e}"

    def supports(self, case) -> str | None:
        if self.supports_fn is None:
            return None
        return self.supports_fn(case)


_IMPLS: dict[str, Implementation] = {}
_CANDIDATES: dict[str, Implementation] = {}   # built, not yet run on a GPU (register(candidate=True))
_current_origin: list[str] = []
_admitting = False   # admit_candidates() was called: a candidate registered later is admitted too


def register(problem: str, layer: str, name: str, *, description: str = "",
             sources: Sequence[Source] = (), devices: Sequence[str] = ("cuda", "cpu"),
             available: Callable | None = None, supports: Callable | None = None,
             compile_only: Callable | None = None, baseline: bool = False,
             role: str | None = None, candidate: bool = False, **extra):
    """Decorator registering ``prepare(case, inputs, out) -> launch`` as ``layer:name`` for ``problem``.

    A plugin's implementation runs wherever its tensors are (``devices`` defaults to both).

    ``candidate=True`` keeps an experiment out of the registry: a kernel no GPU has run yet whose
    place among the layer's ids is not settled (a mechanism that may become a config of an
    existing id once measured). It is no implementation of the tool (no id in ``list``,
    ``verify`` or ``compare``, no word rule); only the layer's GPU script reaches it, by
    ``get(..., candidates=True)``. A registered variant whose code no GPU has run yet says so in
    its description."""
    from . import problems

    problems.get(problem)  # ValueError naming an unknown problem
    if role is not None and role not in ROLES:
        raise ValueError(f"role: {role!r} is not one of {', '.join(ROLES)}")
    for arg, val in (("layer", layer), ("name", name)):
        if not isinstance(val, str) or not val or ":" in val or "/" in val or val.strip() != val:
            raise ValueError(f"{arg}: must be a non-empty name without ':' or '/', got {val!r}")

    def deco(fn: Callable) -> Callable:
        if not callable(fn):
            raise TypeError(f"register: {fn!r} is not callable")
        impl = Implementation(problem=problem, layer=layer, name=name, prepare=fn,
                              description=description or (fn.__doc__ or "").strip().split("\n")[0],
                              sources=sources if hasattr(sources, "plan") else tuple(sources),
                              devices=tuple(devices),
                              available_fn=available, supports_fn=supports,
                              compile_only_fn=compile_only, baseline=baseline,
                              role=role or role_of(problem, name, baseline),
                              origin=_current_origin[-1] if _current_origin else fn.__module__,
                              extra=dict(extra), adapter=_adapter_of(fn))
        if candidate:
            _CANDIDATES[impl.key] = impl
            if not _admitting or impl.key in _IMPLS:
                return fn
        if impl.key in _IMPLS and _IMPLS[impl.key].origin != impl.origin:
            raise ValueError(f"register: {impl.id} ({problem}) from {impl.origin} clashes with the "
                             f"{impl.id} registered by {_IMPLS[impl.key].origin}; choose another name")
        _IMPLS[impl.key] = impl
        return fn

    return deco


# -- loading -----------------------------------------------------------------------------------
_loaded_backends = False
_loaded_modules: set[str] = set()
_loaded_packages: set[str] = set()   # the adapter packages imported (their modules name their rows)
_loading: list[str] = []     # the adapter being imported now (Implementation.adapter)
BACKEND_ERRORS: dict[str, str] = {}
#: the entry-point group that names adapter packages (pyproject.toml, [project.entry-points]):
#: the harness imports no layer by name; a package of another distribution may add layers too
ADAPTER_GROUP = "kernel_layers.adapters"


def adapter_packages() -> list[str]:
    """The adapter packages to load, in order: the ``kernel_layers.adapters`` entry points of the
    installed distributions, and -- run from a checkout, where the installed metadata may be
    older or missing -- the same table of the checkout's ``pyproject.toml``."""
    from importlib.metadata import entry_points

    names = [ep.value for ep in entry_points(group=ADAPTER_GROUP)]
    pp = Path(__file__).resolve().parent.parent / "pyproject.toml"
    if pp.is_file():
        import tomllib
        table = tomllib.loads(pp.read_text()).get("project", {}).get("entry-points", {})
        names += list(table.get(ADAPTER_GROUP, {}).values())
    return list(dict.fromkeys(names))


def load_backends(modules=None) -> None:
    """Import every adapter module the adapter packages declare (each package's ``ADAPTERS``, in
    order; ``modules``: only these, e.g. ``["backends.cute_layer"]`` - what a worker that runs only
    those rows needs); one whose file is missing or fails to import is recorded in
    ``BACKEND_ERRORS``, not fatal."""
    global _loaded_backends
    if _loaded_backends:
        return
    wanted = None if modules is None else set(modules)
    for pkg_name in adapter_packages():
        try:
            pkg = importlib.import_module(pkg_name)
        except Exception as e:
            BACKEND_ERRORS[pkg_name] = f"{type(e).__name__}: {e}"
            continue
        _loaded_packages.add(pkg_name)
        here = Path(pkg.__file__).parent
        for mod in getattr(pkg, "ADAPTERS", ()):
            full = f"{pkg_name}.{mod}"
            if (wanted is not None and full not in wanted) or full in _loaded_modules:
                continue
            _loaded_modules.add(full)
            if not (here / f"{mod}.py").is_file():
                BACKEND_ERRORS[mod] = f"declared in {pkg_name}.ADAPTERS but {pkg_name}/{mod}.py does not exist"
                continue
            _loading.append(full)
            try:
                importlib.import_module(full)
            except Exception as e:
                BACKEND_ERRORS[mod] = f"{type(e).__name__}: {e}"
            finally:
                _loading.pop()
    _loaded_backends = wanted is None


def _adapter_of(fn) -> str | None:
    """The adapter module registering ``fn``: its own module when that is an adapter module (also
    when another adapter's import brought it in), else the adapter being loaded."""
    mod = getattr(fn, "__module__", "") or ""
    if mod.rsplit(".", 1)[0] in _loaded_packages and not _current_origin:
        return mod
    return _loading[-1] if _loading and not _current_origin else None


def adapters_of(impls) -> list[str]:
    """The adapter modules that register ``impls`` (what a worker running them imports)."""
    return sorted({i.adapter for i in impls if i.adapter})


class PluginError(ValueError):
    """A plugin file that is missing or fails to load (a ValueError: the CLI's one-line error)."""


_loaded_plugins: dict[str, str] = {}


def load_plugin(path: str | Path, with_backends: bool = True) -> None:
    """Execute a plugin file so that its ``@register`` calls land in the registry (after the
    built-ins: a plugin cannot take over one of their ids; ``with_backends=False`` in a worker,
    whose parent checked that already and which imports only the adapters it needs)."""
    p = Path(path)
    if not p.is_file():
        raise PluginError(f"--plugin: no such file: {path}")
    if with_backends:
        load_backends()
    key = str(p.resolve())
    if key in _loaded_plugins:
        return
    modname = f"kl_plugin_{len(_loaded_plugins)}_{p.stem}"
    spec = importlib.util.spec_from_file_location(modname, p)
    if spec is None or spec.loader is None:
        raise PluginError(f"--plugin: cannot load {path} as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    _current_origin.append(key)
    try:
        spec.loader.exec_module(module)
    except SystemExit as e:
        raise PluginError(f"--plugin {path}: called exit({e.code}) while loading") from None
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"{f.filename}:{f.lineno}" for f in reversed(tb) if f.filename == str(p)), str(p))
        raise PluginError(f"--plugin {path}: failed at {where}: {type(e).__name__}: {e}") from None
    finally:
        _current_origin.pop()
    _loaded_plugins[key] = modname


def load_plugins(paths, with_backends: bool = True) -> None:
    """``load_plugin`` for each of ``paths`` (the ``--plugin`` options of any command)."""
    for p in paths or ():
        load_plugin(p, with_backends)


def all_impls() -> list[Implementation]:
    load_backends()
    return list(_IMPLS.values())


def select(problem: str | None = None, layer: str | None = None,
           impl: Sequence[str] | str | None = None) -> list[Implementation]:
    """Filter the registry; unknown names raise ValueError naming the argument."""
    from . import problems

    impls = all_impls()
    if problem is not None:
        problems.get(problem)
        impls = [i for i in impls if i.problem == problem]
    if layer is not None:
        layers = sorted({i.layer for i in all_impls()} | set(_LAYER_INFO))
        if layer not in layers:
            raise ValueError(f"--layer: unknown layer {layer!r}; known: {', '.join(layers)}")
        impls = [i for i in impls if i.layer == layer]
    if impl:
        wanted = [impl] if isinstance(impl, str) else list(impl)
        known = {i.id for i in all_impls()}
        for w in wanted:
            if w not in known:
                raise ValueError(f"--impl: unknown implementation {w!r}; ids look like layer:name, "
                                 f"e.g. {', '.join(sorted(known)[:4])} (see `python -m harness list`)")
        impls = [i for i in impls if i.id in wanted]
    return sorted(impls, key=lambda i: (i.problem, layer_info(i.layer).order, i.layer, i.name))


def candidates() -> list[Implementation]:
    """The kernels registered with ``candidate=True`` (built, not yet run on a GPU)."""
    load_backends()
    return list(_CANDIDATES.values())


def get(problem: str, impl_id: str, candidates: bool = False) -> Implementation:
    key = f"{problem}/{impl_id}"
    if key not in _IMPLS:   # (a worker loads only its adapters: those of its rows)
        load_backends()
    if candidates and key not in _IMPLS and key in _CANDIDATES:
        return _CANDIDATES[key]
    if key not in _IMPLS:
        raise ValueError(f"impl: {impl_id!r} is not registered for problem {problem!r}")
    return _IMPLS[key]


def admit_candidates() -> list[Implementation]:
    """Move every candidate into the registry of this process (``python -m harness check`` does
    this in its own process and, through the plugin ``harness/admit_candidates.py``, in each of
    its workers), so that a GPU run can verify and time the experiments beside the ids; a candidate
    registered later (an adapter imported after this, as a worker imports only those of its rows)
    is admitted as it registers. Returns the candidates admitted now."""
    global _admitting
    _admitting = True
    admitted = []
    for key, impl in list(_CANDIDATES.items()):
        if key not in _IMPLS:
            _IMPLS[key] = impl
            admitted.append(impl)
    return admitted
