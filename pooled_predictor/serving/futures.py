"""Future: concurrent.futures.Future plus then().

`then(fn)` returns a new Future completed with `fn(result)`; if `fn` returns a
Future, the chained one completes when that does (so `f.then(lambda _:
pool.forward(x))` waits for the second job). An exception of the source
Future, or one raised by `fn`, becomes the chained Future's exception (`fn` is
not called on an exception unless `on_error` is given). Cancelling the source
cancels the chain.

Callbacks run on the thread that completes the source Future (a pool worker,
usually), as folly's then() without an executor does. Callbacks are
trampolined per thread: the callbacks of a Future completed from inside
another Future's callback are queued and run by the outermost frame, so a
chain of 10,000 then() calls runs in constant stack depth.

Errors raised by a then() function are never lost: they go to the chained
Future. An Exception raised by a plain add_done_callback() callback is logged,
as concurrent.futures logs it, and counted in `callback_errors()`: every one,
whether the callback ran when the Future completed or at once, because it was
added to a Future already done.

The state machine, the exceptions and the waiter protocol of cf.wait() and
cf.as_completed() are concurrent.futures' own (CPython's _base.py); only the
synchronization is lighter, because a pool creates one Future per job: the
state is guarded by a plain Lock instead of a Condition over an RLock, and
result()/exception() block on a "done" latch (a Lock held from creation and
released once, when the Future completes or is cancelled) instead of
Condition.wait(). A Future costs about a fifth to create, and completing and
waiting for it runs in C.

Where the OS has eventfd (Linux), result()/exception() sleep on the waiting
thread's own eventfd instead of the latch, and the completing thread wakes them
with os.eventfd_write, which releases the GIL around the system call: waking a
sleeping thread (a futex wake, an inter-processor interrupt; in a VM an exit to
the hypervisor; and the woken thread, placed on the waker's CPU, preempting it)
then no longer holds the GIL, as Lock.release() does. On the 2-vCPU VM, a
Lock.release() waking a thread asleep 2-10 ms held the GIL a median 4-8 us (p90
9-17 us), and a PooledPredictor running PP-OCR rec held it 0.27-0.43 ms a job
(py-spy, benchmarks/gil_share.py), 0.06 ms with the eventfd wake. The latch
stays: cf.wait() and the platforms without eventfd use it.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import select
import threading
import time
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING, RUNNING
from typing import Any, Callable

log = logging.getLogger("pooled_predictor")

_tls = threading.local()
_callback_errors = 0
_callback_errors_lock = threading.Lock()


def callback_errors() -> int:
    """How many done-callbacks of our Futures (this process, all pools) raised an Exception.

    Each is logged and never propagated; a callback added to a Future already done runs at
    once in add_done_callback() and is counted the same way. then() functions are not
    counted: their errors complete the chained Future.
    """
    return _callback_errors


def _count_callback_error() -> None:
    global _callback_errors
    with _callback_errors_lock:
        _callback_errors += 1


def _trampoline(action: Callable[[], None]) -> None:
    """Run `action` now, or after the current one if we are inside one (constant stack)."""
    queue = getattr(_tls, "queue", None)
    if queue is not None:
        queue.append(action)
        return
    queue = _tls.queue = []
    try:
        action()
        while queue:
            queue.pop(0)()
    finally:
        _tls.queue = None


class _Sleeper:
    """A thread's eventfd, which result() sleeps on (os.eventfd_read) and _complete() writes to wake it.

    A completing thread holds this object, not only its number, until it has written: the fd cannot be
    closed (the thread gone, this collected) and its number reused in between. A stale count (a wake
    for a wait that already returned) only makes a later read return early: the waits loop on the state."""

    __slots__ = ("fd", "pid")

    def __init__(self):
        self.fd = os.eventfd(0, os.EFD_CLOEXEC)
        self.pid = os.getpid()

    def __del__(self):
        try:
            os.close(self.fd)
        except (OSError, AttributeError):
            pass


_EVENTFD = hasattr(os, "eventfd") and hasattr(os, "eventfd_write")


def _sleeper() -> _Sleeper:
    """This thread's _Sleeper (a new one in a forked child: the parent's eventfd is shared with it)."""
    s = getattr(_tls, "sleeper", None)
    if s is None or s.pid != os.getpid():
        s = _tls.sleeper = _Sleeper()
    return s


def _wake(sleepers) -> None:
    for s in sleepers:
        os.eventfd_write(s.fd, 1)  # the GIL is released around the write (CPython's posixmodule)


_DONE = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)
_CANCELLED = (CANCELLED, CANCELLED_AND_NOTIFIED)


class Future(cf.Future):
    """A concurrent.futures.Future with then() and trampolined callbacks.

    The state changes at once (result() never waits on a queued completion);
    only the done-callbacks are deferred when completion happens inside
    another callback on the same thread.
    """

    def __init__(self):  # cf.Future's attributes, with a Lock where it has a Condition
        self._condition = threading.Lock()  # guards _state; cf.wait()/as_completed() acquire it too
        self._done = threading.Lock()       # held until the Future is done (see the module docstring)
        self._done.acquire()
        self._state = PENDING
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks = []
        self._sleepers = None  # the _Sleepers of the threads in result()/exception(), woken at completion

    # ---- state -------------------------------------------------------------------
    def cancel(self) -> bool:
        """Cancel unless running or done; True if the Future is cancelled."""
        with self._condition:
            if self._state == RUNNING or self._state == FINISHED:
                return False
            if self._state in _CANCELLED:
                return True
            self._state = CANCELLED
            sleepers, self._sleepers = self._sleepers, None
        self._done.release()
        if sleepers:
            _wake(sleepers)
        self._invoke_callbacks()
        return True

    def cancelled(self) -> bool:
        return self._state in _CANCELLED

    def running(self) -> bool:
        return self._state == RUNNING

    def done(self) -> bool:
        return self._state in _DONE

    def set_running_or_notify_cancel(self) -> bool:
        """concurrent.futures': False if cancelled (and tell cf.wait()), else mark running."""
        with self._condition:
            if self._state == CANCELLED:
                self._state = CANCELLED_AND_NOTIFIED
                for waiter in self._waiters:
                    waiter.add_cancelled(self)
                return False
            if self._state == PENDING:
                self._state = RUNNING
                return True
            log.critical("Future %s in unexpected state: %s", id(self), self._state)
            raise RuntimeError("Future in unexpected state")

    def set_result(self, result) -> None:
        self._complete(result, None)

    def set_exception(self, exception) -> None:
        self._complete(None, exception)

    def _complete(self, result, exception) -> None:
        """PENDING/RUNNING -> FINISHED with a result or an exception; InvalidStateError if done."""
        with self._condition:
            state = self._state
            if state not in _DONE:
                self._result = result
                self._exception = exception
                self._state = FINISHED
                for waiter in self._waiters:
                    if exception is None:
                        waiter.add_result(self)
                    else:
                        waiter.add_exception(self)
                sleepers, self._sleepers = self._sleepers, None
        if state in _DONE:  # raised outside the lock: repr() takes it
            raise cf.InvalidStateError(f"{state}: {self!r}")
        self._done.release()
        if sleepers:
            _wake(sleepers)
        self._invoke_callbacks()

    def _settle(self, timeout) -> None:
        """Wait until done (TimeoutError after `timeout` seconds, None: no limit); CancelledError if cancelled."""
        if self._state != FINISHED:
            if self._state not in _DONE:
                if _EVENTFD:
                    self._sleep(timeout)
                else:
                    done = self._done
                    if not done.acquire(True, -1 if timeout is None else max(0.0, timeout)):
                        raise cf.TimeoutError()
                    done.release()  # for every other waiter, and every later call
            if self._state in _CANCELLED:
                raise cf.CancelledError()

    def _sleep(self, timeout) -> None:
        """Wait on this thread's eventfd until done (module docstring); TimeoutError after `timeout` s."""
        sleeper = _sleeper()
        with self._condition:
            if self._state in _DONE:
                return
            if self._sleepers is None:
                self._sleepers = [sleeper]
            else:
                self._sleepers.append(sleeper)
        fd, done = sleeper.fd, False
        try:
            if timeout is None:
                while self._state not in _DONE:
                    os.eventfd_read(fd)
            else:
                deadline = time.monotonic() + max(0.0, timeout)
                poller = select.poll()
                poller.register(fd, select.POLLIN)
                while self._state not in _DONE:
                    left = deadline - time.monotonic()
                    if left <= 0 or not poller.poll(max(1, int(left * 1e3 + 0.999))):
                        if self._state in _DONE:
                            break
                        if left <= 0:
                            raise cf.TimeoutError()
                        continue
                    os.eventfd_read(fd)
            done = True
        finally:
            if not done:  # timed out or interrupted: no longer waiting
                with self._condition:
                    if self._sleepers is not None and sleeper in self._sleepers:
                        self._sleepers.remove(sleeper)

    def result(self, timeout=None):
        """The result (waiting up to `timeout` seconds); raises its exception, CancelledError or TimeoutError."""
        try:
            self._settle(timeout)
            if self._exception is not None:
                raise self._exception
            return self._result
        finally:
            self = None  # break a reference cycle with the exception, as concurrent.futures

    def exception(self, timeout=None):
        """The exception (None on success), waiting up to `timeout` seconds; CancelledError, TimeoutError."""
        self._settle(timeout)
        return self._exception

    def _invoke_callbacks(self):
        if self._done_callbacks:
            _trampoline(self._run_callbacks)

    def _run_callbacks(self):  # count, not only log, callback errors
        for callback in self._done_callbacks:
            self._call(callback)

    def _call(self, callback) -> None:
        try:
            callback(self)
        except Exception:
            _count_callback_error()
            log.exception("exception calling callback for %r", self)

    def add_done_callback(self, fn: Callable[["Future"], Any]) -> None:
        """concurrent.futures': call fn(self) when done; at once (here) if already done.

        An Exception raised by fn is logged and counted in callback_errors(), never raised.
        """
        with self._condition:
            if self._state not in _DONE:
                self._done_callbacks.append(fn)
                return
        self._call(fn)

    def then(self, fn: Callable[[Any], Any], on_error: Callable[[BaseException], Any] | None = None) -> "Future":
        """Chain `fn` on this Future's result.

        Args:
            fn: called with the result; its return value (or, if it returns a
                Future, that Future's outcome) completes the returned Future.
            on_error: optional; called with the exception instead of passing it on.
        Returns:
            Future of fn's result.
        """
        chained = Future()

        def on_done(src: cf.Future) -> None:
            if src.cancelled():
                chained.cancel()
                return
            exc = src.exception()
            try:
                if exc is None:
                    value = fn(src.result())
                elif on_error is not None:
                    value = on_error(exc)
                else:
                    chained.set_exception(exc)
                    return
            except BaseException as e:  # the then() function failed: its Future says so
                chained.set_exception(e)
                return
            if isinstance(value, cf.Future):
                value.add_done_callback(lambda inner: _copy_outcome(inner, chained))
            else:
                chained.set_result(value)

        self.add_done_callback(lambda src: _trampoline(lambda: on_done(src)))
        return chained


