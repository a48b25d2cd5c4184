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
"""

from .errors import (DeadlineExceededError, FetchError, InputError, KernelError, ModelLoadError,
                     PoolClosedError, PooledPredictorError, QueueFullError, ResourceExhaustedError,
                     ShapeInferenceError,
                     UnknownBlobError, UnknownNetError, UnsupportedOpError)
from .serving.futures import Future, collect
from .importers import load_caffe, load_onnx
from .engine.net import Net, Optimization
from .serving.pool import Callback, Config, PinnedPooledPredictor, PooledPredictor
from .serving.predictor import Predictor
from .engine.program import Program

__version__ = "0.1.0"

__all__ = [
    "Callback", "Config", "DeadlineExceededError", "FetchError", "Future", "InputError", "KernelError",
    "ModelLoadError", "Net", "Optimization", "PinnedPooledPredictor", "PoolClosedError",
    "PooledPredictor", "PooledPredictorError", "Predictor", "Program", "QueueFullError",
    "ResourceExhaustedError",
    "ShapeInferenceError", "UnknownBlobError", "UnknownNetError", "UnsupportedOpError", "collect",
    "load_caffe", "load_onnx",
]
