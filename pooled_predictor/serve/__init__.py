"""Scale-out on Ray Serve: a deployment whose replicas each hold a PooledPredictor.

    from pooled_predictor.serve import application
    app = application(Config(model_paths=[det, rec], num_threads=2, max_batch_size=[0, 16]),
                      num_replicas=2)
    handle = ray.serve.run(app, route_prefix="/pool")
    outputs = handle.forward.remote({"x": x}, net_id=1).result()   # numpy in, numpy out

Needs the `ray` extra (ray[serve]); ray is imported only in this package.
"""

from .deployment import PoolDeployment, application, ndarray_from_json, ndarray_to_json

__all__ = ["PoolDeployment", "application", "ndarray_from_json", "ndarray_to_json"]
