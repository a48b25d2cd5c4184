"""DynamicQuantizeMatMul (our domain): DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul in one kernel.

    a_q, a_scale, a_zp = DynamicQuantizeLinear(A)                 (ONNX Operators.md#DynamicQuantizeLinear)
    Y = float32((a_q - a_zp) @ (B - b_zp)) * float32(a_scale * b_scale)  (+ bias: a float32 Add)

-- what onnxruntime.quantization.quantize_dynamic writes as DynamicQuantizeLinear,
MatMulInteger, Cast(to float) and Mul(Cast, Mul(a_scale, b_scale)) (passes/qdq.py
fuses them, and an Add of a bias after them; onnxruntime's contrib op DynamicQuantizeMatMul
has these semantics). A float32 (..., M, K); B (K, N) 8-bit, b_scale and b_zero_point per
tensor or per column (N,), bias float32 (N,) (optional), all weights. Exact sums, per call:
A's range (numpy min / max, the reference kernel's arithmetic:
ops/cpu/quantize.dynamic_quantize_linear), then one pass that
quantizes A and writes it transposed, K rows of the M pixels, into scratch
(compiled/quantize.quantize_transpose), then the integer GEMM of compiled/qgemm.py
with B^T packed once as its weight and the float epilogue (float32(acc) * scale per
column, as the Cast and Mul would round it), into Y^T, copied transposed into Y.
Bit for bit the unfused nodes' result (tests/ops/test_compiled_int8.py). Under the
"onnxruntime" int8 arithmetic on a host without VNNI (ops/int8_arithmetic.py), int8 B
with zero points 0 runs compiled/dqgemm.py instead (adjacent k pairs summed in int16 with
saturation, as onnxruntime's MLAS kernel on that host; A's range, its quantization, the
GEMM and the scaling in one compiled call, Y written in place, row-major): onnxruntime's
bits (tests/ops/test_int8_arithmetic.py).
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..shapes.fused import DOMAIN
from .. import int8_arithmetic
from . import compiled
from .conv_shared import shared_weights
from .quantize import dynamic_quantize_linear


def _ro(a):
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


@kernel("DynamicQuantizeMatMul", since=1, domain=DOMAIN, precision="int8")
class DynamicQuantizeMatMul:
    """Y = DynamicQuantizeLinear(A) times B in integers, as float32 (module docstring).

    Raises (at build): a ShapeInferenceError for B, b_scale, b_zero_point or bias that are not weights.
    """

    def __init__(self, ctx):
        for i in (1, 2, 3, 4):
            if ctx.has_input(i) and not ctx.is_static(i):
                raise ctx.error("DynamicQuantizeMatMul needs B, b_scale, b_zero_point and bias as weights")
        self.bias_value = np.asarray(ctx.value(4), np.float32) if ctx.has_input(4) else None
        b = ctx.value(1)
        self.k, self.n = b.shape
        self.m = int(np.prod(ctx.shape(0)[:-1]))
        self.b_scale = np.broadcast_to(np.asarray(ctx.value(2), np.float32).reshape(-1), (self.n,))
        zp = np.asarray(ctx.value(3) if ctx.has_input(3) else 0).astype(np.int32).reshape(-1)
        zp = np.broadcast_to(zp, (self.n,))
        self.sat = int8_arithmetic.saturating() and b.dtype == np.int8 and not zp.any()
        self.arithmetic = "int16-saturated pairs" if self.sat else "exact"
        self.q = [np.zeros((), np.float32), np.zeros((), np.uint8)]
        self.compiled = compiled.active()  # else the numpy reference below (a tier that must not compile)
        if not self.compiled:
            return
        if self.sat:  # compiled/dqgemm.py: quantize, multiply and scale in one call, Y written in place
            self.wp = shared_weights(b, ("qmatmul_panels",), lambda w: compiled.dqgemm.pack_panels(np.asarray(w)))
            self.cs = compiled.dqgemm.padded(np.asarray(b).astype(np.int64).sum(axis=0), np.int32)
            self.bs = compiled.dqgemm.padded(self.b_scale, np.float32)
            self.bias = compiled.dqgemm.padded(np.zeros(0) if self.bias_value is None else self.bias_value, np.float32)
            self.xq_ref = ctx.scratch((self.m * ((self.k + 3) // 4 * 4),), np.uint8)
            self.ws_ref = ctx.scratch((compiled.dqgemm.ROWS * 16,), np.float32)
            return
        self.wp = shared_weights(b, ("qmatmul", tuple(zp)), lambda w: compiled.qgemm.pack_pairs(np.asarray(w).T, zp))
        self.offs = compiled.qgemm.pair_offsets(np.arange(self.k, dtype=np.int64) * self.m)
        self.sums = compiled.qgemm.row_sums(np.asarray(b).T, zp)
        self.x_ref = ctx.scratch((self.k * self.m + 64,), np.uint8)
        self.y_ref = ctx.scratch((self.n * self.m,), np.float32)
        self.ws_ref = ctx.scratch((compiled.qgemm.MR * compiled.qgemm.NP,), np.float32)

    def __call__(self, a, b, b_scale, b_zero_point=None, bias=None, *, out):
        a2 = a.reshape(self.m, self.k)
        scale, zp = self.q
        if not self.compiled:
            q = np.empty(a2.shape, np.uint8)
            dynamic_quantize_linear(a2, out=(q, scale, zp))
            # exact (float64 BLAS) in both arithmetics: this is the reference tier a tiered Net serves while
            # compiled.qgemm.qgemm2d_sat compiles, and numpy's saturating pairs (quantized.saturating_matmul) would make
            # it 10x slower (BERT-base: 3.7 s a forward); QLinearConv's reference path is exact too
            acc = (q.astype(np.float64) - float(zp)) @ (np.asarray(b, np.float64)
                                                        - np.asarray(0 if b_zero_point is None else b_zero_point,
                                                                     np.float64))
            mult = (np.float32(scale) * self.b_scale).astype(np.float32)
            np.multiply(acc.astype(np.int32).astype(np.float32), mult, out=out.reshape(self.m, self.n))
            if bias is not None:
                np.add(out, bias, out=out)
            return
        if self.sat:
            compiled.dqgemm.dynamic_qmatmul_sat(a2, a2.min(), a2.max(), self.wp, self.cs, self.bs, self.bias,
                                                out.reshape(self.m, self.n), self.xq_ref.array, self.ws_ref.array,
                                                compiled.qgemm.ONES)
            return
        dynamic_quantize_linear(a2, out=(None, scale, zp))
        x = self.x_ref.array
        compiled.quantize.quantize_transpose(np.ascontiguousarray(a2), x, np.float32(scale), int(zp))
        correction = _ro((-int(zp) * self.sums).astype(np.int32))
        mult = _ro((np.float32(scale) * self.b_scale).astype(np.float32))
        yt = self.y_ref.array
        compiled.qgemm.qgemm2d_f32(self.wp, x, 0, self.offs, yt, 0, self.m, self.n, self.m, correction, mult, 0,
                                   self.ws_ref.array)
        np.copyto(out.reshape(self.m, self.n), yt.reshape(self.n, self.m).T)
        if bias is not None:
            np.add(out, bias, out=out)

