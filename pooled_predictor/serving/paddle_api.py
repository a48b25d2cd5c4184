"""Paddle Inference's handle API (paddle_infer.Predictor / Tensor) over our Predictor and pool.

Paddle users write::

    names = predictor.get_input_names()
    handle = predictor.get_input_handle(names[0])
    handle.reshape(image.shape)
    handle.copy_from_cpu(image)            # or handle.share_external_data(image): zero-copy
    predictor.run()
    out = predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()
    other = predictor.clone()              # shares the weights

and the same code runs here. Handles belong to the calling thread (as Paddle's
predictors do, one per thread; our Predictor already gives each thread its own
Net): what one thread feeds is invisible to another.

* `copy_from_cpu(array)` copies the array once into the handle;
  `share_external_data(array)` keeps a reference. In both cases `run()` makes
  the Net read that buffer in place (Net.forward with share_inputs=True): the
  input is never copied into the Net's arena, so a shared buffer is read as it
  is at run().
* `copy_to_cpu()` returns a copy of the output (valid after the next run).
* Arrays: numpy, or any DLPack producer on the CPU (numpy.from_dlpack, no copy). On a
  device="cuda" predictor, `share_external_data` also takes a CuPy array or a CUDA DLPack
  producer (PyTorch, JAX: Paddle's share_external_data of a GPU tensor), which run() copies GPU to
  GPU into the Net; `copy_from_cpu` takes host arrays only (its name says so), and a device array
  given to it, or to a CPU predictor, is an InputError (engine/inputs.py).

On a PinnedPooledPredictor, `run()` sends the handles' arrays through the pool
and waits (the worker's Net copies them in, as any pool job).

Errors are the rest of the API's: InputError for unknown names, wrong dtypes,
rank or fixed dimensions, a missing input at run(); UnknownBlobError for an
output read before run(). Source: Paddle Inference Python API
(paddle.inference.Predictor, paddle.inference.Tensor).
"""

from __future__ import annotations

import threading

import numpy as np

from ..engine.inputs import as_input_array
from ..errors import InputError, UnknownBlobError


class Tensor:
    """A named input or output of a predictor (paddle.inference.Tensor).

    Not created directly: get_input_handle() / get_output_handle().
    """

    def __init__(self, owner: "HandleAPI", name: str, is_input: bool):
        self._owner, self._name, self._is_input = owner, name, is_input

    def name(self) -> str:
        return self._name

    def type(self) -> np.dtype:
        """The numpy dtype of this input or output (None when the model does not declare it)."""
        values = self._owner._handle_inputs() if self._is_input else self._owner._handle_outputs()
        return next(v.dtype for v in values if v.name == self._name)

    # ---- inputs --------------------------------------------------------------------
    def reshape(self, shape) -> None:
        """Declare the input's shape before copy_from_cpu (Paddle's Reshape).

        Raises:
            InputError: called on an output ("readonly"), or a shape whose rank or
                fixed dimensions the model rejects.
        """
        self._need_input("reshape")
        shape = tuple(int(d) for d in shape)
        self._owner._check_input_shape(self._name, shape)
        self._state().shapes[self._name] = shape

    def copy_from_cpu(self, array) -> None:
        """Copy `array` into this input (numpy array of the input's dtype).

        Raises:
            InputError: not an input, not an ndarray, wrong dtype or shape (its
                size must match a shape given by reshape()).
        """
        self._need_input("copy_from_cpu")
        array = self._checked(array, "copy_from_cpu")
        self._state().feeds[self._name] = np.array(array, copy=True, order="C")

    def share_external_data(self, array) -> None:
        """Let run() read `array` itself (zero-copy): keep it alive and unchanged while run() runs.

        On a device="cuda" predictor `array` may be a CuPy array or a CUDA DLPack producer, kept as
        it is and copied GPU to GPU at run().

        Raises:
            InputError: as copy_from_cpu, and for an array that is not C-contiguous.
        """
        self._need_input("share_external_data")
        if isinstance(array, np.ndarray) and not array.flags.c_contiguous:
            raise InputError(f"input {self._name!r}: share_external_data needs a C-contiguous array "
                             "(np.ascontiguousarray), the Net reads its memory as it is")
        self._state().feeds[self._name] = self._checked(array, "share_external_data")  # a view for reshape()

    def shape(self) -> list[int]:
        """The current shape: fed or declared (inputs), of the last run (outputs; declared before)."""
        st = self._state()
        if self._is_input:
            if self._name in st.feeds:
                return list(st.feeds[self._name].shape)
            if self._name in st.shapes:
                return list(st.shapes[self._name])
            declared = next(v.shape for v in self._owner._handle_inputs() if v.name == self._name)
            return [d if isinstance(d, int) else -1 for d in (declared or ())]
        if self._name in st.outputs:
            return list(st.outputs[self._name].shape)
        declared = next(v.shape for v in self._owner._handle_outputs() if v.name == self._name)
        return [d if isinstance(d, int) else -1 for d in (declared or ())]

    # ---- outputs (and inputs, for reading back) ------------------------------------
    def copy_to_cpu(self) -> np.ndarray:
        """A copy of the output of the last run() (of an input: the data fed).

        Raises:
            UnknownBlobError: an output read before run(), or an input not fed yet.
        """
        st = self._state()
        source = st.feeds if self._is_input else st.outputs
        if self._name not in source:
            what = "fed" if self._is_input else "computed: call run() first"
            raise UnknownBlobError(f"{'input' if self._is_input else 'output'} {self._name!r} has not been {what}")
        value = source[self._name]
        if not isinstance(value, np.ndarray):  # an input shared on the device
            device = self._owner._handle_device()
            return device.copy_out(device.adopt(value))
        return np.array(value, copy=True)

    # ---- helpers -------------------------------------------------------------------
    def _state(self):
        return self._owner._handle_state()

    def _need_input(self, what: str) -> None:
        if not self._is_input:
            raise InputError(f"{what}() on output {self._name!r}: output tensors are read-only")

    def _checked(self, array, what: str):
        original = array
        on_device = False
        if not isinstance(array, np.ndarray):
            if not hasattr(array, "__dlpack_device__"):
                raise InputError(f"input {self._name!r}: expected a numpy array or a DLPack producer, "
                                 f"got {type(array).__name__}")
            array, on_device = as_input_array(self._name, array, self._owner._handle_device())
            if on_device and what == "copy_from_cpu":
                raise InputError(f"input {self._name!r}: copy_from_cpu takes a host array, got a device array "
                                 f"({type(original).__name__}); give it to share_external_data")
        dtype = self.type()
        if dtype is not None and array.dtype != dtype:
            raise InputError(f"input {self._name!r}: expected dtype {dtype}, got {array.dtype}")
        declared = self._state().shapes.get(self._name)
        if declared is not None and int(np.prod(declared)) != array.size:
            raise InputError(f"input {self._name!r}: {array.size} values for the shape {declared} given to "
                             f"reshape() ({int(np.prod(declared))})")
        shape = declared if declared is not None else array.shape
        self._owner._check_input_shape(self._name, tuple(shape))
        if on_device:  # kept as the caller gave it: the Net adopts it at run()
            if tuple(array.shape) != tuple(shape):
                raise InputError(f"input {self._name!r}: a device array of shape {tuple(array.shape)} for the "
                                 f"shape {tuple(shape)} given to reshape(): reshape it on the device")
            return original
        return array.reshape(shape) if array.shape != tuple(shape) else array

    def __repr__(self):
        return f"Tensor({self._name!r}, {'input' if self._is_input else 'output'})"


