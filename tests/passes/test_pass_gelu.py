"""fuse_gelu: the erf form of GELU, in its exporter variants, -> Gelu (ONNX from opset 20, ours below)."""

import math

import numpy as np
import pytest
from onnx import helper

from tests.passes.pass_helpers import check_pass, make_model, ops, rand, run_net

SQRT2 = np.float32(math.sqrt(2.0))
INV_SQRT2 = np.float32(1.0 / math.sqrt(2.0))
SHAPE = (2, 4, 5)
X = {"x": rand(*SHAPE, seed=1, scale=2.5)}


def gelu_nodes(scale="div", half="after", swap=False, x="x", y="y"):
    """x * 0.5 * (1 + erf(x / sqrt(2))) in one of its exporter spellings."""
    def mul(a, b, out):
        return helper.make_node("Mul", [b, a] if swap else [a, b], [out])

    nodes = [helper.make_node("Div", [x, "k_sqrt2"], ["d"]) if scale == "div"
             else mul(x, "k_inv_sqrt2", "d"),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["k_one", "e"] if swap else ["e", "k_one"], ["a"])]
    if half == "after":      # (x * E) * 0.5
        nodes += [mul(x, "a", "m"), mul("m", "k_half", y)]
    elif half == "before":   # (x * 0.5) * E
        nodes += [mul(x, "k_half", "m"), mul("m", "a", y)]
    else:                    # x * (E * 0.5)
        nodes += [mul("a", "k_half", "m"), mul(x, "m", y)]
    return nodes


def consts(shape=()):
    return {"k_sqrt2": np.full(shape, SQRT2, np.float32), "k_inv_sqrt2": np.full(shape, INV_SQRT2, np.float32),
            "k_one": np.full(shape, 1.0, np.float32), "k_half": np.full(shape, 0.5, np.float32)}


def gelu_model(opset=17, **kw):
    return make_model(gelu_nodes(**kw), {"x": SHAPE}, ["y"], consts(kw.pop("cshape", ())), opset=opset)


@pytest.mark.parametrize("scale", ["div", "mul"])
@pytest.mark.parametrize("half", ["after", "before", "inner"])
@pytest.mark.parametrize("swap", [False, True])
def test_gelu_variants_fuse(scale, half, swap):
    model = make_model(gelu_nodes(scale, half, swap), {"x": SHAPE}, ["y"], consts())
    after, report = check_pass(model, X, "fuse_gelu", fires=True)
    assert ops(after) == ["pooled_predictor.Gelu"]
    assert after.opset["pooled_predictor"] == 1 and after.opset[""] == 17


def test_div_form_is_bit_identical_to_the_nodes():
    """Our domain's Gelu computes in the exporters' order: the same bits as Div/Erf/Add/Mul/Mul."""
    from pooled_predictor.importers import load_onnx
    from pooled_predictor.passes import optimize

    g = load_onnx(make_model(gelu_nodes("div", "after"), {"x": SHAPE}, ["y"], consts()))
    x = {"x": rand(*SHAPE, seed=5, scale=4.0)}
    assert np.array_equal(run_net(g, x)[0], run_net(optimize(g, "extended")[0], x)[0])


def test_opset_20_emits_onnx_gelu():
    model = make_model(gelu_nodes(), {"x": SHAPE}, ["y"], consts(), opset=20)
    after, _ = check_pass(model, X, "fuse_gelu", fires=True)
    assert ops(after) == ["Gelu"] and "pooled_predictor" not in after.opset


def test_constants_of_shape_1_fuse_when_x_has_the_rank():
    model = make_model(gelu_nodes(), {"x": SHAPE}, ["y"], consts((1, 1)))
    check_pass(model, X, "fuse_gelu", fires=True)


def test_constants_that_would_broadcast_x_to_a_higher_rank_do_not_fuse():
    model = make_model(gelu_nodes(), {"x": SHAPE}, ["y"], consts((1, 1, 1, 1)))
    check_pass(model, X, "fuse_gelu", fires=False)


def test_wrong_constant_does_not_fuse():
    c = consts()
    c["k_sqrt2"] = np.float32(math.sqrt(3.0))
    check_pass(make_model(gelu_nodes(), {"x": SHAPE}, ["y"], c), X, "fuse_gelu", fires=False)


def test_constant_off_by_more_than_float32_tolerance_does_not_fuse():
    c = consts()
    c["k_half"] = np.float32(0.5 * (1 + 1e-5))
    check_pass(make_model(gelu_nodes(), {"x": SHAPE}, ["y"], c), X, "fuse_gelu", fires=False)


def test_erf_of_another_value_does_not_fuse():
    """x * 0.5 * (1 + erf(z / sqrt 2)) with z != x."""
    nodes = gelu_nodes()
    nodes[0] = helper.make_node("Div", ["z", "k_sqrt2"], ["d"])
    model = make_model(nodes, {"x": SHAPE, "z": SHAPE}, ["y"], consts())
    check_pass(model, dict(X, z=rand(*SHAPE, seed=2)), "fuse_gelu", fires=False)


def test_intermediate_read_elsewhere_does_not_fuse():
    model = make_model(gelu_nodes(), {"x": SHAPE}, ["y", "e"], consts())
    check_pass(model, X, "fuse_gelu", fires=False)


def test_x_may_have_other_readers():
    nodes = gelu_nodes() + [helper.make_node("Relu", ["x"], ["r"])]
    model = make_model(nodes, {"x": SHAPE}, ["y", "r"], consts())
    after, _ = check_pass(model, X, "fuse_gelu", fires=True)
    assert sorted(ops(after)) == ["Relu", "pooled_predictor.Gelu"]


def test_float64_gelu():
    from onnx import TensorProto

    c = {k: v.astype(np.float64) for k, v in consts().items()}
    c["k_sqrt2"] = np.float64(math.sqrt(2.0))
    model = make_model(gelu_nodes(), {"x": SHAPE}, ["y"], c, dtype=TensorProto.DOUBLE)
    after, _ = check_pass(model, {"x": X["x"].astype(np.float64)}, "fuse_gelu", fires=True, tol=1e-12,
                          ort=False)  # onnxruntime has no float64 Erf
