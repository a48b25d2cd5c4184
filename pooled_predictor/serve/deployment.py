"""The Ray Serve deployment of a PooledPredictor.

Division of labour: inside each replica, the pool's queue, admission and
dynamic batching (Config.max_batch_size...) as anywhere else; outside, Ray
Serve routes requests to replicas, scales their number (autoscaling_config)
and applies back-pressure (max_ongoing_requests per replica, then
max_queued_requests per caller, then Ray Serve's BackPressureError / HTTP 503).
By default max_ongoing_requests is the pool's queue capacity plus its threads,
so Ray Serve holds requests back exactly when the pool would make them wait.

Models are read once per node: with ship_models (the default) the caller
reads each model file once and puts its bytes into Ray's object store; every
replica gets them from its node's object store (copied to a node once, shared
there). The caller owns those objects: a deployment that must outlive it uses
ship_models=False, and each replica then reads Config.model_paths on its own
node (a shared or replicated filesystem).

Requests: over a Ray handle, `handle.forward.remote(inputs, net_id=..., output_names=...,
priority=..., deadline=...)` with numpy arrays in and a dict of numpy arrays
out (Ray's own serialization); over HTTP, a JSON POST
`{"net_id": 1, "inputs": {"x": NDARRAY}, "output_names": [...], "priority": 0, "deadline": 0.5}`
answered with `{"outputs": {"y": NDARRAY}}`, where NDARRAY is
`{"array": nested lists, "shape": [...], "dtype": "float32"}`, the schema of
Ray Serve's former `http_adapters.json_to_ndarray`. Bad input is HTTP 400, a
full pool (admission="fail") or a closed one 503, other errors 500.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import ray
from ray import serve

from ..errors import InputError, PoolClosedError, QueueFullError
from ..serving.pool import Config, PooledPredictor


def ndarray_from_json(obj) -> np.ndarray:
    """An NDARRAY JSON object (array, shape, dtype) or plain nested lists as an ndarray.

    Raises:
        InputError: not an array description.
    """
    if isinstance(obj, dict):
        if "array" not in obj:
            raise InputError(f"an input must be nested lists or {{'array', 'shape', 'dtype'}}, got keys {sorted(obj)}")
        try:
            a = np.asarray(obj["array"], dtype=np.dtype(obj.get("dtype", "float32")))
            return a.reshape(obj["shape"]) if "shape" in obj else a
        except (TypeError, ValueError) as exc:
            raise InputError(f"bad array in request: {exc}") from None
    try:
        return np.asarray(obj, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InputError(f"bad array in request: {exc}") from None


def ndarray_to_json(a: np.ndarray) -> dict:
    """The NDARRAY JSON object of an array: {"array": nested lists, "shape": [...], "dtype": str}."""
    return {"array": a.tolist(), "shape": list(a.shape), "dtype": str(a.dtype)}


class PoolDeployment:
    """One Ray Serve replica: a PooledPredictor and the methods requests call.

    Args:
        config: the Config every replica builds its pool from; model_bytes may
            hold ray ObjectRefs (shipped models), fetched here.
        threads: worker threads of this replica's pool (None: config.num_threads).
    """

    def __init__(self, config: Config, threads: int | None = None):
        models = list(config.model_bytes)
        refs = [i for i, m in enumerate(models) if isinstance(m, ray.ObjectRef)]
        if refs:
            for i, data in zip(refs, ray.get([models[i] for i in refs])):
                models[i] = data
        config = dataclasses.replace(config, model_bytes=models,
                                     num_threads=int(threads or config.num_threads))
        self.pool = PooledPredictor(config)

    async def forward(self, inputs, net_id: int = 0, output_names: Sequence[str] | None = None, *,
                      priority: int = 0, deadline: float | None = None) -> dict[str, np.ndarray]:
        """One inference job on this replica's pool (see PooledPredictor.forward)."""
        return await self.pool.forward_async(inputs, output_names, net_id, priority=priority, deadline=deadline)

    async def __call__(self, request) -> Any:
        """HTTP: a JSON request (see the module docstring)."""
        from starlette.responses import JSONResponse

        try:
            body = await request.json()
            if not isinstance(body, dict) or not isinstance(body.get("inputs"), dict):
                raise InputError('the request must be a JSON object with "inputs": {name: array}')
            inputs = {k: ndarray_from_json(v) for k, v in body["inputs"].items()}
            outputs = await self.forward(inputs, int(body.get("net_id", 0)), body.get("output_names"),
                                         priority=int(body.get("priority", 0)), deadline=body.get("deadline"))
        except (InputError, ValueError, TypeError) as exc:
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=400)
        except (QueueFullError, PoolClosedError) as exc:
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=503)
        except Exception as exc:  # a job's own failure (KernelError...) or a deadline
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)
        return {"outputs": {k: ndarray_to_json(v) for k, v in outputs.items()}}

    def describe(self) -> list[dict]:
        """Per model: input and output names, dtypes and shapes, and the ONNX metadata_props."""
        out = []
        for i in range(self.pool.net_count):
            p = self.pool.predictor(i)
            value = lambda v: {"name": v.name, "dtype": None if v.dtype is None else str(v.dtype),  # noqa: E731
                               "shape": None if v.shape is None else [d if isinstance(d, int) else str(d)
                                                                      for d in v.shape]}
            out.append({"net_id": i, "inputs": [value(v) for v in p.inputs],
                        "outputs": [value(v) for v in p.outputs], "metadata": dict(p.graph.metadata)})
        return out

    def stats(self) -> dict:
        """This replica's pool stats (StatsSnapshot.to_dict()) and its replica id."""
        return {"replica": serve.get_replica_context().replica_id.unique_id, **self.pool.stats().to_dict()}

    def __del__(self):
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.close(wait=False)


