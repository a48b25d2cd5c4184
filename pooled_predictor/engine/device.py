"""Device: where a Net's arrays live, a parameter of the layout pipeline (never a global).

The layout pipeline (engine/layout.py) asks its Device for everything that depends on
where memory is: the arena buffer and the views into it, the weights as that device
holds them (placed once per device, shared read-only by every Net on it), and the
host<->device copies at the Net's edges (Paddle-Lite's io_copy, the transform its
type_target_cast_pass inserts between kernels of different targets). The kernel
registry is keyed by `Device.name` ("cpu"), the same string OpContext.device carries.

CPU is the one device today: host memory is its memory, so its io_copy is a plain copy
and its weights are the Program's own arrays. A CUDA device plugs in beside it (a
subclass that allocates with CuPy, uploads weights once and copies on a stream)
without touching the pool, the passes or the Net.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ResourceExhaustedError, UnsupportedOpError

ALIGNMENT = 64  # bytes: every arena and every value in it starts on a cache line


class Device:
    """What a layout needs from the memory it runs in.

    Attributes:
        name: the registry's device key ("cpu").
    """

    name = "?"

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

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class CPU(Device):
    """Host memory: numpy arrays, one aligned byte buffer per arena."""

    name = "cpu"

    def arena(self, nbytes: int) -> np.ndarray:
        try:
            raw = np.empty(nbytes + ALIGNMENT, np.uint8)
        except MemoryError as exc:  # under the budget, but the system has less
            raise ResourceExhaustedError(f"cannot allocate an arena of {nbytes:,} bytes on the CPU",
                                         nbytes) from exc
        start = (-raw.ctypes.data) % ALIGNMENT
        return raw[start:start + nbytes]

    def view(self, arena: np.ndarray, offset: int, shape: tuple, dtype) -> np.ndarray:
        if dtype == object:  # object arrays cannot live in raw bytes
            return np.empty(shape, dtype)
        n = math.prod(shape) * np.dtype(dtype).itemsize
        return arena[offset:offset + n].view(dtype).reshape(shape)

    def weights(self, program) -> dict:
        return program.weights  # already read-only host arrays, shared by every Net

    def copy_in(self, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src, casting="no")

    def copy_out(self, src: np.ndarray) -> np.ndarray:
        return np.array(src)


_DEVICES = {"cpu": CPU()}


def get_device(name) -> Device:
    """The Device for a name ("cpu"), or the Device itself.

    Raises:
        UnsupportedOpError: a device this build has no kernels for ("cuda" before the CUDA
            kernels land), naming what is missing.
    """
    if isinstance(name, Device):
        return name
    device = _DEVICES.get(str(name).lower())
    if device is None:
        what = "this build has no CUDA kernels yet" if str(name).lower().startswith("cuda") else "unknown device"
        raise UnsupportedOpError(f"device {name!r}: {what}; devices: {sorted(_DEVICES)}")
    return device


def cuda_available() -> bool:
    """True when cupy imports and reports at least one CUDA device."""
    try:
        import cupy  # noqa: PLC0415  (optional dependency)

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no cupy, no driver, no device
        return False
