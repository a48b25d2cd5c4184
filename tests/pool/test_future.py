"""Future: concurrent.futures semantics kept, then() and collect() added."""

import concurrent.futures as cf
import os
import threading
import time

import pytest

from pooled_predictor import Future, collect
from pooled_predictor.serving.futures import _EVENTFD, _sleeper, callback_errors


def test_is_a_concurrent_futures_future():
    f = Future()
    assert isinstance(f, cf.Future)
    f.set_result(3)
    assert f.result() == 3 and f.done()
    assert list(cf.as_completed([f])) == [f]
    assert cf.wait([f]).done == {f}


def test_then_passes_results_and_flattens_futures():
    f = Future()
    inner = Future()
    g = f.then(lambda v: v + 1).then(lambda v: inner if v == 2 else None)
    f.set_result(1)
    assert not g.done()
    inner.set_result("done")
    assert g.result(timeout=1) == "done"


def test_then_propagates_exceptions_and_on_error_recovers():
    f = Future()
    calls = []
    g = f.then(lambda v: calls.append(v))
    h = f.then(lambda v: v, on_error=lambda e: f"recovered {type(e).__name__}")
    f.set_exception(KeyError("k"))
    with pytest.raises(KeyError):
        g.result(timeout=1)
    assert calls == [] and h.result(timeout=1) == "recovered KeyError"


def test_then_function_errors_go_to_the_chained_future():
    f = Future()
    g = f.then(lambda v: 1 / 0)
    f.set_result(1)
    with pytest.raises(ZeroDivisionError):
        g.result(timeout=1)


def test_cancel_propagates_down_the_chain():
    f = Future()
    g = f.then(lambda v: v)
    assert f.cancel()
    assert g.cancelled()


def test_then_runs_on_the_completing_thread():
    f = Future()
    seen = []
    g = f.then(lambda v: seen.append(threading.current_thread().name))
    t = threading.Thread(target=lambda: f.set_result(1), name="completer")
    t.start(), t.join()
    g.result(timeout=1)
    assert seen == ["completer"]


def test_then_on_a_done_future_runs_at_once():
    f = Future()
    f.set_result(5)
    assert f.then(lambda v: v * 2).result(timeout=0) == 10


def test_ten_thousand_chained_thens_do_not_overflow_the_stack():
    f = Future()
    g = f
    for _ in range(10_000):
        g = g.then(lambda v: v + 1)
    f.set_result(0)
    assert g.result(timeout=10) == 10_000


def test_ten_thousand_chained_futures_returned_from_then():
    f = Future()
    g = f
    for _ in range(10_000):
        def step(v):
            h = Future()
            h.set_result(v + 1)
            return h
        g = g.then(step)
    f.set_result(0)
    assert g.result(timeout=10) == 10_000


def test_result_inside_a_callback_does_not_deadlock():
    f = Future()

    def cb(v):
        inner = Future()
        inner.set_result(v)
        return inner.result(timeout=1)

    g = f.then(cb)
    f.set_result(7)
    assert g.result(timeout=1) == 7


def test_collect():
    fs = [Future() for _ in range(3)]
    c = collect(fs)
    for i, f in reversed(list(enumerate(fs))):
        f.set_result(i)
    assert c.result(timeout=1) == [0, 1, 2]
    assert collect([]).result(timeout=0) == []
    fs = [Future(), Future()]
    c = collect(fs)
    fs[1].set_exception(ValueError("x"))
    with pytest.raises(ValueError):
        c.result(timeout=1)
    fs[0].set_result(1)  # late results are ignored


def test_done_callback_errors_are_logged_and_counted(caplog):
    before = callback_errors()
    f = Future()
    f.add_done_callback(lambda _: 1 / 0)
    f.set_result(1)
    assert callback_errors() == before + 1
    assert "exception calling callback" in caplog.text


