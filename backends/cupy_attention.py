"""CuPy adapter for attention: the SAME ``cuda_src/attention*.cu`` kernels compiled by NVRTC and
launched through the driver API on torch's current stream (``backends/cupy_layer.py``), from the
SAME plans as the CUDA C++ rows (``backends/cuda_attention.py``) and the same validation
(``cuda_src/dispatch_attention.py``: ``check_attention``). Rows ``cupy:attention`` (the ws kernel
where it can take the case, else the tiled kernel or the twin's), ``cupy:attention_simple`` and
``cupy:attention_ws`` (the ws kernel's 4-D TMA descriptors encoded through libcuda as the GEMM's
are), all verified on the H200; docs/performance.md, "CUDA C++ / attention". Without a GPU
``compile_only`` compiles the planned instance through NVRTC for sm_90a (ptxas facts).
"""
from __future__ import annotations

from backends.cuda_attention import (DESCRIPTIONS, ROWS, attention_launches, case_attention, or_unsupported,
                                     pointers, sources)
from backends.cuda_layer import DTYPE_CODE, _config, dev_index
from backends.cupy_layer import HOST, _device, _make, _require, available, compile_only_nvrtc
from cuda_src import dispatch_attention as A
from harness import register


def _register(path: str, name: str):
    def compile_only(case):
        plan = or_unsupported(path, case_attention, path, case)
        facts = compile_only_nvrtc(plan.kernel, _config(plan))
        if plan.plans[0].smem:
            facts["smem"] = (facts.get("smem") or 0) + plan.plans[0].smem
        return facts

    @register(problem="attention", layer="cupy", name=name, description="NVRTC of cuda_src: " + DESCRIPTIONS[path],
              sources=sources(path, [HOST]), devices=("cuda",), available=available, compile_only=compile_only)
    def prepare(case, inputs, out):
        _require()
        q, k, v = A.check_attention(case, inputs, out)
        di = dev_index(q)
        plan = or_unsupported(path, attention_launches, path, case, q, k, v, out, _device(di))
        return _make(plan, pointers(q, k, v, out), di, DTYPE_CODE[q.dtype])

    return prepare


for _path, _name in ROWS:
    _register(_path, _name)
