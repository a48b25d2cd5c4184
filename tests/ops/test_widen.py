"""Small float types (bfloat16, float8: ml_dtypes) through kernels written for float32:
the node runs on float32 copies and rounds its outputs once (ops/widen.py), so its result
is exactly the float32 kernel's result rounded to the small type."""

import ml_dtypes
import numpy as np
import pytest

from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.importers import load_onnx
from pooled_predictor.engine.program import Program
from tests.onnx_helpers import feeds_of, make_node_model, run_ours

rng = np.random.default_rng(24)
BF16 = ml_dtypes.bfloat16


def small(*shape, dtype=BF16, scale=2.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


# op -> (inputs, attrs, static input indices, opset)
CASES = {
    "Gelu": ([small(3, 16)], {}, (), 20),
    "HardSwish": ([small(3, 16)], {}, (), 22),
    "Mish": ([small(3, 16)], {}, (), 22),
    "Softmax": ([small(3, 16)], {"axis": -1}, (), 13),
    "Conv": ([small(1, 2, 6, 6), small(3, 2, 3, 3), small(3)], {"pads": [1, 1, 1, 1]}, (1, 2), 22),
    "MaxPool": ([small(1, 2, 5, 5)], {"kernel_shape": [2, 2]}, (), 22),
    "InstanceNormalization": ([small(1, 2, 3, 3), small(2), small(2)], {}, (1, 2), 22),
    "LayerNormalization": ([small(2, 8), small(8), small(8)], {"axis": -1}, (1, 2), 17),
    "MatMul": ([small(3, 8), small(8, 4)], {}, (1,), 13),
    "Add": ([small(3, 8), small(8)], {}, (), 14),
    "Div": ([small(3, 8), small(8) + 3], {}, (), 14),
    "ReduceMean": ([small(3, 8)], {"keepdims": 0}, (), 13),
    "Sin": ([small(3, 8)], {}, (), 22),
    "Selu": ([small(3, 8)], {}, (), 22),
}


@pytest.mark.parametrize("op", list(CASES))
@pytest.mark.parametrize("optimization", [Optimization.MEMORY, Optimization.NONE])
def test_bfloat16_is_the_float32_result_rounded_once(op, optimization):
    inputs, attrs, static, opset = CASES[op]
    wide = [a.astype(np.float32) for a in inputs]
    net = Net(Program(load_onnx(make_node_model(op, inputs, attrs, opset=opset, static=static))),
              optimization=optimization)
    net.forward(feeds_of(inputs, static))
    ours = net.blob_by_name(net.output_names[0])
    (ref,) = run_ours(make_node_model(op, wide, attrs, opset=opset, static=static), feeds_of(wide, static))
    assert ours.dtype == BF16
    np.testing.assert_array_equal(ours.astype(np.float32), ref.astype(BF16).astype(np.float32))


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_float8_elementwise(dtype):
    """Float8 outputs (Cast-19+ and friends) through an element-wise op whose schema lists them."""
    x = small(4, 5, dtype=dtype)
    model = make_node_model("Identity", [x], opset=21)
    (ours,) = run_ours(model, feeds_of([x]))
    assert ours.dtype == dtype and np.array_equal(ours.view(np.uint8), x.view(np.uint8))


def test_exact_ops_run_on_the_small_type():
    """Data movement needs no float32 copy: a Transpose of bfloat16 asks for no workspace."""
    x = small(3, 4)
    net = Net(Program(load_onnx(make_node_model("Transpose", [x], {"perm": [1, 0]}, opset=13))),
              optimization=Optimization.MEMORY)
    net.forward(feeds_of([x]))
    assert net.arena_bytes <= 2 * 64 + 2 * x.nbytes  # input and output only, no float32 copies
    np.testing.assert_array_equal(net.blob_by_name(net.output_names[0]).astype(np.float32),
                                  x.T.astype(np.float32))
