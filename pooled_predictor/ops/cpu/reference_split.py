"""The reference tier's large products and copies on the idle cores, split over threads.

A tiered Net's first forwards run the numpy reference kernels (engine/tiering.py) while the
compiled kernels load or compile; the background compiler is held until that first forward
ends, so the host's other cores are idle during it, and a serving process pins BLAS to one
thread (serving/blas.py). VGG16's reference forward, 31 GFLOP, was then 0.43 s of its 0.9 s
warm first result on a 2-core machine (benchmarks/startup.py, issue 31). Here a product with at
least MIN_FLOPS is cut into row blocks of A (output rows of C), and all but one block go to a
process-wide pool of worker threads (np.matmul releases the GIL) while the calling thread does
the last. Each element of C is the same dot product over K as in the unsplit call; BLAS may
order it differently in different row blocks, so C matches the unsplit product within BLAS's own
error, not necessarily bit for bit. Large copies (Conv's im2col columns: 115 MB a forward in
VGG16's second layer) are split the same way along an axis (np.copyto releases the GIL too):
the same bytes.

parallel() runs a kernel's own blocks of work the same way, each on memory of its own (the reference
tier's Winograd convolution, winograd_reference.py: a band of tile rows a thread, transforms included).

Only one product is split at a time in the process: a call that finds another split running
(another Net's reference forward, a pool's workers starting together) runs unsplit on its own
thread, so the threads never outnumber the cores by more than the callers. Nor is one split
while the background compiler works (engine/tiering.py wraps each job in background_job()):
its compile processes or kernel loading have the other cores then, and the time to full
speed is worth more than one reference forward.

THREADS: the pool's size plus the caller, by default the CPUs this process may run on, at most
4 (POOLED_PREDICTOR_REFERENCE_THREADS overrides; 1 turns the split off).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

__all__ = ["THREADS", "MIN_FLOPS", "MIN_COPY_BYTES", "background_job", "copyto", "matmul", "parallel"]


def _default_threads() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        return max(1, int(os.environ.get("POOLED_PREDICTOR_REFERENCE_THREADS", min(cpus, 4))))
    except ValueError:
        return min(cpus, 4)


THREADS = _default_threads()
MIN_FLOPS = 32e6  # 2 M N K: below, the hand-off (tens of microseconds) costs more than it buys
MIN_ROWS = 16  # rows of A per block, at least
MIN_COLS = 256  # else columns of B per block, at least
MIN_COPY_BYTES = 1 << 22  # copies: at least 4 MiB

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_splitting = threading.Lock()  # held by the one product being split
_background = [0]  # background compile jobs running (engine/tiering.py)
_background_lock = threading.Lock()


@contextmanager
def background_job():
    """Context around a background compile job: no product is split while one runs."""
    with _background_lock:
        _background[0] += 1
    try:
        yield
    finally:
        with _background_lock:
            _background[0] -= 1


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pooled-predictor-reference")
        return _pool


def _run(fn, blocks, threads: int) -> None:
    """fn(*block) for every block: the first on this thread, the others on the pool; waits for all."""
    pool = _executor(threads - 1)
    futures = [pool.submit(fn, *block) for block in blocks[1:]]
    try:
        fn(*blocks[0])
    finally:
        for f in futures:
            f.result()


def _may_split() -> bool:
    """Take the one split of the process, when no background compile job runs (release: _splitting)."""
    return not _background[0] and _splitting.acquire(blocking=False)


def _matmul_into(a, b, out):
    np.matmul(a, b, out=out)


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, threads: int | None = None) -> None:
    """out = a @ b (np.matmul, 2-D a (M, K); b (K, N) or (..., K, N) broadcasting against a; out
    C's shape), split over up to `threads` (default THREADS) threads when the product has at least
    MIN_FLOPS, no other split is running and no background compile job runs; else one np.matmul.
    The split is by rows of a (output rows) where M has MIN_ROWS rows a thread, else, for a 2-D b,
    by columns of b (output columns: a fully connected layer at batch 1, b a weight read once).

    Raises:
        What np.matmul raises (shapes, dtypes), from the calling thread.
    """
    threads = THREADS if threads is None else threads
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    batch = out.size // max(m * n, 1)
    by_rows = min(threads, m // MIN_ROWS)
    by_cols = min(threads, n // MIN_COLS) if b.ndim == 2 and out.ndim == 2 else 0
    parts = by_rows if by_rows >= 2 else by_cols
    if a.ndim != 2 or parts < 2 or 2.0 * m * n * k * batch < MIN_FLOPS or not _may_split():
        np.matmul(a, b, out=out)
        return
    try:
        size = m if by_rows >= 2 else n
        bounds = [size * i // parts for i in range(parts + 1)]
        if by_rows >= 2:
            blocks = [(a[lo:hi], b, out[..., lo:hi, :]) for lo, hi in zip(bounds, bounds[1:])]
        else:
            blocks = [(a, b[:, lo:hi], out[:, lo:hi]) for lo, hi in zip(bounds, bounds[1:])]
        _run(_matmul_into, blocks, threads)
    finally:
        _splitting.release()


def parallel(fn, blocks: list) -> bool:
    """fn(*block) for every block, one a thread (the first on this thread), when there are at most THREADS
    blocks and, as matmul, no other split or background compile job runs; waits for all. Each block's
    work must touch memory of its own (winograd_reference.py: a scratch slot a thread).

    Returns:
        False where it ran nothing (too many blocks, or may not split now): the caller runs them itself.
    Raises:
        What fn raises, from the calling thread.
    """
    if not 2 <= len(blocks) <= THREADS or not _may_split():
        return False
    try:
        _run(fn, blocks, THREADS)
    finally:
        _splitting.release()
    return True


def copyto(dst: np.ndarray, src: np.ndarray, axis: int, threads: int | None = None) -> None:
    """np.copyto(dst, src) (src of dst's shape, any strides), split along `axis` over up to `threads`
    threads when it moves at least MIN_COPY_BYTES and, as matmul, no other split or background
    compile job runs.

    Raises:
        What np.copyto raises, from the calling thread.
    """
    threads = THREADS if threads is None else threads
    size = dst.shape[axis] if dst.ndim > axis else 0
    parts = min(threads, size)
    if parts < 2 or dst.nbytes < MIN_COPY_BYTES or src.shape != dst.shape or not _may_split():
        np.copyto(dst, src)
        return
    try:
        bounds = [size * i // parts for i in range(parts + 1)]
        lead = (slice(None),) * axis
        _run(np.copyto, [(dst[lead + (slice(lo, hi),)], src[lead + (slice(lo, hi),)])
                         for lo, hi in zip(bounds, bounds[1:])], threads)
    finally:
        _splitting.release()
