"""LRN, LayerNormalization and InstanceNormalization against onnxruntime.

Where onnxruntime has no kernel (LRN and InstanceNormalization in float64,
LayerNormalization with stash_type other than float, ranks it rejects) or
restricts the spec (its LRN takes odd sizes only), the reference is the
spec's formula written out below in float64 with loops, as in Operators.md.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pooled_predictor.errors import ShapeInferenceError, UnsupportedOpError
from pooled_predictor.importers import load_onnx
from pooled_predictor.engine.net import Net
from pooled_predictor.engine.program import Program
from tests.onnx_helpers import assert_close, check_node, feeds_of, make_node_model, run_ours, type_outputs

rng = np.random.default_rng(7)
NEWEST = 28
RTOL = {np.float16: 5e-3, np.float32: 1e-5, np.float64: 1e-9}


def check(op, inputs, attrs, *, opset, outputs=1, static=(), rtol=1e-5, reference=None):
    """check_node, with `reference(*inputs)` where onnxruntime cannot run the case."""
    return check_node(op, inputs, attrs, opset=opset, outputs=outputs, static=static, rtol=rtol,
                      reference=reference)


def f32(v: float) -> float:
    """An attribute as ONNX stores it (FLOAT is float32)."""
    return float(np.float32(v))


def randn(shape, dtype=np.float32, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


# ---- references: the spec's formulas, float64 ------------------------------------
def lrn_reference(size, alpha=1e-4, beta=0.75, bias=1.0):
    alpha, beta, bias = f32(alpha), f32(beta), f32(bias)

    def ref(x):
        x64 = x.astype(np.float64)
        c = x.shape[1]
        square_sum = np.zeros_like(x64)
        for i in range(c):
            lo, hi = max(0, i - math.floor((size - 1) / 2)), min(c - 1, i + math.ceil((size - 1) / 2))
            square_sum[:, i] = np.sum(x64[:, lo:hi + 1] ** 2, axis=1)
        return [(x64 / (bias + alpha / size * square_sum) ** beta).astype(x.dtype)]
    return ref


STASH = {1: np.float32, 10: np.float16, 11: np.float64}


def layernorm_reference(axis=-1, epsilon=1e-5, stash_type=1, n_outputs=3):
    epsilon = f32(epsilon)

    def ref(x, scale, bias=None):
        st = STASH[stash_type]
        axes = tuple(range(axis % x.ndim, x.ndim))
        xs = x.astype(st)
        mean = xs.mean(axis=axes, keepdims=True, dtype=np.float64).astype(st)
        d = xs - mean
        var = (d.astype(np.float64) ** 2).mean(axis=axes, keepdims=True)
        inv = (1.0 / np.sqrt(var + epsilon)).astype(st)
        y = (d * inv).astype(x.dtype) * scale
        if bias is not None:
            y = y + bias
        return [y, mean, inv][:n_outputs]
    return ref


def instancenorm_reference(epsilon=1e-5):
    epsilon = f32(epsilon)

    def ref(x, scale, bias):
        x64 = x.astype(np.float64)
        axes = tuple(range(2, x.ndim))
        mean = x64.mean(axis=axes, keepdims=True)
        var = x64.var(axis=axes, keepdims=True)
        bshape = (-1,) + (1,) * (x.ndim - 2)
        y = scale.reshape(bshape) * (x64 - mean) / np.sqrt(var + epsilon) + bias.reshape(bshape)
        return [y.astype(x.dtype)]
    return ref


# ---- LRN ----------------------------------------------------------------------------
LRN_ATTRS = [{}, {"alpha": 1e-2, "beta": 0.5, "bias": 2.0}, {"alpha": 0.5, "beta": 1.0, "bias": 0.5}]


@pytest.mark.parametrize("shape", [(2, 5, 3, 4), (1, 3, 7), (2, 4), (1, 6, 2, 2, 3)])
@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize("opset", [11, 13, NEWEST])
def test_lrn(shape, size, opset):
    attrs = {"size": size, **LRN_ATTRS[size % 3]}
    check("LRN", [randn(shape, scale=3.0)], attrs, opset=opset, reference=lrn_reference(**attrs))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("attrs", LRN_ATTRS)
@pytest.mark.parametrize("size", [3, 4])
def test_lrn_dtypes(dtype, attrs, size):
    attrs = {"size": size, **attrs}
    check("LRN", [randn((2, 6, 3, 3), dtype, scale=3.0)], attrs, opset=13, rtol=RTOL[dtype],
          reference=lrn_reference(**attrs))


def test_lrn_float16_large_values_do_not_overflow():
    x = np.full((1, 3, 2, 2), 300.0, np.float16)  # 300^2 > float16 max; the sum is taken in float32
    check("LRN", [x], {"size": 3}, opset=13, rtol=5e-3, reference=lrn_reference(3))


def test_lrn_rejects_bad_size():
    x = randn((1, 3, 2, 2))
    model = make_node_model("LRN", [x], {"size": 0}, opset=13)
    type_outputs(model, [x])
    with pytest.raises(UnsupportedOpError, match="size=0"):
        run_ours(model, {"in0": x})


def test_lrn_rejects_rank_1():
    x = randn((4,))
    model = make_node_model("LRN", [x], {"size": 3}, opset=13)
    type_outputs(model, [x])
    with pytest.raises(ShapeInferenceError, match="LRN.*rank >= 2"):
        run_ours(model, {"in0": x})


# ---- LayerNormalization --------------------------------------------------------------
LN_SHAPES = [(3, 4), (2, 3, 5), (2, 3, 4, 5)]


def ln_cases():
    for shape in LN_SHAPES:
        for axis in range(-len(shape), len(shape)):
            yield shape, axis


@pytest.mark.parametrize("shape,axis", list(ln_cases()))
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("opset", [17, NEWEST])
def test_layernorm(shape, axis, with_bias, opset):
    norm = shape[axis:]
    inputs = [randn(shape, scale=2.0) + 1.0, randn(norm), randn(norm) if with_bias else None]
    check("LayerNormalization", inputs, {"axis": axis}, opset=opset, outputs=3,
          reference=layernorm_reference(axis))


@pytest.mark.parametrize("epsilon", [1e-5, 1e-1])
@pytest.mark.parametrize("static", [(), (1, 2)])
@pytest.mark.parametrize("outputs", [["y"], ["y", "mean"], ["y", "", "inv"], ["y", "mean", "inv"]])
def test_layernorm_attrs_and_optional_outputs(epsilon, static, outputs):
    x = randn((2, 3, 4))
    attrs = {"epsilon": epsilon, "axis": 1}
    full = layernorm_reference(axis=1, epsilon=epsilon)
    check("LayerNormalization", [x, randn((3, 4)), randn((3, 4))], attrs, opset=17, outputs=outputs,
          static=static, reference=lambda *a: [r for r, o in zip(full(*a), outputs) if o])


@pytest.mark.parametrize("scale_shape,bias_shape", [((1,), (5,)), ((4, 1), (1, 5)), ((2, 3, 4, 5), None),
                                                    ((3, 4, 5), (1, 1, 5))])
def test_layernorm_broadcast_scale(scale_shape, bias_shape):
    """Scale and B broadcast unidirectionally to X (they need not be the normalized shape)."""
    x = randn((2, 3, 4, 5))
    inputs = [x, randn(scale_shape), None if bias_shape is None else randn(bias_shape)]
    check("LayerNormalization", inputs, {"axis": 2}, opset=17, outputs=3,
          reference=layernorm_reference(axis=2))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("stash_type", [1, 10, 11])
@pytest.mark.parametrize("opset", [17, NEWEST])
def test_layernorm_dtypes_and_stash_type(dtype, stash_type, opset):
    """Statistics in stash_type precision (Mean, InvStdDev of that type); Y of X's type."""
    x = randn((2, 3, 8), dtype, scale=2.0) + 1
    scale, bias = randn(8, dtype), randn(8, dtype)
    rtol = max(RTOL[dtype], RTOL[STASH[stash_type]])
    check("LayerNormalization", [x, scale, bias], {"stash_type": stash_type, "axis": -1}, opset=opset,
          outputs=3, rtol=rtol, reference=layernorm_reference(-1, stash_type=stash_type))


