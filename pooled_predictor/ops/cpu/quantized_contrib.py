"""onnxruntime's quantized contrib ops (domain com.microsoft, version 1), as its quantizer emits
them in the QOperator format: QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearSoftmax, QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QGemm, DynamicQuantizeMatMul,
MatMulIntegerToFloat.

Schemas: onnxruntime docs/ContribOperators.md (registered with onnx by contrib_schemas.py).
The schemas give the real-valued formula; its rounding is onnxruntime's (MLAS), which these
kernels reproduce step by step so that integer outputs equal onnxruntime's bit for bit: every
float step is a float32 operation rounded to nearest even, computed here in float64 from
operands exact in float64 and rounded once to float32 (so a fused multiply-add is one rounding,
a multiply then an add two), and float -> integer conversion is round half to even followed by
saturation to the output type:

* QLinearAdd (MLAS qladd_avx2.cpp, the x86-64 kernel on AVX2 and AVX-512 hosts):
  r_a = s_a / s_c, r_b = s_b / s_c, k = z_c - (r_a z_a + r_b z_b), then
  y = fma(a, r_a, fma(b, r_b, k)); where the broadcast makes one side constant along the
  innermost run of the output (a scalar, or a per-channel (C, 1, 1) operand), that side is
  folded first: k' = k + r_b b, y = fma(a, r_a, k') (or the same with a and b swapped).
* QLinearMul (MLAS qlmul.cpp): y = ((a - z_a)(b - z_b)) * (s_a s_b / s_c) + z_c.
* QLinearSigmoid, QLinearLeakyRelu, QLinearConcat (onnxruntime's lookup tables): for each of the
  256 codes q, x = (q - z_x) s_x, f(x), then y = f(x) / s_y clamped and rounded, + z_y.
* QLinearGlobalAveragePool (MLAS qlgavgpool.cpp): y = (sum(x) - z_x HW) * (s_x / (s_y HW)) + z_y.
* QLinearAveragePool (onnxruntime qlinear_pool.cc): the float32 sum of (x - z_x) s_x over the
  window in row-major order, divided by the count, then y = sum / s_y + z_y.
* QGemm (onnxruntime qgemm.cc; MLAS requantization): the int32 accumulator C + (A' - z_a)(B' - z_b)
  times alpha s_a s_b[j] (/ s_y), rounded (+ z_y) or as float32.
* DynamicQuantizeMatMul, MatMulIntegerToFloat: (A - z_a)(B - z_b) in int32, times s_a s_b[j],
  + bias, float32 (A of DynamicQuantizeMatMul quantized as DynamicQuantizeLinear does).

The integer products follow the Net's int8 arithmetic (ops/int8_arithmetic.py,
ops/cpu/quantized.integer_product): "onnxruntime" (default) sums uint8 x int8 products as
onnxruntime's own GEMM does on this host -- on AVX2 hosts without VNNI (vpmaddubsw) each
adjacent pair of raw products saturated to int16, so the outputs are onnxruntime's bit for
bit; "exact" (and any other type pair) is the spec's exact sum (float64 BLAS of 8-bit operands).
"""

from __future__ import annotations

import functools
import re

import numpy as np

from ...contrib_schemas import DOMAIN, VERSION
from ..shapes.fused import DOMAIN as OURS
from ..registry import kernel
from ..shapes.quantized_contrib import nchw_pool_geometry
from .quantize import dynamic_quantize_linear, int_range
from .. import int8_arithmetic
from . import compiled
from .conv_shared import shared_weights
from .qmatmul import DynamicQuantizeMatMul as FusedDynamicQuantizeMatMul
from .qproduct import StaticProduct
from .quantized import _shifted, integer_product

F32 = np.float32


def _f32(x) -> np.ndarray:
    """float64 values rounded to float32 (round to nearest even) and held in float64 again."""
    return np.asarray(x, np.float64).astype(F32).astype(np.float64)


def _scalar(v, default=0) -> float:
    """The one element of a per-tensor scale or zero point as a Python number (default if absent)."""
    if v is None:
        return default
    return np.asarray(v).reshape(-1)[0].item()


def saturate_rint(v: np.ndarray, out: np.ndarray, zero_point=0) -> None:
    """out = saturate(round_half_even(v) + zero_point) in out's integer type (v float64, overwritten)."""
    np.rint(v, out=v)
    if np.ndim(zero_point) or zero_point:
        v += zero_point
    lo, hi = int_range(out.dtype)
    np.clip(v, lo, hi, out=v)
    np.copyto(out, v, casting="unsafe")


def quantize_f32(x: np.ndarray, y_scale: float, y_zero_point: int, dtype) -> np.ndarray:
    """MLAS's QuantizeLinear of float32 values: saturate(rint(float32(x / y_scale)) + z), as `dtype`."""
    v = _f32(np.asarray(x, np.float64) / np.float64(F32(y_scale)))
    out = np.empty(v.shape, dtype)
    saturate_rint(v, out, int(y_zero_point))
    return out


