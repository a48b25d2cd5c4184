"""A warm start pays only for what a first forward needs (issue 31: warm first result <= 0.6 s).

Each check runs in a fresh interpreter, where `import pooled_predictor` is what a new process pays.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_fresh(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_the_pool_is_imported_on_first_use_and_every_public_name_resolves():
    """serving.pool and serving.futures (and concurrent.futures) come with the first use of their names,
    not with the package; every name of __all__ resolves, star-import included, to the defining module's."""
    run_fresh(
        "import sys, pooled_predictor as pp\n"
        "lazy = ('pooled_predictor.serving.pool', 'pooled_predictor.serving.futures')\n"
        "assert not [m for m in lazy if m in sys.modules], [m for m in lazy if m in sys.modules]\n"
        "assert set(pp.__all__) <= set(dir(pp))\n"
        "from pooled_predictor.serving import pool, futures\n"
        "assert pp.PooledPredictor is pool.PooledPredictor and pp.Config is pool.Config\n"
        "assert pp.Callback is pool.Callback and pp.PinnedPooledPredictor is pool.PinnedPooledPredictor\n"
        "assert pp.Future is futures.Future and pp.collect is futures.collect\n"
        "ns = {}\n"
        "exec('from pooled_predictor import *', ns)\n"
        "assert all(n in ns for n in pp.__all__), sorted(set(pp.__all__) - set(ns))\n"
        "try:\n"
        "    pp.NoSuchName\n"
        "except AttributeError as exc:\n"
        "    assert 'NoSuchName' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('an unknown name resolved')\n")


def test_a_lazy_name_resolves_from_any_thread():
    """The first use may come from several threads at once: each gets the one class."""
    run_fresh(
        "import threading, pooled_predictor as pp\n"
        "got = []\n"
        "ts = [threading.Thread(target=lambda: got.append(pp.PooledPredictor)) for _ in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "from pooled_predictor.serving.pool import PooledPredictor\n"
        "assert len(got) == 8 and all(g is PooledPredictor for g in got)\n")


def _conv_kernel(x, w, b, attrs):
    from pooled_predictor.ir import Node
    from pooled_predictor.ops.context import OpContext
    from pooled_predictor.ops.cpu.conv import Conv
    from pooled_predictor.ops.shapes import get_rule

    def scratch(ref):
        ref.array = np.full(ref.shape, np.nan, ref.dtype)

    node = Node("Conv", ["x", "w", "b"], ["y"], dict(attrs), "", "conv0")
    ctx = OpContext(node, 13, [x.shape, w.shape, b.shape], [x.dtype] * 3, [None, w, b], "cpu", scratch)
    (shape, dtype), = get_rule("Conv")(ctx)
    ctx.out_shapes, ctx.out_dtypes = [shape], [dtype]
    return Conv(ctx, **attrs), shape


@pytest.mark.parametrize("group", [1, 2])
def test_the_reference_tier_im2col_reads_conv_weights_as_stored(group, monkeypatch):
    """Issue 31: a tiered Net's reference layout serves a few first forwards; its im2col Conv reads W
    where it is (the model cache's mapped block) and adds B after the GEMM, instead of copying every
    weight into W [| B] (0.1 s of ResNet-50's warm first result). The steady numpy path keeps the
    folded bias. Both agree with onnxruntime."""
    import onnxruntime

    from pooled_predictor.ops.cpu import compiled
    from tests.onnx_helpers import make_node_model, run_ort

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 11, 9)).astype(np.float32)
    w = rng.standard_normal((6, 4 // group, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    w.flags.writeable = b.flags.writeable = False  # weights are read-only, as a Net holds them
    attrs = {"group": group, "pads": [1, 0, 1, 2], "strides": [2, 1]}
    onnxruntime.set_default_logger_severity(3)
    expected = run_ort(make_node_model("Conv", [x, w, b], attrs, opset=13, static=(1, 2)), {"in0": x})[0]

    monkeypatch.setattr(compiled, "ENABLED", True)
    with compiled.reference_kernels():
        short_lived, shape = _conv_kernel(x, w, b, attrs)
    monkeypatch.setattr(compiled, "ENABLED", False)  # no compiled kernels: the numpy path serves for good
    steady, _ = _conv_kernel(x, w, b, attrs)
    assert short_lived.path == steady.path == "im2col"
    assert not short_lived.fold_bias and np.shares_memory(short_lived.w_mat, w)
    assert steady.fold_bias and not np.shares_memory(steady.w_mat, w)
    for k in (short_lived, steady):
        for _ in range(2):  # scratch holds NaN before the first call: never read unwritten
            out = np.full(shape, np.nan, np.float32)
            k(x, w, b, out=out)
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
