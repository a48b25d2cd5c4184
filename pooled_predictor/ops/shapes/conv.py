"""Shape rules of Conv and ConvTranspose, and the geometry their kernels share.

ONNX spec, sections Conv and ConvTranspose (versions 1, 11, 22). The output
size along spatial axis i, with dk = (kernel - 1) * dilation + 1:

    Conv, NOTSET:          out = floor((in + pad_begin + pad_end - dk) / stride) + 1
    Conv, VALID:           out = floor((in - dk) / stride) + 1
    Conv, SAME_*:          out = ceil(in / stride),
                           total = max(0, (out - 1) * stride + dk - in),
                           SAME_UPPER: pad_begin = total // 2 (the odd one at the end),
                           SAME_LOWER: pad_begin = total - total // 2.
    ConvTranspose:         full = stride * (in - 1) + output_padding + dk
      NOTSET:              out = full - pad_begin - pad_end
      VALID:               out = full (no padding)
      SAME_*:              out = min(in * stride, full)           } total = max(0, full - out),
      output_shape given:  out = output_shape (pads are ignored)  } split as below
                           SAME_UPPER: pad_begin = total // 2,
                           otherwise:  pad_begin = total - total // 2.

Conv SAME_* with dilations pads for the dilated kernel dk, as the onnx
reference evaluator does (onnxruntime refuses dilations with SAME_*).
pads given together with auto_pad must be all zero.
ConvTranspose-1's text says the opposite split for SAME_UPPER; onnxruntime and
the onnx reference evaluator use the rule above (the -11 text) for every
version, and so do we. Where the spec would pad negatively we follow
onnxruntime too: SAME_* with a kernel below the stride (full < in * stride)
gives the full output, not in * stride; an output_shape larger than `full`
extends the output with positions no input reaches (bias only).
output_padding must be below max(stride, dilation) (the spec's bound;
onnxruntime also rejects output_padding >= stride when dilation > stride).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import shape_rule

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class ConvGeometry:
    """Everything about a Conv/ConvTranspose node that depends only on shapes.

    Attributes:
        transpose: ConvTranspose (True) or Conv.
        batch, in_channels, out_channels, group: N, C, M, group.
        in_shape, out_shape: spatial sizes of X and Y.
        kernel, strides, dilations: per spatial axis.
        pads_begin, pads_end: Conv: zeros added before/after each axis of X.
            ConvTranspose: positions cropped from the start/end of the full
            output (pads_end may be negative: the output is extended).
        output_padding: ConvTranspose's extra positions at the end (zeros for Conv).
    """

    transpose: bool
    batch: int
    in_channels: int
    out_channels: int
    group: int
    in_shape: tuple
    out_shape: tuple
    kernel: tuple
    strides: tuple
    dilations: tuple
    pads_begin: tuple
    pads_end: tuple
    output_padding: tuple

    @property
    def rank(self) -> int:
        """Number of spatial axes."""
        return len(self.in_shape)

    @property
    def dilated_kernel(self) -> tuple:
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))


def _ints(ctx, name: str, value, n: int, default: int, minimum: int) -> tuple:
    if value is None or len(value) == 0:
        return (default,) * n
    value = tuple(int(v) for v in value)
    if len(value) != n:
        raise ctx.error(f"{name}={list(value)} needs {n} values (one per spatial axis)")
    if any(v < minimum for v in value):
        raise ctx.error(f"{name}={list(value)}: every value must be >= {minimum}")
    return value


def conv_geometry(ctx) -> ConvGeometry:
    """Check a Conv/ConvTranspose node's shapes and attributes; compute its geometry.

    Args:
        ctx: OpContext of the node (input 0 X, 1 W, optional 2 B).
    Returns:
        ConvGeometry.
    Raises:
        ShapeInferenceError: ranks, channels, group, bias, attribute lengths or
            values that do not fit; a kernel larger than the padded input.
    """
    transpose = ctx.node.op_type == "ConvTranspose"
    xs, ws = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    if len(xs) < 3:
        raise ctx.error(f"X has shape {xs}; expected (N, C, D1, ..., Dn) with at least one spatial axis")
    if len(ws) != len(xs):
        raise ctx.error(f"W has shape {ws}, rank {len(ws)}; expected rank {len(xs)} like X {xs}")
    if ctx.dtype(1) != ctx.dtype(0):
        raise ctx.error(f"X is {ctx.dtype(0)} but W is {ctx.dtype(1)}; they must match")
    n = len(xs) - 2
    group = int(ctx.attr("group", 1))
    if group < 1:
        raise ctx.error(f"group={group} must be >= 1")
    batch, channels, in_shape = xs[0], xs[1], xs[2:]
    if transpose:
        if ws[0] != channels:
            raise ctx.error(f"X {xs} has {channels} channels but W {ws} has {ws[0]} "
                            f"(ConvTranspose W is (C, M / group, k1, ..., kn))")
        if channels % group:
            raise ctx.error(f"X has {channels} channels, not a multiple of group={group}")
        out_channels = ws[1] * group
    else:
        if ws[1] * group != channels:
            raise ctx.error(f"X {xs} has {channels} channels but W {ws} with group={group} "
                            f"expects W.shape[1] * group = {ws[1] * group}")
        if ws[0] % group:
            raise ctx.error(f"W {ws} has {ws[0]} output channels, not a multiple of group={group}")
        out_channels = ws[0]
    if ctx.has_input(2):
        bs = tuple(ctx.shape(2))
        if bs != (out_channels,):
            raise ctx.error(f"B has shape {bs}; expected ({out_channels},), one per output channel")
        if ctx.dtype(2) != ctx.dtype(0):
            raise ctx.error(f"B is {ctx.dtype(2)} but X is {ctx.dtype(0)}; they must match")

    kernel = ws[2:]
    ks = ctx.attr("kernel_shape")
    if ks is not None and len(ks) and tuple(int(k) for k in ks) != kernel:
        raise ctx.error(f"kernel_shape={list(ks)} differs from W's spatial shape {list(kernel)}")
    strides = _ints(ctx, "strides", ctx.attr("strides"), n, 1, 1)
    dilations = _ints(ctx, "dilations", ctx.attr("dilations"), n, 1, 1)
    auto_pad = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad not in AUTO_PADS:
        raise ctx.error(f"auto_pad={auto_pad!r}; expected one of {AUTO_PADS}")
    pads = ctx.attr("pads")
    if pads is not None and len(pads):
        pads = tuple(int(p) for p in pads)
        if len(pads) != 2 * n:
            raise ctx.error(f"pads={list(pads)} needs {2 * n} values (begin..., end...)")
        if any(p < 0 for p in pads):
            raise ctx.error(f"pads={list(pads)}: every value must be >= 0")
        if auto_pad != "NOTSET" and any(pads):
            raise ctx.error(f"pads={list(pads)} cannot be used with auto_pad={auto_pad!r}")
    else:
        pads = (0,) * (2 * n)
    dk = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations))

    if not transpose:
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = tuple(-(-i // s) for i, s in zip(in_shape, strides))
            total = tuple(max(0, (o - 1) * s + k - i) for o, s, k, i in zip(out, strides, dk, in_shape))
            begin = tuple(t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total)
            end = tuple(t - b for t, b in zip(total, begin))
        else:
            begin, end = (pads[:n], pads[n:]) if auto_pad == "NOTSET" else ((0,) * n, (0,) * n)
            out = tuple((i + b + e - k) // s + 1
                        for i, b, e, k, s in zip(in_shape, begin, end, dk, strides))
        if any(o < 0 or (o == 0 and i > 0) for o, i in zip(out, in_shape)):
            raise ctx.error(f"the dilated kernel {list(dk)} is larger than the padded input "
                            f"{[i + b + e for i, b, e in zip(in_shape, begin, end)]} (X {xs})")
        adj = (0,) * n
    else:
        adj = _ints(ctx, "output_padding", ctx.attr("output_padding"), n, 0, 0)
        bad = [i for i in range(n) if adj[i] >= max(strides[i], dilations[i])]
        if bad:
            raise ctx.error(f"output_padding={list(adj)} must be less than max(stride, dilation) "
                            f"on every axis (strides={list(strides)}, dilations={list(dilations)})")
        full = tuple(s * (i - 1) + a + k for s, i, a, k in zip(strides, in_shape, adj, dk))
        output_shape = ctx.attr("output_shape")
        if output_shape is not None and len(output_shape):
            out = tuple(int(o) for o in output_shape)
            if len(out) != n:
                raise ctx.error(f"output_shape={list(out)} needs {n} values (spatial axes only)")
            if any(o < 0 for o in out):
                raise ctx.error(f"output_shape={list(out)} has a negative size")
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):  # never padded negatively (onnxruntime)
            out = tuple(min(i * s, f) for i, s, f in zip(in_shape, strides, full))
        elif auto_pad == "VALID":
            out = full
        else:
            out = tuple(f - b - e for f, b, e in zip(full, pads[:n], pads[n:]))
            if any(o < 0 for o in out):
                raise ctx.error(f"pads={list(pads)} crop more than the full output {list(full)}")
        if output_shape is not None and len(output_shape) or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            total = tuple(max(0, f - o) for f, o in zip(full, out))
            begin = tuple(t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total)
        elif auto_pad == "VALID":
            begin = (0,) * n
        else:
            begin = pads[:n]
        end = tuple(f - o - b for f, o, b in zip(full, out, begin))
    return ConvGeometry(transpose, batch, channels, out_channels, group, tuple(in_shape), tuple(out),
                        tuple(kernel), strides, dilations, tuple(begin), tuple(end), adj)


@shape_rule("Conv", "ConvTranspose")
def conv(ctx):
    """Y is (N, M, *out_shape), X's dtype; see the module docstring for out_shape."""
    g = conv_geometry(ctx)
    return [((g.batch, g.out_channels) + g.out_shape, np.dtype(ctx.dtype(0)))]
