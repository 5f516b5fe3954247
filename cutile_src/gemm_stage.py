"""cuTile GEMM operand staging (planned by the default; docs/DESIGN.md, "Algorithm words"): copies
a 2-d array whose rows are not whole 16-byte units (row stride or base address) into a buffer whose
row stride is, so that the GEMM loads it through TMA. A plan stages where its config has ``stage``.

An array's row stride is a fact of the whole tensor: tileiras vectorises loads (and uses TMA)
only where every row starts on a 16-byte boundary, so B of N = 50257 bf16 columns is read with
2-byte loads, row after row (docs/performance.md, ``## cuTile / gemm_epilogue``). The copy reads
those rows once (2-byte loads, many in flight: a (TR, TC) tile a program) and writes them with
wide stores; the GEMM then reads the staged copy as often as its tiles need. Columns past the
source's are never read by the GEMM (its view of the buffer has the source's shape).

``stage_rows_kernel`` copies one operand; ``stage_pair_kernel`` (the switch ``small`` of
dispatch.GPU_VERIFIED: run on the H200, docs/performance.md, "cuTile / GEMM + epilogue") copies A
and B in one launch, each tile by the same ``copy_tile``.
"""
import cuda.tile as ct
import torch


def copy_tile(src, dst, t, TR: ct.Constant[int], TC: ct.Constant[int]):
    """Tile t (row-major over (TR, TC) tiles) of src stored at the same place in dst."""
    num_c = ct.cdiv(src.shape[1], TC)
    tile = ct.load(src, index=(t // num_c, t % num_c), shape=(TR, TC), padding_mode=ct.PaddingMode.ZERO)
    ct.store(dst, index=(t // num_c, t % num_c), tile=tile)


@ct.kernel
def stage_rows_kernel(src, dst, TR: ct.Constant[int], TC: ct.Constant[int]):
    for t in range(ct.bid(0), ct.cdiv(src.shape[0], TR) * ct.cdiv(src.shape[1], TC), ct.num_blocks(0)):
        copy_tile(src, dst, t, TR, TC)


@ct.kernel
def stage_rows_flat_kernel(src, dst, C: int, T: ct.Constant[int]):
    """The same copy from a contiguous source viewed as one vector: aligned T-element tiles loaded
    wide, each element scattered to (row, column) of the buffer (a tile spans at most two rows
    while T <= C; elementwise stores). A candidate beside stage_rows_kernel (2-byte loads, 16-byte
    stores): python -m harness check cutile times both."""
    ar = ct.arange(T, dtype=ct.int32)
    for j in range(ct.bid(0), ct.cdiv(src.shape[0], T), ct.num_blocks(0)):
        tile = ct.load(src, index=(j,), shape=(T,))
        row0 = (j * T) // C
        row = ct.where(ar >= (row0 + 1) * C - j * T, row0 + 1, row0)  # lanes past row0's end
        ct.scatter(dst, (row, j * T + ar - row * C), tile)


def staged_buffer(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(buffer, view): a new buffer of t's rows whose columns are rounded up to a multiple of 16
    elements (the copy stores whole buffer rows, its padding zeros, with wide stores), and the
    view of t's shape into it (the GEMM's operand: 16-byte rows, TMA-loadable)."""
    rows, cols = t.shape
    buf = torch.empty((rows, -(-cols // 16) * 16), dtype=t.dtype, device=t.device)
    return buf, buf[:, :cols]


def bind_stage(src: torch.Tensor, dst: torch.Tensor, tr: int, tc: int, grid: int, kernel=None):
    k = kernel or stage_rows_kernel
    args = (src, dst, tr, tc)

    def launch():
        ct.launch(torch.cuda.current_stream(), (grid, 1, 1), k, args)
    launch.args = args
    return launch


def bind_stage_flat(src: torch.Tensor, dst: torch.Tensor, t: int, grid: int, kernel=None):
    """stage_rows_flat_kernel on a contiguous ``src`` whose rows hold at least ``t`` elements."""
    if not src.is_contiguous() or src.shape[1] < t:
        raise ValueError(f"src: the flat copy needs a contiguous source of rows >= {t} elements")
    k = kernel or stage_rows_flat_kernel
    args = (src.view(-1), dst, src.shape[1], t)

    def launch():
        ct.launch(torch.cuda.current_stream(), (grid, 1, 1), k, args)
    launch.args = args
    return launch


@ct.kernel
def stage_pair_kernel(a, a_dst, b, b_dst, TR: ct.Constant[int], TC: ct.Constant[int]):
    """stage_rows_kernel on two operands in one launch: the grid loops over A's tiles and then B's,
    so a small GEMM whose A and B both need staging pays one launch."""
    tiles_a = ct.cdiv(a.shape[0], TR) * ct.cdiv(a.shape[1], TC)
    tiles_b = ct.cdiv(b.shape[0], TR) * ct.cdiv(b.shape[1], TC)
    for t in range(ct.bid(0), tiles_a + tiles_b, ct.num_blocks(0)):
        if t < tiles_a:
            copy_tile(a, a_dst, t, TR, TC)
        else:
            copy_tile(b, b_dst, t - tiles_a, TR, TC)


def bind_stage_pair(a: torch.Tensor, a_dst: torch.Tensor, b: torch.Tensor, b_dst: torch.Tensor, tr: int, tc: int,
                    grid: int, kernel=None):
    """One launch of stage_pair_kernel filling both buffers."""
    k = kernel or stage_pair_kernel
    args = (a, a_dst, b, b_dst, tr, tc)

    def launch():
        ct.launch(torch.cuda.current_stream(), (grid, 1, 1), k, args)
    launch.args = args
    return launch


def bind_pair_operands(a: torch.Tensor, b: torch.Tensor, cfg: dict, hint):
    """The plan's stage {"ab": cfg} for the adapter's GEMM binding: (A's view, B's view, the launches
    [(kernel, args, hints)], the bound launches) -- both 16-byte-row buffers, filled by one
    stage_pair_kernel launch (bound on CUDA tensors only; ``hint``: the adapter's compiler hints)."""
    (ba, va), (bb, vb) = staged_buffer(a), staged_buffer(b)
    launches = [(stage_pair_kernel, (a, ba, b, bb, cfg["TR"], cfg["TC"]), {})]
    binds = [bind_stage_pair(a, ba, b, bb, cfg["TR"], cfg["TC"], cfg["grid"], kernel=hint(stage_pair_kernel, {}))] \
        if a.device.type == "cuda" else []
    return va, vb, launches, binds
