"""Importers: model files -> Graph. ONNX today."""

from .onnx import load_onnx

__all__ = ["load_onnx"]
