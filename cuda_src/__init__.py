"""CUDA C++ kernel sources of the cuda and cupy layers, and their planner (dispatch.py)."""