class _HandleState(threading.local):
    def __init__(self):
        self.feeds: dict[str, np.ndarray] = {}
        self.shapes: dict[str, tuple] = {}
        self.outputs: dict[str, np.ndarray] = {}


class HandleAPI:
    """Mixin: Paddle's handle methods, over `_handle_inputs()`, `_handle_outputs()` and `_handle_run()`."""

    def get_input_names(self) -> list[str]:
        return [v.name for v in self._handle_inputs()]

    def get_output_names(self) -> list[str]:
        return [v.name for v in self._handle_outputs()]

    def get_input_handle(self, name: str) -> Tensor:
        """The handle of input `name`. Raises InputError for a name the model does not take."""
        if name not in self.get_input_names():
            raise InputError(f"no input named {name!r}; the model takes {self.get_input_names()}")
        return Tensor(self, name, True)

    def get_output_handle(self, name: str) -> Tensor:
        """The handle of output `name`. Raises UnknownBlobError for a name the model does not produce."""
        if name not in self.get_output_names():
            raise UnknownBlobError(f"no output named {name!r}; outputs are {self.get_output_names()}")
        return Tensor(self, name, False)

    def _paddle_run(self) -> None:
        """Run on the fed handles (Paddle's ZeroCopyRun); outputs go to the output handles.

        Raises:
            InputError: an input was not fed (copy_from_cpu / share_external_data).
        """
        st = self._handle_state()
        missing = [n for n in self.get_input_names() if n not in st.feeds]
        if missing:
            raise InputError(f"run(): inputs {missing} were not fed; use get_input_handle(name)."
                             "copy_from_cpu(array) or share_external_data(array)")
        st.outputs = self._handle_run({n: st.feeds[n] for n in self.get_input_names()})

    def _handle_device(self):
        """The engine.device.Device the owner's Nets run on (it adopts device arrays)."""
        net = self.canonical_net
        return (net() if callable(net) else net).device

    def _handle_state(self) -> _HandleState:
        st = self.__dict__.get("_paddle_state")
        if st is None:
            st = self.__dict__.setdefault("_paddle_state", _HandleState())
        return st

    def _check_input_shape(self, name: str, shape: tuple) -> None:
        """InputError when `shape` has another rank or fixed dimension than the model declares."""
        declared = next(v.shape for v in self._handle_inputs() if v.name == name)
        if declared is None:
            return
        if len(shape) != len(declared) or any(isinstance(d, int) and d != s for d, s in zip(declared, shape)) \
                or any(s < 0 for s in shape):
            raise InputError(f"input {name!r}: shape {tuple(shape)} does not fit the declared "
                             f"{tuple('?' if not isinstance(d, int) else d for d in declared)}")


__all__ = ["HandleAPI", "Tensor"]
