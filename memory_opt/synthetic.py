"""Step lists of CNNs for tests and benchmarks: classic nets and random DAGs.

Sizes are activation bytes, ``batch * C * H * W * 4`` (float32). Element-wise
ops (BatchNormalization, Relu, Add) declare `Step.inplace` on their first
input, as the Net's kernels do; `analyze` decides whether it applies.

* `alexnet`, `googlenet`, `resnet50`, `resnet152`: the published layer shapes
  (CaffeNet, Inception v1, ResNet v1.5 with BatchNormalization unfused).
* `random_network`: a random layered CNN (VGG-like stages, residual blocks with
  skips, Inception blocks with branches and a concat, DenseNet-like concats of
  earlier features, multi-output splits, auxiliary outputs), optionally run in
  a random topological order.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .liveness import Step


class Network(NamedTuple):
    """A program to plan; ``analyze(*network)`` accepts it as is."""

    steps: tuple[Step, ...]
    sizes: dict[str, int]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


class _Builder:
    """Appends steps; a tensor is (name, (C, H, W))."""

    def __init__(self, batch: int = 1, rng: np.random.Generator | None = None,
                 inplace_probability: float = 1.0):
        self.batch, self.rng, self.p_inplace = batch, rng, inplace_probability
        self.steps: list[Step] = []
        self.sizes: dict[str, int] = {}
        self.inputs: list[str] = []
        self.outputs: list[str] = []

    def _value(self, kind: str, shape: tuple[int, int, int]) -> tuple[str, tuple]:
        name = f"{kind}_{len(self.sizes)}"
        self.sizes[name] = self.batch * int(np.prod(shape)) * 4
        return name, shape

    def input(self, shape):
        x = self._value("input", shape)
        self.inputs.append(x[0])
        return x

    def op(self, kind, reads, shape, elementwise=False):
        out = self._value(kind, shape)
        inplace = None
        if elementwise and (self.rng is None or self.rng.random() < self.p_inplace):
            inplace = {out[0]: reads[0][0]}
        self.steps.append(Step(tuple(r[0] for r in reads), (out[0],), inplace))
        return out

    def conv(self, x, channels, stride=1, bn=False, relu=True):
        c, h, w = x[1]
        y = self.op("conv", [x], (channels, -(-h // stride), -(-w // stride)))
        if bn:
            y = self.op("bn", [y], y[1], elementwise=True)
        return self.op("relu", [y], y[1], elementwise=True) if relu else y

    def pool(self, x, stride=2, kind="pool"):
        c, h, w = x[1]
        return self.op(kind, [x], (c, -(-h // stride), -(-w // stride)))

    def concat(self, parts):
        c = sum(p[1][0] for p in parts)
        return self.op("concat", parts, (c,) + parts[0][1][1:])

    def add(self, a, b):
        return self.op("add", [a, b], a[1], elementwise=True)

    def split(self, x, pieces):
        c, h, w = x[1]
        names = [self._value("split", (c // pieces, h, w)) for _ in range(pieces)]
        self.steps.append(Step((x[0],), tuple(n[0] for n in names)))
        return names

    def head(self, x, classes=1000):
        x = self.op("gap", [x], (x[1][0], 1, 1))
        x = self.op("fc", [x], (classes, 1, 1))
        x = self.op("softmax", [x], (classes, 1, 1))
        self.outputs.append(x[0])
        return x

    def network(self, shuffle: bool = False) -> Network:
        steps = self.steps
        if shuffle:
            steps = _random_topological_order(steps, self.rng)
        return Network(tuple(steps), dict(self.sizes), tuple(self.inputs), tuple(self.outputs))


def _random_topological_order(steps, rng):
    """Kahn's algorithm picking a random ready step each time."""
    writer = {w: i for i, s in enumerate(steps) for w in s.writes}
    users = [[] for _ in steps]
    waiting = [0] * len(steps)
    for i, s in enumerate(steps):
        for j in {writer[r] for r in s.reads if r in writer}:
            users[j].append(i)
            waiting[i] += 1
    ready = [i for i, n in enumerate(waiting) if n == 0]
    order = []
    while ready:
        i = ready.pop(int(rng.integers(len(ready))))
        order.append(steps[i])
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    return order


def alexnet(batch: int = 1) -> Network:
    """CaffeNet (AlexNet) at 3x227x227, with LRN and Dropout as separate steps."""
    b = _Builder(batch)
    x = b.input((3, 227, 227))
    for channels, side, pooled in ((96, 55, 27), (256, 27, 13)):
        x = b.op("conv", [x], (channels, side, side))
        x = b.op("relu", [x], x[1], elementwise=True)
        x = b.op("pool", [x], (channels, pooled, pooled))
        x = b.op("lrn", [x], x[1])
    for channels in (384, 384, 256):
        x = b.conv(x, channels)
    x = b.op("pool", [x], (256, 6, 6))
    for units in (4096, 4096):
        x = b.op("fc", [x], (units, 1, 1))
        x = b.op("relu", [x], x[1], elementwise=True)
        x = b.op("dropout", [x], x[1], elementwise=True)
    x = b.op("fc", [x], (1000, 1, 1))
    b.outputs.append(b.op("softmax", [x], x[1])[0])
    return b.network()


