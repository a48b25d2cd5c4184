"""This thread's kernel modes (no numba here: ops/cpu/compiled/__init__.py sets numba's cache
directory before numba is imported). engine/tiering.py says what each is for."""

from __future__ import annotations

import threading
from contextlib import contextmanager

__all__ = ["NotCached", "cache_only", "compile_inline", "discovering", "memory_only", "reference_kernels", "state",
           "tiered_mode"]


class NotCached(Exception):
    """A compiled kernel needed now is not in numba's disk cache (or numba's compiler is busy in
    another thread), in a thread in cache-only mode: the caller runs the reference kernels instead."""


state = threading.local()  # reference, cache_only, inline: this thread's modes (the contexts below)


@contextmanager
def _mode(name: str, value: bool = True):
    saved = getattr(state, name, False)
    setattr(state, name, value)
    try:
        yield
    finally:
        setattr(state, name, saved)


def reference_kernels():
    """Context: kernels built in this thread take the numpy reference paths (compiled.active() is False)."""
    return _mode("reference")


def cache_only():
    """Context: in this thread numba loads machine code from its disk cache but never compiles;
    a compile, or a wait on another thread's compile, raises NotCached (compiled/jit.py)."""
    return _mode("cache_only")


def memory_only():
    """Context: in this thread numba neither compiles nor loads from its disk cache: any function not in
    this process's memory yet raises NotCached (a serving thread: loads, 10-300 ms each, happen in the
    background compiler's thread, engine/tiering.py)."""
    return _mode("memory_only")


def compile_inline():
    """Context: in this thread a Net compiles what it needs before it runs, tiered or not
    (warm-up, the background compiler), and never goes through cache_only()."""
    return _mode("inline")


@contextmanager
def discovering():
    """Context yielding a list: compiled.bound() appends to it each function with explicit signatures
    not compiled yet, and binds it uncompiled (dispatched per call) instead of compiling it, so a
    layout built inside names the functions it will call, to be compiled in parallel processes."""
    saved = getattr(state, "discover", None)
    state.discover = found = []
    try:
        yield found
    finally:
        state.discover = saved


def tiered_mode() -> bool:
    """False inside compile_inline()."""
    return not getattr(state, "inline", False)
