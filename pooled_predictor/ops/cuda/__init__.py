"""CUDA kernels, one module per op family as in ops/cpu; CUDA C in kernels/*.cu (sources.py).

Importing this package registers every CUDA kernel for device "cuda" whether or not CuPy is
installed: the registry then says what this build covers (`pooled-predictor ops --device cuda`),
and CuPy is needed only when a kernel is set up (runtime.py). engine/device.py refuses device="cuda"
with a typed error naming what is missing (CuPy, a GPU) before that. Ops without a CUDA kernel,
or whose kernel does not support a node's shapes or dtypes, run on the CPU behind host<->device
copies (engine/placement.py).
"""

from . import attention, conv, elementwise, gemm, logical, normalization, pooling, rearrange, reduce, resize  # noqa: F401
from .runtime import unavailable

__all__ = ["unavailable"]
