"""softmax for short rows in the CuTe DSL: several rows per CTA, a row per warp (or per few warps),
and the next row's loads in flight while the current row is reduced and stored.

Why a second softmax kernel: with one row per CTA (``softmax.py``) a 1-4K-column row is 4-16 KB,
a CTA lives for one load -> reduce -> store chain, and the SM's loads stop while its CTAs are in
their reduction and store phases. Here a CTA of ``THREADS`` threads holds ``R`` row groups of
``G`` threads (``G`` = 32: one warp, warp shuffles only, no barrier). The grid is capped at what
fits on the GPU at once (``grid_cap`` CTAs), so each group walks rows with a grid stride and,
before it reduces row ``i``, issues the 128-bit loads of row ``i + stride`` into a second register
buffer: HBM keeps streaming while the shuffles, exps and stores of the current row run.

Per row (fp32 math): thread max -> warp max (butterfly) -> group max (one value per warp in shared
memory, only when ``G`` > 32); sum of exp(x - max) the same way; out = exp(x - max) / sum.
Out-of-range lanes are -inf (drop out of the max, add 0 to the sum). Traffic 2MN at every N.
G, R, K (vectors per thread), VEC (elements per vector) and the grid cap are compile-time; M, N
and both row strides are symbolic, so one compile serves every shape of a bucket.
"""
from __future__ import annotations

import os

import cutlass
import cutlass.cute as cute
import torch
from cutlass.memory import SmemAllocator

from . import cached, compile_kernel, fake_stream, stream_args, to_cute
from .softmax import access_width, fake_rows, validate, vec_copy_atom

LOG2E = 1.4426950408889634
THREADS = 256                 # threads per CTA (R = THREADS // G row groups)
CTAS_PER_SM = 4               # 1024 resident threads per SM: <= 64 registers for double buffers
DEFAULT_SMS = 132             # H100 SXM / H200; the real count is read from the GPU when present


def max_values() -> int:
    """fp32 values per thread per row buffer (two buffers live): ``KL_CUTE_SOFTMAX_ROWS_VALUES``."""
    return int(os.environ.get("KL_CUTE_SOFTMAX_ROWS_VALUES", "16"))


@cute.jit
def group_reduce(val: cutlass.Float32, op, red: cute.Tensor, group: cutlass.Int32,
                 warps_per_group: cutlass.Constexpr):
    """Warp butterfly; with several warps per row group, one value per warp through shared memory
    (every warp of the CTA reaches the barrier: the row loop's trip count is CTA-uniform)."""
    val = cute.arch.warp_reduction(val, op)
    if cutlass.const_expr(warps_per_group > 1):
        wig = cute.arch.warp_idx() % warps_per_group
        if cute.arch.lane_idx() == 0:
            red[group * warps_per_group + wig] = val
        cute.arch.barrier()
        val = red[group * warps_per_group]
        for w in cutlass.range_constexpr(1, warps_per_group):
            val = op(val, red[group * warps_per_group + w])
    return val


def _fmax(a, b):
    return cute.arch.fmax(a, b)


def _add(a, b):
    return a + b


class SoftmaxRows:
    def __init__(self, group: int, k: int, vec: int, grid_cap: int):
        self.g, self.k, self.vec, self.grid_cap = group, k, vec, grid_cap
        self.threads = max(THREADS, group)
        self.rows = self.threads // group            # row groups per CTA
        self.wpg = group // 32                        # warps per row group
        self.chunk = group * k * vec                  # columns one group covers (>= N)

    @cute.jit
    def load_row(self, mX: cute.Tensor, row, m, n, t, rX: cute.Tensor, atom: cute.CopyAtom):
        """This thread's (VEC, K) slice of row ``row`` into ``rX``; -inf where out of range."""
        rX.fill(-cutlass.Float32.inf)
        if row < m:
            tv = cute.make_layout((self.vec, self.g, self.k), stride=(1, self.vec, self.vec * self.g))
            gX = cute.composition(cute.local_tile(mX[row, None], (self.chunk,), (0,)), tv)[None, t, None]
            for k in cutlass.range_constexpr(self.k):
                if t * self.vec + k * self.g * self.vec < n:
                    cute.copy(atom, gX[None, k], rX[None, k])

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        m = cute.size(mX, mode=[0])
        n = cute.size(mX, mode=[1])
        grp = tidx // self.g                          # row group within the CTA
        t = tidx % self.g                             # thread within the row group

        smem = SmemAllocator()
        red_max = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)
        red_sum = smem.allocate_tensor(cutlass.Float32, cute.make_layout(32), byte_alignment=16)

        tv = cute.make_layout((self.vec, self.g, self.k), stride=(1, self.vec, self.vec * self.g))
        atom_in = vec_copy_atom(mX.element_type, self.vec)
        atom_out = vec_copy_atom(mO.element_type, self.vec)
        frag = cute.make_layout((self.vec, self.k))
        rCur = cute.make_rmem_tensor(frag, mX.element_type)
        rNext = cute.make_rmem_tensor(frag, mX.element_type)
        rO = cute.make_rmem_tensor(frag, mO.element_type)

        blocks = (m + self.rows - 1) // self.rows     # row blocks of R rows
        self.load_row(mX, bidx * self.rows + grp, m, n, t, rCur, atom_in)
        # CTA-uniform trip count: every warp reaches the group barriers of every iteration
        for blk in cutlass.range(bidx, blocks, gdim, unroll=1):
            row = blk * self.rows + grp
            # next row's loads go out before this row's reductions
            self.load_row(mX, (blk + gdim) * self.rows + grp, m, n, t, rNext, atom_in)

            x = rCur.load().to(cutlass.Float32)
            row_max = group_reduce(x.reduce(cute.ReductionOp.MAX, -cutlass.Float32.inf, 0), _fmax,
                                   red_max, grp, self.wpg)
            shift = row_max
            if row_max == -cutlass.Float32.inf:
                shift = cutlass.Float32(0.0)
            e = cute.math.exp2((x - shift) * LOG2E, fastmath=True)
            row_sum = group_reduce(e.reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0), _add,
                                   red_sum, grp, self.wpg)
            rO.store((e * (cutlass.Float32(1.0) / row_sum)).to(mO.element_type))
            if row < m:
                gO = cute.composition(cute.local_tile(mO[row, None], (self.chunk,), (0,)), tv)[None, t, None]
                for k in cutlass.range_constexpr(self.k):
                    if t * self.vec + k * self.g * self.vec < n:
                        cute.copy(atom_out, rO[None, k], gO[None, k])
            rCur.store(rNext.load())

    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, stream):
        m = cute.size(mX, mode=[0])
        blocks = (m + self.rows - 1) // self.rows
        grid = cutlass.min(blocks, self.grid_cap)
        self.kernel(mX, mO).launch(grid=(grid, 1, 1), block=(self.threads, 1, 1), stream=stream)


