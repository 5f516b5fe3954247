"""A plugin file (``--plugin harness/admit_candidates.py``): admits the layers' candidates
(``register(..., candidate=True)``) into the registry of the process that loads it.
``python -m harness check`` passes it to its workers."""
from harness import registry

registry.admit_candidates()
