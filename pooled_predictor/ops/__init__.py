"""Operators: the kernel registry, device-independent shape rules, kernels per device."""

from .context import NotStatic, OpContext
from .registry import KernelDef, find, kernel, lookup, missing_kernels, registered_ops, schema_version
from .shapes import get_rule, shape_rule

__all__ = ["KernelDef", "NotStatic", "OpContext", "find", "get_rule", "kernel", "lookup",
           "missing_kernels", "registered_ops", "schema_version", "shape_rule"]
