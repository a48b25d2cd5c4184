"""The pool's job queue: bounded, multi-producer/multi-consumer, by priority level, with batching.

* Priority levels (Triton's `priority`): an int per job, higher first; FIFO
  within a level. Levels are created when first used. With `aging` (seconds),
  a job that has waited longer than that is taken before any younger job of a
  higher level (the oldest such first), so no level starves a lower one
  forever; without it (the default, as Triton) priorities are strict.
* Bound: `capacity` slot tokens in a queue.SimpleQueue (a counting semaphore in
  C, with timeouts) bound the total over all levels. put() takes a token, a
  worker taking the job or a cancellation gives it back. Jobs put from a worker
  (force=True) take none, so a worker never blocks on its own queue.
* Hand-over: idle workers sleep on a stack, each on its own lock; put()
  wakes the one that went to sleep last (last in, first out, as folly's
  LifoSem, on which folly's CPUThreadPoolExecutor parks its threads; fb-caffe-exts'
  workers block on folly::MPMCQueue instead), whose Net's arena and stack are
  likeliest still in the caches, where a FIFO wake-up went round every worker
  in turn (they still do where the workers differ: pinned to CPUs, or on
  several devices, lifo=False). A worker takes the best job under the lock,
  and looks for one before it sleeps, so a job put while no worker sleeps is
  taken by the first that comes back; one that finds nothing (a batching
  worker took the job) sleeps again.
* Awake at most `wake_limit` (the pool's Config.active_workers; None: no
  bound): put() wakes a worker only while fewer are awake than that, and a
  worker back from a job takes the next one at once, so with more workers than
  cores as many jobs compute at once as there are cores, each handed over
  once. A worker about to run user code that may block (a Future's callbacks,
  the pool's Callback) calls release(): it counts as asleep from then on, and
  when jobs wait another worker is woken, so a blocked callback never holds
  the queue up. After close() the bound is off: the workers run the queued jobs
  (unless drained), then each get() returns STOP.
* Removal (cancel, close) marks a job as no longer queued and gives its slot
  back at once; the entry itself is skipped when a worker reaches it.
* Batching (Triton's dynamic batcher): gather() takes, beside a first job,
  more queued jobs that a predicate accepts, highest level first, up to a row
  limit and the batch's share of the waiting rows (a share function the pool
  gives, see pooled_predictor.serving.batching), waiting up to a delay for more
  unless a preferred size or the share is reached, and never while a worker
  is idle: a worker that goes idle (get()) wakes the waiting batches.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections import deque
from typing import Callable, Sequence

from ..errors import PoolClosedError, QueueFullError

STOP = object()  # a worker's signal to exit


class JobQueue:
    """Bounded MPMC queue of jobs by priority level (see the module docstring).

    A job needs the attributes `priority` (int), `enqueued` (perf_counter
    seconds), `queued` and `slot` (bools, set here).

    Args:
        capacity: how many jobs may wait at once, over all levels.
        aging: seconds after which a waiting job goes before younger jobs of
            higher levels; None: strict priorities.
        wake_limit: the most workers awake at once (see the module docstring);
            None: no bound.
        lifo: wake the worker that slept last (default); False: the one that slept first,
            for workers that differ (pinned to CPUs, on devices) and should take turns.
    """

    def __init__(self, capacity: int, aging: float | None = None, wake_limit: int | None = None,
                 lifo: bool = True):
        if wake_limit is not None and wake_limit < 1:
            raise ValueError(f"JobQueue: wake_limit must be None or >= 1, got {wake_limit!r}")
        self.capacity = capacity
        self.aging = aging
        self.wake_limit = wake_limit
        self._limit = sys.maxsize if wake_limit is None else wake_limit
        self._awake = 0        # workers counted awake (woken for a job, or back from one), under the lock
        self._sleepers = []    # [lock, counted] of each sleeping worker, the last to sleep at the end
        self._next = -1 if lifo else 0  # the index in _sleepers of the one to wake
        self._own = threading.local()  # .sleeper: this thread's [lock, counted]
        self._levels: dict[int, deque] = {0: deque()}
        self._order: list[deque] = [self._levels[0]]  # highest level first
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # batchers waiting for more jobs
        self._batchers_waiting = 0
        self._slots: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(capacity):
            self._slots.put(None)
        self._size = 0
        self.closed = False

    def __len__(self) -> int:
        return self._size

    # ---- producers -----------------------------------------------------------------
    def put(self, job, block: bool, timeout: float | None, force: bool = False) -> int:
        """Append a job at its level; returns the queue size after it.

        When it had to wait for room, it sets job.enqueued to when it got it.

        Raises:
            QueueFullError: no room (at once, or after `timeout` seconds).
            PoolClosedError: the queue is closed (before or while waiting for room).
        """
        if self.closed:
            raise PoolClosedError("the pool is closed")
        if not force:
            try:
                self._slots.get(False)
            except queue.Empty:
                if not block:
                    raise QueueFullError(f"the job queue is full ({self.capacity} jobs)") from None
                try:
                    self._slots.get(True, timeout)
                except queue.Empty:
                    raise QueueFullError(f"the job queue stayed full ({self.capacity} jobs) "
                                         f"for {timeout:.3f} s") from None
                job.enqueued = time.perf_counter()  # queue_wait counts from here
            job.slot = True
        with self._lock:
            if self.closed:
                self._give_back(job)
                raise PoolClosedError("the pool was closed while this job was being queued")
            level = self._levels.get(job.priority)
            if level is None:
                level = self._add_level(job.priority)
            level.append(job)
            job.queued = True
            self._size += 1
            size = self._size
            if self._sleepers and self._awake < self._limit:
                self._wake()
            if self._batchers_waiting:
                self._arrived.notify_all()
        return size

    def _add_level(self, priority: int) -> deque:
        level = self._levels[priority] = deque()
        self._order = [self._levels[p] for p in sorted(self._levels, reverse=True)]
        return level

    # ---- workers ---------------------------------------------------------------------
    def get(self, awake: bool = False):
        """The next job for a worker (blocking), or STOP once close()d and no job is left.

        awake: the worker is counted awake (it took a job and has not release()d since): it takes
        a queued job whatever the bound, or goes to sleep uncounted."""
        if self._batchers_waiting:  # a batch waiting for more jobs goes now: this worker is idle
            with self._lock:
                self._arrived.notify_all()
        with self._lock:
            while True:
                if self.closed:  # no bound, no sleep: the jobs left, then STOP
                    job = self._take() if self._size else None
                    return STOP if job is None else job
                if self._size and (awake or self._awake < self._limit):
                    job = self._take()
                    if job is not None:
                        if not awake:
                            self._awake += 1
                        return job
                if awake:
                    self._awake -= 1
                    awake = False
                awake = self._sleep()

    def _sleep(self) -> bool:
        """Under the lock: sleep until put(), release() or close() wakes this thread; whether it
        was counted awake by its waker."""
        me = getattr(self._own, "sleeper", None)
        if me is None:
            me = self._own.sleeper = [threading.Lock(), False]
            me[0].acquire()  # held: the acquire() below blocks until a waker releases it
        me[1] = False
        self._sleepers.append(me)
        self._lock.release()
        try:
            me[0].acquire()
        finally:
            self._lock.acquire()
        return me[1]

    def _wake(self) -> None:
        """Under the lock: wake the worker that went to sleep last (lifo, else first), counted awake."""
        me = self._sleepers.pop(self._next)
        self._awake += 1
        me[1] = True
        me[0].release()

    def release(self) -> None:
        """An awake worker is about to run code that may block (user callbacks): it counts as
        asleep from now on (its next get() with awake=False), and a sleeping worker is woken if
        jobs wait and the bound allows."""
        with self._lock:
            self._awake -= 1
            if self._size and self._sleepers and self._awake < self._limit:
                self._wake()

    def _take(self):
        """Under the lock: the best queued job (aged first, then highest level, FIFO), or None."""
        if self.aging is not None and self._size > 1 and len(self._order) > 1:
            job = self._take_aged()
            if job is not None:
                return job
        for level in self._order:
            while level:
                job = level.popleft()
                if job.queued:  # _dequeue(job), inline: the hot path
                    job.queued = False
                    self._size -= 1
                    if job.slot:
                        job.slot = False
                        self._slots.put(None)
                    return job
        return None

    def _take_aged(self):
        oldest = None
        for level in self._order[1:]:
            while level and not level[0].queued:
                level.popleft()
            if level and (oldest is None or level[0].enqueued < oldest[0].enqueued):
                oldest = level
        if oldest is None or oldest[0].enqueued >= time.perf_counter() - self.aging:
            return None
        job = oldest.popleft()
        self._dequeue(job)
        return job

    def _dequeue(self, job) -> None:
        job.queued = False
        self._size -= 1
        if job.slot:
            job.slot = False
            self._slots.put(None)

    def gather(self, first, accept: Callable, rows: Callable, max_rows: int, delay: float,
               preferred: Sequence[int] = (), share: Callable | None = None,
               taken: Callable | None = None) -> list:
        """More jobs to run in one batch with `first` (which the caller already took).

        Takes queued jobs that `accept(job)` approves, highest level first and
        FIFO within a level, while their `rows(job)` fit in `max_rows` in all.
        `share(waiting)`, given the rows of `first` and of every accepted job
        queued, returns (cap, idle): the most rows this batch may take, its
        share, the rest being left to other workers (None: no other worker takes
        these jobs), and whether a worker is idle. A batch that reaches its
        share or `max_rows` goes at once; with preferred sizes, it stops at the
        largest it can reach. Otherwise it waits for more jobs until `delay`
        seconds after `first` was queued, but never while a worker is idle. Each
        arrival, and each worker that goes idle, re-evaluates. `taken(rows)` is
        told the batch's rows under the lock, before another batch can count
        them. Returns the jobs taken (without `first`); they are no longer queued.
        """
        first_rows = rows(first)
        until = first.enqueued + delay
        with self._lock:
            while True:
                chosen, total, waiting = [], first_rows, first_rows
                for level in self._order:
                    for job in level:
                        if job.queued and accept(job):
                            r = rows(job)
                            waiting += r
                            if total + r <= max_rows:
                                chosen.append(job)
                                total += r
                cap, idle = share(waiting) if share is not None else (None, False)
                if cap is not None and total > cap:
                    chosen, total = _fit(first_rows, chosen, rows, cap)
                if preferred:
                    cut = _preferred_cut(first_rows, [rows(j) for j in chosen], preferred)
                    if cut is not None:
                        chosen = chosen[:cut]
                        break
                if total >= min(cap or max_rows, max_rows) or idle or self.closed:
                    break
                left = until - time.perf_counter()
                if left <= 0:
                    break
                self._batchers_waiting += 1
                try:
                    self._arrived.wait(left)
                finally:
                    self._batchers_waiting -= 1
            for job in chosen:
                self._dequeue(job)
            if taken is not None:
                taken(first_rows + sum(rows(j) for j in chosen))
        return chosen

    # ---- removal and shutdown ----------------------------------------------------------
    def remove(self, job) -> bool:
        """Take a queued job out (cancellation); False if a worker already has it."""
        with self._lock:
            if not job.queued:
                return False
            self._dequeue(job)
            return True

    def close(self, drain: bool) -> list:
        """Refuse new jobs; wake every sleeping worker (each get() returns STOP once the queue is
        empty); return the queued jobs, taken out, if `drain`."""
        with self._lock:
            self.closed = True
            pending = []
            if drain:
                for level in self._order:
                    while level:
                        job = level.popleft()
                        if job.queued:
                            self._dequeue(job)
                            pending.append(job)
            for me in self._sleepers:
                me[1] = False
                me[0].release()
            self._sleepers.clear()
            self._arrived.notify_all()
        # Wake producers blocked on a full queue: each one that wakes finds the pool
        # closed and gives its slot back, which wakes the next (a cascade).
        self._slots.put(None)
        return pending

    def _give_back(self, job) -> None:
        if job.slot:
            job.slot = False
            self._slots.put(None)


def _fit(first_rows: int, jobs: list, rows: Callable, cap: int) -> tuple[list, int]:
    """The first of `jobs` (in order) that fit with `first_rows` in `cap` rows, and the rows they make."""
    total = first_rows
    for i, job in enumerate(jobs):
        if total + rows(job) > cap:
            return jobs[:i], total
        total += rows(job)
    return jobs, total


def _preferred_cut(first_rows: int, more_rows: list[int], preferred: Sequence[int]) -> int | None:
    """How many of the candidate jobs to take so that the batch has a preferred size (the largest), or None."""
    best, total = None, first_rows
    if total in preferred:
        best = 0
    for i, r in enumerate(more_rows):
        total += r
        if total in preferred:
            best = i + 1
    return best
