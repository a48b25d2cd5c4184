"""A Net's edges: InputSpec, the one validator of a model's inputs (count, names, dtypes, ranks,
fixed dims, empty dims), and fill_out, which copies outputs into the caller's arrays.

Every door into a model checks through it: Net.forward, Predictor.forward and the pool's
forward (in the caller's thread, so a bad request fails at the call). What it accepts
comes back as CheckedInputs, a dict name -> ndarray that Net.forward takes without a
second check (the pool checks at submit and its worker runs the job later).

Device arrays and DLPack (the input side of ONNX Runtime's IOBinding, without its binding object):
an input may be a numpy array, anything numpy reads (`__array__`), or any DLPack producer
(`__dlpack__` / `__dlpack_device__`: CuPy, PyTorch, JAX, numpy itself). A producer on the CPU
(kDLCPU, or CUDA's pinned host memory) is read with numpy.from_dlpack, without a copy. A producer
on a GPU (kDLCUDA, kDLCUDAManaged) is taken by the Net's Device (Device.adopt: a CuPy view,
cupy.from_dlpack, no copy) when the Net runs on one -- the Net then copies it device to device
into its own arena (engine/layout.py, Layout.io_run), never through the host -- and is refused with
an InputError on a CPU Net (copy it to the host first: cupy.asnumpy(x), x.cpu().numpy()). Such
inputs are listed in CheckedInputs.on_device; `ready` holds the events recorded on the caller's
current stream at the check, which the Net's stream waits for before reading them (a pool job
runs on a worker's stream, not the caller's). Dtype, rank and dimensions are checked as for
numpy, with the same errors.

Empty inputs: a request may hold a zero only in a dimension the model declares as the fixed
size 0. A zero where the model declares a symbolic size ("N", "width"), leaves the size
unknown, or declares no shape at all is refused (InputError): nothing in the model says it
can take an empty tensor there, and most models cannot (PP-OCR rec's convolutions at width
0 fail inside a kernel). Only requests are held to it (check); check_shapes, which Net.reshape
and the bodies of If/Loop/Scan use, takes any size >= 0, so values computed empty inside a
model still flow.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..errors import InputError
from ..ir import Value


# DLPack device types (dlpack.h DLDeviceType)
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_ROCM_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 11, 13
HOST_READABLE = frozenset((KDL_CPU, KDL_CUDA_HOST, KDL_ROCM_HOST))  # numpy.from_dlpack reads these
_NONE = frozenset()
DLPACK_DEVICES = {1: "CPU", 2: "CUDA", 3: "CUDA pinned host", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI",
                  10: "ROCm", 11: "ROCm pinned host", 12: "ExtDev", 13: "CUDA managed", 14: "oneAPI", 15: "WebGPU",
                  16: "Hexagon"}


class CheckedInputs(dict):
    """name -> array, every input of the model, accepted by InputSpec.check.

    Attributes:
        on_device: names whose array is the Net's Device's own (Device.adopt: a CuPy array), not
            host memory.
        ready: what Device.record() returned after adopting them (events on the caller's stream),
            or None.
    """

    __slots__ = ("on_device", "ready")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.on_device, self.ready = _NONE, None


class InputSpec:
    """The declared inputs of a model and the checks against them.

    Args:
        inputs: the model's input Values (name, dtype, shape with ints, symbols or None).
        device: the Net's engine.device.Device, which says which device arrays it takes (adopt);
            None: host arrays only.
    """

    def __init__(self, inputs: Sequence[Value], device=None):
        self.device = device
        self.values = list(inputs)
        self.names = [v.name for v in self.values]
        self._declared = {v.name: v for v in self.values}
        # name -> (rank or None, ((axis, fixed size), ...)) for fast shape checks
        self._fixed = {v.name: (None, ()) if v.shape is None else
                       (len(v.shape), tuple((i, d) for i, d in enumerate(v.shape) if isinstance(d, int)))
                       for v in self.values}
        self._specs = [(v.name, v.dtype, *self._fixed[v.name]) for v in self.values]
        # name -> axes that may not be 0 in a request (None: every axis, the rank is unknown)
        self._free = {v.name: None if v.shape is None else
                      tuple(i for i, d in enumerate(v.shape) if not isinstance(d, int)) for v in self.values}
        self._defaults = {v.name: tuple(d if isinstance(d, int) else 1 for d in (v.shape or ()))
                          for v in self.values}

    def default_shapes(self) -> dict[str, tuple]:
        """Declared input shapes, symbolic or unknown dimensions taken as 1."""
        return dict(self._defaults)

    def check(self, inputs) -> CheckedInputs:
        """Normalize inputs (list in input order, dict by name, or one array) and check them.

        Returns:
            CheckedInputs: name -> ndarray (or the device's array, listed in `on_device`), in input order.
        Raises:
            InputError: wrong count, names, type, dtype, rank or fixed dimension, a device array
                this Net's device does not take (see the module docstring), or a
                zero in a dimension the model does not declare as 0 (see the module
                docstring); the message names the input and what was expected.
        """
        if type(inputs) is CheckedInputs:
            return inputs
        if type(inputs) is dict and len(inputs) == len(self._specs):
            arrays = CheckedInputs()
            for name, dtype, rank, fixed in self._specs:  # the common case, cheaply
                a = inputs.get(name)
                if type(a) is not np.ndarray or (dtype is not None and a.dtype != dtype) \
                        or (rank is not None and a.ndim != rank) or not a.size:
                    break
                shape = a.shape
                for i, d in fixed:
                    if shape[i] != d:
                        break
                else:
                    arrays[name] = a
                    continue
                break
            else:
                return arrays
        arrays = self._normalize(inputs)  # anything else, with messages
        self.check_shapes({n: a.shape for n, a in arrays.items()})
        for n, a in arrays.items():
            if not a.size:
                self._check_empty(n, a.shape)
        return arrays

    def _check_empty(self, n: str, shape: tuple) -> None:
        """Refuse a zero in a dimension of input `n` that the model does not declare as 0."""
        free = self._free[n]
        zeros = [i for i in (range(len(shape)) if free is None else free) if shape[i] == 0]
        if zeros:
            i, decl = zeros[0], self._declared[n].shape
            declared = ("no shape" if decl is None else
                        f"dimension {i} as {decl[i]!r} (shape {_fmt(decl)})" if isinstance(decl[i], str) else
                        f"dimension {i} of unknown size (shape {_fmt(decl)})")
            raise InputError(f"input {n!r}: dimension {i} is 0 in shape {shape}, where the model declares "
                             f"{declared}: a zero-sized input is accepted only in a dimension the model "
                             f"declares as 0; give it a size >= 1")

    def _normalize(self, inputs) -> CheckedInputs:
        names = self.names
        if isinstance(inputs, Mapping):
            unknown = [n for n in inputs if n not in self._declared]
            missing = [n for n in names if n not in inputs]
            if unknown or missing:
                raise InputError(f"got inputs {sorted(map(str, inputs))}, the model takes {names}"
                                 + (f"; unknown: {unknown}" if unknown else "")
                                 + (f"; missing: {missing}" if missing else ""))
            items = [(n, inputs[n]) for n in names]
        else:
            if _is_array(inputs) or hasattr(inputs, "__dlpack_device__"):
                inputs = [inputs]
            if not isinstance(inputs, (list, tuple)):
                raise InputError(f"inputs must be a list, a dict or an array, not {type(inputs).__name__}")
            if len(inputs) != len(names):
                raise InputError(f"the model takes {len(names)} input(s) {names}, got {len(inputs)}")
            items = list(zip(names, inputs))
        arrays = CheckedInputs()
        on_device = []
        for (n, a), v in zip(items, self.values):
            if type(a) is not np.ndarray:
                a, device_array = as_input_array(n, a, self.device)
                if device_array:
                    on_device.append(n)
            if v.dtype is not None and a.dtype != v.dtype:
                raise InputError(f"input {n!r}: expected dtype {v.dtype}, got {a.dtype}")
            arrays[n] = a
        if on_device:
            arrays.on_device = frozenset(on_device)
            arrays.ready = self.device.record([arrays[n] for n in on_device])
        return arrays

    def check_shapes(self, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple]:
        """Validate input shapes against the declared ranks and fixed dims.

        Returns:
            name -> shape (tuples of ints), in input order.
        Raises:
            InputError: missing or unknown input names, wrong rank, a fixed dimension
                that differs, or a negative dimension.
        """
        names = self.names
        if len(input_shapes) != len(names) or any(n not in input_shapes for n in names):
            unknown = [n for n in input_shapes if n not in self._declared]
            missing = [n for n in names if n not in input_shapes]
            raise InputError(f"inputs {sorted(input_shapes)} do not match the model's inputs {names}"
                             + (f"; unknown: {unknown}" if unknown else "")
                             + (f"; missing: {missing}" if missing else ""))
        shapes = {}
        for n in names:
            shape = tuple(map(int, input_shapes[n]))
            rank, fixed = self._fixed[n]
            if rank is not None and len(shape) != rank or min(shape, default=0) < 0 \
                    or any(shape[i] != d for i, d in fixed):
                self._shape_error(n, shape)
            shapes[n] = shape
        return shapes

    def _shape_error(self, n: str, shape: tuple):
        decl = self._declared[n].shape
        if any(d < 0 for d in shape):
            raise InputError(f"input {n!r}: negative dimension in {shape}")
        if len(shape) != len(decl):
            raise InputError(f"input {n!r}: expected rank {len(decl)} (shape {_fmt(decl)}), "
                             f"got rank {len(shape)} (shape {shape})")
        bad = [i for i, (d, e) in enumerate(zip(shape, decl)) if isinstance(e, int) and d != e]
        raise InputError(f"input {n!r}: expected shape {_fmt(decl)}, got {shape} "
                         f"(dimension {bad[0]} must be {decl[bad[0]]})")


def fill_out(names: Sequence[str], out, result: dict) -> dict:
    """Copy `result` (name -> array) into the caller's `out` arrays; returns name -> the `out` array.

    The kernels never write into `out`: they write the Net's own (C-contiguous) blobs, which are
    copied with np.copyto, so an `out` of any strides (transposed, sliced) is filled as numpy's
    `out=` would fill it.

    Args:
        out: one array per name of `names`, a sequence in that order or a dict by name.
    Raises:
        InputError: a wrong count, or an `out` array that is not a writeable ndarray of the
            blob's shape and dtype (every one checked before any is written).
    """
    outs = [out[n] for n in names] if isinstance(out, Mapping) else list(out)
    if len(outs) != len(names):
        raise InputError(f"{len(outs)} `out` arrays for {len(names)} outputs")
    for n, o in zip(names, outs):
        b = result[n]
        if not isinstance(o, np.ndarray) or not o.flags.writeable:
            raise InputError(f"`out` for {n!r} must be a writeable ndarray, not {type(o).__name__}")
        if o.shape != b.shape or o.dtype != b.dtype:
            raise InputError(f"`out` for {n!r} must be an ndarray of shape {b.shape} "
                             f"and dtype {b.dtype}, got shape {o.shape} and dtype {o.dtype}")
    for n, o in zip(names, outs):
        np.copyto(o, result[n])
        result[n] = o
    return result


def as_input_array(name: str, a, device=None):
    """(array, on the device?) for an input that is not an ndarray: a DLPack producer on the CPU read
    by numpy.from_dlpack (no copy), one on a GPU taken by `device` (Device.adopt), or an array-like
    numpy reads (np.asarray).

    Raises:
        InputError: not an array; a device array `device` does not take (a CPU Net: None); a
            producer numpy cannot read.
    """
    dl = getattr(a, "__dlpack_device__", None)
    if dl is not None:
        try:
            kind, ordinal = (int(v) for v in dl())
        except Exception as exc:
            raise InputError(f"input {name!r}: __dlpack_device__() of {type(a).__name__} failed: {exc}") from None
        if kind != KDL_CPU and device is not None:
            adopted = device.adopt(a)
            if adopted is not None:
                return adopted, True
        if kind in HOST_READABLE:
            try:
                return np.from_dlpack(a), False
            except Exception as exc:  # BufferError, TypeError: a producer numpy cannot read (its dtype)
                raise InputError(f"input {name!r}: numpy cannot read this DLPack producer "
                                 f"({type(a).__name__}): {type(exc).__name__}: {exc}") from None
        where = f"{DLPACK_DEVICES.get(kind, f'DLPack device type {kind}')} device {ordinal}"
        runs_on = "the CPU" if device is None or device.host is None else f"device {device.name!r}"
        hint = ("copy it to the host first (cupy.asnumpy(x), x.cpu().numpy()) or create the Predictor with "
                "device='cuda'" if device is None or device.host is None else "give a host array or a CUDA array")
        raise InputError(f"input {name!r} is an array on {where} ({type(a).__name__}); this model runs on "
                         f"{runs_on}: {hint}")
    if not _is_array(a):
        raise InputError(f"input {name!r} must be an array, not {type(a).__name__}")
    return np.asarray(a), False


def _is_array(x) -> bool:
    return isinstance(x, np.ndarray) or (hasattr(x, "__array__") and hasattr(x, "shape")
                                         and hasattr(x, "dtype"))


def _fmt(shape) -> str:
    return "(" + ", ".join(str(d) if d is not None else "?" for d in shape) + ")"


OUTPUT_DEVICES = ("cpu", "cuda")


def outputs_on_device(output_device, device) -> bool:
    """Whether a forward returns its outputs as arrays of the Net's `device` (Device.name "cuda": CuPy
    arrays on the GPU that ran it) instead of numpy arrays: the output side of ONNX Runtime's IOBinding
    (bind_output(name, "cuda")), per call.

    Args:
        output_device: None or "cpu": numpy arrays (the default); "cuda": the device's arrays;
            "cuda:<n>": the same, where n is the Net's GPU.
    Raises:
        InputError: another value, or a device the Net does not run on (a CPU Net has only "cpu").
    """
    if output_device is None:
        return False
    key = str(output_device).lower()
    if key == "cpu":
        return False
    if device.host is not None and (key == device.name or key == f"{device.name}:{getattr(device, 'ordinal', 0)}"):
        return True
    runs_on = "the CPU" if device.host is None else f"{device.name}:{getattr(device, 'ordinal', 0)}"
    raise InputError(f"output_device={output_device!r}: this model runs on {runs_on}; output_device must be "
                     f"'cpu'" + ("" if device.host is None else f" or {device.name!r}"))


def owned_copies(blobs: dict, names: Sequence[str], device, on_device: bool) -> dict:
    """Copies of a Net's arrays that stay valid after its next forward: numpy copies, or (on_device)
    device copies (Device.clone) whose copying is done when this returns."""
    if not on_device:
        return {n: device.copy_out(blobs[n]) for n in names}
    out = {n: device.clone(blobs[n]) for n in names}
    device.synchronize()
    return out
