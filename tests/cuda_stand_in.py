"""A stand-in for a GPU that numpy can play: the orchestration above the kernels, tested on the CPU.

HostMemoryDevice is a Device with a host beside it (engine/device.DeviceWithHost, as CUDA) whose
"device memory" is numpy arrays in arenas of its own, and whose kernels are the CPU's own for the
op types a test declares: every node's numerics are the real CPU kernel's, never faked, while the
placement, the io_copy steps, the two arenas, the weights placed once per device and the staging
buffers are the ones a GPU layout gets. It counts what it is asked to do.
"""

from __future__ import annotations

import numpy as np

from pooled_predictor.engine.device import CPU, DeviceWithHost


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
