"""The classic image-classification CNNs, built with onnx.helper at their real sizes.

Every model has one float32 input "data" (N, 3, H, W) with a dynamic batch
dimension (dim_param "N" by default) and the output "prob" (N, 1000): the
softmax of the class scores, as Caffe's deploy nets and torchvision's
`softmax(model(x))` give. The scores themselves are the tensor "logits"
(N, 1000); ask for them with ``outputs=("logits",)`` or ``("prob", "logits")``.

Weights are seeded random draws (numpy Generator), not trained values:

* Conv and Gemm weights are He/Kaiming-scaled, std = sqrt(2 / fan_in) with
  fan_in = C_in/group * kH * kW (He et al. 2015, "Delving Deep into
  Rectifiers"), so activations keep their scale through ReLU stacks. The
  draws are uniform with that std (Kaiming-uniform, as torchvision's default
  init), because numpy draws uniforms 2-3x faster than normals. Biases:
  uniform with std 0.02.
* BatchNormalization is in inference form with statistics like a trained
  net's: they follow what the layer's input has, never exactly. With m, v
  the estimated mean and variance of the input: running mean ~ N(m, s^2 v)
  with s ~ U(0.1, 0.5) per layer, running var = v * U(0.5, 2), gamma ~
  U(0.8, 1.2), beta ~ N(0, 0.1^2), epsilon 1e-5. (Fixed statistics such as
  var ~ U(0.5, 2) ignore the input's scale, and the residual stream of
  ResNet-50 then grows to activations in the hundreds and logits near 1000.)
* The last fc ("classifier") is scaled so the logits have an rms of about 3,
  as a trained net's: softmax is then not one-hot, so errors show in "prob".

The estimates come from the moments of each tensor for `sample_input`,
carried layer by layer (`_Net`): conv multiplies the mean square by the He
gain, ReLU and the first max-pool follow the Gaussian formulas, later pools
use a measured factor. Checked with onnxruntime: activations stay within
rms 0.4..4 in ResNet-50 and MobileNetV2 at any depth (30..170 in the Caffe
nets, whose inputs are pixels), and the logits' rms lies between 1.5 and 6.

So a model is the real architecture and size (parameter and MAC counts match
the published figures, see `ZOO` and `flops.py`) without any pretrained file.

Caffe's networks (AlexNet, GoogLeNet) take mean-subtracted pixels in about
[-128, 128]; the torchvision ones take ImageNet-normalized pixels (about
N(0, 1)). `sample_input` draws an input of the right kind: with the Caffe
scale the LRN layers do real work (with unit inputs they are near identity).

Mapping of Caffe semantics onto ONNX:

* LRN: Caffe (ACROSS_CHANNELS) computes x / (k + alpha/n * sum_{n ch} x^2)^beta,
  dividing alpha by local_size n just as ONNX LRN does
  (y = x / (bias + alpha/size * square_sum)^beta), so the prototxt's values
  carry over unchanged: size = local_size = 5, alpha = 1e-4, beta = 0.75,
  bias = k = 1 (Caffe's default; caffe/src/caffe/layers/lrn_layer.cpp).
* Pooling: Caffe rounds the output size up; the Caffe nets use MaxPool with
  ceil_mode=1. In GoogLeNet this matters (112 -> 56 -> 28 -> 14 -> 7; floor
  would give 55); in AlexNet at 227 ceil and floor agree.
* InnerProduct = Flatten + Gemm(transB=1) with W stored (out, in) as Caffe
  and PyTorch store it. Dropout is kept as an inference-mode Dropout node
  with its ratio as an input (opset >= 12), as the deploy nets have it.

input_size: the fully convolutional nets with a global average pool
(GoogLeNet, ResNet-50, MobileNetV2, SqueezeNet 1.1) accept any size whose
every stage stays at least 1x1 (e.g. 64 for fast tests). AlexNet and VGG-16
end in fully-connected layers sized for 6x6x256 and 7x7x512 features: they
accept only sizes that give that same feature map (AlexNet 199..230 with
Caffe's ceil-mode pools, VGG-16 224..255); anything else raises ValueError.
We do not swap in a global pool, since that would change the architecture.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MIN_OPSET = 12  # MaxPool ceil_mode (10), Clip min/max inputs (11), Dropout ratio input (12)
NUM_CLASSES = 1000
OUTPUTS = ("prob", "logits")

# Caffe's BVLC models subtract this per-channel mean (BGR) from 0..255 pixels;
# torchvision normalizes RGB in [0, 1] with the ImageNet mean and std.
CAFFE_MEAN_BGR = (104.0, 117.0, 123.0)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class _T:
    """A tensor under construction: its name, (C, H, W) for one image, and its scale."""

    name: str
    c: int
    h: int = 1
    w: int = 1
    mean: float = 0.0  # estimated moments of one element (see _Net's layers)
    ms: float = 1.0
    pre: tuple[float, float] | None = None  # (mean, var) of the Gaussian before a ReLU


class _Net:
    """Collects nodes and initializers; tracks shapes so every stage is checked.

    With `rng=None` it is a dry run: shapes and nodes only, no weights (used to
    list the input sizes a fixed-size head accepts).
    """

    def __init__(self, rng: np.random.Generator | None, arch: str):
        self.rng = rng
        self.arch = arch
        # Built in place: make_graph / make_model would copy every initializer again.
        self.model = onnx.ModelProto()
        self.graph = self.model.graph
        self._consts: dict[str, str] = {}
        self.pooled = False  # a max-pool seen yet (see maxpool)

    # -- weights ---------------------------------------------------------------------
    def _param(self, name: str, make: Callable[[np.random.Generator], np.ndarray]) -> str:
        if self.rng is not None:
            a = np.asarray(make(self.rng), dtype="<f4")
            t = self.graph.initializer.add()
            t.name, t.data_type = name, TensorProto.FLOAT
            t.dims.extend(a.shape)
            t.raw_data = a.tobytes()  # numpy_helper.from_array is 3x slower on VGG's 138M weights
        return name

    def _uniform(self, name: str, shape, std: float) -> str:
        """Zero-mean uniform weights with standard deviation `std`: U(-sqrt(3) std, sqrt(3) std).

        Uniform rather than normal draws: numpy makes them 2-3x faster, which
        is most of the time VGG-16's 138M parameters take to build.
        """
        def make(rng):
            a = rng.random(shape, dtype=np.float32)
            bound = math.sqrt(3.0) * std
            a *= np.float32(2.0 * bound)
            a -= np.float32(bound)
            return a
        return self._param(name, make)

    def _const(self, name: str, value: float) -> str:
        """A shared scalar constant (Clip bounds, Dropout ratios)."""
        if name not in self._consts:
            if self.rng is not None:
                self.graph.initializer.append(numpy_helper.from_array(np.array(value, np.float32), name))
            self._consts[name] = name
        return name

    def _node(self, op: str, inputs: Sequence[str], output: str, name: str | None = None, **attrs) -> str:
        self.graph.node.append(helper.make_node(op, list(inputs), [output], name=name or output, **attrs))
        return output

    def _size(self, layer: str, size: int, k: int, s: int, p: int, ceil: bool = False) -> int:
        span = size + 2 * p - k
        out = (-(-span // s) if ceil else span // s) + 1
        if ceil and (out - 1) * s >= size + p:  # the last window must start inside the input
            out -= 1
        if span < 0 or out < 1:
            raise ValueError(f"{self.arch}: layer {layer!r} gets a {size}-pixel side, too small for "
                             f"kernel {k} stride {s} pad {p}; use a larger input_size")
        return out

    # -- layers ----------------------------------------------------------------------
    # Each layer also carries forward the moments of its output's elements for
    # `sample_input` (mean, mean square, and for a ReLU output the Gaussian
    # before it): conv/fc multiply the mean square by the He gain, ReLU and
    # max-pool follow the Gaussian formulas, BN brings it to about 1. The moments
    # set the BatchNormalization statistics and the classifier's scale; they
    # are estimates (they ignore spatial correlation), good to a factor of ~2.

    def conv(self, x: _T, name: str, out_ch: int, k: int, stride: int = 1, pad: int = 0, group: int = 1,
             bias: bool = True) -> _T:
        """Conv with He-scaled weights (gain 2), optional bias; square kernel, stride and pads."""
        gain = 2.0
        if x.c % group or out_ch % group:
            raise ValueError(f"{self.arch}: {name}: channels {x.c}->{out_ch} not divisible by group {group}")
        fan_in = x.c // group * k * k
        inputs = [x.name, self._uniform(f"{name}.weight", (out_ch, x.c // group, k, k), math.sqrt(gain / fan_in))]
        if bias:
            inputs.append(self._uniform(f"{name}.bias", (out_ch,), 0.02))
        attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
        if group != 1:
            attrs["group"] = group
        h = self._size(name, x.h, k, stride, pad)
        w = self._size(name, x.w, k, stride, pad)
        return _T(self._node("Conv", inputs, name, **attrs), out_ch, h, w, 0.0, gain * x.ms)

    def bn(self, x: _T, name: str) -> _T:
        """Inference-form BatchNormalization with trained-looking statistics.

        A trained net's running statistics follow what its input really has,
        never exactly. With m, v the estimated mean and variance of the input:
        running mean ~ N(m, (s sqrt(v))^2) with s ~ U(0.1, 0.5) per layer,
        running var = v * U(0.5, 2), gamma ~ U(0.8, 1.2), beta ~ N(0, 0.1^2).
        So the output has a mean square of about 1 at any depth, as in a
        trained net, and the statistics are neither 0/1 nor exactly right.
        """
        c, m, v = x.c, x.mean, max(x.ms - x.mean ** 2, 1e-6)
        mean_std = None if self.rng is None else float(self.rng.uniform(0.1, 0.5)) * math.sqrt(v)
        inputs = [x.name,
                  self._param(f"{name}.weight", lambda r: r.uniform(0.8, 1.2, c)),
                  self._param(f"{name}.bias", lambda r: r.normal(0.0, 0.1, c)),
                  self._param(f"{name}.running_mean", lambda r: r.normal(m, mean_std, c)),
                  self._param(f"{name}.running_var", lambda r: v * r.uniform(0.5, 2.0, c))]
        return _T(self._node("BatchNormalization", inputs, name, epsilon=1e-5), c, x.h, x.w, 0.0, 1.0)

    def _relu_of(self, x: _T, output: str, mu: float, var: float) -> _T:
        m1, m2 = _relu_moments(mu, var)
        return replace(x, name=output, mean=m1, ms=m2, pre=(mu, var))

    def relu(self, x: _T, name: str) -> _T:
        return self._relu_of(x, self._node("Relu", [x.name], name), x.mean, x.ms - x.mean ** 2)

    def relu6(self, x: _T, name: str) -> _T:
        """ReLU6 as Clip(x, 0, 6) with min/max inputs (Clip-11 and later); moments as ReLU's."""
        lo, hi = self._const("relu6.min", 0.0), self._const("relu6.max", 6.0)
        return self._relu_of(x, self._node("Clip", [x.name, lo, hi], name), x.mean, x.ms - x.mean ** 2)

    def lrn(self, x: _T, name: str, size: int = 5, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> _T:
        """Caffe LRN (ACROSS_CHANNELS): the same alpha/size scaling as ONNX LRN."""
        f = (k + alpha * x.ms) ** -beta  # alpha/size * (size * ms): the typical divisor
        return replace(x, name=self._node("LRN", [x.name], name, size=size, alpha=alpha, beta=beta, bias=k),
                       mean=x.mean * f, ms=x.ms * f * f, pre=None)

    def maxpool(self, x: _T, name: str, k: int, stride: int, pad: int = 0, ceil: bool = False) -> _T:
        attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
        if ceil:
            attrs["ceil_mode"] = 1
        h = self._size(name, x.h, k, stride, pad, ceil)
        w = self._size(name, x.w, k, stride, pad, ceil)
        out = _T(self._node("MaxPool", [x.name], name, **attrs), x.c, h, w, x.mean, x.ms, x.pre)
        first, self.pooled = not self.pooled, True
        if first and x.pre is not None:  # after conv1 + ReLU: relu(max of k*k independent Gaussians)
            e1, e2 = _max_moments(k * k)
            mu, var = x.pre
            return self._relu_of(out, out.name, mu + math.sqrt(var) * e1, var * (e2 - e1 * e1))
        # Deeper features are smooth in space, so window maxima are only a
        # little larger than the values (measured 1.2-1.7x in mean square); the
        # first pool after LRN (AlexNet) measured 4.4x.
        return replace(out, mean=x.mean * (2.0 if first else 1.2), ms=x.ms * (4.5 if first else 1.5), pre=None)

    def global_avgpool(self, x: _T, name: str) -> _T:
        # The average over positions keeps each channel's mean; channels differ
        # (BN offsets, biases), which the variance term below stands for.
        ms = x.mean ** 2 + 0.1 * (x.ms - x.mean ** 2)
        return _T(self._node("GlobalAveragePool", [x.name], name), x.c, 1, 1, x.mean, ms)

    def concat(self, xs: Sequence[_T], name: str) -> _T:
        c = sum(x.c for x in xs)
        mean = sum(x.c * x.mean for x in xs) / c
        ms = sum(x.c * x.ms for x in xs) / c
        return _T(self._node("Concat", [x.name for x in xs], name, axis=1), c, xs[0].h, xs[0].w, mean, ms)

    def add(self, a: _T, b: _T, name: str) -> _T:
        return replace(a, name=self._node("Add", [a.name, b.name], name), mean=a.mean + b.mean,
                       ms=a.ms + b.ms + 2 * a.mean * b.mean, pre=None)

    def dropout(self, x: _T, name: str, ratio: float) -> _T:
        r = self._const(f"dropout.ratio_{ratio:g}", ratio)
        return replace(x, name=self._node("Dropout", [x.name, r], name))

    def flatten(self, x: _T, name: str, expect_hw: tuple[int, int] | None = None,
                accepted: Callable[[], str] | None = None) -> _T:
        """Flatten(axis=1); with `expect_hw`, the feature map a fixed-size fc head needs."""
        if expect_hw is not None and (x.h, x.w) != expect_hw:
            if self.rng is None:  # a dry run only asks whether the size fits
                raise ValueError("dry run")
            raise ValueError(
                f"{self.arch}: the input gives a {x.h}x{x.w}x{x.c} feature map where the fully-connected "
                f"head needs {expect_hw[0]}x{expect_hw[1]}x{x.c}; accepted input sizes: "
                f"{accepted() if accepted else '?'}")
        return _T(self._node("Flatten", [x.name], name, axis=1), x.c * x.h * x.w, 1, 1, x.mean, x.ms, x.pre)

    def fc(self, x: _T, name: str, out_features: int) -> _T:
        """Caffe InnerProduct / torch Linear as Gemm(transB=1), He-scaled (gain 2: a ReLU follows)."""
        gain = 2.0
        inputs = [x.name, self._uniform(f"{name}.weight", (out_features, x.c), math.sqrt(gain / x.c)),
                  self._uniform(f"{name}.bias", (out_features,), 0.02)]
        return _T(self._node("Gemm", inputs, name, transB=1), out_features, 1, 1, 0.0, gain * x.ms)

    def classifier(self, x: _T, name: str, logits_rms: float = 3.0) -> _T:
        """The last fc, scaled so the logits have an rms of about `logits_rms`, as a trained net's.

        Softmax of much larger logits would be one-hot and hide errors in them.
        """
        gain = logits_rms ** 2 / x.ms
        inputs = [x.name, self._uniform(f"{name}.weight", (NUM_CLASSES, x.c), math.sqrt(gain / x.c)),
                  self._uniform(f"{name}.bias", (NUM_CLASSES,), 0.02)]
        return _T(self._node("Gemm", inputs, "logits", name=name, transB=1), NUM_CLASSES, 1, 1, 0.0,
                  logits_rms ** 2)


def _relu_moments(mu: float, var: float) -> tuple[float, float]:
    """E[relu(g)], E[relu(g)^2] for g ~ N(mu, var)."""
    sd = math.sqrt(max(var, 1e-12))
    a = mu / sd
    cdf = 0.5 * (1.0 + math.erf(a / math.sqrt(2.0)))
    pdf = math.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
    return mu * cdf + sd * pdf, (mu * mu + var) * cdf + mu * sd * pdf


@functools.lru_cache(maxsize=None)
def _max_moments(n: int) -> tuple[float, float]:
    """E[M], E[M^2] of M = the max of n independent N(0, 1) (numerical integration)."""
    x = np.linspace(-10.0, 10.0, 20001)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    density = n * phi * cdf ** (n - 1)
    dx = x[1] - x[0]
    return float(np.sum(x * density) * dx), float(np.sum(x * x * density) * dx)


# ---- the architectures -------------------------------------------------------------------


def _alexnet(net: _Net, x: _T) -> _T:
    """bvlc_alexnet deploy.prototxt: relu -> LRN -> pool; group 2 in conv2, conv4, conv5."""
    x = net.lrn(net.relu(net.conv(x, "conv1", 96, 11, stride=4), "relu1"), "norm1")
    x = net.maxpool(x, "pool1", 3, 2, ceil=True)
    x = net.lrn(net.relu(net.conv(x, "conv2", 256, 5, pad=2, group=2), "relu2"), "norm2")
    x = net.maxpool(x, "pool2", 3, 2, ceil=True)
    x = net.relu(net.conv(x, "conv3", 384, 3, pad=1), "relu3")
    x = net.relu(net.conv(x, "conv4", 384, 3, pad=1, group=2), "relu4")
    x = net.relu(net.conv(x, "conv5", 256, 3, pad=1, group=2), "relu5")
    x = net.maxpool(x, "pool5", 3, 2, ceil=True)
    x = net.flatten(x, "pool5.flatten", (6, 6), _accepted_sizes(_alexnet, 227))
    x = net.dropout(net.relu(net.fc(x, "fc6", 4096), "relu6"), "drop6", 0.5)
    x = net.dropout(net.relu(net.fc(x, "fc7", 4096), "relu7"), "drop7", 0.5)
    return net.classifier(x, "fc8")


# (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj): the paper's Table 1
_INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128), "5a": (256, 160, 320, 32, 128, 128),
    "5b": (384, 192, 384, 48, 128, 128),
}


