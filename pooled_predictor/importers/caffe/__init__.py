"""Caffe importer: prototxt + caffemodel (or HDF5 weights) -> Graph.

Both files are parsed with protobuf against our own caffe.proto (the subset of
Caffe's schema we support, Caffe's field numbers and defaults): the prototxt
with `text_format`, the caffemodel with the message classes of caffe_pb.py.
Caffe's semantics are kept where they differ from ONNX's:

* blob names are Caffe's top names. A blob written by several layers (in-place
  layers: `top == bottom`, e.g. ReLU after Convolution) gets versioned value
  names ``name@1, name@2, ...`` for the earlier writers and its own name for the
  last one, so ``blob_by_name(name)`` returns the value after the last writer,
  as Caffe's Net::blob_by_name does;
* weights are matched to layers by name; the caffemodel may be the training
  net (its data, loss and Split layers and any layer the prototxt lacks are
  ignored);
* layers are filtered by the NetState rules (`phase`, `include`, `exclude`,
  levels and stages) for phase TEST;
* the graph's outputs are the blobs no later layer reads (Caffe's net outputs);
* inputs keep their declared shapes (top-level input_shape / input_dim, Input
  layers), except a batch of 1, which becomes symbolic so jobs can be batched.

Weights: a binary caffemodel (BlobProto `shape` or legacy num/channels/height/
width, `data` or `double_data`), or HDF5 in Caffe's layout, datasets
``data/<layer name>/<i>`` (Net::ToHDF5; save_hdf5_weights writes it).

Layer conversions live in layers.py, structure_layers.py and ssd_layers.py (one
function per layer type, over builder.Builder); Caffe-only layers become ops of
the "caffe" domain (pooled_predictor/ops/shapes/caffe.py, ops/cpu/caffe.py).

Errors: ModelLoadError names the file and, where one is at fault, the layer;
UnsupportedOpError lists every unsupported layer type of the net at once.
"""

from __future__ import annotations

import os

import numpy as np
from google.protobuf import text_format

from ...errors import ModelLoadError, UnsupportedOpError
from ...ir import Graph, Value
from . import caffe_pb
from .builder import Builder, UnsupportedLayer
from .layers import CHECKS, CONVERTERS

CAFFE_DOMAIN = "caffe"
OPSET = {"": 13, CAFFE_DOMAIN: 1}

# V1LayerParameter.LayerType -> the layer type string of LayerParameter
_V1_TYPES = {
    "ABSVAL": "AbsVal", "ACCURACY": "Accuracy", "ARGMAX": "ArgMax", "BNLL": "BNLL", "CONCAT": "Concat",
    "CONTRASTIVE_LOSS": "ContrastiveLoss", "CONVOLUTION": "Convolution", "DATA": "Data",
    "DECONVOLUTION": "Deconvolution", "DROPOUT": "Dropout", "DUMMY_DATA": "DummyData",
    "EUCLIDEAN_LOSS": "EuclideanLoss", "ELTWISE": "Eltwise", "EXP": "Exp", "FLATTEN": "Flatten",
    "HDF5_DATA": "HDF5Data", "HDF5_OUTPUT": "HDF5Output", "HINGE_LOSS": "HingeLoss", "IM2COL": "Im2col",
    "IMAGE_DATA": "ImageData", "INFOGAIN_LOSS": "InfogainLoss", "INNER_PRODUCT": "InnerProduct",
    "LRN": "LRN", "MEMORY_DATA": "MemoryData", "MULTINOMIAL_LOGISTIC_LOSS": "MultinomialLogisticLoss",
    "MVN": "MVN", "POOLING": "Pooling", "POWER": "Power", "RELU": "ReLU", "SIGMOID": "Sigmoid",
    "SIGMOID_CROSS_ENTROPY_LOSS": "SigmoidCrossEntropyLoss", "SILENCE": "Silence", "SOFTMAX": "Softmax",
    "SOFTMAX_LOSS": "SoftmaxWithLoss", "SPLIT": "Split", "SLICE": "Slice", "TANH": "TanH",
    "WINDOW_DATA": "WindowData", "THRESHOLD": "Threshold",
}


