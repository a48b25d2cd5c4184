"""One-node tests of the signal kernels against onnxruntime: DFT (17, 20) over axes,
real and complex input, lengths that pad or cut, inverse and one-sided forms;
STFT with and without a window, one- and two-sided; the three windows, periodic
and symmetric, in several output types; MelWeightMatrix."""

import itertools

import numpy as np
import onnxruntime
import pytest

from pooled_predictor.errors import ShapeInferenceError
from tests.onnx_helpers import check_node, make_node_model, run_ours

onnxruntime.set_default_logger_severity(3)
rng = np.random.default_rng(0)


def signal(shape, complex_=False, dtype=np.float32):
    return rng.standard_normal(tuple(shape) + (2 if complex_ else 1,)).astype(dtype)


DFT_GRID = [  # (axis, complex input, dft_length, inverse, onesided)
    (1, False, None, 0, 0), (2, True, None, 0, 0), (1, False, 12, 0, 1), (2, False, 5, 0, 1),
    (1, True, None, 1, 0), (2, True, 7, 1, 0), (1, True, None, 1, 1), (-2, True, 16, 1, 1),
    (-3, False, 6, 0, 0)]


@pytest.mark.parametrize("axis,cplx,length,inverse,onesided", DFT_GRID)
@pytest.mark.parametrize("opset", [17, 20])
def test_dft(axis, cplx, length, inverse, onesided, opset):
    if opset == 17 and axis < 0:
        axis += 4
    x = signal((2, 8, 9), cplx)
    n = None if length is None else np.array(length, np.int64)
    attrs = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        inputs = [x, n, np.array(axis, np.int64)]
    else:
        inputs, attrs["axis"] = [x, n], axis
    check_node("DFT", inputs, attrs, opset=opset, static=(1, 2), rtol=1e-4)


def test_dft_float64_default_axis():
    check_node("DFT", [signal((2, 6, 5), True, np.float64)], {}, opset=20, rtol=1e-10)


def test_dft_onesided_complex_is_rejected():
    x = signal((1, 8), True)
    model = make_node_model("DFT", [x], {"onesided": 1}, opset=20)
    with pytest.raises(ShapeInferenceError, match="real input"):
        run_ours(model, {"in0": x})


@pytest.mark.parametrize("window,onesided,step,length", [
    (False, 1, 4, 16), (True, 1, 8, 16), (True, 0, 5, 10), (False, 0, 3, 7)])
def test_stft(window, onesided, step, length):
    x = signal((2, 64))
    w = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(length) / length)).astype(np.float32) if window else None
    inputs = [x, np.array(step, np.int64), w, np.array(length, np.int64)]
    check_node("STFT", inputs, {"onesided": onesided}, opset=17, static=(1, 3), rtol=1e-4)


# A symmetric window of one sample divides by N - 1 = 0: not in the grid.
@pytest.mark.parametrize("op,periodic,size,dtype", [
    p for p in itertools.product(["HannWindow", "HammingWindow", "BlackmanWindow"], [0, 1], [1, 10], [1, 11])
    if p[1] or p[2] > 1])
def test_windows(op, periodic, size, dtype):
    check_node(op, [np.array(size, np.int64)], {"periodic": periodic, "output_datatype": dtype},
               opset=17, static=(0,))


@pytest.mark.parametrize("bins,length,rate,low,high", [(8, 16, 8192, 0.0, 4096.0), (20, 512, 16000, 20.0, 7600.0)])
def test_mel_weight_matrix(bins, length, rate, low, high):
    inputs = [np.array(bins, np.int64), np.array(length, np.int64), np.array(rate, np.int64),
              np.array(low, np.float32), np.array(high, np.float32)]
    check_node("MelWeightMatrix", inputs, {}, opset=17, static=(0, 1, 2, 3, 4))


def test_stft_frame_longer_than_signal():
    x = signal((1, 8))
    model = make_node_model("STFT", [x, np.array(2, np.int64), None, np.array(16, np.int64)], {}, opset=17,
                            static=(1, 3))
    with pytest.raises(ShapeInferenceError, match="frame_length=16"):
        run_ours(model, {"in0": x})
