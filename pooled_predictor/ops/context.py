"""OpContext: what a shape rule or a class kernel may know about its node.

At reshape time the Net builds one OpContext per node with the input shapes
and dtypes, the values of inputs known before forward (weights, folded
constants, Shape results) and a scratch allocator for per-Net workspace.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import ShapeInferenceError
from ..ir import Node


_default_bodies: Callable | None = None

UNTRACKED = object()
"""OpContext.reads after the context handed its values on to another (retyped, derive, inner)."""


def set_default_body_runner(bodies: Callable | None) -> None:
    """The body runner an OpContext built without one falls back to (folding at compile and the
    passes' static evaluation of If/Loop/Scan). The engine registers its own when it is imported
    (engine/net.py), as kernels register into the registry: ops never import the engine."""
    global _default_bodies
    _default_bodies = bodies


class NotStatic(Exception):
    """An input's value is only known at forward time (data-dependent shape)."""


class ScratchRef:
    """A workspace array a class kernel asked for at reshape.

    `array` is set once the Net has laid out its memory (after every kernel of
    the net is built), so read it when called, never in __init__. Its content is
    undefined at the start of each call: a kernel initializes what it reads.
    """

    __slots__ = ("shape", "dtype", "array")

    def __init__(self, shape: tuple, dtype: np.dtype, array: np.ndarray | None = None):
        self.shape = shape
        self.dtype = dtype
        self.array = array

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class OpContext:
    """Per-node facts for shape rules and class kernels.

    Attributes:
        node: the Node.
        version: the ONNX schema since_version resolved for the model's opset.
        shapes: input shapes (tuples of ints; None for an absent optional input).
        dtypes: input numpy dtypes (None for an absent optional input).
        out_shapes / out_dtypes: output shapes, once inferred (class kernels).
        device: "cpu" or "cuda".
        bodies: the body runner of If/Loop/Scan bodies, handed down by the Net that
            builds this context (engine/control_flow.BodyRuns): bodies(sub, device,
            dtypes, values, constants) -> a BodyRun. None: the default one registered
            by the engine (set_default_body_runner), for folding at compile and the
            passes' static evaluation; with none at all, body_run() raises NotStatic.
    """

    __slots__ = ("node", "version", "shapes", "dtypes", "_values", "out_shapes", "out_dtypes",
                 "device", "_scratch", "bodies", "reads")

    def __init__(self, node: Node, version: int, shapes, dtypes, values=None, device="cpu",
                 scratch: Callable | None = None, bodies: Callable | None = None):
        self.node = node
        self.version = version
        self.shapes = list(shapes)
        self.dtypes = list(dtypes)
        self._values = list(values) if values is not None else [None] * len(self.shapes)
        self.out_shapes: list[tuple] | None = None
        self.out_dtypes: list[np.dtype] | None = None
        self.device = device
        self._scratch = scratch
        self.bodies = bodies
        self.reads = None  # track_reads(): the indices whose value() was asked for

    def track_reads(self) -> None:
        """Record from now on which inputs' values the rule and the kernel's setup read (value(),
        value_or_none()), so that a caller may reuse what they built while those values stay the
        same (Step.evaluate's memo). A context handed on (retyped, derive, inner) reads values
        out of sight: the record then says UNTRACKED."""
        self.reads = set()

    def _read(self, i: int) -> None:
        if self.reads is not None and self.reads is not UNTRACKED:
            self.reads.add(i)

    def _handed_on(self) -> None:
        if self.reads is not None:
            self.reads = UNTRACKED

    def body_run(self, sub, dtypes, values=None, constants=None):
        """The BodyRun of a control-flow body (a Subgraph attribute of this node) for these
        input dtypes, known input values and constants (see engine/control_flow.BodyRuns).

        Raises:
            NotStatic: no body runner was handed down and none is registered.
        """
        bodies = self.bodies if self.bodies is not None else _default_bodies
        if bodies is None:
            raise NotStatic(f"node {self.node.name!r} ({self.node.op_type}): no body runner (the engine is not loaded)")
        return bodies(sub, self.device, dtypes, values, constants)

    # ---- node facts --------------------------------------------------------
    @property
    def attrs(self) -> dict[str, Any]:
        return self.node.attrs

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attrs.get(name, default)

    @property
    def num_inputs(self) -> int:
        return len(self.node.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self.node.outputs)

    def has_input(self, i: int) -> bool:
        return i < len(self.node.inputs) and self.node.inputs[i] != ""

    def has_output(self, i: int) -> bool:
        return i < len(self.node.outputs) and self.node.outputs[i] != ""

    def shape(self, i: int) -> tuple:
        return self.shapes[i]

    def dtype(self, i: int) -> np.dtype:
        return self.dtypes[i]

    def is_static(self, i: int) -> bool:
        return self.has_input(i) and self._values[i] is not None

    def value(self, i: int) -> np.ndarray:
        """The input's value when known before forward.

        Raises:
            NotStatic: the value depends on data fed at forward time.
        """
        v = self._values[i] if i < len(self._values) else None
        self._read(i)
        if v is None:
            raise NotStatic(f"node {self.node.name!r}: input {i} ({self.node.inputs[i]!r}) is not static")
        return v

    def value_or_none(self, i: int):
        """The static value of an optional input, None if absent, NotStatic if dynamic."""
        if not self.has_input(i):
            return None
        return self.value(i)

    def retyped(self, dtypes, values) -> "OpContext":
        """The same node and shapes with other input dtypes and static values
        (same device and scratch allocator; outputs to be set by the caller)."""
        self._handed_on()
        return OpContext(self.node, self.version, self.shapes, dtypes, values, self.device, self._scratch)

    def derive(self, op_type: str, inputs, version: int, dtypes=None, values=None) -> "OpContext":
        """A context for an inner op built over some of this node's inputs (the Conv of QLinearConv).

        Args:
            op_type: the inner op.
            inputs: per inner input, this node's input index, an ndarray (a constant
                input, e.g. Upsample-7's scales attribute), or None (absent).
            version: the inner op's schema version.
            dtypes: per inner input, replacing this node's (None entries: keep).
            values: the inner inputs' static values (None: not static); default this node's.
        Returns:
            OpContext with this node's attributes, name and scratch allocator.
        """
        self._handed_on()
        def pick(seq, i, const):
            if isinstance(i, np.ndarray):
                return const(i)
            return None if i is None else seq[i]

        names = [pick(self.node.inputs, i, lambda a: f"{self.node.name}/const") or "" for i in inputs]
        node = Node(op_type, names, list(self.node.outputs[:1]), dict(self.node.attrs), "", self.node.name)
        shapes = [pick(self.shapes, i, lambda a: a.shape) for i in inputs]
        dts = [pick(self.dtypes, i, lambda a: a.dtype) for i in inputs]
        vals = [pick(self._values, i, lambda a: a) for i in inputs] if values is None else list(values)
        for j in range(len(inputs)):
            if dtypes is not None and dtypes[j] is not None:
                dts[j] = dtypes[j]
        return OpContext(node, version, shapes, dts, vals, self.device, self._scratch)

    def inner(self, node: Node, shapes, dtypes, values) -> "OpContext":
        """A context for an inner node of a composite one (FusedConvDepthwise's two convolutions): its
        own node, attributes, input shapes, dtypes and static values; this one's version, device and
        scratch allocator."""
        self._handed_on()
        return OpContext(node, self.version, shapes, dtypes, values, self.device, self._scratch)

    # ---- helpers -----------------------------------------------------------
    def error(self, message: str) -> ShapeInferenceError:
        return ShapeInferenceError(f"node {self.node.name!r} ({self.node.op_type}): {message}")

    def scratch(self, shape, dtype) -> ScratchRef:
        """Ask for workspace owned by the Net (per thread), live only while this node runs.

        Returns:
            ScratchRef; its `.array` (shape, dtype as asked) is valid when the
            kernel is called. Outside a Net (folding, dynamic shapes) the array
            is allocated at once.
        """
        ref = ScratchRef(tuple(int(d) for d in shape), np.dtype(dtype))
        if self._scratch is None:
            ref.array = np.empty(ref.shape, ref.dtype)
        else:
            self._scratch(ref)
        return ref
