"""The CUDA C++ layer's one planner entry: the tuning tables (plain data) and the rules that turn a
case into launch plans, for both launchers of the same ``.cu`` sources (the pybind11 module
``kl_cuda`` and NVRTC through CuPy). A plan names the kernel instance, its source file, grid,
block, dynamic shared memory, cluster size, cooperative launch, workspaces and the argument list;
the launchers only resolve names and pointers and enqueue it (``backends/cuda_layer.py``,
``backends/cupy_layer.py``).

One module a problem, each with its table, its kernels' signatures and instances, and its rules:
``dispatch_vector_add.py``, ``dispatch_softmax.py``, ``dispatch_gemm.py``, ``dispatch_attention.py``
(its kernels candidates: not in ``VARIANTS`` until a GPU has run them); what they share (the
device, ``Plan``, ``Launches``, ``Decline``) is ``dispatch_common.py``. This module gathers them
(``from cuda_src import dispatch``: ``dispatch.plan_softmax``, ``dispatch.SOFTMAX``...), packs
arguments by signature, and is what the build runs as a script to emit the instance tables of the
module (``--emit-instances DIR``), so the kernels the planner can pick and the kernels the module
contains are one list.

Pure Python (no torch, no CUDA): it plans without a GPU for an assumed device (``H200``), which is
what ``compile_only``, ``grid`` and the tests use; a ``Device`` describes another GPU.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

if __package__ in (None, ""):   # run as a script by the build (CMakeLists.txt): the package's modules
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "cuda_src"

from . import dispatch_attention, dispatch_gemm, dispatch_softmax, dispatch_vector_add  # noqa: E402
from .dispatch_attention import ATTENTION, ATTENTION_PATHS, plan_attention  # noqa: E402
from .dispatch_common import (ACT_CODE, CTYPE, DTYPE_CODE, ESIZE, H200, REGS_PER_SM,  # noqa: E402
                              THREADS_PER_SM, Decline, Device, Launches, Plan, device_of, family)
from .dispatch_gemm import (GEMM, GEMM_PATHS, PP_SMEM, SIMPLE_TILE, SMEM_PER_CTA_RESERVED,  # noqa: E402
                            GemmCase, plan_gemm, tiled_ctas_per_sm, tiled_smem, ws_smem)
from .dispatch_softmax import (REGS, SOFTMAX, SOFTMAX_PATHS, RowCase, plan_softmax,  # noqa: E402
                               rows_min_blocks)
from .dispatch_vector_add import VECTOR_ADD, VECTOR_ADD_PATHS, plan_vector_add  # noqa: E402

__all__ = ["ACT_CODE", "ALIGN", "ATTENTION", "ATTENTION_PATHS", "CTYPE", "DTYPE_CODE", "ESIZE", "GEMM",
           "GEMM_PATHS", "H200", "PP_SMEM", "REGS", "REGS_PER_SM", "SIGNATURES", "SIMPLE_TILE",
           "SMEM_PER_CTA_RESERVED", "SOFTMAX", "SOFTMAX_PATHS", "THREADS_PER_SM", "VECTOR_ADD",
           "VECTOR_ADD_PATHS", "Decline", "Device", "GemmCase", "Launches", "Plan", "RowCase", "emit_instances",
           "family", "instances", "pack", "plan_attention", "plan_gemm", "plan_softmax", "plan_vector_add", "plan",
           "device_of", "rows_min_blocks", "source_of", "tiled_ctas_per_sm", "tiled_smem",
           "VARIANTS", "ws_smem"]

PROBLEMS = (dispatch_vector_add, dispatch_softmax, dispatch_gemm, dispatch_attention)


# ---------------------------------------------------------------------------------------------------
# kernel instances (the module's table and NVRTC's name expressions) and argument signatures

SIGNATURES = {k: v for m in PROBLEMS for k, v in m.SIGNATURES.items()}


def instances() -> dict[str, list[str]]:
    """{source file: [instance, ...]}: every kernel instance a plan can name, by source."""
    return {src: names for m in PROBLEMS for src, names in m.instances().items()}


#: each kernel family's source file (from the instance tables)
KERNEL_FILE = {family(k): src for src, names in instances().items() for k in names}


def source_of(kernel: str) -> str:
    for src, names in instances().items():
        if kernel in names:
            return src
    raise KeyError(f"kernel: {kernel} is not an instance of any cuda_src file")


ALIGN = {"ptr": 8, "i64": 8, "i32": 4, "tma": 64}
FMT = {"ptr": "<Q", "i64": "<q", "i32": "<i"}


def pack(plan: Plan, pointers: dict, encode_tma=None) -> tuple[bytes, list[int]]:
    """The argument values of ``plan`` packed each at its natural alignment: (blob, offsets).
    ``pointers`` maps buffer names to device addresses; ``encode_tma(ptr, rows, cols, ld, box_rows,
    box_cols[, outer]) -> 128 bytes`` encodes TMA descriptors (``outer``: further (size, stride)
    dimensions, boxes of 1: attention's (D, S, H, B) views)."""
    sig = SIGNATURES[family(plan.kernel)]
    if len(sig) != len(plan.args):
        raise ValueError(f"args: {plan.kernel} takes {len(sig)} arguments, the plan has {len(plan.args)}")
    blob = bytearray()
    offsets = []
    for want, (typ, val) in zip(sig, plan.args):
        if typ != want:
            raise ValueError(f"args: {plan.kernel} expects {want}, the plan gives {typ}")
        pad = -len(blob) % ALIGN[typ]
        blob += b"\0" * pad
        offsets.append(len(blob))
        if typ == "tma":
            buf, *dims = val
            desc = encode_tma(pointers[buf], *dims)
            if len(desc) != 128:
                raise ValueError("encode_tma: a CUtensorMap is 128 bytes")
            blob += desc
        elif typ == "ptr":
            blob += struct.pack("<Q", pointers[val] if isinstance(val, str) else int(val))
        else:
            blob += struct.pack(FMT[typ], int(val))
    return bytes(blob), offsets


# ---------------------------------------------------------------------------------------------------
# the layer contract (kltools.plan): variants by algorithm word, plan(problem, facts) -> Plan

def _src(file: str, *kernels: str):
    from kltools.plan import Source
    return (Source(f"cuda_src/{file}", kernels=kernels),)


#: the variants the default plans among, by algorithm word (docs/DESIGN.md): their kernel files and
#: entry points (the launchers, backends/cuda_layer.py and backends/cupy_layer.py, bind every plan)
VARIANTS = {
    "vector_add": {"unmasked": _src("vector_add_unmasked.cu", "vector_add_unmasked_kernel")},
    "softmax": {w: _src(f"softmax_{w}.cu", f"softmax_{w}_kernel")
                for w in ("warp", "block", "rows", "smem", "split", "online")},
    "gemm_epilogue": {"tiled": _src("gemm_epilogue_tiled.cu", "gemm_tiled_kernel"),
                      "ws": _src("gemm_epilogue_ws.cu", "gemm_ws_kernel"),
                      "splitk": _src("gemm_epilogue_ws.cu", "gemm_ws_kernel")
                      + _src("gemm_epilogue_splitk.cu", "gemm_splitk_reduce_kernel"),
                      "pingpong": _src("gemm_epilogue_pingpong.cu", "gemm_pingpong_kernel")},
    # the fourth problem's words and rules are dispatch_attention.py's
    "attention": dispatch_attention.VARIANTS,
}
#: the planner's path names that are no word of their own (split-K on the tiled kernel: the
#: id that runs it is cuda:gemm_epilogue_tiled, with splits)
_WORD = {"tiled_splitk": "tiled", "pingpong_c2": "pingpong"}


def _ld(op, cols: int) -> int:
    """A 2-d operand's row stride as the launchers pass it (one row: its length)."""
    return max(op.strides[0], 1) if op.shape[0] > 1 else max(cols, 1)


def launches_for(problem: str, facts) -> Launches:
    """The default's ``Launches`` for a case given as ``kltools.plan.Facts``."""
    dev, ops, dt = device_of(facts.device), facts.operands, facts.dtype
    if problem == "vector_add":
        return plan_vector_add("auto", facts.N, dt, ops["x"].addr16, ops["y"].addr16, ops["out"].addr16, dev)
    if problem == "softmax":
        x, out = ops["x"], ops["out"]
        return plan_softmax("auto", facts.M, facts.N, dt, _ld(x, facts.N), _ld(out, facts.N), x.addr16,
                            out.addr16, dev)
    if problem == "gemm_epilogue":
        a, b, c = ops["a"], ops["b"], ops["out"]
        return plan_gemm("auto", facts.M, facts.N, facts.K, dt, facts.params.get("act", "relu"), "bias" in ops,
                         _ld(a, facts.K), _ld(b, facts.N), _ld(c, facts.N), a.addr16, b.addr16, c.addr16, dev)
    raise ValueError(f"problem: {problem!r} is not one of {', '.join(VARIANTS)}")


def plan(problem: str, facts):
    """The default's plan (``cuda:<problem>``, ``cupy:<problem>``) for one case: the variant, the
    launches' configuration, why, and the kernel files and entry points it launches."""
    from kltools.plan import Plan, Source
    if problem == "attention":
        return dispatch_attention.plan(problem, facts)
    ls = launches_for(problem, facts)
    path = ls.info.get("path", "")
    word = _WORD.get(path, path)
    if ls.plans and word not in VARIANTS[problem]:
        raise ValueError(f"plan: path {path!r} of {problem} is no word of VARIANTS")
    srcs = tuple(dict.fromkeys(Source(f"cuda_src/{KERNEL_FILE[family(p.kernel)]}", kernels=(family(p.kernel),))
                               for p in ls.plans))
    if not ls.plans:   # an empty output: nothing to launch
        word = next(iter(VARIANTS[problem]))
    return Plan(problem, word, dict(ls.info), ls.info.get("why", ""), srcs)


# ---------------------------------------------------------------------------------------------------
# build support: the module's instance tables

def emit_instances(out_dir: str) -> list[str]:
    """Write one translation unit per kernel source: it includes the source and registers every
    instance in the module's table under the planner's name. Returns the files written."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for src, names in instances().items():
        lines = [f"// generated by cuda_src/dispatch.py --emit-instances: the instances of {src}",
                 f'#include "{src}"', '#include "kl_registry.h"', "", "namespace {",
                 "const kl::KernelEntry kEntries[] = {"]
        for n in names:
            lines.append(f'    {{"{n}", (const void*)&kl::{n}}},')
        lines += ["};", "const kl::KernelRegistrar kRegistrar(kEntries, sizeof(kEntries) / sizeof(kEntries[0]));",
                  "}  // namespace", ""]
        p = d / (Path(src).stem + "_instances.cu")
        text = "\n".join(lines)
        if not p.is_file() or p.read_text() != text:
            p.write_text(text)
        written.append(str(p))
    for stale in d.glob("*_instances.cu"):
        if str(stale) not in written:
            stale.unlink()
    return written


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--emit-instances":
        for f in emit_instances(sys.argv[2]):
            print(f)
    else:
        print("usage: python cuda_src/dispatch.py --emit-instances DIR", file=sys.stderr)
        sys.exit(2)
