"""Device: where a Net's arrays live, a parameter of the layout pipeline (never a global).

The layout pipeline (engine/layout.py) asks its Device for everything that depends on
where memory is: the arena buffer and the views into it, the weights as that device
holds them (placed once per device, shared read-only by every Net on it), and the
host<->device copies at the Net's edges (Paddle-Lite's io_copy, the transform its
type_target_cast_pass inserts between kernels of different targets). The kernel
registry is keyed by `Device.name` ("cpu"), the same string OpContext.device carries.

CPU: host memory is its memory, so its io_copy is a plain copy and its weights are the
Program's own arrays. A device with memory of its own (CUDA) has a `host` beside it: the
placement stage (engine/placement.py) runs on the device every node it has a kernel for
(kernel_for) and the rest on the host, and the layout keeps two arenas, each planned by
memory_opt: the device's, and a host one (host_arena: pinned staging on CUDA) for the graph's
inputs and outputs and the host nodes' values. to_device / to_host are the io_copy steps.

Also here: the worker -> device map of a pool (worker i on devices[i % n], as fb-caffe-exts)
and the bounded per-worker cache of CUDA graphs keyed by input shapes (GraphCache).
"""

from __future__ import annotations

import contextlib
import math
import threading
import weakref
from collections import OrderedDict
from typing import Callable, Sequence

import numpy as np

from ..errors import ResourceExhaustedError, UnsupportedOpError
from ..ops.cpu.conv_shared import LINE, line_bytes
from ..ops.cuda import runtime as cuda_runtime
from ..ops.registry import KernelDef, find

ALIGNMENT = LINE  # 64 bytes: every arena and every value in it starts on a cache line

COPY_HOLDING_GIL_BYTES = 4 << 20
"""CPU.copy_in copies a C-contiguous input of up to this many bytes into its blob holding the GIL (a memcpy:
0.6 MiB, MobileNetV2's image, in about 20 us), larger ones through numpy (which releases it), and copy_out
its outputs alike: a forward beside a busy Python thread then waits for the GIL twice less
(benchmarks/neighbours.py)."""
_capturing = threading.local()  # .active: this thread is inside CUDA.capture (to_host must not synchronize)


