"""Helion kernels: one twin file per problem, variants <problem>_<algorithm>.py, one dispatch.py (tuned configurations as rules)."""
