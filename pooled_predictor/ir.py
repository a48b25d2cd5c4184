"""The graph IR: Graph, Node, Value, with ONNX semantics.

A Graph is what an importer produces and what passes rewrite: nodes in
topological order, named values between them, weights as read-only numpy
arrays, and the opset per domain. Names are ONNX's (op_type, attribute names,
'' for an absent optional input or output).
"""

from __future__ import annotations

import copy as _copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

def elem_dtype(elem_type: int) -> np.dtype | None:
    """numpy dtype of an ONNX TensorProto elem_type (None if numpy has none; onnx.helper's table)."""
    if elem_type == onnx.TensorProto.UNDEFINED:
        return None
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        return None


Dim = "int | str | None"  # a concrete size, a symbolic dim_param, or unknown


@dataclass
class Value:
    """A named tensor type: dtype (numpy) and shape (ints, symbolic names or None)."""

    name: str
    dtype: np.dtype | None = None
    shape: tuple | None = None  # None: rank unknown

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)


@dataclass
class Node:
    """One operator application.

    Attributes:
        op_type: ONNX operator name (e.g. "Conv").
        inputs / outputs: value names; '' marks an absent optional one.
        attrs: attribute name -> Python value (int, float, str, list, ndarray).
        domain: operator set domain, '' for the default ONNX domain.
        name: node name (unique within a graph after import).
    """

    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    name: str = ""

    def present_inputs(self) -> list[str]:
        return [i for i in self.inputs if i]

    def present_outputs(self) -> list[str]:
        return [o for o in self.outputs if o]


@dataclass
class Graph:
    """A computation graph with ONNX semantics.

    Attributes:
        nodes: in topological order.
        inputs: graph inputs the caller feeds (initializers excluded).
        outputs: graph outputs.
        weights: name -> read-only ndarray (initializers and Constant nodes).
        value_info: name -> Value for intermediates whose type the file declares.
        opset: domain -> opset version ('' is the default ONNX domain).
        metadata: the model's metadata_props.
    """

    nodes: list[Node]
    inputs: list[Value]
    outputs: list[Value]
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    value_info: dict[str, Value] = field(default_factory=dict)
    opset: dict[str, int] = field(default_factory=lambda: {"": 13})
    metadata: dict[str, str] = field(default_factory=dict)
    name: str = "graph"
    source: str = "<memory>"  # file name or '<bytes>', for error messages

    # ---- queries -----------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [v.name for v in self.outputs]

    def producers(self) -> dict[str, Node]:
        """value name -> the node that writes it."""
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        """value name -> nodes that read it (a node appears once per value)."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in dict.fromkeys(n.present_inputs()):
                out.setdefault(i, []).append(n)
        return out

    def op_counts(self) -> Counter:
        return Counter(n.op_type for n in self.nodes)

    def copy(self) -> "Graph":
        """A copy whose node list and dicts can be rewritten; weight arrays are shared."""
        g = _copy.copy(self)
        g.nodes = [_copy.copy(n) for n in self.nodes]
        for n in g.nodes:
            n.inputs, n.outputs, n.attrs = list(n.inputs), list(n.outputs), dict(n.attrs)
        g.inputs = list(self.inputs)
        g.outputs = list(self.outputs)
        g.weights = dict(self.weights)
        g.value_info = dict(self.value_info)
        g.opset = dict(self.opset)
        g.metadata = dict(self.metadata)
        return g

    def opset_of(self, node: Node) -> int:
        """The opset version the graph imports for the node's domain."""
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        return self.opset.get(domain, 0)

    def toposort(self) -> None:
        """Reorder nodes topologically (stable: keeps the given order where legal).

        Raises:
            ValueError: the graph has a cycle or reads a value nobody defines.
        """
        defined = set(self.input_names) | set(self.weights)
        remaining = list(self.nodes)
        ordered: list[Node] = []
        while remaining:
            progress = []
            for n in remaining:
                if all(i in defined for i in n.present_inputs()):
                    ordered.append(n)
                    defined.update(n.present_outputs())
                else:
                    progress.append(n)
            if len(progress) == len(remaining):
                missing = sorted({i for n in progress for i in n.present_inputs() if i not in defined})
                raise ValueError(f"graph {self.name!r}: cycle or undefined values {missing[:10]}")
            remaining = progress
        self.nodes = ordered


def readonly(array: np.ndarray) -> np.ndarray:
    """Return `array` marked read-only (weights are shared and must never be written)."""
    array = np.asarray(array)
    array.flags.writeable = False
    return array


@dataclass(eq=False)
class Subgraph(Graph):
    """The body of a control-flow node (If's branches, Loop's and Scan's body).

    `inputs` are the body's formal inputs (ONNX's) followed by one Value per
    name in `captures`: the outer-scope values the body (or a body nested in
    it) reads. The importer appends the same outer names to the node's
    inputs, after its formal inputs, so passes see the reads (liveness, dead
    nodes, renames) and the kernel feeds them positionally: renaming an outer
    value renames the node input, never the body's name for it.
    """

    captures: tuple = ()

    __hash__ = object.__hash__  # a body is one object (its compiled Programs are cached on it)
    __eq__ = object.__eq__

    def __getstate__(self) -> dict:
        """Pickled without its compiled Programs (engine/tiering.py sends a Graph to a compile process)."""
        state = dict(self.__dict__)
        state.pop("_programs", None)
        return state

    @property
    def num_formal_inputs(self) -> int:
        return len(self.inputs) - len(self.captures)