def dequantize_f32(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """float32((q - z) * s) (held in float64): the exact difference times the float32 scale, rounded."""
    return _f32((np.asarray(q, np.float64) - zero_point) * np.float64(F32(scale)))


def codes(dtype) -> np.ndarray:
    """Every value of an 8-bit type, in the order of its bytes read as uint8 (a table index)."""
    return np.arange(256, dtype=np.uint8).view(dtype)


def lookup(x: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:
    """out = table[x's byte] for 8-bit x (the table indexed by the byte read as uint8): compiled/quantize.lookup_bytes
    where it takes the table's type and out is contiguous, else numpy's take."""
    run = _lookup_compiled(x, table, out)
    if run is not None:
        run()
    else:
        np.take(table, np.asarray(x).view(np.uint8), out=out)  # (not ascontiguousarray: it makes a 0-d X 1-d)


_LOOKUP_TYPES = (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.float32))


def _lookup_compiled(x, table, out):
    """compiled/quantize.lookup_bytes bound to these arrays, or None (compiled kernels off, another table type, a
    non-contiguous array, or out overlapping the table)."""
    if (not compiled.active() or table.dtype not in _LOOKUP_TYPES or out.dtype != table.dtype
            or not (x.flags.c_contiguous and out.flags.c_contiguous and table.flags.c_contiguous)):
        return None
    return compiled.bound(compiled.quantize.lookup_bytes, x.reshape(-1).view(np.uint8), table, out.reshape(-1))


@kernel("Lookup", since=1, domain=OURS, inplace=(0,))
class Lookup:
    """Y = T[X]: each 8-bit code of X (read as uint8: the table's index) replaced by its entry of the 256-entry table T.

    X: uint8 or int8, any shape; T: (256,) of any numeric type, entry i for the code whose byte is i; Y: X's shape,
    T's dtype. passes/lookup.py emits it for a chain of element-wise ops whose only varying input is one 8-bit
    tensor (the table: the chain evaluated on the 256 codes by the kernels it replaces, so their bits), as
    onnxruntime's QLinearSigmoid / QLinearLeakyRelu and XNNPACK's 8-bit lookup-table operators do for one op.
    Y may take X's storage (an 8-bit T): each element is read before it is written.
    """

    def __init__(self, ctx):
        pass

    def prepare_run(self, x, table, *, out):
        """The compiled pass bound once where T is a weight (read-only); None otherwise."""
        return None if table.flags.writeable else _lookup_compiled(x, table, out)

    def __call__(self, x, table, *, out):
        lookup(x, table, out)


def _constant_inner(x_shape: tuple, out_shape: tuple) -> bool:
    """Whether an operand is constant along the innermost run of the broadcast output (onnxruntime's
    broadcaster then hands it to the kernel as a scalar per run): its size is 1, or it has size 1 on
    the output's last axis longer than 1."""
    if int(np.prod(x_shape)) == 1:
        return True
    padded = (1,) * (len(out_shape) - len(x_shape)) + tuple(x_shape)
    for d_out, d_x in zip(reversed(out_shape), reversed(padded)):
        if d_out > 1:
            return d_x == 1
    return False


def runs_plan(a_shape: tuple, b_shape: tuple, out_shape: tuple) -> tuple | None:
    """(full, inner) where one operand has the output's shape (full: 0 for A, 1 for B) and the other is
    constant along runs of `inner` > 1 output elements, run r taking its element r % size (a per-channel
    (C, 1, 1) operand of an (N, C, H, W) output, repeated over N; a scalar: inner = the output's size); else
    None. Such an operand is "constant inner" (_constant_inner), the side QLinearAdd folds first."""
    out = tuple(out_shape)
    for full, (x, y) in enumerate(((a_shape, b_shape), (b_shape, a_shape))):
        if tuple(x) != out:
            continue
        y = (1,) * (len(out) - len(y)) + tuple(y)
        s = max((i + 1 for i, d in enumerate(y) if d != 1), default=0)
        k = next((i for i, d in enumerate(y) if d != 1), s)  # leading 1s: repeated over those dims (a batch)
        inner = int(np.prod(out[s:], dtype=np.int64))
        if y[k:s] == out[k:s] and inner > 1:
            return full, inner
    return None


def rows_plan(a_shape: tuple, b_shape: tuple, out_shape: tuple) -> tuple | None:
    """(full, inner, mid) where one operand has the output's shape (full: 0 for A, 1 for B) and the other, Y, is the
    output's shape with 1s on one group of consecutive axes (`mid` > 1 output elements) followed by axes it shares
    (`inner` elements, varying along the last): Y's rows of `inner` each repeated `mid` times (a bias over the last
    axes: the group leads, mid = every row; Swin's window mask over the heads); else None
    (compiled/quantize.qlinear_binary_rows). Axes of size 1 in the output carry nothing."""
    out = tuple(out_shape)
    for full, (x, y) in enumerate(((a_shape, b_shape), (b_shape, a_shape))):
        y = (1,) * (len(out) - len(y)) + tuple(y)
        if tuple(x) != out or len(y) != len(out):
            continue
        dims = [(o, d == o) for d, o in zip(y, out) if o != 1]
        pattern = "".join("S" if shared else "B" for _, shared in dims)
        found = re.fullmatch(r"S*(B+)(S+)", pattern)
        if found is None:
            continue
        mid = int(np.prod([o for o, _ in dims[found.start(1):found.end(1)]], dtype=np.int64))
        inner = int(np.prod([o for o, _ in dims[found.start(2):]], dtype=np.int64))
        return full, inner, mid
    return None


def _bound_rows(op: int, plan: tuple, a, b, out, consts: tuple):
    """compiled/quantize.qlinear_binary_rows (or its in-place form) bound once; None where C overlaps the
    repeated operand or overlaps the full one only in part."""
    full, inner, mid = plan
    x, y = (a, b) if full == 0 else (b, a)
    of = out.reshape(-1)
    if np.shares_memory(of, y):
        return None
    consts = tuple(map(float, consts)) + (0.0,) * (4 - len(consts))
    if np.shares_memory(of, x):
        if x.ctypes.data != of.ctypes.data:
            return None
        return compiled.bound(compiled.quantize.qlinear_binary_rows_inplace, of, y.reshape(-1), inner, mid, full == 0,
                              op, *consts)
    return compiled.bound(compiled.quantize.qlinear_binary_rows, x.reshape(-1), y.reshape(-1), of, inner, mid,
                          full == 0, op, *consts)


# ---- element-wise -------------------------------------------------------------------------------
@kernel("QLinearAdd", since=VERSION, domain=DOMAIN, inplace=(0, 3))
class QLinearAdd:
    """qlinear_add below; where A, B and C have one shape, in one compiled pass
    (compiled/quantize.qlinear_add_same: the same float32 roundings, bit for bit), where one operand has C's
    shape and the other one value a run of C (runs_plan: a per-channel or scalar operand) in
    compiled/quantize.qlinear_binary_runs, and where the other is C's shape with one group of axes broadcast before
    axes it shares (rows_plan: a bias over the last axis, a mask over the heads) in compiled/quantize.qlinear_binary_rows. C may take A's or B's storage (the planner's in-place reuse, as
    Add's): each element is read before it is written, and the numpy path reads its operands into float64
    copies first."""

    def __init__(self, ctx):
        shapes = {tuple(ctx.shape(0)), tuple(ctx.shape(3)), tuple(ctx.out_shapes[0])}
        # one shape (of more than one element: a single one is "constant inner", rounded in another order)
        self.same = compiled.active() and len(shapes) == 1 and int(np.prod(ctx.out_shapes[0])) > 1
        self.runs = (runs_plan(tuple(ctx.shape(0)), tuple(ctx.shape(3)), tuple(ctx.out_shapes[0]))
                     if compiled.active() and not self.same else None)
        self.rows = (rows_plan(tuple(ctx.shape(0)), tuple(ctx.shape(3)), tuple(ctx.out_shapes[0]))
                     if compiled.active() and not self.same and self.runs is None else None)
        static = all(ctx.is_static(i) for i in (1, 4, 6)) and all(ctx.is_static(i) or not ctx.has_input(i)
                                                                   for i in (2, 5, 7))
        self.constants = _add_constants(*(ctx.value_or_none(i) for i in (1, 2, 4, 5, 6, 7))) if static else None

    def prepare_run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None, *, out):
        """The compiled pass bound once (registry.py: prepare_run) where the scales and zero points are
        weights and A, B, C one contiguous shape (or runs_plan's, or rows_plan's); None otherwise."""
        contiguous = a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous
        if self.runs is not None and self.constants is not None and contiguous:
            return _bound_runs(0, self.runs, a, b, out, self.constants[:2], (self.constants[2],))
        if self.rows is not None and self.constants is not None and contiguous:
            return _bound_rows(0, self.rows, a, b, out, self.constants)
        if not (self.same and self.constants is not None and contiguous):
            return None
        af, bf, of = a.reshape(-1), b.reshape(-1), out.reshape(-1)
        for io, other, io_is_a in ((af, bf, True), (bf, af, False)):  # C over A or B (inplace): one array
            if np.shares_memory(of, io):
                if io.ctypes.data != of.ctypes.data:
                    return None  # a partial overlap: the numpy path's copies
                return compiled.bound(compiled.quantize.qlinear_add_inplace, of, other, io_is_a, *self.constants)
        return compiled.bound(compiled.quantize.qlinear_add_same, af, bf, of, *self.constants)

    def __call__(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None, *, out):
        if self.runs is not None or self.rows is not None:
            run = self.prepare_run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point, out=out)
            if run is not None:
                run()
                return
        if not (self.same and a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous):
            qlinear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point, out=out)
            return
        ra, rb, k = self.constants or _add_constants(a_scale, a_zero_point, b_scale, b_zero_point, c_scale,
                                                     c_zero_point)
        compiled.quantize.qlinear_add_same(a.reshape(-1), b.reshape(-1), out.reshape(-1), ra, rb, k)