def test_waiting_many_threads_timeouts_and_cf_wait_on_pending_futures():
    f = Future()
    with pytest.raises(cf.TimeoutError):
        f.result(timeout=0)
    with pytest.raises(cf.TimeoutError):
        f.exception(timeout=0.01)
    got = []
    waiters = [threading.Thread(target=lambda: got.append(f.result(timeout=30))) for _ in range(4)]
    for t in waiters:
        t.start()
    g, h = Future(), Future()
    threading.Timer(0.05, lambda: (f.set_result(7), g.set_exception(KeyError("g")))).start()
    done, not_done = cf.wait([f, g, h], timeout=30, return_when=cf.FIRST_EXCEPTION)
    assert g in done and h in not_done
    for t in waiters:
        t.join(30)
    assert got == [7] * 4 and f.result() == 7 and isinstance(g.exception(), KeyError)
    assert h.cancel() and h.cancelled() and not h.set_running_or_notify_cancel()
    with pytest.raises(cf.CancelledError):
        h.result(timeout=1)
    with pytest.raises(cf.InvalidStateError):
        f.set_result(8)
    assert list(cf.as_completed([f, g], timeout=1)) and f.done() and not f.running()


def _blocked_in_result(f, got):
    t = threading.Thread(target=lambda: got.append(_outcome(f)))
    t.start()
    deadline = time.monotonic() + 10
    while _EVENTFD and not f._sleepers and time.monotonic() < deadline:  # until it is parked on its eventfd
        time.sleep(0.001)
    if not _EVENTFD:
        time.sleep(0.05)
    return t


def _outcome(f):
    try:
        return f.result(timeout=30)
    except cf.CancelledError:
        return "cancelled"
    except KeyError as e:
        return type(e)


def test_a_thread_sleeping_in_result_is_woken_by_set_result_cancel_and_set_exception():
    """result() parks on the thread's eventfd where there is one (the wake does not hold the GIL):
    every way to complete wakes it, and it is deregistered after."""
    for complete, expect in [(lambda f: f.set_result(5), 5), (lambda f: f.cancel(), "cancelled"),
                             (lambda f: f.set_exception(KeyError("k")), KeyError)]:
        f, got = Future(), []
        t = _blocked_in_result(f, got)
        if _EVENTFD:
            assert f._sleepers and len(f._sleepers) == 1
        complete(f)
        t.join(10)
        assert not t.is_alive() and f._sleepers is None
        assert got == [expect]


def test_a_timed_out_wait_leaves_no_sleeper_and_a_stale_wake_does_not_end_the_next_wait():
    """A wait that timed out deregisters; a wake meant for a wait that already returned (its count left
    on the thread's eventfd) only makes the next wait look again: it still waits for its own Future."""
    f = Future()
    with pytest.raises(cf.TimeoutError):
        f.result(timeout=0.02)
    assert not f._sleepers
    f.set_result(1)
    if _EVENTFD:
        os.eventfd_write(_sleeper().fd, 1)  # a stale count on this thread's eventfd
    g = Future()
    threading.Timer(0.1, lambda: g.set_result(2)).start()
    t0 = time.monotonic()
    assert g.result(timeout=30) == 2 and time.monotonic() - t0 >= 0.05
    with pytest.raises(cf.TimeoutError):  # and a stale count does not end a timed wait early either
        if _EVENTFD:
            os.eventfd_write(_sleeper().fd, 1)
        Future().result(timeout=0.05)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_waits_on_its_own_eventfd():
    """The parent's eventfd is shared with a forked child: the child's thread makes its own, so neither
    process reads the other's wakes."""
    Future().done()
    parent = _sleeper() if _EVENTFD else None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait on a Future completed by a timer thread, report, exit
        try:
            g = Future()
            threading.Timer(0.05, lambda: g.set_result(3)).start()
            ok = g.result(timeout=10) == 3 and (parent is None or _sleeper() is not parent)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(r)
    f = Future()
    threading.Timer(0.05, lambda: f.set_result(4)).start()
    assert f.result(timeout=10) == 4
