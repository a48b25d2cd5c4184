"""One-node tests of the attention-family kernels against onnxruntime.

Attention (23, 24) over 4-D and packed 3-D inputs, multi-head and grouped-query
heads, causal masking with and without a past cache, bool and float masks of
several ranks (one shorter than the keys), softcap, every qk_matmul_output_mode,
present key/value outputs, nonpad_kv_seqlen (24); RotaryEmbedding (23) over layouts,
interleaving, partial rotation and position ids. LinearAttention and
CausalConvWithState (opset 27) are newer than onnxruntime's opsets and are checked
against onnx's reference evaluator. Batch 2 everywhere.
"""

import itertools

import numpy as np
import onnxruntime
import pytest

from pooled_predictor.errors import ShapeInferenceError
from tests.onnx_helpers import check_node, make_node_model, run_ours

onnxruntime.set_default_logger_severity(3)
rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---- Attention -----------------------------------------------------------------------
HEADS = [(2, 2), (4, 2), (4, 1)]          # (q heads, kv heads): MHA, GQA, MQA


def qkv(packed, hq, hkv, sq=3, skv=5, d=8, dv=6, b=2):
    if packed:
        return randn(b, sq, hq * d), randn(b, skv, hkv * d), randn(b, skv, hkv * dv)
    return randn(b, hq, sq, d), randn(b, hkv, skv, d), randn(b, hkv, skv, dv)


@pytest.mark.parametrize("packed,heads,causal,scale", list(itertools.product(
    [False, True], HEADS, [0, 1], [None, 0.3])))
def test_attention_heads_causal_scale(packed, heads, causal, scale):
    hq, hkv = heads
    attrs = {"is_causal": causal}
    if scale is not None:
        attrs["scale"] = scale
    if packed:
        attrs.update(q_num_heads=hq, kv_num_heads=hkv)
    check_node("Attention", list(qkv(packed, hq, hkv)), attrs, opset=23, rtol=1e-5)


MASKS = {
    "bool_2d": lambda b, h, sq, t: rng.random((sq, t)) > 0.3,
    "bool_4d": lambda b, h, sq, t: rng.random((b, 1, sq, t)) > 0.3,
    "float_3d": lambda b, h, sq, t: randn(h, sq, t),
    "float_short": lambda b, h, sq, t: randn(b, h, sq, t - 2),
}


@pytest.mark.parametrize("mask,causal,past", list(itertools.product(sorted(MASKS), [0, 1], [0, 4])))
def test_attention_masks_and_past(mask, causal, past):
    """attn_mask of each kind with causal masking and a past cache (present_key/value out)."""
    q, k, v = qkv(False, 4, 2)
    inputs = [q, k, v, MASKS[mask](2, 4, 3, 5 + past)]
    outputs = 1
    if past:
        inputs += [randn(2, 2, past, 8), randn(2, 2, past, 6)]
        outputs = 3
    # onnxruntime rejects a mask shorter than the keys (Attention-24 allows it): onnx's reference
    check_node("Attention", inputs, {"is_causal": causal}, opset=24, outputs=outputs,
               reference="onnx" if mask == "float_short" else None)


@pytest.mark.parametrize("mode,softcap", list(itertools.product([0, 1, 2, 3], [0.0, 2.0])))
def test_attention_qk_output_modes(mode, softcap):
    q, k, v = qkv(False, 2, 2)
    inputs = [q, k, v, randn(3, 7), randn(2, 2, 2, 8), randn(2, 2, 2, 6)]
    check_node("Attention", inputs, {"qk_matmul_output_mode": mode, "softcap": softcap}, opset=23, outputs=4)


def test_attention_nonpad_kv_seqlen():
    """Attention-24's external cache: keys past nonpad_kv_seqlen[b] are padding."""
    q, k, v = qkv(False, 4, 2, skv=6)
    check_node("Attention", [q, k, v, None, None, None, np.array([3, 6], np.int64)], {}, opset=24)


@pytest.mark.parametrize("left,right,causal,cache", [
    (2, -1, 1, None), (1, 2, 0, None), (0, 0, 0, "past"), (2, -1, 1, "nonpad"), (-1, 1, 0, "nonpad")])
def test_attention_sliding_window(left, right, causal, cache):
    """Attention-25's left/right windows with causal masking and both caches (onnx's reference:
    onnxruntime has no Attention-25)."""
    q, k, v = qkv(False, 4, 2, sq=4, skv=6)
    inputs = [q, k, v]
    if cache == "past":
        inputs += [None, randn(2, 2, 3, 8), randn(2, 2, 3, 6)]
    elif cache == "nonpad":
        inputs += [None, None, None, np.array([5, 6], np.int64)]
    attrs = {"left_window_size": left, "right_window_size": right, "is_causal": causal}
    check_node("Attention", inputs, attrs, opset=25, outputs=3 if cache == "past" else 1, reference="onnx")


def test_attention_float16():
    q, k, v = (a.astype(np.float16) for a in qkv(False, 2, 2))
    check_node("Attention", [q, k, v], {"is_causal": 1}, opset=23, rtol=2e-3)


