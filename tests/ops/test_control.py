"""If, Loop and Scan against onnxruntime: captures, nesting, carried values, scan axes, dynamic trip counts."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

from pooled_predictor import Config, PooledPredictor, Predictor
from pooled_predictor.importers import load_onnx
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.passes import optimize
from pooled_predictor.engine.program import Program
from tests.onnx_helpers import assert_close, run_ort

F = TP.FLOAT


def vi(name, elem=F, shape=None):
    return oh.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = oh.make_graph(nodes, "cf", inputs, outputs, list(inits))
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def compare(m, feeds, optimization=Optimization.MEMORY, rtol=1e-6):
    ref = run_ort(m, feeds)
    net = Net(Program(load_onnx(m)), optimization=optimization)
    net.forward(feeds)
    for name, r in zip(net.output_names, ref):
        assert_close(net.blob_by_name(name), r, rtol, name)
    return net


def const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


# ---- If ------------------------------------------------------------------------------
def if_model(opset=17):
    """y = If(sum(x) > 0, x * w + b (captures x, w, b), x - b) where b = Relu(x2) is computed outside."""
    then_g = oh.make_graph([oh.make_node("Mul", ["x", "w"], ["t0"]), oh.make_node("Add", ["t0", "b"], ["t1"])],
                           "then", [], [vi("t1")])
    else_g = oh.make_graph([oh.make_node("Sub", ["x", "b"], ["e0"])], "else", [], [vi("e0")])
    nodes = [oh.make_node("Relu", ["x2"], ["b"]),
             oh.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             oh.make_node("Greater", ["s", "zero"], ["c"]),
             oh.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    return model(nodes, [vi("x", F, [2, 3]), vi("x2", F, [2, 3])], [vi("y", F, [2, 3])],
                 [const("w", np.arange(6, dtype=np.float32).reshape(2, 3)), const("zero", np.float32(0))], opset)


@pytest.mark.parametrize("opset", [10, 11, 13, 16, 19, 21])
@pytest.mark.parametrize("sign", [1, -1])
def test_if_with_captures(opset, sign):
    rng = np.random.default_rng(0)
    x = np.abs(rng.standard_normal((2, 3))).astype(np.float32) * sign
    net = compare(if_model(opset), {"x": x, "x2": rng.standard_normal((2, 3)).astype(np.float32)})
    assert not net.has_dynamic_shapes  # both branches give (2, 3): planned, not per forward


def test_if_branches_with_different_shapes_run_per_forward():
    then_g = oh.make_graph([oh.make_node("Concat", ["x", "x"], ["t"], axis=0)], "then", [], [vi("t")])
    else_g = oh.make_graph([oh.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e")])
    m = model([oh.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
              [vi("c", TP.BOOL, []), vi("x", F, [2, 3])], [vi("y", F, None)])
    x = np.ones((2, 3), np.float32)
    for c in (True, False):
        net = compare(m, {"c": np.array(c), "x": x})
        assert net.has_dynamic_shapes


# ---- Loop ----------------------------------------------------------------------------
def loop_model(trip_input=True, cond_input=True, opset=17, stop_on_limit=True):
    """acc_{i+1} = acc_i * a + i (a captured from outside); keep going while sum(acc) < limit
    (or, without stop_on_limit, the body passes its condition through). Scan output: acc_i + a."""
    body = oh.make_graph(
        [oh.make_node("Cast", ["i"], ["fi"], to=F),
         oh.make_node("Mul", ["acc_in", "a"], ["m"]),
         oh.make_node("Add", ["m", "fi"], ["acc_out"]),
         oh.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
         oh.make_node("Less", ["s", "limit"], ["cond_out"]) if stop_on_limit else
         oh.make_node("Identity", ["cond_in"], ["cond_out"]),
         oh.make_node("Add", ["acc_in", "a"], ["scan_out"])],
        "body", [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("acc_in", F, [3])],
        [vi("cond_out", TP.BOOL, []), vi("acc_out", F, [3]), vi("scan_out", F, [3])])
    inputs = [vi("x", F, [3]), vi("a0", F, [3]), vi("limit", F, [])]
    if trip_input:
        inputs.append(vi("M", TP.INT64, []))
    if cond_input:
        inputs.append(vi("c", TP.BOOL, []))
    nodes = [oh.make_node("Abs", ["a0"], ["a"]),
             oh.make_node("Loop", ["M" if trip_input else "", "c" if cond_input else "", "x"],
                          ["final", "scans"], body=body)]
    return model(nodes, inputs, [vi("final", F, [3]), vi("scans", F, None)], opset=opset)


@pytest.mark.parametrize("opset", [10, 11, 13, 16, 19, 21])
@pytest.mark.parametrize("trips,limit", [(5, 1e9), (10, 20.0), (0, 1e9), (4, -1.0)])
def test_loop_dynamic_trip_count_and_condition(opset, trips, limit):
    feeds = {"x": np.array([0.5, -1.0, 2.0], np.float32), "a0": np.array([1.5, -0.5, 1.1], np.float32),
             "limit": np.array(limit, np.float32), "M": np.array(trips, np.int64), "c": np.array(True)}
    compare(loop_model(opset=opset), feeds)


def test_loop_while_form_and_for_form():
    feeds = {"x": np.array([0.5, 1.0, 2.0], np.float32), "a0": np.array([1.5, 0.5, 1.1], np.float32),
             "limit": np.array(30.0, np.float32)}
    compare(loop_model(trip_input=False), {**feeds, "c": np.array(True)})  # while sum < limit
    compare(loop_model(cond_input=False), {**feeds, "M": np.array(6, np.int64)})  # body's condition ignored


def test_loop_captures_change_between_forwards():
    """One Net, forwards with other captured values and carried inputs: each outer run copies the
    captures into the body once (BodyRun.invalidate), each iteration the formal inputs."""
    m = loop_model()
    net = Net(Program(load_onnx(m)))
    for k, (x, limit) in enumerate([([0.5, 1.0, 2.0], 1e9), ([2.0, -1.0, 0.25], 1e9), ([0.5, 1.0, 2.0], 12.0)]):
        feeds = {"x": np.array(x, np.float32), "a0": np.array([1.5, 0.5, 1.1], np.float32) * (k + 1),
                 "limit": np.array(limit, np.float32), "M": np.array(9, np.int64), "c": np.array(True)}
        net.forward(feeds)
        for name, r in zip(net.output_names, run_ort(m, feeds)):
            assert_close(net.blob_by_name(name), r, 1e-6, name)


def test_loop_with_static_trip_count_is_planned():
    """M a weight and no cond: output shapes are static, the node is planned (no per-forward allocation)."""
    m = loop_model(trip_input=False, cond_input=False, stop_on_limit=False)
    m.graph.node[1].input[0] = "M"
    m.graph.initializer.append(const("M", np.int64(7)))
    net = compare(m, {"x": np.ones(3, np.float32), "a0": np.full(3, 0.9, np.float32), "limit": np.array(0, np.float32)})
    assert not net.has_dynamic_shapes and net.output_shapes["scans"] == (7, 3)


def test_loop_carried_value_that_grows():
    """A carried tensor that grows by one row per iteration (shapes known only by running)."""
    body = oh.make_graph(
        [oh.make_node("Concat", ["rows_in", "x"], ["rows_out"], axis=0),
         oh.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("rows_in", F, None)],
        [vi("cond_out", TP.BOOL, []), vi("rows_out", F, None)])
    m = model([oh.make_node("Loop", ["M", "", "r0"], ["rows"], body=body)],
              [vi("M", TP.INT64, []), vi("r0", F, [1, 2]), vi("x", F, [1, 2])], [vi("rows", F, None)])
    compare(m, {"M": np.array(4, np.int64), "r0": np.zeros((1, 2), np.float32), "x": np.ones((1, 2), np.float32)})


# ---- Scan ----------------------------------------------------------------------------
def scan_model(opset, in_axis, in_dir, out_axis, out_dir):
    """Running sum over the scan axis, with a captured scale: state += x_t * scale; outputs state and x_t."""
    body = oh.make_graph(
        [oh.make_node("Mul", ["x_t", "scale"], ["xs"]),
         oh.make_node("Add", ["s_in", "xs"], ["s_out"]),
         oh.make_node("Identity", ["s_out"], ["y_t"])],
        "body", [vi("s_in", F, [2]), vi("x_t", F, [2])], [vi("s_out", F, [2]), vi("y_t", F, [2])])
    attrs = dict(num_scan_inputs=1, scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                 scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    nodes = [oh.make_node("Sqrt", ["k"], ["scale"]),
             oh.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, **attrs)]
    x_shape = [4, 2] if in_axis in (0, -2) else [2, 4]
    return model(nodes, [vi("s0", F, [2]), vi("x", F, x_shape), vi("k", F, [2])],
                 [vi("s", F, [2]), vi("ys", F, None)], opset=opset)


SCAN_AXES = [(0, 0, 0, 0), (1, 1, 1, 0), (0, 1, 1, 1), (-1, 0, -1, 1), (-2, 1, 0, 1)]


@pytest.mark.parametrize("opset,in_axis,in_dir,out_axis,out_dir",
                         [(o, *a) for o in (9, 11, 16, 21) for a in SCAN_AXES
                          if o >= 11 or min(a[0], a[2]) >= 0])  # negative axes from Scan-11
def test_scan_axes_and_directions(opset, in_axis, in_dir, out_axis, out_dir):
    rng = np.random.default_rng(1)
    m = scan_model(opset, in_axis, in_dir, out_axis, out_dir)
    x = rng.standard_normal([d.dim_value for d in m.graph.input[1].type.tensor_type.shape.dim])
    net = compare(m, {"s0": np.array([1.0, -1.0], np.float32), "x": x.astype(np.float32),
                      "k": np.array([4.0, 9.0], np.float32)})
    assert not net.has_dynamic_shapes


# ---- nesting -------------------------------------------------------------------------
def nested_model():
    """Loop (4 iterations) whose body holds an If whose then-branch holds a Scan; the Scan's body reads
    `w` (two scopes up) and `v_in` (the loop's carried value, one scope up)."""
    scan_body = oh.make_graph(
        [oh.make_node("Mul", ["x_t", "w"], ["xw"]), oh.make_node("Add", ["xw", "v_in"], ["y0"]),
         oh.make_node("Add", ["st_in", "y0"], ["st_out"])],
        "scan_body", [vi("st_in", F, [3]), vi("x_t", F, [3])], [vi("st_out", F, [3]), vi("y0", F, [3])])
    then_g = oh.make_graph(
        [oh.make_node("Scan", ["v_in", "seq"], ["t_state", "t_ys"], body=scan_body, num_scan_inputs=1),
         oh.make_node("ReduceMean", ["t_ys"], ["t_mean"], axes=[0], keepdims=0),
         oh.make_node("Add", ["t_state", "t_mean"], ["t_out"])],
        "then", [], [vi("t_out", F, [3])])
    else_g = oh.make_graph([oh.make_node("Mul", ["v_in", "w"], ["e_out"])], "else", [], [vi("e_out", F, [3])])
    body = oh.make_graph(
        [oh.make_node("Cast", ["i"], ["fi"], to=F),
         oh.make_node("Less", ["fi", "half"], ["early"]),
         oh.make_node("If", ["early"], ["v_out"], then_branch=then_g, else_branch=else_g),
         oh.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("v_in", F, [3])],
        [vi("cond_out", TP.BOOL, []), vi("v_out", F, [3])])
    nodes = [oh.make_node("Tanh", ["w0"], ["w"]),
             oh.make_node("Loop", ["M", "", "v0"], ["v"], body=body)]
    return model(nodes, [vi("v0", F, [3]), vi("seq", F, [5, 3]), vi("w0", F, [3])], [vi("v", F, [3])],
                 [const("M", np.array(4, np.int64)), const("half", np.float32(2.0))])


def nested_feeds(seed=0):
    rng = np.random.default_rng(seed)
    return {"v0": rng.standard_normal(3).astype(np.float32), "seq": rng.standard_normal((5, 3)).astype(np.float32),
            "w0": rng.standard_normal(3).astype(np.float32)}


@pytest.mark.parametrize("optimization", [Optimization.MEMORY, Optimization.NONE])
def test_nested_twice_with_captures_from_two_scopes_up(optimization):
    compare(nested_model(), nested_feeds(), optimization)


def test_captures_are_node_inputs_and_survive_the_passes():
    graph = load_onnx(nested_model())
    loop = next(n for n in graph.nodes if n.op_type == "Loop")
    assert loop.inputs[3:] == ["half", "w", "seq"]  # captured from the outer graph (the body's reads)
    inner_if = next(n for n in loop.attrs["body"].nodes if n.op_type == "If")
    assert set(inner_if.inputs[1:]) == {"v_in", "seq", "w"}
    optimized, _ = optimize(graph, "all")
    m = nested_model()
    feeds = nested_feeds(3)
    ref = run_ort(m, feeds)
    net = Net(Program(optimized))
    net.forward(feeds)
    assert_close(net.blob_by_name("v"), ref[0], 1e-6)


def test_identity_before_a_capture_is_removed_and_the_capture_renamed():
    then_g = oh.make_graph([oh.make_node("Neg", ["xi"], ["t"])], "then", [], [vi("t")])
    else_g = oh.make_graph([oh.make_node("Abs", ["xi"], ["e"])], "else", [], [vi("e")])
    m = model([oh.make_node("Identity", ["x"], ["xi"]),
               oh.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
              [vi("c", TP.BOOL, []), vi("x", F, [4])], [vi("y", F, [4])])
    graph, report = optimize(load_onnx(m), "all")
    assert [n.op_type for n in graph.nodes] == ["If"] and graph.nodes[0].inputs == ["c", "x"]
    for c in (True, False):
        feeds = {"c": np.array(c), "x": np.array([1, -2, 3, -4], np.float32)}
        net = Net(Program(graph))
        net.forward(feeds)
        assert_close(net.blob_by_name("y"), run_ort(m, feeds)[0], 0)


def test_if_on_constants_is_folded():
    then_g = oh.make_graph([oh.make_node("Add", ["k", "k"], ["t"])], "then", [], [vi("t")])
    else_g = oh.make_graph([oh.make_node("Sub", ["k", "k"], ["e"])], "else", [], [vi("e")])
    m = model([oh.make_node("If", ["c"], ["kk"], then_branch=then_g, else_branch=else_g),
               oh.make_node("Mul", ["x", "kk"], ["y"])],
              [vi("x", F, [2])], [vi("y", F, [2])], [const("c", np.array(True)), const("k", np.float32([1, 2]))])
    graph, _ = optimize(load_onnx(m), "basic")
    assert [n.op_type for n in graph.nodes] == ["Mul"]
    net = Net(Program(graph))
    net.forward({"x": np.float32([3, 4])})
    np.testing.assert_array_equal(net.blob_by_name("y"), [6, 16])


# ---- through the pool ----------------------------------------------------------------
def test_nested_control_flow_through_the_pool():
    """Many jobs on two workers: each worker's body Nets are its own (thread-local)."""
    m = nested_model()
    feeds = [nested_feeds(s) for s in range(24)]
    refs = [run_ort(m, f)[0] for f in feeds]
    with PooledPredictor(Config(model_bytes=[m.SerializeToString()], num_threads=2)) as pool:
        futures = [pool.forward(f) for f in feeds]
        for f, r in zip(futures, refs):
            assert_close(f.result(timeout=60)["v"], r, 1e-6)
    loop = loop_model()
    pred = Predictor(loop.SerializeToString())
    f = {"x": np.array([0.5, 1.0, 2.0], np.float32), "a0": np.array([1.5, 0.5, 1.1], np.float32),
         "limit": np.array(40.0, np.float32), "M": np.array(9, np.int64), "c": np.array(True)}
    for name, ours, ref in zip(["final", "scans"], pred.run(None, f), run_ort(loop, f)):
        assert_close(ours, ref, 1e-6, name)


def test_unsupported_op_inside_a_body_is_reported_at_compile():
    from pooled_predictor.errors import UnsupportedOpError

    inner = oh.make_graph([oh.make_node("Frobnicate", ["x"], ["t"], domain="com.example")], "then", [], [vi("t")])
    outer_then = oh.make_graph([oh.make_node("If", ["c"], ["u"], then_branch=inner, else_branch=inner)],
                               "then", [], [vi("u")])
    g = oh.make_graph([oh.make_node("If", ["c"], ["y"], then_branch=outer_then, else_branch=outer_then)], "cf",
                      [vi("c", TP.BOOL, []), vi("x", F, [2])], [vi("y", F, [2])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.example", 1)])
    graph = load_onnx(m)  # the importer does not look at kernels; Program does
    with pytest.raises(UnsupportedOpError, match="Frobnicate"):
        Program(graph)


def test_body_memory_is_planned_once_and_reused():
    """The Loop body runs as a nested Net under Optimization.MEMORY: one layout for all iterations."""
    from pooled_predictor.engine.net import BODIES
    from pooled_predictor.ops.shapes.control import TRUE

    m = loop_model()
    net = Net(Program(load_onnx(m)))
    feeds = {"x": np.array([0.5, 1.0, 2.0], np.float32), "a0": np.array([1.5, 0.5, 1.1], np.float32),
             "limit": np.array(1e9, np.float32), "M": np.array(20, np.int64), "c": np.array(True)}
    net.forward(feeds)
    loop = next(n for n in net.program.graph.nodes if n.op_type == "Loop")
    body = loop.attrs["body"]
    assert body.captures == ("a", "limit")
    run = BODIES(body, "cpu", [np.int64, np.bool_] + [np.float32] * 3, None, {1: TRUE})
    built = run.net.layouts_built
    net.forward(feeds)
    assert run.net.memory_plan is not None and run.net.layouts_built == built


def test_body_nets_are_released_with_the_model():
    """The thread-local body Nets are keyed weakly by their Subgraph: dropping the model frees them."""
    import gc
    import weakref

    m = nested_model()
    net = Net(Program(load_onnx(m)))
    net.forward(nested_feeds())
    body = weakref.ref(next(n for n in net.program.graph.nodes if n.op_type == "Loop").attrs["body"])
    del net
    gc.collect()
    assert body() is None



@pytest.mark.parametrize("directions,lens", [([0, 0], None), ([1, 0], [3, 2]), ([0, 1], [1, 4])])
def test_scan8_batch_axis_directions_and_sequence_lens(directions, lens):
    """Scan-8: batch axis in front, per-input directions, sequence_lens (outputs zero past them)."""
    body = oh.make_graph(
        [oh.make_node("Mul", ["a_t", "scale"], ["as"]), oh.make_node("Add", ["s_in", "as"], ["s1"]),
         oh.make_node("Sub", ["s1", "b_t"], ["s_out"]), oh.make_node("Identity", ["s_out"], ["y_t"])],
        "body", [vi("s_in", F, [2]), vi("a_t", F, [2]), vi("b_t", F, [2])],
        [vi("s_out", F, [2]), vi("y_t", F, [2])])
    inputs = [vi("s0", F, [2, 2]), vi("a", F, [2, 4, 2]), vi("b", F, [2, 4, 2]), vi("k", F, [2])]
    node_inputs = ["", "s0", "a", "b"]
    if lens is not None:
        inputs.append(vi("lens", TP.INT64, [2]))
        node_inputs[0] = "lens"
    m = model([oh.make_node("Exp", ["k"], ["scale"]),
               oh.make_node("Scan", node_inputs, ["s", "ys"], body=body, num_scan_inputs=2,
                            directions=directions)],
              inputs, [vi("s", F, [2, 2]), vi("ys", F, [2, 4, 2])], opset=8)
    rng = np.random.default_rng(2)
    feeds = {"s0": rng.standard_normal((2, 2)).astype(np.float32),
             "a": rng.standard_normal((2, 4, 2)).astype(np.float32),
             "b": rng.standard_normal((2, 4, 2)).astype(np.float32), "k": np.array([0.1, -0.2], np.float32)}
    if lens is not None:
        feeds["lens"] = np.array(lens, np.int64)
    compare(m, feeds)


# ---- prepared control flow (issue 34: bodies bound once per layout) -------------------------
def test_if_whose_other_branch_rejects_the_shapes_is_planned_and_raises_when_chosen():
    """As silero-vad's 8 kHz branch on a 16 kHz chunk: the else-branch Reshapes x to [2, 3], which a
    [4] x cannot take. The node is planned from the then-branch (not per forward), and choosing the
    else-branch at forward raises the typed shape error that branch meets (onnxruntime fails too)."""
    from pooled_predictor.errors import ShapeInferenceError

    then_g = oh.make_graph([oh.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", F, [4])])
    else_g = oh.make_graph([oh.make_node("Reshape", ["x", "shape"], ["e"])], "else", [], [vi("e", F, None)])
    m = model([oh.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
              [vi("c", TP.BOOL, []), vi("x", F, [4])], [vi("y", F, None)],
              [const("shape", np.array([2, 3], np.int64))])
    x = np.array([1, -2, 3, -4], np.float32)
    net = compare(m, {"c": np.array(True), "x": x})
    assert not net.has_dynamic_shapes and net.output_shapes["y"] == (4,)
    with pytest.raises(ShapeInferenceError):
        net.forward({"c": np.array(False), "x": x})
    net.forward({"c": np.array(True), "x": x * 2})  # the Net still runs
    np.testing.assert_array_equal(net.blob_by_name("y"), -2 * x)


def swap_loop_model():
    """Loop (M a weight) whose body swaps its two carried values and adds a captured value to one:
    (a, b) -> (b + k, a); scan outputs a and the iteration number. The carried outputs read the
    other carried input's blob: feeding them back needs a snapshot (control._LoopPlan)."""
    body = oh.make_graph(
        [oh.make_node("Add", ["b_in", "k"], ["a_out"]), oh.make_node("Identity", ["a_in"], ["a_scan"]),
         oh.make_node("Identity", ["i"], ["i_scan"]), oh.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("a_in", F, [2]), vi("b_in", F, [2])],
        [vi("cond_out", TP.BOOL, []), vi("a_out", F, [2]), vi("a_in", F, [2]), vi("a_scan", F, [2]),
         vi("i_scan", TP.INT64, [])])  # b_out is a_in itself
    nodes = [oh.make_node("Relu", ["k0"], ["k"]),
             oh.make_node("Loop", ["M", "", "a0", "b0"], ["a", "b", "as", "is"], body=body)]
    return model(nodes, [vi("a0", F, [2]), vi("b0", F, [2]), vi("k0", F, [2])],
                 [vi("a", F, [2]), vi("b", F, [2]), vi("as", F, [5, 2]), vi("is", TP.INT64, [5])],
                 [const("M", np.array(5, np.int64))])


def test_planned_loop_swapping_its_carried_values():
    rng = np.random.default_rng(5)
    feeds = {n: rng.standard_normal(2).astype(np.float32) for n in ("a0", "b0", "k0")}
    net = compare(swap_loop_model(), feeds)
    assert not net.has_dynamic_shapes
    assert any("prepare_run" in getattr(f, "__qualname__", "") for f in net.layout.run)  # the bound body
    feeds["k0"] = np.abs(feeds["k0"]) + 1  # other captures, the same Net: copied in again
    for name, r in zip(net.output_names, run_ort(swap_loop_model(), feeds)):
        net.forward(feeds)
        assert_close(net.blob_by_name(name), r, 1e-6, name)


def test_bodies_shared_by_layouts_of_other_shapes_are_bound_again():
    """One Net (one thread: one body Net per body) alternating input shapes: each outer layout's If and
    Loop prepared calls find the body at the other layout's shapes and bind it again."""
    then_g = oh.make_graph([oh.make_node("Mul", ["x", "x"], ["t"])], "then", [], [vi("t", F, None)])
    else_g = oh.make_graph([oh.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F, None)])
    body = oh.make_graph(
        [oh.make_node("Add", ["acc_in", "y"], ["acc_out"]), oh.make_node("Identity", ["cond_in"], ["cond_out"]),
         oh.make_node("Identity", ["acc_in"], ["acc_scan"])],
        "body", [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("acc_in", F, None)],
        [vi("cond_out", TP.BOOL, []), vi("acc_out", F, None), vi("acc_scan", F, None)])
    m = model([oh.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
               oh.make_node("Loop", ["M", "", "x"], ["acc", "accs"], body=body)],
              [vi("c", TP.BOOL, []), vi("x", F, ["n"])], [vi("acc", F, None), vi("accs", F, None)],
              [const("M", np.array(3, np.int64))])
    net = Net(Program(load_onnx(m)), optimization=Optimization.MEMORY)
    rng = np.random.default_rng(6)
    for n, c in [(3, True), (5, True), (3, False), (5, False), (3, True)]:
        feeds = {"c": np.array(c), "x": rng.standard_normal(n).astype(np.float32)}
        net.forward(feeds)
        assert not net.has_dynamic_shapes
        for name, r in zip(net.output_names, run_ort(m, feeds)):
            assert_close(net.blob_by_name(name), r, 1e-6, name)


@pytest.mark.parametrize("trips", [0, 1, 6])
def test_loop_run_per_forward_through_a_bound_body(trips):
    """M fed at forward (the node runs per forward, allocating): carried values keep their shapes, so
    the iterations run through the bound body (control._fast_loop); scan outputs stacked once."""
    m = swap_loop_model()
    m.graph.initializer.pop()  # M becomes an input
    m.graph.input.append(vi("M", TP.INT64, []))
    for o in m.graph.output[2:]:
        o.type.tensor_type.ClearField("shape")
    rng = np.random.default_rng(7)
    feeds = {**{n: rng.standard_normal(2).astype(np.float32) for n in ("a0", "b0", "k0")},
             "M": np.array(trips, np.int64)}
    net = compare(m, feeds)
    assert net.has_dynamic_shapes


def test_loop_run_per_forward_is_set_up_once_per_shapes(monkeypatch):
    """M fed: the node runs per forward, but its setup (the body looked up and bound: Loop.prepare_evaluate)
    is kept in the Net's memo and serves later forwards of the same input shapes, whatever M and the
    carried values are; other shapes set up again; a captured weight baked into the body is guarded by
    identity."""
    from pooled_predictor.ops.cpu import control

    calls = []
    real = control.Loop.prepare_evaluate.__func__

    def counting(cls, ctx, **attrs):
        calls.append(ctx.shapes)
        return real(cls, ctx, **attrs)

    monkeypatch.setattr(control.Loop, "prepare_evaluate", classmethod(counting))
    body = oh.make_graph(
        [oh.make_node("Mul", ["h_in", "w"], ["hm"]), oh.make_node("Tanh", ["hm"], ["h_out"]),
         oh.make_node("Identity", ["cond_in"], ["cond_out"]), oh.make_node("Identity", ["h_out"], ["h_scan"])],
        "body", [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("h_in", F, None)],
        [vi("cond_out", TP.BOOL, []), vi("h_out", F, None), vi("h_scan", F, None)])
    m = model([oh.make_node("Loop", ["M", "", "h0"], ["h", "hs"], body=body)],
              [vi("h0", F, None), vi("M", TP.INT64, [])], [vi("h", F, None), vi("hs", F, None)],
              [const("w", np.linspace(0.5, 1.5, 4, dtype=np.float32))])
    net = Net(Program(load_onnx(m)), optimization=Optimization.MEMORY)
    rng = np.random.default_rng(11)
    for trips, shape in [(3, (4,)), (5, (4,)), (1, (4,)), (2, (2, 4)), (4, (4,))]:
        feeds = {"h0": rng.standard_normal(shape).astype(np.float32), "M": np.array(trips, np.int64)}
        net.forward(feeds)
        for name, r in zip(net.output_names, run_ort(m, feeds)):
            assert_close(net.blob_by_name(name), r, 1e-6, name)
    assert len(calls) == 2  # (4,) once, (2, 4) once; (4,) again from the memo
    (entry,) = [e for memo in net.layout.memos.values() for e in memo if e.shapes[2] == (4,)]
    w = net.program.weights["w"]
    arrays = [None, None, np.zeros(4, np.float32), w]
    assert entry.own and entry.guard(arrays)
    assert not entry.guard(arrays[:3] + [w.copy()])


def test_loop_with_a_huge_trip_count_ended_by_its_condition():
    """An exporter's while loop: M = INT64_MAX, the body's condition ends it (scan outputs collected, not
    allocated for M rows)."""
    m = loop_model()
    feeds = {"x": np.array([0.5, 1.0, 2.0], np.float32), "a0": np.array([1.5, 0.5, 1.1], np.float32),
             "limit": np.array(50.0, np.float32), "M": np.array(np.iinfo(np.int64).max, np.int64),
             "c": np.array(True)}
    compare(m, feeds)


@pytest.mark.parametrize("trips_fed", [False, True])
def test_a_failing_node_of_a_loop_body_is_named(trips_fed):
    """A body's kernel that fails inside a Loop's iterations (a Gather index out of range, captured
    from the outer graph) raises KernelError naming the body's node, whether the Loop runs planned
    (its body's calls run directly by control._LoopPlan) or per forward; the Net serves the next
    forward."""
    from pooled_predictor.errors import KernelError

    body = oh.make_graph(
        [oh.make_node("Gather", ["v_in", "k"], ["g"], name="body_gather"), oh.make_node("Add", ["v_in", "g"], ["v_out"]),
         oh.make_node("Identity", ["cond_in"], ["cond_out"]), oh.make_node("Identity", ["v_out"], ["v_scan"])],
        "body", [vi("i", TP.INT64, []), vi("cond_in", TP.BOOL, []), vi("v_in", F, [4])],
        [vi("cond_out", TP.BOOL, []), vi("v_out", F, [4]), vi("v_scan", F, [4])])
    inputs = [vi("v0", F, [4]), vi("k", TP.INT64, [4])] + ([vi("M", TP.INT64, [])] if trips_fed else [])
    m = model([oh.make_node("Loop", ["M", "", "v0"], ["v", "vs"], body=body)], inputs,
              [vi("v", F, [4]), vi("vs", F, None)], [] if trips_fed else [const("M", np.array(3, np.int64))])
    feeds = {"v0": np.arange(4, dtype=np.float32), "k": np.array([3, 2, 1, 0], np.int64),
             **({"M": np.array(3, np.int64)} if trips_fed else {})}
    net = compare(m, feeds)
    assert net.has_dynamic_shapes == trips_fed
    with pytest.raises(KernelError, match="body_gather"):
        net.forward({**feeds, "k": np.array([0, 1, 2, 9], np.int64)})
    net.forward(feeds)
    for name, r in zip(net.output_names, run_ort(m, feeds)):
        assert_close(net.blob_by_name(name), r, 1e-6, name)


@pytest.mark.parametrize("optimization", [Optimization.MEMORY, Optimization.NONE])
def test_planned_if_passing_captures_through(optimization):
    """A planned If whose then branch returns a capture as it is (Identity(x)) and also x + z, and whose
    else branch returns z unread by its nodes next to Neg(x): a pass-through output is copied straight from
    the capture (control._BranchPlan), a capture no branch node reads is not copied in; every forward sees
    the new values."""
    then_g = oh.make_graph([oh.make_node("Identity", ["x"], ["t0"]), oh.make_node("Add", ["x", "z"], ["t1"])],
                           "then", [], [vi("t0", F, [3]), vi("t1", F, [3])])
    else_g = oh.make_graph([oh.make_node("Identity", ["z"], ["e0"]), oh.make_node("Neg", ["x"], ["e1"])],
                           "else", [], [vi("e0", F, [3]), vi("e1", F, [3])])
    m = model([oh.make_node("If", ["c"], ["y0", "y1"], then_branch=then_g, else_branch=else_g)],
              [vi("c", TP.BOOL, []), vi("x", F, [3]), vi("z", F, [3])], [vi("y0", F, [3]), vi("y1", F, [3])])
    rng = np.random.default_rng(12)
    net = None
    for c in (True, False, True, False):
        feeds = {"c": np.array(c), "x": rng.standard_normal(3).astype(np.float32),
                 "z": rng.standard_normal(3).astype(np.float32)}
        if net is None:
            net = compare(m, feeds, optimization)
            assert not net.has_dynamic_shapes
            continue
        net.forward(feeds)
        for name, r in zip(net.output_names, run_ort(m, feeds)):
            assert_close(net.blob_by_name(name), r, 0, name)


def test_a_failing_node_of_a_planned_if_branch_is_named():
    """A planned If runs its branch's calls directly (control.If.prepare_run): a kernel failing there
    raises KernelError naming the branch's node, and the Net serves the next forward."""
    from pooled_predictor.errors import KernelError

    then_g = oh.make_graph([oh.make_node("Gather", ["x", "k"], ["t"], name="then_gather")], "then", [],
                           [vi("t", F, [3])])
    else_g = oh.make_graph([oh.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F, [3])])
    m = model([oh.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
              [vi("c", TP.BOOL, []), vi("x", F, [3]), vi("k", TP.INT64, [3])], [vi("y", F, [3])])
    feeds = {"c": np.array(True), "x": np.arange(3, dtype=np.float32), "k": np.array([2, 0, 1], np.int64)}
    net = compare(m, feeds)
    assert not net.has_dynamic_shapes
    with pytest.raises(KernelError, match="then_gather"):
        net.forward({**feeds, "k": np.array([0, 7, 1], np.int64)})
    net.forward(feeds)
    assert_close(net.blob_by_name("y"), run_ort(m, feeds)[0], 1e-6, "y")