_INCEPTION_V1 = {  # name: (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj)
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128), "5a": (256, 160, 320, 32, 128, 128),
    "5b": (384, 192, 384, 48, 128, 128),
}


def _inception(b, x, widths):
    c1, r3, c3, r5, c5, pp = widths
    branches = [b.conv(x, c1), b.conv(b.conv(x, r3), c3), b.conv(b.conv(x, r5), c5),
                b.conv(b.pool(x, stride=1), pp)]
    return b.concat(branches)


def googlenet(batch: int = 1) -> Network:
    """Inception v1 (GoogLeNet) at 3x224x224, without the auxiliary heads."""
    b = _Builder(batch)
    x = b.conv(b.input((3, 224, 224)), 64, stride=2)
    x = b.op("lrn", [b.pool(x)], (64, 56, 56))
    x = b.conv(b.conv(x, 64), 192)
    x = b.pool(b.op("lrn", [x], x[1]))
    for name, widths in _INCEPTION_V1.items():
        x = _inception(b, x, widths)
        if name in ("3b", "4e"):
            x = b.pool(x)
    b.head(x)
    return b.network()


def _bottleneck(b, x, width, stride, project):
    y = b.conv(x, width, bn=True)
    y = b.conv(y, width, stride=stride, bn=True)
    y = b.conv(y, 4 * width, bn=True, relu=False)
    skip = b.conv(x, 4 * width, stride=stride, bn=True, relu=False) if project else x
    return b.op("relu", [b.add(y, skip)], y[1], elementwise=True)


def resnet50(batch: int = 1) -> Network:
    """ResNet-50 v1.5 (stride on the 3x3 conv) at 3x224x224, BatchNormalization
    unfused: 176 values."""
    return _resnet((3, 4, 6, 3), batch)


def resnet152(batch: int = 1) -> Network:
    """ResNet-152 v1.5 at 3x224x224, BatchNormalization unfused: 516 values."""
    return _resnet((3, 8, 36, 3), batch)


def _resnet(blocks_per_stage, batch):
    b = _Builder(batch)
    x = b.pool(b.conv(b.input((3, 224, 224)), 64, stride=2, bn=True))
    for stage, blocks in enumerate(blocks_per_stage):
        width = 64 << stage
        for i in range(blocks):
            stride = 2 if stage > 0 and i == 0 else 1
            x = _bottleneck(b, x, width, stride, project=i == 0)
    b.head(x)
    return b.network()


def random_network(rng: np.random.Generator, max_blocks: int = 20,
                   inplace_probability: float = 0.7) -> Network:
    """A random CNN-like DAG: about 10 to 200 values from a few KB to a few MB.

    Args:
        rng: the source of randomness (seed it for reproducible tests).
        max_blocks: upper bound on the number of blocks after the stem.
        inplace_probability: chance that an element-wise op declares in-place.
    Returns:
        Network; half of the time its steps run in a random topological order.
    """
    b = _Builder(int(rng.choice([1, 1, 2, 4])), rng, inplace_probability)
    side = int(rng.choice([32, 64, 96, 112, 128, 224]))
    x = b.conv(b.input((3, side, side)), int(rng.integers(8, 65)), stride=2,
               bn=bool(rng.random() < 0.5))
    features = [x]
    for _ in range(int(rng.integers(2, max_blocks + 1))):
        kind = rng.choice(["plain", "residual", "inception", "dense", "split"])
        if x[1][0] > 1024:  # a transition keeps channel counts CNN-like
            x = b.conv(x, x[1][0] // 4)
        c = x[1][0]
        if kind == "plain":
            x = b.conv(x, int(c * rng.choice([1, 1.5, 2])), bn=bool(rng.random() < 0.5))
        elif kind == "residual":
            y = b.conv(x, c, bn=True)
            y = b.conv(y, c, bn=True, relu=False)
            x = b.op("relu", [b.add(y, x)], x[1], elementwise=True)
        elif kind == "inception":
            branches = [b.conv(x, int(rng.integers(8, c + 9))) for _ in range(int(rng.integers(2, 5)))]
            branches = [b.conv(br, int(rng.integers(8, c + 9))) if rng.random() < 0.5 else br
                        for br in branches]
            x = b.concat(branches)
        elif kind == "dense":
            same = [f for f in features if f[1][1:] == x[1][1:]][-3:]
            x = b.concat(same + [b.conv(x, int(rng.integers(8, 33)))]) if same else x
        else:
            parts = b.split(x, 2)
            x = b.concat([b.conv(p, p[1][0]) for p in parts])
        if rng.random() < 0.1:  # an auxiliary output, live until the end
            b.outputs.append(b.op("aux", [x], (10, 1, 1))[0])
        if rng.random() < 0.3 and x[1][1] > 4:
            x = b.pool(x)
            features = []
        features.append(x)
    b.head(x, classes=int(rng.choice([10, 100, 1000])))
    return b.network(shuffle=bool(rng.random() < 0.5))
