"""CuPy adapter for attention: the SAME ``cuda_src/attention*.cu`` kernels compiled by NVRTC and
launched through the driver API on torch's current stream (``backends/cupy_layer.py``), from the
SAME plans and validation as the CUDA C++ rows (``backends/cuda_attention.py``). Rows
``cupy:attention`` and ``cupy:attention_simple`` (verified on the H200, 2026-12-06); without a
GPU ``compile_only`` compiles the planned instance through NVRTC for sm_90a (ptxas facts).
"""
from __future__ import annotations

from backends.cuda_attention import (DESCRIPTIONS, ROWS, attention_launches, case_attention, check_attention,
                                     pointers, sources)
from backends.cuda_layer import DTYPE_CODE, _config, dev_index
from backends.cupy_layer import HOST, _device, _make, _require, available, compile_only_nvrtc
from cuda_src import dispatch
from harness import register
from harness.errors import Unsupported


def _register(path: str, name: str):
    def compile_only(case):
        try:
            plan = case_attention(path, case)
        except dispatch.Decline as e:
            raise Unsupported(f"{path} path: {e}") from None
        facts = compile_only_nvrtc(plan.kernel, _config(plan))
        if plan.plans[0].smem:
            facts["smem"] = (facts.get("smem") or 0) + plan.plans[0].smem
        return facts

    @register(problem="attention", layer="cupy", name=name, description="NVRTC of cuda_src: " + DESCRIPTIONS[path],
              sources=sources(path, [HOST]), devices=("cuda",), available=available, compile_only=compile_only)
    def prepare(case, inputs, out):
        _require()
        q, k, v = check_attention(case, inputs, out)
        di = dev_index(q)
        try:
            plan = attention_launches(path, case, q, k, v, out, _device(di))
        except dispatch.Decline as e:
            raise Unsupported(f"{path} path: {e}") from None
        return _make(plan, pointers(q, k, v, out), di, DTYPE_CODE[q.dtype])

    return prepare


for _path, _name in ROWS:
    _register(_path, _name)