def _add_constants(a_scale, a_zero_point, b_scale, b_zero_point, c_scale, c_zero_point):
    """QLinearAdd's float32 ratios ra = s_a / s_c, rb = s_b / s_c and k = z_c - (ra z_a + rb z_b)."""
    ra = _f32(np.float64(F32(_scalar(a_scale))) / np.float64(F32(_scalar(c_scale))))
    rb = _f32(np.float64(F32(_scalar(b_scale))) / np.float64(F32(_scalar(c_scale))))
    za, zb, zc = _scalar(a_zero_point), _scalar(b_zero_point), _scalar(c_zero_point)
    k = _f32(zc - _f32(_f32(ra * za) + _f32(rb * zb)))
    return float(ra), float(rb), float(k)


def qlinear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None, *, out):
    """C = (A_scale (A - A_zero_point) + B_scale (B - B_zero_point)) / C_scale + C_zero_point.

    A, B, C: uint8 or int8 (one type), numpy broadcasting; scales float32 scalars; zero points
    scalars of A's type (absent: 0). Rounded as MLAS's AVX2 kernel (module docstring).
    Source: onnxruntime ContribOperators.md#com.microsoft.QLinearAdd.
    """
    ra, rb, k = _add_constants(a_scale, a_zero_point, b_scale, b_zero_point, c_scale, c_zero_point)
    av = np.broadcast_to(a, out.shape).astype(np.float64)
    bv = np.broadcast_to(b, out.shape).astype(np.float64)
    if _constant_inner(np.shape(b), out.shape):
        v = _f32(av * ra + _f32(k + _f32(bv * rb)))
    elif _constant_inner(np.shape(a), out.shape):
        v = _f32(bv * rb + _f32(k + _f32(av * ra)))
    else:
        v = _f32(av * ra + _f32(bv * rb + k))
    saturate_rint(v, out)


def _bound_runs(op: int, plan: tuple, a, b, out, per_side: tuple, shared: tuple):
    """compiled/quantize.qlinear_binary_runs bound once: x the full operand, y the per-run one (plan: runs_plan's),
    per_side (A's constant, B's) ordered x's then y's, then `shared`. None where an operand overlaps C
    (the numpy path reads copies)."""
    full, inner = plan
    x, y = (a, b) if full == 0 else (b, a)
    of = out.reshape(-1)
    if np.shares_memory(of, y):
        return None
    cx, cy = per_side if full == 0 else per_side[::-1]
    consts = (float(cx), float(cy)) + tuple(map(float, shared)) + (0.0,) * (2 - len(shared))
    if np.shares_memory(of, x):  # C over x (the planner's in-place reuse): one array
        if x.ctypes.data != of.ctypes.data:
            return None
        return compiled.bound(compiled.quantize.qlinear_binary_runs_inplace, of, y.reshape(-1), inner, op, *consts)
    return compiled.bound(compiled.quantize.qlinear_binary_runs, x.reshape(-1), y.reshape(-1), of, inner, op,
                          *consts)


@kernel("QLinearMul", since=VERSION, domain=DOMAIN)
class QLinearMul:
    """qlinear_mul below; compiled where the scales and zero points are weights and A, B, C are contiguous: one
    shape (compiled/quantize.qlinear_mul_same), runs_plan's (qlinear_binary_runs) or rows_plan's
    (qlinear_binary_rows): the numpy reference's float32 operations, so its bits."""

    def __init__(self, ctx):
        a_shape, b_shape, out_shape = tuple(ctx.shape(0)), tuple(ctx.shape(3)), tuple(ctx.out_shapes[0])
        self.same = compiled.active() and a_shape == b_shape == out_shape
        self.runs = runs_plan(a_shape, b_shape, out_shape) if compiled.active() and not self.same else None
        self.rows = (rows_plan(a_shape, b_shape, out_shape) if compiled.active() and not self.same
                     and self.runs is None else None)
        static = all(ctx.is_static(i) for i in (1, 4, 6)) and all(ctx.is_static(i) or not ctx.has_input(i)
                                                                   for i in (2, 5, 7))
        self.constants = _mul_constants(*(ctx.value_or_none(i) for i in (1, 2, 4, 5, 6, 7))) if static else None

    def prepare_run(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None, *, out):
        """The compiled pass bound once (registry.py: prepare_run); None where the numpy path runs."""
        if self.constants is None or not (a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous):
            return None
        za, zb, ratio, zc = self.constants
        if self.runs is not None:
            return _bound_runs(1, self.runs, a, b, out, (za, zb), (ratio, zc))
        if self.rows is not None:
            return _bound_rows(1, self.rows, a, b, out, self.constants)
        if self.same and not (np.shares_memory(out, a) or np.shares_memory(out, b)):
            return compiled.bound(compiled.quantize.qlinear_mul_same, a.reshape(-1), b.reshape(-1), out.reshape(-1),
                                  za, zb, ratio, zc)
        return None

    def __call__(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None, *, out):
        run = self.prepare_run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point, out=out)
        if run is None:
            qlinear_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point, out=out)
        else:
            run()


