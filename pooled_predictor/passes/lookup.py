"""Element-wise chains on one 8-bit tensor become one table lookup.

A quantized model computes many element-wise functions of a single 8-bit tensor X: the GELU that
onnxruntime's quantizer leaves between QLinear nodes (DequantizeLinear, Div, Erf, QuantizeLinear,
QLinearAdd, QLinearMul by X, QLinearMul by 0.5), HardSwish's and sigmoid gates, QDQ islands around float ops.
Whatever the chain, its output at an element depends on X's value there alone, and X takes at most 256
values. This pass evaluates the chain once on the 256 codes with the kernels that would run it (passes/
analysis.evaluate: our CPU kernels) and replaces it by Lookup(X, T) (our domain, ops/cpu/quantized_contrib.Lookup):
the same bits, one pass instead of one per node. onnxruntime does this for single ops (QLinearSigmoid,
QLinearLeakyRelu: qlinear_lookup_table.cc), XNNPACK for 8-bit activations (its lookup-table operator).

Region: grown from each 8-bit value X (uint8 or int8, by shape analysis, else by the zero point of a
DequantizeLinear or QLinear op reading it) over the nodes, in topological order, of TABULATED's ops whose every
input is X, a value the region computed, or a weight of one element (of rank at most X's, 0-d where X's rank is
unknown, so that no broadcast changes the shape): each region value has X's shape and is a function of X's
element alone. Its values read outside it (or graph outputs) are its outputs. Each output of type uint8, int8
or float32 whose cone (the region's nodes it depends on) holds an op in COSTLY or at least MIN_NODES nodes
becomes one Lookup node writing it (a lookup costs one load, load, store an element, about four vectorized
element-wise passes on AVX-512: a cheaper cone is left as it is); the nodes no longer read go with
eliminate_dead_nodes. A node whose kernel fails on the codes leaves the region untouched.
"""

from __future__ import annotations

import heapq
from collections import Counter

import numpy as np

from ..ir import Graph, Node, readonly
from ..ops.shapes.fused import DOMAIN, DOMAIN_VERSION
from .analysis import evaluate
from .base import PassContext

MS = "com.microsoft"
_8BIT = (np.dtype(np.uint8), np.dtype(np.int8))
TABLE_TYPES = (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.float32))
# element-wise ops whose output at an element is a function of their inputs' elements there
TABULATED = {
    "": {"DequantizeLinear", "QuantizeLinear", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod",
         "Erf", "Tanh", "Sigmoid", "Exp", "Log", "Sqrt", "Reciprocal", "Abs", "Neg", "Floor", "Ceil", "Round",
         "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
         "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "ThresholdedRelu", "HardSigmoid", "HardSwish",
         "Softplus", "Softsign", "Mish", "Gelu", "Clip", "Cast", "Identity"},
    MS: {"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu"},
    DOMAIN: {"Gelu", "HardSwish"},
}
# ops whose kernel costs more than a few vectorized passes: one of them in a cone makes its lookup pay
COSTLY = {"Erf", "Tanh", "Sigmoid", "Exp", "Log", "Pow", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
          "Cosh", "Asinh", "Acosh", "Atanh", "Elu", "Selu", "Celu", "Softplus", "Mish", "Gelu", "QLinearSigmoid"}
MIN_NODES = 5


def tabulate_8bit_chains(graph: Graph, ctx: PassContext) -> dict:
    """Replace element-wise chains on one 8-bit tensor by Lookup nodes (module docstring)."""
    info = ctx.shapes(graph)
    prod, cons = graph.producers(), graph.consumers()
    outs = set(graph.output_names)
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    seeds = [v.name for v in graph.inputs] + [o for n in graph.nodes for o in n.present_outputs()]
    taken: set[int] = set()
    replace: dict[int, Node] = {}
    names = {n.name for n in graph.nodes}
    counts: Counter = Counter()
    for x in seeds:
        if x in graph.weights:
            continue
        dtype = info.dtypes.get(x) or _code_type(graph, x, cons)
        if dtype not in _8BIT:
            continue
        shape = info.shapes.get(x)
        region = _grow(graph, x, None if shape is None else len(shape), cons, order, taken)
        if not region:
            continue
        values = _evaluate(graph, ctx, x, dtype, region)
        if values is None:
            continue
        inside = {id(n) for n in region}
        taken |= inside
        for node in region:
            y = node.outputs[0]
            if not (y in outs or any(id(c) not in inside for c in cons.get(y, ()))):
                continue
            table = values[y].reshape(-1)
            cone = _cone(node, prod, inside, order)
            if table.dtype not in TABLE_TYPES or not (any(n.op_type in COSTLY for n in cone) or len(cone) >= MIN_NODES):
                continue
            weight = _unique(f"{y}.table", graph.weights)
            graph.weights[weight] = readonly(np.ascontiguousarray(table))
            name = _unique(f"{node.name}.lookup", names)
            names.add(name)
            replace[id(node)] = Node("Lookup", [x, weight], [y], {}, DOMAIN, name)
            counts[f"{len(cone)}-node chain ({' -> '.join(n.op_type for n in cone)}) -> Lookup"] += 1
    if not replace:
        return {}
    graph.nodes = [replace.get(id(n), n) for n in graph.nodes]
    graph.opset[DOMAIN] = max(graph.opset.get(DOMAIN, 0), DOMAIN_VERSION)
    return dict(counts)


