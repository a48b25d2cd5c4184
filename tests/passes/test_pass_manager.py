"""The pass manager: levels, enable/disable, the report, inspect, logging, copies."""

import logging

import numpy as np
import pytest
from onnx import helper

from pooled_predictor.importers import load_onnx
from pooled_predictor.passes import LEVELS, PASSES, PassReport, inspect, optimize, select
from tests.passes.pass_helpers import make_model, ops, rand, run_net, snapshot


def small_cnn():
    """Conv -> Add(bias) -> Identity -> BN -> Relu -> Dropout -> MatMul + Add -> dead branch."""
    c, m = 3, 4
    w = {"W": rand(m, c, 3, 3, seed=1, scale=0.3), "k": rand(1, m, 1, 1, seed=2), "g": rand(m, seed=3) + 1.5,
         "beta": rand(m, seed=4), "mean": rand(m, seed=5), "var": np.abs(rand(m, seed=6)) + 0.1,
         "shape": np.array([2, -1], np.int64), "fc": rand(m * 16, 5, seed=7), "fb": rand(5, seed=8),
         "unused": rand(3, seed=9)}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "k"], ["a"]),
             helper.make_node("Identity", ["a"], ["i"]),
             helper.make_node("BatchNormalization", ["i", "g", "beta", "mean", "var"], ["b"]),
             helper.make_node("Relu", ["b"], ["r"]),
             helper.make_node("Dropout", ["r"], ["d"]),
             helper.make_node("Reshape", ["d", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["mm"]),
             helper.make_node("Add", ["mm", "fb"], ["y"]),
             helper.make_node("Neg", ["r"], ["dead"])]
    return make_model(nodes, {"x": (2, c, 4, 4)}, ["y"], w)


X = {"x": rand(2, 3, 4, 4, seed=10)}


def test_pass_table_names_levels_and_order():
    assert set(LEVELS) == {"none", "basic", "extended", "all"}
    assert list(PASSES)[0] == "eliminate_identity" and list(PASSES)[-1] == "eliminate_dead_nodes"
    for p in PASSES.values():
        assert p.level in LEVELS[1:] and p.doc
    basic = {p.name for p in select("basic")}
    extended = {p.name for p in select("extended")}
    assert {"eliminate_identity", "constant_folding", "fold_conv_bn", "eliminate_dead_nodes"} <= basic
    assert not any(n.startswith("fuse_") for n in basic)
    assert basic < extended < {p.name for p in select("all")} == set(PASSES)
    assert select("none") == []


def test_levels_on_a_small_cnn():
    g = load_onnx(small_cnn())
    ref = run_net(g, X)[0]
    counts = {}
    for level in LEVELS:
        after, report = optimize(g, level)
        counts[level] = len(after.nodes)
        assert np.abs(run_net(after, X)[0] - ref).max() <= 1e-5 * np.abs(ref).max()
    assert counts["none"] == 10
    assert ops(optimize(g, "basic")[0]) == ["Conv", "Relu", "Reshape", "MatMul", "Add"]
    assert ops(optimize(g, "extended")[0]) == ["pooled_predictor.FusedConv", "Reshape", "Gemm"]


def test_disable_and_enable_by_name():
    g = load_onnx(small_cnn())
    after, report = optimize(g, "extended", disable=["fold_conv_bn", "eliminate_dead_nodes"])
    assert "BatchNormalization" in ops(after) and "Neg" in ops(after)
    assert "fold_conv_bn" not in [p.name for p in report.passes]
    after, report = optimize(g, "none", enable=["eliminate_identity"])
    assert [p.name for p in report.passes] == ["eliminate_identity"]
    assert "Identity" not in ops(after) and "Dropout" not in ops(after)


def test_unknown_names_and_levels():
    g = load_onnx(small_cnn())
    with pytest.raises(ValueError, match="not one of"):
        optimize(g, "aggressive")
    with pytest.raises(ValueError, match="unknown pass name.*'fuse_everything'"):
        optimize(g, "all", disable=["fuse_everything"])


def test_input_graph_is_never_modified_and_weights_are_shared():
    g = load_onnx(small_cnn())
    before = snapshot(g)
    after, _ = optimize(g, "all")
    assert snapshot(g) == before
    assert after is not g and after.weights["fc"] is g.weights["fc"]
    assert "pooled_predictor" not in g.opset and after.opset["pooled_predictor"] == 1


def test_report_lists_counts_and_changes_per_pass():
    g = load_onnx(small_cnn())
    _, report = optimize(g, "all")
    assert isinstance(report, PassReport) and report.level == "all"
    assert [p.name for p in report.passes] == list(PASSES)
    assert report.before["Identity"] == 1 and report.after["pooled_predictor.FusedConv"] == 1
    ident = report["eliminate_identity"]
    assert ident.before["Identity"] == 1 and ident.after["Identity"] == 0
    assert ident.changes == {"Identity removed": 1, "Dropout removed": 1}
    assert "Identity removed x1" in ident.summary and "nodes 10 -> 8" in ident.summary
    assert report.fired() == ["eliminate_identity", "fold_conv_add", "fold_conv_bn", "fuse_matmul_add",
                              "fuse_conv_activation", "eliminate_dead_nodes"]
    # W k g beta mean var unused, and the W/B that fold_conv_add made before fold_conv_bn replaced them
    assert report["eliminate_dead_nodes"].changes == {"dead Neg removed": 1, "unread weights dropped": 9}
    d = report.to_dict()
    assert d["nodes_before"] == 10 and d["nodes_after"] == 3 and len(d["passes"]) == len(PASSES)
    text = str(report)
    assert "fold_conv_bn" in text and "BatchNormalization folded into Conv x1" in text


def test_second_run_changes_nothing():
    g, _ = optimize(load_onnx(small_cnn()), "all")
    _, report = optimize(g, "all")
    assert report.fired() == []


def test_inspect_table():
    text = inspect(load_onnx(small_cnn()), "all")
    lines = text.splitlines()
    assert "10 -> 3 nodes" in lines[0]
    assert any(l.startswith("Identity ") for l in lines)
    assert any(l.startswith("pooled_predictor.FusedConv") for l in lines)
    total = [l for l in lines if l.startswith("total")][0].split()
    assert total[1] == "10" and total[-1] == "3"
    assert "1: eliminate_identity" in text and "no change:" in text


def test_inspect_accepts_a_model():
    assert "nodes" in inspect(small_cnn(), "basic")


def test_each_pass_logs(caplog):
    with caplog.at_level(logging.DEBUG, logger="pooled_predictor.passes"):
        optimize(load_onnx(small_cnn()), "all")
    names = [r.getMessage().split(" ")[0] for r in caplog.records if r.name == "pooled_predictor.passes"
             and r.getMessage().split(" ")[0] in PASSES]
    assert names == list(PASSES)
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert {r.getMessage().split(" ")[0] for r in infos} == set(optimize(load_onnx(small_cnn()), "all")[1].fired())


def test_level_none_is_a_copy():
    g = load_onnx(small_cnn())
    after, report = optimize(g, "none")
    assert report.passes == [] and ops(after) == ops(g) and after is not g


def test_parse_input_shapes():
    from pooled_predictor.passes import parse_input_shapes

    assert parse_input_shapes("x:1x3x224x224, y:2x10") == {"x": (1, 3, 224, 224), "y": (2, 10)}
    assert parse_input_shapes("a:b:4") == {"a:b": (4,)}
    with pytest.raises(ValueError, match="NAME:DxDx"):
        parse_input_shapes("x=1x3")
    with pytest.raises(ValueError, match="NAME:DxDx"):
        parse_input_shapes("x:1xq")
