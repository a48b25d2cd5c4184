"""BLAS threads, through threadpoolctl.

With N pool workers each running a GEMM, a multithreaded BLAS would start N x
cores threads; as fb-caffe-exts' disable_blas_threading does, a pool limits
BLAS to one thread per call by default. The limit is process-wide (BLAS
libraries have one global setting), reference-counted across the objects that
ask for it, and restored when the last one releases it.

A release never waits for the lock: a Predictor's __del__ may run from a garbage
collection triggered inside _apply() on the same thread, which holds the lock
(waiting would deadlock). Such a release is queued and applied by the next
limit or release that takes the lock.
"""

from __future__ import annotations

import threading

from threadpoolctl import threadpool_limits

_lock = threading.Lock()
_holders: dict[int, int] = {}  # token -> requested threads
_limiter = None
_next = 0
_pending: list[int] = []  # tokens released while the lock was held (list.append is atomic)


def limit_blas_threads(threads: int = 1) -> int:
    """Limit BLAS to `threads` threads per call until release(token); returns the token.

    When several holders ask for different limits, the smallest applies.
    """
    global _next
    with _lock:
        _next += 1
        _holders[_next] = int(threads)
        _drain_pending()
        _apply()
        return _next


def release_blas_threads(token: int) -> None:
    """Drop one holder's limit; the original BLAS setting returns with the last one.

    Never blocks: if the lock is held (by another thread, or by this one when called
    from a finalizer during _apply), the release is queued for the lock's next holder.
    """
    if not _lock.acquire(blocking=False):
        _pending.append(token)
        return
    try:
        dropped = _holders.pop(token, None) is not None
        if _drain_pending() or dropped:
            _apply()
    finally:
        _lock.release()


def _drain_pending() -> bool:
    """Drop the queued releases (the lock held); True if any holder was dropped."""
    dropped = False
    while _pending:
        dropped |= _holders.pop(_pending.pop(), None) is not None
    return dropped


def _apply() -> None:
    global _limiter
    if _limiter is not None:
        _limiter.restore_original_limits()
        _limiter = None
    if _holders:
        _limiter = threadpool_limits(limits=min(_holders.values()), user_api="blas")

