"""The ``ptxas -v`` facts tool lives in ``kltools.ptxas`` (shared with the kernel folders, which
import nothing of the harness); this name stays for the harness's and the adapters' callers."""
from kltools.ptxas import (_FUNC, find_ptxas, parse_ptxas_log, ptxas_candidates, ptxas_info,  # noqa: F401
                           summarize)
