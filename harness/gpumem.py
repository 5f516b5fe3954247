"""GPU memory: what verifying a case needs, how much of it parallel workers may hold at once, and
which errors mean the GPU ran out of it (docs/DESIGN.md, "GPU memory").

Each parallel worker and its checker keep what PyTorch's caching allocator once reserved; the
float64 reference of the largest cases takes tens of GB. So the parent admits tasks (``Admission``)
such that the estimates of the cases being verified (``case_bytes``) stay under a budget taken
from the device's memory (``budget``), a worker gives a large case's memory back when it is done
(``releases``), and an out-of-memory error (``oom``) is retried alone, never reported as a FAIL.
"""
from __future__ import annotations

import functools
import math
import threading

GiB = 2 ** 30
ADMIT_SHARE = 0.85          # of the device's memory: the running estimates and every process's own
PROCESS_BYTES = 3 * GiB // 2  # a worker and its checker: two CUDA contexts, modules, library workspaces
RELEASE_SHARE = 1 / 64      # a case estimated above this share of the device gives its memory back after
CHECK_TEMPS = 10            # float64 temporaries of one chunk of the streaming check (output_check)
ALONE = math.inf            # the need of a task that must run with no other GPU work (a retry)


def case_bytes(problem, case) -> int:
    """Peak GPU bytes of verifying one implementation on ``case``, worker and checker together:
    the inputs (generated in fp32 first), the guarded output and up to two more output-sized
    tensors (a returned one, the first launch's copy) in the worker; the pristine inputs, the
    float64 copies of the inputs and of the outputs the reference and its bound hold at their peak
    (``problem.ref_f64_inputs``, ``ref_f64_outputs``) and the check's chunk temporaries in the
    checker. From the problem's bytes model: ``traffic`` reads each input once and writes the
    output once."""
    from .output_check import CHUNK
    from .problems import elem_size

    s = elem_size(case.dtype)
    out = math.prod(problem.out_shape(case))
    ins = max(0, problem.traffic(case) // s - out)
    worker = ins * (s + 4) + out * s * 3
    checker = (ins * (s + 8 * problem.ref_f64_inputs) + out * 8 * problem.ref_f64_outputs
               + min(out, CHUNK) * 8 * CHECK_TEMPS)
    return int(worker + checker)


def task_bytes(task: dict) -> int:
    """``case_bytes`` of a runner task (its implementations run one after the other)."""
    from . import problems
    from .case import Case
    return case_bytes(problems.get(task["problem"]), Case.from_json(task["case"]))


@functools.cache
def device_total(device: str = "cuda") -> int | None:
    """The device's memory in bytes (from its properties: no CUDA context), None without a GPU."""
    if not str(device).startswith("cuda"):
        return None
    import torch
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(0).total_memory)


def budget(total: int, processes: int) -> int:
    """What the running estimates may add up to on a device of ``total`` bytes shared by
    ``processes`` workers (each with its checker): ``ADMIT_SHARE`` of it, less each process's own
    memory and what a worker may keep cached after a case too small to give it back."""
    own = processes * (PROCESS_BYTES + int(RELEASE_SHARE * total))
    return max(int(ADMIT_SHARE * total) - own, int(total) // 4)


def releases(nbytes: int, total: int | None) -> bool:
    """Whether a case of ``nbytes`` gives its cached memory back when done (on a device of
    ``total`` bytes): above ``RELEASE_SHARE`` of it (an empty_cache and a collection cost more than
    a small case's whole check)."""
    return total is not None and nbytes > RELEASE_SHARE * total


_OOM_TEXT = ("CUDA out of memory", "CUDA error: out of memory", "CUDA_ERROR_OUT_OF_MEMORY",
             "cudaErrorMemoryAllocation", "OutOfMemoryError")


def oom(e: BaseException | str) -> bool:
    """Whether an error (or its message) says the GPU ran out of memory: torch's OutOfMemoryError
    (also as reported by the checker), CuPy's, a CUDA allocation error. Not Triton's 'out of
    resource' (shared memory or registers of one kernel: the kernel's own limit)."""
    if isinstance(e, BaseException):
        if any(c.__name__ == "OutOfMemoryError" for c in type(e).__mro__):
            return True
        e = str(e)
    return any(t in e for t in _OOM_TEXT)


def gib(n: float) -> str:
    """Bytes for a reason: GiB with one decimal, MiB below a tenth of a GiB."""
    return f"{n / GiB:.1f} GiB" if n >= GiB / 10 else f"{n / 2 ** 20:.1f} MiB"


class Admission:
    """GPU memory held by the lanes (one worker each) of the parallel phase. ``take(owner,
    need)``, before a task is sent: the owner is to hold ``need`` bytes in all (the largest
    estimate among its tasks in flight). Granted when no other owner has waited longer (first
    come, first served: a large task is not starved by a stream of small ones) and either it
    fits under the budget beside what the others hold or the others hold nothing (a need above
    the budget, or ``ALONE``, then runs alone). A refused owner keeps its turn and asks again
    (the lanes poll) until granted, ``withdraw`` or ``release``. ``shrink`` after a task is done
    (always granted)."""

    def __init__(self, budget_bytes: int):
        self.budget = int(budget_bytes)
        self.held: dict = {}
        self.waiting: dict = {}   # owner -> None, in the order they first waited
        self.lock = threading.Lock()

    def take(self, owner, need: float) -> bool:
        with self.lock:
            first = next(iter(self.waiting), owner)
            others = sum(v for o, v in self.held.items() if o != owner)
            if first == owner and (others == 0 or others + need <= self.budget):
                self.held[owner] = need
                self.waiting.pop(owner, None)
                return True
            self.waiting.setdefault(owner, None)
            return False

    def shrink(self, owner, need: float) -> None:
        """``owner``'s tasks in flight now need at most ``need``."""
        with self.lock:
            if owner in self.held:
                self.held[owner] = min(self.held[owner], need)

    def withdraw(self, owner) -> None:
        """``owner`` no longer asks (nothing of its is ready to run): it gives up its turn."""
        with self.lock:
            self.waiting.pop(owner, None)

    def release(self, owner) -> None:
        """``owner`` is done: it holds nothing and waits for nothing."""
        with self.lock:
            self.held.pop(owner, None)
            self.waiting.pop(owner, None)

    def in_use(self) -> float:
        with self.lock:
            return sum(self.held.values())