def test_layernorm_rejects_bfloat16_stash():
    x = randn((2, 3))
    model = make_node_model("LayerNormalization", [x, randn(3)], {"stash_type": 16}, opset=17)
    type_outputs(model, [x])
    with pytest.raises(UnsupportedOpError, match="stash_type=16"):
        run_ours(model, {"in0": x, "in1": randn(3)})


def test_layernorm_rejects_scale_that_does_not_broadcast():
    x = randn((2, 3, 4))
    model = make_node_model("LayerNormalization", [x, randn((3, 5))], {}, opset=17)
    type_outputs(model, [x])
    with pytest.raises(ShapeInferenceError, match="LayerNormalization.*Scale"):
        run_ours(model, {"in0": x, "in1": randn((3, 5))})


# ---- InstanceNormalization -----------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 2, 2)])
@pytest.mark.parametrize("epsilon", [1e-5, 1e-1])
@pytest.mark.parametrize("opset", [11, 13, 22, NEWEST])
@pytest.mark.parametrize("static", [(), (1, 2)])
def test_instancenorm(shape, epsilon, opset, static):
    c = shape[1]
    inputs = [randn(shape, scale=3.0) - 1.0, randn(c), randn(c)]
    check("InstanceNormalization", inputs, {"epsilon": epsilon}, opset=opset, static=static,
          reference=instancenorm_reference(epsilon))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("opset", [11, NEWEST])
