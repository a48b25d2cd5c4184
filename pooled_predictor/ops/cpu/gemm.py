"""Gemm CPU kernel: Y = alpha * A' @ B' + beta * C through BLAS (numpy.matmul into Y)."""

from __future__ import annotations

import numpy as np

from ..registry import kernel
from . import compiled, reference_split
from .matmul import ConstRightProduct


@kernel("Gemm", since=(7, 9, 11, 13))
class Gemm:
    """Y = alpha * A' @ B' + beta * C (ONNX Gemm-7 to Gemm-13).

    A' = A.T if transA else A, of shape (M, K); B' = B.T if transB else B, of
    shape (K, N); C (optional from Gemm-11, else required) broadcasts
    unidirectionally to (M, N); Y is (M, N). The transposes are strided views
    handed to BLAS (no copy); the product is written straight into Y, then
    scaled and shifted in place. beta * C is computed once at reshape when C is
    a weight, else per call into workspace of C's shape. float32 with B a weight,
    no transA, alpha 1 and C absent or (beta 1) a weight bias over N: the compiled
    product of ops/cpu/matmul.py instead (C added after the sum, as here). Integer types (which
    onnxruntime lacks): alpha * A'B' and beta * C are each computed in double
    and truncated toward zero.
    Spec: Operators.md#Gemm.
    """

    def __init__(self, ctx, *, alpha=1.0, beta=1.0, transA=0, transB=0):
        self.alpha, self.beta = float(alpha), float(beta)
        self.trans_a, self.trans_b = bool(transA), bool(transB)
        dtype = np.dtype(ctx.dtype(0))
        self.use_c = ctx.has_input(2) and self.beta != 0.0
        self.c_scaled = None     # beta * C, once, when C is a weight
        self.c_buffer = None     # workspace for beta * C when C is fed at forward
        if self.use_c and self.beta != 1.0:
            if ctx.is_static(2):
                c = np.asarray(ctx.value(2))
                self.c_scaled = np.multiply(c, self.beta, dtype=np.float64).astype(dtype)
            else:
                self.c_buffer = ctx.scratch(ctx.shape(2), dtype)
        self.fast = None
        self._matmul = reference_split.matmul if compiled.reference_tier() else np.matmul  # on the idle cores
        if (not self.trans_a and self.alpha == 1.0 and ctx.is_static(1)
                and (not self.use_c or (self.beta == 1.0 and ctx.is_static(2)))):
            # B a weight, C absent or a weight bias of N: the compiled product (ops/cpu/matmul.py)
            c = np.asarray(ctx.value(2)) if self.use_c else None
            self.fast = ConstRightProduct.build(ctx, ctx.shape(0), dtype, ctx.value(1), c, self.trans_b)

    def prepare_run(self, a, b, c=None, *, out):
        return None if self.fast is None else self.fast.prepare(a, out)

    def __call__(self, a, b, c=None, *, out):
        if self.fast is not None and self.fast(a, out):
            return
        self._matmul(a.T if self.trans_a else a, b.T if self.trans_b else b, out=out)
        if self.alpha != 1.0:
            np.multiply(out, self.alpha, out=out, casting="unsafe")
        if not self.use_c:
            return
        if self.beta == 1.0:
            np.add(out, c, out=out, casting="unsafe")
        elif self.c_scaled is not None:
            np.add(out, self.c_scaled, out=out)
        else:
            buf = self.c_buffer.array
            np.multiply(c, self.beta, out=buf, casting="unsafe")
            np.add(out, buf, out=out)
