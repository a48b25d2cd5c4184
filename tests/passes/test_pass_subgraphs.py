"""The passes inside Loop bodies (passes/subgraphs.py): captured weights baked into bodies, fusion inside a
Loop body where it is legal and not where a body output or another node reads an intermediate, If branches
left as imported, nesting, a body whose passes fail; results against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

from pooled_predictor import Predictor
from pooled_predictor.importers import load_onnx
from pooled_predictor.ir import Subgraph
from pooled_predictor.passes import optimize
from pooled_predictor.passes.base import Pass, PassContext
from pooled_predictor.passes.subgraphs import optimize_bodies
from tests.onnx_helpers import assert_close, run_ort

F = TP.FLOAT
H = 16


def vi(name, elem=F, shape=None):
    return oh.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), opset=17):
    m = oh.make_model(oh.make_graph(nodes, "g", inputs, outputs, list(inits)),
                      opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def weights(rng):
    s = 1 / np.sqrt(H)
    return [numpy_helper.from_array(rng.uniform(-s, s, (H, H)).astype(np.float32), "W"),
            numpy_helper.from_array(rng.uniform(-s, s, (1, H)).astype(np.float32), "B")]


def loop_model(body_nodes, extra_outputs=(), trips=5, outer_nodes=(), outer_inputs=(), seed=0):
    """Loop(M, "", h0) over a body computing h_out from h_in (and `extra_outputs` as more scan outputs),
    W and B captured outer initializers; scan output h_scan = h_out."""
    body = oh.make_graph(
        list(body_nodes) + [oh.make_node("Identity", ["cond_in"], ["cond_out"]),
                            oh.make_node("Identity", ["h_out"], ["h_scan"])],
        "body", [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("h_in", F, [1, H])],
        [vi("cond_out", TP.BOOL, []), vi("h_out", F, [1, H]), vi("h_scan", F, [1, H])]
        + [vi(n, F, [1, H]) for n in extra_outputs])
    inits = weights(np.random.default_rng(seed)) + [numpy_helper.from_array(np.array(trips, np.int64), "M")]
    outs = ["h", "hs"] + [f"{n}_s" for n in extra_outputs]
    nodes = list(outer_nodes) + [oh.make_node("Loop", ["M", "", "h0"], outs, body=body)]
    return model(nodes, [vi("h0", F, [1, H])] + list(outer_inputs), [vi(n, F, None) for n in outs], inits)


RNN_CELL = [oh.make_node("MatMul", ["h_in", "W"], ["hw"]), oh.make_node("Add", ["hw", "B"], ["hb"]),
            oh.make_node("Tanh", ["hb"], ["h_out"])]


def body_of(graph, op="Loop", key="body") -> Subgraph:
    return next(n for n in graph.nodes if n.op_type == op).attrs[key]


def ops(sub) -> list[str]:
    return [n.op_type for n in sub.nodes]


def check_against_ort(m, feeds, rtol=1e-6):
    p = Predictor(m.SerializeToString())
    names = [o.name for o in m.graph.output]
    for name, ours, ref in zip(names, p.run(names, feeds), run_ort(m, feeds)):
        assert_close(ours, ref, rtol, name)


def h0():
    return {"h0": np.random.default_rng(1).standard_normal((1, H)).astype(np.float32)}


def test_captured_weights_become_body_weights_and_the_cell_fuses():
    m = loop_model(RNN_CELL)
    g = load_onnx(m)
    opt, report = optimize(g, "all")
    body = body_of(opt)
    assert ops(body)[0] == "FusedGemm" and body.nodes[0].attrs["activation"] == "Tanh"
    assert "MatMul" not in ops(body) and "Tanh" not in ops(body)
    assert set(body.weights) == {"W", "B"} and body.captures == ()
    assert body.weights["W"] is g.weights["W"]  # shared, not copied
    loop = next(n for n in opt.nodes if n.op_type == "Loop")
    assert loop.inputs == ["M", "", "h0"]
    assert "W" not in opt.weights and "B" not in opt.weights  # read by nobody outside any more
    changes = report["optimize_bodies"].changes
    assert changes["captured weights baked into bodies"] == 2
    assert changes["in bodies: Gemm+Tanh fused"] == 1
    # the caller's graph is untouched
    orig = body_of(g)
    assert ops(orig) == ["MatMul", "Add", "Tanh", "Identity", "Identity"] and orig.captures == ("W", "B")
    assert next(n for n in g.nodes if n.op_type == "Loop").inputs == ["M", "", "h0", "W", "B"]
    check_against_ort(m, h0())


def test_level_none_and_disabled_pass_leave_bodies_alone():
    g = load_onnx(loop_model(RNN_CELL))
    for opt, _ in (optimize(g, "none"), optimize(g, "all", disable=["optimize_bodies"])):
        assert ops(body_of(opt))[:3] == ["MatMul", "Add", "Tanh"]
        assert body_of(opt).captures == ("W", "B")


def test_no_activation_fusion_when_the_intermediate_is_a_body_output():
    """hb is also a scan output: Gemm + Tanh must stay two nodes (MatMul + Add still fuse into the Gemm)."""
    m = loop_model(RNN_CELL, extra_outputs=["hb"])
    opt, _ = optimize(load_onnx(m), "all")
    assert ops(body_of(opt))[:2] == ["Gemm", "Tanh"]
    check_against_ort(m, h0())


def test_no_fusion_when_the_product_is_read_by_another_node():
    """hw is read by the Add and by a Mul: MatMul + Add stays unfused."""
    cell = RNN_CELL + [oh.make_node("Mul", ["hw", "hw"], ["sq"])]
    m = loop_model(cell, extra_outputs=["sq"])
    opt, _ = optimize(load_onnx(m), "all")
    assert "MatMul" in ops(body_of(opt)) and "Gemm" not in ops(body_of(opt))
    check_against_ort(m, h0())


def test_a_computed_capture_stays_a_capture():
    """B = Relu(b_in) is computed outside the Loop (fed at forward): the body keeps reading it through its
    capture; W (an initializer) is baked in."""
    cell = [oh.make_node("MatMul", ["h_in", "W"], ["hw"]), oh.make_node("Add", ["hw", "Bc"], ["hb"]),
            oh.make_node("Tanh", ["hb"], ["h_out"])]
    m = loop_model(cell, outer_nodes=[oh.make_node("Relu", ["b_in"], ["Bc"])],
                   outer_inputs=[vi("b_in", F, [1, H])])
    opt, _ = optimize(load_onnx(m), "all")
    body = body_of(opt)
    assert body.captures == ("Bc",) and "W" in body.weights and "MatMul" in ops(body)
    assert next(n for n in opt.nodes if n.op_type == "Loop").inputs == ["M", "", "h0", "Bc"]
    feeds = h0()
    feeds["b_in"] = np.random.default_rng(2).standard_normal((1, H)).astype(np.float32)
    check_against_ort(m, feeds)


def if_model():
    """y = If(c, Tanh(x @ W + B), x @ W - B): both branches capture W and B, the then branch also x."""
    then_g = oh.make_graph([oh.make_node("MatMul", ["x", "W"], ["t0"]), oh.make_node("Add", ["t0", "B"], ["t1"]),
                            oh.make_node("Tanh", ["t1"], ["t2"])], "then", [], [vi("t2", F, [1, H])])
    else_g = oh.make_graph([oh.make_node("MatMul", ["x", "W"], ["e0"]), oh.make_node("Sub", ["e0", "B"], ["e1"])],
                           "else", [], [vi("e1", F, [1, H])])
    return model([oh.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                 [vi("c", TP.BOOL, []), vi("x", F, [1, H])], [vi("y", F, [1, H])], weights(np.random.default_rng(3)))


@pytest.mark.parametrize("c", [True, False])
def test_if_branches_are_left_as_imported(c):
    """If branches are not optimized (subgraphs.ITERATED says why): their captures stay, and the model runs
    as onnxruntime does."""
    m = if_model()
    opt, report = optimize(load_onnx(m), "all")
    node = opt.nodes[0]
    then_b, else_b = node.attrs["then_branch"], node.attrs["else_branch"]
    assert node.inputs == ["c", "x", "W", "B"] and then_b.captures == else_b.captures == ("x", "W", "B")
    assert ops(then_b) == ["MatMul", "Add", "Tanh"] and not report["optimize_bodies"].changed
    check_against_ort(m, {"c": np.array(c), "x": np.random.default_rng(4).standard_normal((1, H)).astype(np.float32)})


def test_a_loop_inside_an_if_branch_is_left_as_imported():
    """The If's branches are not entered: a Loop nested in one keeps its captures too."""
    loop = next(n for n in loop_model(RNN_CELL).graph.node if n.op_type == "Loop")
    then_g = oh.make_graph([loop], "then", [], [vi("h", F, [1, H]), vi("hs", F, None)])
    else_g = oh.make_graph([oh.make_node("Identity", ["h0"], ["e0"]), oh.make_node("Unsqueeze", ["h0", "ax"], ["e1"])],
                           "else", [], [vi("e0", F, [1, H]), vi("e1", F, None)])
    inits = weights(np.random.default_rng(0)) + [numpy_helper.from_array(np.array(5, np.int64), "M"),
                                                 numpy_helper.from_array(np.array([0], np.int64), "ax")]
    m = model([oh.make_node("If", ["c"], ["y", "ys"], then_branch=then_g, else_branch=else_g)],
              [vi("c", TP.BOOL, []), vi("h0", F, [1, H])], [vi("y", F, [1, H]), vi("ys", F, None)], inits)
    opt, _ = optimize(load_onnx(m), "all")
    inner = body_of(opt.nodes[0].attrs["then_branch"])
    assert inner.captures == ("W", "B") and ops(inner)[:3] == ["MatMul", "Add", "Tanh"]
    check_against_ort(m, {"c": np.array(True), **h0()})


