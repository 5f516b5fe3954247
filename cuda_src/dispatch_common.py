"""What every planner module of the CUDA C++ layer shares: the device a plan is for, the data
types, ``Decline``, and the plan objects (``Plan``: one kernel launch; ``Launches``: what a case
runs). Pure Python; the problem modules (``dispatch_vector_add``, ``dispatch_softmax``,
``dispatch_gemm``) import it and ``dispatch`` (the one entry) gathers them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------------------
# the device the plans are for


@dataclass(frozen=True)
class Device:
    """What the planner needs to know of a GPU. The default is an H100/H200 (used without a GPU)."""
    sms: int = 132
    cc: tuple[int, int] = (9, 0)
    smem_optin: int = 232448      # dynamic shared memory one CTA may opt in to (bytes)
    smem_per_sm: int = 233472     # shared memory of one SM (bytes)
    cooperative: bool = True      # cooperative launch supported
    sm90a: bool = True            # the sm_90a code of this build runs here (wgmma, TMA)
    # the code that runs here has sm_90's thread-block clusters and bulk copies: the kl_cuda module
    # only where its sm_90a code runs (elsewhere the driver runs its compute_80 PTX, which has
    # neither); NVRTC (cupy) compiles for the device itself, so from compute capability 9.0 on
    clusters: bool = True


H200 = Device()
THREADS_PER_SM = 2048
REGS_PER_SM = 65536
CTYPE = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
ESIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
DTYPE_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}
ACT_CODE = {"none": 0, "relu": 1, "gelu": 2}


def device_of(device) -> Device:
    """This planner's ``Device`` for a ``kltools.plan.Device`` (the H200 itself for the default)."""
    from kltools.plan import H200 as KL_H200
    if device == KL_H200:
        return H200
    hopper = tuple(device.cc) == (9, 0)
    return Device(sms=device.sms, cc=tuple(device.cc), smem_optin=device.smem_per_cta,
                  smem_per_sm=device.smem_per_sm, sm90a=hopper, clusters=tuple(device.cc) >= (9, 0))


class Decline(ValueError):
    """This path (or variant) cannot take this case; the message says why."""


# ---------------------------------------------------------------------------------------------------
# plans

@dataclass
class Plan:
    """One kernel launch. ``args``: ((type, value), ...) in the kernel's parameter order; a value is
    an int, a buffer name (``"x"``, ``"out"``, ``"slots"``...) the launcher resolves to a pointer,
    or for ``tma`` a tuple (buffer, rows, cols, ld, box_rows, box_cols[, ((size, stride), ...)]): the
    optional last item the dimensions beyond the rows, boxes of 1 there."""
    kernel: str
    grid: tuple[int, int, int]
    block: int
    args: tuple
    smem: int = 0
    cluster: int = 1                 # CTAs per cluster
    cluster_launch: bool = False     # the cluster is a launch attribute (else compile-time dims)
    cooperative: bool = False
    zero: tuple = ()                 # workspace names zeroed on the stream before this launch
    max_dynamic_smem: int = 0        # function attributes, set once in prepare
    carveout: int = -1
    nonportable_cluster: bool = False


@dataclass
class Launches:
    """What a case runs: one or more plans in stream order, the workspaces they need (name -> bytes,
    allocated once in prepare), and a description for reports."""
    plans: list[Plan]
    workspace: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    @property
    def kernel(self) -> str:
        """The main kernel (the one a report names)."""
        return self.info.get("kernel", self.plans[0].kernel if self.plans else "")


def _pow2_at_least(v: int) -> int:
    return 1 if v <= 1 else 1 << (int(v) - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _blocks_per_sm(threads: int, regs: int, cap: int = 32) -> int:
    return max(1, min(cap, THREADS_PER_SM // threads, REGS_PER_SM // (threads * regs)))


def _why(plan: Launches, why: str) -> Launches:
    plan.info["why"] = why
    return plan


def family(kernel: str) -> str:
    return kernel.split("<", 1)[0]


def _types():
    return (("float", 4), ("__half", 2), ("__nv_bfloat16", 2))
