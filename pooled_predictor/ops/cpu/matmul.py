"""Matrix-product CPU kernels: MatMul (numpy.matmul semantics, BLAS GEMM)."""

from __future__ import annotations

import numpy as np

from ..registry import kernel


@kernel("MatMul", since=(1, 9, 13))
def matmul(a, b, *, out):
    """Y = A @ B with numpy.matmul's broadcasting of batch dimensions (ONNX MatMul)."""
    np.matmul(a, b, out=out)