def _mul_constants(a_scale, a_zero_point, b_scale, b_zero_point, c_scale, c_zero_point):
    """QLinearMul's (za, zb, ratio, zc), as float64: ratio = float32(float32(s_a s_b) / s_c), MLAS's order."""
    ratio = _f32(_f32(np.float64(F32(_scalar(a_scale))) * np.float64(F32(_scalar(b_scale))))
                 / np.float64(F32(_scalar(c_scale))))
    return (float(_scalar(a_zero_point)), float(_scalar(b_zero_point)), float(ratio), float(_scalar(c_zero_point)))


def qlinear_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None, *, out):
    """C = (A - A_zero_point) (B - B_zero_point) A_scale B_scale / C_scale + C_zero_point.

    Types and broadcasting as QLinearAdd. The integer product is exact; the rest float32 as MLAS's
    qlmul (module docstring). Source: onnxruntime ContribOperators.md#com.microsoft.QLinearMul.
    """
    za, zb, ratio, zc = _mul_constants(a_scale, a_zero_point, b_scale, b_zero_point, c_scale, c_zero_point)
    prod = (np.asarray(a, np.float64) - za) * (np.asarray(b, np.float64) - zb)
    v = _f32(_f32(np.broadcast_to(prod, out.shape) * ratio) + zc)
    saturate_rint(v, out)


def _table(dtype, x_scale, x_zero_point, y_scale, y_zero_point, fn) -> np.ndarray:
    """onnxruntime's lookup table of an element-wise quantized op: y[q] = quantize(fn(dequantize(q)))."""
    x = dequantize_f32(codes(dtype), _scalar(x_scale), _scalar(x_zero_point))
    return quantize_f32(fn(x), _scalar(y_scale), _scalar(y_zero_point), dtype)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """float32 logistic of float32 values (computed in float64, rounded once)."""
    return _f32(1.0 / (1.0 + np.exp(-x)))


@kernel("QLinearSigmoid", since=VERSION, domain=DOMAIN)
def qlinear_sigmoid(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *, out):
    """Y = quantize(Sigmoid(dequantize(X))), by a 256-entry table.

    X, Y: uint8 or int8 (one type); scales float32 scalars; zero points of X's type (absent: 0).
    Source: onnxruntime ContribOperators.md#com.microsoft.QLinearSigmoid.
    """
    lookup(x, _table(x.dtype, x_scale, x_zero_point, y_scale, y_zero_point, _sigmoid), out)


@kernel("QLinearLeakyRelu", since=VERSION, domain=DOMAIN)
def qlinear_leaky_relu(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *, out, alpha=0.01):
    """Y = quantize(LeakyRelu(dequantize(X), alpha)), by a 256-entry table; alpha's product in float32.

    Types as QLinearSigmoid. Source: onnxruntime ContribOperators.md#com.microsoft.QLinearLeakyRelu.
    """
    a = np.float64(F32(alpha))
    table = _table(x.dtype, x_scale, x_zero_point, y_scale, y_zero_point,
                   lambda v: np.where(v >= 0, v, _f32(v * a)))
    lookup(x, table, out)


@functools.lru_cache(maxsize=256)
def _softmax_table_f32(x_scale: float, d: int, signed: bool) -> np.ndarray:
    """_softmax_table as float32, read-only, computed once per (x_scale, d, signed): a model's
    QLinearSoftmax sees the same three on every forward (the table's 256 exps cost more than the
    compiled kernel's pass over a 1000-value row)."""
    table = _softmax_table(x_scale, d, signed).astype(F32)
    table.flags.writeable = False
    return table


def _softmax_table(x_scale: float, d: int, signed: bool) -> np.ndarray:
    """onnxruntime's float32 table of exp for rows of d values (held in float64):

        shift = max(0, ln(float32(FLT_MAX / d)) - 5) / x_scale      (keeps every row's sum finite)
        t[i] = float32(exp((i - 255 + shift) x_scale)),  i = 0..255,

    indexed by i (uint8 X) or by the byte of i - 128 (int8 X)."""
    s = np.float64(F32(x_scale))
    limit = np.float64(F32(np.finfo(F32).max) / F32(d))
    shift = max(0.0, float(np.log(limit)) - 5.0) / s
    i = np.arange(256)
    table = np.empty(256, np.float64)
    table[((i - 128) & 0xFF) if signed else i] = _f32(np.exp((i - 255 + shift) * s))
    return table


def _row_sums_avx2(e: np.ndarray) -> np.ndarray:
    """float32 sums of the rows of e (float32 values held in float64) in the order of MLAS's AVX2
    kernel: 8 lanes over blocks of 16 (lane j adds e[16b + j], then e[16b + 8 + j]), the tail after
    the last whole block summed in order from 0, then the 8 lanes added to it one by one."""
    n, d = e.shape
    whole = d // 16 * 16
    lanes = np.zeros((n, 8))
    for b in range(0, whole, 16):
        lanes = _f32(lanes + e[:, b:b + 8])
        lanes = _f32(lanes + e[:, b + 8:b + 16])
    total = np.zeros(n)
    for i in range(whole, d):
        total = _f32(total + e[:, i])
    for j in range(8):
        total = _f32(total + lanes[:, j])
    return total