class Layer:
    """One layer, from `layer` or a legacy V1 `layers` entry: name, type, bottoms, tops, params."""

    def __init__(self, proto, v1: bool):
        self.proto = proto
        self.name = proto.name
        if v1:
            enum = caffe_pb.V1LayerParameter.DESCRIPTOR.enum_types_by_name["LayerType"]
            self.type = _V1_TYPES.get(enum.values_by_number[proto.type].name, str(proto.type)) \
                if proto.type in enum.values_by_number else str(proto.type)
        else:
            self.type = proto.type
        self.bottom = list(proto.bottom)
        self.top = list(proto.top)


# ---- parsing ------------------------------------------------------------------------
def _read(src, what: str) -> tuple[bytes, str]:
    """(content, description) of a path or of in-memory content."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src), f"<{what}: {len(src)} bytes>"
    if isinstance(src, os.PathLike) or (isinstance(src, str) and "\n" not in src and len(src) < 4096
                                        and ("{" not in src)):
        path = os.fspath(src)
        if not os.path.isfile(path):
            raise ModelLoadError(f"Caffe {what} file {path!r} does not exist or is not a file")
        with open(path, "rb") as f:
            return f.read(), path
    if isinstance(src, str):
        return src.encode(), f"<{what} text>"
    raise ModelLoadError(f"a Caffe {what} must be a path, str or bytes, not {type(src).__name__}")


def parse_prototxt(src) -> tuple["caffe_pb.NetParameter", str]:
    """Parse a Caffe net definition (text format).

    Args:
        src: a path, or the text itself (str or bytes).
    Returns:
        (NetParameter, description of the source for messages).
    Raises:
        ModelLoadError: missing file, or text that is not a Caffe NetParameter.
    """
    data, where = _read(src, "prototxt")
    net = caffe_pb.NetParameter()
    try:
        text_format.Parse(data.decode("utf-8", errors="replace"), net, allow_unknown_field=True)
    except text_format.ParseError as exc:
        raise ModelLoadError(f"cannot parse Caffe prototxt {where!r}: {exc}") from exc
    if not net.layer and not net.layers:
        raise ModelLoadError(f"Caffe prototxt {where!r} defines no layers")
    return net, where


def parse_caffemodel(src) -> tuple[dict[str, list[np.ndarray]], str]:
    """Read a binary caffemodel: layer name -> its weight blobs (float32 arrays).

    Raises:
        ModelLoadError: missing file, not a NetParameter, or a blob whose data
            does not match its shape (truncated file).
    """
    data, where = _read(src, "caffemodel")
    try:
        net = caffe_pb.NetParameter.FromString(data)
    except Exception as exc:  # DecodeError
        raise ModelLoadError(f"cannot parse caffemodel {where!r} (truncated or not a caffemodel?): "
                             f"{type(exc).__name__}: {exc}") from exc
    if not data:
        raise ModelLoadError(f"caffemodel {where!r} is empty")
    weights = {}
    for proto in list(net.layer) + list(net.layers):
        if proto.blobs:
            weights[proto.name] = [blob_to_array(b, where, proto.name, i) for i, b in enumerate(proto.blobs)]
    return weights, where


def parse_hdf5_weights(src) -> tuple[dict[str, list[np.ndarray]], str]:
    """Read weights saved in Caffe's HDF5 layout: datasets ``data/<layer name>/<i>``.

    This is the layout of Net::ToHDF5 / CopyTrainedLayersFromHDF5: one group per
    layer under "data", blob i of the layer in the dataset named str(i).

    Raises:
        ModelLoadError: missing file, not HDF5, no "data" group; ImportError
            names the `hdf5` extra when h5py is not installed.
    """
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("HDF5 weights need h5py: pip install 'pooled-predictor[hdf5]'") from exc
    where = os.fspath(src) if isinstance(src, (str, os.PathLike)) else "<hdf5 bytes>"
    if isinstance(src, (str, os.PathLike)) and not os.path.isfile(src):
        raise ModelLoadError(f"HDF5 weights file {where!r} does not exist or is not a file")
    try:
        import io

        handle = h5py.File(io.BytesIO(bytes(src)) if isinstance(src, (bytes, bytearray)) else where, "r")
    except Exception as exc:
        raise ModelLoadError(f"cannot open HDF5 weights {where!r}: {type(exc).__name__}: {exc}") from exc
    with handle as f:
        if "data" not in f:
            raise ModelLoadError(f"HDF5 weights {where!r} have no 'data' group (Caffe's layout is data/<layer>/<i>)")
        weights = {}
        for name, group in f["data"].items():
            keys = sorted(group.keys(), key=int)
            if keys != [str(i) for i in range(len(keys))]:
                raise ModelLoadError(f"HDF5 weights {where!r}: layer {name!r} has datasets {keys}, expected 0..n-1")
            weights[name] = [np.ascontiguousarray(group[k][()], dtype=np.float32) for k in keys]
    return weights, where


def save_hdf5_weights(weights: dict[str, list[np.ndarray]], path) -> None:
    """Write weights in Caffe's HDF5 layout (Net::ToHDF5): dataset ``data/<layer name>/<i>`` per blob.

    With parse_caffemodel, converts a caffemodel for Predictor.hdf5_paths:
    ``save_hdf5_weights(parse_caffemodel(path)[0], "model.h5")``. Needs h5py.
    """
    import h5py

    with h5py.File(os.fspath(path), "w") as f:
        data = f.create_group("data")
        for name, blobs in weights.items():
            group = data.create_group(name)
            for i, b in enumerate(blobs):
                group.create_dataset(str(i), data=np.asarray(b, np.float32))


def blob_to_array(blob, where: str, layer: str, index: int) -> np.ndarray:
    """A BlobProto as float32 ndarray: `shape` or the legacy num/channels/height/width; `data` or `double_data`."""
    if blob.HasField("shape"):
        shape = tuple(int(d) for d in blob.shape.dim)
    else:
        shape = (blob.num, blob.channels, blob.height, blob.width)
        # legacy blobs of InnerProduct weights are 1 x 1 x N x K: Caffe drops leading 1s by count
    values = blob.data if len(blob.data) else blob.double_data
    count = int(np.prod(shape)) if shape else 1
    if len(values) != count:
        raise ModelLoadError(f"{where}: layer {layer!r} blob {index} has {len(values)} values for shape "
                             f"{shape} ({count}); truncated or inconsistent file")
    return np.asarray(values, dtype=np.float32).reshape(shape)


# ---- net state rules ------------------------------------------------------------------
def _meets(rule, state) -> bool:
    """Caffe's Net::StateMeetsRule for one NetStateRule."""
    if rule.HasField("phase") and rule.phase != state.phase:
        return False
    if rule.HasField("min_level") and state.level < rule.min_level:
        return False
    if rule.HasField("max_level") and state.level > rule.max_level:
        return False
    stages = set(state.stage)
    if any(s not in stages for s in rule.stage):
        return False
    if any(s in stages for s in rule.not_stage):
        return False
    return True


