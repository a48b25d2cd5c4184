"""ImageDecoder (ONNX ImageDecoder-20): decode an encoded image (JPEG, PNG, BMP, TIFF,
WebP, JPEG 2000, PNM... whatever Pillow reads) into an (H, W, C) uint8 array.
Pillow is imported when such a node is built; without it the node is unsupported."""

from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..shapes.image import open_image


@kernel("ImageDecoder", since=20)
def image_decoder(encoded_stream, *, out, pixel_format="RGB"):
    """Decode a 1-D uint8 stream into (H, W, 3) RGB or BGR, or (H, W, 1) Grayscale (ITU-R
    601-2 luma, Pillow's "L" conversion); images with alpha or a palette are converted.
    Raises:
        InputError: the stream is no image Pillow reads.
    """
    fmt = pixel_format.decode() if isinstance(pixel_format, bytes) else pixel_format
    img = open_image("ImageDecoder", encoded_stream)
    if fmt == "Grayscale":
        np.copyto(out[:, :, 0], np.asarray(img.convert("L")))
    else:
        rgb = np.asarray(img if img.mode == "RGB" else img.convert("RGB"))
        np.copyto(out, rgb[:, :, ::-1] if fmt == "BGR" else rgb)
