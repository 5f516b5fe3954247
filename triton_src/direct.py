"""Each tuned variant called directly on tensors, with the planner's configuration unless one is
given: for tests, tuning scripts and readers who want one kernel without the default's choice.

The variant modules expose their ``config``, ``launch_spec`` and ``bind_launch`` and never call the
planner; this module sits above both (variants <- dispatch <- direct), so the planner's tables are
read here, not in the kernels' files.
"""
from __future__ import annotations

import torch

from . import device_facts, dispatch
from . import gemm_epilogue_splitk as _splitk
from . import gemm_epilogue_tiled as _tiled
from . import softmax_block as _block
from . import softmax_online as _online
from . import softmax_rows as _rows
from . import softmax_split as _split
from .checks import gemm_args, softmax_args


def softmax_block(x: torch.Tensor, out: torch.Tensor | None = None, *,
                  num_warps: int | None = None) -> torch.Tensor:
    """Row softmax with the block kernel (config from ``dispatch`` unless given)."""
    M, N, out = softmax_args(x, out)
    if (why := _block.supports(N)):
        raise ValueError(f"x: {why}")
    cfg = dispatch.softmax_block_config(N, x.element_size())
    if num_warps is not None:
        cfg["num_warps"] = num_warps
    _block.bind_launch(x, out, cfg)()
    return out


def softmax_rows(x: torch.Tensor, out: torch.Tensor | None = None, *, rows: int | None = None,
                 num_warps: int | None = None, programs: int | None = None) -> torch.Tensor:
    """Row softmax with the rows kernel (config from ``dispatch`` unless given)."""
    M, N, out = softmax_args(x, out)
    if (why := _rows.supports(N)):
        raise ValueError(f"x: {why}")
    cfg = dispatch.softmax_rows_config(N, x.element_size())
    if rows is not None:
        if rows < 1 or rows & (rows - 1):
            raise ValueError(f"rows: must be a power of two, got {rows}")
        cfg["ROWS"] = rows
    if num_warps is not None:
        cfg["num_warps"] = num_warps
    _rows.bind_launch(x, out, cfg, programs)()
    return out


def softmax_online(x: torch.Tensor, out: torch.Tensor | None = None, *, block: int | None = None,
                   num_warps: int | None = None, programs: int | None = None) -> torch.Tensor:
    """Row softmax with the online kernel (config from ``dispatch`` unless given)."""
    M, N, out = softmax_args(x, out)
    cfg = dispatch.softmax_online_config(M, N, x.element_size(), device_facts(x.device))
    if block is not None:
        cfg = _online.config(N, block, num_warps or cfg["num_warps"], cfg["NUM_STAGES"], cfg["programs"])
    if num_warps is not None:
        cfg["num_warps"] = num_warps
    if programs is not None:
        cfg["programs"] = programs
    _online.bind_launch(x, out, cfg)()
    return out


def softmax_split(x: torch.Tensor, out: torch.Tensor | None = None, *, chunk: int | None = None,
                  num_warps: int | None = None, programs: int | None = None,
                  prefetch: bool = False) -> torch.Tensor:
    """Row softmax with the split kernel; CHUNK and warps from ``dispatch`` unless given (a given
    chunk alone gets the warps that keep ``dispatch``'s values a thread), compiled under the
    register cap the planner's rule decides. Any N works here (C = 1 for a row of one chunk);
    ``softmax_split.supports`` declines the rows softmax_block holds in one program."""
    M, N, out = softmax_args(x, out)
    facts = device_facts(x.device)
    if chunk is None:
        cfg = dispatch.softmax_split_config(M, N, x.element_size(), facts)
        cfg = _split.config(N, cfg["CHUNK"], num_warps or cfg["num_warps"], prefetch)
    else:
        cfg = _split.config(N, chunk, num_warps or dispatch.split_warps(chunk), prefetch)
    _split.bind_launch(x, out, dispatch.with_split_register_cap(x, out, cfg, facts), programs)()
    return out


def gemm_epilogue_tiled(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                        act: str = "relu", out: torch.Tensor | None = None, *,
                        config: dict | None = None) -> torch.Tensor:
    """C = act(a @ b + bias) with the tiled kernel; ``config`` from ``dispatch`` unless given."""
    M, N, K, out = gemm_args(a, b, bias, act, out)
    vec = _tiled.vec_facts(a, b, bias, out)
    aligned = dispatch.gemm_aligned(a.element_size(), vec["K_VEC"], vec["N_VEC"])
    cfg = config or dispatch.gemm_tiled_config(M, N, K, device_facts(a.device), aligned)
    _tiled.bind_launch(a, b, bias, act, out, cfg)()
    return out


def gemm_epilogue_splitk(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                         act: str = "relu", out: torch.Tensor | None = None, *,
                         config: dict | None = None) -> torch.Tensor:
    """C = act(a @ b + bias) with split-K; ``config`` from ``dispatch`` unless given."""
    M, N, K, out = gemm_args(a, b, bias, act, out)
    vec = _tiled.vec_facts(a, b, bias, out)
    aligned = dispatch.gemm_aligned(a.element_size(), vec["K_VEC"], vec["N_VEC"])
    cfg = config or dispatch.gemm_splitk_config(M, N, K, device_facts(a.device), aligned)
    _splitk.bind_launch(a, b, bias, act, out, cfg)()
    return out


def gemm_epilogue_tma(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                      act: str = "relu", out: torch.Tensor | None = None, *,
                      config: dict | None = None) -> torch.Tensor:
    """C = act(a @ b + bias) with the TMA kernel; ``config`` from ``dispatch`` unless given.
    ValueError naming the operand when TMA cannot address it."""
    from . import gemm_epilogue_tma as _tma
    from . import interpreting
    M, N, K, out = gemm_args(a, b, bias, act, out)
    facts = device_facts(a.device)
    cfg = config or dispatch.gemm_tma_config(M, N, K, facts)
    sms = dispatch.INTERPRETER_SMS if interpreting() else facts["sms"]
    _tma.bind_launch(a, b, bias, act, out, cfg, sms)()
    return out
