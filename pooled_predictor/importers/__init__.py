"""Importers: model files -> Graph. ONNX (importers/onnx.py) and Caffe (importers/caffe/)."""

from .caffe import load_caffe
from .onnx import load_onnx


def load_model(src, *, device: str | None = "cpu", external_data_dir=None, memory_limit_bytes: int | None = None,
               data: bytes | None = None, facts: dict | None = None):
    """Import any model source into a Graph.

    Args:
        src: an ONNX path, bytes or ModelProto; or a Caffe pair (prototxt,
            caffemodel): paths, or (text, binary) contents, as fb-caffe-exts'
            protoWeightPaths_ / protoWeightStrings_.
        device: unused, kept for compatibility (passed on to the importer, which
            no longer checks kernels: Program does, when the Graph is compiled).
        external_data_dir, memory_limit_bytes, data, facts: for ONNX sources, as load_onnx
            (a Caffe model has no external data; its Nets are budgeted at reshape).
    Raises:
        ModelLoadError, UnsupportedOpError: as the importer raises (UnsupportedOpError:
            Caffe layer types the importer cannot convert).
    """
    if isinstance(src, tuple) and len(src) == 2:
        return load_caffe(src[0], src[1], device=device)
    return load_onnx(src, device=device, external_data_dir=external_data_dir,
                     memory_limit_bytes=memory_limit_bytes, data=data, facts=facts)


__all__ = ["load_onnx", "load_caffe", "load_model"]
