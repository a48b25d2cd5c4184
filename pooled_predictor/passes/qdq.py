"""QDQ models to quantized nodes: DequantizeLinear -> op -> QuantizeLinear becomes one integer node.

A QDQ model (onnxruntime.quantization's QuantFormat.QDQ) states every quantized op
in float32 between a DequantizeLinear on each input and a QuantizeLinear on its
output. Run as written, every op pays a dequantize and a quantize pass over its
activations. onnxruntime's QDQ transformer (qdq_transformer/selectors_actions)
turns the groups into its integer kernels; this pass does the same:

    Q(Conv(DQ(x), DQ(W), DQ(B)))    = QLinearConv(x, xs, xz, W, ws, wz, ys, yz, B)
    Q(MatMul(DQ(a), DQ(b)))         = QLinearMatMul(a, as, az, b, bs, bz, ys, yz)
    Q(Gemm(DQ(a), DQ(B), DQ(C)))    = QGemm(a, as, az, B, bs, bz, C, ys, yz)   (com.microsoft; transA, transB
                                                           kept; beta 1, and alpha 1 with a C (QGemm scales
                                                           C by alpha, Gemm does not): the classifier in
                                                           integers, as onnxruntime's QDQ Gemm selector)
    Q(MaxPool(DQ(x)))               = MaxPool(x)          (same scale and zero point;
                                                           max commutes with a monotone map)
    Q(Transpose(DQ(x), ...))        = Transpose(x, ...)    and Reshape, Squeeze, Unsqueeze, Flatten, Slice,
                                                           Gather, Expand, Tile, DepthToSpace, SpaceToDepth
                                                           (MOVES: they only move elements; same scale and
                                                           zero point, as onnxruntime's DropQDQNodesRules)
    Q(Add(DQ(a), DQ(b)))            = QLinearAdd(a, as, az, b, bs, bz, ys, yz)       (com.microsoft;
    Q(Mul(DQ(a), DQ(b)))            = QLinearMul(...)                                 onnxruntime's
    Q(GlobalAveragePool(DQ(x)))     = QLinearGlobalAveragePool(x, xs, xz, ys, yz)     contrib ops, taken
    Q(AveragePool(DQ(x)))           = QLinearAveragePool(x, xs, xz, ys, yz)           only where a kernel
    Q(Concat(DQ(x1), DQ(x2), ...))  = QLinearConcat(ys, yz, x1, x1s, x1z, ...)        for them is
    Q(Sigmoid(DQ(x)))               = QLinearSigmoid(x, xs, xz, ys, yz)               registered: the
    Q(LeakyRelu(DQ(x)))             = QLinearLeakyRelu(x, xs, xz, ys, yz)             qop kernels)
    Mul(Cast(MatMulInteger(DynamicQuantizeLinear(A)[0], B, DQL(A)[2], bz)), Mul(DQL(A)[1], bs))
                                    = DynamicQuantizeMatMul(A, B, bs, bz)   (our domain; quantize_dynamic's
                                                           pattern; ops/cpu/qmatmul.py)
    Add(DynamicQuantizeMatMul(A, B, bs, bz), bias) = DynamicQuantizeMatMul(A, B, bs, bz, bias)
                                                          (bias a float32 (N,) weight: the kernel adds it
                                                           in float32 after the scale, as the Add does)

Q(v) = saturate(rint(v / ys) + yz), DQ(q) = (q - z) * s (ONNX Operators.md). The
QLinear ops compute exactly Q(op(DQ(...))) with the int32 sum exact and the
requantization fused (ops/cpu/qconv.py), as onnxruntime's QLinearConv does for the
same model. A Relu or Clip between the op and the Q is folded when the Q alone
already applies it -- Relu when yz is the type's minimum (Q(max(v, 0)) = max(Q(v),
Q(0)) = Q(v) then), Clip(lo, hi) when Q(lo) and Q(hi) are the type's bounds --
onnxruntime's rule (its quantizer removes such activations itself).

Fires when: the op's output is read by the Q alone (through the Relu/Clip), and is
no graph output; scales and zero points are weights, per tensor for activations
(x, a, y), per tensor or per output channel (DequantizeLinear axis 0 for Conv's W,
axis 1 for MatMul's b, the N axis of Gemm's B) for weights; W / b are 8-bit weights, B a DQ of an int32
weight with zero point 0 at the scale xs * ws (the bias as onnxruntime's quantizer
writes it: its int32 is used as it is, as onnxruntime does; a bias at another scale
or zero point leaves the node unfused). The DequantizeLinear nodes are left for their other
readers; those left unread are removed here (before constant folding would turn
the weights' ones into float32 copies); the weights only they read go with
eliminate_dead_nodes.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..ir import Graph, Node
from ..ops import registry
from ..ops.shapes.fused import DOMAIN, DOMAIN_VERSION
from ..ops.shapes.quantized_contrib import MAX_RATIO
from .base import PassContext

_8BIT = (np.dtype(np.uint8), np.dtype(np.int8))


def _w(graph: Graph, name: str):
    return graph.weights.get(name) if name else None


def _dq(graph: Graph, prod: dict, value: str, *, weight: bool):
    """(q, scale, zero_point, axis, node) of the DequantizeLinear producing `value` (8-bit, constant
    scale and zero point; q a weight when `weight`, else an activation), or None."""
    node = prod.get(value)
    if node is None or node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
        return None
    ins = list(node.inputs) + [""] * (3 - len(node.inputs))
    q, s, z = ins[:3]
    scale, zp = _w(graph, s), _w(graph, z)
    if scale is None or zp is None or zp.dtype not in _8BIT or "block_size" in node.attrs and node.attrs["block_size"]:
        return None
    if weight != (q in graph.weights) or (weight and graph.weights[q].dtype != zp.dtype):
        return None
    return q, s, z, int(node.attrs.get("axis", 1)), node


def _per_tensor(graph: Graph, *names) -> bool:
    return all(np.size(graph.weights[n]) == 1 and np.ndim(graph.weights[n]) <= 1 for n in names)


def _ratios_fit(graph: Graph, scales: list, out_scale: str) -> bool:
    """Whether every input scale (a product of weights' names, per tensor or per channel) over the output's
    Q scale is finite and at most MAX_RATIO (shapes/quantized_contrib.py): beyond it the fused kernels' float32
    requantization is not within a step of the unfused graph (a 3e38 scale over a normal one overflowed to inf
    in a fused QLinearGlobalAveragePool; found by tests/fuzz), and the node is left unfused (exact)."""
    out = float(np.abs(graph.weights[out_scale].astype(np.float64)).min())
    for names in scales:
        s = np.float64(1)
        for n in names:
            s = s * float(np.abs(graph.weights[n].astype(np.float64)).max())
        if not (out > 0 and np.isfinite(s) and s / out <= MAX_RATIO):
            return False
    return True


def _quantize_after(graph: Graph, cons: dict, outs: set, value: str):
    """(Q node, [folded activation nodes]) when `value` is read only by a QuantizeLinear to 8 bits with
    a per-tensor scale and zero point, possibly through a Relu / Clip that Q makes redundant; else None."""
    chain = []
    while True:
        readers = cons.get(value, [])
        if value in outs or len(readers) != 1:
            return None
        node = readers[0]
        if node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "QuantizeLinear":
            ins = list(node.inputs) + [""] * (3 - len(node.inputs))
            s, z = _w(graph, ins[1]), _w(graph, ins[2])
            if s is None or z is None or z.dtype not in _8BIT or np.size(s) != 1 or np.size(z) != 1:
                return None
            if any(not _redundant(graph, a, float(s.reshape(())), int(z.reshape(())), np.iinfo(z.dtype)) for a in chain):
                return None
            return node, chain
        if node.op_type not in ("Relu", "Clip") or chain:
            return None
        chain.append(node)
        value = node.outputs[0]


def _redundant(graph: Graph, act: Node, scale: float, zp: int, info) -> bool:
    """Whether Q(act(v)) = Q(v) for every v (module docstring)."""
    if act.op_type == "Relu":
        return zp == info.min
    lo = hi = None
    if "min" in act.attrs or "max" in act.attrs:  # Clip-1 / -6
        lo, hi = act.attrs.get("min", -np.inf), act.attrs.get("max", np.inf)
    else:
        ins = list(act.inputs) + [""] * (3 - len(act.inputs))
        for i in (1, 2):
            if ins[i] and ins[i] not in graph.weights:
                return False
        lo = float(graph.weights[ins[1]].reshape(())) if ins[1] else -np.inf
        hi = float(graph.weights[ins[2]].reshape(())) if ins[2] else np.inf

    def q(v):
        return min(max(np.rint(np.float32(v) / np.float32(scale)) + zp, info.min), info.max)

    return q(lo) == info.min and q(hi) == info.max


def _conv(graph, prod, node):
    ins = list(node.inputs) + [""] * (3 - len(node.inputs))
    x = _dq(graph, prod, ins[0], weight=False)
    w = _dq(graph, prod, ins[1], weight=True)
    if x is None or w is None or not _per_tensor(graph, x[1], x[2]):
        return None
    m = graph.weights[w[0]].shape[0]
    if not (_per_tensor(graph, w[1], w[2]) or (w[3] == 0 and np.size(graph.weights[w[1]]) == m)):
        return None
    bias = ""
    if ins[2]:  # the bias: DQ of an int32 weight with zero point 0, at the scale xs * ws
        bias = _bias(graph, prod, ins[2], _product_scale(graph, x[1], w[1]), m)
        if bias is None:
            return None
    return [x[0], x[1], x[2], w[0], w[1], w[2]], bias


def _product_scale(graph, a_scale: str, b_scale: str) -> np.ndarray:
    """The accumulator's scale a_scale * b_scale (per tensor or per output channel), float32, flat."""
    return (np.float32(graph.weights[a_scale].reshape(())) * graph.weights[b_scale].astype(np.float32)).reshape(-1)


def _bias(graph, prod, value, scale: np.ndarray, n: int):
    """The int32 weight (n,) of a DequantizeLinear with zero point 0 producing `value` (a quantized bias), or
    None; its scale must be the accumulator's, `scale` (within float32 rounding: the quantizer's product may
    be rounded once more), since the fused kernel adds the int32 values to the accumulator as they are."""
    bnode = prod.get(value)
    if bnode is None or bnode.op_type != "DequantizeLinear" or bnode.domain not in ("", "ai.onnx"):
        return None
    ins = list(bnode.inputs) + [""] * (3 - len(bnode.inputs))
    bq, bs, bz = _w(graph, ins[0]), _w(graph, ins[1]), _w(graph, ins[2])
    if bq is None or bq.dtype != np.int32 or bq.shape != (n,) or (ins[2] and (bz is None or np.any(bz != 0))):
        return None
    if bs is None or bs.dtype != np.float32 or np.size(bs) not in (1, n) or bnode.attrs.get("block_size"):
        return None
    if np.size(bs) == n > 1 and int(bnode.attrs.get("axis", 1)) not in (0, -1):
        return None
    bs = np.broadcast_to(bs.reshape(-1), (n,))
    if not np.all(np.isfinite(scale)) or not np.allclose(bs, np.broadcast_to(scale, (n,)), rtol=1e-6, atol=0):
        return None
    return ins[0]


def _gemm(graph, prod, node):
    """QGemm's inputs for Q(Gemm(DQ(a), DQ(B), DQ(C))) (module docstring), or None."""
    if registry.find("QGemm", MS, 1, "cpu") is None or float(node.attrs.get("beta", 1.0)) != 1.0:
        return None
    ins = list(node.inputs) + [""] * (3 - len(node.inputs))
    a = _dq(graph, prod, ins[0], weight=False)
    b = _dq(graph, prod, ins[1], weight=True)
    if a is None or b is None or not _per_tensor(graph, a[1], a[2]):
        return None
    bw = graph.weights[b[0]]
    if bw.ndim != 2:
        return None
    n_axis = 0 if node.attrs.get("transB", 0) else 1
    if not (_per_tensor(graph, b[1], b[2]) or (b[3] % 2 == n_axis and np.size(graph.weights[b[1]]) == bw.shape[n_axis])):
        return None
    c = ""
    if ins[2]:  # C at the scale as * bs, as QGemm takes it; QGemm scales it by alpha where Gemm does not
        if float(node.attrs.get("alpha", 1.0)) != 1.0:
            return None
        c = _bias(graph, prod, ins[2], _product_scale(graph, a[1], b[1]), bw.shape[n_axis])
        if c is None:
            return None
    return [a[0], a[1], a[2], b[0], b[1], b[2], c], ""


def _matmul(graph, prod, node):
    a = _dq(graph, prod, node.inputs[0], weight=False)
    b = _dq(graph, prod, node.inputs[1], weight=True)
    if a is None or b is None or not _per_tensor(graph, a[1], a[2]):
        return None
    bw = graph.weights[b[0]]
    if bw.ndim != 2:
        return None
    if not (_per_tensor(graph, b[1], b[2]) or (b[3] in (1, -1) and np.size(graph.weights[b[1]]) == bw.shape[1])):
        return None
    return [a[0], a[1], a[2], b[0], b[1], b[2]], ""


def fuse_qdq(graph: Graph, ctx: PassContext) -> dict:
    """Rewrite DQ -> Conv / MatMul / MaxPool -> Q groups into integer nodes (module docstring)."""
    prod, cons = graph.producers(), graph.consumers()
    outs = set(graph.output_names)
    counts: Counter = Counter()
    replace: dict[int, Node | None] = {}
    for node in graph.nodes:
        if node.domain in ("", "ai.onnx") and node.op_type == "MatMulInteger":
            _dynamic_matmul(graph, prod, cons, outs, node, replace, counts)
            continue
        if node.domain in ("", "ai.onnx") and node.op_type in CONTRIB:
            _contrib(graph, prod, cons, outs, node, replace, counts)
            continue
        if node.domain in ("", "ai.onnx") and node.op_type in MOVES:
            _moves(graph, prod, cons, outs, node, replace, counts)
            continue
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Conv", "MatMul", "Gemm"):
            continue
        after = _quantize_after(graph, cons, outs, node.outputs[0])
        if after is None:
            continue
        q, chain = after
        found = {"Conv": _conv, "MatMul": _matmul, "Gemm": _gemm}[node.op_type](graph, prod, node)
        if found is None:
            continue
        ins, bias = found
        if not _ratios_fit(graph, [(ins[1], ins[4])], q.inputs[1]):
            continue
        ins += [q.inputs[1], q.inputs[2]]
        if node.op_type == "Conv":
            new = Node("QLinearConv", ins + ([bias] if bias else []), [q.outputs[0]], dict(node.attrs), "", node.name)
        elif node.op_type == "Gemm":
            attrs = {k: node.attrs[k] for k in ("alpha", "transA", "transB") if k in node.attrs}
            new = Node("QGemm", ins, [q.outputs[0]], attrs, MS, node.name)
            graph.opset[MS] = max(graph.opset.get(MS, 0), 1)
        else:
            new = Node("QLinearMatMul", ins, [q.outputs[0]], {}, "", node.name)
        replace[id(node)] = new
        for n in chain + [q]:
            replace[id(n)] = None
        counts[f"DQ -> {node.op_type}{''.join(' -> ' + a.op_type for a in chain)} -> Q fused into {new.op_type}"] += 1
    if not replace:
        return {}
    nodes = []
    for n in graph.nodes:
        r = replace.get(id(n), n)
        if r is not None:
            nodes.append(r)
    graph.nodes = nodes
    counts.update(_drop_unread_dequantize(graph))
    return dict(counts)


# ops that only move or select elements (and MaxPool, a max: it commutes with the monotone DQ): between a
# DequantizeLinear and a QuantizeLinear of one scale and zero point they run on the 8-bit values themselves, as
# onnxruntime's QDQ transformer drops such pairs (DropQDQNodesRules); their other inputs (shape, axes, indices) stay
MOVES = {"MaxPool", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Gather", "Expand", "Tile",
         "DepthToSpace", "SpaceToDepth"}


def _moves(graph, prod, cons, outs, node, replace, counts):
    """Q(op(DQ(x), ...)) = op(x, ...) for an op of MOVES when Q's scale and zero point are DQ's (and MaxPool's
    Indices is unread): Q(DQ(v)) = v for every 8-bit v where (v - z) s / s rounds back to v - z, that is where s
    is a normal float32 with 255 s finite."""
    if len(node.present_outputs()) != 1 or not node.inputs:
        return
    x = _dq(graph, prod, node.inputs[0], weight=False)
    after = _quantize_after(graph, cons, outs, node.outputs[0])
    if x is None or after is None or after[1] or not _per_tensor(graph, x[1], x[2]):
        return
    q = after[0]
    scale = graph.weights[x[1]]
    same = (np.array_equal(scale, graph.weights[q.inputs[1]])
            and np.array_equal(graph.weights[x[2]], graph.weights[q.inputs[2]])
            and graph.weights[x[2]].dtype == graph.weights[q.inputs[2]].dtype)
    s = float(np.abs(scale.astype(np.float32)).reshape(-1)[0])
    if not same or not (np.finfo(np.float32).tiny <= s and np.isfinite(np.float32(s) * np.float32(255))):
        return
    replace[id(node)] = Node(node.op_type, [x[0]] + list(node.inputs[1:]), [q.outputs[0]], dict(node.attrs),
                             node.domain, node.name)
    replace[id(q)] = None
    counts[f"DQ -> {node.op_type} -> Q run on the 8-bit input"] += 1


MS = "com.microsoft"
# ONNX op -> onnxruntime's quantized contrib op (com.microsoft, version 1), and the ONNX attributes it keeps
CONTRIB = {"Add": ("QLinearAdd", ()), "Mul": ("QLinearMul", ()),
           "GlobalAveragePool": ("QLinearGlobalAveragePool", ()),
           "AveragePool": ("QLinearAveragePool", ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape",
                                                  "pads", "strides")),
           "Concat": ("QLinearConcat", ("axis",)), "Sigmoid": ("QLinearSigmoid", ()),
           "LeakyRelu": ("QLinearLeakyRelu", ("alpha",))}


