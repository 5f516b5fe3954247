"""cuTile vector add, unmasked: the full tiles are loaded and stored without bounds checks
(``check_bounds=False``, tileiras 13.4+), only the one ragged tail tile is checked.

tileiras vectorises a load (16-byte LDG/STG) only where it can prove the array's length and base
divisible by the vector: an odd N would make every access a scalar one. So the launch passes
the vector twice, as views of the same memory (no copy): ``xb, yb, ob`` the first n_full * TILE
elements (a length divisible by TILE), ``xt, yt, ot`` the rest (shorter than a tile, padded on
load and dropped on store). Program bid < n_full adds tile bid of the body, the last program
(when there is a tail) the tail. TILE is the planner's (``dispatch.plan_vector_add``).
"""
import cuda.tile as ct
import torch


@ct.kernel
def vector_add_unmasked_kernel(xb, yb, ob, xt, yt, ot, TILE: ct.Constant[int]):
    bid = ct.bid(0)
    if bid < xb.shape[0] // TILE:
        a = ct.load(xb, index=(bid,), shape=(TILE,), check_bounds=False)
        b = ct.load(yb, index=(bid,), shape=(TILE,), check_bounds=False)
        ct.store(ob, index=(bid,), tile=a + b, check_bounds=False)
    else:
        a = ct.load(xt, index=(0,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
        b = ct.load(yt, index=(0,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
        ct.store(ot, index=(0,), tile=a + b, allow_tma=False)  # TMA would write to 16 bytes


def split_args(x, y, out, tile: int) -> tuple:
    """The kernel's arrays: body views (n_full * tile elements) and tail views (the rest); an
    empty part is given the other part's views, which its programs never reach."""
    n = x.shape[0]
    cut = (n // tile) * tile
    body = (x[:cut], y[:cut], out[:cut])
    tail = (x[cut:], y[cut:], out[cut:])
    if cut == 0:
        body = tail
    if cut == n:
        tail = body
    return body + tail + (tile,)


def bind_launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, tile: int, kernel=None):
    """A zero-argument launch of ``kernel`` (default: the kernel above) over the whole vector."""
    k = kernel or vector_add_unmasked_kernel
    grid = (-(-x.shape[0] // tile), 1, 1)
    args = split_args(x, y, out, tile)

    def launch():
        ct.launch(torch.cuda.current_stream(), grid, k, args)
    return launch
