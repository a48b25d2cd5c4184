"""numba's njit, compiled on first use instead of at import, and the cache-only mode.

`njit(signature, ...)` in numba compiles (or loads from its disk cache) every explicit
signature when the module is imported: importing the compiled kernels cost 93 s of CPU
on a fresh machine and 2 s with a warm cache, whether or not a model used them (issue 31).
Here the decorator records the signatures and makes a dispatcher that compiles them
only when the function is first needed:
* a call from Python (numba's dispatcher asks `_compile_for_args` when no
  specialization matches the arguments),
* a call from another compiled function being compiled (`get_call_template`),
* `ensure(fn)`: `compiled.bound()` calls it before it resolves a specialization.
Then, as with numba's eager form, exactly the explicit signatures exist and compiling
is disabled (arguments of other types raise numba's TypeError). Functions without
explicit signatures are numba's lazy dispatchers as they always were.

Cache-only mode (`compiled.cache_only()`, per thread): in it, numba may load machine code
from its disk cache but never compile; any compile raises NotCached, and so does
waiting on numba's compiler lock while another thread holds it (a background compile),
so a thread in this mode never stalls on a compile. Both are numba events
(`numba:compile`, `numba:compiler_lock`), listened to here for every dispatcher.

Loop width on Intel's AVX-512 CPUs: LLVM tunes its targets from Skylake-SP on (skylake-avx512,
icelake-server, sapphirerapids, emeraldrapids, ...) with `prefer-256-bit`, so its loop vectorizer
makes ymm loops there where numba compiles for the host, while on AMD's AVX-512 CPUs (znver4,
znver5) it makes zmm loops. Our explicit <16 x float> kernels run in zmm registers either way (the
IR sets no "min-legal-vector-width", so 512-bit vectors stay legal); what changes is every loop
numba vectorizes itself: the activation epilogues (GELU's erf), Softmax, the element-wise and
pooling kernels. On Zen 5 under icelake-server's tuning those ran PP-OCR rec's fused convolutions
18% and its Softmax 39% slower (benchmarks/README.md, session 20). `_prefer_512()` turns the
preference off (numba's target features plus "-prefer-256-bit") where numba's target has AVX-512 F,
before numba builds its code generator; NUMBA_CPU_FEATURES, when set, is numba's target as given,
and POOLED_PREDICTOR_PREFER_256=1 keeps LLVM's tuning. The setting is numba's, for the process:
other numba code in it compiles alike.
"""

from __future__ import annotations

import importlib
import logging
import os
import types as pytypes
from hashlib import sha256
from pathlib import Path

import numba
from numba.core import event
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher

from .tiers import NotCached, state as _state

_log = logging.getLogger(__name__)
PREFER_512 = "-prefer-256-bit"
"""What _prefer_512 appends to numba's target features: LLVM's subtarget feature, cleared."""


def _prefer_512() -> bool:
    """Clear LLVM's prefer-256-bit for numba's target where it has AVX-512 F (module docstring). Done
    once, at import, before numba's CPU code generator exists (it reads the features when it is
    made, at the first compile); returns whether numba's target features now carry PREFER_512.
    Compile workers (engine/compile_worker.py) import this module too, so their cached machine code
    is keyed on the same features (numba's cache index keys on the code generator's target)."""
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features
    from numba.core.registry import cpu_target

    if config.CPU_FEATURES is not None:  # NUMBA_CPU_FEATURES (or code before us) named the target
        return PREFER_512 in config.CPU_FEATURES.split(",")
    if os.environ.get("POOLED_PREDICTOR_PREFER_256", "0") == "1":
        return False
    if "target_context" in vars(cpu_target):  # numba compiled before this import: its target is fixed
        return False
    features = get_host_cpu_features()  # numba's own string for the host (NUMBA_ENABLE_AVX applied)
    if "+avx512f" not in features.split(","):
        return False
    config.CPU_FEATURES = f"{features},{PREFER_512}"
    return True


PREFERS_512 = _prefer_512()
"""Whether numba's loops may use 512-bit vectors on this target (False on AVX2 hosts, where
POOLED_PREDICTOR_PREFER_256=1, or where NUMBA_CPU_FEATURES is set without "-prefer-256-bit")."""

__all__ = ["PREFERS_512", "callees", "ensure", "ensure_all", "function_named", "is_pending", "name_of", "njit",
           "pending", "sources_digest"]

