"""Zoo models quantized with onnxruntime's own tool (onnxruntime.quantization), cached on disk.

A test and benchmark helper (onnxruntime is never imported by the package itself).

`quantized_cnn(name, fmt)` quantizes a zoo CNN (pooled_predictor.zoo.cnn.build) with quantize_static: per-channel,
uint8 activations, int8 weights, calibrated (MinMax) on `calibration_images` seeded random
images of `cnn.sample_input`, in onnxruntime's QDQ format (QuantizeLinear/DequantizeLinear
pairs around float ops) or its QOperator format (QLinearConv, QLinearAdd, QGemm, ... of domain
com.microsoft). `quantized_encoder()` quantizes a BERT-like encoder (pooled_predictor/zoo/encoder.py) with
quantize_dynamic (DynamicQuantizeLinear + MatMulInteger, int8 weights).

The files are cached under <cache>/quantized/ (cache: fetch.cache_dir(), by default
~/.cache/pooled-predictor), named by the sha256 of the float model and a digest of the
settings, so a changed model or setting quantizes anew. onnxruntime is needed only to make a
file that is not cached (it is a test and benchmark dependency, never a runtime one).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import onnx

from pooled_predictor.zoo import cnn
from pooled_predictor.zoo.encoder import bert_encoder
from pooled_predictor.zoo.fetch import cache_dir

FORMATS = ("QDQ", "QOperator")


def _cached(model: onnx.ModelProto, settings: dict, make) -> Path:
    """The cached file for (model, settings), made by make(src_path, dst_path) when missing."""
    data = model.SerializeToString()
    src_sha = hashlib.sha256(data).hexdigest()
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    folder = cache_dir() / "quantized"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{settings.get('name', 'model')}-{src_sha[:16]}-{key}.onnx"
    if path.exists():
        return path
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        src = Path(tmp) / "float.onnx"
        src.write_bytes(data)
        dst = Path(tmp) / "quantized.onnx"
        make(str(src), str(dst))
        os.replace(dst, path)  # atomic: a concurrent maker never sees half a file
    (folder / (path.name + ".json")).write_text(json.dumps(dict(settings, source_sha256=src_sha), indent=1))
    return path


def quantized_cnn(name: str, fmt: str = "QOperator", *, input_size=None, calibration_images: int = 16,
                  seed: int = 0, reduce_range: bool = False) -> Path:
    """Path of zoo CNN `name` (outputs "prob" and "logits") quantized statically by onnxruntime.

    Args:
        name: a key of cnn.ZOO (e.g. "resnet50", "mobilenet_v2").
        fmt: "QDQ" or "QOperator" (onnxruntime's QuantFormat).
        input_size: the model's input size (cnn.build); default the architecture's.
        calibration_images: how many images of cnn.sample_input (batch 1 each, seeds seed + i).
        seed: the first calibration image's seed (the weights are cnn.build's, seed 0).
        reduce_range: quantize weights to 7 bits (onnxruntime's option for AVX2 hosts).
    Returns:
        The cached .onnx path. Per channel, activations uint8, weights int8, MinMax calibration.
    Raises:
        ValueError: unknown format.
        ImportError: onnxruntime is missing and the file is not cached.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}; expected one of {FORMATS}")
    model = cnn.build(name, input_size=input_size, outputs=("prob", "logits"))
    size = model.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    settings = dict(name=f"{name}-{fmt}", format=fmt, per_channel=True, activation="QUInt8", weight="QInt8",
                    calibration="MinMax", images=calibration_images, seed=seed, input_size=size,
                    reduce_range=bool(reduce_range))

    def make(src: str, dst: str) -> None:
        from onnxruntime import quantization as q

        class Images(q.CalibrationDataReader):
            def __init__(self):
                self.left = [cnn.sample_input(name, 1, seed=seed + i, input_size=size)
                             for i in range(calibration_images)]

            def get_next(self):
                return {"data": self.left.pop(0)} if self.left else None

        q.quantize_static(src, dst, Images(), quant_format=getattr(q.QuantFormat, fmt), per_channel=True,
                          activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
                          calibrate_method=q.CalibrationMethod.MinMax, reduce_range=reduce_range)

    return _cached(model, settings, make)


def quantized_encoder(*, layers: int = 2, hidden: int = 64, heads: int = 4, reduce_range: bool = False) -> Path:
    """Path of encoder.bert_encoder(layers, hidden, heads) quantized by onnxruntime's quantize_dynamic
    (int8 weights, per tensor; MatMul -> DynamicQuantizeLinear + MatMulInteger + Cast + Mul)."""
    model = bert_encoder(layers=layers, hidden=hidden, heads=heads)
    settings = dict(name=f"bert{layers}x{hidden}-dynamic", weight="QInt8", per_channel=False,
                    reduce_range=bool(reduce_range))

    def make(src: str, dst: str) -> None:
        from onnxruntime import quantization as q

        q.quantize_dynamic(src, dst, weight_type=q.QuantType.QInt8, reduce_range=reduce_range)

    return _cached(model, settings, make)


__all__ = ["FORMATS", "quantized_cnn", "quantized_encoder"]
