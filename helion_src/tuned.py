"""The kernels the tuned defaults launch: the very functions of the twin files (and the online
softmax), made into Helion kernels with ``static_shapes=False`` so that sizes and strides are
runtime arguments and one compile serves a class of shapes; ``autotune_effort="none"`` because
the configuration is always given (by ``dispatch.py``): the main job never autotunes."""
from __future__ import annotations

import helion

from . import gemm_epilogue as _gemm
from . import softmax as _softmax
from . import softmax_online as _online
from . import vector_add as _va


def dynamic(kernel):
    """``kernel``'s function as a Helion kernel over runtime sizes, configuration given per call."""
    return helion.kernel(kernel.fn, static_shapes=False, autotune_effort="none")


vector_add = dynamic(_va.vector_add)
softmax_rows = dynamic(_softmax.softmax)
softmax_online = dynamic(_online.softmax_online)
gemm_epilogue = dynamic(_gemm.gemm_epilogue)
