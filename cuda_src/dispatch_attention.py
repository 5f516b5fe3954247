"""attention plans of the CUDA C++ layer (``dispatch`` is the entry): the default is the ``ws``
algorithm (``attention_ws.cu``: FlashAttention-3 on Hopper, a TMA producer warp and two wgmma
consumer warpgroups) wherever TMA can read q, k and v and the sm_90a code runs (``ws_declines``);
elsewhere the ``tiled`` algorithm (``attention_tiled.cu``: FlashAttention-2 on mma.sync, K / V tiles
by cp.async), its query rows a CTA chosen by waves; the twin (``attention.cu``) FMA on fp32 tiles in
shared memory, which the default also runs where cp.async cannot read the rows (bases or strides
off 16 bytes).

The ws kernel ran on the H200 through CuPy's NVRTC (the verify suite and the models + edge cases,
timed); its CUDA C++ build (nvcc) has not run on a GPU yet. The tiled kernel's rule stands on the
arithmetic of tiles, shared memory and waves (it and the twin verified on the H200, the tiled
kernel timed on an H100). docs/performance.md, "CUDA C++ / attention". Pure Python;
the check of a call's tensors (``check_attention``, both launchers' rows) imports torch when called.
"""
from __future__ import annotations

from .dispatch_common import (ESIZE, H200, Decline, Device, Launches, Plan, _blocks_per_sm, _cdiv, _why, device_of,
                              family)

# ---------------------------------------------------------------------------------------------------
# tuning table

ATTENTION = {
    # keys a K / V tile of the tiled kernel (AT_BN of attention_tiled.cu): 64 keys keep the score tile
    # a warp holds at 16 x 64 fp32 (32 registers a thread) beside the 16 x D output (D / 2)
    "block_n": 64,
    # warps a CTA (instances); a warp takes 16 query rows, so a CTA 64 or 128. 128 rows share every
    # K / V tile between twice the rows (half the shared-memory and L2 traffic a FLOP); 64 rows give
    # twice the CTAs where 128-row blocks would leave SMs idle
    "warps": (4, 8),
    # the largest CTA whose grid fills at least this many waves of resident CTAs on the SMs
    "min_waves": 1.0,
    "stages": 2,                    # K / V tiles in shared memory (double buffering; the kernel's)
    "head_dims": (64, 128),
    # registers a thread the occupancy estimate assumes (upper bounds of the ptxas figures for sm_90a;
    # tests/test_cuda_attention.py checks every instance)
    "regs": {64: 176, 128: 255},
    "smem_reserved": 1024,          # what the system keeps a resident CTA
    # the warp-specialised Hopper kernel (attention_ws.cu) wherever TMA can read Q, K and V and the
    # sm_90a code runs (verified and timed through NVRTC, the nvcc build not yet run on a GPU)
    "ws": True,
    # the ws kernel's K / V ring slots by head dim: 2 at D = 128 (Q 32 KB + 2 x 64 KB, FlashAttention-3's
    # choice), 4 at D = 64 (16 + 4 x 32 KB); one CTA an SM either way (384 threads at 168 / 240 registers)
    "ws_stages": {64: 4, 128: 2},
    # the ws kernel's two consumer warpgroups take turns to issue their wgmmas (FlashAttention-3's
    # ping-pong: one's softmax under the other's MMAs); a kernel argument, so a GPU run can compare
    "ws_pingpong": True,
}
WS_BM, WS_BN, WS_THREADS, WS_BOX_COLS = 128, 128, 384, 64   # attention_ws.cu: AW_BM, AW_BN, AW_THREADS, a slab
SIMPLE_THREADS, SIMPLE_ROWS = 128, 16   # the twin: 4 warps, 4 query rows a warp (attention.cu)

# ---------------------------------------------------------------------------------------------------
# kernel instances (the module's table and NVRTC's name expressions) and argument signatures