def _inception(net: _Net, x: _T, tag: str) -> _T:
    n1, r3, n3, r5, n5, pp = _INCEPTION[tag]
    p = f"inception_{tag}/"

    def cr(t, name, c, k, pad=0):
        return net.relu(net.conv(t, p + name, c, k, pad=pad), p + "relu_" + name)

    b1 = cr(x, "1x1", n1, 1)
    b2 = cr(cr(x, "3x3_reduce", r3, 1), "3x3", n3, 3, pad=1)
    b3 = cr(cr(x, "5x5_reduce", r5, 1), "5x5", n5, 5, pad=2)
    b4 = cr(net.maxpool(x, p + "pool", 3, 1, pad=1, ceil=True), "pool_proj", pp, 1)
    return net.concat([b1, b2, b3, b4], p + "output")


def _googlenet(net: _Net, x: _T) -> _T:
    """bvlc_googlenet deploy.prototxt (no auxiliary heads); pool5 7x7 average = global average at 224."""
    x = net.relu(net.conv(x, "conv1/7x7_s2", 64, 7, stride=2, pad=3), "conv1/relu_7x7")
    x = net.lrn(net.maxpool(x, "pool1/3x3_s2", 3, 2, ceil=True), "pool1/norm1")
    x = net.relu(net.conv(x, "conv2/3x3_reduce", 64, 1), "conv2/relu_3x3_reduce")
    x = net.lrn(net.relu(net.conv(x, "conv2/3x3", 192, 3, pad=1), "conv2/relu_3x3"), "conv2/norm2")
    x = net.maxpool(x, "pool2/3x3_s2", 3, 2, ceil=True)
    for tag in ("3a", "3b"):
        x = _inception(net, x, tag)
    x = net.maxpool(x, "pool3/3x3_s2", 3, 2, ceil=True)
    for tag in ("4a", "4b", "4c", "4d", "4e"):
        x = _inception(net, x, tag)
    x = net.maxpool(x, "pool4/3x3_s2", 3, 2, ceil=True)
    for tag in ("5a", "5b"):
        x = _inception(net, x, tag)
    x = net.dropout(net.global_avgpool(x, "pool5/7x7_s1"), "pool5/drop_7x7_s1", 0.4)
    x = net.flatten(x, "pool5/flatten")
    return net.classifier(x, "loss3/classifier")


