"""Shared weights (ops/cpu/conv_shared.py): one transform per weight array for every Net, on a cache line."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from pooled_predictor.engine.net import Net
from pooled_predictor.engine.program import Program
from pooled_predictor.importers import load_onnx
from pooled_predictor.ops.cpu import conv_shared
from pooled_predictor.ops.cpu.conv_shared import LINE, on_line, shared_weights


def _off_line(shape, dtype, off):
    """An array of `shape` whose data starts `off` bytes past a cache line."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(n + 2 * LINE, np.uint8)
    start = (off - raw.ctypes.data) % LINE
    a = raw[start:start + n].view(dtype).reshape(shape)
    a[...] = np.arange(a.size).reshape(shape)
    return a


@pytest.mark.parametrize("off", [0, 4, 16, 32, 48])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.int16])
def test_on_line_moves_an_array_onto_a_line_keeping_it(off, dtype):
    a = _off_line((3, 40), dtype, off)
    a.flags.writeable = False
    b = on_line(a)
    assert b.ctypes.data % LINE == 0 and b.shape == a.shape and b.dtype == a.dtype
    np.testing.assert_array_equal(b, a)
    assert not b.flags.writeable and b.flags.c_contiguous
    assert (b is a) == (off == 0)


def test_on_line_leaves_small_and_object_arrays():
    small = _off_line((3,), np.float32, 16)
    assert on_line(small) is small
    obj = np.empty(100, object)
    assert on_line(obj) is obj


def test_shared_weights_are_on_lines_and_shared():
    w = np.random.default_rng(0).standard_normal((64, 33)).astype(np.float32)

    def make(v):  # what numpy gives a transform: rarely on a line
        return _off_line(v.shape, v.dtype, 16) * 0 + v, (_off_line((50,), np.float32, 48), "meta")

    packed, (sums, meta) = shared_weights(w, ("test", 1), make)
    assert packed.ctypes.data % LINE == 0 and sums.ctypes.data % LINE == 0 and meta == "meta"
    np.testing.assert_array_equal(packed, w)
    again = shared_weights(w, ("test", 1), make)
    assert again[0] is packed  # one transform per weight array and tag
    del w, packed, sums, again
    gc.collect()
    assert not any(k[1] == ("test", 1) for k in conv_shared._SHARED_WEIGHTS)


def test_a_nets_packed_weights_start_on_lines():
    """Every array of 4 KiB or more that a Net's prepared calls read (packed weights, Winograd's U, arena
    views) starts on a cache line, but for the model's own initializers, which kernels may read in place
    (the grouped 3x3 Conv here: its NCHW kernel reads W): aligning those would copy the weights beside the
    Graph's, twice their memory."""
    from tests.ops.test_nchwc import _chain_model

    model = _chain_model(c=64, n=1)
    net = Net(Program(load_onnx(model)))
    x = np.random.default_rng(1).standard_normal(tuple(d.dim_value for d in model.graph.input[0].type.tensor_type
                                                         .shape.dim)).astype(np.float32)
    net.forward({model.graph.input[0].name: x})
    found = []

    def walk(o, depth=0):
        if depth > 12:
            return
        if isinstance(o, np.ndarray):
            if o.nbytes >= 4096:
                found.append(o)
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v, depth + 1)
        elif hasattr(o, "args") and isinstance(o.args, tuple):
            walk(o.args, depth + 1)
        elif hasattr(o, "calls"):
            walk(o.calls, depth + 1)

    for layout in net._layouts._layouts.values():
        walk(layout.run)
    own = {id(a) for a in net.program.weights.values()}
    found = [a for a in found if id(a) not in own and id(a.base) not in own]
    assert len(found) >= 4, "no prepared call's arrays found"
    assert [(a.shape, a.dtype) for a in found if a.ctypes.data % LINE] == []