def test_instancenorm_dtypes(dtype, opset):
    inputs = [randn((2, 4, 6, 5), dtype, scale=3.0), randn(4, dtype), randn(4, dtype)]
    check("InstanceNormalization", inputs, {}, opset=opset, rtol=RTOL[dtype],
          reference=instancenorm_reference())


def test_instancenorm_rejects_wrong_scale_shape():
    x = randn((2, 3, 4))
    inputs = [x, randn(4), randn(3)]
    model = make_node_model("InstanceNormalization", inputs, {}, opset=13)
    type_outputs(model, [x])
    with pytest.raises(ShapeInferenceError, match="InstanceNormalization.*scale must have shape"):
        run_ours(model, feeds_of(inputs))


# ---- scratch reuse: a Net runs twice, each result right --------------------------------
@pytest.mark.parametrize("op,inputs,attrs,outputs,ref", [
    ("LRN", [randn((2, 5, 3, 3), np.float16)], {"size": 3}, 1, lrn_reference(3)),
    ("LayerNormalization", [randn((2, 3, 4), np.float16), randn(4, np.float16)], {}, 3,
     layernorm_reference()),
    ("InstanceNormalization", [randn((2, 3, 4), np.float16), randn(3, np.float16), randn(3, np.float16)],
     {}, 1, instancenorm_reference()),
])
def test_second_forward_with_new_data(op, inputs, attrs, outputs, ref):
    """Scratch content is undefined at each call: a second forward must not reuse the first's."""
    model = make_node_model(op, inputs, attrs, opset=17, outputs=outputs)
    type_outputs(model, ref(*inputs))
    net = Net(Program(load_onnx(model, device="cpu"), "cpu"))
    for trial in range(2):
        data = [a * (trial + 1) + trial for a in inputs]
        net.forward(feeds_of(data))
        for name, r in zip(net.output_names, ref(*data)):
            assert_close(net.blob_by_name(name), r, 5e-3, f"{op} trial {trial} {name}")
