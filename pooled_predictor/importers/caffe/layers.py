"""One function per Caffe layer type: read its parameters (Caffe's defaults) and emit nodes.

This module holds the neural layers (convolution, pooling, normalization,
activations, affine) and CONVERTERS / CHECKS, the tables of every supported
layer type; structure_layers.py holds the layers that combine or rearrange
blobs, ssd_layers.py the SSD layers and ArgMax.

Every converter maps the layer onto ONNX ops where the semantics match (the
algebra is stated where it is not a one-to-one mapping), and onto ops of our
"caffe" domain where ONNX has no equivalent (Normalize, PriorBox,
DetectionOutput, ArgMax, Caffe's Reshape with axis/num_axes). Sources: Caffe's
layer documentation and src/caffe/layers/*.cpp (BVLC), Wei Liu's SSD branch for
Normalize, Permute, PriorBox and DetectionOutput.
"""

from __future__ import annotations

import math

import numpy as np

from .builder import Builder, UnsupportedLayer, _axis, _spatial
from .ssd_layers import argmax, detection_output, normalize, prior_box
from .structure_layers import (concat, crop, eltwise, flatten, input_layer, permute, reshape, silence, slice_,
                               softmax, split)


# ---- the converters -------------------------------------------------------------------
def convolution(b: Builder, layer, transpose: bool = False) -> None:
    """Convolution -> Conv; Deconvolution -> ConvTranspose (weights are (Cin, Cout/g, k...) in both)."""
    p = layer.proto.convolution_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    n = rank - 2
    if p.axis not in (1, 1 - rank):
        raise b.bad(layer, f"convolution_param.axis={p.axis} is not supported (channels must be axis 1)")
    kernel = _spatial(p, "kernel_size", None, n)
    if None in kernel:
        raise b.bad(layer, "convolution_param needs kernel_size (or kernel_h and kernel_w)")
    pads = _spatial(p, "pad", 0, n)
    strides = _spatial(p, "stride", 1, n)
    dilations = _spatial(p, "dilation", 1, n)
    blobs = b.learned(layer, (2,) if p.bias_term else (1,))
    w = blobs[0]
    # Convolution: (num_output, C / group, k...); Deconvolution: (C, num_output / group, k...)
    outputs = w.shape[1] * p.group if transpose and w.ndim >= 2 else (w.shape[0] if w.ndim else -1)
    if w.ndim < 2 or outputs != p.num_output or math.prod(w.shape[2:]) != math.prod(kernel):
        raise b.bad(layer, f"weights of shape {w.shape} do not fit num_output {p.num_output}, "
                           f"group {p.group} and kernel {kernel}")
    w = w.reshape(w.shape[:2] + tuple(kernel))  # legacy blobs: (num, channels, height, width) already
    if p.bias_term and blobs[1].size != p.num_output:
        raise b.bad(layer, f"bias of {blobs[1].size} values for num_output {p.num_output}")
    inputs = [x, b.const(layer, "weight", w)]
    if p.bias_term:
        inputs.append(b.const(layer, "bias", blobs[1].reshape(-1)))
    attrs = dict(kernel_shape=kernel, pads=pads + pads, strides=strides, dilations=dilations, group=int(p.group))
    b.node(layer, "ConvTranspose" if transpose else "Conv", inputs, [b.top(layer, rank=rank)], **attrs)


def deconvolution(b: Builder, layer) -> None:
    convolution(b, layer, transpose=True)


def inner_product(b: Builder, layer) -> None:
    """InnerProduct: y = x' W^T + b with x' = x flattened from `axis` on (W is (N, K); (K, N) when transpose).

    Emitted as Reshape(x, [0]*axis + [-1]) -> MatMul(W^T) -> Add(b); the passes turn
    MatMul+Add into Gemm for 2-D blobs.
    """
    p = layer.proto.inner_product_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    axis = _axis(b, layer, p.axis, rank)
    blobs = b.learned(layer, (2,) if p.bias_term else (1,))
    w = blobs[0].reshape(-1, blobs[0].shape[-1]) if blobs[0].ndim != 2 else blobs[0]  # legacy 1x1xNxK
    if w.shape[1 if p.transpose else 0] != p.num_output:
        raise b.bad(layer, f"weights of shape {blobs[0].shape} do not fit num_output {p.num_output}"
                           f"{' (transpose: K x N)' if p.transpose else ' (N x K)'}")
    wt = w if p.transpose else w.T                         # (K, N)
    flat = b.tmp(layer, "flat", axis + 1)
    b.node(layer, "Reshape", [x, b.const(layer, "shape", np.array([0] * axis + [-1], np.int64))], [flat])
    if p.bias_term:
        mm = b.tmp(layer, "matmul", axis + 1)
        b.node(layer, "MatMul", [flat, b.const(layer, "weight", wt)], [mm])
        b.node(layer, "Add", [mm, b.const(layer, "bias", blobs[1].reshape(-1))], [b.top(layer, rank=axis + 1)])
    else:
        b.node(layer, "MatMul", [flat, b.const(layer, "weight", wt)], [b.top(layer, rank=axis + 1)])


