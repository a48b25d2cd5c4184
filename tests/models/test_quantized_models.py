"""Zoo CNNs quantized by onnxruntime's quantize_static (QOperator and QDQ) against onnxruntime.

Models: ResNet-50 and MobileNetV2 of the zoo (cnn.build, 224x224, batch 1), quantized per
channel with uint8 activations and int8 weights, calibrated on 16 seeded random images
(tests/quantized_zoo.py, cached under ~/.cache/pooled-predictor/quantized/). They are built, not
fetched, like the other zoo tests (tests/zoo), so they run wherever the suite runs.

The bar, per output: max |ours - onnxruntime| <= one quantization step of the output (the
scale of the DequantizeLinear that produces it: "logits", and "prob", the output of
com.microsoft's QLinearSoftmax in QOperator models, of QuantizeLinear/DequantizeLinear around
Softmax in QDQ ones), or <= 1e-2 x max |onnxruntime| for a float output.

onnxruntime's u8 x s8 GEMM on AVX2 hosts without VNNI (vpmaddubsw) saturates each pair of
products to int16, so with full-range int8 weights its own results are off there (MobileNetV2
QOperator: 0.14 x max|logits| on the 2-core AVX2 dev machine); we compute exactly. Such hosts
compare the reduce_range=True models (7-bit weights, onnxruntime's advice for them), where
onnxruntime is exact too; the full-range models are compared where onnxruntime does not
saturate (VNNI or AVX-512BW hosts) and skipped, with the reason, elsewhere.

Measured on the 2-core AVX2 dev machine (7-bit weights): QOperator ResNet-50 and MobileNetV2
equal onnxruntime bit for bit (logits and prob: 0 steps). QDQ: logits 1 step
(ResNet-50 0.1174, MobileNetV2 0.1524; 2 steps for ResNet-50 against onnxruntime's optimized
session with default threads), prob 2 and 6 steps of 1/255: xfail (non-strict), since QDQ runs
float convolutions between (de)quantizations whose rounding is not onnxruntime's; the QDQ
rewrite into integer kernels (issue 33, part 1) is what makes them match.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from pooled_predictor import Predictor
from pooled_predictor.zoo import cnn
from pooled_predictor.ops import int8_arithmetic
from tests.quantized_zoo import quantized_cnn

SIZE = 224
OUTPUTS = ("prob", "logits")
FLOAT_REL_TOL = 1e-2


@functools.lru_cache(maxsize=1)
def ort_u8s8_saturates() -> bool:
    """Whether this host's onnxruntime MatMulInteger (u8 x s8) saturates pairs of products to int16."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    a = np.full((1, 2), 255, np.uint8)
    b = np.full((2, 1), 127, np.int8)
    g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                          [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])],
                          [numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    return int(y[0, 0]) != 255 * 127 * 2


def output_steps(model: onnx.ModelProto) -> dict[str, float | None]:
    """Graph output -> the scale of the DequantizeLinear producing it (None: a float op's output)."""
    inits = {t.name: t for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    steps = {}
    for out in model.graph.output:
        n = producer.get(out.name)
        if n is not None and n.op_type == "DequantizeLinear" and n.input[1] in inits:
            steps[out.name] = float(numpy_helper.to_array(inits[n.input[1]]).max())
        else:
            steps[out.name] = None
    return steps


CASES = [pytest.param(name, fmt, rr, id=f"{name}-{fmt}-{'7bit' if rr else '8bit'}")
         for name in ("resnet50", "mobilenet_v2") for fmt in ("QOperator", "QDQ") for rr in (True, False)]


@pytest.mark.parametrize("name,fmt,reduce_range", CASES)
def test_quantized_model_matches_onnxruntime(name, fmt, reduce_range):
    import onnxruntime as ort

    if not reduce_range and ort_u8s8_saturates() and not int8_arithmetic.saturating():
        pytest.skip("onnxruntime's u8 x s8 GEMM saturates to int16 on this host (AVX2 without VNNI) and our int8 "
                    "arithmetic is exact: the 7-bit (reduce_range) case compares here")
    path = quantized_cnn(name, fmt, input_size=SIZE, reduce_range=reduce_range)
    model = onnx.load(str(path))
    if fmt == "QOperator":
        assert any(n.domain == "com.microsoft" for n in model.graph.node), "expected contrib ops"
    x = cnn.sample_input(name, 1, seed=100, input_size=SIZE)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    expected = dict(zip(OUTPUTS, sess.run(list(OUTPUTS), {"data": x})))
    got = Predictor(str(path)).forward({"data": x})
    steps = output_steps(model)
    problems, qdq_prob = [], ""
    for out, ref in expected.items():
        assert got[out].shape == ref.shape and got[out].dtype == ref.dtype, (out, got[out].shape, got[out].dtype)
        err = float(np.max(np.abs(got[out].astype(np.float64) - ref)))
        scale = float(np.max(np.abs(ref)))
        step = steps[out]
        label = f"{name} {fmt} reduce_range={reduce_range} {out}: max diff {err:.4g}"
        if step is not None:
            print(f"{label} = {err / step:.3g} quantization steps ({step:.4g}); {err / scale:.3g} x max|ref|")
            bad = err > step * (1 + 1e-5)
            bar = f"one step {step:.4g}"
        else:
            print(f"{label} = {err / scale:.3g} x max|ref|")
            bad = err > FLOAT_REL_TOL * scale
            bar = f"{FLOAT_REL_TOL} x {scale:.4g}"
        if bad and fmt == "QDQ":
            qdq_prob = f"{qdq_prob}; " if qdq_prob else ""
            qdq_prob += f"{out}: max diff {err:.4g} > {bar}"
        elif bad:
            problems.append(f"{out}: max diff {err:.4g} > {bar}")
    assert not problems, "; ".join(problems)
    if qdq_prob:
        pytest.xfail(f"{qdq_prob}: a QDQ model runs float Conv/Gemm between DequantizeLinear and QuantizeLinear; "
                     "our float convolutions round differently from onnxruntime's (whose optimized session "
                     "runs integer kernels instead), which moves some quantized values by a step, and Softmax "
                     "turns a step of a logit into several of prob; needs the QDQ rewrite of issue 33, part 1")
