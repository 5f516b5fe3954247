"""Tools shared by the harness and the kernel folders (``*_src/``), which import nothing of the
harness: ``kltools.ptxas`` (resource facts from ``ptxas -v``),
``kltools.triton_interp`` (Triton interpreter fixes: bf16 as the GPU computes it)."""
