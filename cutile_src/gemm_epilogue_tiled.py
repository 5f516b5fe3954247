"""cuTile GEMM + epilogue, tiled: the twin's main loop and epilogue over a 1-d grid of C tiles in
grouped order (GROUP tile rows share their B column tiles while they are in L2), each program
looping over tiles ``bid, bid + grid, ...`` (one tile each when the grid covers C; a persistent
grid of co-resident programs when the planner caps it). Tile shape (TM, TN, TK), GROUP, the grid
and the kernel hints (num_worker_warps) come from ``dispatch.plan_gemm``.
"""
import cuda.tile as ct
import torch


def epilogue(acc, bias, bn, TN: ct.Constant[int], has_bias, act):
    """bias + activation on an fp32 accumulator tile whose columns are tile ``bn`` of width TN;
    ``has_bias`` and ``act`` (0 none, 1 relu, 2 gelu-tanh) are runtime values."""
    if has_bias != 0:
        acc = acc + ct.astype(ct.load(bias, index=(bn,), shape=(TN,)), ct.float32)
    if act == 1:
        acc = ct.maximum(acc, 0.0)
    if act == 2:
        acc = 0.5 * acc * (1.0 + ct.tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)))
    return acc


def grouped_tile(t, num_m, num_n, GROUP: ct.Constant[int]):
    """Tile t of the grouped order: GROUP tile rows, then the next GROUP (the last group may be
    shorter), column-major inside a group."""
    per_group = GROUP * num_n
    first_m = (t // per_group) * GROUP
    rows = min(num_m - first_m, GROUP)
    return first_m + t % rows, (t % per_group) // rows


@ct.kernel
def gemm_epilogue_tiled_kernel(a, b, bias, c, has_bias: int, act: int, TM: ct.Constant[int],
                               TN: ct.Constant[int], TK: ct.Constant[int], GROUP: ct.Constant[int],
                               TMA_STORE: ct.Constant[bool]):
    num_m = ct.cdiv(a.shape[0], TM)
    num_n = ct.cdiv(b.shape[1], TN)
    n_k = ct.num_tiles(a, axis=1, shape=(TM, TK))
    for t in range(ct.bid(0), num_m * num_n, ct.num_blocks(0)):
        bm, bn = grouped_tile(t, num_m, num_n, GROUP)
        acc = ct.full((TM, TN), 0.0, dtype=ct.float32)
        for k in range(n_k):
            at = ct.load(a, index=(bm, k), shape=(TM, TK), padding_mode=ct.PaddingMode.ZERO)
            bt = ct.load(b, index=(k, bn), shape=(TK, TN), padding_mode=ct.PaddingMode.ZERO)
            acc = ct.mma(at, bt, acc)
        acc = epilogue(acc, bias, bn, TN, has_bias, act)
        ct.store(c, index=(bm, bn), tile=ct.astype(acc, c.dtype), allow_tma=TMA_STORE)


def tma_store_ok(c: torch.Tensor) -> bool:
    """TMA stores only where C's rows are whole 16-byte units: a TMA store writes on to the next
    16-byte boundary past a shorter inner extent (with M = 1 the row stride no longer rules TMA
    out, so tileiras would pick it)."""
    return (c.shape[-1] * c.element_size()) % 16 == 0


def bind_launch(a, b, bias, act: int, c, cfg: dict, kernel=None):
    """A zero-argument launch for the planned ``cfg`` (TM, TN, TK, GROUP, grid)."""
    k = kernel or gemm_epilogue_tiled_kernel
    bias_arg = c[0] if bias is None else bias  # never read when has_bias is 0
    args = (a, b, bias_arg, c, int(bias is not None), act, cfg["TM"], cfg["TN"], cfg["TK"], cfg["GROUP"],
            tma_store_ok(c))
    grid = (cfg["grid"], 1, 1)

    def launch():
        ct.launch(torch.cuda.current_stream(), grid, k, args)
    return launch