class Device:
    """What a layout needs from the memory it runs in.

    Attributes:
        name: the registry's device key ("cpu", "cuda").
        host: the host Device beside this one (None: this one is host memory). A device with a
            host runs some nodes itself and the rest on the host (engine/placement.py).
    """

    name = "?"
    host: "Device | None" = None

    def kernel_for(self, step, ctx) -> KernelDef | None:
        """The kernel this device runs `step` with at the shapes and dtypes of `ctx` (the host's
        context, output shapes inferred), or None: the node runs on the host. Only devices with a
        host are asked."""
        return None

    def arena(self, nbytes: int) -> np.ndarray:
        """An uninitialized buffer of `nbytes` bytes, aligned to ALIGNMENT.

        Raises:
            ResourceExhaustedError: the device has less memory than that.
        """
        raise NotImplementedError

    def view(self, arena, offset: int, shape: tuple, dtype) -> np.ndarray:
        """The array of `shape` and `dtype` at byte `offset` of an arena from arena()."""
        raise NotImplementedError

    def weights(self, program) -> dict:
        """name -> the Program's weights as held on this device (placed once, read-only)."""
        raise NotImplementedError

    def copy_in(self, dst, src: np.ndarray) -> None:
        """io_copy host -> device: a host array into this device's array `dst` (same shape and dtype)."""
        raise NotImplementedError

    def copy_out(self, src) -> np.ndarray:
        """io_copy device -> host: a host array holding a copy of this device's array."""
        raise NotImplementedError

    # ---- devices with a host beside them (engine/placement.py) ----------------------------------
    def host_arena(self, nbytes: int) -> np.ndarray:
        """The host buffer of a layout's host values (its staging: the graph's inputs and outputs,
        the host nodes' values); pinned memory on CUDA, so io_copy runs asynchronously."""
        return (self.host or self).arena(nbytes)

    def upload(self, array: np.ndarray):
        """A device copy of one host array known at reshape (a value folded at reshape time)."""
        raise NotImplementedError

    def to_device(self, x: np.ndarray, *, out) -> None:
        """io_copy host -> device, a step of the run (x: a host blob, out: a device blob)."""
        raise NotImplementedError

    def to_host(self, x, *, out: np.ndarray) -> None:
        """io_copy device -> host, a step of the run: when it returns, `out` holds the value (the
        device's queued work is done up to here)."""
        raise NotImplementedError

    # ---- device arrays at a Net's edges (engine/inputs.py, Layout.io_run) ------------------------
    def adopt(self, x):
        """This device's array for `x` -- a DLPack producer on a device other than the CPU, or an array
        of this device's own type -- without a copy; None when this device does not take it (the CPU
        takes none: InputSpec.check raises InputError)."""
        return None

    def record(self, arrays: list):
        """A mark, on the calling thread's streams, after which the adopted `arrays` are ready: another
        thread's wait(mark) orders its stream after it (a pool job checked in the caller's thread, run
        on a worker's stream). None where there are no streams."""
        return None

    def wait(self, mark) -> None:
        """Make this thread's current stream wait for a record() mark (None: nothing to wait for)."""

    def copy_device(self, src, *, out) -> None:
        """io_copy device -> device, a step of a run: `src` (adopted; on this GPU or another one) into the
        device blob `out` (same shape and dtype), on this thread's current stream."""
        raise NotImplementedError

    def clone(self, src):
        """A new device array holding a copy of the device array `src`, queued on this thread's current
        stream (synchronize() waits for it): an output handed to the caller."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """When it returns, the work queued on this thread's current stream is done."""

    supports_graphs = False
    """Whether capture() and replay() work: a Net's layouts that run wholly on the device are then
    captured once and replayed (CUDA graphs; engine/net.py)."""

    def can_capture(self) -> bool:
        """Whether a capture may start on this thread now (CUDA: its current stream is not the default one)."""
        return self.supports_graphs

    def capture(self, run: list):
        """Record the calls of `run` (a layout's, every one a launch or a copy on this thread's
        current stream) into a graph, without running them."""
        raise NotImplementedError

    def replay(self, graph) -> None:
        """Run a graph from capture() on this thread's current stream; when it returns, its work is done."""
        raise NotImplementedError

    def worker_context(self):
        """A context a pool worker thread runs all its jobs in (entered once, on the thread): the
        host needs none; a GPU makes itself the thread's current device and gives the thread a
        non-blocking stream of its own, so workers on one GPU overlap their work."""
        return contextlib.nullcontext()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class CPU(Device):
    """Host memory: numpy arrays, one aligned byte buffer per arena."""

    name = "cpu"

    def arena(self, nbytes: int) -> np.ndarray:
        try:
            return line_bytes(nbytes)
        except MemoryError as exc:  # under the budget, but the system has less
            raise ResourceExhaustedError(f"cannot allocate an arena of {nbytes:,} bytes on the CPU",
                                         nbytes) from exc

    def view(self, arena: np.ndarray, offset: int, shape: tuple, dtype) -> np.ndarray:
        if dtype == object:  # object arrays cannot live in raw bytes
            return np.empty(shape, dtype)
        n = math.prod(shape) * np.dtype(dtype).itemsize
        return arena[offset:offset + n].view(dtype).reshape(shape)

    def weights(self, program) -> dict:
        return program.weights  # already read-only host arrays, shared by every Net

    def copy_in(self, dst: np.ndarray, src: np.ndarray) -> None:
        if (src.dtype == dst.dtype and src.dtype.kind not in "OV" and 0 < src.nbytes <= COPY_HOLDING_GIL_BYTES
                and src.flags.c_contiguous and dst.flags.c_contiguous and src.shape == dst.shape):
            # a memcpy holding the GIL: numpy's copy releases it, and taking it back waits up to the switch
            # interval (5 ms) beside a busy Python thread, where this copy takes microseconds
            try:
                memoryview(dst).cast("B")[:] = memoryview(src).cast("B")
                return
            except (TypeError, ValueError, BufferError):  # a dtype the buffer protocol does not export
                pass
        np.copyto(dst, src, casting="no")

    def copy_out(self, src: np.ndarray) -> np.ndarray:
        if src.dtype.kind not in "OV" and 0 < src.nbytes <= COPY_HOLDING_GIL_BYTES and src.flags.c_contiguous:
            out = np.empty(src.shape, src.dtype)  # a memcpy holding the GIL, as copy_in
            try:
                memoryview(out).cast("B")[:] = memoryview(src).cast("B")
                return out
            except (TypeError, ValueError, BufferError):
                pass
        return np.array(src)


