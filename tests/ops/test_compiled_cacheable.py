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


def test_cached_kernels_are_stamped_with_every_kernel_source():
    """numba keeps a cached function while its own file is unchanged, even where a callee it inlined or linked
    from another module changed (a stale Sigmoid after expf.exp32 changed; Winograd running nchwc_gemm's
    reverted micro-kernel): every cached kernel's index stamp carries jit.sources_digest(), the digest of all
    the compiled package's sources."""
    from pooled_predictor.ops.cpu.compiled.jit import sources_digest

    digest = sources_digest()
    unstamped = [name_of(d) for d in _cached_dispatchers()
                 if not (isinstance(d._cache._cache_file._source_stamp, tuple)
                         and d._cache._cache_file._source_stamp[-1] == digest)]
    assert not unstamped, f"cached kernels keyed on their own file only: {unstamped}"


def test_sources_digest_changes_with_any_source(tmp_path):
    """The digest follows every .py file's content and relative path under its root, not times."""
    import os
    from pooled_predictor.ops.cpu.compiled.jit import sources_digest

    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "notes.txt").write_text("not a source\n")
    first = sources_digest(tmp_path)
    os.utime(tmp_path / "a.py", (0, 0))
    (tmp_path / "notes.txt").write_text("changed\n")
    assert sources_digest(tmp_path) == first
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    second = sources_digest(tmp_path)
    assert second != first
    (tmp_path / "sub" / "b.py").rename(tmp_path / "b.py")
    assert sources_digest(tmp_path) not in (first, second)
