"""Every existing kernel whose schema admits integer inputs, run on each integer type the
schema allows, against onnxruntime (onnx's reference evaluator where onnxruntime has no
kernel for the type). Integer paths are easy to break with float-only numpy calls
(`np.trunc(q, out=q)` in Div once broke ShuffleNet v2's channel arithmetic); this grid
runs them all."""

import numpy as np
import onnx
import pytest

from tests.onnx_helpers import check_node, i64, np_to_elem

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
rng = np.random.default_rng(23)


def ints(shape, dtype, lo=-20, hi=20, nonzero=False):
    lo = max(lo, 0) if np.dtype(dtype).kind == "u" else lo
    x = rng.integers(lo, hi, shape, endpoint=True)
    if nonzero:
        x = np.where(x == 0, 3, x)
    return x.astype(dtype)


def unary(op, **attrs):
    return lambda t: ([ints((3, 4), t)], attrs, ())


def binary(op, nonzero=False, **attrs):
    return lambda t: ([ints((2, 3, 4), t), ints((4,), t, nonzero=nonzero)], attrs, ())


def distinct(shape, t):
    """Values without ties (TopK, ArgMax order ties differently in references)."""
    return (rng.permutation(int(np.prod(shape))) % 120).reshape(shape).astype(t)


# op -> (opset, builder(dtype) -> (inputs, attrs, static input indices), outputs)
CASES = {
    "Abs": (13, unary("Abs"), 1), "Neg": (13, unary("Neg"), 1), "Relu": (14, unary("Relu"), 1),
    "Sign": (13, unary("Sign"), 1), "Identity": (21, unary("Identity"), 1),
    "Add": (14, binary("Add"), 1), "Sub": (14, binary("Sub"), 1), "Mul": (14, binary("Mul"), 1),
    "Div": (14, binary("Div", nonzero=True), 1), "Mod": (13, binary("Mod", nonzero=True), 1),
    "Max": (13, binary("Max"), 1), "Min": (13, binary("Min"), 1),
    "Equal": (13, binary("Equal"), 1), "Less": (13, binary("Less"), 1), "Greater": (13, binary("Greater"), 1),
    "LessOrEqual": (16, binary("LessOrEqual"), 1), "GreaterOrEqual": (16, binary("GreaterOrEqual"), 1),
    "BitwiseAnd": (18, binary("BitwiseAnd"), 1), "BitwiseOr": (18, binary("BitwiseOr"), 1),
    "BitwiseXor": (18, binary("BitwiseXor"), 1), "BitwiseNot": (18, unary("BitwiseNot"), 1),
    "BitShift": (28, lambda t: ([ints((3, 4), t), ints((4,), t, 0, 3)], {"direction": "LEFT"}, ()), 1),
    "Pow": (15, lambda t: ([ints((3, 4), t, -4, 4), ints((4,), t, 0, 3)], {}, ()), 1),
    "PRelu": (16, lambda t: ([ints((2, 3, 4), t), ints((3, 1), t, -3, 3)], {}, ()), 1),
    "Clip": (13, lambda t: ([ints((3, 4), t), np.array(-5 if np.dtype(t).kind == "i" else 2, t),
                             np.array(7, t)], {}, (1, 2)), 1),
    "Shrink": (9, lambda t: ([ints((3, 4), t)], {"lambd": 3.0, "bias": 1.0}, ()), 1),
    "ArgMax": (13, lambda t: ([distinct((3, 5), t)], {"axis": 1}, ()), 1),
    "ArgMin": (13, lambda t: ([distinct((3, 5), t)], {"axis": 0, "keepdims": 0}, ()), 1),
    "TopK": (24, lambda t: ([distinct((3, 6), t), i64(2)], {"axis": -1}, (1,)), 2),
    "Concat": (13, lambda t: ([ints((2, 3), t), ints((1, 3), t)], {"axis": 0}, ()), 1),
    "Expand": (13, lambda t: ([ints((3, 1), t), i64(2, 3, 4)], {}, (1,)), 1),
    "Flatten": (21, lambda t: ([ints((2, 3, 4), t)], {"axis": 2}, ()), 1),
    "Gather": (13, lambda t: ([ints((5, 4), t), i64(0, 3, -1)], {"axis": 0}, (1,)), 1),
    "Gemm": (13, lambda t: ([ints((3, 4), t, 0, 5), ints((4, 5), t, 0, 5), ints((5,), t, 0, 5)],
                            {"transB": 0}, ()), 1),
    "MatMul": (13, lambda t: ([ints((2, 3, 4), t, 0, 5), ints((4, 5), t, 0, 5)], {}, ()), 1),
    "Einsum": (12, lambda t: ([ints((3, 4), t, 0, 5), ints((4, 2), t, 0, 5)], {"equation": "ij,jk->ik"}, ()), 1),
    "MaxPool": (12, lambda t: ([ints((1, 2, 5, 5), t)], {"kernel_shape": [2, 2], "strides": [2, 1]}, ()), 1),
    "Pad": (18, lambda t: ([ints((2, 3), t), i64(1, 0, 0, 2), np.array(5, t)], {"mode": "constant"}, (1, 2)), 1),
    "Range": (11, lambda t: ([np.array(2, t), np.array(17, t), np.array(3, t)], {}, ()), 1),
    "ReduceMax": (20, lambda t: ([ints((3, 4), t), i64(1)], {"keepdims": 0}, (1,)), 1),
    "ReduceMin": (20, lambda t: ([ints((3, 4), t), i64(0)], {}, (1,)), 1),
    "ReduceSum": (13, lambda t: ([ints((3, 4), t), i64(1)], {}, (1,)), 1),
    "ReduceProd": (18, lambda t: ([ints((3, 4), t, -3, 3), i64(1)], {}, (1,)), 1),
    "ReduceMean": (18, lambda t: ([ints((3, 4), t), i64(1)], {}, (1,)), 1),
    "Reshape": (21, lambda t: ([ints((2, 6), t), i64(3, -1)], {}, (1,)), 1),
    "Resize": (19, lambda t: ([ints((1, 1, 3, 3), t), None, np.array([1, 1, 2, 1.5], np.float32)],
                              {"mode": "nearest"}, (2,)), 1),
    "Shape": (21, unary("Shape"), 1), "Size": (21, unary("Size"), 1),
    "Slice": (13, lambda t: ([ints((4, 5), t), i64(1, 0), i64(3, 5), i64(0, 1), i64(1, 2)], {}, (1, 2, 3, 4)), 1),
    "Split": (18, lambda t: ([ints((2, 4), t), i64(1, 3)], {"axis": 1}, (1,)), 2),
    "Squeeze": (21, lambda t: ([ints((3, 1, 4), t), i64(1)], {}, (1,)), 1),
    "Unsqueeze": (21, lambda t: ([ints((3, 4), t), i64(0, 3)], {}, (1,)), 1),
    "Tile": (13, lambda t: ([ints((2, 3), t), i64(2, 1)], {}, (1,)), 1),
    "Transpose": (21, lambda t: ([ints((2, 3, 4), t)], {"perm": [2, 0, 1]}, ()), 1),
    "Cast": (21, lambda t: ([ints((3, 4), t)], {"to": onnx.TensorProto.FLOAT}, ()), 1),
    "CastLike": (21, lambda t: ([ints((3, 4), t), np.zeros(1, np.float64)], {}, ()), 1),
    "NonZero": (13, lambda t: ([ints((3, 4), t, -1, 1)], {}, ()), 1),
    "Compress": (11, lambda t: ([ints((3, 4), t), np.array([True, False, True])], {"axis": 0}, ()), 1),
    "Unique": (11, lambda t: ([ints((4, 3), t, -2, 2)], {}, ()), 4),
}


def allowed_ints(op, opset):
    schema = onnx.defs.get_schema(op, opset)
    param = schema.inputs[0].type_str
    allowed = next((c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == param), [param])
    return [t for t in INTS if f"tensor({onnx.TensorProto.DataType.Name(np_to_elem(t)).lower()})" in allowed]


GRID = [pytest.param(op, t, id=f"{op}-{np.dtype(t).name}") for op in CASES
        for t in allowed_ints(op, CASES[op][0])]


@pytest.mark.parametrize("op,dtype", GRID)
def test_integer_inputs(op, dtype):
    opset, build, outputs = CASES[op]
    inputs, attrs, static = build(dtype)
    check_node(op, inputs, attrs, opset=opset, static=static, outputs=outputs, reference="onnx")


def test_grid_covers_the_integer_ops():
    """Each op of the table takes at least one integer type at its opset (a typo'd table
    entry would silently test nothing)."""
    assert all(allowed_ints(op, opset) for op, (opset, _, _) in CASES.items())
