"""The CUDA C++ layer's one planner entry: the tuning tables (plain data) and the rules that turn a
case into launch plans, for both launchers of the same ``.cu`` sources (the pybind11 module
``kl_cuda`` and NVRTC through CuPy). A plan names the kernel instance, its source file, grid,
block, dynamic shared memory, cluster size, cooperative launch, workspaces and the argument list;
the launchers only resolve names and pointers and enqueue it (``backends/cuda_layer.py``,
``backends/cupy_layer.py``).

One module a problem, each with its table, its kernels' signatures and instances, and its rules:
``dispatch_vector_add.py``, ``dispatch_softmax.py``, ``dispatch_gemm.py``; what they share (the
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

from . import dispatch_gemm, dispatch_softmax, dispatch_vector_add  # noqa: E402
from .dispatch_common import (ACT_CODE, CTYPE, DTYPE_CODE, ESIZE, H200, REGS_PER_SM,  # noqa: E402
                              THREADS_PER_SM, Decline, Device, Launches, Plan, family)
from .dispatch_gemm import (GEMM, GEMM_PATHS, PP_SMEM, SIMPLE_TILE, SMEM_PER_CTA_RESERVED,  # noqa: E402
                            GemmCase, plan_gemm, tiled_ctas_per_sm, tiled_smem, ws_smem)
from .dispatch_softmax import (REGS, SOFTMAX, SOFTMAX_NEXT, SOFTMAX_PATHS, RowCase, plan_softmax,  # noqa: E402
                               rows_min_blocks, switched)
from .dispatch_vector_add import VECTOR_ADD, VECTOR_ADD_PATHS, plan_vector_add  # noqa: E402

__all__ = ["ACT_CODE", "ALIGN", "CTYPE", "DTYPE_CODE", "ESIZE", "GEMM", "GEMM_PATHS", "H200", "PP_SMEM", "REGS",
           "REGS_PER_SM", "SIGNATURES", "SIMPLE_TILE", "SMEM_PER_CTA_RESERVED", "SOFTMAX", "SOFTMAX_NEXT",
           "SOFTMAX_PATHS", "THREADS_PER_SM", "VECTOR_ADD", "VECTOR_ADD_PATHS", "Decline", "Device", "GemmCase",
           "Launches", "Plan", "RowCase", "emit_instances", "family", "instances", "pack", "plan_gemm",
           "plan_softmax", "plan_vector_add", "reachable", "rows_min_blocks", "source_of", "switched",
           "tiled_ctas_per_sm", "tiled_smem", "ws_smem"]

PROBLEMS = (dispatch_vector_add, dispatch_softmax, dispatch_gemm)


def reachable(problem: str) -> tuple[str, ...]:
    """The paths the ``auto`` planner of ``problem`` can choose (read from its rules' tables): the
    default's lines of code count these and only these (harness.planned_sources). Softmax: the
    resident-bytes order, then smem, split and the online fallback (_softmax_auto); GEMM: the
    tiled kernel (with its split-K reduction when GEMM["tiled_splitk"]), ws split-K, ping-pong, ws
    and B repacked for TMA (_gemm_auto)."""
    if problem == "vector_add":
        return ("unmasked",)
    if problem == "softmax":
        return tuple(dict.fromkeys((*SOFTMAX["order"], *(("cluster",) if SOFTMAX["cluster_long"] else ()),
                                    "smem", "split", "online")))
    if problem == "gemm_epilogue":
        return ("tiled", "splitk", "pingpong", "ws", "repack")
    raise ValueError(f"problem: {problem!r} has no CUDA planner")

# ---------------------------------------------------------------------------------------------------
# kernel instances (the module's table and NVRTC's name expressions) and argument signatures

SIGNATURES = {k: v for m in PROBLEMS for k, v in m.SIGNATURES.items()}


def instances() -> dict[str, list[str]]:
    """{source file: [instance, ...]}: every kernel instance a plan can name, by source."""
    return {src: names for m in PROBLEMS for src, names in m.instances().items()}


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
    box_cols) -> 128 bytes`` encodes TMA descriptors."""
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
