"""Linear-algebra CPU kernels: Det."""

from __future__ import annotations

import numpy as np

from ..registry import kernel


@kernel("Det", since=(11, 22))
def det(x, *, out):
    """Y[...] = determinant of the square matrix X[..., :, :] (LU factorization, LAPACK getrf).

    Shapes: X (*, M, M), Y (*). float16 is computed in float32.
    Spec: Operators.md#Det.
    """
    a = x.astype(np.float32) if x.dtype == np.float16 else x
    np.copyto(out, np.linalg.det(a), casting="same_kind")
