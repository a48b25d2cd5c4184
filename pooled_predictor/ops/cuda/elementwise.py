"""Element-wise CUDA kernels: unary math and activations, binary arithmetic with broadcasting, and the
ops that only give their input another shape (Reshape, Flatten, Squeeze, Unsqueeze, Identity).

Semantics: the ONNX spec of each op, as the CPU kernels in ops/cpu/elementwise.py and activation.py
(float32 here; other dtypes run on the CPU). Broadcasting is numpy's: the binary kernel reads each
input through strides with 0 on a broadcast axis, computed once per shape.
"""

from __future__ import annotations

import numpy as np

from ..shapes.fused import DOMAIN
from . import runtime
from .codes import ACT, BINARY, UNARY, cuda_kernel, float32_io


class _Unary:
    """y = f(x) for one of the codes of kernels/elementwise.cu (activations and math)."""

    code = 0

    def __init__(self, ctx, alpha=0.0, beta=0.0):
        self.alpha, self.beta = runtime.f32(alpha), runtime.f32(beta)
        self.fn = runtime.function("elementwise.cu", "unary_f32")

    def __call__(self, x, *_, out):
        n = out.size
        runtime.launch(self.fn, n, (x, out, np.int64(n), np.int32(self.code), self.alpha, self.beta))


def _unary(op: str, code: int, *, domain: str = ""):
    """Register a parameterless unary op (no attributes: an attribute is refused at placement)."""
    cls = type(op, (_Unary,), {"code": code, "__init__": lambda self, ctx: _Unary.__init__(self, ctx),
                               "__doc__": f"ONNX {op} (float32) on the GPU: kernels/elementwise.cu code {code}."})
    cuda_kernel(op, domain=domain, inplace=(0,))(cls)
    return cls


for _op in ("Relu", "Sigmoid", "Tanh", "HardSwish", "Softplus", "Softsign", "Mish"):
    _unary(_op, ACT[_op])
for _op in ("Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Erf", "Floor", "Ceil", "Sin", "Cos", "Round", "Sign"):
    _unary(_op, UNARY[_op])
_unary("HardSwish", ACT["HardSwish"], domain=DOMAIN)


@cuda_kernel("LeakyRelu", inplace=(0,))
class LeakyRelu(_Unary):
    code = ACT["LeakyRelu"]

    def __init__(self, ctx, *, alpha=0.01):
        super().__init__(ctx, alpha)


@cuda_kernel("Elu", inplace=(0,))
class Elu(_Unary):
    code = ACT["Elu"]

    def __init__(self, ctx, *, alpha=1.0):
        super().__init__(ctx, alpha)


@cuda_kernel("HardSigmoid", inplace=(0,))
class HardSigmoid(_Unary):
    code = ACT["HardSigmoid"]

    def __init__(self, ctx, *, alpha=0.2, beta=0.5):
        super().__init__(ctx, alpha, beta)


@cuda_kernel("Selu", inplace=(0,))
class Selu(_Unary):
    code = ACT["Selu"]

    def __init__(self, ctx, *, alpha=1.6732632423543772, gamma=1.0507009873554805):
        super().__init__(ctx, alpha, gamma)


class Gelu(_Unary):
    """ONNX Gelu-20 (approximate "none": the erf form; "tanh": the tanh approximation)."""

    def __init__(self, ctx, *, approximate="none"):
        super().__init__(ctx)
        self.code = ACT["GeluTanh"] if approximate in ("tanh", b"tanh") else ACT["Gelu"]


cuda_kernel("Gelu", inplace=(0,))(Gelu)
cuda_kernel("Gelu", domain=DOMAIN, inplace=(0,))(type("FusedGelu", (Gelu,), {}))


def _clip_static(ctx) -> bool:
    return float32_io(ctx) and all(ctx.is_static(i) for i in (1, 2) if ctx.has_input(i))


@cuda_kernel("Clip", supports=_clip_static, inplace=(0,))
class Clip(_Unary):
    """ONNX Clip: min/max attributes (Clip-6) or static inputs (Clip-11+; absent: unbounded)."""

    code = ACT["Clip"]

    def __init__(self, ctx, *, min=-3.4028234663852886e38, max=3.4028234663852886e38):  # noqa: A002
        lo = float(ctx.value(1)) if ctx.has_input(1) else min
        hi = float(ctx.value(2)) if ctx.has_input(2) else max
        super().__init__(ctx, lo if ctx.version >= 11 or ctx.has_input(1) else min,
                         hi if ctx.version >= 11 or ctx.has_input(2) else max)


def _binary_supports(ctx) -> bool:
    return float32_io(ctx) and ctx.num_inputs == 2 and len(ctx.out_shapes[0]) <= 8


class _Binary:
    """y = a op b with numpy broadcasting (kernels/elementwise.cu binary_f32)."""

    code = 0

    def __init__(self, ctx, **_):
        self.fn = runtime.function("elementwise.cu", "binary_f32")
        out = tuple(ctx.out_shapes[0])
        a, b = tuple(ctx.shape(0)), tuple(ctx.shape(1))
        if a == out and b == out:
            self.rank, self.meta = 0, runtime.i64([0])
        else:
            self.rank = len(out)
            self.meta = runtime.i64(list(out) + _broadcast_strides(a, out) + _broadcast_strides(b, out))

    def __call__(self, a, b, *, out):
        n = out.size
        runtime.launch(self.fn, n, (a, b, out, np.int64(n), np.int32(self.code), np.int32(self.rank), self.meta))


def _broadcast_strides(shape: tuple, out: tuple) -> list[int]:
    """Element strides of a C-contiguous `shape` read as `out` (numpy broadcasting: 0 where it repeats)."""
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    strides, s = [0] * len(out), 1
    for d in range(len(out) - 1, -1, -1):
        strides[d] = s if shape[d] != 1 else 0
        s *= shape[d]
    return strides


for _op in ("Add", "Sub", "Mul", "Div", "Pow", "PRelu"):
    cuda_kernel(_op, supports=_binary_supports, inplace=(0, 1) if _op != "PRelu" else (0,))(
        type(_op, (_Binary,), {"code": BINARY[_op], "__doc__": f"ONNX {_op} (float32, broadcasting) on the GPU."}))
for _op in ("Max", "Min"):  # variadic in ONNX; two inputs here (more: the CPU)
    cuda_kernel(_op, supports=_binary_supports)(
        type(_op, (_Binary,), {"code": BINARY[_op], "__doc__": f"ONNX {_op} of two float32 inputs on the GPU."}))


# ---- shape-only ops: a device copy (nothing when the planner gave the output the input's bytes) ----
def _any_dtype(ctx) -> bool:
    return True


class _Copy:
    def __init__(self, ctx, **_):
        pass

    def __call__(self, x, *_, out):
        if x.data.ptr != out.data.ptr:
            runtime.cupy.copyto(out, x.reshape(out.shape))


for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"):
    cuda_kernel(_op, supports=_any_dtype, inplace=(0,))(
        type(_op, (_Copy,), {"__doc__": f"ONNX {_op} on the GPU: the input's bytes under the output's shape.",
                             "__init__": (lambda self, ctx, **kw: None)}))