@kernel("QLinearSoftmax", since=VERSION, domain=DOMAIN)
def qlinear_softmax(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, out, opset, axis=-1):
    """Y = Softmax(X) in 8 bits, by onnxruntime's algorithm (qlinear_softmax.cc, MLAS's AVX2 kernel).

    Per row of D values (opset >= 13: along `axis`; below: X as (N, D) from `axis` on), with
    t the table of `_softmax_table` and m the row's maximum: e_j = t[x_j + 255 - m] (int8:
    t[byte(x_j + 127 - m)]); s = the float32 sum of the e_j (`_row_sums_avx2`);
    y_j = saturate(rint(fma(e_j, float32(float32(1 / s) floor(1 / y_scale)), y_zero_point))).
    x_zero_point is not read (a shift of X does not change Softmax). X, Y: uint8 or int8.
    Equal to onnxruntime 1.32 on its AVX2 kernel except for rare values next to a rounding tie
    (measured: 1 of 6e6 uint8 values, 2e-5 of int8 values, one step each), whose cause we have
    not found; onnxruntime's AVX-512 kernel sums in another order.
    Source: onnxruntime ContribOperators.md#com.microsoft.QLinearSoftmax.
    """
    rank = x.ndim
    axis = axis + rank if axis < 0 else axis
    if int(opset) < 13:
        rows, back = x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1), None
    else:
        moved = np.moveaxis(x, axis, -1)
        rows, back = moved.reshape(-1, x.shape[axis]), moved.shape
    if rows.size == 0:
        return
    signed = x.dtype == np.int8
    if compiled.active() and out.dtype == x.dtype:  # the same steps in one compiled pass a row
        table = _softmax_table_f32(float(_scalar(x_scale)), rows.shape[1], signed)
        y = np.empty(rows.shape, out.dtype)
        compiled.quantize.qlinear_softmax_rows(np.ascontiguousarray(rows), table,
                                               F32(np.floor(F32(1.0) / F32(_scalar(y_scale)))),
                                               int(_scalar(y_zero_point)), y, np.empty(rows.shape[1], F32))
        if back is None:
            out[...] = y.reshape(out.shape)
        else:
            np.moveaxis(out, axis, -1)[...] = y.reshape(back)
        return
    table = _softmax_table(_scalar(x_scale), rows.shape[1], signed)
    m = rows.max(axis=1, keepdims=True).astype(np.int64)
    idx = ((rows.astype(np.int64) + 127 - m) & 0xFF) if signed else rows.astype(np.int64) + 255 - m
    e = table[idx]
    ys = np.float64(np.floor(F32(1.0) / F32(_scalar(y_scale))))
    scale = _f32(_f32(1.0 / _row_sums_avx2(e)) * ys)[:, None]
    v = _f32(e * scale + _scalar(y_zero_point))
    y = np.empty(v.shape, out.dtype)
    saturate_rint(v, y)
    if back is None:
        out[...] = y.reshape(out.shape)
    else:
        np.moveaxis(out, axis, -1)[...] = y.reshape(back)


def _qlinear_softmax_prepare(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, out, opset,
                             axis=-1):
    """qlinear_softmax's compiled pass bound once for these arrays (registry.py: prepare_run): where the rows
    are X's and Y's contiguous last axis (or, below opset 13, X as (N, D) from `axis`), one call a run,
    its table and factors computed here when the scales and Y's zero point are weights (read-only: the
    Python steps cost a forward ~70 us with the caches cold after the convolutions, MobileNetV2 measured),
    else looked up per run; None otherwise (the plain call)."""
    rank = x.ndim
    axis = axis + rank if axis < 0 else axis
    if (not compiled.active() or out.dtype != x.dtype or x.size == 0 or (int(opset) >= 13 and axis != rank - 1)
            or not x.flags.c_contiguous or not out.flags.c_contiguous):
        return None
    d = int(np.prod(x.shape[axis:], dtype=np.int64))
    rows, y = x.reshape(-1, d), out.reshape(-1, d)
    signed = x.dtype == np.int8
    e = np.empty(d, F32)
    fn = compiled.quantize.qlinear_softmax_rows
    if all(v is None or not v.flags.writeable for v in (x_scale, y_scale, y_zero_point)):  # weights: fixed
        return compiled.bound(fn, rows, _softmax_table_f32(float(_scalar(x_scale)), d, signed),
                              F32(np.floor(F32(1.0) / F32(_scalar(y_scale)))), int(_scalar(y_zero_point)), y, e)

    def run():
        fn(rows, _softmax_table_f32(float(_scalar(x_scale)), d, signed), F32(np.floor(F32(1.0) / F32(_scalar(y_scale)))),
           int(_scalar(y_zero_point)), y, e)

    return run


qlinear_softmax.prepare_run = _qlinear_softmax_prepare


@kernel("QLinearConcat", since=VERSION, domain=DOMAIN)
def qlinear_concat(y_scale, y_zero_point, *inputs, out, axis):
    """Y = Concat(requantize(X_i)) along `axis`, for inputs (X_0, X_0_scale, X_0_zero_point, X_1, ...).

    An X whose scale and zero point are Y's is copied; any other is dequantized with its own and quantized
    with Y's (onnxruntime's 256-entry table; compiled/quantize.requantize_columns computes the table's float32
    operations element by element, so its bits). X: uint8 or int8; Y: Y_zero_point's type.
    Source: onnxruntime ContribOperators.md#com.microsoft.QLinearConcat.
    """
    ys, yz = _scalar(y_scale), _scalar(y_zero_point)
    axis = axis + out.ndim if axis < 0 else axis
    outer = int(np.prod(out.shape[:axis], dtype=np.int64))
    rest = int(np.prod(out.shape[axis:], dtype=np.int64))
    start = 0
    for i in range(0, len(inputs), 3):
        x, xs, xz = inputs[i], _scalar(inputs[i + 1]), _scalar(inputs[i + 2])
        dst = out[(slice(None),) * axis + (slice(start, start + x.shape[axis]),)]
        column = start * (rest // out.shape[axis]) if out.shape[axis] else 0  # x's first column of out (outer, rest)
        start += x.shape[axis]
        if F32(xs) == F32(ys) and xz == yz and x.dtype == out.dtype:
            np.copyto(dst, x)
        elif compiled.active() and x.size and out.flags.c_contiguous:
            compiled.quantize.requantize_columns(np.ascontiguousarray(x).reshape(outer, -1), out.reshape(outer, rest),
                                                 column, float(xz), float(F32(xs)), float(F32(ys)), float(yz))
        else:
            table = quantize_f32(dequantize_f32(codes(x.dtype), xs, xz), ys, yz, out.dtype)
            dst[...] = table[np.ascontiguousarray(x).view(np.uint8)]


# ---- pooling ------------------------------------------------------------------------------------
@kernel("QLinearGlobalAveragePool", since=VERSION, domain=DOMAIN)
def qlinear_global_average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point, *, out, channels_last=0):
    """Y = (sum over the spatial axes of X - x_zero_point HW) x_scale / (y_scale HW) + y_zero_point.

    X: (N, C, spatial...) or, channels_last=1, (N, spatial..., C); uint8 or int8. Y: (N, C, 1...)
    or (N, 1..., C). The sum is exact; the multiplier s_x / (s_y HW) and the product float32.
    Source: onnxruntime ContribOperators.md#com.microsoft.QLinearGlobalAveragePool.
    """
    args = _gap_compiled_args(x, x_scale, x_zero_point, y_scale, y_zero_point, out, channels_last)
    if args is not None:
        compiled.quantize.qlinear_global_average_pool_rows(*args)
        return
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    size = int(np.prod([x.shape[d] for d in axes]))
    acc = x.sum(axis=axes, dtype=np.int64, keepdims=True).astype(np.float64) - _scalar(x_zero_point) * size
    saturate_rint(_f32(_f32(acc) * _gap_multiplier(x_scale, y_scale, size)), out, int(_scalar(y_zero_point)))


