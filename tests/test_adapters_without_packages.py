"""Every layer's adapter imports cleanly without its package: its implementations stay registered
(with the same sources, so the same lines of code) and ``available()`` says in one line which
package is missing (docs/DESIGN.md: "an adapter must
import cleanly when its runtime is missing").

Each layer runs in a fresh interpreter whose import system refuses that layer's packages (a
meta-path finder raising ModuleNotFoundError for them, as on a machine where they are not
installed); only that layer's adapter modules are imported there."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import backends
from harness import loc, registry

ROOT = Path(__file__).resolve().parent.parent

#: backends.LAYERS name -> (the packages hidden, the layer names its implementations register)
PACKAGES = {
    "cuda": (("kl_cuda", "kl_cuda_build"), ("cuda",)),
    "cupy": (("cupy", "cupy_backends"), ("cupy",)),
    "triton": (("triton",), ("triton",)),
    "gluon": (("triton.experimental.gluon",), ("gluon",)),
    "cute": (("cutlass",), ("cute",)),
    "helion": (("helion",), ("helion",)),
    "tilelang": (("tilelang",), ("tilelang",)),
    "cutile": (("cuda.tile",), ("cutile",)),
    "libraries": (("quack", "liger_kernel"), ("quack", "liger")),
}
#: layers whose package cannot be hidden, with the reason
NOT_HIDDEN = {"torch": "torch is the harness's own dependency (tensors at every boundary): no "
                       "adapter can run without it"}

_CHILD = r'''
import importlib, importlib.abc, json, sys
hidden = tuple(json.loads(sys.argv[1]))

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == h or name.startswith(h + ".") for h in hidden):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
from harness import loc, registry
errors = {}
for mod in json.loads(sys.argv[2]):
    try:
        importlib.import_module("backends." + mod)
    except Exception as e:
        errors[mod] = f"{type(e).__name__}: {e}"
impls = list(registry._IMPLS.values()) + list(registry._CANDIDATES.values())


def _loc(impl):
    d = loc.count_impl(impl) if impl.sources else {}
    return [d.get("kernel"), d.get("host"), d.get("plan")]


layers = set(json.loads(sys.argv[3]))
mine = [i for i in impls if i.layer in layers]
print("RESULT " + json.dumps({"errors": errors,
                              "impls": {i.id + "@" + i.problem: i.available() for i in mine},
                              "loc": {i.id + "@" + i.problem: _loc(i) for i in mine},
                              "derived": {i.id + "@" + i.problem: hasattr(i.sources, "plan") for i in mine}}))
'''


def test_every_layer_is_listed():
    assert set(PACKAGES) | set(NOT_HIDDEN) == {name for name, _ in backends.LAYERS}


@pytest.mark.parametrize("layer", sorted(PACKAGES))
def test_adapter_imports_without_its_package(layer, tmp_path):
    hidden, layer_names = PACKAGES[layer]
    modules = dict(backends.LAYERS)[layer]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(hidden), json.dumps(list(modules)),
                        json.dumps(list(layer_names))], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert got["errors"] == {}, got["errors"]
    want = {i.id + "@" + i.problem for i in registry.all_impls() + registry.candidates()
            if i.layer in layer_names}
    assert set(got["impls"]) == want, sorted(set(got["impls"]) ^ want)
    # the same sources, so the same lines of code, as on a machine with the package; a default
    # whose Sources its planner derives (harness.planned) cannot run that planner without the
    # package: it counts every variant it has, so at least the kernels the planner chooses
    mine = {i.id + "@" + i.problem: i for i in registry.all_impls() + registry.candidates()
            if i.layer in layer_names}
    for iid, counted in got["loc"].items():
        d = loc.count_impl(mine[iid]) if mine[iid].sources else {}
        want = [d.get("kernel"), d.get("host"), d.get("plan")]
        if got["derived"][iid] and not hasattr(mine[iid].sources, "plan"):
            raise AssertionError(f"{iid}: derived from its planner only without the package")
        if hasattr(mine[iid].sources, "plan") and not got["derived"][iid]:
            assert counted[0] >= want[0], (iid, counted, want)
        else:
            assert counted == want, iid
    for iid, why in got["impls"].items():
        assert isinstance(why, str) and why.strip() and "\n" not in why, (iid, why)
        assert any(h.split(".")[0] in why or h in why for h in hidden), (iid, why)
