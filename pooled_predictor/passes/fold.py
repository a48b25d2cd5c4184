"""Constant folding: values computable before any input is fed become weights.

constant_folding: a node whose inputs are all weights is evaluated once with
    our own CPU kernel (program.Step.evaluate, the kernel the compiled graph
    would run) and replaced by weights holding its outputs. Repeats down
    chains in one walk (nodes are in topological order). Nondeterministic ops
    (RandomNormal, ...) are never folded; a node whose kernel fails on its
    constant inputs is left for the compiled graph to report.
shape_folding: when the input shapes are static (given to optimize(), or
    every graph input declares a fully static shape), Shape and Size of known
    shapes are constants, and so is every Gather/Unsqueeze/Concat/Slice/Cast
    (any op) computed only from constants: all become weights. Given
    input_shapes pin the graph's inputs to those shapes (the folded values
    hold only for them), so other shapes are refused with an InputError
    instead of computing with stale values.
"""

from __future__ import annotations

from ..ir import Graph, Value, readonly
from .analysis import evaluate, infer_shapes, static_input_shapes
from .base import PassContext


def constant_folding(graph: Graph, ctx: PassContext) -> dict:
    changes: dict[str, int] = {}
    kept = []
    for node in graph.nodes:
        ins = node.present_inputs()
        outs = None
        if all(i in graph.weights for i in ins):
            outs = evaluate(graph, node, [graph.weights[i] if i else None for i in node.inputs],
                            ctx.memory_limit_bytes)
        if outs is None:
            kept.append(node)
            continue
        for name, arr in zip(node.outputs, outs):
            if name:
                graph.weights[name] = readonly(arr)
        key = f"{node.op_type} folded"
        changes[key] = changes.get(key, 0) + 1
    graph.nodes = kept
    return changes


def shape_folding(graph: Graph, ctx: PassContext) -> dict:
    shapes = static_input_shapes(graph, ctx.input_shapes)
    if shapes is None:
        ctx.notes.append("skipped: input shapes are not static (pass input_shapes to optimize())")
        return {}
    info = infer_shapes(graph, shapes, ctx.memory_limit_bytes)
    changes: dict[str, int] = {}
    kept = []
    for node in graph.nodes:
        outs = node.present_outputs()
        if outs and all(o in info.static for o in outs):
            for o in outs:
                graph.weights[o] = readonly(info.static[o])
            key = f"{node.op_type} folded"
            changes[key] = changes.get(key, 0) + 1
        else:
            kept.append(node)
    graph.nodes = kept
    pinned = {v.name: shapes[v.name] for v in graph.inputs if not v.is_static()}
    if changes and pinned:
        graph.inputs = [Value(v.name, v.dtype, shapes[v.name]) if v.name in pinned else v for v in graph.inputs]
        ctx.notes.append("inputs pinned to " + ", ".join(f"{n} {s}" for n, s in pinned.items()))
    return changes
