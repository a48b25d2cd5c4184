"""A stand-in for a GPU that numpy can play: the orchestration above the kernels, tested on the CPU.

HostMemoryDevice is a Device with a host beside it (engine/device.DeviceWithHost, as CUDA) whose
"device memory" is numpy arrays in arenas of its own, and whose kernels are the CPU's own for the
op types a test declares: every node's numerics are the real CPU kernel's, never faked, while the
placement, the io_copy steps, the two arenas, the weights placed once per device and the staging
buffers are the ones a GPU layout gets. It counts what it is asked to do.

StandInDeviceArray is the caller's array "on the GPU": a DLPack producer that says it lives on a
CUDA device (kDLCUDA), which numpy cannot read (as a CuPy or PyTorch CUDA array) and which
HostMemoryDevice adopts as its own memory (as CUDA adopts a CuPy array); outputs asked for on the
device come back as StandInDeviceArray copies (Device.clone).
"""

from __future__ import annotations

import numpy as np

from pooled_predictor.engine.device import CPU, DeviceWithHost


KDL_CUDA = 2


class StandInDeviceArray:
    """An array "on GPU `ordinal`" (numpy storage the host cannot read through it): shape, dtype,
    DLPack's device query; __dlpack__ and __array__ refuse, as a CUDA array's do for numpy."""

    def __init__(self, array, ordinal: int = 0):
        self.storage = np.asarray(array)
        self.ordinal = ordinal

    shape = property(lambda self: self.storage.shape)
    dtype = property(lambda self: self.storage.dtype)
    ndim = property(lambda self: self.storage.ndim)
    size = property(lambda self: self.storage.size)

    def __dlpack_device__(self):
        return (KDL_CUDA, self.ordinal)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        raise BufferError("device memory: the host cannot read it through DLPack")

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed (a device array)")

    def get(self) -> np.ndarray:
        """A host copy (cupy.ndarray.get)."""
        return np.array(self.storage)


class HostMemoryDevice(DeviceWithHost):
    """Args: ops: the op types it "has kernels for" (the others run on the host); graphs: it "has
    CUDA graphs": capture() records the calls without running them, as a stream capture does, and
    replay() runs what was recorded."""

    name = "cuda"

    def __init__(self, ops=(), graphs=False):
        super().__init__()
        self.ops = set(ops)
        self.supports_graphs = bool(graphs)
        self.uploads = self.to_device_calls = self.to_host_calls = 0
        self.captures = self.replays = 0
        self.fail_capture = None  # an exception capture() raises
        self.arenas, self.host_arenas = [], []
        self.adopted = self.device_copies = self.clones = self.syncs = self.records = 0
        self.waited = []

    def capture(self, run):
        if self.fail_capture is not None:
            raise self.fail_capture
        self.captures += 1
        return tuple(run)

    def replay(self, graph):
        self.replays += 1
        for call in graph:
            call()

    def kernel_for(self, step, ctx):
        return step.kernel if step.node.op_type in self.ops else None

    def arena(self, nbytes):
        a = CPU().arena(nbytes)
        self.arenas.append(a)
        return a

    def view(self, arena, offset, shape, dtype):
        return CPU().view(arena, offset, shape, dtype)

    def host_arena(self, nbytes):
        a = CPU().arena(nbytes)
        self.host_arenas.append(a)
        return a

    def _upload(self, array):
        self.uploads += 1
        a = np.array(array)
        a.flags.writeable = False
        return a

    def to_device(self, x, *, out):
        self.to_device_calls += 1
        np.copyto(out, x)

    def to_host(self, x, *, out):
        self.to_host_calls += 1
        np.copyto(out, x)

    def copy_in(self, dst, src):
        np.copyto(dst, src, casting="no")

    def copy_out(self, src):
        return np.array(src)

    def adopt(self, x):
        if isinstance(x, StandInDeviceArray):
            self.adopted += 1
            return x.storage
        return None

    def record(self, arrays):
        self.records += 1
        return ("mark", self.records)

    def wait(self, mark):
        if mark is not None:
            self.waited.append(mark)

    def copy_device(self, src, *, out):
        self.device_copies += 1
        np.copyto(out, src.reshape(out.shape))

    def clone(self, src):
        self.clones += 1
        return StandInDeviceArray(np.array(src))

    def synchronize(self):
        self.syncs += 1
