"""compiled/lrn.py: LRN across channels in float32, against the numpy kernel (the reference it replaces)
and onnxruntime, over sizes, betas (the sqrt paths and powf), ranks and batches."""

import numpy as np
import pytest

from pooled_predictor.ops.cpu import compiled
from pooled_predictor.ops.cpu.compiled.lrn import POW_05, POW_075, POW_1, POW_GENERAL, pow_mode
from tests.onnx_helpers import check_node, make_node_model, run_ours, type_outputs

rng = np.random.default_rng(29)


def _ulps(a, ref):
    return np.max(np.abs(a.astype(np.float64) - ref) / np.spacing(np.abs(ref).astype(np.float32)))


@pytest.mark.parametrize("shape", [(2, 7, 5, 6), (1, 64, 9, 11), (3, 4, 13), (2, 5)])
@pytest.mark.parametrize("size, beta", [(5, 0.75), (3, 0.5), (4, 1.0), (2, 0.6), (1, 0.75), (9, 0.75)])
def test_compiled_lrn_matches_the_numpy_kernel(shape, size, beta, monkeypatch):
    """The same sums as the numpy kernel; d^beta through sqrt for 0.75 and 0.5 (within 4 ulp of numpy's
    powf), and powf itself otherwise: the same bits where numpy's np.power is libm's powf, within 4 ulp
    where numpy dispatches its own AVX-512 powf (numpy's SIMD float32 power on AVX512_SKX hosts: 1-2 ulp
    apart on a Zen 5), and either way within 2 ulp of d^beta computed in float64."""
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    model = make_node_model("LRN", [x], {"size": size, "alpha": 0.05, "beta": beta, "bias": 1.5}, opset=13)
    type_outputs(model, [x])
    ours = run_ours(model, {"in0": x})[0]
    monkeypatch.setattr(compiled, "ENABLED", False)
    ref = run_ours(model, {"in0": x})[0]
    if pow_mode(beta) == POW_1:
        np.testing.assert_array_equal(ours, ref)
    else:
        assert _ulps(ours, ref) <= 4
    if pow_mode(beta) == POW_GENERAL:  # our powf itself, against float64
        x64 = x.astype(np.float64)
        sq = np.square(x64)
        half_lo, half_hi = (size - 1) // 2, size // 2  # ONNX LRN: channels c - floor((size-1)/2) .. c + ceil((size-1)/2)
        pad = np.pad(sq, [(0, 0), (half_lo, half_hi)] + [(0, 0)] * (x.ndim - 2))
        square_sum = sum(pad[:, i:i + x.shape[1]] for i in range(size))
        exact = x64 / (1.5 + 0.05 / size * square_sum) ** beta
        assert _ulps(ours, exact) <= 4  # the float32 sums, powf (1 ulp) and the division, each rounded


@pytest.mark.parametrize("attrs", [{"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},  # GoogLeNet's
                                   {"size": 3, "alpha": 0.5, "beta": 0.5, "bias": 2.0},
                                   {"size": 7, "alpha": 0.1, "beta": 0.3, "bias": 1.0}])
def test_compiled_lrn_against_onnxruntime(attrs):
    x = (rng.standard_normal((2, 24, 14, 14)) * 20).astype(np.float32)
    check_node("LRN", [x], attrs, opset=13, rtol=1e-5)


def test_pow_modes():
    assert [pow_mode(b) for b in (0.75, 0.5, 1.0, 0.7, 2.0)] == [POW_075, POW_05, POW_1, POW_GENERAL, POW_GENERAL]


@pytest.mark.parametrize("dtype, runs", [(np.float32, True), (np.float64, False), (np.float16, False)])
def test_the_compiled_kernel_runs_for_float32_only(dtype, runs, monkeypatch):
    from pooled_predictor.ops.cpu.compiled import lrn

    calls = []
    real = lrn.lrn_nchw
    monkeypatch.setattr(lrn, "lrn_nchw", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(compiled, "bound", lambda fn, *args: lambda: fn(*args))  # through the module attribute
    x = rng.standard_normal((1, 6, 4, 4)).astype(dtype)
    model = make_node_model("LRN", [x], {"size": 3}, opset=13)
    type_outputs(model, [x])
    run_ours(model, {"in0": x})
    assert bool(calls) == runs


@pytest.mark.parametrize("enabled", [True, False])
def test_an_absurd_size_costs_no_more_than_the_channels(enabled, monkeypatch):
    """size = 2^31 - 1 (a crafted model): every channel in every window, computed over the C channels' taps
    only, by the compiled kernel and by the numpy one (both looped over all 2^31 taps before)."""
    monkeypatch.setattr(compiled, "ENABLED", enabled)
    x = (rng.standard_normal((1, 5, 3, 3)) * 3).astype(np.float32)
    big = (1 << 31) - 1
    model = make_node_model("LRN", [x], {"size": big, "alpha": float(big), "beta": 1.0, "bias": 1.0}, opset=13)
    type_outputs(model, [x])
    ours = run_ours(model, {"in0": x})[0]
    ref = x / (1.0 + (x.astype(np.float64) ** 2).sum(axis=1, keepdims=True))  # every channel in every window
    np.testing.assert_allclose(ours, ref, rtol=1e-5)