def pooling(b: Builder, layer) -> None:
    """Pooling -> MaxPool / AveragePool with ceil_mode=1, or the Global* ops.

    Caffe's output size is ceil((in + 2 pad - k) / s) + 1, less one when pad > 0
    and the last window would start at or past in + pad: ONNX's ceil_mode rule.
    AVE divides by the window clipped to the padded input [-pad, in + pad):
    AveragePool's count_include_pad=1. (Caffe also keeps a last window starting
    outside the input when pad = 0 and stride > kernel; such windows are empty.)
    """
    p = layer.proto.pooling_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    method = p.pool
    if p.global_pooling:
        op = "GlobalMaxPool" if method == 0 else "GlobalAveragePool"
        b.node(layer, op, [x], [b.top(layer, rank=rank)])
        return
    kernel = _spatial(p, "kernel_size", None)
    if None in kernel:
        raise b.bad(layer, "pooling_param needs kernel_size (or kernel_h and kernel_w) unless global_pooling")
    pads = _spatial(p, "pad", 0)
    strides = _spatial(p, "stride", 1)
    attrs = dict(kernel_shape=kernel, pads=pads + pads, strides=strides, ceil_mode=1)
    if method == 0:
        b.node(layer, "MaxPool", [x], [b.top(layer, rank=rank)], **attrs)
    else:
        b.node(layer, "AveragePool", [x], [b.top(layer, rank=rank)], count_include_pad=1, **attrs)


def lrn(b: Builder, layer) -> None:
    """LRN. ACROSS_CHANNELS: ONNX LRN (scale = k + alpha/n * sum of squares, the same formula).

    WITHIN_CHANNEL: y = x / (k + alpha * mean_{n x n window}(x^2))^beta, the window
    zero-padded by (n-1)/2 and the mean over n^2 taps (Caffe's AVE pooling of x^2):
    AveragePool(count_include_pad=1) of x*x.
    """
    p = layer.proto.lrn_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    n = int(p.local_size)
    if p.norm_region == 0:
        b.node(layer, "LRN", [x], [b.top(layer, rank=rank)], size=n, alpha=float(p.alpha),
               beta=float(p.beta), bias=float(p.k))
        return
    pad = (n - 1) // 2
    sq, avg, scale, powed = (b.tmp(layer, s, rank) for s in ("sq", "avg", "scale", "pow"))
    b.node(layer, "Mul", [x, x], [sq])
    b.node(layer, "AveragePool", [sq], [avg], kernel_shape=[n, n], pads=[pad] * 4, strides=[1, 1],
           count_include_pad=1)
    b.node(layer, "Mul", [avg, b.const(layer, "alpha", np.float32(p.alpha))], [scale])
    shifted = b.tmp(layer, "shifted", rank)
    b.node(layer, "Add", [scale, b.const(layer, "k", np.float32(p.k))], [shifted])
    b.node(layer, "Pow", [shifted, b.const(layer, "beta", np.float32(p.beta))], [powed])
    b.node(layer, "Div", [x, powed], [b.top(layer, rank=rank)])


def relu(b: Builder, layer) -> None:
    x = b.bottom(layer)
    slope = float(layer.proto.relu_param.negative_slope)
    if slope == 0.0:
        b.node(layer, "Relu", [x], [b.top(layer, rank=b.rank.get(x))])
    else:
        b.node(layer, "LeakyRelu", [x], [b.top(layer, rank=b.rank.get(x))], alpha=slope)


def prelu(b: Builder, layer) -> None:
    """PReLU: slope per channel (shape (C, 1, ...) to broadcast over NCHW) or one shared."""
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    (a,) = b.learned(layer, 1)
    a = a.reshape(-1)
    if not layer.proto.prelu_param.channel_shared:
        a = a.reshape((-1,) + (1,) * (rank - 2))
    b.node(layer, "PRelu", [x, b.const(layer, "slope", a)], [b.top(layer, rank=rank)])


