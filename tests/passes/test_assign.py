"""Kernel-type assignment (passes/assign.py): transforms only where neighbours disagree; graph I/O keep NCHW."""

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor.importers import load_onnx
from pooled_predictor.ir import Node
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.ops.layouts import TRANSFORM_OP, logical_view, physical_shape, transform
from pooled_predictor.ops.registry import KernelDef, find
from pooled_predictor.passes.assign import assign_kernel_types, typed_name
from pooled_predictor.engine.program import Program
from tests.onnx_helpers import run_ort


def _kdef(op, layout, preference=0, impl=None, ins=None, outs=None):
    return KernelDef(op, "", 1, "cpu", impl or (lambda *a, out: None), layout=layout, input_layouts=ins,
                     output_layouts=outs, preference=preference, supports=lambda ctx: len(ctx.shape(0)) == 4)


def _chain(ops):
    nodes, prev = [], "x"
    for i, op in enumerate(ops):
        nodes.append(Node(op, [prev], [f"v{i}"], name=f"n{i}"))
        prev = f"v{i}"
    return nodes


@pytest.mark.parametrize("prefs, transforms", [
    (("N", "N", "N"), 0),           # nobody prefers NHWC: no transform at all
    (("N", "H", "H"), 2),           # in before node 1, out after the end
    (("H", "H", "N"), 2),           # graph input -> NHWC, back before node 2
    (("H", "N", "H"), 0),           # one-node NHWC runs do not pay for their way in and out
    (("H", "H", "H"), 2),           # one run: graph input in, graph output back
])
def test_transforms_only_where_neighbours_disagree(prefs, transforms):
    nodes = _chain(["Relu"] * 3)
    nchw = _kdef("Relu", "NCHW")
    nhwc = _kdef("Relu", "NHWC", preference=-2)
    choices = [[nchw, nhwc] if p == "H" else [nchw] for p in prefs]
    a = assign_kernel_types(nodes, choices, static=set(), outputs={"v2"})
    inserted = [t for ts in a.before.values() for t in ts] + a.after
    assert len(inserted) == transforms and all(t.op_type == TRANSFORM_OP for t in inserted)
    for i, (node, k) in enumerate(zip(a.nodes, a.kernels)):
        assert k.layout == ("NHWC" if prefs[i] == "H" and transforms else "NCHW")
        # every input a node reads is available in the layout its kernel reads
        for j, v in enumerate(node.inputs):
            assert v.endswith("@NHWC") == (k.input_layout(j) == "NHWC")
    # the graph output v2 exists in NCHW: the last node writes it, or a transform does
    assert a.nodes[-1].outputs == ["v2"] or a.after[-1].outputs == ["v2"]
    assert "x" not in a.layouts


def test_value_transformed_once_for_several_consumers_and_weights_untouched():
    nchw, nhwc = _kdef("Add", "NCHW"), _kdef("Add", "NHWC", preference=-5, ins=("NHWC", None), outs=("NHWC",))
    nodes = [Node("Add", ["x", "w"], ["a"], name="a"), Node("Add", ["x", "w"], ["b"], name="b"),
             Node("Add", ["a", "b"], ["y"], name="y")]
    a = assign_kernel_types(nodes, [[nchw, nhwc]] * 2 + [[nchw]], static={"w"}, outputs={"y"})
    assert [len(a.before.get(i, [])) for i in range(3)] == [1, 0, 2]  # x once; a and b back for the NCHW add
    assert a.nodes[1].inputs == ["x@NHWC", "w"] and a.nodes[2].inputs == ["a", "b"]
    assert a.layouts == {"x@NHWC": "NHWC", "a@NHWC": "NHWC", "b@NHWC": "NHWC"}


