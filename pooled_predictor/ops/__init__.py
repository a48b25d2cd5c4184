"""Operators: the kernel registry, device-independent shape rules, kernels per device.

Importing this package imports every device's kernel modules (ops/cpu; ops/cuda
where it exists and cupy imports): each registers its kernels on import, so the
registry (which imports no kernels) finds them.
"""

from .context import NotStatic, OpContext
from .registry import KernelDef, find, kernel, lookup, missing_kernels, registered_ops, schema_version
from .shapes import get_rule, shape_rule
from . import cpu  # noqa: F401,E402  (the CPU kernels, registered on import)

try:
    from . import cuda  # noqa: F401
except ImportError:  # no cupy: no cuda kernels
    pass

__all__ = ["KernelDef", "NotStatic", "OpContext", "find", "get_rule", "kernel", "lookup",
           "missing_kernels", "registered_ops", "schema_version", "shape_rule"]
