"""A BERT-like encoder quantized by onnxruntime's quantize_dynamic, against onnx and onnxruntime.

The model (zoo/encoder.py: 2 post-LN layers, d = 64, 4 heads, attention mask, exact Gelu in its
Erf form) quantized with int8 weights: every MatMul with a weight becomes DynamicQuantizeLinear
-> MatMulInteger -> Cast -> Mul (tests/quantized_zoo.py: quantized_encoder).

Issue 33 reported our int8 BERT 2.4e-2 x max|ref| away from onnxruntime. The gap is
onnxruntime's: on AVX2 hosts without VNNI its u8 x s8 MatMulInteger (vpmaddubsw) saturates each
pair of products to int16, so its results are not the spec's once weights use the full int8
range. We compute the spec exactly: ours equals onnx's reference evaluator (2e-7 x max|ref|)
while onnxruntime is 0.28 x max|ref| away from it on this model (0.12 with d = 768) on the 2-core
AVX2 dev machine. With 7-bit weights (reduce_range=True, onnxruntime's advice for such hosts)
onnxruntime is exact too, and we agree with it: 2e-7 x max|ref| with its optimizations off,
2.7e-7 with them on (on other inputs up to 5e-3: its fused SkipLayerNormalization and Gelu round
floats a little differently, which can move a value by one step of a DynamicQuantizeLinear).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from pooled_predictor import Predictor
from pooled_predictor.ops import int8_arithmetic
from pooled_predictor.zoo.encoder import encoder_inputs
from tests.quantized_zoo import quantized_encoder
from tests.models.test_quantized_models import ort_u8s8_saturates

HIDDEN = 64
REL_TOL = 1e-2


def _inputs():
    return encoder_inputs(2, 16, HIDDEN, padded=3, seed=7)


def _rel(a, ref) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - ref)) / np.max(np.abs(ref)))


def _ort(path, optimize: bool):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, _inputs())[0]


@pytest.mark.parametrize("reduce_range", [False, True], ids=["8bit", "7bit"])
def test_dynamic_encoder_matches_the_spec(reduce_range):
    """Ours against onnx's reference evaluator, the spec in numpy (no host-dependent saturation)."""
    from onnx.reference import ReferenceEvaluator

    path = quantized_encoder(layers=2, hidden=HIDDEN, reduce_range=reduce_range)
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops, ops
    ref = ReferenceEvaluator(str(path)).run(None, _inputs())[0]
    got = Predictor(str(path), int8_arithmetic="exact").forward(_inputs())["y"]
    err = _rel(got, ref)
    print(f"encoder {'7' if reduce_range else '8'}-bit weights: ours vs onnx reference {err:.3g} x max|ref|")
    assert err <= 1e-5, err


@pytest.mark.parametrize("optimize", [False, True], ids=["ort-plain", "ort-optimized"])
@pytest.mark.parametrize("reduce_range", [False, True], ids=["8bit", "7bit"])
def test_dynamic_encoder_matches_onnxruntime(reduce_range, optimize):
    if not reduce_range and ort_u8s8_saturates() and not int8_arithmetic.saturating():
        pytest.skip("onnxruntime's u8 x s8 MatMulInteger saturates to int16 on this host and our int8 arithmetic "
                    "is exact; see test_onnxruntime_saturation_is_the_gap")
    path = quantized_encoder(layers=2, hidden=HIDDEN, reduce_range=reduce_range)
    ref = _ort(path, optimize)
    got = Predictor(str(path)).forward(_inputs())["y"]
    err = _rel(got, ref)
    print(f"encoder {'7' if reduce_range else '8'}-bit, onnxruntime optimized={optimize}: {err:.3g} x max|ref|")
    assert err <= REL_TOL, err


def test_onnxruntime_saturation_is_the_gap():
    """Where onnxruntime saturates, its MatMulInteger of the encoder's first projection equals the
    int16-pair-saturated product, and so does ours under the default "onnxruntime" int8 arithmetic;
    under "exact" ours is the exact one, and that alone moves the output."""
    import onnxruntime as ort

    if not ort_u8s8_saturates():
        pytest.skip("onnxruntime does not saturate u8 x s8 products on this host")
    path = quantized_encoder(layers=2, hidden=HIDDEN)
    model = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    mm = next(n for n in model.graph.node if n.op_type == "MatMulInteger")
    dql = next(n for n in model.graph.node if n.op_type == "DynamicQuantizeLinear" and n.output[0] == mm.input[0])
    model.graph.output.extend(onnx.ValueInfoProto(name=o) for o in (mm.output[0], *dql.output))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    res = dict(zip(names, sess.run(None, _inputs())))
    a, a_zp = res[dql.output[0]].astype(np.int64), int(res[dql.output[2]])
    b = inits[mm.input[1]].astype(np.int64)
    b_zp = int(inits[mm.input[3]]) if len(mm.input) > 3 else 0
    k = a.shape[-1]
    exact = (a - a_zp) @ (b - b_zp)
    pairs = (a.reshape(a.shape[:-1] + (k // 2, 2, 1)) * b.reshape(k // 2, 2, -1)).sum(axis=-2)
    saturated = np.clip(pairs, -32768, 32767).sum(axis=-2) - a_zp * b.sum(axis=0) - b_zp * (a - a_zp).sum(-1, keepdims=True)
    ort_mm = res[mm.output[0]]
    assert np.array_equal(ort_mm, saturated), "onnxruntime's product is not the int16-pair-saturated one"
    assert not np.array_equal(ort_mm, exact)
    assert np.array_equal(Predictor(model.SerializeToString()).forward(_inputs())[mm.output[0]], saturated)
    got = Predictor(model.SerializeToString(), int8_arithmetic="exact").forward(_inputs())
    assert np.array_equal(got[mm.output[0]], exact), "ours must be the exact product"
    print(f"encoder 8-bit: onnxruntime vs ours {_rel(got['y'], res['y']):.3g} x max|ref| "
          f"({int((ort_mm != exact).sum())} of {exact.size} products of the first projection saturated)")