def test_nested_bodies_get_the_weight_two_levels_down():
    """A Loop inside a Loop body; the inner body reads the outer graph's W and B."""
    inner = oh.make_graph(RNN_CELL + [oh.make_node("Identity", ["cond_in"], ["cond_out"])], "inner",
                          [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("h_in", F, [1, H])],
                          [vi("cond_out", TP.BOOL, []), vi("h_out", F, [1, H])])
    outer = oh.make_graph([oh.make_node("Loop", ["M", "", "g_in"], ["g_out"], body=inner),
                           oh.make_node("Identity", ["c_in"], ["c_out"])], "outer",
                          [vi("j", TP.INT64, []), vi("c_in", TP.BOOL, []), vi("g_in", F, [1, H])],
                          [vi("c_out", TP.BOOL, []), vi("g_out", F, [1, H])])
    inits = weights(np.random.default_rng(5)) + [numpy_helper.from_array(np.array(3, np.int64), "M"),
                                                 numpy_helper.from_array(np.array(2, np.int64), "N")]
    m = model([oh.make_node("Loop", ["N", "", "h0"], ["h"], body=outer)], [vi("h0", F, [1, H])], [vi("h", F, [1, H])],
              inits)
    opt, _ = optimize(load_onnx(m), "all")
    ob = body_of(opt)
    ib = body_of(ob)
    assert ob.captures == () and set(ob.weights) >= {"M"} and ib.captures == ()
    assert ops(ib)[0] == "FusedGemm" and ib.weights["W"].shape == (H, H)
    check_against_ort(m, h0())


def test_a_body_whose_passes_fail_is_kept_as_imported():
    g = load_onnx(loop_model(RNN_CELL))
    g2 = g.copy()

    def boom(graph, ctx):
        raise RuntimeError("no pass foresaw this body")

    ctx = PassContext()
    changes = optimize_bodies(g2, ctx, (Pass("boom", "basic", boom),))
    loop = next(n for n in g2.nodes if n.op_type == "Loop")
    assert changes == {} and loop.inputs == ["M", "", "h0", "W", "B"]
    assert loop.attrs["body"] is body_of(g)
    assert any("body passes failed" in n and "no pass foresaw" in n for n in ctx.notes)