_ARGS = ("ptr", "ptr", "ptr", "ptr", "i32", "i32", "i32") + ("i64",) * 12 + ("i32",)
_WS_ARGS = ("tma", "tma", "tma", "ptr", "i32", "i32", "i32", "i64", "i64", "i64", "i32", "i32")
SIGNATURES = {"attention_simple_kernel": _ARGS, "attention_tiled_kernel": _ARGS, "attention_ws_kernel": _WS_ARGS}
FILES = {"attention_simple_kernel": "attention.cu", "attention_tiled_kernel": "attention_tiled.cu",
         "attention_ws_kernel": "attention_ws.cu"}


def instances() -> dict[str, list[str]]:
    """{source file: [instance, ...]}: every kernel instance a plan can name, by source."""
    bools, dims = ("true", "false"), ATTENTION["head_dims"]
    return {FILES["attention_simple_kernel"]: [f"attention_simple_kernel<{b}, {d}>" for b in bools for d in dims],
            FILES["attention_tiled_kernel"]: [f"attention_tiled_kernel<{b}, {d}, {w}>" for b in bools for d in dims
                                              for w in ATTENTION["warps"]],
            FILES["attention_ws_kernel"]: [f"attention_ws_kernel<{b}, {d}, {ATTENTION['ws_stages'][d]}>"
                                           for b in bools for d in dims]}


def _src(file: str, *kernels: str):
    from kltools.plan import Source
    return (Source(f"cuda_src/{file}", kernels=kernels),)


#: the words the default plans among (dispatch.VARIANTS["attention"]); "tiled" where the ws kernel
#: declines (no sm_90a code, too little shared memory); "simple": the twin's kernel, for rows cp.async
#: cannot read (no suite has such rows)
VARIANTS = {"ws": _src("attention_ws.cu", "attention_ws_kernel"),
            "tiled": _src("attention_tiled.cu", "attention_tiled_kernel"),
            "simple": _src("attention.cu", "attention_simple_kernel")}


# ---------------------------------------------------------------------------------------------------
# plans

ATTENTION_PATHS = ("auto", "simple", "tiled", "ws")
OPERANDS = ("q", "k", "v", "o")


def tiled_smem(D: int, warps: int, esize: int = 2) -> int:
    """Dynamic shared memory of the tiled kernel: the Q tile (16 x warps rows) and two stages of K
    and V tiles, D elements a row."""
    return (16 * warps + 2 * ATTENTION["stages"] * ATTENTION["block_n"]) * D * esize


def tiled_ctas_per_sm(D: int, warps: int, dev: Device) -> int:
    by_smem = dev.smem_per_sm // (tiled_smem(D, warps) + ATTENTION["smem_reserved"])
    return max(1, min(by_smem, _blocks_per_sm(32 * warps, ATTENTION["regs"][D])))


def tiled_warps(B: int, Hq: int, Sq: int, D: int, dev: Device = H200) -> int:
    """Warps a CTA of the tiled kernel: the most (rows a CTA) whose shared memory fits a CTA, whose
    rows do not exceed the sequence (beyond the smallest CTA's) and whose grid still fills
    ``min_waves`` waves of resident CTAs; else the fewest that fit (few query blocks: more, smaller
    CTAs). Decline when none fits."""
    fits = [w for w in sorted(ATTENTION["warps"]) if tiled_smem(D, w) <= dev.smem_optin]
    if not fits:
        raise Decline(f"the tiled kernel's {tiled_smem(D, min(ATTENTION['warps']))} B of shared memory exceed "
                      f"the device's {dev.smem_optin} B a CTA")
    for w in reversed(fits):
        if 16 * w > max(16 * fits[0], Sq):   # more rows than the sequence: padding, not parallelism
            continue
        ctas = _cdiv(Sq, 16 * w) * B * Hq
        if ctas >= ATTENTION["min_waves"] * dev.sms * tiled_ctas_per_sm(D, w, dev):
            return w
    return fits[0]


