"""pooled_predictor.serve on a local Ray instance: two replicas, Ray handles and HTTP (127.0.0.1)."""

import json
import socket
import urllib.error
import urllib.request

import numpy as np
import pytest

serve = pytest.importorskip("ray.serve")
ray = pytest.importorskip("ray")

from pooled_predictor import Config, InputError  # noqa: E402
from pooled_predictor.serve import application, ndarray_from_json, ndarray_to_json  # noqa: E402
from tests.conftest import make_mlp, mlp_reference  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("serve") / "mlp.onnx"
    path.write_bytes(make_mlp().SerializeToString())
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    app = application(Config(model_paths=[path], num_threads=1, max_batch_size=8, max_queue_delay=0.002),
                      num_replicas=2, ray_actor_options={"num_cpus": 0.5})
    handle = serve.run(app, name="mlp", route_prefix="/mlp")
    yield handle, f"http://127.0.0.1:{port}/mlp"
    serve.shutdown()
    ray.shutdown()


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_handles_numpy_in_and_out_on_both_replicas(served):
    handle, _ = served
    xs = [np.random.default_rng(i).standard_normal((1 + i % 3, 16)).astype(np.float32) for i in range(24)]
    responses = [handle.forward.remote({"x": x}, net_id=0, priority=i % 2) for i, x in enumerate(xs)]
    model = make_mlp()
    for x, r in zip(xs, responses):
        np.testing.assert_allclose(r.result(timeout_s=60)["y"], mlp_reference(model, x), rtol=1e-5, atol=1e-6)
    seen = {}
    for _ in range(20):
        s = handle.stats.remote().result(timeout_s=60)
        seen[s["replica"]] = s["total"]["completed"]
    assert len(seen) == 2 and sum(seen.values()) >= 1  # two replicas answer
    with pytest.raises(InputError):   # a bad request fails with the pool's own error type
        handle.forward.remote({"x": xs[0].astype(np.float64)}).result(timeout_s=60)
    assert handle.describe.remote().result(timeout_s=60)[0]["inputs"][0]["shape"] == ["N", 16]


def test_http_json_numpy(served):
    _, url = served
    x = np.random.default_rng(5).standard_normal((2, 16)).astype(np.float32)
    status, body = post(url, {"net_id": 0, "inputs": {"x": ndarray_to_json(x)}})
    assert status == 200
    y = ndarray_from_json(body["outputs"]["y"])
    assert y.dtype == np.float32 and y.shape == (2, 10)
    np.testing.assert_allclose(y, mlp_reference(make_mlp(), x), rtol=1e-5, atol=1e-6)
    status, body = post(url, {"inputs": {"x": {"array": [[1.0] * 5], "shape": [1, 5]}}})
    assert status == 400 and "InputError" in body["error"]
    status, body = post(url, {"net_id": 3, "inputs": {"x": ndarray_to_json(x)}})
    assert status == 400 and "net_id 3" in body["error"]
