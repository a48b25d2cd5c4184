"""Shape rule of ImageDecoder (20): (H, W, 3) or (H, W, 1) uint8, read from the encoded
stream's header; when the stream is fed at forward time the Net infers it per forward."""

from __future__ import annotations

import numpy as np

from ...errors import InputError, UnsupportedOpError
from . import shape_rule

PIXEL_FORMATS = {"RGB": 3, "BGR": 3, "Grayscale": 1}


def open_image(ctx_or_name, encoded: np.ndarray):
    """The PIL image of an encoded stream (header read, pixels not yet decoded).

    Raises:
        UnsupportedOpError: Pillow is not installed.
        InputError: the bytes are no image format Pillow reads.
    """
    import io

    try:
        import PIL.Image
    except ImportError:
        raise UnsupportedOpError(f"{ctx_or_name}: ImageDecoder needs Pillow (pip install Pillow, or "
                                 f"the 'demo' extra of pooled-predictor)") from None
    try:
        return PIL.Image.open(io.BytesIO(np.ascontiguousarray(encoded, np.uint8).tobytes()))
    except Exception as exc:
        raise InputError(f"{ctx_or_name}: the encoded stream is not an image Pillow can read "
                         f"({type(exc).__name__}: {exc})") from None


@shape_rule("ImageDecoder")
def image_decoder(ctx):
    """(height, width, channels) uint8; channels 3 for RGB/BGR, 1 for Grayscale."""
    fmt = ctx.attr("pixel_format", "RGB")
    fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
    if fmt not in PIXEL_FORMATS:
        raise ctx.error(f"pixel_format={fmt!r}; expected RGB, BGR or Grayscale")
    if len(ctx.shape(0)) != 1 or np.dtype(ctx.dtype(0)) != np.uint8:
        raise ctx.error(f"encoded_stream must be 1-D uint8, got shape {tuple(ctx.shape(0))} {ctx.dtype(0)}")
    width, height = open_image(f"node {ctx.node.name!r} (ImageDecoder)", ctx.value(0)).size
    return [((height, width, PIXEL_FORMATS[fmt]), np.dtype(np.uint8))]
