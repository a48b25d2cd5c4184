"""Every cached compiled kernel can be found again by another process.

The tiered compile (engine/tiering.py) compiles a model's kernels in worker processes, which write numba's disk
cache, and the server then loads them from it in cache-only mode; a worker names each function by module and
qualname (compiled/jit.py's name_of / function_named). numba keys a closure's cache entries by its cells' pickled
bytes, which differ between processes (an intrinsic among them): a kernel made by a factory was compiled by the
workers and never found by the server ("NotCached: transpose_tiles", seen through benchmarks/cpu_check.py, which
serves tiered; the suite runs with POOLED_PREDICTOR_TIERED=0). So every cached dispatcher is a module-level
function without closure cells, found again by its name.
"""

import importlib
import pkgutil

from numba.core.dispatcher import Dispatcher

from pooled_predictor.ops.cpu import compiled
from pooled_predictor.ops.cpu.compiled.jit import function_named, name_of


def _cached_dispatchers():
    seen = {}
    for info in pkgutil.walk_packages(compiled.__path__, compiled.__name__ + "."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, Dispatcher) and type(obj._cache).__name__ != "NullCache":
                seen[id(obj)] = obj
    return list(seen.values())


def test_cached_kernels_are_module_level_functions_without_closures():
    found = _cached_dispatchers()
    assert len(found) > 50  # the walk reached the kernels
    bad = [name_of(d) for d in found
           if d.py_func.__closure__ is not None or "<locals>" in d.py_func.__qualname__ or function_named(name_of(d))
           is not d]
    assert not bad, f"cached kernels another process cannot find again: {bad}"