def _contrib(graph, prod, cons, outs, node, replace, counts):
    """Q(op(DQ(x), ...)) = its onnxruntime contrib op (module docstring), when that op has a CPU kernel."""
    name, keep = CONTRIB[node.op_type]
    if registry.find(name, MS, 1, "cpu") is None:
        return
    after = _quantize_after(graph, cons, outs, node.outputs[0])
    if after is None or after[1] or len(node.present_outputs()) != 1:
        return
    q = after[0]
    # each input a DequantizeLinear of an activation or of an 8-bit weight (a quantized bias after a MatMul: the
    # QOperator form's QLinearAdd takes it as its B)
    ins = [_dq(graph, prod, v, weight=False) or _dq(graph, prod, v, weight=True) if v not in graph.weights else None
           for v in node.inputs]
    if not ins or any(i is None or not _per_tensor(graph, i[1], i[2]) for i in ins):
        return
    y_type = graph.weights[q.inputs[2]].dtype
    if any(graph.weights[i[2]].dtype != y_type for i in ins):
        return
    if node.op_type in ("Add", "Mul") and len(ins) != 2:
        return
    if not _ratios_fit(graph, [tuple(i[1] for i in ins)] if node.op_type == "Mul" else [(i[1],) for i in ins],
                       q.inputs[1]):
        return
    if node.op_type == "Concat":
        args = [q.inputs[1], q.inputs[2]] + [v for i in ins for v in i[:3]]
    else:
        args = [v for i in ins for v in i[:3]] + [q.inputs[1], q.inputs[2]]
    attrs = {k: v for k, v in node.attrs.items() if k in keep}
    if node.op_type == "GlobalAveragePool":
        attrs["channels_last"] = 0
    replace[id(node)] = Node(name, args, [q.outputs[0]], attrs, MS, node.name)
    replace[id(q)] = None
    graph.opset[MS] = max(graph.opset.get(MS, 0), 1)
    counts[f"DQ -> {node.op_type} -> Q fused into {name}"] += 1


