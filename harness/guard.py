"""The output buffer an implementation writes: NaN-poisoned, between two guard bands.

``GuardedOut(shape, dtype, device)`` allocates one byte buffer ``[before | out | after]``; ``out``
is a view of the middle whose data pointer keeps the allocation's 256-byte alignment. The bands
hold a fixed pseudo-random byte pattern; ``check()`` after a launch says how many bytes were
written outside ``out`` and on which side (a missing bound check, a grid that overruns its last
tile, a wrong row stride on the last rows).
"""
from __future__ import annotations

import math

import torch

GUARD_MIN = 64 * 1024         # bytes on each side
GUARD_MAX = 64 * 1024 * 1024  # a band grows with the output (1/16 of it) up to this
_PATTERN: dict = {}


def guard_bytes(nbytes: int) -> int:
    g = max(GUARD_MIN, min(GUARD_MAX, nbytes // 16))
    return -(-g // 256) * 256


def _pattern(nbytes: int, device) -> torch.Tensor:
    key = (nbytes, str(device))
    if key not in _PATTERN:
        g = torch.Generator().manual_seed(0x6B6C)  # fixed: the same bands in every process
        _PATTERN.clear()  # keep one pattern at a time (they can be tens of MB)
        _PATTERN[key] = torch.randint(0, 256, (nbytes,), generator=g, dtype=torch.uint8).to(device)
    return _PATTERN[key]


class GuardedOut:
    def __init__(self, shape, dtype: torch.dtype, device, shared: bool = False):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        es = torch.empty((), dtype=dtype).element_size()
        self.nbytes = math.prod(self.shape) * es
        self.g = guard_bytes(self.nbytes)
        self.buf = torch.empty(self.g + self.nbytes + self.g, dtype=torch.uint8, device=device)
        if shared and self.buf.device.type == "cpu":
            self.buf.share_memory_()  # so the checker process can read it without a copy
        self.out = self.buf[self.g:self.g + self.nbytes].view(dtype).view(self.shape)
        self.poison()

    def poison(self) -> None:
        """NaN into ``out``, the pattern into both bands."""
        pat = _pattern(self.g, self.buf.device)
        self.buf[:self.g].copy_(pat)
        self.buf[self.g + self.nbytes:].copy_(pat)
        if self.nbytes:
            self.out.fill_(float("nan"))

    def check(self) -> str | None:
        """None when both bands are intact, else what was written where."""
        pat = _pattern(self.g, self.buf.device)
        msgs = []
        for side, band in (("before the start", self.buf[:self.g]),
                           ("past the end", self.buf[self.g + self.nbytes:])):
            diff = band != pat
            if not bool(diff.any()):
                continue
            idx = torch.nonzero(diff).flatten()
            n = int(idx.numel())
            if side == "past the end":
                lo, hi = int(idx[0]), int(idx[-1])
                msgs.append(f"{n} byte(s) written {side} of out (bytes +{lo}..+{hi} after its last byte)")
            else:
                lo, hi = self.g - int(idx[-1]), self.g - int(idx[0])
                msgs.append(f"{n} byte(s) written {side} of out (bytes -{lo}..-{hi} before its first byte)")
        return "; ".join(msgs) or None