class DeviceWithHost(Device):
    """A device whose memory is not the host's: nodes it has a kernel for run on it (kernel_for:
    the registry's kernels of `name` whose supports(ctx) accepts the node), the rest on `host`.

    Weights are placed once per device (weights(): a cache per Program, shared read-only by every
    Net on this device, dropped with the Program: a server that loads and unloads models does not
    keep their device weights); subclasses say how to allocate and copy (_upload, arena, view, copies).
    """

    def __init__(self, host: Device | None = None):
        self.host = host if host is not None else _DEVICES["cpu"]
        self._weights = weakref.WeakKeyDictionary()  # Program -> name -> device array
        self._weights_lock = threading.Lock()  # two workers laying out at once upload once

    def kernel_for(self, step, ctx) -> KernelDef | None:
        node = step.node
        k = find(node.op_type, node.domain, step.version, self.name)
        if k is None or k.dynamic_output or k.unknown_attrs(node.attrs):
            return None
        if k.check is not None and k.check(node.attrs, step.version):
            return None
        try:
            return k if k.supports is None or k.supports(ctx) else None
        except Exception:  # a supports() that cannot tell: the host runs the node
            return None

    def weights(self, program) -> dict:
        placed = self._weights.get(program)
        if placed is None:
            with self._weights_lock:
                placed = self._weights.get(program)
                if placed is None:
                    placed = {n: self._upload(a) for n, a in program.weights.items() if a.dtype != object}
                    self._weights[program] = placed
        return placed

    def upload(self, array: np.ndarray):
        return self._upload(array)

    def _upload(self, array: np.ndarray):
        raise NotImplementedError


