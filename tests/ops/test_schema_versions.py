"""Indexing, tensor, reduction, normalization, loss and quantization ops register a kernel
for every schema version from opset 11 to the newest (versions from onnx's schemas)."""

import onnx
import pytest

from pooled_predictor.ops.registry import find

OPS = """GatherElements GatherND ScatterElements ScatterND Scatter TensorScatter Trilu CumSum CumProd OneHot
EyeLike DepthToSpace SpaceToDepth ReverseSequence CenterCropPad Hardmax LogSoftmax Softmax ReduceLogSumExp
ReduceL1 ReduceL2 ReduceSumSquare ReduceLogSum LpNormalization GroupNormalization RMSNormalization
MeanVarianceNormalization NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss QuantizeLinear DequantizeLinear
DynamicQuantizeLinear QLinearMatMul QLinearConv ConvInteger MatMulInteger Det""".split()


@pytest.mark.parametrize("op", OPS)
def test_every_schema_version_from_opset_11_has_its_kernel(op):
    for opset in range(11, onnx.defs.onnx_opset_version() + 1):
        try:
            since = onnx.defs.get_schema(op, opset, "").since_version
        except onnx.defs.SchemaError:
            continue  # the op does not exist yet at this opset
        k = find(op, "", opset, "cpu")
        assert k is not None and k.since == since, (op, opset, since, k and k.since)