def _dynamic_matmul(graph, prod, cons, outs, mm, replace, counts):
    """Mul(Cast(MatMulInteger(q, B, zp, bz)), Mul(scale, bs)) with (q, scale, zp) = DynamicQuantizeLinear(A)
    = DynamicQuantizeMatMul(A, B, bs, bz), and an Add of a bias after it taken in (module docstring)."""
    ins = list(mm.inputs) + [""] * (4 - len(mm.inputs))
    dql = prod.get(ins[0])
    if dql is None or dql.op_type != "DynamicQuantizeLinear" or ins[2] != dql.outputs[2] or not ins[3]:
        return
    b, bz = _w(graph, ins[1]), _w(graph, ins[3])
    if b is None or bz is None or b.ndim != 2 or b.dtype not in _8BIT or np.size(bz) not in (1, b.shape[1]):
        return
    chain = []
    for op in ("Cast", "Mul"):
        value = (chain[-1] if chain else mm).outputs[0]
        readers = cons.get(value, [])
        if value in outs or len(readers) != 1 or readers[0].op_type != op:
            return
        chain.append(readers[0])
    cast, mul = chain
    if int(cast.attrs.get("to", 0)) != 1:  # FLOAT
        return
    other = mul.inputs[1] if mul.inputs[0] == cast.outputs[0] else mul.inputs[0]
    smul = prod.get(other)
    if smul is None or smul.op_type != "Mul" or dql.outputs[1] not in smul.inputs:
        return
    bs_name = smul.inputs[1] if smul.inputs[0] == dql.outputs[1] else smul.inputs[0]
    bs = _w(graph, bs_name)
    if bs is None or bs.dtype != np.float32 or np.size(bs) not in (1, b.shape[1]):
        return
    args, y = [dql.inputs[0], ins[1], bs_name, ins[3]], mul.outputs[0]
    readers = cons.get(y, [])
    if y not in outs and len(readers) == 1 and readers[0].op_type == "Add" and readers[0].domain in ("", "ai.onnx"):
        add = readers[0]
        bias_name = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
        bias = _w(graph, bias_name)
        if bias_name != y and bias is not None and bias.dtype == np.float32 and bias.shape == (b.shape[1],):
            args.append(bias_name)
            y = add.outputs[0]
            replace[id(add)] = None
            counts["Add of a bias fused into DynamicQuantizeMatMul"] += 1
    replace[id(mm)] = Node("DynamicQuantizeMatMul", args, [y], {}, DOMAIN, mm.name)
    replace[id(cast)] = replace[id(mul)] = None
    graph.opset[DOMAIN] = max(graph.opset.get(DOMAIN, 0), DOMAIN_VERSION)
    counts["DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul fused into DynamicQuantizeMatMul"] += 1


def _drop_unread_dequantize(graph: Graph) -> Counter:
    """Remove DequantizeLinear nodes nobody reads any more (and the weights only they read)."""
    removed: Counter = Counter()
    while True:
        read = {i for n in graph.nodes for i in n.inputs if i} | set(graph.output_names)
        dead = [n for n in graph.nodes if n.op_type == "DequantizeLinear" and not any(o in read for o in n.outputs)]
        if not dead:
            break
        ids = {id(n) for n in dead}
        graph.nodes = [n for n in graph.nodes if id(n) not in ids]
        removed["unread DequantizeLinear removed"] += len(dead)
    return removed  # the weights only they read: eliminate_dead_nodes drops them
