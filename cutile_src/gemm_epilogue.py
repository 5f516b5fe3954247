"""cuTile GEMM + bias + activation, the teaching twin: C = act(A @ B + bias), any M, N, K.

Program (bm, bn) owns one TM x TN tile of C: it walks K in tiles of TK, loading an A tile and a B
tile (zero-padded past the edges, so ragged M, N and K add nothing) and accumulating
``ct.mma(a, b, acc)`` in fp32; tileiras picks the tensor-core instructions. The epilogue runs on
the accumulator tile before the one store: add the bias row, apply the activation (GELU in its
tanh form), cast to C's dtype. The store drops rows and columns past the edges. ``has_bias``
and ``act`` are runtime arguments (one compiled kernel serves every epilogue); the tile shape is
a compile-time constant.
"""
import cuda.tile as ct
import torch

TM, TN, TK = 128, 128, 64
ACTS = {"none": 0, "relu": 1, "gelu": 2}


@ct.kernel
def gemm_epilogue_kernel(a, b, bias, c, has_bias: int, act: int,
                         TM: ct.Constant[int], TN: ct.Constant[int], TK: ct.Constant[int]):
    bm, bn = ct.bid(0), ct.bid(1)
    acc = ct.full((TM, TN), 0.0, dtype=ct.float32)
    for k in range(ct.num_tiles(a, axis=1, shape=(TM, TK))):
        at = ct.load(a, index=(bm, k), shape=(TM, TK), padding_mode=ct.PaddingMode.ZERO)
        bt = ct.load(b, index=(k, bn), shape=(TK, TN), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(at, bt, acc)
    if has_bias != 0:
        acc = acc + ct.astype(ct.load(bias, index=(bn,), shape=(TN,)), ct.float32)
    if act == 1:
        acc = ct.maximum(acc, 0.0)
    if act == 2:
        acc = 0.5 * acc * (1.0 + ct.tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)))
    # allow_tma=False: a TMA store writes on to the next 16-byte boundary when C's rows are not
    # a multiple of 16 bytes (legal only with one row, M = 1, where the row stride does not count)
    ct.store(c, index=(bm, bn), tile=ct.astype(acc, c.dtype), allow_tma=False)


def gemm_epilogue(a: torch.Tensor, b: torch.Tensor, bias, act: str, c: torch.Tensor) -> None:
    grid = (-(-a.shape[0] // TM), -(-b.shape[1] // TN), 1)
    bias_arg = c[0] if bias is None else bias  # never read when has_bias is 0
    ct.launch(torch.cuda.current_stream(), grid, gemm_epilogue_kernel,
              (a, b, bias_arg, c, int(bias is not None), ACTS[act], TM, TN, TK))