def included(proto, state) -> bool:
    """Caffe's FilterNet: a layer with `include` rules needs one met; with `exclude`, none met."""
    if getattr(proto, "include", None) and len(proto.include):
        return any(_meets(r, state) for r in proto.include)
    if getattr(proto, "exclude", None) and len(proto.exclude):
        return not any(_meets(r, state) for r in proto.exclude)
    if hasattr(proto, "phase") and proto.HasField("phase") and proto.phase != state.phase:
        return False
    return True


# ---- import -------------------------------------------------------------------------
def load_caffe(prototxt, weights=None, *, weights_format: str = "binary", device: str | None = "cpu") -> Graph:
    """Import a Caffe model into a Graph.

    Args:
        prototxt: the net definition: a path, or its text (str or bytes).
        weights: the caffemodel (path or bytes) or, with weights_format="hdf5",
            an HDF5 file in Caffe's layout; None: a net without learned weights.
        weights_format: "binary" (caffemodel) or "hdf5".
        device: unused, kept for compatibility (kernels are not looked at here:
            Program finds ops with no kernel when the Graph is compiled).
    Returns:
        Graph (opset {"": 13, "caffe": 1}) with read-only float32 weights.
    Raises:
        ModelLoadError: unreadable files, missing or mis-shaped weights of a
            layer, a bottom no layer produces (the message names file and layer).
        UnsupportedOpError: every unsupported layer type, listed at once.
    """
    net, where = parse_prototxt(prototxt)
    if weights is None:
        blobs, wsrc = {}, "<no weights>"
    elif weights_format == "hdf5":
        blobs, wsrc = parse_hdf5_weights(weights)
    elif weights_format == "binary":
        blobs, wsrc = parse_caffemodel(weights)
    else:
        raise ValueError(f"weights_format must be 'binary' or 'hdf5', got {weights_format!r}")

    state = caffe_pb.NetState()
    state.CopyFrom(net.state)
    state.phase = 1  # TEST
    v1 = bool(net.layers) and not net.layer
    layers = [Layer(p, v1) for p in (net.layers if v1 else net.layer) if included(p, state)]
    seen: set[str] = set()
    for layer in layers:  # weights are found by layer name: two layers of one name (in phase TEST) are ambiguous
        if layer.name and layer.name in seen:
            raise ModelLoadError(f"Caffe model {where!r}: two layers are named {layer.name!r} (OpenCV refuses "
                                 "this too)")
        seen.add(layer.name)

    unsupported = sorted({layer.type for layer in layers if layer.type not in CONVERTERS})
    problems = []
    inputs = _declared_inputs(net, where)
    builder = Builder(where, wsrc, blobs, layers, [n for n, _ in inputs])
    for layer in layers:
        if layer.type in CONVERTERS:
            try:
                if layer.type in CHECKS:
                    CHECKS[layer.type](layer)
            except UnsupportedLayer as exc:
                problems.append(str(exc))
    if unsupported or problems:
        listing = ", ".join(unsupported + problems)
        raise UnsupportedOpError(
            f"Caffe model {where!r} uses {len(unsupported) + len(problems)} unsupported layer type(s) or "
            f"setting(s): {listing}; supported: {', '.join(sorted(CONVERTERS))}",
            [(t, CAFFE_DOMAIN, 1) for t in unsupported])

    for name, shape in inputs:
        builder.define_input(name, shape)
    for layer in layers:
        try:
            CONVERTERS[layer.type](builder, layer)
        except (ModelLoadError, UnsupportedOpError):
            raise
        except UnsupportedLayer as exc:
            raise UnsupportedOpError(str(exc), [(layer.type, CAFFE_DOMAIN, 1)]) from None
    graph = Graph(nodes=builder.nodes, inputs=[Value(n, np.dtype(np.float32), _input_shape(s)) for n, s in builder.inputs],
                  outputs=[Value(n) for n in builder.net_outputs()], weights=builder.weights,
                  opset=dict(OPSET), name=net.name or "caffe", source=where)
    graph.metadata["caffe_prototxt"] = where
    graph.metadata["caffe_weights"] = wsrc
    return graph


