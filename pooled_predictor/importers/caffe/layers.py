"""One function per Caffe layer type: read its parameters (Caffe's defaults) and emit nodes.

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

from ...errors import ModelLoadError
from ...ir import Node, readonly

CAFFE = "caffe"


class UnsupportedLayer(Exception):
    """A supported layer type with a parameter value we do not implement."""


class Builder:
    """Collects nodes and weights; tracks the current value of every Caffe blob and its rank."""

    def __init__(self, prototxt: str, weights_src: str, blobs: dict, layers: list, net_inputs=()):
        self.prototxt, self.weights_src, self.blobs = prototxt, weights_src, blobs
        self.nodes: list[Node] = []
        self.weights: dict[str, np.ndarray] = {}
        self.inputs: list[tuple[str, tuple | None]] = []
        self.current: dict[str, str] = {}      # Caffe blob -> value name now holding it
        self.rank: dict[str, int | None] = {}  # value name -> rank (None: unknown)
        self.read: set[str] = set()            # value names read by some node
        self._writers: dict[str, int] = {}    # Caffe blob -> how many layers (or inputs) write it
        self._versions: dict[str, int] = {}   # Caffe blob -> writers seen so far
        self._names: set[str] = set()
        for t in list(net_inputs) + [t for layer in layers for t in layer.top]:
            self._writers[t] = self._writers.get(t, 0) + 1

    # ---- checks before any node is emitted ----------------------------------------------
    def check(self, layer) -> None:
        fn = CHECKS.get(layer.type)
        if fn is not None:
            fn(layer)

    # ---- blobs ------------------------------------------------------------------------
    def define_input(self, name: str, shape) -> None:
        self.inputs.append((name, shape))
        value = self._new_version(name)
        self.current[name] = value
        self.rank[value] = None if shape is None else len(shape)

    def bottom(self, layer, i: int = 0) -> str:
        try:
            blob = layer.bottom[i]
        except IndexError:
            raise ModelLoadError(f"{self.prototxt}: layer {layer.name!r} ({layer.type}) needs "
                                 f"bottom {i}, it has {len(layer.bottom)}") from None
        if blob not in self.current:
            raise ModelLoadError(f"{self.prototxt}: layer {layer.name!r} ({layer.type}) reads blob {blob!r}, "
                                 "which no earlier layer or input produces")
        value = self.current[blob]
        self.read.add(value)
        return value

    def bottom_rank(self, layer, i: int = 0) -> int:
        r = self.rank.get(self.bottom(layer, i))
        if r is None:
            raise ModelLoadError(f"{self.prototxt}: layer {layer.name!r} ({layer.type}) needs the rank of "
                                 f"blob {layer.bottom[i]!r}; declare the input's shape")
        return r

    def top(self, layer, i: int = 0, rank: int | None = None) -> str:
        """The value name the layer's i-th top is written to (versioned for in-place writers)."""
        try:
            blob = layer.top[i]
        except IndexError:
            raise ModelLoadError(f"{self.prototxt}: layer {layer.name!r} ({layer.type}) needs top {i}") from None
        value = self._new_version(blob)
        self.current[blob] = value
        self.rank[value] = rank
        return value

    def _new_version(self, blob: str) -> str:
        """`blob` for its last writer, `blob@k` for the k-th of the earlier ones."""
        k = self._versions.get(blob, 0) + 1
        self._versions[blob] = k
        return blob if k >= self._writers.get(blob, 0) else f"{blob}@{k}"

    def net_outputs(self) -> list[str]:
        """Blobs whose final value no layer reads (Caffe's net outputs), in order of definition."""
        return [v for v in dict.fromkeys(self.current.values()) if v not in self.read
                and v not in dict(self.inputs)]

    # ---- nodes and weights ---------------------------------------------------------------
    def node(self, layer, op: str, inputs: list[str], outputs: list[str], *, domain: str = "", **attrs) -> None:
        name = layer.name if layer.name not in self._names else f"{layer.name}/{op}_{len(self.nodes)}"
        self._names.add(name)
        self.read.update(i for i in inputs if i)
        self.nodes.append(Node(op, list(inputs), list(outputs), attrs, domain, name))

    def const(self, layer, suffix: str, array) -> str:
        name = f"{layer.name}/{suffix}"
        self.weights[name] = readonly(np.ascontiguousarray(array))
        return name

    def tmp(self, layer, suffix: str, rank: int | None = None) -> str:
        name = f"{layer.name}/{suffix}"
        self.rank[name] = rank
        return name

    def learned(self, layer, count: int | tuple, what: str = "") -> list[np.ndarray]:
        """The layer's weight blobs from the caffemodel (matched by layer name).

        Raises:
            ModelLoadError: the weights file has no blobs for this layer, or not as many.
        """
        blobs = self.blobs.get(layer.name)
        counts = (count,) if isinstance(count, int) else tuple(count)
        if blobs is None:
            raise ModelLoadError(f"{self.weights_src}: no weights for layer {layer.name!r} ({layer.type}) of "
                                 f"{self.prototxt}; weights are matched to layers by name")
        if len(blobs) not in counts:
            raise ModelLoadError(f"{self.weights_src}: layer {layer.name!r} ({layer.type}) has {len(blobs)} "
                                 f"weight blobs, expected {' or '.join(map(str, counts))}{what}")
        return blobs

    def bad(self, layer, message: str) -> ModelLoadError:
        return ModelLoadError(f"{self.prototxt}: layer {layer.name!r} ({layer.type}): {message}")