_LAZY: "dict[int, tuple]" = {}  # id(dispatcher) -> (dispatcher, its explicit signatures), until ensured


def njit(*args, **options):
    """numba.njit, with explicit signatures compiled on first use (module docstring).

    `@njit(sig_or_sigs, **options)` returns a dispatcher whose signatures are compiled by
    ensure() or the first call; `@njit(**options)` and `@njit` are numba's own.
    """
    if not args or callable(args[0]) and not isinstance(args[0], (str, list, tuple)) \
            and not hasattr(args[0], "args"):
        if args:
            return _tagged(args[0], numba.njit(**options))
        return lambda py_func: _tagged(py_func, numba.njit(**options))
    sigs = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]

    def wrap(py_func):
        disp = _tagged(py_func, numba.njit(**options))
        _LAZY[id(disp)] = (disp, tuple(sigs))
        call_template = disp.get_call_template

        def first_call(*a, **kw):  # returns what numba's C dispatcher then calls with the arguments
            ensure(disp)
            return disp  # dispatched again: compiling is disabled now, numba's own TypeError for other types

        def first_typing(a, kw):
            ensure(disp)
            return call_template(a, kw)

        # numba's C dispatcher looks both up on the instance (compile_and_invoke, typing of callers)
        disp._compile_for_args, disp.get_call_template = first_call, first_typing
        return disp

    return wrap


def _tagged(py_func, decorate):
    """decorate(py_func), numba's cache filed under `<qualname>__<CACHE_TAG>` when the function's module
    sets CACHE_TAG (a width's copy of a template, compiled/widths.py: same file and name as the 8-lane
    function, other machine code). numba reads the name when the dispatcher is made; it is put back after.
    A cached function's entries are stamped with sources_digest() as well as its own file's (_stamp_sources)."""
    tag = py_func.__globals__.get("CACHE_TAG")
    if not tag:
        return _stamp_sources(decorate(py_func))
    qualname = py_func.__qualname__
    py_func.__qualname__ = f"{qualname}__{tag}"
    try:
        return _stamp_sources(decorate(py_func))
    finally:
        py_func.__qualname__ = qualname


_DIGEST: "list[str]" = []


