"""Trigonometric and hyperbolic CPU kernels: Sin, Cos, Tan, Asin, Acos, Atan,
Sinh, Cosh, Asinh, Acosh, Atanh.

ONNX spec: each op's section of Operators.md (Sin-7 ... Atanh-9, all revised at
version 22 for the type list only). X and Y are float16, float, double (and
bfloat16 through ml_dtypes); radians. Out-of-domain inputs give NaN (Asin(2),
Acosh(0)) and poles +-inf (Atanh(1)), as IEEE and onnxruntime do, without
numpy warnings. Every kernel writes into `out` and may run in place.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel


def _register(op_type: str, ufunc, since: tuple) -> None:
    def run(x, *, out):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            ufunc(x, out=out)

    run.__name__ = run.__qualname__ = op_type.lower()
    run.__doc__ = f"Y = {ufunc.__name__}(X), element-wise (ONNX {op_type}; numpy.{ufunc.__name__})."
    kernel(op_type, since=since, inplace=(0,))(run)


for _op, _ufunc, _since in (("Sin", np.sin, (7, 22)), ("Cos", np.cos, (7, 22)), ("Tan", np.tan, (7, 22)),
                            ("Asin", np.arcsin, (7, 22)), ("Acos", np.arccos, (7, 22)),
                            ("Atan", np.arctan, (7, 22)), ("Sinh", np.sinh, (9, 22)),
                            ("Cosh", np.cosh, (9, 22)), ("Asinh", np.arcsinh, (9, 22)),
                            ("Acosh", np.arccosh, (9, 22)), ("Atanh", np.arctanh, (9, 22))):
    _register(_op, _ufunc, _since)