def _gap_multiplier(x_scale, y_scale, size: int) -> float:
    """QLinearGlobalAveragePool's float32 s_x / (s_y HW) (as float64)."""
    return _f32(np.float64(F32(_scalar(x_scale))) / _f32(np.float64(F32(_scalar(y_scale))) * np.float64(F32(size))))


def _gap_compiled_args(x, x_scale, x_zero_point, y_scale, y_zero_point, out, channels_last):
    """compiled/quantize.qlinear_global_average_pool_rows's arguments (channels first, contiguous), or None."""
    size = int(np.prod(x.shape[2:]))
    if (channels_last or not compiled.active() or not x.flags.c_contiguous or not out.flags.c_contiguous
            or not 0 < size < 2 ** 23):  # the int32 sum cannot overflow
        return None
    return (x.reshape(-1, size), out.reshape(-1), int(_scalar(x_zero_point)),
            F32(_gap_multiplier(x_scale, y_scale, size)), int(_scalar(y_zero_point)))


def _gap_prepare_run(x, x_scale, x_zero_point, y_scale, y_zero_point, *, out, channels_last=0):
    """The compiled pass bound once (registry.py: prepare_run) where the scales and zero points are
    weights (read-only arrays: their values cannot change) and X channels first; None otherwise."""
    if any(isinstance(v, np.ndarray) and v.flags.writeable for v in (x_scale, x_zero_point, y_scale, y_zero_point)):
        return None
    args = _gap_compiled_args(x, x_scale, x_zero_point, y_scale, y_zero_point, out, channels_last)
    return None if args is None else compiled.bound(compiled.quantize.qlinear_global_average_pool_rows, *args)


qlinear_global_average_pool.prepare_run = _gap_prepare_run


@kernel("QLinearAveragePool", since=VERSION, domain=DOMAIN)
class QLinearAveragePool:
    """Y = quantize(AveragePool(dequantize(X))) with AveragePool's attributes (no dilations).

    X: (N, C, spatial...) or, channels_last=1, (N, spatial..., C); uint8 or int8; Y alike. The
    window's float32 values are summed in float32 in row-major window order, divided by the count
    (the window's taps inside the input, or the whole kernel with count_include_pad=1), then
    quantized as y = rint(float32(float32(sum / y_scale) + y_zero_point)), saturated.
    Source: onnxruntime ContribOperators.md#com.microsoft.QLinearAveragePool (qlinear_pool.cc).
    """

    def __init__(self, ctx, *, kernel_shape=None, auto_pad="NOTSET", ceil_mode=0, channels_last=0,
                 count_include_pad=0, pads=None, strides=None):
        self.geometry = nchw_pool_geometry(ctx)
        self.channels_last = bool(channels_last)
        self.kernel = [a.kernel for a in self.geometry]
        if count_include_pad:
            count = np.full([a.out for a in self.geometry], float(np.prod(self.kernel)))
        else:
            count = np.ones([a.out for a in self.geometry])
            for d, a in enumerate(self.geometry):
                shape = [1] * len(self.geometry)
                shape[d] = a.out
                count = count * a.counts(False).reshape(shape)
        self.count = count.astype(F32).astype(np.float64)
        self.count32 = np.ascontiguousarray(count, F32) if len(self.geometry) == 2 else None
        if self.count32 is not None:
            self.count32.flags.writeable = False

    def prepare_run(self, x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, out):
        """compiled/quantize.qlinear_average_pool2d bound once: 2-D windows, channels first, contiguous X and Y,
        static scales and zero points (read-only arrays); None otherwise (the numpy path)."""
        if (self.count32 is None or self.channels_last or not compiled.active() or not x.flags.c_contiguous
                or not out.flags.c_contiguous
                or any(isinstance(v, np.ndarray) and v.flags.writeable for v in (x_scale, x_zero_point, y_scale,
                                                                                   y_zero_point))):
            return None
        (gh, gw), planes = self.geometry, x.shape[0] * x.shape[1]
        return compiled.bound(compiled.quantize.qlinear_average_pool2d, x.reshape(planes, gh.size, gw.size),
                              out.reshape(planes, gh.out, gw.out), self.count32, gh.kernel, gw.kernel, gh.stride,
                              gw.stride, gh.head, gw.head, F32(_scalar(x_scale)), F32(_scalar(x_zero_point)),
                              F32(_scalar(y_scale)), F32(_scalar(y_zero_point)))

    def __call__(self, x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, out):
        if self.channels_last:
            x = np.moveaxis(x, -1, 1)
        v = dequantize_f32(x, _scalar(x_scale), _scalar(x_zero_point))
        pad = [(0, 0), (0, 0)]
        for a in self.geometry:
            reach = (a.out - 1) * a.stride + a.kernel
            pad.append((a.head, max(0, reach - a.head - a.size)))
        v = np.pad(v, pad)
        total = np.zeros(v.shape[:2] + tuple(a.out for a in self.geometry), np.float64)
        for taps in np.ndindex(*self.kernel):
            window = tuple(slice(t, t + (a.out - 1) * a.stride + 1, a.stride) for t, a in zip(taps, self.geometry))
            total = _f32(total + v[(slice(None), slice(None)) + window])
        mean = _f32(total / self.count)
        q = _f32(_f32(mean / np.float64(F32(_scalar(y_scale)))) + _scalar(y_zero_point))
        res = np.moveaxis(out, -1, 1) if self.channels_last else out
        saturate_rint(q, res)


