"""The reference tier's Winograd F(2x2, 3x3) convolution (ops/cpu/winograd_reference.py, issue 31).

A tiered Net's reference layout takes it for 3x3 stride-1 convolutions with enough channels; the
plain numpy reference (compiled kernels off) stays im2col. Checked against onnxruntime, and against
the direct sum of the transformed weights' definition.
"""

from __future__ import annotations

import numpy as np
import pytest

from pooled_predictor.ops.cpu import compiled, reference_split, winograd_reference
from tests.test_warm_start import _conv_kernel


def _expected(x, w, b, attrs):
    import onnxruntime

    from tests.onnx_helpers import make_node_model, run_ort

    onnxruntime.set_default_logger_severity(3)
    inputs = [x, w] if b is None else [x, w, b]
    return run_ort(make_node_model("Conv", inputs, attrs, opset=13, static=tuple(range(1, len(inputs)))),
                   {"in0": x})[0]


CASES = [  # (N, C, M, H, W, pads): even and odd outputs, asymmetric and wide pads, several bands
    (1, 64, 128, 20, 20, [1, 1, 1, 1]),
    (2, 128, 80, 23, 21, [1, 0, 1, 2]),
    (1, 128, 64, 25, 22, [2, 1, 0, 3]),
    (1, 64, 136, 40, 24, [1, 1, 1, 1]),
    (1, 96, 96, 24, 23, [0, 0, 0, 0]),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_the_reference_tier_winograd_agrees_with_onnxruntime(case, threads, bias, monkeypatch):
    n, c, m, h, wd, pads = case
    rng = np.random.default_rng(sum(case[:5]))
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    for a in (w, b):
        if a is not None:
            a.flags.writeable = False  # weights are read-only, as a Net holds them
    attrs = {"pads": pads}
    expected = _expected(x, w, b, attrs)
    monkeypatch.setattr(compiled, "ENABLED", True)
    monkeypatch.setattr(reference_split, "THREADS", threads)
    monkeypatch.setattr(winograd_reference, "BAND_BYTES", 16 * c * 8 * 4 * 2)  # bands of few tile rows
    ran = []
    real = reference_split.parallel
    monkeypatch.setattr(reference_split, "parallel", lambda fn, blocks: ran.append(len(blocks)) or real(fn, blocks))
    with compiled.reference_kernels():
        kernel, shape = _conv_kernel(x, w, b, attrs) if b is not None else _conv_kernel_no_bias(x, w, attrs)
    assert kernel.path == "winograd_reference"
    for _ in range(2):  # the scratch holds NaN before the first call: never read unwritten
        out = np.full(shape, np.nan, np.float32)
        kernel(x, w, b, out=out)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
    assert bool(ran) == (threads > 1)  # the bands went over the threads where there are several


def _conv_kernel_no_bias(x, w, attrs):
    from pooled_predictor.ir import Node
    from pooled_predictor.ops.context import OpContext
    from pooled_predictor.ops.cpu.conv import Conv
    from pooled_predictor.ops.shapes import get_rule

    def scratch(ref):
        ref.array = np.full(ref.shape, np.nan, ref.dtype)

    node = Node("Conv", ["x", "w"], ["y"], dict(attrs), "", "conv0")
    ctx = OpContext(node, 13, [x.shape, w.shape], [x.dtype] * 2, [None, w], "cpu", scratch)
    (shape, dtype), = get_rule("Conv")(ctx)
    ctx.out_shapes, ctx.out_dtypes = [shape], [dtype]
    return Conv(ctx, **attrs), shape


def test_only_the_tiered_reference_layout_takes_it(monkeypatch):
    """Compiled kernels off (the plain numpy reference, the tested oracle): im2col. Too few channels,
    a small plane, stride 2, a 5x5 kernel or groups: im2col in the reference tier too."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((128, 128, 3, 3)).astype(np.float32)
    b = rng.standard_normal(128).astype(np.float32)
    x = rng.standard_normal((1, 128, 24, 24)).astype(np.float32)
    monkeypatch.setattr(compiled, "ENABLED", False)
    assert _conv_kernel(x, w, b, {"pads": [1, 1, 1, 1]})[0].path == "im2col"
    monkeypatch.setattr(compiled, "ENABLED", True)
    with compiled.reference_kernels():
        assert _conv_kernel(x, w, b, {"pads": [1, 1, 1, 1]})[0].path == "winograd_reference"
        assert _conv_kernel(x, w, b, {"pads": [1, 1, 1, 1], "strides": [2, 2]})[0].path == "im2col"
        assert _conv_kernel(x[:, :32], w[:, :32], b, {"pads": [1, 1, 1, 1]})[0].path == "im2col"
        assert _conv_kernel(x[:, :64], w[:64, :64], b[:64], {"pads": [1, 1, 1, 1]})[0].path == "im2col"
        assert _conv_kernel(x[..., :12, :12], w, b, {"pads": [1, 1, 1, 1]})[0].path == "im2col"
        assert _conv_kernel(x, w[:, :64], b, {"pads": [1, 1, 1, 1], "group": 2})[0].path == "im2col"
        w5 = rng.standard_normal((128, 128, 5, 5)).astype(np.float32)
        assert _conv_kernel(x, w5, b, {"pads": [2, 2, 2, 2]})[0].path == "im2col"


def test_transform_weights_is_g_w_g_transposed():
    """U[4a + b][m, c] = (G g_mc G^T)[a, b], G of F(2x2, 3x3) (Lavin and Gray 2016), from strided weights."""
    g = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    rng = np.random.default_rng(2)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    wide = np.zeros((5, 6, 3, 3), np.float32)
    wide[:, ::2] = w  # not C-contiguous
    u = winograd_reference.transform_weights(wide[:, ::2])
    want = np.einsum("ai,mcij,bj->abmc", g, w.astype(np.float64), g).reshape(16, 5, 3)
    np.testing.assert_allclose(u, want, rtol=1e-6, atol=1e-6)


def test_parallel_runs_every_block_or_none():
    got = []
    assert reference_split.parallel(lambda i: got.append(i), [(i,) for i in range(2)]) == (reference_split.THREADS >= 2)
    assert sorted(got) == ([0, 1] if reference_split.THREADS >= 2 else [])
    got.clear()
    assert not reference_split.parallel(lambda i: got.append(i), [(i,) for i in range(reference_split.THREADS + 1)])
    assert not got
    with reference_split.background_job():  # a compile job runs: the caller does the work itself
        assert not reference_split.parallel(lambda i: got.append(i), [(0,), (1,)])
    assert not got
