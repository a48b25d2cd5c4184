"""compiled/qgemm.py's and dqgemm.py's quad kernels with the vpdpbusd dot product (compiled/dots.py)."""
