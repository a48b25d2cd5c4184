"""pooled-predictor: serve neural-network inference to many threads at once.

Public API:

    Predictor            one model; a Net per calling thread over shared weights
    PooledPredictor      worker threads fed by a bounded job queue; forward() -> Future
    PinnedPooledPredictor, Config, Callback
    Future               concurrent.futures.Future with then(); collect()
    Net, Program, Optimization
    load_onnx            ONNX path | bytes | ModelProto -> Graph
    load_caffe           Caffe prototxt + caffemodel (or HDF5) -> Graph
    errors               PooledPredictorError and its subclasses

Layers, lowest first. A module imports only modules of its own layer or of lower ones,
at its top (never inside a function), with no circle; tests/test_layers.py checks it:

    errors, budget, ir,  the exception tree, the memory budget, the graph IR and its dtypes,
    contrib_schemas      onnxruntime's com.microsoft op schemas, registered with onnx when first needed
    ops | importers      kernels, shape rules, the registry, Step | ONNX and Caffe -> Graph
                         (peers that never import each other; numba only in ops/cpu/compiled)
    passes               Graph -> Graph rewrites and kernel-type assignment
    engine               Program, the layout pipeline (layout, arena, layout_cache), Device,
                         InputSpec, control flow, Net, profiling
    serving              Predictor, PooledPredictor and its workers, job queue, futures,
                         batching, stats, Prometheus, BLAS limits, Paddle handles, onnx.backend
    serve, zoo, apps, cli   Ray Serve (ray only there), model fetchers and builders, demos

memory_opt is a package of its own and imports nothing of pooled_predictor. Optional
third-party packages (cupy, ray, h5py, prometheus-client) are imported where used.
"""

import gc as _gc
import importlib as _importlib

# The import creates some 40,000 tracked objects and no garbage: the collector's full passes over them
# (two of 40 ms each, issue 31) are skipped while it runs, and it is left as it was found.
_gc_was_enabled = _gc.isenabled()
_gc.disable()
try:
    from .errors import (DeadlineExceededError, FetchError, InputError, KernelError, ModelLoadError,
                         PoolClosedError, PooledPredictorError, QueueFullError, ResourceExhaustedError,
                         ShapeInferenceError,
                         UnknownBlobError, UnknownNetError, UnsupportedOpError)
    from .importers import load_caffe, load_onnx
    from .engine.net import Net, Optimization
    from .serving.predictor import Predictor
    from .engine.program import Program
finally:
    if _gc_was_enabled:
        _gc.enable()

__version__ = "0.1.0"

# Names imported on first use (PEP 562), not with the package: the pool, its workers and futures
# (serving.pool, serving.futures, concurrent.futures and logging's handlers: 20-40 ms of the import, which a
# process that only runs a Predictor never needs; issue 31). tests/test_layers.py reads this table as
# imports at the package's top: the layers and the no-circle rule apply to it as to the imports above.
_LAZY = {
    "Callback": ".serving.pool", "Config": ".serving.pool", "PinnedPooledPredictor": ".serving.pool",
    "PooledPredictor": ".serving.pool", "Future": ".serving.futures", "collect": ".serving.futures",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Callback", "Config", "DeadlineExceededError", "FetchError", "Future", "InputError", "KernelError",
    "ModelLoadError", "Net", "Optimization", "PinnedPooledPredictor", "PoolClosedError",
    "PooledPredictor", "PooledPredictorError", "Predictor", "Program", "QueueFullError",
    "ResourceExhaustedError",
    "ShapeInferenceError", "UnknownBlobError", "UnknownNetError", "UnsupportedOpError", "collect",
    "load_caffe", "load_onnx",
]
