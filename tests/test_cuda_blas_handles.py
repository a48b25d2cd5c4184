"""cuBLAS handles (ops/cuda/runtime.py blas()): one per thread and device, reused by later threads.

Runs on the CPU: CuPy's device and stream queries and nvmath-python's cuBLAS bindings are replaced by
recorders, so what is checked is the handles' life cycle, not cuBLAS itself (tests/gpu runs the GEMMs)."""

from __future__ import annotations

import gc
import sys
import threading
import types

import pytest

from pooled_predictor.ops.cuda import runtime


class _Cublas(types.ModuleType):
    """nvmath.bindings.cublas's create / destroy / set_stream / set_math_mode, recorded."""

    class Math:
        TF32_TENSOR_OP_MATH = 3

    def __init__(self):
        super().__init__("nvmath.bindings.cublas")
        self.created, self.destroyed, self.streams = [], [], {}

    def create(self):
        handle = 1000 + len(self.created)
        self.created.append(handle)
        return handle

    def destroy(self, handle):
        self.destroyed.append(handle)

    def set_stream(self, handle, stream):
        self.streams[handle] = stream

    def set_math_mode(self, handle, mode):
        pass


@pytest.fixture
def fake_gpu(monkeypatch):
    cublas = _Cublas()
    bindings = types.ModuleType("nvmath.bindings")
    bindings.cublas = cublas
    nvmath = types.ModuleType("nvmath")
    nvmath.bindings = bindings
    for name, module in (("nvmath", nvmath), ("nvmath.bindings", bindings), ("nvmath.bindings.cublas", cublas)):
        monkeypatch.setitem(sys.modules, name, module)
    where = threading.local()  # each thread's current device and stream, as CUDA keeps them

    def device():
        return getattr(where, "device", 0)

    def stream():
        return types.SimpleNamespace(ptr=getattr(where, "stream", 7))

    cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=device), get_current_stream=stream)
    monkeypatch.setattr(runtime, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(runtime, "_FREE_HANDLES", {})
    return cublas, where


def _in_thread(fn):
    errors = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert not errors, errors
    gc.collect()


def test_a_thread_keeps_one_handle_per_device_and_later_threads_reuse_them(fake_gpu):
    cublas, where = fake_gpu
    seen = []

    def work():
        for dev in (0, 1, 0, 1, 0):  # a thread moving between two GPUs
            where.device = dev
            seen.append(runtime.blas()[1])

    _in_thread(work)
    assert len(cublas.created) == 2  # one handle per device, reused on every return to it
    assert seen == [cublas.created[0], cublas.created[1]] * 2 + [cublas.created[0]]
    assert not cublas.destroyed  # a graph captured with one may outlive the thread: kept, on the free list
    again = []

    def later():  # e.g. a pool closed and started again
        for dev in (1, 0):
            where.device = dev
            again.append(runtime.blas()[1])

    _in_thread(later)
    assert len(cublas.created) == 2 and again == [cublas.created[1], cublas.created[0]]
    assert runtime.free_blas_handles() == 2  # at exit
    assert sorted(cublas.destroyed) == sorted(cublas.created)
    assert runtime.free_blas_handles() == 0


def test_live_threads_never_share_a_handle_and_the_stream_is_set_only_when_it_changes(fake_gpu):
    cublas, where = fake_gpu
    calls = []
    original = cublas.set_stream

    def set_stream(handle, stream):
        calls.append((handle, stream))
        original(handle, stream)

    cublas.set_stream = set_stream

    started, release = threading.Barrier(2), threading.Event()
    handles = []

    def work(stream):
        where.stream = stream
        runtime.blas()
        runtime.blas()  # same stream: not set again
        where.stream = stream + 1
        handles.append(runtime.blas()[1])
        started.wait()  # both alive at once: two handles
        release.wait()

    threads = [threading.Thread(target=work, args=(s,)) for s in (11, 21)]
    for t in threads:
        t.start()
    while len(handles) < 2 and all(t.is_alive() for t in threads):
        threading.Event().wait(0.01)
    release.set()
    for t in threads:
        t.join()
    gc.collect()
    assert sorted(handles) == sorted(cublas.created) and len(set(handles)) == 2
    for h in handles:
        mine = [s for handle, s in calls if handle == h]
        assert mine in ([11, 12], [21, 22])
    assert runtime.free_blas_handles() == 2
