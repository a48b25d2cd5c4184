"""Matrix products on the GPU through cuBLAS (nvmath-python, the worker's stream; runtime.gemm):
Gemm, FusedGemm (the activation fused into the epilogue), MatMul and MatMulAdd.

MatMul: A (..., M, K) @ B (..., K, N) where B is 2-D (A's rows flattened into one GEMM), or both
have the same batch dimensions, or A is 2-D (strided batched GEMMs, stride 0 on the shared side);
other broadcasts run on the CPU. float32; TF32 only with PP_CUDA_TF32=1.
"""

from __future__ import annotations

import math

import numpy as np

from ..shapes.fused import DOMAIN
from . import runtime
from .codes import activation_of, cuda_kernel, float32_io


class _Epilogue:
    """Y += beta * C (broadcast), then the activation: elementwise.cu gemm_epilogue_f32."""

    def __init__(self, c_shape, rows: int, cols: int, beta: float, act):
        self.fn = runtime.function("elementwise.cu", "gemm_epilogue_f32")
        self.rows, self.cols = rows, cols
        if c_shape is None:
            self.rs = self.cs = 0
        else:
            c = (1,) * (2 - len(c_shape)) + tuple(c_shape)
            self.rs = c[1] if c[0] != 1 else 0
            self.cs = 1 if c[1] != 1 else 0
        self.args = (np.int64(rows), np.int64(cols), np.int64(self.rs), np.int64(self.cs), runtime.f32(beta),
                     np.int32(act[0]), runtime.f32(act[1]), runtime.f32(act[2]))
        self.needed = c_shape is not None or act[0] != 0

    def __call__(self, out, c):
        if self.needed:
            runtime.launch(self.fn, self.rows * self.cols, (out, c if c is not None else runtime.NULL, *self.args))


def _gemm_supported(ctx) -> bool:
    return float32_io(ctx) and (not ctx.has_input(2) or len(ctx.shape(2)) <= 2)


@cuda_kernel("Gemm", supports=_gemm_supported)
class Gemm:
    """Y = alpha * A' @ B' + beta * C (ONNX Gemm, float32): one sgemm, then the C term in place."""

    def __init__(self, ctx, *, alpha=1.0, beta=1.0, transA=0, transB=0, act=(0, 0.0, 0.0)):
        a, b = ctx.shape(0), ctx.shape(1)
        self.ta, self.tb, self.alpha = bool(transA), bool(transB), float(alpha)
        self.m, self.k = (a[1], a[0]) if self.ta else (a[0], a[1])
        self.n = b[0] if self.tb else b[1]
        c = tuple(ctx.shape(2)) if ctx.has_input(2) else None
        self.epilogue = _Epilogue(c, self.m, self.n, beta, act)

    def __call__(self, a, b, c=None, *, out):
        runtime.gemm(a, b, out, self.m, self.n, self.k, trans_a=self.ta, trans_b=self.tb, alpha=self.alpha)
        self.epilogue(out, c)


@cuda_kernel("FusedGemm", domain=DOMAIN, supports=_gemm_supported)
class FusedGemm(Gemm):
    """activation(Gemm(A, B, C)) (ops/shapes/fused.py), the activation in the C term's pass."""

    def __init__(self, ctx, *, activation, activation_params=(), alpha=1.0, beta=1.0, transA=0, transB=0):
        super().__init__(ctx, alpha=alpha, beta=beta, transA=transA, transB=transB,
                         act=activation_of({"activation": activation, "activation_params": activation_params}))


def _matmul_plan(a: tuple, b: tuple):
    """(batch, M, K, N, stride_a, stride_b) of a MatMul these shapes allow on the GPU, or None."""
    if len(a) < 2 or len(b) < 2:
        return None
    m, k, n = a[-2], a[-1], b[-1]
    if len(b) == 2:
        return 1, math.prod(a[:-1]), k, n, 0, 0
    if len(a) == 2:
        return math.prod(b[:-2]), m, k, n, 0, k * n
    if tuple(a[:-2]) == tuple(b[:-2]):
        return math.prod(a[:-2]), m, k, n, m * k, k * n
    return None


def _matmul_supported(ctx) -> bool:
    return float32_io(ctx) and _matmul_plan(tuple(ctx.shape(0)), tuple(ctx.shape(1))) is not None


@cuda_kernel("MatMul", supports=_matmul_supported)
class MatMul:
    """ONNX MatMul (numpy matmul) of float32 on the GPU; see the module docstring for the shapes."""

    def __init__(self, ctx):
        self.batch, self.m, self.k, self.n, self.sa, self.sb = _matmul_plan(tuple(ctx.shape(0)), tuple(ctx.shape(1)))

    def __call__(self, a, b, *, out):
        runtime.gemm(a, b, out, self.m, self.n, self.k, batch=self.batch, stride_a=self.sa, stride_b=self.sb,
                     stride_c=self.m * self.n)


def _matmul_add_supported(ctx) -> bool:
    return _matmul_supported(ctx) and len(ctx.shape(1)) == 2


@cuda_kernel("MatMulAdd", domain=DOMAIN, supports=_matmul_add_supported)
class MatMulAdd(MatMul):
    """MatMul(A, B) + C, B (K, N), C a bias over N (ops/shapes/fused.py)."""

    def __init__(self, ctx):
        super().__init__(ctx)
        c = tuple(ctx.shape(2))
        self.epilogue = _Epilogue((1, c[-1]) if c else (1, 1), self.batch * self.m, self.n, 1.0, (0, 0.0, 0.0))

    def __call__(self, a, b, c, *, out):
        super().__call__(a, b, out=out)
        self.epilogue(out, c)
