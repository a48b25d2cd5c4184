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
    """Args: ops: the op types it "has kernels for" (the others run on the host)."""

    name = "cuda"

    def __init__(self, ops=()):
        super().__init__()
        self.ops = set(ops)
        self.uploads = self.to_device_calls = self.to_host_calls = 0
        self.arenas, self.host_arenas = [], []

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
