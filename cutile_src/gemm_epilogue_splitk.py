"""cuTile GEMM + epilogue, split-K: for few rows, where the C tiles alone cannot fill the SMs.
Program (tile, s) accumulates K tiles s*kper .. (s+1)*kper-1 of its C tile into slice s of an
fp32 workspace [SPLIT, M, N]; a second kernel sums the SPLIT slices of each C tile in a fixed
order (deterministic), applies the bias and activation (the tiled variant's epilogue) and stores.
"""
import cuda.tile as ct
import torch

from cutile_src.gemm_epilogue_tiled import epilogue, tma_store_ok


@ct.kernel
def gemm_splitk_partial_kernel(a, b, ws, kper: int, TM: ct.Constant[int], TN: ct.Constant[int],
                               TK: ct.Constant[int], TMA_STORE: ct.Constant[bool]):
    num_n = ct.cdiv(b.shape[1], TN)
    bm, bn, s = ct.bid(0) // num_n, ct.bid(0) % num_n, ct.bid(1)
    n_k = ct.num_tiles(a, axis=1, shape=(TM, TK))
    acc = ct.full((TM, TN), 0.0, dtype=ct.float32)
    for k in range(s * kper, min(n_k, (s + 1) * kper)):
        at = ct.load(a, index=(bm, k), shape=(TM, TK), padding_mode=ct.PaddingMode.ZERO)
        bt = ct.load(b, index=(k, bn), shape=(TK, TN), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(at, bt, acc)
    ct.store(ws, index=(s, bm, bn), tile=ct.reshape(acc, (1, TM, TN)), allow_tma=TMA_STORE)


@ct.kernel
def gemm_splitk_reduce_kernel(ws, bias, c, has_bias: int, act: int, RM: ct.Constant[int],
                              RN: ct.Constant[int], TMA_STORE: ct.Constant[bool]):
    bm, bn = ct.bid(0), ct.bid(1)
    acc = ct.full((RM, RN), 0.0, dtype=ct.float32)
    for s in range(ws.shape[0]):
        acc = acc + ct.reshape(ct.load(ws, index=(s, bm, bn), shape=(1, RM, RN)), (RM, RN))
    acc = epilogue(acc, bias, bn, RN, has_bias, act)
    ct.store(c, index=(bm, bn), tile=ct.astype(acc, c.dtype), allow_tma=TMA_STORE)


def workspace(cfg: dict, M: int, N: int, device, pad: bool = False) -> torch.Tensor:
    """The fp32 workspace [SPLIT, M, N]; ``pad``: N rounded up to 16 columns (64-byte rows, so
    that the partials store and the reduce load whole rows wide)."""
    cols = -(-N // 16) * 16 if pad else N
    return torch.empty((cfg["SPLIT"], M, cols), dtype=torch.float32, device=device)


def bind_launch(a, b, bias, act: int, c, cfg: dict, kernels=None, ws=None):
    """Two launches (partial, reduce) for the planned ``cfg``; the workspace [SPLIT, M, >= N]
    fp32 (allocated here unless given) is made once, outside the timed launch."""
    kp, kr = kernels or (gemm_splitk_partial_kernel, gemm_splitk_reduce_kernel)
    M, N = c.shape
    if ws is None:
        ws = workspace(cfg, M, N, c.device)
    bias_arg = c[0] if bias is None else bias
    tiles = -(-M // cfg["TM"]) * -(-N // cfg["TN"])
    g1, g2 = (tiles, cfg["SPLIT"], 1), (-(-M // cfg["RM"]), -(-N // cfg["RN"]), 1)
    a1 = (a, b, ws, cfg["KPER"], cfg["TM"], cfg["TN"], cfg["TK"], tma_store_ok(ws))
    a2 = (ws, bias_arg, c, int(bias is not None), act, cfg["RM"], cfg["RN"], tma_store_ok(c))

    def launch():
        stream = torch.cuda.current_stream()
        ct.launch(stream, g1, kp, a1)
        ct.launch(stream, g2, kr, a2)
    launch.workspace = ws
    return launch