# ---- products -----------------------------------------------------------------------------------
def _columns(v, n: int) -> np.ndarray | None:
    """A per-tensor or per-column (N,) parameter as float64, broadcasting over (..., N) (None: None)."""
    if v is None:
        return None
    v = np.asarray(v, np.float64).reshape(-1)
    return v.reshape(()) if v.size == 1 else v.reshape(n)


@kernel("QGemm", since=VERSION, domain=DOMAIN)
class QGemm:
    """QGemm (qgemm below), its sum in the Net's int8 arithmetic."""

    def __init__(self, ctx, *, alpha=1.0, transA=0, transB=0):
        self.sat = int8_arithmetic.saturating()
        self.attrs = dict(alpha=alpha, transA=transA, transB=transB)
        self.fast = None
        quantized_y = ctx.has_input(7)
        statics = (1, 2, 3, 4, 5) + ((6,) if ctx.has_input(6) else ()) + ((7, 8) if quantized_y else ())
        if (compiled.active() and not transA and (ctx.has_input(8) or not quantized_y)
                and all(ctx.is_static(i) for i in statics)
                and ctx.dtype(0) in (np.dtype(np.uint8), np.dtype(np.int8))
                and all(np.size(ctx.value(i)) == 1 for i in (1, 2) + ((7, 8) if quantized_y else ()))):
            b = np.asarray(ctx.value(3))
            b = b.T if transB else b
            n = b.shape[1]
            c = np.zeros(n, np.int64) if not ctx.has_input(6) else np.asarray(ctx.value(6), np.int64)
            if c.size in (1, n):
                scale = _f32(_f32(np.float64(F32(_scalar(ctx.value(1)))) * _columns(np.asarray(ctx.value(4), F32), n))
                             * np.float64(F32(alpha)))
                if quantized_y:
                    scale = _f32(scale / np.float64(F32(_scalar(ctx.value(7)))))
                self.fast = StaticProduct(ctx, np.ascontiguousarray(b), _columns(ctx.value(5), n), ctx.dtype(0),
                                          int(_scalar(ctx.value(2))), np.broadcast_to(c.reshape(-1), (n,)),
                                          np.broadcast_to(scale.astype(F32), (n,)), ctx.out_dtypes[0],
                                          int(_scalar(ctx.value(8))) if quantized_y else 0, ctx.shape(0)[0])

    def prepare_run(self, a, *inputs, out):
        """The compiled GEMV's calls bound once for these arrays (registry.py: prepare_run); None otherwise."""
        steps = self.fast.steps(a, out) if self.fast is not None else None
        return compiled.prepared(steps) if steps else None

    def __call__(self, *inputs, out):
        if self.fast is not None:
            self.fast(inputs[0], out)
            return
        qgemm(*inputs, out=out, sat=self.sat, **self.attrs)


def qgemm(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None, y_zero_point=None, *, out,
          alpha=1.0, transA=0, transB=0, sat=False):
    """Y = alpha a_scale b_scale (C + (A' - a_zero_point)(B' - b_zero_point)), quantized or float32.

    A (M, K) or (K, M) with transA, uint8/int8; B (K, N) or (N, K) with transB, uint8/int8;
    a_scale float32 scalar, a_zero_point scalar of A's type; b_scale, b_zero_point: scalars or
    per column (N,); C: int32 bias broadcasting to (M, N), in the scale a_scale b_scale. With
    y_scale and y_zero_point, Y = saturate(rint(float32(acc) * float32(alpha s_a s_b / s_y)) + z_y)
    in y_zero_point's type; without, Y = float32(acc) * float32(alpha s_a s_b). sat: the sum as
    onnxruntime's on a host without VNNI (ops/cpu/quantized.integer_product).
    Source: onnxruntime ContribOperators.md#com.microsoft.QGemm.
    """
    a2 = a.T if transA else a
    b2 = b.T if transB else b
    n = out.shape[1]
    acc = integer_product(a2, a_zero_point, b2, _columns(b_zero_point, n), sat)
    if c is not None:
        acc += np.asarray(c, np.float64)
    scale = _f32(_f32(np.float64(F32(_scalar(a_scale))) * _columns(np.asarray(b_scale, F32), n))
                 * np.float64(F32(alpha)))
    if y_scale is None:
        np.copyto(out, _f32(_f32(acc) * scale), casting="unsafe")
        return
    scale = _f32(scale / np.float64(F32(_scalar(y_scale))))
    saturate_rint(_f32(_f32(acc) * scale), out, int(_scalar(y_zero_point)))


def _scaled_product(a_q, a_zero_point, a_scale, b, b_zero_point, b_scale, bias, out, sat=False) -> None:
    """out = float32(acc) * float32(s_a s_b[j]) (+ bias[j]), acc = (A - z_a)(B - z_b[j]) (exact, or
    onnxruntime's saturating pairs with `sat`: ops/cpu/quantized.integer_product)."""
    n = out.shape[-1]
    acc = integer_product(a_q, a_zero_point, b, _columns(b_zero_point, n), sat)
    scale = _f32(np.float64(F32(a_scale)) * _columns(np.asarray(b_scale, F32), n))
    y = _f32(_f32(acc) * scale)
    if bias is not None:
        y = _f32(y + np.asarray(bias, np.float64))
    np.copyto(out, y, casting="unsafe")


@kernel("DynamicQuantizeMatMul", since=VERSION, domain=DOMAIN)
class DynamicQuantizeMatMul:
    """DynamicQuantizeMatMul (dynamic_quantize_matmul below), its sum in the Net's int8 arithmetic.

    Where B (2-D), its scale, zero point and bias are weights, the kernels are compiled, and our
    domain's kernel sums as this one does (ops/cpu/qmatmul.py: not an int8 B with a non-zero zero point
    under the saturating arithmetic), that kernel runs it: the same bits (its float steps are these),
    compiled/dqgemm.py's speed.
    """

    def __init__(self, ctx):
        self.sat = int8_arithmetic.saturating()
        self.fast = None
        static = all(ctx.is_static(i) for i in (1, 2, 3, 4) if ctx.has_input(i))
        if static and compiled.active() and len(ctx.shape(1)) == 2 and len(ctx.shape(0)) >= 2:
            zp = ctx.value(3) if ctx.has_input(3) else 0
            bias = ctx.value(4) if ctx.has_input(4) else None
            if not (self.sat and ctx.value(1).dtype == np.int8 and np.any(zp)) and (
                    bias is None or np.shape(bias) == tuple(ctx.shape(1))[1:]):
                self.fast = FusedDynamicQuantizeMatMul(ctx)

    def __call__(self, a, b, b_scale, b_zero_point=None, bias=None, *, out):
        if self.fast is not None:
            self.fast(a, b, b_scale, b_zero_point, bias, out=out)
            return
        dynamic_quantize_matmul(a, b, b_scale, b_zero_point, bias, out=out, sat=self.sat)


