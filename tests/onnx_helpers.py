"""Test helpers: one-node ONNX models run by us and by onnxruntime (the reference).

    check_node("Conv", [x, w], {"strides": [2, 2]}, opset=17, static=(1,))

builds a model with one node (inputs listed in `static` become initializers,
the others graph inputs), runs it through our Net and through onnxruntime, and
asserts every output matches: max |ours - ref| <= rtol * max(|ref|, 1) for
floats, exact equality for integers and booleans.
"""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from pooled_predictor.importers import load_onnx
from pooled_predictor.engine.net import Net
from pooled_predictor.engine.program import Program


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
    return [_ort_typed(r, o.type) for r, o in zip(sess.run(None, feeds), sess.get_outputs())]


def _ort_typed(result, onnx_type: str):
    """onnxruntime returns float8 tensors as their uint8 bits: view them as ml_dtypes' type."""
    if result.dtype == np.uint8 and onnx_type != "tensor(uint8)":
        from onnx import TensorProto, helper

        name = onnx_type[len("tensor("):-1].upper()
        if hasattr(TensorProto, name):
            return result.view(helper.tensor_dtype_to_np_dtype(getattr(TensorProto, name)))
    return result


def assert_close(ours, ref, rtol=1e-5, what=""):
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != reference {ref.shape}"
    assert ours.dtype == ref.dtype, f"{what}: dtype {ours.dtype} != reference {ref.dtype}"
    if ref.dtype.kind == "V":  # ml_dtypes (bfloat16, float8, int4...): compared exactly, widened
        wide = np.float64 if "float" in ref.dtype.name else np.int64
        ours, ref, rtol = ours.astype(wide), ref.astype(wide), 0.0
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
               domain="", device="cpu", reference=None):
    """Run a one-node model through us and a reference; assert all outputs match.

    The reference is onnxruntime. Where onnxruntime cannot run the case (no
    kernel for a type, a restriction of its own), `reference` is used instead:
    "onnx" for onnx's ReferenceEvaluator, or a callable reference(*inputs) ->
    outputs (a formula written out in numpy); without one such a case is skipped.
    """
    import pytest

    model = make_node_model(op_type, inputs, attrs, opset=opset, outputs=outputs, static=static, domain=domain)
    feeds = feeds_of(inputs, static)
    what = "onnxruntime"
    try:
        ref = run_ort(model, feeds)
    except (pytest.skip.Exception, Exception) as exc:
        if reference is None:
            raise
        if reference == "onnx":
            from onnx.reference import ReferenceEvaluator

            try:
                ref = ReferenceEvaluator(model).run(None, feeds)
            except Exception as failed:
                pytest.skip(f"{exc}; onnx's reference evaluator failed too: {type(failed).__name__}: {failed}")
            what = "onnx reference"
        else:
            ref, what = reference(*inputs), "numpy reference"
    ref = [np.asarray(r) for r in ref]
    type_outputs(model, ref)
    ours = run_ours(model, feeds, device)
    assert len(ours) == len(ref)
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert_close(o, r, rtol, f"{op_type} output {i} ({what})")
    return ours


def check_inplace(op, inputs, attrs, opset, index, outputs=1):
    """Run a kernel with output 0 written over input `index` (as memory_opt may place it),
    with no static values, and compare with a run into a fresh output."""
    from pooled_predictor.ir import Node
    from pooled_predictor.ops.context import OpContext
    from pooled_predictor.ops.registry import lookup, schema_version
    from pooled_predictor.ops.shapes import get_rule
    from pooled_predictor.ops.step import Step

    names = ["" if a is None else f"in{i}" for i, a in enumerate(inputs)]
    node = Node(op, names, [f"out{i}" for i in range(outputs)], dict(attrs), "", "n")
    k = lookup(op, "", opset, "cpu", "n")
    assert index in k.inplace, f"{op} does not declare input {index} in-place"
    step = Step(node, k, schema_version(op, "", opset), get_rule(op))
    arrays = [None if a is None else np.array(a) for a in inputs]
    expected = step.evaluate([None if a is None else a.copy() for a in arrays])[0]
    assert arrays[index].shape == expected.shape and arrays[index].dtype == expected.dtype
    ctx = OpContext(node, step.version, [None if a is None else a.shape for a in arrays],
                    [None if a is None else a.dtype for a in arrays])
    step.infer(ctx)
    outs = [arrays[index]] + [np.empty(s, t) if s is not None else None
                              for s, t in zip(ctx.out_shapes[1:], ctx.out_dtypes[1:])]
    step.bind(ctx)(*arrays, out=step.out_arg(outs))
    assert_close(arrays[index], expected, 0, f"{op} in place on input {index}")


def i64(*v) -> np.ndarray:
    """An int64 array of the given values (shape and axes inputs)."""
    return np.array(v, np.int64)


def sample(rng, shape, dtype):
    """Random data of any dtype: strings "s0", "s1"...; bools; numbers scaled by 10."""
    if dtype == object:
        return np.array([f"s{v}" for v in range(int(np.prod(shape)))], dtype=object).reshape(shape)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    return (rng.standard_normal(shape) * 10).astype(dtype)
