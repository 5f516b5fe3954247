"""cuTile GEMM: A and B packed in one launch (the switch ``small`` of dispatch.GPU_VERIFIED, on:
run on the H200, docs/performance.md, "cuTile / GEMM + epilogue"): the default's plans whose A and
B both have rows that are not whole 16-byte units copy both into 16-byte-row buffers
(gemm_epilogue_pack.py's ``packed_buffer``) with one kernel instead of two launches of
``pack_rows_kernel``, each tile by the same ``copy_tile``.

Its own file (the word ``pack_pair`` of dispatch.VARIANTS): the default's lines count it because
its plans choose it (docs/DESIGN.md, "LOC").
"""
import cuda.tile as ct
import torch

from cutile_src.gemm_epilogue_pack import copy_tile, packed_buffer


@ct.kernel
def pack_pair_kernel(a, a_dst, b, b_dst, TR: ct.Constant[int], TC: ct.Constant[int]):
    """pack_rows_kernel on two operands in one launch: the grid loops over A's tiles and then B's,
    so a small GEMM whose A and B both need packing pays one launch."""
    tiles_a = ct.cdiv(a.shape[0], TR) * ct.cdiv(a.shape[1], TC)
    tiles_b = ct.cdiv(b.shape[0], TR) * ct.cdiv(b.shape[1], TC)
    for t in range(ct.bid(0), tiles_a + tiles_b, ct.num_blocks(0)):
        if t < tiles_a:
            copy_tile(a, a_dst, t, TR, TC)
        else:
            copy_tile(b, b_dst, t - tiles_a, TR, TC)


def bind_pack_pair(a: torch.Tensor, a_dst: torch.Tensor, b: torch.Tensor, b_dst: torch.Tensor, tr: int, tc: int,
                   grid: int, kernel=None):
    """One launch of pack_pair_kernel filling both buffers."""
    k = kernel or pack_pair_kernel
    args = (a, a_dst, b, b_dst, tr, tc)

    def launch():
        ct.launch(torch.cuda.current_stream(), (grid, 1, 1), k, args)
    launch.args = args
    return launch


def bind_pair_operands(a: torch.Tensor, b: torch.Tensor, cfg: dict, hint):
    """The plan's pack {"ab": cfg} for the adapter's GEMM binding: (A's view, B's view, the launches
    [(kernel, args, hints)], the bound launches) -- both 16-byte-row buffers, filled by one
    pack_pair_kernel launch (bound on CUDA tensors only; ``hint``: the adapter's compiler hints)."""
    (ba, va), (bb, vb) = packed_buffer(a), packed_buffer(b)
    launches = [(pack_pair_kernel, (a, ba, b, bb, cfg["TR"], cfg["TC"]), {})]
    binds = [bind_pack_pair(a, ba, b, bb, cfg["TR"], cfg["TC"], cfg["grid"], kernel=hint(pack_pair_kernel, {}))] \
        if a.device.type == "cuda" else []
    return va, vb, launches, binds
