"""Triton interpreter fixes shared by the kernel folders and the harness's planted kernels: under
``TRITON_INTERPRET=1`` bf16 ``tl.dot`` and fp32 -> bf16 conversions as the GPU does them.

Interpreter plumbing only: nothing here runs on a GPU (and ``kltools`` counts in no line count).
``apply_bf16_fixes()`` applies both, once, and only while Triton's interpreter is on.
"""
from __future__ import annotations


def apply_bf16_fixes() -> None:
    """Both fixes below, when Triton runs kernels with its CPU interpreter; nothing otherwise."""
    import triton
    if triton.knobs.runtime.interpret:
        patch_interpreter_bf16_dot()
        patch_interpreter_bf16_rounding()


def patch_interpreter_bf16_dot() -> None:
    """Triton's interpreter holds bf16 values as their raw 16-bit patterns and (3.9) multiplies
    those integers in ``tl.dot``. Convert bf16 operands to fp32 first (exact) so that a kernel's
    bf16 ``tl.dot`` computes what the GPU computes. Applied once, only under the interpreter, so
    that no kernel needs an interpreter-only branch."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as interp
    builder = interp.InterpreterBuilder
    if getattr(builder.create_dot, "_bf16_fixed", False):
        return
    original = builder.create_dot

    def to_fp32(t):
        if t.dtype.scalar != tl.bfloat16:
            return t
        bits = interp._convert_float(t.data, tl.bfloat16, tl.float32, None)
        return interp.TensorHandle(np.asarray(bits).view(np.float32), tl.float32)

    def create_dot(self, a, b, d, *rest, **kw):
        return original(self, to_fp32(a), to_fp32(b), d, *rest, **kw)

    create_dot._bf16_fixed = True
    builder.create_dot = create_dot


def patch_interpreter_bf16_rounding() -> None:
    """Triton's interpreter converts fp32 to bf16 by dropping the low 16 bits (round toward
    zero) where the GPU's ``cvt.rn.bf16.f32`` rounds to nearest even: every bf16 output the
    interpreter writes would be up to a whole ulp off. Round to nearest even instead (NaN stays
    NaN), only for that conversion and only under the interpreter."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as interp
    if getattr(interp._convert_float, "_rne_fixed", False):
        return
    original = interp._convert_float
    rtz = getattr(getattr(interp, "_ir", None), "ROUNDING_MODE", None)
    rtz = getattr(rtz, "RTZ", object())

    def convert(input, input_dtype, output_dtype, rounding_mode):
        if input_dtype == tl.float32 and output_dtype == tl.bfloat16 and rounding_mode != rtz:
            bits = np.frombuffer(np.ascontiguousarray(input).tobytes(), dtype=np.uint32).astype(np.uint64)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            nan = (bits & 0x7FFFFFFF) > 0x7F800000
            rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
            return rounded.reshape(np.shape(input))
        return original(input, input_dtype, output_dtype, rounding_mode)

    convert._rne_fixed = True
    interp._convert_float = convert
