"""The vectorized float32 erf, and the float32 expit, against scipy in float64."""

import numpy as np
from scipy import special

from pooled_predictor.ops.cpu._special import erf_float32, erf_workspace_shape, expit
from pooled_predictor.ops.cpu.compiled import epilogue


def test_erf_float32_within_7_ulp_everywhere():
    xs = np.concatenate([np.linspace(-6, 6, 1_000_001), np.geomspace(1e-30, 6, 50_000),
                         -np.geomspace(1e-30, 6, 50_000), [0.0, np.inf, -np.inf]]).astype(np.float32)
    out = np.empty_like(xs)
    erf_float32(xs, out, np.empty(erf_workspace_shape(xs.size), np.float32))
    exact = special.erf(xs.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    ulps = np.abs(out - exact) / np.maximum(ulp, np.finfo(np.float32).smallest_subnormal)
    assert ulps.max() <= 7.0, (ulps.max(), xs[ulps.argmax()])
    assert np.all(np.abs(out) <= 1)


def test_erf_float32_in_place_chunked_and_scaled():
    x = np.random.default_rng(0).standard_normal((3, 70_001)).astype(np.float32) * 3
    want = special.erf(x.astype(np.float64) / np.sqrt(2))
    work = np.empty(erf_workspace_shape(1000), np.float32)  # many chunks
    erf_float32(x, x, work, scale=1 / np.sqrt(2))
    assert np.abs(x - want).max() < 5e-7


def test_nan_propagates():
    x = np.array([np.nan, 1.0], np.float32)
    erf_float32(x, x, np.empty(erf_workspace_shape(2), np.float32))
    assert np.isnan(x[0]) and abs(x[1] - special.erf(1.0)) < 1e-6


def test_expit_float32_is_the_float64_value_rounded_in_place_and_chunked():
    xs = np.concatenate([np.linspace(-120, 120, 200_001), np.geomspace(1e-30, 100, 20_000),
                         [0.0, -0.0, np.inf, -np.inf, 3e38, -3e38, np.nan]]).astype(np.float32)
    exact = special.expit(xs.astype(np.float64)).astype(np.float32)  # float64, rounded once
    out = np.empty_like(xs)
    expit(xs, out)
    np.testing.assert_array_equal(out, exact)
    expit(xs, xs)  # in place, across chunks
    np.testing.assert_array_equal(xs, exact)


def test_expit_other_dtypes_and_strided_outputs_are_scipys():
    x = np.linspace(-5, 5, 11)
    out = np.empty_like(x)
    expit(x, out)
    np.testing.assert_array_equal(out, special.expit(x))
    x32 = np.linspace(-5, 5, 20).astype(np.float32)
    strided = np.zeros(40, np.float32)[::2]
    expit(x32, strided)
    np.testing.assert_allclose(strided, special.expit(x32.astype(np.float64)), rtol=3e-7)


def test_compiled_erf_is_erf_float32():
    """compiled/epilogue.py's erf_flat and erf_inplace (the Erf node's compiled passes): erf_float32's bits,
    over normals, the clamp's neighbourhood, +-0, +-inf and NaN."""
    x = np.concatenate([np.random.default_rng(5).standard_normal(5000).astype(np.float32) * 3,
                        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.9, -3.9, 4.0, 1e-30], np.float32)])
    ref = np.empty_like(x)
    erf_float32(x, ref, np.empty(erf_workspace_shape(x.size), np.float32))
    y = np.full_like(x, 7.0)
    epilogue.erf_flat(x, y)
    z = x.copy()
    epilogue.erf_inplace(z)
    for got in (y, z):
        assert np.array_equal(got.view(np.int32), ref.view(np.int32)) or np.array_equal(got, ref, equal_nan=True)
