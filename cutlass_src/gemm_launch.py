"""Host side of the CuTe GEMM family: validate, see what TMA can take, compile a plan, launch.

A plan (from ``dispatch.plan_gemm``) names the schedule ("ws" or "pingpong"), the tile, the cluster,
the split count and, per operand, how it moves: "tma", "realign" (16-byte loads shifted into place
in registers) or "vN" (predicated N-element vectors). One compile
serves every shape with the same compile-time part (schedule, tile, cluster, load kinds, split-K
on/off, dtype); M, N, K, strides, the split count, the grid size, the bias flag and the activation
are run-time arguments.
"""
from __future__ import annotations

import torch

from . import cached, compile_kernel, cutlass_dtype, fake_stream, stream_args, to_cute
from .epilogue import ACTS, act_code

_WORK: dict = {}


def access_elems(*byte_quantities: int) -> int:
    """Elements (2 bytes each) per access: the widest power of two <= 8 dividing every quantity."""
    a = 16
    for q in byte_quantities:
        while a > 2 and int(q) % a:
            a //= 2
    return a // 2


def operand_widths(a, b, out) -> tuple[int, int, int]:
    """Widest access for A, B and C (elements): 8 means 16-byte aligned rows, which TMA takes."""
    M, K = a.shape
    N = b.shape[1]
    va = access_elems(K * 2, a.stride(0) * 2 if M > 1 else 16, a.data_ptr())
    vb = access_elems(N * 2, b.stride(0) * 2 if K > 1 else 16, b.data_ptr())
    vc = access_elems(N * 2, out.stride(0) * 2 if M > 1 else 16, out.data_ptr())
    return va, vb, vc


def validate(a, b, bias, out, act):
    for name, t in (("a", a), ("b", b), ("out", out)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise ValueError(f"{name}: must be a CUDA tensor, got device {t.device}")
        if t.dim() != 2:
            raise ValueError(f"{name}: must be 2-D, got shape {tuple(t.shape)}")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"{name}: dtype {t.dtype} is not float16 or bfloat16")
        if t.dtype != a.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from a's {a.dtype}")
        if t.shape[1] > 1 and t.stride(1) != 1:
            raise ValueError(f"{name}: must be row-major (last stride 1), got strides {t.stride()}")
        if t.shape[0] > 1 and t.stride(0) < t.shape[1]:
            raise ValueError(f"{name}: row stride {t.stride(0)} is smaller than the row length {t.shape[1]}")
    M, K = a.shape
    if b.shape[0] != K:
        raise ValueError(f"b: shape {tuple(b.shape)} does not match a's K={K}")
    N = b.shape[1]
    if min(M, N, K) < 1:
        raise ValueError(f"a, b: empty GEMM (M={M}, N={N}, K={K})")
    if tuple(out.shape) != (M, N):
        raise ValueError(f"out: shape {tuple(out.shape)} != ({M}, {N})")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias: expected a torch.Tensor or None, got {type(bias).__name__}")
        if bias.device != a.device or bias.dtype != a.dtype:
            raise TypeError(f"bias: must be {a.dtype} on {a.device}, got {bias.dtype} on {bias.device}")
        if tuple(bias.shape) != (N,) or (N > 1 and bias.stride(0) != 1):
            raise ValueError(f"bias: must be a contiguous [{N}] vector, got shape {tuple(bias.shape)}")
    if act not in ACTS:
        raise ValueError(f"act: {act!r} is not one of {', '.join(ACTS)}")
    if max(M, N, K) >= 2 ** 31:
        raise ValueError(f"a, b: a dimension of {max(M, N, K)} is over the 2^31-1 this kernel indexes")


def _elems(kind: str) -> int:
    """Element alignment a load kind assumes of its operand's rows (sizes, strides, base)."""
    return {"tma": 8, "realign": 1}.get(kind) or int(kind[1:])


def compile_key(dtype, plan: dict) -> tuple:
    return ("gemm", plan["schedule"], str(dtype), tuple(plan["tile"]), plan["cluster_m"],
            tuple(plan["loads"]), plan["splits"] > 1) + ((("stage",) + tuple(plan["stage"]),) if plan.get("stage") else ())


