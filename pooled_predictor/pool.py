"""PooledPredictor: worker threads fed by a bounded job queue (fb-caffe-exts' PooledPredictor).

    config = Config(model_paths=[det_path, rec_path], num_threads=2)
    with PooledPredictor(config) as pool:
        future = pool.forward({"x": image}, net_id=0)      # a Future
        boxes = future.then(postprocess).result()

* Jobs go through a bounded multi-producer/multi-consumer queue (capacity
  defaults to num_threads); a full queue blocks the producer (default), blocks
  up to a timeout, or fails fast with QueueFullError.
* Worker threads start lazily, up to num_threads; each holds one Net per model
  (created on first use), sharing the models' weights.
* forward() checks net_id, the input count, names, ranks, fixed dims and dtypes
  in the caller's thread: a bad request fails at the call. A job's own failure
  (a shape the model rejects, a kernel error) is set on its Future; a worker
  never dies of it, and no Future is left pending: close() drains or cancels.
* Callback.on_job_enqueued / on_job_dequeued / on_job_processed as fb-caffe-exts;
  with allow_inline_scheduling, a job submitted from a worker (from a then()
  callback, say) runs at once on that worker, skipping the queue and the
  enqueued/dequeued callbacks, up to max_inline_depth nested jobs.
* Future.cancel() on a queued job removes it from the queue; a job whose
  deadline passed before a worker took it fails with DeadlineExceededError.
* stats(): per-net counts and p50/p95/p99 of queue wait, run and end-to-end time.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import queue
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .blas import limit_blas_threads, release_blas_threads
from .errors import (DeadlineExceededError, InputError, PoolClosedError, QueueFullError,
                     UnknownBlobError, UnknownNetError)
from .futures import Future
from .net import Optimization
from .predictor import Predictor
from .stats import StatsRecorder, StatsSnapshot

log = logging.getLogger("pooled_predictor")


class Callback:
    """Hooks on a job's way through the pool (fb-caffe-exts' PooledPredictor::Callback).

    Exceptions raised here are logged and counted (stats().callback_errors);
    they never reach the job or the worker.
    """

    def on_job_enqueued(self, queue_size: int, enqueue_delay_ms: float) -> None:
        """A job entered the queue: the queue size after it, and the ms blocked waiting for room."""

    def on_job_dequeued(self) -> None:
        """A worker took a job from the queue."""

    def on_job_processed(self, process_time_ms: float) -> None:
        """A job ran (successfully or not), before its Future is completed; its run time in ms."""


@dataclass
class Config:
    """What a PooledPredictor serves and how.

    Attributes:
        model_paths: ONNX files, net_id = index. Exactly one of model_paths and
            model_bytes must be given.
        model_bytes: serialized ONNX models, net_id = index.
        num_threads: worker threads (started lazily, up to this many).
        queue_capacity: bound of the job queue; None means num_threads.
        disable_blas_threading: limit BLAS threads per call while the pool lives
            (fb-caffe-exts' flag; with N workers, N single-threaded GEMMs).
        blas_threads: the limit when disable_blas_threading is set (default 1).
        allow_inline_scheduling: jobs submitted from a worker run inline there.
        max_inline_depth: nested inline jobs allowed before going through the queue.
        admission: "block" (wait for room) or "fail" (QueueFullError at once).
        enqueue_timeout: seconds a blocked producer waits before QueueFullError (None: forever).
        optimization: Optimization.MEMORY (default: one planned arena per Net,
            intermediates readable only when in `keep`) or NONE (every blob kept).
        planner: "arena" or "shared" (fb-caffe-exts' baseline), under MEMORY.
        keep: intermediate blob names that stay readable under MEMORY.
        shape_policy: after each job, "restore" the Net to its default input
            shapes (fb-caffe-exts' guard against holding the memory of one large
            input) or "keep" the job's layout for the next job.
        layout_cache_bytes: per-Net budget of cached layouts of other shapes, so
            alternating shapes are not re-planned every job.
        graph_optimization_level: "none", "basic", "extended" or "all" (default):
            the graph passes run on each model before it is compiled.
        disabled_passes: pass names never to run.
        device: "cpu" or "cuda".
        unknown_output: "warn" (log and skip, as fb-caffe-exts) or "raise".
        warmup: run each model once at construction (compiled kernels compiled
            or loaded from numba's disk cache, kernels set up), so the first
            request does not pay it; shapes from `warmup_shapes[net_id]` (name ->
            shape) or the declared ones with symbolic dims as 1.
        enable_profiling: time every node of every worker's Nets (onnxruntime's
            option); each `predictor(i).profiler` collects, end_profiling() writes.
    """

    model_paths: Sequence[str | os.PathLike] = ()
    model_bytes: Sequence[bytes] = ()
    num_threads: int = 1
    queue_capacity: int | None = None
    disable_blas_threading: bool = True
    blas_threads: int = 1
    allow_inline_scheduling: bool = False
    max_inline_depth: int = 16
    admission: str = "block"
    enqueue_timeout: float | None = None
    optimization: Optimization = Optimization.MEMORY
    planner: str = "arena"
    keep: Sequence[str] = ()
    shape_policy: str = "restore"
    layout_cache_bytes: int = 256 << 20
    graph_optimization_level: str = "all"
    disabled_passes: Sequence[str] = ()
    device: str = "cpu"
    unknown_output: str = "warn"
    enable_profiling: bool = False
    warmup: bool = False
    warmup_shapes: Sequence[Mapping[str, Sequence[int]]] = ()

    def validate(self) -> None:
        """Raises ValueError naming the first inconsistent field."""
        if bool(self.model_paths) == bool(self.model_bytes):
            raise ValueError("Config: give exactly one of model_paths and model_bytes")
        if int(self.num_threads) < 1:
            raise ValueError(f"Config: num_threads must be >= 1, got {self.num_threads}")
        if self.queue_capacity is not None and int(self.queue_capacity) < 1:
            raise ValueError(f"Config: queue_capacity must be >= 1, got {self.queue_capacity}")
        if self.admission not in ("block", "fail"):
            raise ValueError(f"Config: admission must be 'block' or 'fail', got {self.admission!r}")
        if self.shape_policy not in ("restore", "keep"):
            raise ValueError(f"Config: shape_policy must be 'restore' or 'keep', got {self.shape_policy!r}")
        if self.graph_optimization_level not in ("none", "basic", "extended", "all"):
            raise ValueError("Config: graph_optimization_level must be none, basic, extended or all, "
                             f"got {self.graph_optimization_level!r}")
        if self.planner not in ("arena", "shared"):
            raise ValueError(f"Config: planner must be 'arena' or 'shared', got {self.planner!r}")
        if self.unknown_output not in ("warn", "raise"):
            raise ValueError(f"Config: unknown_output must be 'warn' or 'raise', got {self.unknown_output!r}")
        if int(self.blas_threads) < 1:
            raise ValueError(f"Config: blas_threads must be >= 1, got {self.blas_threads}")
        if int(self.max_inline_depth) < 0:
            raise ValueError("Config: max_inline_depth must be >= 0")

    @property
    def capacity(self) -> int:
        return int(self.queue_capacity or self.num_threads)


class _Job(Future):
    """One request: its Future, and what the worker needs to run it.

    cancel() also takes the job out of the queue (and frees its slot).
    """

    slot = False    # holds one of the queue's `capacity` slots
    claim = None    # {"claim": True} while queued: whoever pops it takes the job out
    core = None     # set once queued, so that cancel() can take it out

    def __init__(self, net_id, inputs, output_names, deadline):
        super().__init__()
        self.net_id = net_id
        self.inputs = inputs
        self.output_names = output_names
        self.enqueued = self.submitted = time.perf_counter()
        self.deadline = deadline  # time.monotonic() value or None

    def cancel(self) -> bool:
        cancelled = super().cancel()
        core = self.core
        if cancelled and core is not None:
            self.core = None
            core.cancelled(self)
        return cancelled


_STOP = object()


class _JobQueue:
    """Bounded MPMC FIFO: blocking, timed or fail-fast put; removal of cancelled jobs; close.

    Jobs travel through a queue.SimpleQueue (C: the cheapest hand-over between
    threads); the bound is `capacity` slot tokens in a second SimpleQueue (a
    counting semaphore implemented in C, with timeouts), taken by put() and
    given back when a worker takes the job or when the job is cancelled while
    queued. A cancelled job stays in the SimpleQueue and is skipped when a
    worker reaches it, but it gives its slot back at once: for producers it is
    gone. Jobs put by a worker (force=True) take no slot, so a worker never
    blocks on its own queue.

    Taking a job (worker) and removing it (cancel, close, or put() itself when
    close() ran meanwhile) race for the job's claim token; dict.pop is atomic,
    so exactly one of them wins, without a lock. The size is puts - claims,
    two atomic itertools.count counters.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._slots: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(capacity):
            self._slots.put(None)
        self._lock = threading.Lock()  # close() against close()
        self._puts = itertools.count()
        self._claims = itertools.count()
        self.closed = False

    def __len__(self):
        return max(0, _count_value(self._puts) - _count_value(self._claims))

    def put(self, job: _Job, block: bool, timeout: float | None, force: bool = False) -> int:
        """Append a job; returns the queue size after it. Raises QueueFullError / PoolClosedError."""
        if self.closed:
            raise PoolClosedError("the pool is closed")
        if not force:
            try:
                self._slots.get(block, timeout if block else None)
            except queue.Empty:
                if not block:
                    raise QueueFullError(f"the job queue is full ({self.capacity} jobs)") from None
                raise QueueFullError(f"the job queue stayed full ({self.capacity} jobs) "
                                     f"for {timeout:.3f} s") from None
            job.slot = True
        job.claim = {"claim": True}
        next(self._puts)
        self._q.put(job)
        # close() may have run since the check above: its stop markers may then sit
        # before this job. Take it back (only one of us, a worker or close wins the claim).
        if self.closed and self._claim(job):
            raise PoolClosedError("the pool was closed while this job was being queued")
        return len(self)

    def _claim(self, job: _Job) -> bool:
        """True for the one caller (worker, cancel or close) that takes the job out."""
        claim = job.claim
        if claim is None or claim.pop("claim", None) is None:
            return False
        next(self._claims)
        self._give_back(job)
        return True

    def get(self):
        """The next job (or _STOP) for a worker; skips jobs removed while queued."""
        while True:
            job = self._q.get()
            if job is _STOP or self._claim(job):
                return job

    def remove(self, job: _Job) -> bool:
        """Take a queued job out (cancellation); False if a worker already has it."""
        return self._claim(job)

    def _give_back(self, job: _Job) -> None:
        if job.slot:
            job.slot = False
            self._slots.put(None)

    def close(self, stops: int, drain: bool) -> list[_Job]:
        """Refuse new jobs; append `stops` stop markers; return the queued jobs if drain."""
        with self._lock:
            self.closed = True
            pending = []
            if drain:
                while True:
                    try:
                        job = self._q.get_nowait()
                    except queue.Empty:
                        break
                    if job is not _STOP and self._claim(job):
                        pending.append(job)
            for _ in range(stops):
                self._q.put(_STOP)
        # Wake producers blocked on a full queue: each one that wakes finds the pool
        # closed and gives its slot back, which wakes the next (a cascade).
        self._slots.put(None)
        return pending


def _count_value(counter: itertools.count) -> int:
    """The next value of an itertools.count, without advancing it."""
    return counter.__reduce__()[1][0]


class _Core:
    """What the workers share: models, queue, callback, stats. Holds no reference to the pool."""

    def __init__(self, config: Config, predictors: list[Predictor], callback: Callback | None):
        self.config = config
        self.predictors = predictors
        self.callback = callback
        self.restore = config.shape_policy == "restore"
        self.queue = _JobQueue(config.capacity)
        self.stats = StatsRecorder(range(len(predictors)))
        self.threads: list[threading.Thread] = []
        self.threads_lock = threading.Lock()
        self.idle: list[bool] = []  # per worker, written only by that worker
        self.started = False        # all num_threads workers are running
        self.local = threading.local()  # .worker: True on this pool's workers; .depth: inline depth
        self.known_outputs = [self._readable(p) for p in predictors]

    @staticmethod
    def _readable(p: Predictor) -> set:
        """Blob names a job may ask for: under MEMORY only inputs, outputs, weights and `keep`."""
        names = set(p.program.output_names) | set(p.program.input_names) | set(p.program.weights)
        if p.optimization is Optimization.MEMORY:
            return names | set(p.canonical_net.keep)
        return names | {o for s in p.program.steps for o in s.node.outputs if o}

    # ---- callbacks (never raise) -----------------------------------------------
    def notify(self, method: str, *args) -> None:
        cb = self.callback
        if cb is None:
            return
        try:
            getattr(cb, method)(*args)
        except Exception:
            self.stats.callback_error()
            log.exception("Callback.%s raised; ignored", method)

    # ---- workers -----------------------------------------------------------------
    def cancelled(self, job: _Job) -> None:
        """A job's Future was cancelled: out of the queue if it is still there."""
        if self.queue.remove(job):
            self.stats.count(job.net_id, "cancelled")

    def in_worker(self) -> bool:
        return getattr(self.local, "worker", False)

    def maybe_start_worker(self) -> None:
        """Start a worker if none is idle and fewer than num_threads run (fb-caffe-exts' policy)."""
        if any(self.idle):
            return
        with self.threads_lock:
            if len(self.threads) >= self.config.num_threads or any(self.idle) or self.queue.closed:
                return
            index = len(self.threads)
            t = threading.Thread(target=self.worker_main, args=(index,), name=f"pooled-predictor-{index}",
                                 daemon=True)
            self.idle.append(True)  # idle until it takes its first job
            self.threads.append(t)
            self.started = len(self.threads) >= self.config.num_threads  # then no more checks
        t.start()

    def worker_main(self, index: int) -> None:
        self.local.worker = True
        self.local.depth = 0
        idle = self.idle
        while True:
            idle[index] = True
            job = self.queue.get()
            idle[index] = False
            if job is _STOP:
                return
            if not job.set_running_or_notify_cancel():
                self.stats.count(job.net_id, "cancelled")  # cancelled between take and start
                continue
            if self.callback is not None:
                self.notify("on_job_dequeued")
            try:
                self.process(job, inline=False)
            except BaseException:  # last line of defence: the worker survives, the Future ends
                log.exception("unexpected error in a pool worker")
                if not job.done():
                    job.set_exception(RuntimeError("internal error in the pool worker"))

    def process(self, job: _Job, inline: bool) -> None:
        """Run one job on this thread's Net for its model and complete its Future."""
        fut = job
        if inline and not fut.set_running_or_notify_cancel():
            return
        started = time.perf_counter()
        wait = started - job.enqueued
        if job.deadline is not None and time.monotonic() > job.deadline:
            self.stats.record(job.net_id, "expired", queue_wait=wait)
            fut.set_exception(DeadlineExceededError(
                f"the job's deadline passed {time.monotonic() - job.deadline:.3f} s before a worker "
                f"took it (it waited {wait * 1e3:.1f} ms)"))
            return
        result = error = None
        net = None
        try:
            net = self.predictors[job.net_id].net()
            net.forward_checked(job.inputs)  # checked in the caller's thread at submit
            result = {n: np.array(net.blob_by_name(n)) for n in job.output_names}
        except BaseException as exc:
            error = exc
        if net is not None and not net.at_default and self.restore and not inline:
            net.restore()
        ran = time.perf_counter() - started
        if self.callback is not None:
            self.notify("on_job_processed", ran * 1e3)
        end_to_end = time.perf_counter() - job.submitted
        self.stats.record(job.net_id, "failed" if error is not None else "completed",
                          queue_wait=wait, run=ran, end_to_end=end_to_end)
        if inline:
            self.stats.count(job.net_id, "inline")
        job.inputs = None  # do not keep the caller's arrays alive through the Future
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)


_live_pools: "weakref.WeakSet[PooledPredictor]" = weakref.WeakSet()


@atexit.register
def _close_live_pools() -> None:  # the interpreter exits cleanly with pools still open
    for pool in list(_live_pools):
        try:
            pool.close(wait=True)
        except Exception:
            pass


class PooledPredictor:
    """A pool of worker threads running one or several models.

    Args:
        config: Config (models, threads, queue, admission, inline scheduling...).
        callback: optional Callback.
    Raises:
        ValueError: an inconsistent Config.
        ModelLoadError, UnsupportedOpError: a model cannot be served.
    """

    def __init__(self, config: Config, callback: Callback | None = None):
        config.validate()
        self.config = config
        sources = list(config.model_paths) or list(config.model_bytes)
        predictors = [Predictor(src, device=config.device, optimization=config.optimization,
                                planner=config.planner, keep=config.keep,
                                cache_bytes=config.layout_cache_bytes,
                                graph_optimization_level=config.graph_optimization_level,
                                disabled_passes=config.disabled_passes, disable_blas_threading=False,
                                enable_profiling=config.enable_profiling)
                      for src in sources]
        if config.warmup:
            for i, p in enumerate(predictors):
                p.warmup(config.warmup_shapes[i] if i < len(config.warmup_shapes) else None)
        self._blas_token = limit_blas_threads(config.blas_threads) if config.disable_blas_threading else None
        self._core = _Core(config, predictors, callback)
        self._closed = False
        self._close_lock = threading.Lock()
        weakref.finalize(self, _finalize, self._core, self._blas_token)
        _live_pools.add(self)

    # ---- fb-caffe-exts factories -------------------------------------------------
    @classmethod
    def make_predictors(cls, config: Config, callback: Callback | None = None) -> list["PinnedPooledPredictor"]:
        """One PinnedPooledPredictor per model, all sharing one pool (queue and threads)."""
        pool = cls(config, callback)
        return [PinnedPooledPredictor(pool, i) for i in range(pool.net_count)]

    @classmethod
    def make_predictor(cls, config: Config, callback: Callback | None = None) -> "PinnedPooledPredictor":
        """make_predictors() for a config of exactly one model.

        Raises:
            ValueError: the config holds more than one model.
        """
        preds = cls.make_predictors(config, callback)
        if len(preds) != 1:
            preds[0].pool.close()
            raise ValueError(f"make_predictor() needs exactly one model, the config has {len(preds)}; "
                             "did you mean make_predictors()?")
        return preds[0]

    # ---- description -------------------------------------------------------------
    @property
    def net_count(self) -> int:
        return len(self._core.predictors)

    def predictor(self, net_id: int = 0) -> Predictor:
        """The Predictor (canonical Net, weights, input/output names) of a model."""
        return self._core.predictors[self._check_net_id(net_id)]

    def canonical_net(self, net_id: int = 0):
        return self.predictor(net_id).canonical_net

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def worker_count(self) -> int:
        return len(self._core.threads)

    def stats(self) -> StatsSnapshot:
        """A snapshot of per-net counts and latency histograms (merge() combines snapshots)."""
        core = self._core
        return core.stats.snapshot(len(core.threads), len(core.queue))

    # ---- forward -------------------------------------------------------------------
    def _check_net_id(self, net_id) -> int:
        n = len(self._core.predictors)
        if type(net_id) is int and 0 <= net_id < n:
            return net_id
        if isinstance(net_id, bool) or not isinstance(net_id, (int, np.integer)) or not 0 <= net_id < n:
            raise UnknownNetError(f"net_id {net_id!r} is not one of the pool's {n} model(s) (0..{n - 1})")
        return int(net_id)

    def forward(self, inputs, output_names: Sequence[str] | None = None, net_id: int = 0, *,
                deadline: float | None = None, block: bool | None = None,
                timeout: float | None = None) -> Future:
        """Queue one inference job.

        Args:
            inputs: list in input order, dict name -> array, or one array
                (float32 etc. as the model declares). Read when the job runs:
                do not modify them until the Future is done.
            output_names: blobs to return; None: the model's outputs. Unknown
                names are logged and skipped (Config.unknown_output="raise" raises).
            net_id: which model (index in the Config).
            deadline: seconds from now; a job not started by then fails with
                DeadlineExceededError without running.
            block / timeout: admission for this call (default: the Config's).
        Returns:
            Future of a dict output name -> numpy array (copies).
        Raises:
            UnknownNetError, InputError (count, names, rank, dims, dtype),
            UnknownBlobError (unknown output, with unknown_output="raise"),
            QueueFullError, PoolClosedError.
        """
        core = self._core
        if self._closed or core.queue.closed:
            raise PoolClosedError("forward() on a closed PooledPredictor")
        net_id = self._check_net_id(net_id)
        predictor = core.predictors[net_id]
        arrays = predictor.canonical_net.check_inputs(inputs)
        names = self._resolve_outputs(net_id, output_names)
        dl = None if deadline is None else time.monotonic() + float(deadline)
        job = _Job(net_id, arrays, names, dl)

        in_worker = getattr(core.local, "worker", False)
        if in_worker and self.config.allow_inline_scheduling and core.local.depth < self.config.max_inline_depth:
            core.stats.submitted(net_id)
            core.local.depth += 1
            try:
                core.process(job, inline=True)
            finally:
                core.local.depth -= 1
            return job

        block = (self.config.admission == "block") if block is None else bool(block)
        timeout = self.config.enqueue_timeout if timeout is None else timeout
        if not core.started:
            core.maybe_start_worker()
        t0 = time.perf_counter()
        try:
            # A worker never blocks on its own queue: that could deadlock the pool.
            size = core.queue.put(job, block, timeout, force=in_worker)
        except QueueFullError:
            core.stats.count(net_id, "rejected")
            raise
        job.enqueued = time.perf_counter()
        core.stats.submitted(net_id)
        job.core = core  # so that cancel() can take it out of the queue
        if core.callback is not None:
            core.notify("on_job_enqueued", size, (job.enqueued - t0) * 1e3)
        return job

    def _resolve_outputs(self, net_id: int, output_names) -> list[str]:
        program = self._core.predictors[net_id].program
        if output_names is None:
            return program.output_names  # shared, never modified
        if isinstance(output_names, str):
            raise InputError("output_names must be a list of names, not a string")
        known = self._core.known_outputs[net_id]
        unknown = [n for n in output_names if n not in known]
        if unknown:
            why = ("no blob (or, under Optimization.MEMORY, no kept blob: add it to Config.keep) named"
                   if self.config.optimization is Optimization.MEMORY else "no blob named")
            if self.config.unknown_output == "raise":
                raise UnknownBlobError(f"net {net_id}: {why} {unknown}; outputs are {program.output_names}")
            log.warning("net %d: requested output blob(s) not found, skipped (%s %s)", net_id, why, unknown)
        return [n for n in output_names if n in known]

    async def forward_async(self, inputs, output_names: Sequence[str] | None = None, net_id: int = 0,
                            **kwargs) -> dict[str, np.ndarray]:
        """`await pool.forward_async(...)`: forward() without blocking the event loop.

        Waiting for room in a full queue happens in a helper thread; cancelling
        the awaiting task cancels the job if it is still queued.
        """
        try:
            fut = self.forward(inputs, output_names, net_id, block=False, **kwargs)
        except QueueFullError:
            if kwargs.get("block") is False or self.config.admission == "fail":
                raise
            fut = await asyncio.to_thread(self.forward, inputs, output_names, net_id, **kwargs)
        return await asyncio.wrap_future(fut)

    # ---- shutdown ---------------------------------------------------------------------
    def close(self, wait: bool = True, cancel_pending: bool = False) -> None:
        """Stop accepting jobs; finish (or cancel) the queued ones; stop the workers.

        Args:
            wait: join the workers (skipped when called from one of them).
            cancel_pending: cancel the queued jobs instead of running them.
        Safe to call twice, from a callback, or from inside a worker.
        """
        core = self._core
        with self._close_lock:
            first = not self._closed
            self._closed = True
            if first:
                with core.threads_lock:  # no worker can start between counting and closing
                    pending = core.queue.close(len(core.threads), drain=cancel_pending)
                for job in pending:
                    if job.cancel():
                        core.stats.count(job.net_id, "cancelled")
                _live_pools.discard(self)
                if self._blas_token is not None:
                    release_blas_threads(self._blas_token)
                    self._blas_token = None
        if wait and not core.in_worker():
            for t in list(core.threads):
                if t is not threading.current_thread():
                    t.join()

    def __enter__(self) -> "PooledPredictor":
        return self

    def __exit__(self, *exc) -> None:
        self.close(wait=True)


def _finalize(core: _Core, blas_token) -> None:
    """The pool was garbage-collected without close(): let its workers exit."""
    with core.threads_lock:
        if not core.queue.closed:
            core.queue.close(len(core.threads), drain=False)


class PinnedPooledPredictor:
    """A PooledPredictor bound to one model (fb-caffe-exts' PinnedPooledPredictor)."""

    def __init__(self, pool: PooledPredictor, net_id: int):
        self.pool = pool
        self.net_id = pool._check_net_id(net_id)

    def forward(self, inputs, output_names: Sequence[str] | None = None, **kwargs) -> Future:
        """pool.forward(inputs, output_names, net_id=self.net_id, ...)."""
        return self.pool.forward(inputs, output_names, self.net_id, **kwargs)

    async def forward_async(self, inputs, output_names: Sequence[str] | None = None, **kwargs):
        return await self.pool.forward_async(inputs, output_names, self.net_id, **kwargs)

    @property
    def predictor(self) -> Predictor:
        return self.pool.predictor(self.net_id)

    def canonical_net(self):
        return self.pool.canonical_net(self.net_id)

    def close(self, wait: bool = True, cancel_pending: bool = False) -> None:
        self.pool.close(wait, cancel_pending)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.pool.close(wait=True)