class CUDA(DeviceWithHost):
    """One NVIDIA GPU through CuPy: the arena one device allocation (CuPy's pool), views of it as
    cupy arrays, weights uploaded once, io_copy on the calling thread's current stream with the host
    side pinned (host_arena), kernels from ops/cuda (registered for "cuda").

    Args:
        ordinal: the GPU's index (CUDA's device number).
    Raises:
        UnsupportedOpError: CuPy or a GPU is missing (ops/cuda/runtime.unavailable says which).
    """

    name = "cuda"

    def __init__(self, ordinal: int = 0):
        why = cuda_runtime.unavailable()
        if why is not None:
            raise UnsupportedOpError(f"device 'cuda': {why}")
        count = cuda_runtime.cupy.cuda.runtime.getDeviceCount()
        if not 0 <= int(ordinal) < count:
            raise UnsupportedOpError(f"device 'cuda:{ordinal}': this machine has {count} GPU(s), "
                                     f"ordinals 0..{count - 1}")
        super().__init__()
        self.ordinal = int(ordinal)
        self.cupy = cuda_runtime.cupy

    def _on(self):
        return self.cupy.cuda.Device(self.ordinal)

    @contextlib.contextmanager
    def worker_context(self):
        """This GPU current on the thread, and a non-blocking stream of the thread's own current on it
        (CuPy's current device and stream are per thread): the worker's kernels, io_copy and cuBLAS
        calls (ops/cuda/runtime.py sets the handle's stream from the current one) go on it."""
        with self._on():
            stream = self.cupy.cuda.Stream(non_blocking=True)
            with stream:
                yield stream
            stream.synchronize()

    def arena(self, nbytes: int):
        try:
            with self._on():
                return self.cupy.empty(max(nbytes, 1), self.cupy.uint8)[:nbytes]
        except self.cupy.cuda.memory.OutOfMemoryError as exc:
            raise ResourceExhaustedError(f"cannot allocate an arena of {nbytes:,} bytes on GPU {self.ordinal}",
                                         nbytes) from exc

    def view(self, arena, offset: int, shape: tuple, dtype):
        n = math.prod(shape) * np.dtype(dtype).itemsize
        return arena[offset:offset + n].view(dtype).reshape(shape)

    def host_arena(self, nbytes: int) -> np.ndarray:
        mem = self.cupy.cuda.alloc_pinned_memory(nbytes + ALIGNMENT)
        raw = np.frombuffer(mem, np.uint8, nbytes + ALIGNMENT)
        start = (-raw.ctypes.data) % ALIGNMENT
        return raw[start:start + nbytes]  # the view keeps `mem` (its base) alive

    def _upload(self, array: np.ndarray):
        try:
            with self._on():
                return self.cupy.asarray(np.ascontiguousarray(array))
        except self.cupy.cuda.memory.OutOfMemoryError as exc:
            raise ResourceExhaustedError(f"cannot place a weight of {array.nbytes:,} bytes on GPU {self.ordinal}",
                                         array.nbytes) from exc

    def to_device(self, x: np.ndarray, *, out) -> None:
        out.set(x, stream=self.cupy.cuda.get_current_stream())

    def to_host(self, x, *, out: np.ndarray) -> None:
        stream = self.cupy.cuda.get_current_stream()
        x.get(stream=stream, out=out)
        if not getattr(_capturing, "active", False):  # in a capture: replay() synchronizes
            stream.synchronize()

    supports_graphs = True

    def can_capture(self) -> bool:
        return self.cupy.cuda.get_current_stream().ptr != 0

    def capture(self, run: list):
        """Stream capture of `run` on this thread's current stream into a cupy.cuda.Graph (nothing runs).

        The caller has run the same calls eagerly first: every RawModule is loaded, the cuBLAS
        handle's stream set (ops/cuda/runtime.py), and the calls allocate nothing -- their outputs
        are views of the layout's arenas, whose addresses the graph keeps.

        Raises:
            RuntimeError: the current stream is the default one (capture needs a stream of its own,
                as a pool worker has: worker_context), or anything the capture raised.
        """
        stream = self.cupy.cuda.get_current_stream()
        if stream.ptr == 0:
            raise RuntimeError("CUDA graph capture needs a non-default stream (a pool worker's)")
        _capturing.active = True
        try:
            stream.begin_capture()
            try:
                for call in run:
                    call()
            except BaseException:
                try:
                    stream.end_capture()
                except Exception:  # the capture was invalidated already: nothing to end
                    pass
                raise
            return stream.end_capture()
        finally:
            _capturing.active = False

    def replay(self, graph) -> None:
        stream = self.cupy.cuda.get_current_stream()
        graph.launch(stream)
        stream.synchronize()

    # ---- device arrays at a Net's edges ----------------------------------------------------------
    def adopt(self, x):
        """A CuPy array as it is, or any DLPack producer on a CUDA device (kDLCUDA, kDLCUDAManaged: a
        PyTorch or JAX tensor) as a CuPy view (cupy.from_dlpack, which passes the producer this
        thread's current stream to order its work before ours); no copy."""
        cp = self.cupy
        if isinstance(x, cp.ndarray):
            return x
        kind = int(x.__dlpack_device__()[0])
        if kind not in (2, 13):  # kDLCUDA, kDLCUDAManaged
            return None
        return cp.from_dlpack(x)

    def record(self, arrays: list):
        """One event per GPU the arrays are on, recorded on this thread's current stream there."""
        cp, marks = self.cupy, []
        for dev in sorted({a.device.id for a in arrays}):
            with cp.cuda.Device(dev):
                ev = cp.cuda.Event(disable_timing=True)
                ev.record()
                marks.append(ev)
        return marks

    def wait(self, mark) -> None:
        if mark:
            stream = self.cupy.cuda.get_current_stream()
            for ev in mark:
                stream.wait_event(ev)

    def copy_device(self, src, *, out) -> None:
        """On this GPU: cupy.copyto (any strides). From another GPU: cudaMemcpyPeerAsync of a contiguous
        copy (made and waited for on the source GPU when `src` is strided), never through the host."""
        cp = self.cupy
        if src.device.id == self.ordinal:
            cp.copyto(out, src.reshape(out.shape))
            return
        if not src.flags.c_contiguous:
            with cp.cuda.Device(src.device.id):
                src = cp.ascontiguousarray(src)
                cp.cuda.get_current_stream().synchronize()
        cp.cuda.runtime.memcpyPeerAsync(out.data.ptr, self.ordinal, src.data.ptr, src.device.id, out.nbytes,
                                        cp.cuda.get_current_stream().ptr)

    def clone(self, src):
        try:
            with self._on():
                return src.copy()
        except self.cupy.cuda.memory.OutOfMemoryError as exc:
            raise ResourceExhaustedError(f"cannot allocate an output of {src.nbytes:,} bytes on GPU {self.ordinal}",
                                         src.nbytes) from exc

    def synchronize(self) -> None:
        self.cupy.cuda.get_current_stream().synchronize()

    def copy_in(self, dst, src: np.ndarray) -> None:
        if isinstance(dst, np.ndarray):  # a host blob of the layout (a graph input: staging)
            np.copyto(dst, src, casting="no")
        else:
            self.to_device(src, out=dst)

    def copy_out(self, src) -> np.ndarray:
        if isinstance(src, np.ndarray):
            return np.array(src)
        return self.cupy.asnumpy(src, stream=self.cupy.cuda.get_current_stream(), blocking=True)