def application(config: Config, *, num_replicas: int | str | None = 1, threads_per_replica: int | None = None,
                autoscaling_config: dict | None = None, max_ongoing_requests: int | None = None,
                max_queued_requests: int = -1, ray_actor_options: dict | None = None,
                ship_models: bool = True, name: str = "PooledPredictor"):
    """A Ray Serve Application serving `config`'s models (give it to serve.run).

    Args:
        config: what each replica's pool serves and how (batching, admission...).
        num_replicas: replicas (or "auto"); ignored when autoscaling_config is given.
        threads_per_replica: pool threads per replica (default config.num_threads).
        autoscaling_config: Ray Serve's (min_replicas, max_replicas,
            target_ongoing_requests, ...).
        max_ongoing_requests: requests a replica takes at once (default: the
            pool's queue capacity plus its threads).
        max_queued_requests: requests a caller queues before Ray Serve refuses
            them (-1: no limit).
        ray_actor_options: per replica (default {"num_cpus": 1}).
        ship_models: read the model files here once and ship them (or the
            model_bytes) through the object store, once per node; False:
            replicas read model_paths themselves.
        name: the deployment's name.
    Returns:
        ray.serve Application.
    Raises:
        ValueError: an inconsistent Config.
    """
    config.validate()
    threads = int(threads_per_replica or config.num_threads)
    if ship_models:
        if not ray.is_initialized():
            ray.init()
        if config.model_paths:
            sources = [_read_model(p) for p in config.model_paths]
        else:
            sources = list(config.model_bytes)
        refs = [s if isinstance(s, ray.ObjectRef) else ray.put(s) for s in sources]
        config = dataclasses.replace(config, model_paths=(), model_bytes=refs)
    capacity = int(config.queue_capacity or threads)
    options: dict = {"name": name, "max_ongoing_requests": int(max_ongoing_requests or capacity + threads),
                     "max_queued_requests": max_queued_requests,
                     "ray_actor_options": dict(ray_actor_options or {"num_cpus": 1})}
    if autoscaling_config is not None:
        options["autoscaling_config"] = autoscaling_config
    else:
        options["num_replicas"] = num_replicas
    return serve.deployment(PoolDeployment).options(**options).bind(config, threads)


def _read_model(path):
    """A model_paths entry as the matching model_bytes entry: an ONNX file's bytes, or a
    Caffe (prototxt, caffemodel) pair as (text, bytes)."""
    if isinstance(path, (tuple, list)):
        prototxt, weights = path
        with open(prototxt, encoding="utf-8") as f, open(weights, "rb") as g:
            return f.read(), g.read()
    with open(path, "rb") as f:
        return f.read()
