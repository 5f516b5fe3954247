"""Marks the lines-of-code rule reads (``harness.loc``; docs/DESIGN.md, "Lines of code"). Each is an
identity decorator: nothing changes at run time; the counter reads the decorator's name.

* ``compile_step``: the function compiles kernels, loads compiled ones or keeps them (in memory or
  on disk). In Triton, Gluon, Helion and cuTile that work is inside the layer's own JIT, in CUDA
  C++ it is the build: where a layer does it in its own code, the mark keeps it out of the host
  column, so that no layer counts it.
* ``interpreter_only``: the function runs only under a CPU interpreter (never on a GPU).
* ``interpreter_flag``: the function answers "is a CPU interpreter running" (False on a GPU):
  the branch it guards (``if flag(): ...``, ``a if flag() else b``; ``not flag()`` the other
  way) counts nowhere.
"""
from __future__ import annotations


def compile_step(fn):
    return fn


def interpreter_only(fn):
    return fn


def interpreter_flag(fn):
    return fn


MARKS = ("compile_step", "interpreter_only", "interpreter_flag")