def _input_shape(shape):
    """The declared shape, its batch dimension symbolic when declared as 1.

    Caffe reshapes a net to whatever input it is given; the declared sizes are
    kept (the Net checks them), except a batch of 1, which becomes the symbolic
    "batch" (default 1) so that jobs can be batched.
    """
    if shape is None or len(shape) == 0 or shape[0] != 1:
        return shape
    return ("batch",) + tuple(shape[1:])


def _declared_inputs(net, where: str) -> list[tuple[str, tuple | None]]:
    """Top-level `input` with `input_shape` or legacy `input_dim` (4 per input)."""
    names = list(net.input)
    if not names:
        return []
    if len(net.input_shape):
        if len(net.input_shape) != len(names):
            raise ModelLoadError(f"Caffe prototxt {where!r}: {len(names)} inputs but {len(net.input_shape)} input_shape")
        return [(n, tuple(int(d) for d in s.dim)) for n, s in zip(names, net.input_shape)]
    dims = list(net.input_dim)
    if dims:
        if len(dims) != 4 * len(names):
            raise ModelLoadError(f"Caffe prototxt {where!r}: input_dim needs 4 values per input, got {len(dims)}")
        return [(n, tuple(dims[4 * i:4 * i + 4])) for i, n in enumerate(names)]
    return [(n, None) for n in names]


__all__ = ["load_caffe", "parse_prototxt", "parse_caffemodel", "parse_hdf5_weights", "save_hdf5_weights",
           "CAFFE_DOMAIN"]
