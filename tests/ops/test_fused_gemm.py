"""FusedGemm's compiled call (ops/cpu/fused.py, compiled/fc.py): the product and the activation in one call.

The epilogue activations give the same bits as Gemm then the activation node; Tanh is tanh32 there, within
its documented error of float64 tanh, and np.tanh's bits under the reference kernels."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from pooled_predictor.engine.net import Net
from pooled_predictor.engine.program import Program
from pooled_predictor.importers import load_onnx
from pooled_predictor.ops.cpu import compiled
from pooled_predictor.passes import optimize
from tests.passes.pass_helpers import make_model, rand


def gemm_act(act, rows, k=24, n=20, **act_attrs):
    """Gemm(a, B, C) (B (k, n) or (n, k) with transB, C a bias of n) then `act`."""
    w = {"B": rand(k, n, seed=1, scale=0.5), "C": rand(n, seed=2)}
    nodes = [helper.make_node("Gemm", ["a", "B", "C"], ["c"]), helper.make_node(act, ["c"], ["y"], **act_attrs)]
    return make_model(nodes, {"a": (rows, k)}, ["y"], w)


def run(graph, feeds):
    net = Net(Program(graph))
    net.forward(feeds)
    return np.array(net.blob_by_name("y"))


def fused_and_plain(model):
    g = load_onnx(model)
    fused, report = optimize(g, "extended")
    assert [n.op_type for n in fused.nodes] == ["FusedGemm"], report
    return fused, g


@pytest.mark.parametrize("rows", [1, 3, 13])
@pytest.mark.parametrize("act,attrs", [("Relu", {}), ("LeakyRelu", {"alpha": 0.2}), ("HardSigmoid", {}),
                                       ("Clip", {})])
def test_epilogue_activations_give_the_unfused_bits(rows, act, attrs):
    if act == "Clip":
        model = make_model([helper.make_node("Gemm", ["a", "B", "C"], ["c"]),
                            helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], {"a": (rows, 24)}, ["y"],
                           {"B": rand(24, 20, seed=1, scale=0.5), "C": rand(20, seed=2),
                            "lo": np.float32(-0.5), "hi": np.float32(0.7)})
    else:
        model = gemm_act(act, rows, **attrs)
    fused, plain = fused_and_plain(model)
    feeds = {"a": rand(rows, 24, seed=3, scale=2.0)}
    np.testing.assert_array_equal(run(fused, feeds), run(plain, feeds))


@pytest.mark.parametrize("rows", [1, 2, 7, 40])
@pytest.mark.parametrize("n", [5, 16, 64, 70])
def test_tanh_in_the_compiled_call_is_within_tanh32_error(rows, n):
    fused, plain = fused_and_plain(gemm_act("Tanh", rows, n=n))
    a = rand(rows, 24, seed=4, scale=6.0)  # pre-activations of a few units to past the clamp at 9
    got = run(fused, {"a": a})
    net = Net(Program(plain))
    net.forward({"a": a})
    pre = np.array(net.blob_by_name("c"), np.float64)  # the same float32 product (same kernel, same sums)
    assert np.abs(pre).max() > 1.0
    err = np.abs(got - np.tanh(pre)).max()
    assert err <= 2.9e-7, err
    assert got.dtype == np.float32 and got.shape == (rows, n)


def test_tanh_under_reference_kernels_is_numpy_tanh():
    fused, plain = fused_and_plain(gemm_act("Tanh", 3))
    feeds = {"a": rand(3, 24, seed=5)}
    with compiled.reference_kernels():
        got, want = run(fused, feeds), run(plain, feeds)
    np.testing.assert_array_equal(got, want)


def test_non_contiguous_input_takes_the_two_step_path():
    """A transposed A (transA=1) cannot take the compiled product: Gemm then np.tanh, as unfused."""
    w = {"B": rand(24, 20, seed=1, scale=0.5), "C": rand(20, seed=2)}
    model = make_model([helper.make_node("Gemm", ["a", "B", "C"], ["c"], transA=1),
                        helper.make_node("Tanh", ["c"], ["y"])], {"a": (24, 3)}, ["y"], w)
    fused, plain = fused_and_plain(model)
    feeds = {"a": rand(24, 3, seed=6)}
    np.testing.assert_array_equal(run(fused, feeds), run(plain, feeds))
