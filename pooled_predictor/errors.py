"""The exception tree.

Every error the library raises on purpose derives from `PooledPredictorError`,
so a caller can catch one root. Errors caused by the caller's input also derive
from the matching builtin (`ValueError`, `KeyError`, `TypeError`), as
concurrent.futures and numpy callers expect.

    PooledPredictorError
    |-- ModelLoadError          malformed, truncated or unreadable model file
    |-- UnsupportedOpError      ops (or attribute values) with no kernel here
    |-- InputError (ValueError) wrong input count, name, rank, shape or dtype
    |   |-- UnknownNetError     net_id not in the pool
    |   `-- UnknownBlobError    blob or output name not in the net (KeyError too)
    |-- ShapeInferenceError     shapes that contradict the model's operators
    |-- KernelError             a kernel failed while running a node
    |-- QueueFullError          admission refused: the job queue is full
    |-- PoolClosedError         forward() after close()
    |-- DeadlineExceededError   a job's deadline passed before a worker took it
    |-- ResourceExhaustedError (MemoryError) a model or request needs more than the memory budget
    `-- FetchError (OSError)    a real model or data file could not be fetched
"""

from __future__ import annotations


class PooledPredictorError(Exception):
    """Root of every error raised by pooled_predictor."""


class ModelLoadError(PooledPredictorError):
    """A model could not be read: missing, malformed, truncated or invalid file."""


class UnsupportedOpError(PooledPredictorError):
    """The model uses ops, versions or attribute values we have no kernel for.

    Attributes:
        missing: list of (op_type, domain, opset) triples, every one at once.
    """

    def __init__(self, message: str, missing=()):
        super().__init__(message)
        self.missing = list(missing)


class InputError(PooledPredictorError, ValueError):
    """The caller's inputs do not fit the model (count, names, rank, shape, dtype)."""


class UnknownNetError(InputError):
    """A net_id that the pool does not hold."""


class UnknownBlobError(InputError, KeyError):
    """A blob or output name that the net does not have (or does not keep)."""

    def __str__(self):  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class ShapeInferenceError(PooledPredictorError, ValueError):
    """Input shapes for which an operator's shape rules fail (e.g. broadcasting)."""


class KernelError(PooledPredictorError):
    """A kernel raised while running a node; the message names the node."""


class QueueFullError(PooledPredictorError):
    """The pool's bounded queue is full and admission is fail-fast or timed out."""


class PoolClosedError(PooledPredictorError, RuntimeError):
    """forward() was called on a pool that has been closed."""


class DeadlineExceededError(PooledPredictorError, TimeoutError):
    """A job's deadline had passed when a worker picked it up; it did not run."""


class ResourceExhaustedError(PooledPredictorError, MemoryError):
    """A model or request needs more memory than the budget allows (onnxruntime's
    RESOURCE_EXHAUSTED: its arena limit).

    Raised before anything is allocated: at load for weights, at reshape for the
    planned arena (activations and kernel scratch) or for one node's outputs.
    It also derives from MemoryError, so ``except MemoryError`` keeps working.

    Attributes:
        needed: bytes the model or request needs (None when unknown).
        limit: the budget in bytes.
    """

    def __init__(self, message: str, needed: int | None = None, limit: int | None = None):
        super().__init__(message)
        self.needed = needed
        self.limit = limit


class FetchError(PooledPredictorError, OSError):
    """A model or data file could not be downloaded, or its sha256 did not match."""
