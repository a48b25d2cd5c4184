"""The command line: run (throughput, --save-outputs), ops, zoo, inspect, and typed errors."""

import subprocess
import sys

import numpy as np
import onnx
import pytest

from tests.conftest import make_mlp, mlp_reference


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "pooled_predictor", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def test_run_with_input_and_saved_outputs(tmp_path):
    model = make_mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = cli("run", path, "--input", tmp_path / "x.npy", "--save-outputs", tmp_path / "out.npz",
               "--threads", 2, "--requests", 10)
    assert proc.returncode == 0, proc.stderr
    assert "req/s" in proc.stdout and "p50" in proc.stdout and "p99" in proc.stdout
    saved = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(saved["y"], mlp_reference(model, x), rtol=1e-5, atol=1e-6)


def test_run_with_random_inputs_and_symbolic_dims(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(make_mlp(), path)
    proc = cli("run", path, "--dim", "N=4", "--requests", 3)
    assert proc.returncode == 0, proc.stderr
    assert "input  x: float32 (4, 16)" in proc.stdout and "output y: float32 (4, 10)" in proc.stdout


def test_run_on_a_malformed_model_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    proc = cli("run", bad)
    assert proc.returncode == 2 and "ModelLoadError" in proc.stderr and "bad.onnx" in proc.stderr


def test_ops_lists_registered_ops():
    proc = cli("ops")
    assert proc.returncode == 0
    for op in ("Conv", "Resize", "Gemm", "TopK", "Einsum"):
        assert any(line.split()[0] == op for line in proc.stdout.splitlines() if line.strip())
    # which instruction sums the integer kernels' u8 x s8 products here (ops/int8_arithmetic.describe), then
    # whether the AMX kernels run (compiled/amx.status)
    lines = proc.stdout.splitlines()
    assert any(w in lines[-2] for w in ("vpmaddubsw", "vpdpbusd", "vpmaddwd"))
    assert lines[-1].startswith("AMX: ")


def test_zoo_writes_a_model(tmp_path):
    out = tmp_path / "sq.onnx"
    proc = cli("zoo", "squeezenet1_1", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "1,235,496 parameters" in proc.stdout
    onnx.checker.check_model(onnx.load(out))


@pytest.mark.parametrize("level", ["none", "all"])
def test_inspect_prints_counts_per_pass(ppocr, level):
    proc = cli("inspect", ppocr.rec, "--level", level)
    assert proc.returncode == 0, proc.stderr
    assert "Conv" in proc.stdout and "nodes" in proc.stdout
    if level == "all":
        assert "eliminate_identity" in proc.stdout


def test_demo_on_cuda_without_a_gpu_is_a_typed_error_before_any_download(monkeypatch, capsys):
    from pooled_predictor import cli
    from pooled_predictor.engine import device as device_mod
    from pooled_predictor.ops.cuda import runtime as cuda_runtime

    monkeypatch.setattr(cuda_runtime, "unavailable", lambda: "CuPy finds no CUDA device (test)")
    monkeypatch.setattr(device_mod, "_CUDA", {})
    monkeypatch.setattr(cli, "fetch_ppocr", lambda: pytest.fail("fetched models for a device that is missing"))
    assert cli.main(["demo", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "UnsupportedOpError" in err and "device 'cuda'" in err and "no CUDA device" in err
