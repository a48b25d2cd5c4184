"""Test helpers: one-node ONNX models run by us and by onnxruntime (the reference).

    check_node("Conv", [x, w], {"strides": [2, 2]}, opset=17, static=(1,))

builds a model with one node (inputs listed in `static` become initializers,
the others graph inputs), runs it through our Net and through onnxruntime, and
asserts every output matches: max |ours - ref| <= rtol * max(|ref|, 1) for
floats, exact equality for integers and booleans.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pooled_predictor.importers import load_onnx
from pooled_predictor.net import Net
from pooled_predictor.program import Program


def np_to_elem(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def make_node_model(op_type, inputs, attrs=None, *, opset=17, outputs=1, static=(), domain="",
                    output_names=None, input_names=None):
    """A one-node ModelProto. `inputs`: arrays (None = absent optional input)."""
    attrs = dict(attrs or {})
    names = input_names or [f"in{i}" for i in range(len(inputs))]
    node_inputs, graph_inputs, inits = [], [], []
    for i, (name, a) in enumerate(zip(names, inputs)):
        if a is None:
            node_inputs.append("")
            continue
        a = np.asarray(a)
        node_inputs.append(name)
        if i in static:
            inits.append(numpy_helper.from_array(a, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, np_to_elem(a.dtype), a.shape))
    if isinstance(outputs, int):
        outputs = [f"out{i}" for i in range(outputs)]
    out_names = output_names or outputs
    node = helper.make_node(op_type, node_inputs, out_names, domain=domain, **attrs)
    graph_outputs = [helper.make_empty_tensor_value_info(o) for o in out_names if o]
    graph = helper.make_graph([node], f"{op_type}_test", graph_inputs, graph_outputs, inits)
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = min(model.ir_version, 10)
    return model


def feeds_of(inputs, static=(), input_names=None):
    names = input_names or [f"in{i}" for i in range(len(inputs))]
    return {n: np.asarray(a) for i, (n, a) in enumerate(zip(names, inputs)) if a is not None and i not in static}


def run_ours(model, feeds, device="cpu"):
    net = Net(Program(load_onnx(model, device=device), device))
    net.forward(feeds)
    return [np.array(net.blob_by_name(o)) for o in net.output_names]


def run_ort(model, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # the reference has no kernel for this type/version
        if "NOT_IMPLEMENTED" in str(exc) or "not supported" in str(exc).lower():
            import pytest

            pytest.skip(f"onnxruntime cannot run the reference: {str(exc)[:160]}")
        raise
    return sess.run(None, feeds)


def assert_close(ours, ref, rtol=1e-5, what=""):
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != reference {ref.shape}"
    assert ours.dtype == ref.dtype, f"{what}: dtype {ours.dtype} != reference {ref.dtype}"
    if ref.dtype.kind in "fc":
        scale = max(float(np.max(np.abs(ref[np.isfinite(ref)]), initial=0.0)), 1.0)
        same_nonfinite = np.array_equal(np.isnan(ours), np.isnan(ref)) and np.array_equal(
            np.where(np.isinf(ref), ref, 0), np.where(np.isinf(ours), ours, 0))
        assert same_nonfinite, f"{what}: NaN/Inf positions differ"
        finite = np.isfinite(ref)
        err = float(np.max(np.abs(ours[finite].astype(np.float64) - ref[finite]), initial=0.0))
        assert err <= rtol * scale, f"{what}: max abs error {err:.3g} > {rtol} x {scale:.3g}"
    else:
        assert np.array_equal(ours, ref), f"{what}: values differ"


def type_outputs(model, results):
    """Give the graph outputs the dtypes and shapes of `results` (the checker requires types)."""
    outs = model.graph.output
    typed = [helper.make_tensor_value_info(o.name, np_to_elem(r.dtype), r.shape) for o, r in zip(outs, results)]
    del outs[:]
    outs.extend(typed)
    return model


def check_node(op_type, inputs, attrs=None, *, opset=17, outputs=1, static=(), rtol=1e-5,
               domain="", device="cpu"):
    """Run a one-node model through us and onnxruntime; assert all outputs match."""
    model = make_node_model(op_type, inputs, attrs, opset=opset, outputs=outputs, static=static, domain=domain)
    feeds = feeds_of(inputs, static)
    ref = run_ort(model, feeds)
    type_outputs(model, ref)
    ours = run_ours(model, feeds, device)
    assert len(ours) == len(ref)
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert_close(o, r, rtol, f"{op_type} output {i}")
    return ours