def compile_gemm(dtype, plan: dict):
    """Compile (cached) the kernel a plan needs, against fake tensors: no GPU needed."""
    key = compile_key(dtype, plan)
    c = cached(key)
    if c is not None:
        return c
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_tensor

    from .gemm_epilogue_pingpong import GemmPingpong
    from .gemm_epilogue_ws import GemmWS

    wa, wb, wc = (_elems(k) for k in plan["loads"])         # what each operand's rows must allow
    cdt = cutlass_dtype(dtype)
    m = cute.sym_int32()
    # a staged operand's rows are 16-byte multiples whatever its column count (gemm_stage.py)
    stage = plan.get("stage", ())
    n = cute.sym_int32(divisibility=max(1 if "b" in stage else wb, wc))
    k = cute.sym_int32(divisibility=1 if "a" in stage else wa)
    a = make_fake_tensor(cdt, (m, k), (cute.sym_int64(divisibility=wa), 1), assumed_align=2 * wa)
    b = make_fake_tensor(cdt, (n, k), (1, cute.sym_int64(divisibility=wb)), assumed_align=2 * wb)
    c = make_fake_tensor(cdt, (m, n), (cute.sym_int64(divisibility=wc), 1), assumed_align=2 * wc)
    bias = make_fake_tensor(cdt, (cute.sym_int32(),), (1,), assumed_align=2)
    work = make_fake_compact_tensor(cutlass.Float32, (cute.sym_int32(),), assumed_align=16)
    count = make_fake_compact_tensor(cutlass.Int32, (cute.sym_int32(),), assumed_align=4)
    cls = {"ws": GemmWS, "pingpong": GemmPingpong}[plan["schedule"]]
    gemm = cls(tuple(plan["tile"]), tuple(plan["loads"]), plan["cluster_m"], plan["splits"] > 1)
    i32 = cutlass.Int32
    return compile_kernel(key, gemm, a, b, c, bias, work, count, i32(1), i32(1), i32(1), i32(0),
                          fake_stream())


def workspace(device, plan: dict, M: int, N: int):
    """Split-K partials (fp32, one tile per split) and per-tile arrival counters (zeroed once;
    the last split of a tile resets its counter). Kept per device and grown on demand, so
    concurrent launches on two streams would share them: one stream at a time."""
    tm, tn = plan["tile"]
    tiles = (-(-M // (tm * plan["cluster_m"])) * plan["cluster_m"]) * -(-N // tn)
    floats = tiles * tm * tn * plan["splits"] if plan["splits"] > 1 else 4
    have = _WORK.get(device)
    if have is None or have[0].numel() < floats or have[1].numel() < tiles:
        have = (torch.empty(max(floats, 4), dtype=torch.float32, device=device),
                torch.zeros(max(tiles, 1), dtype=torch.int32, device=device))
        _WORK[device] = have
    return have


def prepare_gemm(a, b, bias, out, act="relu", plan: dict | None = None):
    """Validate, plan (unless given), compile (cached); returns (launch, compiled, plan)."""
    from . import dispatch

    validate(a, b, bias, out, act)
    M, K = a.shape
    N = b.shape[1]
    if plan is None:
        plan = dispatch.plan_gemm(M, N, K, operand_widths(a, b, out))
    copies = []
    if plan.get("stage"):   # rows TMA cannot read: copied to 16-byte rows first (workspaces this launch owns)
        from .gemm_stage import stage_launch, staged
        bufs = {op: staged(t) for op, t in (("a", a), ("b", b)) if op in plan["stage"]}
        copies = [stage_launch(t, bufs[op])[0] for op, t in (("a", a), ("b", b)) if op in bufs]
        a = bufs["a"][:, :K] if "a" in bufs else a
        b = bufs["b"][:, :N] if "b" in bufs else b
    comp = compile_gemm(a.dtype, plan)
    work, count = workspace(a.device, plan, M, N)
    bias_t = bias if bias is not None else torch.zeros(8, dtype=a.dtype, device=a.device)
    wa, wb, wc = (_elems(k) for k in plan["loads"])
    args = (to_cute(a, 2 * wa), to_cute(b.t(), 2 * wb, leading_dim=0),
            to_cute(out, 2 * wc), to_cute(bias_t, 2), to_cute(work, 16), to_cute(count, 4),
            plan["splits"], plan["max_clusters"], int(bias is not None), act_code(act))
    fn = comp.fn

    def launch():
        for copy in copies:
            copy()
        fn(*args, *stream_args())

    launch.keep = (a, b)
    return launch, comp, plan


def gemm_epilogue(a, b, bias=None, act="relu", out=None):
    """act(a @ b + bias) for CUDA fp16/bf16 row-major a [M, K], b [K, N]."""
    if out is None:
        out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    prepare_gemm(a, b, bias, out, act)[0]()
    return out
