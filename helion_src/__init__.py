"""Helion kernels: one twin file per problem, variants <problem>_<algorithm>.py, one dispatch.py (tuned configurations as rules)."""


class lazy_module:
    """A module imported on its first attribute access (the kernel modules import helion; the
    planner's rules and the layer's registration need none of it)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        from importlib import import_module
        return getattr(import_module(self._name), attr)