def _unary(op: str, **attrs):
    def convert(b: Builder, layer) -> None:
        x = b.bottom(layer)
        b.node(layer, op, [x], [b.top(layer, rank=b.rank.get(x))], **attrs)
    convert.__doc__ = f"-> ONNX {op}"
    return convert


def elu(b: Builder, layer) -> None:
    x = b.bottom(layer)
    b.node(layer, "Elu", [x], [b.top(layer, rank=b.rank.get(x))], alpha=float(layer.proto.elu_param.alpha))


def _affine(b: Builder, layer, x: str, scale: float, shift: float, rank) -> str:
    """x * scale + shift, skipping the identity parts."""
    if scale != 1.0:
        y = b.tmp(layer, "scaled", rank)
        b.node(layer, "Mul", [x, b.const(layer, "scale", np.float32(scale))], [y])
        x = y
    if shift != 0.0:
        y = b.tmp(layer, "shifted", rank)
        b.node(layer, "Add", [x, b.const(layer, "shift", np.float32(shift))], [y])
        x = y
    return x


def power(b: Builder, layer) -> None:
    """Power: y = (shift + scale * x) ^ power."""
    p = layer.proto.power_param
    x = b.bottom(layer)
    r = b.rank.get(x)
    z = _affine(b, layer, x, float(p.scale), float(p.shift), r)
    if p.power == 1.0:
        b.node(layer, "Identity", [z], [b.top(layer, rank=r)])
    else:
        b.node(layer, "Pow", [z, b.const(layer, "power", np.float32(p.power))], [b.top(layer, rank=r)])


def exp(b: Builder, layer) -> None:
    """Exp: y = base ^ (shift + scale * x) = exp(ln(base) * (shift + scale * x)); base -1 means e."""
    p = layer.proto.exp_param
    x = b.bottom(layer)
    r = b.rank.get(x)
    ln_base = 1.0 if p.base == -1.0 else math.log(p.base)
    z = _affine(b, layer, x, float(p.scale) * ln_base, float(p.shift) * ln_base, r)
    b.node(layer, "Exp", [z], [b.top(layer, rank=r)])


def log(b: Builder, layer) -> None:
    """Log: y = log_base(shift + scale * x) = ln(shift + scale * x) / ln(base); base -1 means e."""
    p = layer.proto.log_param
    x = b.bottom(layer)
    r = b.rank.get(x)
    z = _affine(b, layer, x, float(p.scale), float(p.shift), r)
    if p.base == -1.0:
        b.node(layer, "Log", [z], [b.top(layer, rank=r)])
    else:
        ln = b.tmp(layer, "ln", r)
        b.node(layer, "Log", [z], [ln])
        b.node(layer, "Mul", [ln, b.const(layer, "inv_ln_base", np.float32(1.0 / math.log(p.base)))],
               [b.top(layer, rank=r)])


def threshold(b: Builder, layer) -> None:
    """Threshold: y = 1 if x > threshold else 0 (float)."""
    x = b.bottom(layer)
    r = b.rank.get(x)
    gt = b.tmp(layer, "greater", r)
    b.node(layer, "Greater", [x, b.const(layer, "threshold", np.float32(layer.proto.threshold_param.threshold))],
           [gt])
    b.node(layer, "Cast", [gt], [b.top(layer, rank=r)], to=1)


def batch_norm(b: Builder, layer) -> None:
    """BatchNorm (TEST: global statistics): y = (x - mean * s) / sqrt(var * s + eps), s = 1/f for the third blob f.

    f is the moving-average scale factor; f = 0 gives s = 0, as Caffe's
    batch_norm_layer.cpp computes it (`scale_factor = f == 0 ? 0 : 1 / f`) and
    OpenCV reads it (the mean and variance are then taken as 0).

    Emitted as BatchNormalization with scale 1 and bias 0 (Caffe's BatchNorm has
    no affine part; a Scale layer follows it).
    """
    p = layer.proto.batch_norm_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    mean, var, factor = b.learned(layer, 3)
    f = float(factor.reshape(-1)[0]) if factor.size else 1.0
    f = 1.0 / f if f != 0.0 else 0.0
    mean = (mean.reshape(-1) * f).astype(np.float32)
    var = (var.reshape(-1) * f).astype(np.float32)
    c = mean.shape[0]
    ins = [x, b.const(layer, "scale", np.ones(c, np.float32)), b.const(layer, "bias", np.zeros(c, np.float32)),
           b.const(layer, "mean", mean), b.const(layer, "var", var)]
    b.node(layer, "BatchNormalization", ins, [b.top(layer, rank=rank)], epsilon=float(p.eps))


