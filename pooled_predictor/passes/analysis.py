"""What the passes may know about values before compiling: shapes, ranks, static values.

Nodes are evaluated and their shapes inferred with our own CPU kernels and
shape rules (program.Step), the same ones a Net uses at reshape. The passes
reach into program/ops here and only here: folding must compute exactly what
the compiled graph would have computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..ir import Graph, Node
from ..ops.context import NotStatic
from ..ops.cpu.compiled import reference_kernels
from ..ops.registry import find, schema_version
from ..ops.shapes import get_rule
from ..ops.step import NONDETERMINISTIC_OPS, SHAPE_ONLY_OPS, Step

# A symbolic or unknown dimension stands for this size when only ranks are wanted.
PROBE_DIM = 64


def make_step(graph: Graph, node: Node) -> Step | None:
    """node bound to its CPU kernel and shape rule at the graph's opset (None if either is missing)."""
    opset = graph.opset_of(node)
    k = find(node.op_type, node.domain, opset, "cpu")
    rule = get_rule(node.op_type, node.domain)
    if k is None or rule is None or k.unknown_attrs(node.attrs):
        return None
    version = schema_version(node.op_type, node.domain, opset) or opset
    if k.check is not None and k.check(node.attrs, version):
        return None
    return Step(node, k, version, rule)


def evaluate(graph: Graph, node: Node, arrays: list, memory_limit: int | None = None) -> list | None:
    """Run `node` once on concrete arrays with our CPU kernel (None if it has none, fails, or its
    outputs pass `memory_limit` bytes: None is budget.default_memory_limit())."""
    if node.op_type in NONDETERMINISTIC_OPS:
        return None
    step = make_step(graph, node)
    if step is None:
        return None
    try:
        with reference_kernels():  # values fixed before any layout: the reference kernels, compiling nothing
            return step.evaluate(arrays, "cpu", memory_limit)
    except Exception:  # the compiled graph would raise the same error at run time: leave it there
        return None


@dataclass
class ShapeInfo:
    """Shapes, dtypes and static values found by `infer_shapes`.

    Attributes:
        shapes: value -> shape (ints); values absent here are unknown.
        dtypes: value -> numpy dtype.
        static: value -> array, for values known before forward (weights and
            everything computable from them and, when `exact`, from shapes).
        exact: shapes are the real input shapes (else symbolic dims were
            probed with PROBE_DIM, and only ranks are to be trusted).
    """

    shapes: dict[str, tuple] = field(default_factory=dict)
    dtypes: dict[str, np.dtype] = field(default_factory=dict)
    static: dict[str, np.ndarray] = field(default_factory=dict)
    exact: bool = False

    def rank(self, value: str) -> int | None:
        s = self.shapes.get(value)
        return None if s is None else len(s)


def static_input_shapes(graph: Graph, input_shapes: Mapping | None) -> dict[str, tuple] | None:
    """The input shapes as ints: the given ones, else the declared ones when all are fully static."""
    if input_shapes is not None:
        missing = [n for n in graph.input_names if n not in input_shapes]
        unknown = [n for n in input_shapes if n not in graph.input_names]
        if missing or unknown:
            raise ValueError(f"input_shapes {sorted(input_shapes)} do not match the graph's inputs "
                             f"{graph.input_names}" + (f"; missing {missing}" if missing else "")
                             + (f"; unknown {unknown}" if unknown else ""))
        return {n: tuple(int(d) for d in input_shapes[n]) for n in graph.input_names}
    if all(v.is_static() for v in graph.inputs):
        return {v.name: tuple(v.shape) for v in graph.inputs}
    return None


def infer_shapes(graph: Graph, input_shapes: Mapping | None = None, memory_limit: int | None = None) -> ShapeInfo:
    """Propagate shapes (and static values) through the graph in node order.

    With exact input shapes (given, or all declared static), Shape and Size of
    a known shape are static, and so is everything computed from static
    values only. Otherwise symbolic dims are probed with PROBE_DIM: shapes
    then give ranks only, and no shape-derived value is treated as static.
    A node whose shape cannot be inferred (no rule, data-dependent, a rule
    error, static values over `memory_limit` bytes) leaves its outputs unknown;
    nothing here raises.
    """
    exact_shapes = static_input_shapes(graph, input_shapes)
    info = ShapeInfo(exact=exact_shapes is not None)
    for name, arr in graph.weights.items():
        info.shapes[name], info.dtypes[name], info.static[name] = arr.shape, arr.dtype, arr
    for v in graph.inputs:
        if exact_shapes is not None:
            info.shapes[v.name] = exact_shapes[v.name]
        elif v.shape is not None:
            info.shapes[v.name] = tuple(d if isinstance(d, int) else PROBE_DIM for d in v.shape)
        info.dtypes[v.name] = v.dtype if v.dtype is not None else np.dtype(np.float32)
    for node in graph.nodes:
        ins = node.inputs
        if any(i and i not in info.shapes for i in ins):
            continue
        step = make_step(graph, node)
        if step is None or (not info.exact and _rank_needs_sizes(node)):
            continue
        shapes = [info.shapes[i] if i else None for i in ins]
        dtypes = [info.dtypes.get(i) if i else None for i in ins]
        values = [info.static.get(i) if i else None for i in ins]
        present = [v for i, v in zip(ins, values) if i]
        foldable = node.op_type not in NONDETERMINISTIC_OPS and (
            all(v is not None for v in present) or (info.exact and node.op_type in SHAPE_ONLY_OPS))
        try:
            if foldable:
                arrays = [v if v is not None or not i else _stub(info.shapes[i], info.dtypes[i])
                          for i, v in zip(ins, values)]
                with reference_kernels():
                    outs = step.evaluate(arrays, "cpu", memory_limit)
                for o, arr in zip(node.outputs, outs):
                    if o:
                        info.shapes[o], info.dtypes[o], info.static[o] = arr.shape, arr.dtype, arr
                continue
            ctx = step.context(shapes, dtypes, values, "cpu")
            specs = step.infer(ctx)
        except (NotStatic, Exception):
            continue
        for o, (s, t) in zip(node.outputs, specs):
            if o:
                info.shapes[o], info.dtypes[o] = s, t
    return info


def _rank_needs_sizes(node: Node) -> bool:
    """Whether the output rank depends on dim sizes a probe would invent (Squeeze without axes)."""
    return node.op_type == "Squeeze" and node.attrs.get("axes") is None and not (
        len(node.inputs) > 1 and node.inputs[1])


def _stub(shape, dtype) -> np.ndarray:
    """A zero-byte array of a given shape, for ops that read only the shape."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape), writeable=False)
