"""Compiled CPU kernels: the loops numpy cannot vectorize (per-pixel sampling), as
numba functions (`@njit(nogil=True, cache=True)`, never parallel: the pool's
workers are the parallelism). Each is compiled for float32 and float64 only;
callers cast float16 to float32 around them.
"""
