"""Kernel-type assignment: a kernel type per node, transforms where neighbours disagree.

Paddle-Lite's static_kernel_pick_pass + type_layout_cast_pass (and, with
device as a type, type_target_cast_pass / io_copy). Runs when shapes are known
(the Net's compile-for-shapes pipeline), over the nodes the Net will run:

* every node has its candidate kernels (ops/registry.py `candidates`) whose
  `supports(ctx)` accepts it at these shapes; the default-layout kernel is
  always one;
* nodes are visited in order; each takes the candidate of least cost, where
  cost = kernel.preference + TRANSFORM_COST x (inputs not already available in
  the layout the candidate reads them in + outputs it would write in a layout
  that some consumer, or the graph's output, cannot read: the transform back,
  seen one step ahead) -- a greedy walk that keeps a value in the layout its
  producer wrote as long as consumers agree, and starts a run of another layout
  only where its gain pays for the transforms in and out;
* a value named v is always its ONNX-layout (NCHW) self; a copy in layout L is
  the value "v@L". A producer writing L writes v@L; a transform producing
  v (or v@M) is inserted right before the first consumer that needs it, and
  graph outputs are brought back to NCHW at the end, so graph inputs and
  outputs keep the model's layout;
* static inputs (weights, folded constants) and inputs a kernel declares with
  layout None are never transformed: the kernel reads them as stored.

The pass plans only: it returns an Assignment the Net applies (new Steps,
renamed inputs/outputs, the transform nodes), and a `key` transform kind,
(src, dst), general enough for another kind of transform (a device copy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..ir import Node
from ..ops.layouts import TRANSFORM_OP
from ..ops.registry import DEFAULT_LAYOUT, KernelDef
from ..ops.shapes.fused import DOMAIN

# One transform costs as much as this many preference units.
TRANSFORM_COST = 1


def typed_name(value: str, layout: str) -> str:
    """The name of `value` stored in `layout` (the value itself in the default layout)."""
    return value if layout == DEFAULT_LAYOUT else f"{value}@{layout}"


@dataclass
class Assignment:
    """The plan: per visited node its kernel and node (inputs/outputs renamed), transforms before it.

    Attributes:
        kernels: the chosen KernelDef per node, in order.
        nodes: the node to run (the original when nothing was renamed).
        before: node index -> transform Nodes to run just before it.
        after: transform Nodes to run after the last node (graph outputs back to NCHW).
        layouts: value name -> layout, for every value not in the default layout.
        changed: False when every node kept its default kernel (nothing to apply).
    """

    kernels: list[KernelDef]
    nodes: list[Node]
    before: dict[int, list[Node]] = field(default_factory=dict)
    after: list[Node] = field(default_factory=list)
    layouts: dict[str, str] = field(default_factory=dict)
    changed: bool = False
    total: tuple = (0, 0)  # (preferences + TRANSFORM_COST x transforms, elements transformed)
    margins: list = field(default_factory=list)  # per node: id(kernel) -> its walk cost less the chosen one's


def transform_node(value: str, src: str, dst: str) -> Node:
    """LayoutTransform reading value in `src`, writing it in `dst` (names per typed_name)."""
    src_name, dst_name = typed_name(value, src), typed_name(value, dst)
    return Node(TRANSFORM_OP, [src_name], [dst_name], {"src": src, "dst": dst}, DOMAIN,
                name=f"{dst_name}/from_{src}")


def assign_kernel_types(nodes: Sequence[Node], choices: Sequence[Sequence[KernelDef]], *,
                        static: set, outputs: Sequence[str], sizes: dict | None = None) -> Assignment:
    """Choose a kernel per node and plan the layout transforms.

    The greedy walk (module docstring), then a refinement: each node with a choice is tried on
    each of its other kernels, the walk re-run around it, and the change kept when the plan's
    total -- sum of preferences + TRANSFORM_COST x transforms, ties broken by the elements
    transformed -- goes down (the walk alone can start a run of another layout that a later node
    gives up, or miss one whose first node only breaks even).

    Args:
        nodes: the nodes to run, in order.
        choices: per node, its candidate kernels that support it at these shapes
            (the default-layout kernel first).
        static: names of values known before forward (never transformed).
        outputs: graph outputs (and other values read after the run): they must
            end in the default layout.
        sizes: elements per value (transforms of larger values cost more on ties); absent: 1 each.
    Returns:
        Assignment (changed False, nothing to do, when no node has a choice).
    """
    if all(len(c) <= 1 for c in choices):
        return Assignment([c[0] for c in choices], list(nodes))
    readable: dict[str, set] = {}  # value -> layouts every one of its consumers has a kernel reading
    for node, cands in zip(nodes, choices):
        for j, v in enumerate(node.inputs):
            if v:
                can = {k.input_layout(j) for k in cands}
                readable[v] = can if v not in readable else readable[v] & can
    sizes = sizes or {}
    plan = _walk(nodes, choices, static, outputs, sizes, readable, {})
    forced: dict[int, KernelDef] = {}
    for _ in range(REFINE_ROUNDS):
        better = False
        for i, cands in enumerate(choices):
            if i in forced or len(cands) < 2:
                continue
            for k in cands:
                if k is plan.kernels[i] or plan.margins[i].get(id(k), 0) > REFINE_MARGIN:
                    continue
                trial = _walk(nodes, choices, static, outputs, sizes, readable, {**forced, i: k})
                if trial.total < plan.total:
                    plan, forced, better = trial, {**forced, i: k}, True
                    break
        if not better:
            break
    return plan


# Rounds of the refinement (each tries every node with a choice once), and the kernels tried: those
# whose cost in the walk was within this much of the chosen one's (a near tie; a clear loser stays out).
REFINE_ROUNDS = 3
REFINE_MARGIN = 2 * TRANSFORM_COST


def _walk(nodes, choices, static, outputs, sizes, readable, forced) -> Assignment:
    """The greedy walk (forced: node index -> the kernel it must take); sets .total."""
    avail: dict[str, list[str]] = {}  # value -> layouts it is (or will be) stored in, first = producer's
    result = Assignment([], [], changed=False)
    final = set(outputs)
    prefs = moved = count = 0

    def size(v):
        return sizes.get(v, 1)

    def layouts_of(v):
        return avail.get(v, [DEFAULT_LAYOUT])

    def back(v: str, layout: str) -> int:
        """1 when `v` written in `layout` needs a transform for a consumer or as a graph output."""
        if not v or layout == DEFAULT_LAYOUT:
            return 0
        return int(v in final or layout not in readable.get(v, {layout}))

    for i, (node, cands) in enumerate(zip(nodes, choices)):
        def cost(k: KernelDef):
            missing = [v for j, v in enumerate(node.inputs)
                       if v and v not in static and k.input_layout(j) is not None
                       and k.input_layout(j) not in layouts_of(v)]
            back_outs = [o for j, o in enumerate(node.outputs) if back(o, k.output_layout(j))]
            return (k.preference + TRANSFORM_COST * (len(missing) + len(back_outs)),
                    sum(size(v) for v in missing + back_outs))

        costs = [cost(k) for k in cands] if len(cands) > 1 else [(0, 0)]
        best = forced.get(i) or cands[costs.index(min(costs))]  # the first (default) kernel on ties
        chosen = costs[cands.index(best)][0]
        result.margins.append({id(k): c[0] - chosen for k, c in zip(cands, costs)})
        prefs += best.preference
        inputs = list(node.inputs)
        for j, v in enumerate(inputs):
            want = best.input_layout(j)
            if not v or v in static or want is None:
                continue
            have = layouts_of(v)
            if want not in have:
                src = DEFAULT_LAYOUT if DEFAULT_LAYOUT in have else have[0]
                result.before.setdefault(i, []).append(transform_node(v, src, want))
                avail[v] = have + [want]
                count, moved = count + 1, moved + size(v)
            inputs[j] = typed_name(v, want)
        out_names = list(node.outputs)
        for j, o in enumerate(out_names):
            if o:
                lay = best.output_layout(j)
                avail[o] = [lay]
                out_names[j] = typed_name(o, lay)
        if inputs != list(node.inputs) or out_names != list(node.outputs):
            node = Node(node.op_type, inputs, out_names, node.attrs, node.domain, node.name)
            result.changed = True
        result.changed |= best is not cands[0]
        result.kernels.append(best)
        result.nodes.append(node)
    for o in outputs:
        have = avail.get(o)
        if have is not None and DEFAULT_LAYOUT not in have:
            result.after.append(transform_node(o, have[0], DEFAULT_LAYOUT))
            count, moved = count + 1, moved + size(o)
    for node_list in list(result.before.values()) + [result.after]:
        for t in node_list:
            dst = t.attrs["dst"]
            if dst != DEFAULT_LAYOUT:
                result.layouts[t.outputs[0]] = dst
    for node, k in zip(result.nodes, result.kernels):
        for j, o in enumerate(node.outputs):
            if o and k.output_layout(j) != DEFAULT_LAYOUT:
                result.layouts[o] = k.output_layout(j)
    result.total = (prefs + TRANSFORM_COST * count, moved)
    return result


def supported_choices(default: KernelDef, alternatives: Sequence[KernelDef], ctx,
                      accept: Callable[[KernelDef], bool] | None = None) -> list[KernelDef]:
    """The default kernel, then every alternative whose supports(ctx) holds (and accept(k), if given)."""
    out = [default]
    for k in alternatives:
        if k is default or (accept is not None and not accept(k)):
            continue
        try:
            ok = k.supports is None or bool(k.supports(ctx))
        except Exception:
            ok = False
        if ok:
            out.append(k)
    return out