def _axis(b: Builder, layer, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise b.bad(layer, f"axis {axis} out of range for a blob of rank {rank}")
    return axis + rank if axis < 0 else axis


# ---- spatial parameters: every form Caffe accepts ---------------------------------------
def _spatial(p, field: str, default, n: int = 2) -> list:
    """Caffe's kernel_size/pad/stride/dilation: `<prefix>_h` and `<prefix>_w`, else the field
    (repeated: one value for all axes or one per axis; scalar in PoolingParameter), else the default."""
    prefix = field.replace("_size", "")
    h, w = f"{prefix}_h", f"{prefix}_w"
    if h in p.DESCRIPTOR.fields_by_name and (p.HasField(h) or p.HasField(w)):
        return [int(getattr(p, h)), int(getattr(p, w))]
    values = getattr(p, field)
    if isinstance(values, (int, float)):  # PoolingParameter's scalar fields
        return [int(values) if p.HasField(field) else default] * n
    values = [int(v) for v in values]
    if not values:
        return [default] * n
    return values * n if len(values) == 1 else values


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


def eltwise(b: Builder, layer) -> None:
    """Eltwise: PROD -> Mul chain, MAX -> Max, SUM -> Sum of coeff_i * x_i (coefficients 1: plain Sum/Add)."""
    p = layer.proto.eltwise_param
    xs = [b.bottom(layer, i) for i in range(len(layer.bottom))]
    rank = b.rank.get(xs[0])
    if p.operation == 0:
        acc = xs[0]
        for i, x in enumerate(xs[1:], 1):
            last = i == len(xs) - 1
            out = b.top(layer, rank=rank) if last else b.tmp(layer, f"prod{i}", rank)
            b.node(layer, "Mul", [acc, x], [out])
            acc = out
        return
    if p.operation == 2:
        b.node(layer, "Max", xs, [b.top(layer, rank=rank)])
        return
    coeff = list(p.coeff)
    if coeff and len(coeff) != len(xs):
        raise b.bad(layer, f"{len(coeff)} coeff for {len(xs)} bottoms")
    terms = []
    for i, x in enumerate(xs):
        c = coeff[i] if coeff else 1.0
        if c == 1.0:
            terms.append(x)
        else:
            t = b.tmp(layer, f"term{i}", rank)
            b.node(layer, "Mul", [x, b.const(layer, f"coeff{i}", np.float32(c))], [t])
            terms.append(t)
    b.node(layer, "Add" if len(terms) == 2 else "Sum", terms, [b.top(layer, rank=rank)])


def concat(b: Builder, layer) -> None:
    p = layer.proto.concat_param
    xs = [b.bottom(layer, i) for i in range(len(layer.bottom))]
    rank = b.bottom_rank(layer)
    axis = p.axis if p.HasField("axis") or not p.HasField("concat_dim") else p.concat_dim
    b.node(layer, "Concat", xs, [b.top(layer, rank=rank)], axis=_axis(b, layer, axis, rank))


def slice_(b: Builder, layer) -> None:
    """Slice: top i = x[slice_point[i-1]:slice_point[i]] along axis; no points: equal parts (ONNX Split)."""
    p = layer.proto.slice_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    axis = p.axis if p.HasField("axis") or not p.HasField("slice_dim") else p.slice_dim
    axis = _axis(b, layer, axis, rank)
    points = list(p.slice_point)
    tops = len(layer.top)
    if not points:
        b.node(layer, "Split", [x], [b.top(layer, i, rank) for i in range(tops)], axis=axis)
        return
    if len(points) != tops - 1:
        raise b.bad(layer, f"{len(points)} slice_point for {tops} tops (needs tops - 1)")
    bounds = [0] + points + [np.iinfo(np.int64).max]
    for i in range(tops):
        b.node(layer, "Slice", [x, b.const(layer, f"starts{i}", np.array([bounds[i]], np.int64)),
                                b.const(layer, f"ends{i}", np.array([bounds[i + 1]], np.int64)),
                                b.const(layer, f"axes{i}", np.array([axis], np.int64))],
               [b.top(layer, i, rank)])


def split(b: Builder, layer) -> None:
    """Split: every top is the bottom (Identity per top)."""
    x = b.bottom(layer)
    for i in range(len(layer.top)):
        b.node(layer, "Identity", [x], [b.top(layer, i, b.rank.get(x))])


def dropout(b: Builder, layer) -> None:
    """Dropout at TEST time is the identity (Caffe scales at train time)."""
    x = b.bottom(layer)
    b.node(layer, "Identity", [x], [b.top(layer, rank=b.rank.get(x))])


def crop(b: Builder, layer) -> None:
    """Crop: for axes >= axis, x[offset_i : offset_i + ref.shape[i]]; ends from Shape(ref) at reshape time."""
    p = layer.proto.crop_param
    x, ref = b.bottom(layer, 0), b.bottom(layer, 1)
    rank = b.bottom_rank(layer)
    axis = _axis(b, layer, p.axis, rank)
    n = rank - axis
    offsets = list(p.offset)
    if len(offsets) == 0:
        offsets = [0] * n
    elif len(offsets) == 1:
        offsets = offsets * n
    elif len(offsets) != n:
        raise b.bad(layer, f"{len(offsets)} offsets for {n} cropped axes")
    starts = b.const(layer, "starts", np.array(offsets, np.int64))
    shape, dims, ends = b.tmp(layer, "ref_shape", 1), b.tmp(layer, "ref_dims", 1), b.tmp(layer, "ends", 1)
    b.node(layer, "Shape", [ref], [shape])
    b.node(layer, "Slice", [shape, b.const(layer, "from", np.array([axis], np.int64)),
                            b.const(layer, "to", np.array([rank], np.int64))], [dims])
    b.node(layer, "Add", [dims, starts], [ends])
    b.node(layer, "Slice", [x, starts, ends, b.const(layer, "axes", np.arange(axis, rank, dtype=np.int64))],
           [b.top(layer, rank=rank)])


def flatten(b: Builder, layer) -> None:
    """Flatten axes [axis, end_axis] into one: ONNX Flatten when end_axis is the last axis, else Caffe's Reshape."""
    p = layer.proto.flatten_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    axis, end = _axis(b, layer, p.axis, rank), _axis(b, layer, p.end_axis, rank)
    out_rank = rank - (end - axis)
    if end == rank - 1 and axis >= 1 and out_rank == 2:
        b.node(layer, "Flatten", [x], [b.top(layer, rank=2)], axis=axis)
        return
    b.node(layer, "Reshape", [x], [b.top(layer, rank=out_rank)], domain=CAFFE, shape=[-1], axis=axis,
           num_axes=end - axis + 1)


def reshape(b: Builder, layer) -> None:
    """Reshape: ONNX Reshape when it covers the whole shape (axis 0, num_axes -1), else Caffe's own."""
    p = layer.proto.reshape_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    dims = [int(d) for d in p.shape.dim]
    if p.axis == 0 and p.num_axes == -1:
        b.node(layer, "Reshape", [x, b.const(layer, "shape", np.array(dims, np.int64))],
               [b.top(layer, rank=len(dims))])
        return
    axis = p.axis + rank + 1 if p.axis < 0 else p.axis
    num = rank - axis if p.num_axes == -1 else p.num_axes
    b.node(layer, "Reshape", [x], [b.top(layer, rank=rank - num + len(dims))], domain=CAFFE, shape=dims,
           axis=int(p.axis), num_axes=int(p.num_axes))


def softmax(b: Builder, layer) -> None:
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    b.node(layer, "Softmax", [x], [b.top(layer, rank=rank)],
           axis=_axis(b, layer, layer.proto.softmax_param.axis, rank))


def permute(b: Builder, layer) -> None:
    """Permute -> Transpose; axes the order leaves out follow in their own order (SSD's PermuteLayer)."""
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    order = [int(o) for o in layer.proto.permute_param.order]
    if len(set(order)) != len(order) or any(o >= rank for o in order):
        raise b.bad(layer, f"permute order {order} is not a permutation of axes of a rank-{rank} blob")
    order += [a for a in range(rank) if a not in order]
    b.node(layer, "Transpose", [x], [b.top(layer, rank=rank)], perm=order)


def normalize(b: Builder, layer) -> None:
    """Normalize (SSD): L2 normalization over C (per position) or C*H*W, times a learned scale."""
    p = layer.proto.norm_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    (s,) = b.learned(layer, 1)
    b.node(layer, "Normalize", [x, b.const(layer, "scale", s.reshape(-1))], [b.top(layer, rank=rank)],
           domain=CAFFE, across_spatial=int(p.across_spatial), channel_shared=int(p.channel_shared),
           eps=float(p.eps))


def prior_box(b: Builder, layer) -> None:
    """PriorBox (SSD): prior boxes of a feature map (bottom 0) for an image (bottom 1): (1, 2, H*W*P*4)."""
    p = layer.proto.prior_box_param
    feat, img = b.bottom(layer, 0), b.bottom(layer, 1)
    attrs = dict(min_size=[float(v) for v in p.min_size], max_size=[float(v) for v in p.max_size],
                 aspect_ratio=[float(v) for v in p.aspect_ratio], flip=int(p.flip), clip=int(p.clip),
                 variance=[float(v) for v in p.variance], offset=float(p.offset))
    if p.HasField("img_size"):
        attrs["img_h"] = attrs["img_w"] = int(p.img_size)
    elif p.HasField("img_h") or p.HasField("img_w"):
        attrs["img_h"], attrs["img_w"] = int(p.img_h), int(p.img_w)
    if p.HasField("step"):
        attrs["step_h"] = attrs["step_w"] = float(p.step)
    elif p.HasField("step_h") or p.HasField("step_w"):
        attrs["step_h"], attrs["step_w"] = float(p.step_h), float(p.step_w)
    b.node(layer, "PriorBox", [feat, img], [b.top(layer, rank=3)], domain=CAFFE, **attrs)


_CODE_TYPES = {1: "CORNER", 2: "CENTER_SIZE", 3: "CORNER_SIZE"}


def detection_output(b: Builder, layer) -> None:
    """DetectionOutput (SSD): decode, per-class NMS, keep_top_k: (1, 1, N, 7) rows [image, label, score, box]."""
    p = layer.proto.detection_output_param
    ins = [b.bottom(layer, i) for i in range(3)]
    attrs = dict(num_classes=int(p.num_classes), share_location=int(p.share_location),
                 background_label_id=int(p.background_label_id), code_type=_CODE_TYPES[p.code_type],
                 variance_encoded_in_target=int(p.variance_encoded_in_target), keep_top_k=int(p.keep_top_k),
                 confidence_threshold=float(p.confidence_threshold) if p.HasField("confidence_threshold")
                 else -math.inf,
                 nms_threshold=float(p.nms_param.nms_threshold),
                 top_k=int(p.nms_param.top_k) if p.nms_param.HasField("top_k") else -1,
                 eta=float(p.nms_param.eta))
    b.node(layer, "DetectionOutput", ins, [b.top(layer, rank=4)], domain=CAFFE, **attrs)


def argmax(b: Builder, layer) -> None:
    p = layer.proto.argmax_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    attrs = dict(out_max_val=int(p.out_max_val), top_k=int(p.top_k))
    if p.HasField("axis"):
        attrs["axis"] = _axis(b, layer, p.axis, rank)
    b.node(layer, "ArgMax", [x], [b.top(layer, rank=max(rank, 3))], domain=CAFFE, **attrs)


def input_layer(b: Builder, layer) -> None:
    """Input: declares its tops as net inputs (one shape for all, or one per top)."""
    shapes = [tuple(int(d) for d in s.dim) for s in layer.proto.input_param.shape]
    for i, top in enumerate(layer.top):
        shape = shapes[i] if len(shapes) == len(layer.top) else (shapes[0] if shapes else None)
        b.define_input(top, shape)


def silence(b: Builder, layer) -> None:
    """Silence: reads its bottoms and produces nothing (they stop being net outputs)."""
    for i in range(len(layer.bottom)):
        b.bottom(layer, i)


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