def _conv_relu_model():
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((5, 6, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="r1"),
             helper.make_node("Sigmoid", ["r1"], ["r2"], name="r2"),
             helper.make_node("Conv", ["r2", "w2"], ["y"], name="c2"),
             helper.make_node("Relu", ["r2"], ["z"], name="r3")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 7, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _nhwc_unary(fn):
    """A channels-last (or blocked) kernel of an element-wise op: checks it really gets NHWC arrays."""
    def impl(x, *, out):
        assert x.shape == out.shape and x.shape[-1] in (6, 8)  # channels last / a block of 8
        fn(x, out=out)
    return impl


@pytest.mark.parametrize("layout", ["NHWC", "NCHW8c"])
@pytest.mark.parametrize("optimization", [Optimization.NONE, Optimization.MEMORY])
def test_net_runs_mixed_layouts_like_onnxruntime(layout, optimization, lanes8):
    model = _conv_relu_model()
    x = np.random.default_rng(1).standard_normal((2, 3, 7, 5)).astype(np.float32)
    program = Program(load_onnx(model))
    for st in program.steps:
        if st.node.op_type in ("Relu", "Sigmoid"):
            fn = (lambda a, out: np.maximum(a, 0, out=out)) if st.node.op_type == "Relu" else (lambda a, out: np.divide(1, 1 + np.exp(-a), out=out))
            alt = dataclasses.replace(st.kernel, layout=layout, impl=_nhwc_unary(fn), preference=-2,
                                      supports=lambda ctx: len(ctx.shape(0)) == 4)
            st.alternatives = (alt,)
    net = Net(program, optimization=optimization)
    net.forward(x)
    ops = [n.op_type for n in net.layout.run_nodes]
    assert ops == ["Conv", TRANSFORM_OP, "Relu", "Sigmoid", TRANSFORM_OP, "Conv", "Relu", TRANSFORM_OP]
    ref = run_ort(model, {"x": x})
    for name, r in zip(["y", "z"], ref):
        assert net.blob_by_name(name).shape == r.shape  # graph outputs in the model's layout
        np.testing.assert_allclose(net.blob_by_name(name), r, rtol=1e-5, atol=1e-5)
    if optimization is Optimization.MEMORY:
        plan = net.memory_plan
        assert plan.arena_bytes <= plan.lower_bound_bytes + 64 * len(ops)
        before = net.arena_bytes
        outs = np.array(net.blob_by_name("y"))
        none = Net(program, optimization=Optimization.NONE)
        none.forward(x)
        np.testing.assert_array_equal(outs, none.blob_by_name("y"))  # MEMORY bit-identical to NONE
        net.forward(x)
        assert net.arena_bytes == before


@pytest.mark.parametrize("layout", ["NHWC", "NCHW4c", "NCHW8c"])
@pytest.mark.parametrize("shape", [(1, 3, 4, 5), (2, 9, 3, 2), (2, 8, 1, 1, 3)])
def test_transform_kernel_round_trips(layout, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    p = np.full(physical_shape(shape, layout), np.nan, np.float32)
    find(TRANSFORM_OP, "pooled_predictor", 1, "cpu").impl(x, out=p, src="NCHW", dst=layout)
    assert not np.isnan(p).any()  # padding channels of a block are zero, not garbage
    back = np.empty_like(x)
    transform(p, layout, "NCHW", back)
    np.testing.assert_array_equal(back, x)
    if layout == "NHWC":
        np.testing.assert_array_equal(logical_view(p, layout), x)
    assert typed_name("v", layout) == f"v@{layout}" and typed_name("v", "NCHW") == "v"


def test_registry_keys_kernels_by_layout():
    from pooled_predictor.ops.registry import candidates, kernel

    @kernel("LayoutTestOp", since=1, domain="test.layouts")
    def nchw(x, *, out):
        np.copyto(out, x)

    @kernel("LayoutTestOp", since=1, domain="test.layouts", layout="NHWC", preference=-1,
            supports=lambda ctx: len(ctx.shape(0)) == 4)
    def nhwc(x, *, out):
        np.copyto(out, x)

    with pytest.raises(ValueError, match="registered twice"):
        kernel("LayoutTestOp", since=1, domain="test.layouts", layout="NHWC", supports=bool)(nhwc)
    with pytest.raises(ValueError, match="supports"):
        kernel("LayoutTestOp", since=1, domain="test.layouts", layout="NCHW8c")
    found = candidates("LayoutTestOp", "test.layouts", 1, "cpu")
    assert [k.layout for k in found] == ["NCHW", "NHWC"] and [k.impl for k in found] == [nchw, nhwc]
    assert find("LayoutTestOp", "test.layouts", 1, "cpu").impl is nchw  # the default: ONNX's layout
    assert find("LayoutTestOp", "test.layouts", 1, "cpu", "NHWC").input_layout(0) == "NHWC"
