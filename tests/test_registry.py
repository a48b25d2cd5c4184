"""The kernel registry: versions come from onnx's schemas; every opset 11..newest is accepted."""

import onnx
import pytest

from pooled_predictor.ops.registry import find, kernel, registered_ops, schema_version

NEWEST = onnx.defs.onnx_opset_version()
ISSUE_OPS = """Conv ConvTranspose MaxPool AveragePool GlobalAveragePool Resize Concat Add Sub Mul Div Relu
Sigmoid HardSigmoid Erf ReduceMean BatchNormalization MatMul Softmax Transpose Squeeze Unsqueeze Cast Identity
Gemm Flatten Reshape LRN Dropout Clip Pad Shape Size Gather Slice Split Constant ConstantOfShape Expand Tile
Range Where Equal Less Greater Not Neg Abs Sqrt Pow Exp Log Tanh Reciprocal Floor Ceil Max Min Sum Mean
ReduceMax ReduceMin ReduceSum ReduceProd ArgMax LeakyRelu PRelu Elu HardSwish Gelu Softplus
LayerNormalization InstanceNormalization GlobalMaxPool Einsum TopK""".split()


def onnx_ops():
    return sorted({k.op_type for k in registered_ops("cpu") if k.domain == ""})


def test_every_op_of_the_issues_is_registered():
    missing = sorted(set(ISSUE_OPS) - set(onnx_ops()))
    assert not missing, missing


@pytest.mark.parametrize("op", onnx_ops())
def test_every_opset_from_11_to_newest_is_accepted(op):
    for opset in range(11, NEWEST + 1):
        version = schema_version(op, "", opset)
        if version is None:
            continue  # the op does not exist yet at this opset (e.g. Gelu before 20)
        k = find(op, "", opset, "cpu")
        assert k is not None, f"{op} at opset {opset} (schema version {version}) has no kernel"
        assert k.since <= version


def test_registering_a_key_twice_is_an_error():
    @kernel("TwiceTestOp", since=1, domain="test.registry")
    def first(x, *, out):
        pass

    with pytest.raises(ValueError, match="registered twice"):
        @kernel("TwiceTestOp", since=1, domain="test.registry")
        def second(x, *, out):
            pass


def test_unknown_device_is_an_error():
    with pytest.raises(ValueError, match="unknown device"):
        kernel("Relu", since=14, device="tpu")