def config(n: int, vec: int) -> tuple[int, int] | None:
    """(G threads per row, K vectors per thread) for rows of n elements, VEC at a time: the
    fewest threads per row that keep <= max_values() values per thread; None above 512 x that."""
    vecs = -(-n // vec)
    cap = max(vec, max_values())
    for g in (32, 64, 128, 256, 512):
        k = -(-vecs // g)
        kp = 1 << (k - 1).bit_length()                # powers of two: fewer compiles
        if kp * vec <= cap:
            return g, kp
    return None


def num_sms() -> int:
    try:
        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    except Exception:
        pass
    return DEFAULT_SMS


def max_n(vec: int = 4) -> int:
    return 512 * max(vec, max_values())


def plan(x: torch.Tensor, out: torch.Tensor) -> dict:
    return plan_for(x.shape[1], access_width(x, out))


def plan_for(n: int, vec: int) -> dict:
    cfg = config(n, vec)
    if cfg is None:
        raise ValueError(f"x: rows of {n} elements are longer than this short-row kernel takes "
                         f"(<= {512 * max(vec, max_values())} at access width {vec}); use cute:softmax")
    g, k = cfg
    threads = max(THREADS, g)
    return {"vec": vec, "group": g, "k": k, "threads": threads, "rows_per_cta": threads // g,
            "grid_cap": num_sms() * max(1, (CTAS_PER_SM * THREADS) // threads)}


def _compile(in_dtype, out_dtype, p: dict):
    key = ("softmax_rows", str(in_dtype), str(out_dtype), p["vec"], p["group"], p["k"], p["grid_cap"])
    c = cached(key)
    if c is not None:
        return c
    vec = p["vec"]
    return compile_kernel(key, SoftmaxRows(p["group"], p["k"], vec, p["grid_cap"]),
                          *fake_rows(in_dtype, out_dtype, vec), fake_stream())


def resident_ctas(threads: int, registers: int) -> int:
    """CTAs of ``threads`` threads at ``registers`` per thread that fit one SM (64K registers,
    2048 threads, 32 CTAs; registers allocated per warp in units of 256)."""
    per_warp = -(-registers * 32 // 256) * 256
    warps = threads // 32
    return max(1, min(65536 // (per_warp * warps), 2048 // threads, 32))


def compile_fitted(in_dtype, out_dtype, p: dict):
    """Compile; if ptxas says fewer CTAs fit an SM than the grid cap assumed (more than 64
    registers, e.g. KL_CUTE_SOFTMAX_ROWS_VALUES=32), recompile with the cap that does fit, so
    the grid-stride loop never leaves CTAs waiting for a second wave. Returns (compiled, plan)."""
    comp = _compile(in_dtype, out_dtype, p)
    regs = comp.facts().get("registers")
    if regs:
        cap = num_sms() * resident_ctas(p["threads"], int(regs))
        if cap < p["grid_cap"]:
            p = {**p, "grid_cap": cap}
            comp = _compile(in_dtype, out_dtype, p)
    return comp, p


def prepare_softmax_rows(x, out):
    """Validate, plan, compile (cached); returns (launch, compiled, plan)."""
    validate(x, out)
    p = plan(x, out)
    comp, p = compile_fitted(x.dtype, out.dtype, p)
    vec = p["vec"]
    args = (to_cute(x, max(x.element_size(), vec * x.element_size())),
            to_cute(out, max(out.element_size(), vec * out.element_size())))
    fn = comp.fn

    def launch():
        fn(*args, *stream_args())

    return launch, comp, p


def softmax_rows(x, out=None):
    """Row softmax of a 2-D CUDA tensor with short rows (fp32 math, output in x's dtype)."""
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    launch, _, _ = prepare_softmax_rows(x, out)
    launch()
    return out


def compile_only(dtype: torch.dtype, n: int, vec: int | None = None):
    """Compile the kernel a row of n elements would use, for sm_90a, without a GPU."""
    es = torch.empty((), dtype=dtype).element_size()
    if vec is None:
        vec = 16 // es if (n * es) % 16 == 0 else 1
    return compile_fitted(dtype, dtype, plan_for(n, vec))
