"""The passes run inside control-flow bodies: Loop and Scan bodies (ITERATED; If branches are left as
imported, see ITERATED).

A body (ir.Subgraph) reads outer-scope values through explicit captures: its
inputs after the formal ones, fed from the node's inputs after its formal ones
(importers/subgraph.py). Two steps, for every Loop and Scan node, bodies
nested in bodies included (depth first: a body is optimized before the bodies
nested in it, so a weight baked into it can be baked further down):

1. Captured weights become body weights. A capture whose outer value is a
   weight of the enclosing graph (an initializer, a Constant node or a folded
   value) has that value on every run, so it is removed from the capture list
   of every body of the node and from the node's inputs, and each body holds the array (shared, read-only, not copied)
   under its own name for it (a node with several bodies, as an If's two
   branches, shares one capture list: a capture is baked into all of them):

       Loop(M, c, v, W)  with body(i, c, v, W_body)   where W is a weight
     = Loop(M, c, v)     with body(i, c, v) and W_body = W a body weight

   The body's passes then see W as a constant: MatMul(h, W) + B fuses into
   Gemm, constant subexpressions fold once at load instead of once per run.
2. The selected passes of the pipeline run on each body (a copy: the caller's
   graph is never modified), with the shapes the body declares (no input_shapes:
   those name the outer graph's inputs). A body's outputs are its graph outputs,
   so no pass removes or fuses away a value the node reads; a value read outside
   a fused pattern (by another node or as an output) keeps the pattern unfused,
   as in any graph (passes/pattern.py).

A body whose passes fail (a model no pass foresaw) is kept as imported: the
body's own Program still runs it, and the failure is logged and noted in the
report (never an error at load: the outer graph optimized fine).
"""

from __future__ import annotations

import logging
from collections import Counter

from ..ir import Graph, Subgraph, Value
from .base import PassContext

log = logging.getLogger("pooled_predictor.passes")


ITERATED = ("Loop", "Scan")
"""The ops whose bodies are optimized: those a forward runs many times. If branches are left as imported:
measured on silero-vad (its whole network in the branches of an If), baking the captures into the branches
made the forward 10% slower (0.153 against 0.137 ms, onnxruntime 0.132) for a reason not found yet (the
branches' kernels timed alone were as fast), and a branch runs once a forward, so fusion gains little there."""


def _bodies(node) -> list[tuple[str, Subgraph]]:
    if node.op_type not in ITERATED or node.domain not in ("", "ai.onnx"):
        return []
    return [(k, v) for k, v in node.attrs.items() if isinstance(v, Subgraph)]


def _copy_body(sub: Subgraph) -> Subgraph:
    """A copy of a body that passes may rewrite, without its compiled Programs (program_of caches them on
    the Subgraph: the copy compiles its own)."""
    b = sub.copy()
    b.__dict__.pop("_programs", None)
    return b


def bake_captured_weights(graph: Graph, node, bodies: list[tuple[str, Subgraph]]) -> int:
    """Step 1 for one node whose bodies are copies it owns: returns how many captures became weights."""
    captures = bodies[0][1].captures
    if any(b.captures != captures for _, b in bodies):
        return 0  # not the importer's shared list: leave the node alone
    first = len(node.inputs) - len(captures)
    if first < 0:
        return 0
    outer = node.inputs[first:]
    baked = [k for k, name in enumerate(outer) if name and name in graph.weights]
    if not baked:
        return 0
    drop = set(baked)
    for _, b in bodies:
        n_formal = b.num_formal_inputs
        for k in baked:
            b.weights[b.inputs[n_formal + k].name] = graph.weights[outer[k]]
        b.inputs = b.inputs[:n_formal] + [v for k, v in enumerate(b.inputs[n_formal:]) if k not in drop]
        b.captures = tuple(c for k, c in enumerate(captures) if k not in drop)
    node.inputs = node.inputs[:first] + [name for k, name in enumerate(outer) if k not in drop]
    return len(baked)


def declare_captures(graph: Graph, node, bodies: list[tuple[str, Subgraph]]) -> None:
    """Give each capture of the bodies without a declared type the type the enclosing graph declares for its
    outer value (a graph input or value_info), so that the passes' shape analysis inside knows its rank
    (MatMul + Add fuses into Gemm only for a known 2-D product). At run time a body is laid out for the
    values it is fed (engine/control_flow.py): this only informs the passes."""
    declared = {v.name: v for v in graph.inputs}
    declared.update(graph.value_info)
    for _, b in bodies:
        n_formal = b.num_formal_inputs
        outer_names = node.inputs[len(node.inputs) - len(b.captures):] if b.captures else []
        typed = []
        for name, v in zip(outer_names, b.inputs[n_formal:]):  # the node's input names: renames reach them
            d = declared.get(name)
            if v.dtype is None and v.shape is None and d is not None:
                v = Value(v.name, d.dtype, d.shape)
            typed.append(v)
        b.inputs = b.inputs[:n_formal] + typed


def optimize_bodies(graph: Graph, ctx: PassContext, passes) -> dict:
    """Steps 1 and 2 for every node of `graph` that holds bodies (recursively); `passes` are the selected
    Pass objects, run in order on each body (this pass itself among them: it recurses).

    Returns:
        {description: count}: "captured weights baked into bodies" and each inner pass's changes
        prefixed with "in bodies: ".
    """
    changes: Counter = Counter()
    for node in graph.nodes:
        bodies = _bodies(node)
        if not bodies:
            continue
        originals = {k: b for k, b in bodies}
        copies = [(k, _copy_body(b)) for k, b in bodies]
        saved_inputs = list(node.inputs)
        baked = bake_captured_weights(graph, node, copies)
        declare_captures(graph, node, copies)
        optimized = []
        try:
            for key, body in copies:
                for p in passes:
                    inner = PassContext(memory_limit_bytes=ctx.memory_limit_bytes, pipeline=ctx.pipeline)
                    for what, count in (p.run(body, inner) or {}).items():
                        if count and p.name == "optimize_bodies":
                            changes[what] += count  # already prefixed, one level down
                        elif count:
                            changes[f"in bodies: {what}"] += count
                body.toposort()
                optimized.append((key, body))
        except Exception as exc:  # a body no pass foresaw: keep it (and the node) as imported
            node.inputs = saved_inputs
            for key, b in originals.items():
                node.attrs[key] = b
            why = f"node {node.name!r} ({node.op_type}): body passes failed ({type(exc).__name__}: {exc}); " \
                  f"bodies kept as imported"
            ctx.notes.append(why)
            log.debug("%s", why)
            continue
        for key, body in optimized:
            node.attrs[key] = body
        changes["captured weights baked into bodies"] += baked
    return dict(changes)
