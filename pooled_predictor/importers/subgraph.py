"""Subgraphs of control-flow nodes (If, Loop, Scan): their nodes and the outer-scope names they capture.

ONNX lets a body read any value of an enclosing scope by name ("outer-scope
values", IR spec section "Graphs" / "Names Within a Graph"). Our IR makes those
reads explicit: every name a body reads without defining it (its inputs,
initializers, Constant nodes and node outputs define names) is a capture.
The body's Subgraph lists its captures after its formal inputs, and the node
gets the same outer names appended to its inputs, in the same order; If's two
branches share one capture list (the union of both). Bodies are converted
bottom-up, so a body nested in a body first turns its own captures into
inputs of its node, which the enclosing body then captures in turn (nesting
to any depth). The conversion itself is onnx.py's import_subgraphs (it and
import_nodes call each other); this module holds what it reads.
"""

from __future__ import annotations

from typing import Iterator

import onnx

from ..ir import Subgraph


def all_nodes(g: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of a graph and of its subgraphs, depth first."""
    for n in g.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from all_nodes(sub)


def free_names(sub: Subgraph) -> list[str]:
    """Names the subgraph reads (node inputs, graph outputs) but does not define, in first-read order."""
    defined = {v.name for v in sub.inputs} | set(sub.weights)
    free: dict[str, None] = {}
    for node in sub.nodes:
        for i in node.inputs:
            if i and i not in defined:
                free[i] = None
        defined.update(o for o in node.outputs if o)
    for v in sub.outputs:
        if v.name not in defined:
            free[v.name] = None
    return list(free)