def sources_digest(root: os.PathLike | None = None) -> str:
    """SHA-256 of every .py file under `root` (default: this package, the compiled kernels), by relative path
    and content: what any compiled function here may have inlined or linked from another module (expf.exp32,
    epilogue's activations, gemm's and nchwc_gemm's micro-kernels, _panel called by Winograd and the chain).
    Read once a process for the default root."""
    if root is None and _DIGEST:
        return _DIGEST[0]
    base = Path(root) if root is not None else Path(__file__).resolve().parent
    h = sha256()
    for path in sorted(base.rglob("*.py")):
        h.update(path.relative_to(base).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    digest = h.hexdigest()
    if root is None:
        _DIGEST.append(digest)
    return digest


def _stamp_sources(disp):
    """disp, its disk cache (numba's, where cache=True) keyed on sources_digest() too. numba keeps a function's
    cached machine code while the function's own file is unchanged (its index's "source stamp", of that file
    alone), so a function whose callee in another module changed loaded the callee's old code (a stale Sigmoid after
    exp32 changed; Winograd running nchwc_gemm's reverted micro-kernel, 2026-11-29); with the digest in the
    stamp, any change to a kernel source here makes every entry stale, and each recompiles on first use."""
    cache_file = getattr(getattr(disp, "_cache", None), "_cache_file", None)
    stamp = getattr(cache_file, "_source_stamp", None)
    if stamp is not None:
        cache_file._source_stamp = (stamp, sources_digest())
    return disp


def ensure(fn) -> None:
    """Compile (or load from numba's disk cache) every explicit signature of `fn`, once; then
    `fn` takes only those, as an eagerly compiled numba function does. Anything else: no-op.

    Raises:
        NotCached: in cache-only mode, a signature numba's cache does not hold (or numba's
            compiler lock is held by another thread).
    """
    if id(fn) not in _LAZY:
        return
    # numba's own (re-entrant) compiler lock: a second thread waits for the first's compile instead of
    # meeting compiling disabled halfway; a compile inside (a callee's explicit signatures) re-enters it
    with global_compiler_lock:
        entry = _LAZY.get(id(fn))
        if entry is None:
            return
        for sig in entry[1]:
            _compile(fn, sig)
        del _LAZY[id(fn)]
        fn.disable_compile()
        del fn._compile_for_args, fn.get_call_template  # numba's own methods again


def _compile(fn, sig) -> None:
    """fn.compile(sig) (a no-op for one compiled already), where numba failing to write the machine code
    to its disk cache costs only the cache entry: numba adds the specialization to the dispatcher before
    it saves it, and a save can fail after a good compile: RuntimeError "no compiled object yet for
    <Library ...>" when an exception was raised inside llvmlite's object-cache callback, which ctypes
    drops (seen: pytest-timeout's SIGALRM during a 60 s cold compile of GRU at load 6), so the library
    never received its object code; an unwritable or full cache directory. The specialization then
    serves this process, a later process compiles it again, and the failure is logged once per
    function, never raised into a forward."""
    try:
        fn.compile(sig)
    except (RuntimeError, ValueError, OSError) as e:
        from numba.core import sigutils

        args, _ = sigutils.normalize_signature(sig)
        if tuple(args) not in fn.overloads:  # the compile itself failed: numba's error stands
            raise
        if id(fn) not in _SAVE_FAILED:
            _SAVE_FAILED.add(id(fn))
            _log.warning("numba compiled %s but could not save it to its disk cache (%s: %s); it will compile "
                         "again in the next process", name_of(fn), type(e).__name__, e)


_SAVE_FAILED: "set[int]" = set()


def is_pending(fn) -> bool:
    """Whether `fn` has explicit signatures not compiled (nor loaded) in this process yet."""
    return id(fn) in _LAZY


def name_of(fn) -> str:
    """"module:qualname" of a module-level numba function (function_named() finds it again)."""
    return f"{fn.py_func.__module__}:{fn.py_func.__qualname__}"


def function_named(name: str):
    """The module-level function `name` ("module:qualname") names."""
    module, _, qualname = name.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _code_names(code) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            names |= _code_names(const)
    return names


def callees(fn) -> list:
    """The functions with explicit signatures not compiled yet that compiling `fn` compiles first: those
    its code names (globals, closure cells), directly or through the numba functions without explicit
    signatures it calls (inlined, or compiled within it), in the order met. Read from the source's
    names, not from typing, so nothing is compiled to find them (engine/compile_worker.py orders its
    processes' work by them: a callee compiled in two processes at once was 1-6 s of a cold start)."""
    found, seen = [], {id(fn)}

    def visit(f):
        py = f.py_func
        values = [py.__globals__[n] for n in sorted(_code_names(py.__code__)) if n in py.__globals__]
        for cell in py.__closure__ or ():
            try:
                values.append(cell.cell_contents)
            except ValueError:  # an empty cell
                pass
        for v in values:
            if isinstance(v, Dispatcher) and id(v) not in seen:
                seen.add(id(v))
                if id(v) in _LAZY:
                    found.append(v)
                visit(v)

    if isinstance(fn, Dispatcher):
        visit(fn)
    return found


def ensure_all() -> None:
    """ensure() every function with explicit signatures defined so far."""
    for fn, _ in list(_LAZY.values()):
        ensure(fn)


def pending() -> int:
    """How many functions with explicit signatures are not compiled yet in this process."""
    return len(_LAZY)


class _CacheOnly(event.Listener):
    """Raises NotCached, in a thread in cache-only mode, where numba would compile or wait for its
    compiler lock, and in memory-only mode wherever numba takes that lock (a compile or a load)."""

    def on_start(self, ev):
        if getattr(_state, "memory_only", False):
            disp = ev.data.get("dispatcher") if isinstance(ev.data, dict) else None
            raise NotCached(f"{_name(disp)} is not loaded in this process" if disp is not None
                            else "a numba function is not loaded in this process")
        if not getattr(_state, "cache_only", False):
            return
        if ev.kind == "numba:compile":
            disp = ev.data.get("dispatcher") if isinstance(ev.data, dict) else None
            raise NotCached(f"{_name(disp)} is not in numba's cache")
        if not global_compiler_lock._lock.acquire(blocking=False):
            raise NotCached("numba's compiler is busy in another thread")
        global_compiler_lock._lock.release()

    def on_end(self, ev):
        pass


def _name(disp) -> str:
    return getattr(getattr(disp, "py_func", None), "__qualname__", "a numba function")


_listener = _CacheOnly()
event.register("numba:compile", _listener)
event.register("numba:compiler_lock", _listener)