def _copy_outcome(src: cf.Future, dst: cf.Future) -> None:
    if src.cancelled():
        dst.cancel()
    elif src.exception() is not None:
        dst.set_exception(src.exception())
    else:
        dst.set_result(src.result())


def collect(futures) -> Future:
    """A Future of the list of results of `futures`, in order (folly::collect).

    Fails with the first exception among them (in order of completion) and
    cancels itself if one of them is cancelled. An empty list gives [] at once.
    """
    futures = list(futures)
    out = Future()
    if not futures:
        out.set_result([])
        return out
    results: list = [None] * len(futures)
    left = [len(futures)]
    lock = threading.Lock()

    def on_done(i: int, f: cf.Future) -> None:
        if f.cancelled():
            out.cancel()
            return
        exc = f.exception()
        with lock:  # decide under the lock, complete outside it
            if left[0] <= 0:
                return
            if exc is not None:
                left[0] = 0
            else:
                results[i] = f.result()
                left[0] -= 1
                if left[0] > 0:
                    return
        try:
            if exc is not None:
                out.set_exception(exc)
            else:
                out.set_result(results)
        except cf.InvalidStateError:  # cancelled meanwhile
            pass

    for i, f in enumerate(futures):
        f.add_done_callback(lambda f, i=i: on_done(i, f))
    return out
