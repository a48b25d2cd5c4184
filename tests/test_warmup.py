"""Warm-up: Predictor.warmup, Config.warmup and `pooled-predictor warmup` pay the first forward's costs."""

import sys

import numpy as np
import onnx

from pooled_predictor import Predictor
from pooled_predictor.serving.pool import Config, PooledPredictor
from tests.conftest import make_mlp
from tests.test_cli import cli


def test_predictor_warmup_lays_out_and_loads_compiled_kernels():
    p = Predictor(make_mlp())
    assert p.canonical_net.layouts_built == 0
    seconds = p.warmup({"x": (3, 16)})
    assert seconds > 0 and p.canonical_net.input_shapes == {"x": (3, 16)}
    assert p.canonical_net.layout.tier == "compiled"  # not the numpy reference the tiered start serves first
    assert "numba" in sys.modules and "pooled_predictor.ops.cpu.compiled.epilogue" in sys.modules  # its Relu


def test_pool_warmup_uses_given_or_declared_shapes(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(make_mlp(), path)
    config = Config(model_paths=[path, path], warmup=True, warmup_shapes=[{"x": (5, 16)}])
    with PooledPredictor(config) as pool:
        assert pool.predictor(0).canonical_net.input_shapes == {"x": (5, 16)}
        assert pool.predictor(1).canonical_net.input_shapes == {"x": (1, 16)}  # symbolic N as 1
        x = np.ones((2, 16), np.float32)
        np.testing.assert_allclose(pool.forward({"x": x}).result()["y"], Predictor(path).run(None, {"x": x})[0])


def test_cli_warmup(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(make_mlp(), path)
    proc = cli("warmup", path, "--shape", "x=2x16")
    assert proc.returncode == 0, proc.stderr
    # only the kernels the model calls are compiled (no MODEL: every kernel, minutes on a fresh machine)
    assert "compiling the kernels each model calls" in proc.stdout and "first forward" in proc.stdout


def test_numba_cache_goes_under_the_user_cache_when_the_package_is_read_only(monkeypatch, tmp_path):
    from pooled_predictor.ops.cpu import compiled

    monkeypatch.setattr(compiled.os, "access", lambda path, mode: False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compiled.cache_dir() == tmp_path / "pooled-predictor" / "numba"
    monkeypatch.undo()
    assert compiled.cache_dir() is None  # this checkout is writable: numba caches beside the package