def _code_type(graph: Graph, x: str, cons: dict) -> np.dtype | None:
    """x's type where shape analysis did not reach it (a graph with shapes it cannot follow): the zero point's of a
    DequantizeLinear or QLinear element-wise op reading x (ONNX: of x's type), else None."""
    for c in cons.get(x, ()):
        ins = list(c.inputs) + [""] * 8
        if c.op_type == "DequantizeLinear" and ins[0] == x:
            z = ins[2]
        elif c.domain == MS and c.op_type in TABULATED[MS] and x in (ins[0], ins[3]):
            z = ins[2] if ins[0] == x else ins[5]
        else:
            continue
        w = graph.weights.get(z) if z else None
        if w is not None:
            return w.dtype
    return None


def _grow(graph: Graph, x: str, rank: int | None, cons: dict, order: dict, taken: set) -> list[Node]:
    """The region grown from x (module docstring), its nodes in topological order."""
    derived = {x}
    region: list[Node] = []
    heap = [(order[id(c)], id(c), c) for c in cons.get(x, ())]
    heapq.heapify(heap)
    seen = {id(c) for c in cons.get(x, ())}
    while heap:
        _, _, node = heapq.heappop(heap)
        if id(node) in taken or not _eligible(graph, node, derived, rank):
            continue
        region.append(node)
        y = node.outputs[0]
        derived.add(y)
        for c in cons.get(y, ()):
            if id(c) not in seen:
                seen.add(id(c))
                heapq.heappush(heap, (order[id(c)], id(c), c))
    return region


def _eligible(graph: Graph, node: Node, derived: set, rank: int | None) -> bool:
    """node takes the region's values and weights of one element (0-d where x's rank is unknown) only."""
    if node.op_type not in TABULATED.get(node.domain if node.domain != "ai.onnx" else "", ()):
        return False
    if len(node.outputs) != 1 or not node.outputs[0]:
        return False
    for i in node.present_inputs():
        if i in derived:
            continue
        w = graph.weights.get(i)
        if w is None or w.size != 1 or w.ndim > (0 if rank is None else rank):
            return False
    return True


def _evaluate(graph: Graph, ctx: PassContext, x: str, dtype: np.dtype, region: list[Node]) -> dict | None:
    """Each region value on the 256 codes of x's type (entry i: the code whose byte is i), or None where a kernel
    fails or a value is not one element per code."""
    values = {x: np.arange(256, dtype=np.uint8).view(dtype)}
    for node in region:
        arrays = [values[i] if i in values else graph.weights[i] if i else None for i in node.inputs]
        res = evaluate(graph, node, arrays, ctx.memory_limit_bytes)
        if not res or res[0] is None or np.size(res[0]) != 256:
            return None
        values[node.outputs[0]] = np.asarray(res[0])
    return values


def _cone(node: Node, prod: dict, inside: set, order: dict) -> list[Node]:
    """The region's nodes `node` depends on (itself included), in topological order."""
    found, stack = {id(node): node}, [node]
    while stack:
        for i in stack.pop().present_inputs():
            p = prod.get(i)
            if p is not None and id(p) in inside and id(p) not in found:
                found[id(p)] = p
                stack.append(p)
    return sorted(found.values(), key=lambda n: order[id(n)])


def _unique(base: str, taken) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}.{k}", k + 1
    return name
