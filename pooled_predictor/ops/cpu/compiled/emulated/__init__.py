"""compiled/qgemm.py's and dqgemm.py's quad kernels with the emulated dot product (compiled/dots.py)."""