def _bottleneck(net: _Net, x: _T, name: str, planes: int, stride: int) -> _T:
    """torchvision Bottleneck (v1.5): the stride sits in the 3x3 conv."""
    out_ch = planes * 4
    y = net.relu(net.bn(net.conv(x, f"{name}.conv1", planes, 1, bias=False), f"{name}.bn1"), f"{name}.relu1")
    y = net.relu(net.bn(net.conv(y, f"{name}.conv2", planes, 3, stride=stride, pad=1, bias=False),
                        f"{name}.bn2"), f"{name}.relu2")
    y = net.bn(net.conv(y, f"{name}.conv3", out_ch, 1, bias=False), f"{name}.bn3")
    if stride != 1 or x.c != out_ch:
        x = net.bn(net.conv(x, f"{name}.downsample.0", out_ch, 1, stride=stride, bias=False),
                   f"{name}.downsample.1")
    return net.relu(net.add(y, x, f"{name}.add"), f"{name}.relu")


def _resnet50(net: _Net, x: _T) -> _T:
    x = net.relu(net.bn(net.conv(x, "conv1", 64, 7, stride=2, pad=3, bias=False), "bn1"), "relu")
    x = net.maxpool(x, "maxpool", 3, 2, pad=1)
    for layer, (planes, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)], 1):
        for b in range(blocks):
            x = _bottleneck(net, x, f"layer{layer}.{b}", planes, stride if b == 0 else 1)
    x = net.flatten(net.global_avgpool(x, "avgpool"), "flatten")
    return net.classifier(x, "fc")


