"""Shape rules: output shapes and dtypes of each op, shared by every device.

    @shape_rule("Relu")
    def _same(ctx): return [(ctx.shape(0), ctx.dtype(0))]

A rule returns one (shape, dtype) per node output (anything for an absent
optional output). It may read static input values with ctx.value(i), which
raises NotStatic when the value is only known at forward time; the Net then
runs that node (and what depends on it) with shapes computed per forward.
Shape errors are raised with ctx.error(...) (ShapeInferenceError).
"""

from __future__ import annotations

from typing import Callable

_RULES: dict[tuple[str, str], Callable] = {}


def shape_rule(*op_types: str, domain: str = ""):
    """Register one shape rule for the given op types (in `domain`)."""

    def register(fn):
        for op in op_types:
            if (domain, op) in _RULES:
                raise ValueError(f"shape rule for {op} registered twice")
            _RULES[(domain, op)] = fn
        return fn

    return register


def get_rule(op_type: str, domain: str = "") -> Callable | None:
    _ensure_loaded()
    return _RULES.get((domain, op_type))


_loaded = False


def _ensure_loaded():
    """Import every module of this package: each registers its rules on import."""
    global _loaded
    if not _loaded:
        _loaded = True
        import_submodules(__name__, __path__)


def import_submodules(package: str, path) -> None:
    import importlib
    import pkgutil

    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")
