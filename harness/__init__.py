"""kernel-layers harness: one interface for every layer, honest verification and timing.

``from harness import register`` is the public plugin API (see ``harness.registry``).
"""
from .case import Case
from .loc_plan import planned
from .registry import Source, planned_sources, register

__all__ = ["Case", "Source", "planned", "planned_sources", "register"]
__version__ = "0.1.0"
