"""Data-dependent output shapes (NonZero, Compress, Unique, NonMaxSuppression): such a
node's outputs are allocated per forward, what reads them runs per forward, and the rest
of the Net stays planned in its arena. Through Net, Predictor and PooledPredictor, under
Optimization.MEMORY and NONE, against onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import Config, PooledPredictor, Predictor
from pooled_predictor.errors import InputError
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.engine.program import Program
from pooled_predictor.importers import load_onnx
from tests.onnx_helpers import assert_close, run_ort

rng = np.random.default_rng(21)
N = 16
DYNAMIC_OUTPUTS = ["nz_scaled", "kept_rows", "uniq", "uniq_idx", "uniq_inv", "uniq_counts", "selected",
                   "selected_boxes"]


def detector_like_model():
    """x (N, 8), boxes (1, N, 4), scores (1, 2, N) -> a static branch and several
    data-dependent ones, each followed by ordinary kernels."""
    f = TensorProto.FLOAT
    init = [numpy_helper.from_array(np.array(v, dtype), n) for n, v, dtype in (
        ("half", 0.5, np.float32), ("zero", 0.0, np.float32), ("two", 2.0, np.float32),
        ("col0", 0, np.int64), ("max_out", [3], np.int64), ("iou", [0.4], np.float32),
        ("score_min", [0.2], np.float32), ("box_col", 2, np.int64), ("one", 1.0, np.float32))]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Sub", ["r", "half"], ["s"]),
        helper.make_node("Tanh", ["s"], ["static_out"]),          # planned, output
        helper.make_node("Greater", ["s", "zero"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["nzt"]),
        helper.make_node("Cast", ["nzt"], ["nzf"], to=f),
        helper.make_node("Mul", ["nzf", "two"], ["nz_scaled"]),
        helper.make_node("Gather", ["x", "col0"], ["first_col"], axis=1),
        helper.make_node("Greater", ["first_col", "zero"], ["row_mask"]),
        helper.make_node("Compress", ["r", "row_mask"], ["rows"], axis=0),
        helper.make_node("Add", ["rows", "one"], ["kept_rows"]),
        helper.make_node("Mul", ["x", "two"], ["x2"]),
        helper.make_node("Floor", ["x2"], ["fl"]),
        helper.make_node("Unique", ["fl"], ["uniq", "uniq_idx", "uniq_inv", "uniq_counts"], sorted=0),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_min"], ["selected"]),
        helper.make_node("Gather", ["selected", "box_col"], ["box_index"], axis=1),
        helper.make_node("Squeeze", ["boxes"], ["boxes2d"], ),
        helper.make_node("Gather", ["boxes2d", "box_index"], ["selected_boxes"], axis=0),
    ]
    inputs = [helper.make_tensor_value_info("x", f, ["n", 8]),
              helper.make_tensor_value_info("boxes", f, [1, "n", 4]),
              helper.make_tensor_value_info("scores", f, [1, 2, "n"])]
    outputs = [helper.make_empty_tensor_value_info(o) for o in ["static_out"] + DYNAMIC_OUTPUTS]
    graph = helper.make_graph(nodes, "dynamic", inputs, outputs, init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def feeds(n=N):
    corner = rng.uniform(0, 10, (1, n, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(1, 4, (1, n, 2))], axis=2).astype(np.float32)
    return {"x": rng.standard_normal((n, 8)).astype(np.float32), "boxes": boxes,
            "scores": rng.uniform(0, 1, (1, 2, n)).astype(np.float32)}


MODEL = detector_like_model()
OUTPUTS = ["static_out"] + DYNAMIC_OUTPUTS


def reference(f):
    return dict(zip(OUTPUTS, run_ort(MODEL, f)))


def check(outs, f):
    ref = reference(f)
    for name in OUTPUTS:
        assert_close(outs[name], ref[name], 1e-6, name)


@pytest.mark.parametrize("optimization", [Optimization.MEMORY, Optimization.NONE])
def test_net_plans_the_static_part(optimization):
    """The static branch is planned (arena, memory_opt plan under MEMORY); the
    data-dependent nodes and their readers run per forward; shapes change between runs."""
    net = Net(Program(load_onnx(MODEL)), optimization=optimization)
    sizes = set()
    for n in (N, N, 9, N):
        f = feeds(n)
        net.forward(f)
        check({o: net.blob_by_name(o) for o in OUTPUTS}, f)
        sizes.add(net.blob_by_name("nz_scaled").shape)
    assert len(sizes) > 1  # the data-dependent shapes did change
    assert net.has_dynamic_shapes
    assert net.output_shapes["static_out"] == (N, 8) and net.output_shapes["selected"] is None
    dynamic = {st.node.op_type for st in net.layout.dynamic}
    assert {"NonZero", "Compress", "Unique", "NonMaxSuppression", "Transpose", "Add"} <= dynamic
    assert "Tanh" not in dynamic and "Relu" not in dynamic
    if optimization is Optimization.MEMORY:
        assert net.memory_plan is not None and "static_out" in net.memory_plan.offsets
        assert "nz" not in net.memory_plan.offsets


@pytest.mark.parametrize("optimization", [Optimization.MEMORY, Optimization.NONE])
def test_predictor(optimization):
    p = Predictor(MODEL.SerializeToString(), optimization=optimization)
    for n in (N, 5):
        f = feeds(n)
        check(dict(zip(OUTPUTS, p.run(OUTPUTS, f))), f)


@pytest.mark.parametrize("optimization", [Optimization.MEMORY, Optimization.NONE])
def test_pool(optimization):
    """Many jobs of different data (and sizes) on two workers; every Future resolves."""
    config = Config(model_bytes=[MODEL.SerializeToString()], num_threads=2, optimization=optimization)
    jobs = [feeds(n) for n in (N, 7, N, 12, N, 3)]
    with PooledPredictor(config) as pool:
        futures = [pool.forward(f, OUTPUTS) for f in jobs]
        for fut, f in zip(futures, jobs):
            check(fut.result(timeout=60), f)


def test_all_static_inputs_fold():
    """NonZero of a weight is folded once at compile time: nothing dynamic is left."""
    init = numpy_helper.from_array(np.array([[1, 0], [0, 3]], np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("NonZero", ["w"], ["nz"]), helper.make_node("Cast", ["nz"], ["nzf"], to=1),
         helper.make_node("Add", ["x", "nzf"], ["y"])], "fold",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    net = Net(Program(load_onnx(model)), optimization=Optimization.MEMORY)
    x = np.ones((2, 2), np.float32)
    net.forward({"x": x})
    assert not net.has_dynamic_shapes
    np.testing.assert_array_equal(net.blob_by_name("y"), x + np.array([[0, 1], [0, 1]], np.float32))


def test_pool_error_in_a_dynamic_node_goes_to_its_future():
    """A bad value met per forward (a Compress condition with a true entry beyond the
    axis) fails that job's Future; the worker keeps serving."""
    graph = helper.make_graph(
        [helper.make_node("Compress", ["x", "c"], ["y"], axis=0)], "compress",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, ["k"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.array([1, 2, 3], np.float32)
    with PooledPredictor(Config(model_bytes=[model.SerializeToString()], num_threads=1)) as pool:
        bad = pool.forward({"x": x, "c": np.array([False, False, False, True])})
        good = pool.forward({"x": x, "c": np.array([True, False, True])})
        with pytest.raises(InputError, match="beyond the axis"):
            bad.result(timeout=60)
        np.testing.assert_array_equal(good.result(timeout=60)["y"], [1, 3])


def _slice_by_data_model():
    """x (n,) -> the positive values (NonZero, Gather), cut at an end read from the data (Slice whose
    `ends` is floor(max x)): downstream of a data-dependent shape, a setup that reads a value."""
    f, i = TensorProto.FLOAT, TensorProto.INT64
    init = [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
            numpy_helper.from_array(np.array([0], np.int64), "axes0"),
            numpy_helper.from_array(np.array([0], np.int64), "start")]
    nodes = [helper.make_node("Greater", ["x", "zero"], ["m"]),
             helper.make_node("NonZero", ["m"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "axes0"], ["idx"]),
             helper.make_node("Gather", ["x", "idx"], ["pos"], axis=0),
             helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=1),
             helper.make_node("Cast", ["mx"], ["end"], to=i),
             helper.make_node("Slice", ["pos", "start", "end"], ["head"]),
             helper.make_node("Shape", ["pos"], ["count"])]
    graph = helper.make_graph(nodes, "slice_by_data", [helper.make_tensor_value_info("x", f, ["n"])],
                              [helper.make_empty_tensor_value_info(o) for o in ("head", "count")], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_setups_downstream_of_a_dynamic_shape_are_kept_per_shape_and_read_value():
    """A node run per forward keeps its shape rule's and kernel setup's result (Step.evaluate's memo)
    for inputs of the same shapes and the same values where the setup read one: Slice's `ends` comes
    from the data, so the same shapes with another end must not reuse the setup. Large read values
    (Gather's indices, over MEMO_VALUE_MAX) are never kept."""
    model = _slice_by_data_model()
    net = Net(Program(load_onnx(model)), optimization=Optimization.MEMORY)
    xs = [np.array([3.5, -1, 2, 5.2, -3, 1], np.float32),    # 4 positive, end 5
          np.array([3.5, -1, 2, 5.2, -3, 1], np.float32),    # the same: setups reused
          np.array([2.5, -1, 2, 1.2, -3, 1], np.float32),    # 4 positive, end 2: same shapes, another value
          np.array([1.5, 2, -1, 3.2, 7, 1, 0.5], np.float32)]  # another n
    xs.append(rng.uniform(0.5, 1.5, 200).astype(np.float32))  # 200 indices: Gather's setup is not kept
    for x in xs:
        net.forward({"x": x})
        ours = [net.blob_by_name("head"), net.blob_by_name("count")]
        for o, r in zip(ours, run_ort(model, {"x": x})):
            np.testing.assert_array_equal(o, r)
    memos = {st.node.op_type: [e for (sid, _), m in net.layout.memos.items() if sid == id(st) for e in m]
             for st in net.layout.dynamic}
    assert {"Slice", "Gather", "Squeeze"} <= set(memos)
    assert all(len(e.values) for e in memos["Slice"])  # its setup read `ends`: kept by value
    assert all(np.size(v) <= 64 for e in memos["Gather"] for _, v in e.values)
