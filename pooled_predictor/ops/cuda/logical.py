"""Comparisons, logical ops, Where and Cast on the GPU (kernels/logical.cu): the element types past
float32 that models use around their float32 work -- BERT's padding mask is Equal(int64 ids, 0),
Not, Cast to float32.

Comparisons (Equal, Less, LessOrEqual, Greater, GreaterOrEqual) take float32, float64, int64, int32,
int8, uint8 and bool; And, Or, Xor, Not take bool; Where any element of 1, 2, 4 or 8 bytes; Cast
converts among float32, float64, int64, int32, int8, uint8 and bool as C does (float -> int
truncates toward zero, as numpy's astype; to bool: v != 0). Broadcasting: ONNX's multidirectional
rules through strides (rank <= 8). Other types run on the CPU (engine/placement.py).
"""

from __future__ import annotations

import math

import numpy as np

from . import runtime
from .codes import cuda_kernel
from .elementwise import _broadcast_strides

MAX_RANK = 8
COMPARE = {"Equal": 0, "Less": 1, "LessOrEqual": 2, "Greater": 3, "GreaterOrEqual": 4}
LOGICAL = {"And": 0, "Or": 1, "Xor": 2, "Not": 3}
# numpy dtype -> the C type name the kernels are instantiated for (kernels/logical.cu)
CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.int64): "i64",
          np.dtype(np.int32): "i32", np.dtype(np.int8): "i8", np.dtype(np.uint8): "u8", np.dtype(np.bool_): "bool"}
_SIZES = {1: "b1", 2: "b2", 4: "b4", 8: "b8"}


def _meta(out: tuple, *shapes) -> tuple[int, object]:
    """(rank, meta) of broadcast operands: rank 0 when every operand has the output's shape."""
    out = tuple(out)
    if all(tuple(s) == out for s in shapes):
        return 0, runtime.i64([0])
    dims = list(out) or [1]
    return len(dims), runtime.i64(dims + [x for s in shapes for x in (_broadcast_strides(tuple(s), out) or [0])])


def _rank_ok(ctx) -> bool:
    return len(ctx.out_shapes[0]) <= MAX_RANK


def _compare_supported(ctx) -> bool:
    return (ctx.num_inputs == 2 and _rank_ok(ctx) and np.dtype(ctx.dtype(0)) == np.dtype(ctx.dtype(1))
            and np.dtype(ctx.dtype(0)) in CTYPES)


class _Compare:
    """C (bool) = A op B over the broadcast inputs (kernels/logical.cu compare_<type>)."""

    code = 0

    def __init__(self, ctx):
        t = CTYPES[np.dtype(ctx.dtype(0))]
        self.fn = runtime.function("logical.cu", f"compare_{'u8' if t == 'bool' else t}")
        out = tuple(ctx.out_shapes[0])
        self.n = math.prod(out)
        self.rank, self.meta = _meta(out, ctx.shape(0), ctx.shape(1))

    def __call__(self, a, b, *, out):
        runtime.launch(self.fn, self.n, (a, b, out, np.int64(self.n), np.int32(self.code), np.int32(self.rank),
                                         self.meta))


for _op, _code in COMPARE.items():
    cuda_kernel(_op, supports=_compare_supported)(
        type(_op, (_Compare,), {"code": _code, "__doc__": f"ONNX {_op} on the GPU (bool output, broadcasting)."}))


def _bool_supported(ctx) -> bool:
    return _rank_ok(ctx) and all(np.dtype(ctx.dtype(i)) == np.bool_ for i in range(ctx.num_inputs))


class _Logical:
    """Y (bool) = A op B (And, Or, Xor; broadcasting) or not A (kernels/logical.cu logical_bool)."""

    code = 0

    def __init__(self, ctx):
        self.fn = runtime.function("logical.cu", "logical_bool")
        out = tuple(ctx.out_shapes[0])
        self.n = math.prod(out)
        shapes = [ctx.shape(i) for i in range(ctx.num_inputs)]
        self.rank, self.meta = _meta(out, *shapes) if len(shapes) == 2 else (0, runtime.i64([0]))

    def __call__(self, a, b=None, *, out):
        runtime.launch(self.fn, self.n, (a, a if b is None else b, out, np.int64(self.n), np.int32(self.code),
                                         np.int32(self.rank), self.meta))


for _op, _code in LOGICAL.items():
    cuda_kernel(_op, supports=_bool_supported)(
        type(_op, (_Logical,), {"code": _code, "__doc__": f"ONNX {_op} on bool tensors on the GPU."}))


def _where_supported(ctx) -> bool:
    return (ctx.num_inputs == 3 and _rank_ok(ctx) and np.dtype(ctx.dtype(0)) == np.bool_
            and np.dtype(ctx.dtype(1)) != object and np.dtype(ctx.dtype(1)).itemsize in _SIZES)


@cuda_kernel("Where", supports=_where_supported)
class Where:
    """ONNX Where: Y = X where the condition holds else Y, over the broadcast of all three; any element
    of 1, 2, 4 or 8 bytes (its bits copied)."""

    def __init__(self, ctx):
        self.fn = runtime.function("logical.cu", f"where_{_SIZES[np.dtype(ctx.dtype(1)).itemsize]}")
        out = tuple(ctx.out_shapes[0])
        self.n = math.prod(out)
        self.rank, self.meta = _meta(out, ctx.shape(0), ctx.shape(1), ctx.shape(2))

    def __call__(self, cond, x, y, *, out):
        runtime.launch(self.fn, self.n, (cond, x, y, out, np.int64(self.n), np.int32(self.rank), self.meta))


def _cast_supported(ctx) -> bool:
    return np.dtype(ctx.dtype(0)) in CTYPES and np.dtype(ctx.out_dtypes[0]) in CTYPES


@cuda_kernel("Cast", supports=_cast_supported)
class Cast:
    """ONNX Cast among float32, float64, int64, int32, int8, uint8 and bool on the GPU (kernels/logical.cu
    cast_<from>_<to>; the module docstring gives the conversions). saturate and round_mode concern
    float8 targets only, which run on the CPU."""

    def __init__(self, ctx, *, to, saturate=1, round_mode="up"):
        src, dst = CTYPES[np.dtype(ctx.dtype(0))], CTYPES[np.dtype(ctx.out_dtypes[0])]
        self.n = math.prod(ctx.shape(0))
        self.same = src == dst or {src, dst} == {"u8", "bool"} and src == "bool"  # bool -> uint8: the bytes
        self.fn = None if self.same else runtime.function("logical.cu", f"cast_{src}_{dst}")

    def __call__(self, x, *, out):
        if self.same:
            if x.data.ptr != out.data.ptr:
                runtime.cupy.copyto(out, x.view(out.dtype).reshape(out.shape))
            return
        runtime.launch(self.fn, self.n, (x, out, np.int64(self.n)))
