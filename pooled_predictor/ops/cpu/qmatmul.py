"""DynamicQuantizeMatMul (our domain): DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul in one kernel.

    a_q, a_scale, a_zp = DynamicQuantizeLinear(A)                 (ONNX Operators.md#DynamicQuantizeLinear)
    Y = float32((a_q - a_zp) @ (B - b_zp)) * float32(a_scale * b_scale)  (+ bias: a float32 Add)

-- what onnxruntime.quantization.quantize_dynamic writes as DynamicQuantizeLinear,
MatMulInteger, Cast(to float) and Mul(Cast, Mul(a_scale, b_scale)) (passes/qdq.py
fuses them, and an Add of a bias after them; onnxruntime's contrib op DynamicQuantizeMatMul
has these semantics). A float32 (..., M, K); B (K, N) 8-bit, b_scale and b_zero_point per
tensor or per column (N,), bias float32 (N,) (optional), all weights. One compiled call
(compiled/dqgemm.py) takes A's range from numpy's min / max, quantizes A row-major as
DynamicQuantizeLinear does (ops/cpu/quantize.dynamic_quantize_linear's arithmetic), multiplies it
by B packed once in panels of 16 columns, and writes float32(acc) * float32(a_scale * b_scale) per
column (as the Cast and Mul round it), + bias, into Y in place. The sums: exact int32 (the spec's;
bit for bit the unfused nodes, tests/ops/test_compiled_int8.py), or, under the "onnxruntime" int8
arithmetic on a host without VNNI (ops/int8_arithmetic.py) for int8 B with zero points 0, adjacent
k pairs summed in int16 with saturation as onnxruntime's MLAS kernel on that host: onnxruntime's
bits (tests/ops/test_int8_arithmetic.py); on a VNNI host the same kernel sums exactly with vpdpbusd
(int8_arithmetic.dot_product()); on a host with AMX-INT8 (Sapphire Rapids and later Xeons) int8 B of zero
point 0 runs on AMX tiles (compiled/amx.py: exact sums, the same bits) unless the arithmetic is the
saturating pairs'.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..shapes.fused import DOMAIN
from .. import int8_arithmetic
from . import compiled
from .conv_shared import shared_weights
from .quantize import dynamic_quantize_linear


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
        dot = int8_arithmetic.dot_product()  # the quad kernel's dot product (ops/int8_arithmetic.py), if any
        self.sat = dot is not None and b.dtype == np.int8 and not zp.any()
        self.dq = compiled.dots.module("dqgemm", dot) if self.sat else compiled.dqgemm
        self.arithmetic = ("int16-saturated pairs" if dot == "vpmaddubsw" else "exact") + f" ({dot or 'vpmaddwd'})"
        self.q = [np.zeros((), np.float32), np.zeros((), np.uint8)]
        self.compiled = compiled.active()  # else the numpy reference below (a tier that must not compile)
        if not self.compiled:
            return
        # compiled/dqgemm.py: quantize, multiply and scale in one call, Y written in place; saturating pairs
        # (vpmaddubsw) or exact sums (int16 pairs, vpmaddwd; vpdpwssd on a VNNI host)
        d = compiled.dqgemm
        b8 = np.asarray(b)
        # AMX tiles (compiled/amx.py) where the host has them: exact sums, the bits of the vpdpbusd kernel and of
        # the exact arithmetic, so not under saturating pairs
        self.amx = b.dtype == np.int8 and not zp.any() and dot != "vpmaddubsw" and compiled.amx.usable()
        if self.amx:
            self.k64 = compiled.amx.k_padded(self.k)
            self.wp = shared_weights(b, ("qmatmul_panels_amx",),
                                     lambda w: compiled.amx.pack_panels(np.asarray(w)))
            self.cs = compiled.amx.padded(b8.astype(np.int64).sum(axis=0), np.int32, self.n)
            self.bs = compiled.amx.padded(self.b_scale, np.float32, self.n)
            self.bias = None if self.bias_value is None else compiled.amx.padded(self.bias_value, np.float32, self.n)
            self.xq_ref = ctx.scratch((compiled.amx.rows_padded(self.m) * self.k64,), np.uint8)
            self.arithmetic = "exact (tdpbusd, AMX)"
            self.amx_addr = compiled.amx.address("amx_dqgemm")
            return
        if self.sat:
            self.wp = shared_weights(b, ("qmatmul_panels",), lambda w: d.pack_panels(np.asarray(w)))
            self.cs = d.padded(b8.astype(np.int64).sum(axis=0), np.int32)
            k_padded = (self.k + 3) // 4 * 4
        else:
            self.wp = shared_weights(b, ("qmatmul_panels_exact", tuple(zp)),
                                     lambda w: d.pack_panels_exact(np.asarray(w), zp))
            self.cs = d.padded((b8.astype(np.int64) - zp).sum(axis=0), np.int32)
            k_padded = (self.k + 1) // 2 * 2
        self.bs = d.padded(self.b_scale, np.float32)
        self.bias = d.padded(np.zeros(0) if self.bias_value is None else self.bias_value, np.float32)
        self.xq_ref = ctx.scratch((self.m * k_padded,), np.uint8)
        self.ws_ref = ctx.scratch((d.ROWS * 16,), np.float32)

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
        if self.amx:  # quantize and multiply in one numba call, the AMX kernel called by its address
            compiled.amx.dynamic_qmatmul_amx(self.amx_addr, a2, a2.min(), a2.max(), self.xq_ref.array, self.k64,
                                             self.wp, self.cs, self.bs, self.bs if self.bias is None else self.bias,
                                             0 if self.bias is None else 1, out.reshape(self.m, self.n))
            return
        run = self.dq.dynamic_qmatmul_sat if self.sat else compiled.dqgemm.dynamic_qmatmul_exact
        run(a2, a2.min(), a2.max(), self.wp, self.cs, self.bs, self.bias, out.reshape(self.m, self.n),
            self.xq_ref.array, self.ws_ref.array, compiled.qgemm.ONES)