# (expansion t, channels c, repeats n, first stride s): the paper's Table 2
_MBV2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def _mobilenet_v2(net: _Net, x: _T) -> _T:
    def cbr(t, name, c, k, stride=1, group=1, act=True):
        t = net.bn(net.conv(t, f"{name}.0", c, k, stride=stride, pad=k // 2, group=group, bias=False), f"{name}.1")
        return net.relu6(t, f"{name}.2") if act else t

    x = cbr(x, "features.0", 32, 3, stride=2)
    i = 1
    for t, c, n, s in _MBV2:
        for r in range(n):
            name, stride, inp = f"features.{i}", (s if r == 0 else 1), x
            hidden = inp.c * t
            y = inp if t == 1 else cbr(inp, f"{name}.expand", hidden, 1)
            y = cbr(y, f"{name}.dw", hidden, 3, stride=stride, group=hidden)
            y = cbr(y, f"{name}.project", c, 1, act=False)  # linear bottleneck: no activation
            x = net.add(y, inp, f"{name}.add") if stride == 1 and inp.c == c else y
            i += 1
    x = cbr(x, f"features.{i}", 1280, 1)
    x = net.flatten(net.dropout(net.global_avgpool(x, "avgpool"), "classifier.0", 0.2), "flatten")
    return net.classifier(x, "classifier.1")


def _fire(net: _Net, x: _T, name: str, squeeze: int, expand: int) -> _T:
    s = net.relu(net.conv(x, f"{name}.squeeze", squeeze, 1), f"{name}.squeeze_activation")
    e1 = net.relu(net.conv(s, f"{name}.expand1x1", expand, 1), f"{name}.expand1x1_activation")
    e3 = net.relu(net.conv(s, f"{name}.expand3x3", expand, 3, pad=1), f"{name}.expand3x3_activation")
    return net.concat([e1, e3], f"{name}.concat")


def _squeezenet1_1(net: _Net, x: _T) -> _T:
    x = net.relu(net.conv(x, "features.0", 64, 3, stride=2), "features.1")
    x = net.maxpool(x, "features.2", 3, 2, ceil=True)
    x = _fire(net, _fire(net, x, "features.3", 16, 64), "features.4", 16, 64)
    x = net.maxpool(x, "features.5", 3, 2, ceil=True)
    x = _fire(net, _fire(net, x, "features.6", 32, 128), "features.7", 32, 128)
    x = net.maxpool(x, "features.8", 3, 2, ceil=True)
    for i, (sq, ex) in enumerate([(48, 192), (48, 192), (64, 256), (64, 256)], 9):
        x = _fire(net, x, f"features.{i}", sq, ex)
    x = net.dropout(x, "classifier.0", 0.5)
    x = net.relu(net.conv(x, "classifier.1", NUM_CLASSES, 1), "classifier.2")
    return net.flatten(net.global_avgpool(x, "classifier.3"), "logits")


_VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def _vgg16(net: _Net, x: _T) -> _T:
    """Configuration D; torchvision's AdaptiveAvgPool2d((7, 7)) is the identity at 224 and is left out."""
    i = 0
    for v in _VGG16:
        if v == "M":
            x = net.maxpool(x, f"features.{i}", 2, 2)
            i += 1
        else:
            x = net.relu(net.conv(x, f"features.{i}", v, 3, pad=1), f"features.{i + 1}")
            i += 2
    x = net.flatten(x, "flatten", (7, 7), _accepted_sizes(_vgg16, 224))
    x = net.dropout(net.relu(net.fc(x, "classifier.0", 4096), "classifier.1"), "classifier.2", 0.5)
    x = net.dropout(net.relu(net.fc(x, "classifier.3", 4096), "classifier.4"), "classifier.5", 0.5)
    return net.classifier(x, "classifier.6")


def _accepted_sizes(body: Callable[[_Net, _T], _T], reference: int) -> Callable[[], str]:
    """A function listing the square input sides `body` accepts, found by dry runs (no weights)."""

    def text() -> str:
        ok = []
        for side in range(reference // 2, 2 * reference):
            try:
                body(_Net(None, "dry"), _T("data", 3, side, side))
                ok.append(side)
            except ValueError:
                pass
        runs: list[list[int]] = []
        for side in ok:
            if runs and runs[-1][1] == side - 1:
                runs[-1][1] = side
            else:
                runs.append([side, side])
        listed = ", ".join(f"{a}..{b}" if a != b else f"{a}" for a, b in runs) or "none"
        return f"{listed} per side (the reference is {reference})"

    return text


# ---- building ----------------------------------------------------------------------------


def _input_mean_square(caffe_input: bool) -> float:
    """E[x^2] of `sample_input`'s pixels: uniform 0..1 (times 255 for Caffe) minus mean, over std."""
    if caffe_input:
        return float(np.mean([255.0 ** 2 / 12 + (127.5 - m) ** 2 for m in CAFFE_MEAN_BGR]))
    return float(np.mean([(1 / 12 + (0.5 - m) ** 2) / s ** 2 for m, s in zip(IMAGENET_MEAN, IMAGENET_STD)]))


def _hw(input_size, default: int) -> tuple[int, int]:
    """input_size (None, an int side, or (H, W)) -> (H, W)."""
    if input_size is None:
        return default, default
    if isinstance(input_size, (int, np.integer)):
        return int(input_size), int(input_size)
    h, w = (int(v) for v in input_size)
    return h, w


def _build(arch: str, body: Callable[[_Net, _T], _T], default_hw: int, doc: str, *, batch, seed, opset,
           input_size, outputs) -> onnx.ModelProto:
    opset = int(opset)
    latest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= latest:
        raise ValueError(f"{arch}: opset {opset} is outside {MIN_OPSET}..{latest} (MaxPool ceil_mode, "
                         f"Clip min/max inputs and Dropout's ratio input need opset {MIN_OPSET})")
    outputs = tuple(outputs)
    if not outputs or len(set(outputs)) != len(outputs) or not set(outputs) <= set(OUTPUTS):
        raise ValueError(f"{arch}: outputs must be a non-empty subset of {OUTPUTS}, got {outputs}")
    h, w = _hw(input_size, default_hw)
    if isinstance(batch, str) and batch:
        batch_dim: str | int = batch
    elif int(batch) >= 1:
        batch_dim = int(batch)
    else:
        raise ValueError(f"{arch}: batch must be a dim_param name or an int >= 1, got {batch!r}")

    net = _Net(np.random.default_rng(seed), arch)
    logits = body(net, _T("data", 3, h, w, 0.0, _input_mean_square(ZOO[arch].caffe_input)))
    assert logits.name == "logits" and logits.c == NUM_CLASSES, logits
    if "prob" in outputs:
        net._node("Softmax", ["logits"], "prob", axis=1)
    model, graph = net.model, net.graph
    graph.name, graph.doc_string = arch, doc
    graph.input.append(helper.make_tensor_value_info("data", TensorProto.FLOAT, [batch_dim, 3, h, w]))
    graph.output.extend(helper.make_tensor_value_info(o, TensorProto.FLOAT, [batch_dim, NUM_CLASSES])
                        for o in outputs)
    opsets = [helper.make_opsetid("", opset)]
    model.opset_import.extend(opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets)
    model.producer_name, model.doc_string = "pooled_predictor.zoo", doc
    entry = ZOO.get(arch)
    props = {"architecture": arch, "weights": f"random, He-scaled, numpy default_rng(seed={seed})"}
    if entry is not None:
        props["paper"] = entry.paper
    helper.set_model_props(model, props)
    return model


def alexnet(*, batch="N", seed=0, opset=17, input_size=None, outputs=("prob",)) -> onnx.ModelProto:
    """AlexNet as BVLC trained it in Caffe (models/bvlc_alexnet/deploy.prototxt).

    Krizhevsky, Sutskever & Hinton 2012, "ImageNet Classification with Deep
    Convolutional Neural Networks" (NIPS). 227x227 input; conv1 96 11x11/4;
    LRN (size 5, alpha 1e-4, beta 0.75) after relu1 and relu2; the paper's
    two-GPU split kept as group=2 in conv2, conv4 and conv5; fc6/fc7 4096 with
    Dropout 0.5 (inference); fc8 1000; softmax. 60,965,224 parameters.

    Args: see `build`. Returns: onnx.ModelProto. Raises: ValueError (input size, opset).
    """
    return _build("alexnet", _alexnet, 227, ZOO["alexnet"].paper + "; BVLC bvlc_alexnet deploy.prototxt",
                  batch=batch, seed=seed, opset=opset, input_size=input_size, outputs=outputs)


def googlenet(*, batch="N", seed=0, opset=17, input_size=None, outputs=("prob",)) -> onnx.ModelProto:
    """GoogLeNet (Inception v1) as BVLC trained it in Caffe (models/bvlc_googlenet), without auxiliary heads.

    Szegedy et al. 2015, "Going Deeper with Convolutions" (CVPR). 224x224
    input; LRN after pool1 and conv2; ceil-mode max pools (112, 56, 28, 14, 7);
    nine inception modules with the paper's Table 1 widths; 5x5 branches (not
    torchvision's 3x3); pool5 7x7 average (written as GlobalAveragePool, the
    same at 224, so smaller inputs work), Dropout 0.4, loss3/classifier 1000.
    6,998,552 parameters.

    Args: see `build`. Returns: onnx.ModelProto. Raises: ValueError (input size, opset).
    """
    return _build("googlenet", _googlenet, 224,
                  ZOO["googlenet"].paper + "; BVLC bvlc_googlenet deploy.prototxt",
                  batch=batch, seed=seed, opset=opset, input_size=input_size, outputs=outputs)


def resnet50(*, batch="N", seed=0, opset=17, input_size=None, outputs=("prob",)) -> onnx.ModelProto:
    """ResNet-50 v1.5 as torchvision builds it (stride 2 in the bottleneck's 3x3 conv).

    He, Zhang, Ren & Sun 2016, "Deep Residual Learning for Image Recognition"
    (CVPR). 224x224 input; bottlenecks [3, 4, 6, 3]; BatchNormalization after
    every conv (inference form, trained-looking statistics); projection
    shortcuts where the shape changes; global average pool; fc 1000.
    25,557,032 parameters (torchvision).

    Args: see `build`. Returns: onnx.ModelProto. Raises: ValueError (input size, opset).
    """
    return _build("resnet50", _resnet50, 224, ZOO["resnet50"].paper + "; torchvision resnet50 (v1.5)",
                  batch=batch, seed=seed, opset=opset, input_size=input_size, outputs=outputs)


def mobilenet_v2(*, batch="N", seed=0, opset=17, input_size=None, outputs=("prob",)) -> onnx.ModelProto:
    """MobileNetV2, width 1.0, as torchvision builds it.

    Sandler, Howard, Zhu, Zhmoginov & Chen 2018, "MobileNetV2: Inverted
    Residuals and Linear Bottlenecks" (CVPR). 224x224 input; ReLU6 as
    Clip(0, 6); depthwise 3x3 convs (group = channels); inverted residuals
    with the paper's Table 2 settings and no activation after the projection;
    1x1 conv to 1280; global average pool; Dropout 0.2; fc 1000.
    3,504,872 parameters (torchvision).

    Args: see `build`. Returns: onnx.ModelProto. Raises: ValueError (input size, opset).
    """
    return _build("mobilenet_v2", _mobilenet_v2, 224,
                  ZOO["mobilenet_v2"].paper + "; torchvision mobilenet_v2",
                  batch=batch, seed=seed, opset=opset, input_size=input_size, outputs=outputs)


def squeezenet1_1(*, batch="N", seed=0, opset=17, input_size=None, outputs=("prob",)) -> onnx.ModelProto:
    """SqueezeNet 1.1 as torchvision builds it (the SqueezeNet v1.1 release).

    Iandola, Han, Moskewicz, Ashraf, Dally & Keutzer 2016, "SqueezeNet:
    AlexNet-level accuracy with 50x fewer parameters and <0.5MB model size"
    (arXiv:1602.07360). 224x224 input; conv1 64 3x3/2; ceil-mode max pools;
    eight fire modules; Dropout 0.5; conv10 1x1 1000 + ReLU; global average
    pool. 1,235,496 parameters (torchvision).

    Args: see `build`. Returns: onnx.ModelProto. Raises: ValueError (input size, opset).
    """
    return _build("squeezenet1_1", _squeezenet1_1, 224,
                  ZOO["squeezenet1_1"].paper + "; torchvision squeezenet1_1",
                  batch=batch, seed=seed, opset=opset, input_size=input_size, outputs=outputs)


def vgg16(*, batch="N", seed=0, opset=17, input_size=None, outputs=("prob",)) -> onnx.ModelProto:
    """VGG-16 (configuration D) as torchvision builds it.

    Simonyan & Zisserman 2015, "Very Deep Convolutional Networks for
    Large-Scale Image Recognition" (ICLR). 224x224 input; 13 3x3 convs in five
    blocks with 2x2 max pools; fc 4096, 4096 with Dropout 0.5; fc 1000.
    138,357,544 parameters.

    Args: see `build`. Returns: onnx.ModelProto. Raises: ValueError (input size, opset).
    """
    return _build("vgg16", _vgg16, 224, ZOO["vgg16"].paper + "; torchvision vgg16",
                  batch=batch, seed=seed, opset=opset, input_size=input_size, outputs=outputs)


# ---- the catalogue -----------------------------------------------------------------------


@dataclass(frozen=True)
class ZooModel:
    """One architecture and the figures published for it.

    Attributes:
        name: the key in `ZOO` (torchvision's spelling).
        builder: the function that builds it (keywords as `build`).
        paper: the paper it follows (authors, year, title, venue).
        input_shape: default (C, H, W) of one image.
        caffe_input: True when it takes mean-subtracted 0..255 pixels (Caffe),
            False for ImageNet-normalized pixels (torchvision).
        params: published parameter count, and params_source where it is printed;
            ours equals it exactly (same architecture, same convention).
        macs: published multiply-accumulates per image at input_shape, and
            macs_source; macs_rtol the tolerance, with the reason in macs_note.
        test_size: the smallest input side the tests use: 64 where a global
            average pool lets every stage shrink (still >= 2x2 at the end),
            the full size where a fully-connected head fixes it.
    """

    name: str
    builder: Callable[..., onnx.ModelProto]
    paper: str
    input_shape: tuple[int, int, int]
    caffe_input: bool
    params: int
    params_source: str
    macs: float
    macs_source: str
    macs_rtol: float
    macs_note: str
    test_size: int


_TV = ("torchvision {}.IMAGENET1K_V1 meta (num_params; _ops, which torchvision's docs label GFLOPS "
       "but counts multiply-adds)")

ZOO: dict[str, ZooModel] = {
    "alexnet": ZooModel(
        "alexnet", alexnet,
        'Krizhevsky, Sutskever & Hinton 2012, '
        '"ImageNet Classification with Deep Convolutional Neural Networks", NIPS',
        (3, 227, 227), True,
        60_965_224, "HewlettPackard/dlcookbook-dlbs models table (bvlc_alexnet); the paper says '60 million'",
        727e6, "albanie/convnet-burden README: alexnet 227x227, 727 MFLOPS (fused multiply-adds counted once)",
        0.01,
        "we count 724.4M: conv 665.8M + fc 58.6M", 227),
    "googlenet": ZooModel(
        "googlenet", googlenet,
        'Szegedy et al. 2015, "Going Deeper with Convolutions", CVPR',
        (3, 224, 224), True,
        6_998_552, "chaosmail/caffejs README (bvlc_googlenet deploy.prototxt) and HewlettPackard/dlcookbook-dlbs",
        1.5e9, "the paper, Sec. 1: 'a computational budget of 1.5 billion multiply-adds at inference time' "
               "(Table 1's ops column sums to 1.50G)", 0.07,
        "Table 1 lists conv1 with 2.7K parameters and 34M ops, but its 7x7x3x64 weights are 9.4K and cost "
        "118M over 112x112 outputs; with that row corrected the table sums to 1.586G, and we count 1.583G", 64),
    "resnet50": ZooModel(
        "resnet50", resnet50,
        'He, Zhang, Ren & Sun 2016, "Deep Residual Learning for Image Recognition", CVPR',
        (3, 224, 224), False,
        25_557_032, _TV.format("ResNet50_Weights"),
        4.089e9, _TV.format("ResNet50_Weights") + "; the paper's 3.8e9 is v1 (stride in the 1x1 conv)", 0.01,
        "conv + fc only, BN not counted", 64),
    "mobilenet_v2": ZooModel(
        "mobilenet_v2", mobilenet_v2,
        'Sandler, Howard, Zhu, Zhmoginov & Chen 2018, '
        '"MobileNetV2: Inverted Residuals and Linear Bottlenecks", CVPR',
        (3, 224, 224), False,
        3_504_872, _TV.format("MobileNet_V2_Weights") + "; the paper's Table 4: 3.4M, 300M MAdds",
        0.301e9, _TV.format("MobileNet_V2_Weights"), 0.02,
        "conv + fc only, BN and ReLU6 not counted", 64),
    "squeezenet1_1": ZooModel(
        "squeezenet1_1", squeezenet1_1,
        'Iandola, Han, Moskewicz, Ashraf, Dally & Keutzer 2016, "SqueezeNet: AlexNet-level accuracy with 50x fewer '
        'parameters and <0.5MB model size", arXiv:1602.07360',
        (3, 224, 224), False,
        1_235_496, _TV.format("SqueezeNet1_1_Weights"),
        0.349e9, _TV.format("SqueezeNet1_1_Weights"), 0.02,
        "conv only", 64),
    "vgg16": ZooModel(
        "vgg16", vgg16,
        'Simonyan & Zisserman 2015, "Very Deep Convolutional Networks for Large-Scale Image Recognition", ICLR',
        (3, 224, 224), False,
        138_357_544, _TV.format("VGG16_Weights"),
        15.47e9, _TV.format("VGG16_Weights"), 0.01,
        "conv + fc only", 224),
}


def names() -> list[str]:
    """The zoo's architecture names, in `ZOO` order."""
    return list(ZOO)


def build(name: str, *, batch="N", seed: int = 0, opset: int = 17, input_size=None,
          outputs: Sequence[str] = ("prob",)) -> onnx.ModelProto:
    """Build a zoo architecture with seeded random weights.

    Args:
        name: one of `names()`.
        batch: dim_param name of the batch dimension ("N"), or a fixed int.
        seed: seed of the numpy Generator drawing the weights (same seed, same bytes).
        opset: default-domain opset, 12 .. onnx.defs.onnx_opset_version().
        input_size: spatial side (int) or (H, W); None: the architecture's
            default (227 for AlexNet, 224 for the others). See the module
            docstring for what each architecture accepts.
        outputs: which of "prob" (softmax) and "logits" the graph outputs, in order.
    Returns:
        onnx.ModelProto, float32, input "data" (batch, 3, H, W), outputs (batch, 1000).
    Raises:
        KeyError: unknown name (the message lists the zoo).
        ValueError: an input size the architecture cannot take, a bad opset, batch or outputs.
    """
    try:
        entry = ZOO[name]
    except KeyError:
        raise KeyError(f"no zoo model {name!r}; the zoo has {names()}") from None
    return entry.builder(batch=batch, seed=seed, opset=opset, input_size=input_size, outputs=outputs)


def sample_input(name: str, batch: int = 1, *, seed: int = 0, input_size=None) -> np.ndarray:
    """A random image batch of the kind the architecture was trained on.

    Caffe models (AlexNet, GoogLeNet): uniform 0..255 pixels minus the BVLC
    BGR mean. torchvision models: uniform [0, 1) pixels normalized with the
    ImageNet mean and std.

    Returns:
        float32 array (batch, 3, H, W).
    """
    entry = ZOO[name]
    h, w = _hw(input_size, entry.input_shape[1])
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, (batch, 3, h, w)).astype(np.float32)
    if entry.caffe_input:
        x *= 255.0
        x -= np.asarray(CAFFE_MEAN_BGR, np.float32)[:, None, None]
    else:
        x -= np.asarray(IMAGENET_MEAN, np.float32)[:, None, None]
        x /= np.asarray(IMAGENET_STD, np.float32)[:, None, None]
    return x