def _broadcast_param(b: Builder, layer, array: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A Scale/Bias parameter of shape x.shape[axis:axis+k] reshaped to broadcast against x."""
    array = np.asarray(array, np.float32)
    if array.ndim == 0 or array.size == 1 and array.ndim <= 1:
        return array.reshape(())
    trailing = rank - axis - array.ndim
    if trailing < 0:
        raise b.bad(layer, f"parameter of shape {array.shape} does not fit axis {axis} of a rank-{rank} blob")
    return array.reshape(array.shape + (1,) * trailing)


def _scale_or_bias(b: Builder, layer, op: str, param, blob_index: int, bias_index: int | None) -> None:
    """Scale (y = x * s [+ b]) and Bias (y = x + b): s and b cover x's axes [axis, axis + k)."""
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    axis = _axis(b, layer, param.axis, rank)
    if len(layer.bottom) > 1:  # the factor is the second bottom: unsqueeze its trailing axes
        other = b.bottom(layer, 1)
        k = b.bottom_rank(layer, 1)
        trailing = rank - axis - k
        if trailing > 0:
            u = b.tmp(layer, "unsqueezed", rank - axis)
            b.node(layer, "Unsqueeze", [other, b.const(layer, "axes", np.arange(k, k + trailing, dtype=np.int64))], [u])
            other = u
        first = other
        blobs = b.blobs.get(layer.name, []) if bias_index is not None else []
    else:
        count = (2,) if bias_index is not None else (1,)
        blobs = b.learned(layer, count)
        first = b.const(layer, "scale" if op == "Mul" else "bias", _broadcast_param(b, layer, blobs[0], axis, rank))
    if bias_index is None:
        b.node(layer, op, [x, first], [b.top(layer, rank=rank)])
        return
    scaled = b.tmp(layer, "scaled", rank)
    b.node(layer, op, [x, first], [scaled])
    bias = blobs[bias_index] if len(blobs) > bias_index else None
    if bias is None:
        raise b.bad(layer, "bias_term is set but the weights hold no bias blob")
    b.node(layer, "Add", [scaled, b.const(layer, "bias", _broadcast_param(b, layer, bias, axis, rank))],
           [b.top(layer, rank=rank)])


def scale(b: Builder, layer) -> None:
    p = layer.proto.scale_param
    if len(layer.bottom) > 1:
        bias_index = 0 if p.bias_term else None
    else:
        bias_index = 1 if p.bias_term else None
    _scale_or_bias(b, layer, "Mul", p, 0, bias_index)


def bias(b: Builder, layer) -> None:
    _scale_or_bias(b, layer, "Add", layer.proto.bias_param, 0, None)


def dropout(b: Builder, layer) -> None:
    """Dropout at TEST time is the identity (Caffe scales at train time)."""
    x = b.bottom(layer)
    b.node(layer, "Identity", [x], [b.top(layer, rank=b.rank.get(x))])


# ---- parameter values we do not implement (reported with the unsupported types) -------------
def _check_pooling(layer):
    if layer.proto.pooling_param.pool == 2:
        raise UnsupportedLayer(f"Pooling(STOCHASTIC) in layer {layer.name!r}")


def _check_detection(layer):
    p = layer.proto.detection_output_param
    if not p.share_location:
        raise UnsupportedLayer(f"DetectionOutput(share_location=false) in layer {layer.name!r}")


CHECKS = {"Pooling": _check_pooling, "DetectionOutput": _check_detection}

CONVERTERS = {
    "Input": input_layer, "Convolution": convolution, "Deconvolution": deconvolution,
    "InnerProduct": inner_product, "Pooling": pooling, "LRN": lrn, "ReLU": relu, "PReLU": prelu, "ELU": elu,
    "Sigmoid": _unary("Sigmoid"), "TanH": _unary("Tanh"), "AbsVal": _unary("Abs"), "BNLL": _unary("Softplus"),
    "Power": power, "Exp": exp, "Log": log, "Threshold": threshold, "Dropout": dropout,
    "BatchNorm": batch_norm, "Scale": scale, "Bias": bias, "Eltwise": eltwise, "Concat": concat,
    "Slice": slice_, "Split": split, "Crop": crop, "Flatten": flatten, "Reshape": reshape, "Softmax": softmax,
    "Permute": permute, "Normalize": normalize, "PriorBox": prior_box, "DetectionOutput": detection_output,
    "ArgMax": argmax, "Silence": silence,
}
