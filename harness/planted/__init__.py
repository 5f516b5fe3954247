"""Planted-bug implementations for ``python -m harness selftest``: each bug the verifier must
catch, next to its correct twin. They are registered nowhere; ``harness.selftest`` builds
``Implementation`` objects from them directly, so ``list``/``compare`` never see them.

``triton_bugs`` must be imported with ``TRITON_INTERPRET=1`` already set (the kernels run under
the Triton interpreter on CPU tensors); ``torch_bugs`` runs anywhere.
"""
