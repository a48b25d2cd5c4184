"""The Builder the layer converters emit into: Caffe blobs -> value names, ranks, nodes, weights."""

from __future__ import annotations

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
        name = self._fresh(f"{layer.name}/{suffix}")
        self.weights[name] = readonly(np.ascontiguousarray(array))
        return name

    def tmp(self, layer, suffix: str, rank: int | None = None) -> str:
        name = self._fresh(f"{layer.name}/{suffix}")
        self.rank[name] = rank
        return name

    def _fresh(self, name: str) -> str:
        """`name`, or `name#k` where a blob, weight or earlier value has it (a crafted net may name a blob
        "conv/scaled", the name of a Scale layer "conv"'s own value)."""
        taken = lambda n: n in self.rank or n in self.weights or n in self._writers  # noqa: E731
        k, out = 0, name
        while taken(out):
            k += 1
            out = f"{name}#{k}"
        return out

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


