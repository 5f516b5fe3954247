"""The one row type: one implementation on one case, from the worker through to the files.

Rows travel between processes as JSON (``to_dict``); ``Row.of`` builds the blank row of an
implementation (or of an id that did not even load) so that every producer - the worker, the
runner blaming a crash, the CLI marking rows that failed the verify suite - fills the same fields.
Metrics (GB/s, % of ceiling, ...) are added by ``harness.report.add_metrics`` on the dicts.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

STATUSES = ("PASS", "FAIL", "SKIP")
# kind: what the status means
KINDS = ("verified", "mismatch", "error", "crash", "timeout", "unsupported", "unavailable",
         "compile-only", "needs-gpu", "too-large-for-cpu", "failed-verify-suite", "timing-error",
         "timed-mismatch", "implausible", "not-run", "out-of-memory")
# SKIP kinds that are about the machine, not the implementation: unavailable (a package or
# device missing), needs-gpu, too-large-for-cpu, out-of-memory (the GPU ran out of memory even
# with the case run alone: harness.gpumem; never a FAIL)


@dataclass
class Row:
    problem: str
    impl: str
    layer: str
    name: str
    case: dict
    description: str = ""
    role: str = "variant"
    phase: str = "timed"            # "verify-suite" or "timed"
    status: str | None = None
    kind: str | None = None
    reason: str = ""
    max_abs_err: float | None = None
    rel_err: float | None = None
    compile: dict = field(default_factory=dict)
    time: dict | None = None
    traffic_bytes: int | None = None
    flops: int | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def of(cls, problem, case, impl_id: str, impl=None, phase: str = "timed") -> "Row":
        """The blank row of ``impl_id`` (``impl`` when it is registered) on ``case``."""
        layer, _, name = impl_id.partition(":")
        return cls(problem=problem.name, impl=impl_id, layer=getattr(impl, "layer", layer),
                   name=getattr(impl, "name", name), case=case.to_json(),
                   description=getattr(impl, "description", ""),
                   role=getattr(impl, "role", "variant"), phase=phase,
                   traffic_bytes=problem.traffic(case), flops=problem.flops(case))

    def to_dict(self) -> dict:
        d = asdict(self)
        extra = d.pop("extra")
        d.update(extra)
        return d
