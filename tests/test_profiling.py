"""Profiling (enable_profiling): per-node events, tables by op type and node, Chrome trace, CLI."""

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import Predictor
from pooled_predictor.engine.net import Net
from pooled_predictor.serving.pool import Config, PooledPredictor
from pooled_predictor.engine.program import Program
from pooled_predictor.importers import load_onnx
from tests.conftest import make_mlp
from tests.test_cli import cli

X = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)


def test_net_records_one_event_per_node_and_forward():
    net = Net(Program(load_onnx(make_mlp())))
    net.forward(X)
    prof = net.enable_profiling()
    ref = None
    for _ in range(3):
        net.forward(X)
        ref = np.array(net.blob_by_name("y"))
    nodes = [st.node.name for st in net.program.steps]
    assert prof.forwards == 3 and len(prof.events) == 3 * len(nodes)
    assert [e.name for e in prof.events[:len(nodes)]] == nodes
    assert all(e.dur_ns >= 0 for e in prof.events)
    by_op = prof.by_op_type()
    assert {r["op_type"] for r in by_op} == {"MatMul", "Add", "Relu", "Softmax"}
    assert abs(sum(r["percent"] for r in by_op) - 100.0) < 1e-6
    assert sorted(r["node"] for r in prof.by_node()) == sorted(nodes)
    text = prof.table()
    assert "op_type" in text and "fc1" in text and "3 forward(s)" in text
    net.disable_profiling()
    net.forward(X)
    assert prof.forwards == 3
    np.testing.assert_array_equal(net.blob_by_name("y"), ref)  # timing changes nothing


def test_chrome_trace_is_valid_trace_event_json(tmp_path):
    p = Predictor(make_mlp(), enable_profiling=True)
    p.run(None, {"x": X})
    path = p.end_profiling(tmp_path / "t.json")
    trace = json.loads(open(path).read())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(p.program.steps)
    for e in complete:
        assert {"name", "cat", "ts", "dur", "pid", "tid", "args"} <= set(e) and e["dur"] >= 0
    ts = [e["ts"] for e in complete]
    assert ts == sorted(ts)
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in trace["traceEvents"])


def test_pool_workers_share_the_predictors_profiler(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(make_mlp(), path)
    with PooledPredictor(Config(model_paths=[path], num_threads=2, enable_profiling=True)) as pool:
        for f in [pool.forward({"x": X}) for _ in range(6)]:
            f.result()
        prof = pool.predictor(0).profiler
    assert prof.forwards == 6 and len(prof.events) == 6 * len(pool.predictor(0).program.steps)


def test_cli_profile_prints_tables_and_writes_trace(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(make_mlp(), path)
    proc = cli("profile", path, "--shape", "x=4x16", "--runs", 2, "--trace", tmp_path / "t.json")
    assert proc.returncode == 0, proc.stderr
    assert "x float32[4, 16]" in proc.stdout and "Softmax" in proc.stdout and "2 forward(s)" in proc.stdout
    assert len([e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"]) >= 2


def test_precision_column_reads_each_node_s_data_input():
    """The profile's precision: the first data input's type and the output's ("in->out" where they differ): a
    QuantizeLinear "float32->uint8", a QLinearConcat of uint8 inputs "uint8" (its first inputs are Y's scale and
    zero point: it showed "float32->uint8")."""
    consts = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in
              [("s", 0.1, np.float32), ("z", 3, np.uint8), ("s2", 0.2, np.float32)]]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("QLinearConcat", ["s2", "z", "q", "s", "z", "q", "s", "z"], ["y"], axis=1,
                              domain="com.microsoft")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    net = Net(Program(load_onnx(model)))
    x = np.ones((2, 3), np.float32)
    net.forward(x)
    prof = net.enable_profiling()
    net.forward(x)
    precision = {r["op_type"]: r["precision"] for r in prof.by_node()}
    assert precision == {"QuantizeLinear": "float32->uint8", "QLinearConcat": "uint8"}, precision
