"""Build small Caffe nets in tests (our own protobuf classes) and run them through OpenCV dnn."""

from __future__ import annotations

import numpy as np

from pooled_predictor.importers.caffe import caffe_pb


def prototxt(inputs: dict[str, tuple], layers: str) -> str:
    """A net definition: top-level inputs with input_shape, then the given layer text."""
    head = "".join(f'input: "{n}"\ninput_shape {{ {" ".join(f"dim: {d}" for d in s)} }}\n'
                   for n, s in inputs.items())
    return head + layers


def caffemodel(weights: dict[str, list[np.ndarray]], *, legacy_shape: bool = False, double: bool = False,
               v1: bool = False) -> bytes:
    """A binary caffemodel: layer name -> its blobs (shape, or legacy num/channels/height/width)."""
    net = caffe_pb.NetParameter(name="weights")
    for name, blobs in weights.items():
        layer = net.layers.add() if v1 else net.layer.add()
        layer.name = name
        for arr in blobs:
            b = layer.blobs.add()
            arr = np.asarray(arr)
            if legacy_shape:
                dims = (1,) * (4 - arr.ndim) + arr.shape
                b.num, b.channels, b.height, b.width = dims
            else:
                b.shape.dim.extend(arr.shape)
            (b.double_data if double else b.data).extend(arr.ravel().tolist())
    return net.SerializeToString()


def opencv_forward(text: str, model: bytes, feeds: dict[str, np.ndarray], outputs: list[str]) -> list[np.ndarray]:
    """OpenCV dnn's outputs of the named layers (cv2.dnn.readNetFromCaffe from buffers)."""
    import cv2

    net = cv2.dnn.readNetFromCaffe(np.frombuffer(text.encode(), np.uint8), np.frombuffer(model, np.uint8))
    for name, x in feeds.items():
        net.setInput(x, name)
    return [np.asarray(o) for o in net.forward(outputs)]
