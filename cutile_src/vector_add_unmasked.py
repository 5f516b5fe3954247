"""cuTile vector add, unmasked: every full tile is loaded and stored without bounds checks
(``check_bounds=False``, tileiras 13.4+), only the one ragged tail tile is checked.

With bounds checks every element of a tile carries a compare against the array's length; the
full tiles (all but at most one) need none. TILE is the planner's (``dispatch.plan_vector_add``).
"""
import cuda.tile as ct
import torch


@ct.kernel
def vector_add_unmasked_kernel(x, y, out, TILE: ct.Constant[int]):
    bid = ct.bid(0)
    if bid < x.shape[0] // TILE:
        a = ct.load(x, index=(bid,), shape=(TILE,), check_bounds=False)
        b = ct.load(y, index=(bid,), shape=(TILE,), check_bounds=False)
        ct.store(out, index=(bid,), tile=a + b, check_bounds=False)
    else:
        a = ct.load(x, index=(bid,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
        b = ct.load(y, index=(bid,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
        ct.store(out, index=(bid,), tile=a + b)


def bind_launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, tile: int, kernel=None):
    """A zero-argument launch of ``kernel`` (default: the kernel above) over the whole vector."""
    k = kernel or vector_add_unmasked_kernel
    grid = (-(-x.shape[0] // tile), 1, 1)
    args = (x, y, out, tile)

    def launch():
        ct.launch(torch.cuda.current_stream(), grid, k, args)
    return launch