def dynamic_quantize_matmul(a, b, b_scale, b_zero_point=None, bias=None, *, out, sat=False):
    """Y = DynamicQuantizeLinear(A) x (B - b_zero_point), times a_scale b_scale, + bias; float32.

    A float32 (..., M, K) (quantized to uint8 over [min(0, A), max(0, A)], as DynamicQuantizeLinear);
    B int8/uint8 (..., K, N); b_scale, b_zero_point scalars or per column (N,); bias (N,).
    Source: onnxruntime ContribOperators.md#com.microsoft.DynamicQuantizeMatMul.
    """
    q = np.empty(a.shape, np.uint8)
    a_scale, a_zp = np.empty((), F32), np.empty((), np.uint8)
    dynamic_quantize_linear(a, out=(q, a_scale, a_zp))
    _scaled_product(q, a_zp, float(a_scale), b, b_zero_point, b_scale, bias, out, sat)


@kernel("MatMulIntegerToFloat", since=VERSION, domain=DOMAIN)
class MatMulIntegerToFloat:
    """MatMulIntegerToFloat (matmul_integer_to_float below), its sum in the Net's int8 arithmetic.

    Where int8_arithmetic.dot_product() names one (the saturating arithmetic, or exact sums on a VNNI host),
    uint8 A times a 2-D int8 weight B with zero point 0 (b_scale and bias weights too, a_scale and
    a_zero_point per tensor) runs compiled/dqgemm.qmatmul_sat with that dot product: the same bits (its
    float steps are these), MLAS's kernel shape; with exact sums on a host with AMX-INT8, compiled/amx.py's
    qmatmul_amx (the same bits).
    """

    def __init__(self, ctx):
        self.sat = int8_arithmetic.saturating()
        self.fast = False
        dot = int8_arithmetic.dot_product()  # the quad kernel's dot product, if any (exact but for vpmaddubsw)
        static = all(ctx.is_static(i) for i in (1, 3, 5, 6) if ctx.has_input(i))
        if not (dot is not None and static and compiled.active() and len(ctx.shape(1)) == 2
                and len(ctx.shape(0)) >= 2 and np.dtype(ctx.dtype(0)) == np.uint8 and np.dtype(ctx.dtype(1)) == np.int8
                and np.dtype(ctx.dtype(2)) == np.float32):
            return
        b = np.asarray(ctx.value(1))
        k, n = b.shape
        if (ctx.has_input(5) and np.any(ctx.value(5))) or np.size(ctx.value(3)) not in (1, n) or (
                ctx.has_input(6) and np.shape(ctx.value(6)) != (n,)):
            return
        d = compiled.dqgemm
        self.qmatmul = compiled.dots.module("dqgemm", dot).qmatmul_sat
        self.fast = True
        self.m, self.k, self.n = int(np.prod(ctx.shape(0)[:-1])), k, n
        # AMX tiles (compiled/amx.py) where the host has them: exact sums, the vpdpbusd kernel's bits
        self.amx = dot != "vpmaddubsw" and compiled.amx.usable()
        if self.amx:
            self.k64 = compiled.amx.k_padded(k)
            self.wp = shared_weights(b, ("qmatmul_panels_amx",),
                                     lambda w: compiled.amx.pack_panels(np.asarray(w)))
            self.cs = compiled.amx.padded(b.astype(np.int64).sum(axis=0), np.int32, n)
            self.bs = compiled.amx.padded(np.broadcast_to(np.asarray(ctx.value(3), F32).reshape(-1), (n,)), F32, n)
            self.has_bias = int(ctx.has_input(6))
            self.bias = compiled.amx.padded(ctx.value(6), F32, n) if self.has_bias else self.bs
            self.xq_ref = ctx.scratch((compiled.amx.rows_padded(self.m) * self.k64,), np.uint8)
            self.amx_addr = compiled.amx.address("amx_dqgemm")
            return
        self.wp = shared_weights(b, ("qmatmul_panels",), lambda w: d.pack_panels(np.asarray(w)))
        self.cs = d.padded(b.astype(np.int64).sum(axis=0), np.int32)
        self.bs = d.padded(np.broadcast_to(np.asarray(ctx.value(3), F32).reshape(-1), (n,)), F32)
        self.bias = d.padded(ctx.value(6) if ctx.has_input(6) else np.zeros(0), F32)
        self.xq_ref = ctx.scratch((self.m * ((k + 3) // 4 * 4),), np.uint8)
        self.ws_ref = ctx.scratch((d.ROWS * 16,), F32)

    def __call__(self, a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None, *, out):
        if self.fast and np.size(a_scale) == 1 and (a_zero_point is None or np.size(a_zero_point) == 1):
            aq = np.ascontiguousarray(a).reshape(self.m, self.k)
            if self.amx:
                compiled.amx.qmatmul_amx(self.amx_addr, aq, int(_scalar(a_zero_point)), F32(_scalar(a_scale)),
                                self.xq_ref.array, self.k64, self.wp, self.cs, self.bs, self.bias, self.has_bias,
                                out.reshape(self.m, self.n))
                return
            self.qmatmul(aq, int(_scalar(a_zero_point)), F32(_scalar(a_scale)), self.wp, self.cs, self.bs, self.bias,
                         out.reshape(self.m, self.n), self.xq_ref.array, self.ws_ref.array, compiled.qgemm.ONES)
            return
        matmul_integer_to_float(a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias, out=out, sat=self.sat)


def matmul_integer_to_float(a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None, *, out,
                            sat=False):
    """Y = (A - a_zero_point)(B - b_zero_point) a_scale b_scale + bias, in a_scale's type.

    A, B int8/uint8 with numpy.matmul's shapes; a_scale, a_zero_point scalars; b_scale,
    b_zero_point scalars or per column (N,); bias (N,).
    Source: onnxruntime ContribOperators.md#com.microsoft.MatMulIntegerToFloat.
    """
    _scaled_product(a, a_zero_point, _scalar(a_scale), b, b_zero_point, b_scale, bias, out, sat)
