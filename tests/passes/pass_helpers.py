"""Helpers for the pass tests: small models built with onnx.helper, run before and after a pass.

    model = make_model([helper.make_node(...), ...], inputs={"x": (1, 3, 8, 8)}, outputs=["y"],
                       weights={"W": w}, opset=17)
    after, report = check_pass(model, {"x": x}, "fold_conv_bn", fires=True)

check_pass runs only the named passes (level "none" + enable), then checks:
the input graph is untouched, the outputs of our Net after the passes equal
those before within 1e-5 x max|ref|, and both match onnxruntime on the
original model within 1e-5 x max|ref|.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor.importers import load_onnx
from pooled_predictor.engine.net import Net
from pooled_predictor.passes import optimize
from pooled_predictor.engine.program import Program

TOL = 1e-5


def make_model(nodes, inputs: dict, outputs, weights: dict | None = None, opset: int = 17,
               dtype=TensorProto.FLOAT, extra_opsets: dict | None = None) -> onnx.ModelProto:
    """A model: inputs name -> shape (None: no shape), outputs names (untyped), weights name -> array."""
    ins = [helper.make_tensor_value_info(n, dtype, s) for n, s in inputs.items()]
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (weights or {}).items()]
    graph = helper.make_graph(nodes, "pass_test", ins, outs, inits)
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8 if opset < 21 else 10
    return model


def run_net(graph, feeds: dict) -> list[np.ndarray]:
    net = Net(Program(graph))
    net.forward(feeds)
    return [np.array(net.blob_by_name(o)) for o in net.output_names]


def run_ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def rel_err(ours, ref) -> float:
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    assert ours.shape == ref.shape, f"shape {ours.shape} != reference {ref.shape}"
    scale = float(np.abs(ref).max(initial=0.0)) or 1.0
    return float(np.abs(ours - ref).max(initial=0.0)) / scale


def snapshot(graph):
    """Everything optimize() must leave untouched in its input graph."""
    return ([(n.op_type, n.domain, n.name, tuple(n.inputs), tuple(n.outputs), repr(sorted(n.attrs.items())))
             for n in graph.nodes],
            {k: id(v) for k, v in graph.weights.items()}, dict(graph.opset),
            [(v.name, v.shape) for v in graph.inputs], [(v.name, v.shape) for v in graph.outputs])


def check_pass(model, feeds: dict, passes, *, fires: bool, ort: bool = True, tol: float = TOL,
               input_shapes=None):
    """Run `passes` (a name or names) on the model; check outputs; return (optimized graph, report).

    Args:
        fires: whether the passes must change the graph (True) or leave it as it is (False).
    """
    names = (passes,) if isinstance(passes, str) else tuple(passes)
    graph = load_onnx(model)
    before = snapshot(graph)
    after, report = optimize(graph, "none", enable=names, input_shapes=input_shapes)
    assert snapshot(graph) == before, "optimize() changed its input graph"
    changed = any(report[n].changed for n in names)
    assert changed == fires, f"{names}: expected fires={fires}, report:\n{report}"
    if not fires:
        assert [(n.op_type, tuple(n.inputs), tuple(n.outputs)) for n in after.nodes] == \
               [(n.op_type, tuple(n.inputs), tuple(n.outputs)) for n in graph.nodes]
    ref = run_net(graph, feeds)
    got = run_net(after, feeds)
    for r, g in zip(ref, got):
        assert g.dtype == r.dtype
        assert rel_err(g, r) <= tol, f"after {names}: error {rel_err(g, r):.2e} > {tol}"
    if ort:
        for r, o in zip(ref, run_ort(model, feeds)):
            assert rel_err(r, o) <= tol, f"ours vs onnxruntime: {rel_err(r, o):.2e}"
    return after, report


def ops(graph) -> list[str]:
    return [n.op_type if not n.domain else f"{n.domain}.{n.op_type}" for n in graph.nodes]


def rand(*shape, seed=0, dtype=np.float32, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)