def test_attention_fully_masked_row_is_zero():
    q, k, v = qkv(False, 2, 2)
    mask = np.ones((3, 5), bool)
    mask[1] = False
    (y,) = check_node("Attention", [q, k, v, mask], {}, opset=23, reference="onnx")
    assert np.all(y[:, :, 1] == 0)


def test_attention_heads_must_divide():
    q, k, v = qkv(True, 3, 2)
    model = make_node_model("Attention", [q, k, v], {"q_num_heads": 3, "kv_num_heads": 2}, opset=23)
    with pytest.raises(ShapeInferenceError, match="multiple of kv_num_heads"):
        run_ours(model, {"in0": q, "in1": k, "in2": v})


# ---- RotaryEmbedding -------------------------------------------------------------------
@pytest.mark.parametrize("packed,interleaved,dim,positions", list(itertools.product(
    [False, True], [0, 1], [0, 4], [False, True])))
def test_rotary_embedding(packed, interleaved, dim, positions):
    b, h, s, d = 2, 3, 5, 8
    x = randn(b, s, h * d) if packed else randn(b, h, s, d)
    half = (dim or d) // 2
    if positions:
        pos = rng.integers(0, 10, (b, s)).astype(np.int64)
        cos, sin = randn(10, half), randn(10, half)
        inputs = [x, cos, sin, pos]
    else:
        inputs = [x, randn(b, s, half), randn(b, s, half)]
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": dim}
    if packed:
        attrs["num_heads"] = h
    check_node("RotaryEmbedding", inputs, attrs, opset=23)


# ---- LinearAttention, CausalConvWithState (opset 27: onnx's reference) -----------------
@pytest.mark.parametrize("rule,heads,past,decay_per_key", [
    ("linear", (2, 2), False, False), ("gated", (2, 2), True, True), ("delta", (4, 2), True, False),
    ("gated_delta", (4, 2), False, False), ("gated_delta", (4, 1), True, True)])
def test_linear_attention(rule, heads, past, decay_per_key):
    b, t, dk, dv = 2, 4, 4, 3
    hq, hkv = heads
    inputs = [randn(b, t, hq * dk), randn(b, t, hkv * dk) / 2, randn(b, t, hkv * dv),
              randn(b, hkv, dk, dv) if past else None]
    inputs.append(-np.abs(randn(b, t, hkv * dk if decay_per_key else hkv)) if "gated" in rule else None)
    inputs.append(1 / (1 + np.exp(-randn(b, t, hkv))) if "delta" in rule else None)
    while inputs[-1] is None:
        inputs.pop()
    attrs = {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule}
    check_node("LinearAttention", inputs, attrs, opset=27, outputs=2, reference="onnx")


@pytest.mark.parametrize("k,bias,past,act", [(1, False, False, "none"), (3, True, False, "silu"),
                                              (4, False, True, "swish"), (3, True, True, "none")])
def test_causal_conv_with_state(k, bias, past, act):
    b, c, length = 2, 3, 6
    inputs = [randn(b, c, length), randn(c, 1, k), randn(c) if bias else None,
              randn(b, c, k - 1) if past else None]
    while inputs[-1] is None:
        inputs.pop()
    check_node("CausalConvWithState", inputs, {"activation": act}, opset=27, outputs=2, reference="onnx")


# ---- FlexAttention (ai.onnx.preview; onnx's reference) ---------------------------------
@pytest.mark.parametrize("heads,scale,dtype,precision", [
    ((2, 2), None, np.float32, None), ((4, 2), 0.5, np.float32, 11), ((4, 1), None, np.float64, None),
    ((2, 2), None, np.float16, None)])
def test_flex_attention(heads, scale, dtype, precision):
    hq, hkv = heads
    inputs = [randn(2, hq, 3, 8, dtype=dtype), randn(2, hkv, 5, 8, dtype=dtype), randn(2, hkv, 5, 6, dtype=dtype)]
    attrs = {} if scale is None else {"scale": scale}
    if precision:
        attrs["softmax_precision"] = precision
    check_node("FlexAttention", inputs, attrs, opset=26, domain="ai.onnx.preview", reference="onnx",
               rtol=2e-3 if dtype == np.float16 else 1e-5)


def test_flex_attention_score_mod_is_refused():
    from onnx import TensorProto, helper

    from pooled_predictor.errors import UnsupportedOpError

    body = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "mod",
                             [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    q = randn(1, 2, 3, 4)
    model = make_node_model("FlexAttention", [q, q, q], {"score_mod": body}, opset=26, domain="ai.onnx.preview")
    with pytest.raises(UnsupportedOpError, match="score_mod"):
        run_ours(model, {"in0": q, "in1": q, "in2": q})


def test_rotary_embedding_position_out_of_range():
    from pooled_predictor.errors import InputError

    x, cos = randn(1, 2, 3, 4), randn(5, 2)
    pos = np.array([[0, 1, 7]], np.int64)
    model = make_node_model("RotaryEmbedding", [x, cos, cos, pos], {}, opset=23)
    with pytest.raises(InputError, match="position_ids"):
        run_ours(model, {"in0": x, "in1": cos, "in2": cos, "in3": pos})