_DEVICES = {"cpu": CPU()}
_CUDA: dict = {}


def get_device(name) -> Device:
    """The Device for a name ("cpu", "cuda", "cuda:1"), or the Device itself.

    Raises:
        UnsupportedOpError: an unknown device, or "cuda" where CuPy or a GPU is missing (the
            message says which and how to install the `gpu` extra).
    """
    if isinstance(name, Device):
        return name
    key = str(name).lower()
    device = _DEVICES.get(key)
    if device is not None:
        return device
    if key == "cuda" or key.startswith("cuda:"):
        try:
            ordinal = int(key.split(":", 1)[1]) if ":" in key else 0
        except ValueError:
            raise UnsupportedOpError(f"device {name!r}: expected 'cuda' or 'cuda:<n>'") from None
        dev = _CUDA.get(ordinal)
        if dev is None:
            dev = _CUDA.setdefault(ordinal, CUDA(ordinal))
        return dev
    raise UnsupportedOpError(f"device {name!r}: unknown device; devices: ['cpu', 'cuda', 'cuda:<n>']")


def worker_devices(workers: int, devices: Sequence[int]) -> list[int]:
    """The GPU of each of `workers` pool workers: worker i on devices[i % len(devices)] (fb-caffe-exts'
    spread; the weights are uploaded once per device and shared by its workers).

    Raises:
        ValueError: no devices, or a negative ordinal.
    """
    devices = [int(d) for d in devices]
    if not devices or any(d < 0 for d in devices):
        raise ValueError(f"devices must be GPU ordinals >= 0, got {devices}")
    return [devices[i % len(devices)] for i in range(int(workers))]


class GraphCache:
    """A worker's CUDA graphs, one per input shapes, in a bounded LRU.

    Shapes are captured the second time they are seen (a shape seen once runs eagerly: capturing
    costs a run and memory), and at most `capacity` graphs are kept; the least recently used one is
    released (`release(graph)`) to make room. Keys: GraphCache.key(net id, input shapes).

    Args:
        capacity: graphs kept (0: never capture).
        capture: capture(key) -> graph, called on the second sight of a key (the caller has warmed
            every kernel and set the cuBLAS stream; nothing is allocated inside the capture).
        release: called with each graph dropped.
    """

    def __init__(self, capacity: int, capture: Callable, release: Callable = lambda graph: None):
        self.capacity = int(capacity)
        self._capture, self._release = capture, release
        self._graphs: OrderedDict = OrderedDict()
        self._seen: OrderedDict = OrderedDict()  # keys seen once (bounded too)
        self.captures = self.hits = self.evictions = 0

    @staticmethod
    def key(net_id: int, shapes: dict) -> tuple:
        return (int(net_id), tuple((n, tuple(int(d) for d in s)) for n, s in shapes.items()))

    def get(self, key):
        """The graph for `key`, captured now if this is its second sight, or None (run eagerly)."""
        graph = self._graphs.get(key)
        if graph is not None:
            self._graphs.move_to_end(key)
            self.hits += 1
            return graph
        if self.capacity <= 0:
            return None
        if key not in self._seen:
            self._seen[key] = None
            if len(self._seen) > 4 * self.capacity:
                self._seen.popitem(last=False)
            return None
        del self._seen[key]
        graph = self._capture(key)
        self.captures += 1
        self._graphs[key] = graph
        while len(self._graphs) > self.capacity:
            _, old = self._graphs.popitem(last=False)
            self.evictions += 1
            self._release(old)
        return graph

    def discard(self, key) -> None:
        """Forget `key` (its graph released): what it was captured for is gone."""
        graph = self._graphs.pop(key, None)
        if graph is not None:
            self._release(graph)
        self._seen.pop(key, None)

    def __len__(self) -> int:
        return len(self._graphs)

    def clear(self) -> None:
        while self._graphs:
            self._release(self._graphs.popitem()[1])
        self._seen.clear()


def cuda_available() -> bool:
    """True when cupy imports and reports at least one CUDA device."""
    try:
        import cupy  # noqa: PLC0415  (optional dependency)

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no cupy, no driver, no device
        return False
