"""The Gluon names that differ between triton 3.6 and newer triton (same arguments either way).

3.6 calls the copies ``async_copy_global_to_shared`` (cp.async and TMA) and
``async_copy_shared_to_global`` (TMA store), and the CTA barrier ``thread_barrier``; newer triton
calls them ``async_load``, ``async_store`` and ``barrier``. The kernels call the names below.
"""
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import tma

#: cp.async global -> shared: (smem, pointer, mask=None, ...)
cp_async = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
#: TMA global -> shared: (desc, coord, barrier, result, pred=True)
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
#: TMA shared -> global: (desc, coord, src)
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
#: every thread of the program waits for the others (bar.sync)
cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier
