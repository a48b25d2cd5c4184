"""Shape rules of pooling: MaxPool (Y and the optional Indices), AveragePool, LpPool,
GlobalAveragePool, GlobalMaxPool.

The window geometry (`pool_geometry`) is shared with the CPU kernels. It
follows onnxruntime's PoolAttributes, which is what our users compare against:

* explicit pads (auto_pad NOTSET): out = (in + head + tail - ((k - 1) * d + 1)) / s + 1,
  the division truncating toward zero (C++), so a kernel longer than the
  padded input still gives one output;
* ceil_mode=1: out = ceil((in + head + tail - ((k - 1) * d + 1)) / s) + 1, less one
  when the last window would start at or past in + head (it must start inside
  the input or the left padding; ONNX PR 5741, PyTorch);
* SAME_UPPER / SAME_LOWER: pad_needed = (ceil(in / s) - 1) * s + k - in with the
  *undilated* kernel (onnxruntime's "legacy" target size), head = pad_needed / 2
  (UPPER) or (pad_needed + 1) / 2 (LOWER), tail = the rest; then the formula
  above (so ceil_mode still applies). A negative pad_needed (kernel < stride)
  is taken as 0, as the ONNX spec says; onnxruntime rejects those models
  ("padding values must be non-negative");
* VALID: no padding, the formula above.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import shape_rule


@dataclass(frozen=True)
class AxisWindow:
    """The pooling window along one spatial axis (units: elements)."""

    size: int      # input length
    kernel: int
    stride: int
    dilation: int
    head: int      # padding before
    tail: int      # padding after
    out: int       # output length

    def taps(self):
        """For every kernel tap j: (j, first output, last output + 1, first input) where it reads the input.

        Output p reads input p * stride - head + j * dilation; the tap is kept
        for the outputs where that index lies in [0, size).
        """
        res = []
        for j in range(self.kernel):
            off = j * self.dilation - self.head           # input index at p = 0
            lo = max(0, _ceil_div(-off, self.stride))
            hi = min(self.out - 1, (self.size - 1 - off) // self.stride)
            if hi >= lo:
                res.append((j, lo, hi + 1, lo * self.stride + off))
        return res

    def counts(self, include_pad: bool) -> np.ndarray:
        """Number of taps of each output window that count for an average.

        include_pad=False: taps inside the input; True: taps inside the padded
        input [-head, size + tail) (the part of a ceil_mode window beyond the
        padding never counts, as in onnxruntime).
        """
        p = np.arange(self.out)[:, None]
        pos = p * self.stride - self.head + np.arange(self.kernel)[None, :] * self.dilation
        lo, hi = (-self.head, self.size + self.tail) if include_pad else (0, self.size)
        return ((pos >= lo) & (pos < hi)).sum(axis=1)


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _trunc_div(a: int, b: int) -> int:
    """Integer division truncating toward zero (C++)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _ints(ctx, name, n, default):
    v = ctx.attr(name)
    if v is None or len(v) == 0:
        return [default] * n
    v = [int(a) for a in v]
    if len(v) != n:
        raise ctx.error(f"{name}={v} has {len(v)} values, expected {n} (one per spatial axis)")
    return v


def pool_geometry(ctx) -> list[AxisWindow]:
    """Per spatial axis window of a MaxPool/AveragePool node (onnxruntime's rules, see module doc).

    Raises:
        ShapeInferenceError: missing or inconsistent kernel_shape/pads/strides/dilations,
            unknown auto_pad, or an empty output.
    """
    shape = ctx.shape(0)
    kernel = ctx.attr("kernel_shape")
    if kernel is None:
        raise ctx.error("kernel_shape is required")
    kernel = [int(k) for k in kernel]
    n = len(kernel)
    if len(shape) != n + 2:
        raise ctx.error(f"input shape {shape} must have rank {n + 2} for kernel_shape={kernel}")
    if any(k < 1 for k in kernel):
        raise ctx.error(f"kernel_shape={kernel} must be positive")
    strides = _ints(ctx, "strides", n, 1)
    dilations = _ints(ctx, "dilations", n, 1)
    pads = _ints(ctx, "pads", 2 * n, 0)
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations):
        raise ctx.error(f"strides={strides} and dilations={dilations} must be positive")
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    ceil_mode = int(ctx.attr("ceil_mode", 0))
    axes = []
    for i in range(n):
        size, k, s, d = int(shape[i + 2]), kernel[i], strides[i], dilations[i]
        if auto_pad in ("NOTSET", ""):
            head, tail = pads[i], pads[i + n]
        elif auto_pad == "VALID":
            head = tail = 0
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            need = max(0, (_ceil_div(size, s) - 1) * s + k - size)
            head = need // 2 if auto_pad == "SAME_UPPER" else (need + 1) // 2
            tail = need - head
        else:
            raise ctx.error(f"auto_pad={auto_pad!r}; expected NOTSET, SAME_UPPER, SAME_LOWER or VALID")
        num = size + head + tail - d * (k - 1) - 1
        if ceil_mode:
            out = _ceil_div(num, s) + 1
            if (out - 1) * s >= size + head:
                out -= 1
        else:
            out = _trunc_div(num, s) + 1
        if out < 0:
            raise ctx.error(f"axis {i + 2}: input length {size} with kernel {k}, dilation {d}, "
                            f"pads ({head}, {tail}) and stride {s} gives a negative output length")
        axes.append(AxisWindow(size, k, s, d, head, tail, out))
    return axes


@shape_rule("MaxPool", "AveragePool", "LpPool")
def pool(ctx):
    """Y (N, C, out...) in X's dtype; MaxPool's optional Indices: the same shape, int64."""
    shape = ctx.shape(0)
    out = tuple(shape[:2]) + tuple(a.out for a in pool_geometry(ctx))
    specs = [(out, ctx.dtype(0))]
    if ctx.node.op_type == "MaxPool":
        specs.append((out, np.dtype(np.int64)))
    return specs


@shape_rule("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx):
    """Y (N, C, 1, ..., 1): every spatial axis reduced to 1."""
    shape = ctx.shape(0)
    if len(shape) < 2:
        raise ctx.error(f"input shape {shape} must have rank >= 2 (N, C, spatial...)")
    return [(tuple(shape[:2]) + (1,) * (len(shape) - 2), ctx.dtype(0))]
