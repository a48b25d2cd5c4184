"""Net: a Program bound to blobs (Caffe's Net: reshape(), forward(), blob_by_name()).

A Net owns its activation blobs and shares its Program's weights (read-only).
`reshape(input_shapes)` infers every blob's shape, evaluates what is already
known (Shape chains, constants), lays out memory once and binds each node to
its arrays; `forward()` then only runs bound kernels: it allocates no
activation arrays. Nodes whose output shape depends on data fed at forward time
(a Reshape whose target shape is a graph input, say) and everything downstream
of them run in a slower mode that infers shapes and allocates per forward.

A Net is used by one thread at a time (the Predictor gives each thread its own).
"""

from __future__ import annotations

import enum
from functools import partial
from typing import Iterable, Mapping, Sequence

import numpy as np

from .errors import InputError, KernelError, PooledPredictorError, UnknownBlobError
from .ops.context import NotStatic, OpContext, ScratchRef
from .program import SHAPE_ONLY_OPS, Program, Step


class Optimization(enum.Enum):
    """fb-caffe-exts' names: NONE keeps every blob; MEMORY plans them into one arena."""

    NONE = "none"
    MEMORY = "memory"


def _shape_only_stub(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """A zero-byte array with the given shape, for ops that read only the shape."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape), writeable=False)


class Net:
    """A Program bound to its own activation blobs.

    Args:
        program: the compiled Program (weights shared with every other Net of it).
        input_shapes: optional shapes to reshape to at once (name -> tuple).
    Attributes:
        input_names / output_names: the graph's, in order.
    """

    def __init__(self, program: Program, input_shapes: Mapping[str, Sequence[int]] | None = None):
        self.program = program
        self.device = program.device
        self._declared = {v.name: v for v in program.inputs}
        self._input_shapes: dict[str, tuple] | None = None
        self._blobs: dict[str, np.ndarray] = {}
        self._run: list = []
        self._run_nodes: list = []
        self._dynamic: list[Step] = []
        self.workspace_bytes = 0
        self.activation_bytes = 0
        if input_shapes is not None:
            self.reshape(input_shapes)

    # ---- description ---------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return self.program.input_names

    @property
    def output_names(self) -> list[str]:
        return self.program.output_names

    @property
    def input_shapes(self) -> dict[str, tuple] | None:
        """The shapes the Net is currently laid out for (None before reshape)."""
        return None if self._input_shapes is None else dict(self._input_shapes)

    @property
    def output_shapes(self) -> dict[str, tuple | None]:
        """Output shapes at the current input shapes (None: known only after forward)."""
        return {n: (self._blobs[n].shape if n in self._blobs else None) for n in self.output_names}

    @property
    def blob_names(self) -> list[str]:
        return list(self._blobs)

    @property
    def has_dynamic_shapes(self) -> bool:
        """True when some nodes' shapes depend on data and are inferred per forward."""
        return bool(self._dynamic)

    def blob_by_name(self, name: str) -> np.ndarray:
        """The Net's own array for a blob (valid until the next forward or reshape).

        Raises:
            UnknownBlobError: no blob has this name (or it has not been computed).
        """
        try:
            return self._blobs[name]
        except KeyError:
            raise UnknownBlobError(
                f"no blob named {name!r}; outputs are {self.output_names}") from None

    # ---- input checks --------------------------------------------------------
    def default_input_shapes(self) -> dict[str, tuple]:
        """Declared input shapes, symbolic or unknown dimensions taken as 1."""
        return {v.name: tuple(d if isinstance(d, int) else 1 for d in (v.shape or ()))
                for v in self.program.inputs}

    def check_shapes(self, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple]:
        """Validate input shapes against the model's declared ranks and fixed dims.

        Raises:
            InputError: missing or unknown input names, wrong rank, a fixed
                dimension that differs, or a negative dimension.
        """
        names = self.input_names
        unknown = [n for n in input_shapes if n not in self._declared]
        missing = [n for n in names if n not in input_shapes]
        if unknown or missing:
            raise InputError(f"inputs {sorted(input_shapes)} do not match the model's inputs {names}"
                             + (f"; unknown: {unknown}" if unknown else "")
                             + (f"; missing: {missing}" if missing else ""))
        shapes = {}
        for n in names:
            shape = tuple(int(d) for d in input_shapes[n])
            decl = self._declared[n].shape
            if any(d < 0 for d in shape):
                raise InputError(f"input {n!r}: negative dimension in {shape}")
            if decl is not None:
                if len(shape) != len(decl):
                    raise InputError(f"input {n!r}: expected rank {len(decl)} (shape {_fmt(decl)}), "
                                     f"got rank {len(shape)} (shape {shape})")
                bad = [i for i, (d, e) in enumerate(zip(shape, decl)) if isinstance(e, int) and d != e]
                if bad:
                    raise InputError(f"input {n!r}: expected shape {_fmt(decl)}, got {shape} "
                                     f"(dimension {bad[0]} must be {decl[bad[0]]})")
            shapes[n] = shape
        return shapes

    def check_inputs(self, inputs) -> dict[str, np.ndarray]:
        """Normalize inputs (list in input order, dict by name, or one array) and check them.

        Returns:
            name -> ndarray.
        Raises:
            InputError: wrong count, names, rank, fixed dims or dtype.
        """
        return check_inputs(self.program, inputs, self.check_shapes)

    # ---- reshape -------------------------------------------------------------
    def reshape(self, input_shapes: Mapping[str, Sequence[int]] | None = None) -> None:
        """Infer every blob's shape for these input shapes and allocate them once.

        Args:
            input_shapes: name -> shape; None: the declared shapes with symbolic dims as 1.
        Raises:
            InputError: shapes that do not fit the declared inputs.
            ShapeInferenceError: shapes the model's operators reject.
        """
        shapes = self.check_shapes(input_shapes if input_shapes is not None else self.default_input_shapes())
        if shapes == self._input_shapes:
            return
        self._bind(shapes)
        self._input_shapes = shapes

    def release(self) -> None:
        """Drop the activation blobs (the next forward lays them out again)."""
        self._blobs, self._run, self._run_nodes, self._dynamic = {}, [], [], []
        self._input_shapes = None
        self.activation_bytes = self.workspace_bytes = 0

    def _bind(self, shapes: dict[str, tuple]) -> None:
        program, device = self.program, self.device
        shape: dict[str, tuple] = {}
        dtype: dict[str, np.dtype] = {}
        static: dict[str, np.ndarray] = dict(program.weights)
        for name, arr in static.items():
            shape[name], dtype[name] = arr.shape, arr.dtype
        for v in program.inputs:
            shape[v.name] = shapes[v.name]
            dtype[v.name] = v.dtype if v.dtype is not None else np.dtype(np.float32)
        planned: list[tuple[Step, OpContext]] = []
        dynamic: list[Step] = []
        dynamic_values: set[str] = set()
        scratch_refs: list[list[ScratchRef]] = []

        for step in program.steps:
            node = step.node
            ins = node.inputs
            if any(i in dynamic_values for i in ins if i):
                dynamic.append(step)
                dynamic_values.update(o for o in node.outputs if o)
                continue
            in_shapes = [shape[i] if i else None for i in ins]
            in_dtypes = [dtype[i] if i else None for i in ins]
            values = [static.get(i) if i else None for i in ins]
            present = [v for i, v in zip(ins, values) if i]
            if node.op_type in SHAPE_ONLY_OPS or (present and all(v is not None for v in present)):
                arrays = [v if v is not None or not i else _shape_only_stub(shape[i], dtype[i])
                          for i, v in zip(ins, values)]
                outs = step.evaluate(arrays, "cpu")
                for o, arr in zip(node.outputs, outs):
                    if o:
                        arr.flags.writeable = False
                        static[o], shape[o], dtype[o] = arr, arr.shape, arr.dtype
                continue
            refs: list[ScratchRef] = []
            ctx = step.context(in_shapes, in_dtypes, values, device, refs.append)
            try:
                specs = step.infer(ctx)
            except NotStatic:
                dynamic.append(step)
                dynamic_values.update(o for o in node.outputs if o)
                continue
            for o, (s, t) in zip(node.outputs, specs):
                if o:
                    shape[o], dtype[o] = s, t
            planned.append((step, ctx))
            scratch_refs.append(refs)

        # Memory: inputs and the outputs of planned nodes each get their own array.
        blobs: dict[str, np.ndarray] = dict(static)
        activation_bytes = 0
        for v in program.inputs:
            blobs[v.name] = np.empty(shape[v.name], dtype[v.name])
            activation_bytes += blobs[v.name].nbytes
        for step, _ in planned:
            for o in step.node.outputs:
                if o:
                    blobs[o] = np.empty(shape[o], dtype[o])
                    activation_bytes += blobs[o].nbytes

        # Bind kernels (class kernels ask for scratch here), then lay out scratch:
        # it lives only while its node runs, so all nodes share one workspace.
        run, run_nodes = [], []
        for step, ctx in planned:
            runner = step.bind(ctx)
            args = [blobs[i] if i else None for i in step.node.inputs]
            outs = [blobs[o] if o else None for o in step.node.outputs]
            run.append(partial(runner, *args, out=step.out_arg(outs)))
            run_nodes.append(step.node)
        workspace = max((sum(_aligned(r.nbytes) for r in refs) for refs in scratch_refs), default=0)
        buffer = np.empty(workspace, np.uint8)
        for refs in scratch_refs:
            offset = 0
            for r in refs:
                r.array = buffer[offset:offset + r.nbytes].view(r.dtype).reshape(r.shape)
                offset += _aligned(r.nbytes)

        for step in dynamic:
            run.append(partial(self._run_dynamic, step))
            run_nodes.append(step.node)
        self._blobs, self._run, self._run_nodes, self._dynamic = blobs, run, run_nodes, dynamic
        self.activation_bytes, self.workspace_bytes = activation_bytes, workspace

    def _run_dynamic(self, step: Step) -> None:
        arrays = [self._blobs[i] if i else None for i in step.node.inputs]
        outs = step.evaluate(arrays, self.device)
        for o, arr in zip(step.node.outputs, outs):
            if o:
                self._blobs[o] = arr

    # ---- forward -------------------------------------------------------------
    def set_inputs(self, inputs) -> None:
        """Check the inputs, reshape if their shapes changed, and copy them into the input blobs."""
        arrays = self.check_inputs(inputs)
        self.reshape({n: a.shape for n, a in arrays.items()})
        for n, a in arrays.items():
            np.copyto(self._blobs[n], a, casting="no")

    def forward(self, inputs=None) -> None:
        """Run the net (Caffe's ForwardPrefilled when `inputs` is None).

        Args:
            inputs: list (input order), dict name -> array, or a single array;
                None runs on the input blobs as they are.
        Raises:
            InputError: inputs that do not fit (count, names, rank, dims, dtype).
            ShapeInferenceError: shapes the operators reject.
            KernelError: a kernel failed; the message names the node.
        """
        if inputs is not None:
            self.set_inputs(inputs)
        elif self._input_shapes is None:
            raise InputError("forward() with no inputs before any reshape: feed inputs first")
        i = 0
        run = self._run
        try:
            for f in run:
                f()
                i += 1
        except PooledPredictorError:
            raise
        except Exception as exc:
            node = self._run_nodes[i]
            raise KernelError(f"node {node.name!r} ({node.op_type}) failed: {type(exc).__name__}: {exc}") from exc


def check_inputs(program: Program, inputs, check_shapes=None) -> dict[str, np.ndarray]:
    """Normalize inputs to name -> ndarray and check count, names, dtype (and shapes).

    Args:
        program: the compiled Program (its declared inputs).
        inputs: a list/tuple in input order, a dict name -> array, or one array
            when the model has one input.
        check_shapes: optional callable(name -> shape) that checks ranks and dims.
    Raises:
        InputError: the message names the input and what was expected.
    """
    declared = program.inputs
    names = [v.name for v in declared]
    if isinstance(inputs, Mapping):
        unknown = [n for n in inputs if n not in names]
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            raise InputError(f"got inputs {sorted(map(str, inputs))}, the model takes {names}"
                             + (f"; unknown: {unknown}" if unknown else "")
                             + (f"; missing: {missing}" if missing else ""))
        items = [(n, inputs[n]) for n in names]
    else:
        if _is_array(inputs):
            inputs = [inputs]
        if not isinstance(inputs, (list, tuple)):
            raise InputError(f"inputs must be a list, a dict or an array, not {type(inputs).__name__}")
        if len(inputs) != len(names):
            raise InputError(f"the model takes {len(names)} input(s) {names}, got {len(inputs)}")
        items = list(zip(names, inputs))
    arrays = {}
    for (n, a), v in zip(items, declared):
        if not _is_array(a):
            raise InputError(f"input {n!r} must be an array, not {type(a).__name__}")
        a = np.asarray(a)
        if v.dtype is not None and a.dtype != v.dtype:
            raise InputError(f"input {n!r}: expected dtype {v.dtype}, got {a.dtype}")
        arrays[n] = a
    if check_shapes is not None:
        check_shapes({n: a.shape for n, a in arrays.items()})
    return arrays


def _is_array(x) -> bool:
    return isinstance(x, np.ndarray) or (hasattr(x, "__array__") and hasattr(x, "shape")
                                         and hasattr(x, "dtype"))


def _aligned(n: int, alignment: int = 64) -> int:
    return (n + alignment - 1) // alignment * alignment


def _fmt(shape) -> str:
    return "(" + ", ".join(str(d) if d is not None else "?" for d in shape) + ")"
