"""Future: concurrent.futures semantics kept, then() and collect() added."""

import concurrent.futures as cf
import threading

import pytest

from pooled_predictor import Future, collect
from pooled_predictor.serving.futures import callback_errors


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
