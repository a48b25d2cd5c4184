"""Predictor: the three forward forms, one Net per thread, consistency across threads."""

import threading

import numpy as np
import pytest

from pooled_predictor import InputError, Predictor, UnknownBlobError
from tests.conftest import make_mlp, mlp_reference


def test_three_forward_forms_and_ort_run():
    from pooled_predictor import Optimization
    model = make_mlp()
    # NONE and no graph passes: every intermediate blob of the model stays readable
    p = Predictor(model, optimization=Optimization.NONE, graph_optimization_level="none")
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    ref = mlp_reference(model, x)
    (y,) = p.forward([x], ["y"])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    out = [np.empty((4, 10), np.float32)]
    assert p.forward([x], ["y"], out) is out
    np.testing.assert_array_equal(out[0], y)
    blobs = p.forward([x])
    assert {"x", "h0", "h1", "h2", "logits", "y"} <= set(blobs) and "w1" not in blobs
    np.testing.assert_array_equal(blobs["y"], y)
    np.testing.assert_array_equal(p.run(None, {"x": x})[0], y)
    y[:] = 0  # outputs are copies
    np.testing.assert_array_equal(p.forward([x], ["y"])[0], blobs["y"])


def test_out_form_checks_shapes():
    p = Predictor(make_mlp())
    x = np.zeros((4, 16), np.float32)
    with pytest.raises(InputError, match="shape"):
        p.forward([x], ["y"], [np.empty((3, 10), np.float32)])
    with pytest.raises(UnknownBlobError):
        p.forward([x], ["nope"])


def test_consistent_across_threads():
    """fb-caffe-exts' PredictorTest.ConsistentAcrossThreads, with all three forms."""
    model = make_mlp()
    p = Predictor(model)
    x = np.random.default_rng(4).uniform(-1000, 1000, (2, 16)).astype(np.float32)
    single = p.forward([x], ["y"])[0]
    results, errors = [], []

    def worker():
        try:
            for _ in range(10):
                a = p.forward([x], ["y"])[0]
                b = [np.empty_like(a)]
                p.forward([x], ["y"], b)
                c = p.forward([x])["y"]
                results.append((a, b[0], c))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 40
    for triple in results:
        for r in triple:
            np.testing.assert_array_equal(r, single)
    assert p.thread_net_count == 5  # the main thread and four workers, each its own Net


def test_run_takes_any_mapping_refuses_the_rest_and_returns_copies():
    """onnxruntime's run(): a dict or any other Mapping feeds it (dict checked first, cheaply); anything
    else is an InputError; the outputs are the caller's copies, not the Net's blobs."""
    import types
    from collections import OrderedDict

    p = Predictor(make_mlp())
    x = np.random.default_rng(5).standard_normal((2, 16)).astype(np.float32)
    (y,) = p.run(["y"], {"x": x})
    for feed in (OrderedDict(x=x), types.MappingProxyType({"x": x})):
        np.testing.assert_array_equal(p.run(["y"], feed)[0], y)
    for bad in ([x], x, (("x", x),)):
        with pytest.raises(InputError, match="input_feed must be a dict"):
            p.run(["y"], bad)
    y2 = p.run(["y"], {"x": x})[0]
    y2[:] = 0
    np.testing.assert_array_equal(p.run(None, {"x": x})[0], y)
