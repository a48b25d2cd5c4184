"""The pieces of compiled/recurrent.py: the small-row GEMM over packed panels (every tile shape, panel
tails, groups), the float32 Tanh and Sigmoid against float64, the other activations against the numpy loops' ones."""

import numpy as np
import pytest

from pooled_predictor.ops.cpu.compiled import recurrent as loops
from pooled_predictor.ops.cpu.compiled.matmul import pack_right

rng = np.random.default_rng(5)


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 7, 8, 9, 13])
@pytest.mark.parametrize("k_n,n_n", [(1, 16), (7, 5), (16, 64), (33, 100), (64, 256), (128, 384), (40, 200)])
def test_small_gemm(rows, k_n, n_n):
    """Y = A @ B for tiles of 1 to 4 rows over 1, 2 or 4 panels, a partial last panel, several groups;
    each output a float32 multiply-add chain over k (BLAS's error bound)."""
    a = rng.standard_normal((rows, k_n)).astype(np.float32)
    b = rng.standard_normal((k_n, n_n)).astype(np.float32)
    y = np.full((rows, n_n), np.nan, np.float32)
    loops.small_gemm(a.reshape(-1), rows, k_n, pack_right(b, None), y.reshape(-1), n_n,
                     np.empty(loops.MS, np.float32))
    ref = a.astype(np.float64) @ b
    bound = k_n * 2.0 ** -23 * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-30
    assert np.all(np.abs(y - ref) <= bound)


def _map(code, x):
    """x through activation `code` (act_range, in place on a copy)."""
    out = x.copy()
    loops.act_range(out, 0, out.size, loops.act_table([[(code, 0.0, 0.0)]]), 0)
    return out


def test_tanh32_error():
    """At most 5 ulp and 3e-7 absolute over [-12, 12] and 1e-30..1, within [-1, 1], NaN kept, +-1 from
    |x| = 9 on (the module docstring's figures)."""
    x = np.concatenate([np.linspace(-12, 12, 400_001, dtype=np.float32),
                        np.geomspace(1e-30, 1, 20_000).astype(np.float32),
                        np.array([np.nan, np.inf, -np.inf], np.float32)])
    y = _map(loops.TANH, x)
    ref = np.tanh(x.astype(np.float64))
    finite = np.isfinite(x)
    ulp = np.abs(y[finite] - ref[finite]) / np.spacing(np.abs(ref[finite]).astype(np.float32)).astype(np.float64)
    assert ulp.max() <= 5 and np.abs(y[finite] - ref[finite]).max() <= 3e-7 and np.abs(y[finite]).max() <= 1
    assert np.isnan(y[-3]) and y[-2] == 1 and y[-1] == -1


def test_sigmoid32_error():
    """Sigmoid = 0.5 + 0.5 tanh(x / 2): at most 1.8e-7 absolute over [-40, 40], within [0, 1]."""
    x = np.linspace(-40, 40, 400_001, dtype=np.float32)
    y = _map(loops.SIGMOID, x)
    ref = 1 / (1 + np.exp(-x.astype(np.float64)))
    assert np.abs(y - ref).max() <= 1.8e-7 and y.min() >= 0 and y.max() <= 1


@pytest.mark.parametrize("code,alpha,beta", [(0, 0, 0), (3, 1.5, 0.25), (4, 0.1, 0), (5, 0.5, 0), (6, 1.5, 0.7),
                                             (7, 0.2, 0.5), (8, 0.9, 0), (9, 0, 0), (10, 0, 0)])
def test_other_activations_match_numpy(code, alpha, beta):
    """The spec's other activations (act_scalar, element by element) as recurrent_cell.activate computes them."""
    from pooled_predictor.ops.cpu.recurrent_cell import activate

    x = np.linspace(-30, 30, 2001, dtype=np.float32)
    ours = x.copy()
    loops.act_range(ours, 0, x.size, loops.act_table([[(code, alpha, beta)]]), 0)
    ref = x.astype(np.float64)
    activate(ref, (code, alpha, beta))
    np.testing.assert_allclose(ours, ref, rtol=2e-6, atol=3e-7)