def _args(group: int, Sq: int, Sk: int, strides: dict, causal: int) -> tuple:
    return (("ptr", "q"), ("ptr", "k"), ("ptr", "v"), ("ptr", "o"), ("i32", group), ("i32", Sq), ("i32", Sk),
            *(("i64", s) for n in OPERANDS for s in strides[n]), ("i32", int(bool(causal))))


def _check(B, Hq, Hkv, Sq, Sk, D, dtype, causal, strides) -> None:
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"dtype: float16 or bfloat16, got {dtype!r}")
    if D not in ATTENTION["head_dims"]:
        raise ValueError(f"D: one of {ATTENTION['head_dims']}, got {D}")
    if min(B, Hq, Hkv, Sq, Sk) < 1 or Hq % Hkv:
        raise ValueError(f"Hq: sizes >= 1 and Hq a multiple of Hkv, got B={B} Hq={Hq} Hkv={Hkv} Sq={Sq} Sk={Sk}")
    if causal and Sq > Sk:
        raise ValueError(f"Sq: a causal case needs Sq <= Sk (bottom-right mask), got Sq={Sq}, Sk={Sk}")
    if set(strides) != set(OPERANDS) or any(len(strides[n]) != 3 for n in OPERANDS):
        raise ValueError("strides: (batch, head, row) strides in elements for each of q, k, v, o")
    if Hq > 65535 or B > 65535:
        raise Decline(f"grid: Hq ({Hq}) and B ({B}) are grid dimensions y and z, at most 65535")


def ws_smem(D: int) -> int:
    """Dynamic shared memory of the ws kernel (AwCfg::SMEM): the Q tile, STAGES K and V tiles, the
    mbarriers and the slack that aligns the first slab to 1024 bytes."""
    st = ATTENTION["ws_stages"][D]
    return (WS_BM + 2 * st * WS_BN) * D * 2 + 8 * (1 + 3 * st) + 1024


def ws_declines(D: int, aligned: bool, dev: Device) -> str:
    """Why the ws kernel cannot take a case ('' when it can): its code is sm_90a (wgmma, TMA,
    setmaxnreg); TMA reads Q, K and V only from 16-byte aligned bases and strides, and the output's
    16-byte stores need the same of O; its ring must fit a CTA's shared memory."""
    if dev.cc != (9, 0) or not dev.sm90a:
        return "the ws kernel is sm_90a code (wgmma, TMA, setmaxnreg): a Hopper GPU running this build's sm_90a code"
    if not aligned:
        return "TMA needs 16-byte aligned bases and strides of q, k and v (and o's 16-byte stores)"
    if ws_smem(D) > dev.smem_optin:
        return f"the ws kernel's {ws_smem(D)} B of shared memory exceed the device's {dev.smem_optin} B a CTA"
    return ""


def _tma(buf: str, S: int, H: int, B: int, D: int, strides: tuple, box_rows: int) -> tuple:
    """The 4-D TMA descriptor argument of one operand: its (D, S, H, B) view, boxes of box_rows x 64
    (a box stops at its head's S rows: zero fill past them). A dimension of size 1 gets a stride TMA
    accepts (a multiple of 16 bytes; its coordinate is always 0)."""
    bs, hs, rs = strides
    rs = rs if S > 1 else D
    hs = hs if H > 1 else S * rs
    bs = bs if B > 1 else H * hs
    return "tma", (buf, S, D, rs, box_rows, WS_BOX_COLS, ((H, hs), (B, bs)))


