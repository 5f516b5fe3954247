"""cuTile vector add, the teaching twin: out = x + y for any length.

A cuTile kernel names whole tiles, not threads: program ``bid`` loads tile ``bid`` of x and y
(TILE elements each), adds them and stores the sum. The last tile may run past the end of the
arrays: ``ct.load`` pads the elements beyond it and ``ct.store`` drops them, so any N works
without a host-side pad. The compiler (tileiras) picks the threads and the vector width (from
the base addresses' alignment, which the launch passes as facts about the arrays).
"""
import cuda.tile as ct
import torch

TILE = 1024


@ct.kernel
def vector_add_kernel(x, y, out, TILE: ct.Constant[int]):
    bid = ct.bid(0)
    a = ct.load(x, index=(bid,), shape=(TILE,))
    b = ct.load(y, index=(bid,), shape=(TILE,))
    ct.store(out, index=(bid,), tile=a + b)


def vector_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    grid = (-(-x.shape[0] // TILE), 1, 1)
    ct.launch(torch.cuda.current_stream(), grid, vector_add_kernel, (x, y, out, TILE))
