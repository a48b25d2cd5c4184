"""Net.forward, the one way into a Net: outputs, `out`, share_inputs, CheckedInputs; the Device and
InputSpec it goes through (engine/net.py, engine/inputs.py, engine/device.py)."""

import numpy as np
import pytest

from pooled_predictor import InputError, Net, Optimization, Program, UnknownBlobError, UnsupportedOpError, load_onnx
from pooled_predictor.engine import layout as layout_module
from pooled_predictor.engine.device import CPU, get_device
from pooled_predictor.engine.inputs import CheckedInputs, InputSpec
from tests.conftest import make_mlp, mlp_reference

X = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)


@pytest.fixture(scope="module")
def model():
    return make_mlp()


def _net(model, **kw):
    return Net(Program(load_onnx(model)), optimization=Optimization.MEMORY, **kw)


def test_forward_returns_the_outputs_and_the_names_asked_for(model):
    net = _net(model, keep=["h2"])
    got = net.forward({"x": X})
    assert list(got) == ["y"] and got["y"] is net.blob_by_name("y")
    np.testing.assert_allclose(got["y"], mlp_reference(model, X), rtol=1e-5, atol=1e-6)
    both = net.forward([X], ["h2", "x", "w1"])
    np.testing.assert_array_equal(both["x"], X)
    np.testing.assert_array_equal(both["h2"], np.maximum(X @ net.program.weights["w1"] + net.program.weights["b1"], 0))
    with pytest.raises(UnknownBlobError, match="h1"):  # under MEMORY an intermediate not kept is not readable
        net.forward([X], ["h1"])
    with pytest.raises(UnknownBlobError, match="nope"):
        net.forward([X], ["nope"])


def test_out_arrays_are_filled_and_checked_before_any_is_written(model):
    net = _net(model)
    y = np.empty((4, 10), np.float32)
    got = net.forward({"x": X}, ["y"], out=[y])
    assert got["y"] is y
    np.testing.assert_array_equal(y, net.blob_by_name("y"))
    by_name = {"y": np.empty((4, 10), np.float32)}
    assert net.forward({"x": X}, out=by_name)["y"] is by_name["y"]
    untouched = np.full((4, 10), 7, np.float32)
    for bad, match in [([np.empty((4, 9), np.float32)], "shape"), ([np.empty((4, 10), np.float64)], "dtype"),
                       ([[0.0] * 10], "writeable ndarray"), ([untouched, untouched], "2 `out` arrays")]:
        with pytest.raises(InputError, match=match):
            net.forward({"x": X}, ["y"], out=bad)
    assert (untouched == 7).all()
    ro = np.empty((4, 10), np.float32)
    ro.flags.writeable = False
    with pytest.raises(InputError, match="writeable"):
        net.forward({"x": X}, ["y"], out=[ro])


@pytest.mark.parametrize("share", [True, "large", False])
def test_share_inputs_reads_in_place_or_copies_with_the_same_bits(model, share, monkeypatch):
    monkeypatch.setattr(layout_module, "SHARED_INPUT_MIN_BYTES", 1 << 30)  # "large": nothing is that large
    plain, net = _net(model), _net(model)
    want = plain.forward({"x": X})["y"].copy()
    net.forward({"x": np.zeros_like(X)})
    got = net.forward({"x": X}, share_inputs=share)
    np.testing.assert_array_equal(got["y"], want)
    read_in_place = share is True
    assert (not net.blob_by_name("x").any()) == read_in_place  # a shared input never lands in the input blob
    strided = np.repeat(X, 2, axis=1)[:, ::2]  # not contiguous: copied whatever share says
    np.testing.assert_array_equal(net.forward({"x": strided}, share_inputs=share)["y"], want)
    with pytest.raises(InputError, match="share_inputs"):
        net.forward({"x": X}, share_inputs="always")


def test_checked_inputs_are_not_checked_again_and_bad_ones_are_refused(model):
    net = _net(model)
    spec = net.input_spec
    checked = spec.check({"x": X})
    assert type(checked) is CheckedInputs and spec.check(checked) is checked
    np.testing.assert_array_equal(net.forward(checked)["y"], net.forward([X])["y"])
    for bad, match in [({"x": X.astype(np.float64)}, "dtype"), ({"x": X[:, :15]}, "dimension 1 must be 16"),
                       ({"z": X}, "unknown"), ([X, X], "1 input"), ("x", "list, a dict or an array"),
                       ({"x": X[None]}, "rank")]:
        with pytest.raises(InputError, match=match):
            net.forward(bad)
    with pytest.raises(InputError, match="before any reshape"):
        _net(model).forward()


def test_input_spec_shapes_and_defaults(model):
    spec = InputSpec(Program(load_onnx(model)).inputs)
    assert spec.default_shapes() == {"x": (1, 16)}
    assert spec.check_shapes({"x": [3, 16]}) == {"x": (3, 16)}
    with pytest.raises(InputError, match="negative"):
        spec.check_shapes({"x": (-1, 16)})
    with pytest.raises(InputError, match="missing"):
        spec.check_shapes({})


def test_the_device_owns_the_arena_and_the_copies():
    cpu = get_device("cpu")
    assert isinstance(cpu, CPU) and get_device(cpu) is cpu and cpu.name == "cpu"
    arena = cpu.arena(1000)
    assert arena.nbytes == 1000 and arena.ctypes.data % 64 == 0
    v = cpu.view(arena, 64, (2, 3), np.float32)
    cpu.copy_in(v, np.ones((2, 3), np.float32))
    back = cpu.copy_out(v)
    assert back.base is not arena and (back == 1).all()
    with pytest.raises(TypeError):
        cpu.copy_in(v, np.ones((2, 3), np.float64))  # io_copy never converts
    with pytest.raises(UnsupportedOpError, match="cuda"):
        get_device("cuda")
    with pytest.raises(UnsupportedOpError, match="unknown device"):
        get_device("tpu")