def _plan_ws(bf16: str, B, Hq, Hkv, Sq, Sk, D, causal, strides, dev: Device) -> Launches:
    st = ATTENTION["ws_stages"][D]
    kern, smem = f"attention_ws_kernel<{bf16}, {D}, {st}>", ws_smem(D)
    grid = (_cdiv(Sq, WS_BM), Hq, B)
    args = (_tma("q", Sq, Hq, B, D, strides["q"], WS_BM), _tma("k", Sk, Hkv, B, D, strides["k"], WS_BN),
            _tma("v", Sk, Hkv, B, D, strides["v"], WS_BN), ("ptr", "o"), ("i32", Hq // Hkv), ("i32", Sq),
            ("i32", Sk), *(("i64", x) for x in strides["o"]), ("i32", int(bool(causal))),
            ("i32", int(ATTENTION["ws_pingpong"])))
    waves = grid[0] * Hq * B / dev.sms
    p = Plan(kern, grid, WS_THREADS, args, smem=smem, max_dynamic_smem=smem)
    return _why(Launches([p], info={"path": "ws", "kernel": kern, "block_m": WS_BM, "block_n": WS_BN, "stages": st,
                                    "pingpong": bool(ATTENTION["ws_pingpong"]), "smem": smem,
                                    "waves": round(waves, 3), "grid": list(grid)}),
                f"ws: TMA takes q, k and v; {WS_BM} query rows a CTA, {waves:.2f} waves of one CTA an SM")


def plan_attention(path: str, B: int, Hq: int, Hkv: int, Sq: int, Sk: int, D: int, dtype: str, causal: int,
                   strides: dict, aligned: bool = True, dev: Device = H200, warps: int | None = None) -> Launches:
    """``strides``: {"q" | "k" | "v" | "o": (batch, head, row) strides in elements}, the head dim
    contiguous; ``aligned``: every base on 16 bytes and every stride a multiple of 16 bytes (the
    tiled kernel's 16-byte cp.async and stores, the ws kernel's TMA). ``warps``: pin the tiled
    kernel's CTA (tuning; the tiled kernel's plan then)."""
    if path not in ATTENTION_PATHS:
        raise ValueError(f"path: {path!r} is not one of {', '.join(ATTENTION_PATHS)}")
    _check(B, Hq, Hkv, Sq, Sk, D, dtype, causal, strides)
    if warps is not None and warps not in ATTENTION["warps"]:
        raise ValueError(f"warps: one of {ATTENTION['warps']}, got {warps!r}")
    bf16 = "true" if dtype == "bfloat16" else "false"
    if path == "ws" or (path == "auto" and ATTENTION["ws"] and warps is None):
        why = ws_declines(D, aligned, dev)
        if not why:
            return _plan_ws(bf16, B, Hq, Hkv, Sq, Sk, D, causal, strides, dev)
        if path == "ws":
            raise Decline(why)
    args = _args(Hq // Hkv, Sq, Sk, strides, causal)
    if path == "tiled" and not aligned:
        raise Decline("tiled path: cp.async needs 16-byte aligned bases and strides of q, k, v and o")
    w = None
    if path != "simple" and aligned and dev.cc >= (8, 0):
        try:
            w = warps or tiled_warps(B, Hq, Sq, D, dev)
        except Decline:
            if path == "tiled":
                raise
    if w is None:   # the twin's kernel: by request, rows off 16 bytes, no mma.sync, or no room
        kern = f"attention_simple_kernel<{bf16}, {D}>"
        grid = (_cdiv(Sq, SIMPLE_ROWS), Hq, B)
        why = "the twin by request" if path == "simple" else \
            "the twin's kernel: rows off 16 bytes, no mma.sync (before sm_80) or too little shared memory"
        return _why(Launches([Plan(kern, grid, SIMPLE_THREADS, args)],
                             info={"path": "simple", "kernel": kern, "rows": SIMPLE_ROWS, "grid": list(grid)}), why)
    smem = tiled_smem(D, w, ESIZE[dtype])
    kern = f"attention_tiled_kernel<{bf16}, {D}, {w}>"
    grid = (_cdiv(Sq, 16 * w), Hq, B)
    waves = grid[0] * Hq * B / (dev.sms * tiled_ctas_per_sm(D, w, dev))
    p = Plan(kern, grid, 32 * w, args, smem=smem, max_dynamic_smem=smem)
    return _why(Launches([p], info={"path": "tiled", "kernel": kern, "warps": w, "block_m": 16 * w,
                                    "block_n": ATTENTION["block_n"], "smem": smem, "waves": round(waves, 3),
                                    "grid": list(grid)}),
                f"{16 * w} query rows a CTA: {waves:.2f} waves of resident CTAs on {dev.sms} SMs")


def launches_for(facts, path: str = "auto", dev: Device = H200, **opts) -> Launches:
    """The plan of a case given as ``kltools.plan.Facts`` (operands ``q``, ``k``, ``v``, ``out``;
    ``dev``: this planner's ``Device``): the strides of each operand's batch, head and row, and
    whether every one that matters (a size above 1) and every base sits on 16 bytes."""
    ops, es = facts.operands, facts.esize
    names = dict(zip(OPERANDS, ("q", "k", "v", "out")))
    strides = {n: tuple(ops[src].strides[:3]) for n, src in names.items()}
    aligned = all(ops[src].addr16 == 0 and all(s * es % 16 == 0 for s, size in zip(ops[src].strides[:3],
                                                                                    ops[src].shape[:3]) if size > 1)
                  for src in names.values())
    return plan_attention(path, facts.B, facts.Hq, facts.Hkv, facts.Sq, facts.Sk, facts.D, facts.dtype,
                          int(facts.params.get("causal", 0)), strides, aligned, dev, **opts)


def plan(problem: str, facts):
    """The default's plan (``cuda:attention``, ``cupy:attention``) for one case on the device of
    ``facts``, in the layer contract's terms: the word, the launch's configuration, why, and the
    kernel file and entry point it launches (``dispatch.plan`` hands attention here)."""
    from kltools.plan import Plan as KlPlan
    from kltools.plan import Source

    if problem != "attention":
        raise ValueError(f"problem: {problem!r} is not planned here (attention only)")
    ls = launches_for(facts, "auto", device_of(facts.device))
    srcs = tuple(Source(f"cuda_src/{FILES[family(p.kernel)]}", kernels=(family(p.kernel),)) for p in ls.plans)
    return KlPlan(problem, ls.info["path"], dict(ls.info), ls.info.get("why", ""), srcs)


# ---------------------------------------------------------------------------------------------------
# the tensors of a call

INPUTS = ("q", "k", "v")


def check_attention(case, inputs, out):
    """Validate (q, k, v) and out against a case: q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D], out
    [B, Hq, Sq, D], CUDA tensors of the case's 16-bit dtype on one device, the head dim contiguous;
    a ValueError / TypeError naming the argument. Returns (q, k, v). The one check of both
    launchers' rows (``backends/cuda_attention.py``, ``backends/cupy_attention.py``); it imports
    torch when called, the planning above stays pure Python."""
    import torch

    if len(inputs) != 3:
        raise ValueError(f"inputs: expected (q, k, v), got {len(inputs)} items")
    B, Hq, Hkv, Sq, Sk, D = (case.dims[n] for n in ("B", "Hq", "Hkv", "Sq", "Sk", "D"))
    shapes = {"q": (B, Hq, Sq, D), "k": (B, Hkv, Sk, D), "v": (B, Hkv, Sk, D), "out": (B, Hq, Sq, D)}
    for name, t in (*zip(INPUTS, inputs), ("out", out)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise ValueError(f"{name}: must be a CUDA tensor, got device {t.device}")
        if t.dtype != case.torch_dtype or t.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"{name}: dtype {t.dtype}, the case is {case.dtype} (float16 or bfloat16)")
        if tuple(t.shape) != shapes[name]:
            raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {shapes[name]}")
        if t.stride(3) != 1:
            raise ValueError(f"{name}: the head dim must be contiguous (stride(3) == 1), got strides {t.stride()}")
        if t.data_ptr() % 2:
            raise ValueError(f"{name}: address not aligned to its 2-byte elements")
    if len({t.device for t in (*inputs, out)}) != 1:
        raise ValueError(f"q, k, v, out: all on one device, got {sorted({str(t.device) for t in (*inputs, out)})}")
    if case.params.get("causal", 0) and Sq > Sk:
        raise ValueError(f"q: a causal case needs Sq <= Sk (bottom-right mask), got Sq={Sq}, Sk={Sk}")
    return inputs
