"""Inputs and references for the PP-OCR model tests.

Real inputs come from the scanned page (skimage's page.png), resized and
normalized as the OCR pipeline does. `to_float64` rewrites a float32 model to
float64 (weights, input, output; Resize scales stay float32 as ONNX requires),
giving an accurate reference to judge float32 rounding against.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from pooled_predictor.apps.ocr import DET_MEAN, DET_STD, _resize, load_image


def page_det_input(page, n, h, w, seed=0) -> np.ndarray:
    """(n, 3, h, w): the page resized; items after the first get pixel noise (sigma 0.05)."""
    img = load_image(page)
    rng = np.random.default_rng(seed)
    xs = []
    for i in range(n):
        im = _resize(img, w, h).astype(np.float32) / 255.0
        if i:
            im = np.clip(im + rng.normal(0, 0.05, im.shape), 0, 1)
        xs.append(((im[:, :, ::-1] - DET_MEAN) / DET_STD).transpose(2, 0, 1))
    return np.ascontiguousarray(np.stack(xs), np.float32)


def page_rec_input(page, n, w, seed=0) -> np.ndarray:
    """(n, 3, 48, w): horizontal strips of the page (text lines), scaled to [-1, 1]."""
    img = load_image(page)
    rng = np.random.default_rng(seed)
    xs = []
    for i in range(n):
        y0 = int(rng.integers(0, img.shape[0] - 20))
        strip = _resize(img[y0:y0 + 20], w, 48).astype(np.float32) / 255.0
        xs.append(((strip[:, :, ::-1] - 0.5) / 0.5).transpose(2, 0, 1))
    return np.ascontiguousarray(np.stack(xs), np.float32)


def to_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep32 = {n.input[2] for n in m.graph.node if n.op_type == "Resize" and len(n.input) > 2}
    for i, t in enumerate(m.graph.initializer):
        if t.data_type == TensorProto.FLOAT and t.name not in keep32:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))
    for n in m.graph.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.DOUBLE
    for v in list(m.graph.input) + list(m.graph.output):
        v.type.tensor_type.elem_type = TensorProto.DOUBLE
    return m
