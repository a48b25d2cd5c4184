"""ImageDecoder: lossless formats round-trip exactly; every pixel_format; palette and alpha
images are converted; the stream as a graph input (shapes per forward) or a weight; bad
bytes raise InputError. onnxruntime ships no ImageDecoder kernel: the references are the
pixels encoded and onnx's reference evaluator."""

import io

import numpy as np
import pytest
from PIL import Image

from pooled_predictor.errors import InputError
from tests.onnx_helpers import check_node, make_node_model, run_ours

rng = np.random.default_rng(0)


def encode(pixels, fmt, mode=None):
    f = io.BytesIO()
    Image.fromarray(pixels, mode).save(f, format=fmt)
    return np.frombuffer(f.getvalue(), np.uint8)


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "PPM"])
@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_lossless_round_trip(fmt, pixel_format):
    pixels = rng.integers(0, 256, (7, 9, 3), dtype=np.uint8)
    stream = encode(pixels, fmt)
    (out,) = check_node("ImageDecoder", [stream], {"pixel_format": pixel_format}, opset=20, reference="onnx")
    if pixel_format != "Grayscale":
        assert np.array_equal(out, pixels if pixel_format == "RGB" else pixels[:, :, ::-1])
    else:
        assert out.shape == (7, 9, 1)


@pytest.mark.parametrize("mode", ["RGBA", "P", "L"])
def test_other_modes_become_rgb(mode):
    img = Image.fromarray(rng.integers(0, 256, (5, 6, 3), dtype=np.uint8)).convert(mode)
    f = io.BytesIO()
    img.save(f, format="PNG")
    stream = np.frombuffer(f.getvalue(), np.uint8)
    (out,) = run_ours(make_node_model("ImageDecoder", [stream], {}, opset=20, static=(0,)), {})
    assert np.array_equal(out, np.asarray(img.convert("RGB")))


def test_bad_stream_is_an_input_error():
    junk = np.arange(50, dtype=np.uint8)
    with pytest.raises(InputError, match="not an image"):
        run_ours(make_node_model("ImageDecoder", [junk], {}, opset=20), {"in0": junk})
