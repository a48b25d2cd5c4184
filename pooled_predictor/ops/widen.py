"""Small float types (bfloat16, float8, float6, float4: ml_dtypes) computed in float32.

numpy runs ml_dtypes' types through generic loops that round every intermediate
to the small type (a Gelu in bfloat16 loses 3% to cancellation) and several
libraries (numba, numpy.einsum, BLAS) have no loops for them at all. As
onnxruntime does for bfloat16, a kernel given such inputs runs on float32
copies of them and its small-float outputs are rounded once at the end
(round to nearest even, ml_dtypes' conversion). The float32 copies are
workspace asked through the OpContext, so the Net plans them in its arena.

Ops in EXACT move or compare values without arithmetic and run on the small
type itself; Cast, CastLike, BitCast, QuantizeLinear and DequantizeLinear
define their own conversions (float8 saturation, the division's precision).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .context import OpContext

WIDE = np.dtype(np.float32)
EXACT = frozenset({
    "Cast", "CastLike", "BitCast", "QuantizeLinear", "DequantizeLinear",
    "Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
    "Concat", "Split", "Slice", "Gather", "Expand", "Tile", "Pad", "Where", "Shape", "Size", "Dropout",
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf",
    "Max", "Min", "Relu", "Neg", "Abs", "Sign", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin",
    "If", "Loop", "Scan",  # control flow: the bodies see the original types and widen their own nodes
})


def is_small_float(dtype) -> bool:
    """bfloat16, float8, float6, float4 (ml_dtypes' float types: numpy kind 'V')."""
    return dtype is not None and dtype.kind == "V" and "float" in dtype.name


def needs_widening(op_type: str, ctx: OpContext) -> bool:
    if op_type in EXACT:
        return False
    return any(is_small_float(d) for d in ctx.dtypes) or any(is_small_float(d) for d in ctx.out_dtypes or ())


class Widened:
    """runner(*inputs, out=out) that runs `bind(wide_ctx)` on float32 copies.

    Args:
        ctx: the node's OpContext (small-float dtypes), output types inferred.
        bind: OpContext -> the kernel's runner.
        out_arg: list of outputs -> the kernel's `out` (one array or a tuple).
    """

    def __init__(self, ctx: OpContext, bind: Callable, out_arg: Callable):
        n = ctx.num_inputs
        self.narrow_in = [i for i in range(n) if ctx.has_input(i) and is_small_float(ctx.dtype(i))]
        dtypes = [WIDE if i in self.narrow_in else ctx.dtypes[i] for i in range(len(ctx.dtypes))]
        values = [None] * len(ctx.dtypes)
        for i in range(len(ctx.dtypes)):
            if ctx.is_static(i):
                v = ctx.value(i)
                values[i] = v.astype(WIDE) if i in self.narrow_in else v
        wide = ctx.retyped(dtypes, values)
        outs = ctx.out_dtypes or []
        self.narrow_out = [k for k, d in enumerate(outs) if is_small_float(d)]
        wide.out_shapes = ctx.out_shapes
        wide.out_dtypes = [WIDE if k in self.narrow_out else d for k, d in enumerate(outs)]
        self.in_bufs = {i: ctx.scratch(ctx.shape(i), WIDE) for i in self.narrow_in}
        self.out_bufs = {k: ctx.scratch(ctx.out_shapes[k], WIDE) for k in self.narrow_out
                         if ctx.has_output(k)}
        self.inner = bind(wide)
        self.out_arg = out_arg

    def __call__(self, *inputs, out):
        args = list(inputs)
        for i, buf in self.in_bufs.items():
            np.copyto(buf.array, inputs[i], casting="unsafe")
            args[i] = buf.array
        outs = list(out) if isinstance(out, tuple) else [out]
        wide_outs = [self.out_bufs[k].array if k in self.out_bufs else o for k, o in enumerate(outs)]
        self.inner(*args, out=self.out_arg(wide_outs))
        for k, buf in self.out_bufs.items():
            np.copyto(outs[k], buf.array, casting="unsafe")
