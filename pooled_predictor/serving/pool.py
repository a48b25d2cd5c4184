"""PooledPredictor: worker threads fed by a bounded job queue (fb-caffe-exts' PooledPredictor).

    config = Config(model_paths=[det_path, rec_path], num_threads=2)
    with PooledPredictor(config) as pool:
        future = pool.forward({"x": image}, net_id=0)      # a Future
        boxes = future.then(postprocess).result()

* Jobs go through a bounded multi-producer/multi-consumer queue (capacity
  defaults to num_threads); a full queue blocks the producer (default), blocks
  up to a timeout, or fails fast with QueueFullError.
* Worker threads start lazily, up to num_threads; each holds one Net per model
  (created on first use), sharing the models' weights. The idle worker woken
  for a job is the one that went to sleep last; at most Config.active_workers
  of them (one per CPU by default) are awake at once, and a job queued while
  they all run waits for one of them to come back
  (pooled_predictor.serving.jobqueue).
* infer() is forward().result() for a caller that waits anyway (onnxruntime's
  run()): while no job is queued and fewer than num_threads run, the job runs on
  the calling thread, on one of the pool's caller Nets (at most
  Config.infer_slots computing at once, one per CPU by default, the Nets taken
  last in, first out), without the two thread handoffs; else it is queued.
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
* Priority levels (forward(..., priority=k), Triton's): highest level first,
  FIFO within a level, one bound for all levels; Config.priority_aging lets a
  job that waited that long go first (off by default: strict levels). See
  pooled_predictor.serving.jobqueue.
* Dynamic batching (Config.max_batch_size, max_queue_delay,
  preferred_batch_sizes; Triton's dynamic batcher): a worker taking a job of a
  model that batches also takes queued jobs of the same model and input
  signature, runs them as one batch and gives each job its rows. Per job
  nothing changes: its Future, deadline, cancellation and callbacks are its
  own; an error in a batched run re-runs its jobs alone, so it fails only the
  jobs that cause it. See pooled_predictor.serving.batching for which models batch.
* stats(): per-net counts and p50/p95/p99 of queue wait, run and end-to-end
  time, and the batch sizes of nets that batch.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .batching import Batcher, NotBatchable, fair_share, make_batchers
from .blas import limit_blas_threads, release_blas_threads
from ..budget import available_cpus, resolve_limit
from ..errors import (DeadlineExceededError, InputError, PoolClosedError, QueueFullError,
                     UnknownBlobError, UnknownNetError)
from .futures import Future
from .jobqueue import STOP, JobQueue
from ..engine.device import get_device, worker_devices
from ..engine.net import Optimization
from .paddle_api import HandleAPI
from .predictor import Predictor, check_output_names
from ..engine.inputs import outputs_on_device, owned_copies
from .stats import StatsRecorder, StatsSnapshot

log = logging.getLogger("pooled_predictor")


class Callback:
    """Hooks on a job's way through the pool (fb-caffe-exts' PooledPredictor::Callback).

    Exceptions raised here are logged and counted (stats().callback_errors);
    they never reach the job or the worker. A method a subclass does not
    override (Callback's no-op) is not called at all.
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
        model_paths: ONNX files or Caffe (prototxt, caffemodel) path pairs,
            net_id = index (fb-caffe-exts' protoWeightPaths_). Exactly one of
            model_paths and model_bytes must be given.
        model_bytes: serialized ONNX models or Caffe (text prototxt, binary
            caffemodel) pairs, net_id = index (protoWeightStrings_).
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
        shape_policy: after each job, "restore" (fb-caffe-exts' guard against
            holding the memory of one large input): a Net whose cached layouts,
            the job's included, exceed layout_cache_bytes goes back to its default
            input shapes (Net.restore); within the budget it keeps the job's
            layout, since going back would free nothing. Or "keep" the job's
            layout for the next job whatever its size.
        layout_cache_bytes: per-Net budget of cached layouts of other shapes, so
            alternating shapes are not re-planned every job. On a GPU with
            dynamic batching, give it room for the arenas at the graph batch
            sizes (serving/batching.Batcher.graph_rows; ResNet-50: about 12 MB a
            row): a size whose layout was evicted is planned and captured again.
        graph_optimization_level: "none", "basic", "extended" or "all" (default):
            the graph passes run on each model before it is compiled.
        disabled_passes: pass names never to run.
        device: "cpu", "cuda" or "cuda:<n>".
        devices: GPU ordinals the workers spread over (device "cuda" only): worker i
            runs on devices[i % len(devices)], as in fb-caffe-exts, each worker on a
            non-blocking stream of its own; the weights are uploaded once per GPU and
            shared by its workers. Empty (default): every worker on `device`.
        output_device: where jobs' outputs go by default (forward's output_device overrides it per
            call): "cpu" (numpy arrays) or, on device "cuda", "cuda" (CuPy arrays on the GPU that ran
            the job, copied there from the worker's arena; ONNX Runtime IOBinding's bind_output).
            Inputs may be CuPy arrays or any DLPack producer either way (engine/inputs.py).
        cuda_graphs: on "cuda", CUDA graphs each worker keeps per model (an LRU
            of input shapes; 0: off): a shape run wholly on the GPU is captured
            on its second run and replayed from then on (Predictor's cuda_graphs).
        unknown_output: "raise" (default: forward() raises UnknownBlobError at the
            call, as onnxruntime's run() and Predictor.forward do) or "warn" (log and
            skip the unknown names, as fb-caffe-exts).
        max_batch_size: dynamic batching (Triton's dynamic batcher): the most
            rows one batched run may have; 0 (default) or 1: off. An int for
            every model, or a sequence with one per model (net_id order). Only
            models with a free first dimension batch (see
            pooled_predictor.serving.batching); an int skips the others with a log
            line, a per-model value > 1 for one of them is a ValueError.
        max_queue_delay: seconds a batch may wait, from its first job's
            enqueue, for more jobs (an int for all or one per model); never
            waited once a preferred size or max_batch_size is reached.
        preferred_batch_sizes: row counts a batch stops at when it can (the
            largest reachable); one sequence for all models or one per model.
            Without them, `warmup` measures each batching model's time per row
            at batch 1, 2, 4, ... max_batch_size and prefers the size where a
            row is cheapest; a model whose rows are not clearly cheaper in a
            batch does not batch (pooled_predictor.serving.batching). A batch takes at most its
            share of the model's rows over the workers, and never waits for
            max_queue_delay while a worker is idle.
        priority_aging: seconds after which a queued job goes before younger
            jobs of higher priority levels (no level starves); None (default):
            strict priority levels, as Triton.
        memory_limit_bytes: budget in bytes for each model's weights at load and
            each worker Net's layout at reshape (None: 0.8 of the memory this
            process may use; see pooled_predictor.budget). A request over it
            fails with ResourceExhaustedError; the worker's Net keeps its shapes.
        external_data_dir: directory of the models' external data files (needed
            for model_bytes with external data; default for model_paths: each
            model's directory). Nothing outside it is read.
        warmup: run each model once at construction (compiled kernels compiled
            or loaded from numba's disk cache, kernels set up), so the first
            request does not pay it; shapes from `warmup_shapes[net_id]` (name ->
            shape) or the declared ones with symbolic dims as 1; and calibrates
            batching (see preferred_batch_sizes).
        enable_profiling: time every node of every worker's Nets (onnxruntime's
            option); each `predictor(i).profiler` collects, end_profiling() writes.
        int8_arithmetic: the quantized kernels' u8 x s8 arithmetic: "onnxruntime"
            (onnxruntime's sums on this host: int16-saturated pairs where it lacks VNNI) or
            "exact" (pooled_predictor/ops/int8_arithmetic.py); None: its current().
        worker_affinity: where each worker thread may run (Linux sched_setaffinity, set once on
            the worker as it starts): "none" (default: wherever the OS schedules it); "spread"
            (worker i on the i-th CPU, modulo their count, of those this process may use when the
            pool starts: os.sched_getaffinity(0); OpenMP's OMP_PROC_BIND=spread, onnxruntime's
            session.intra_op_thread_affinities); or CPU ids (worker i on cpus[i % len(cpus)]).
            Pinned, two workers never queue on one CPU: a worker sleeps between jobs, and Linux
            wakes a sleeper on or near the CPU of the thread that wakes it, so that on a 2-core host
            busy with other work, 2 unpinned workers sat runnable on one CPU in 96-99% of samples
            (onnxruntime's 2 callers, which never sleep, in 16-84%). Pinned, the pool takes a
            larger share of a loaded host (+13-35% there), as pinned onnxruntime callers do
            (+22%); not measured on an idle host. Pin only when this pool is what runs on
            those CPUs: pools in other processes pinned alike share the same CPUs.
            Raises ValueError (validate) on a platform without sched_setaffinity or for CPU
            ids the process may not use.
        infer_slots: how many infer() jobs compute at once on their callers' threads; the others
            wait for a slot, first come first served (the wait counts as queue wait). None
            (default): the CPUs this process may use (its affinity mask, capped by its cgroup's CPU
            quota: pooled_predictor.budget.available_cpus); 0: num_threads.
            infer() needs as many caller Nets as slots, used last in, first out, so the Nets
            that run stay in the caches: with 16 client threads on 2 cores and 16 slots, PP-OCR
            rec, MobileNetV2 and ResNet-50 took 15-19% more CPU time an image than with one
            client (16 arenas in turn; onnxruntime's 16 callers 0-9% more), with 2 slots the
            same as with one (benchmarks/cpu_check.py).
        active_workers: how many workers take queued jobs at once (forward()'s path); None
            (default): the CPUs this process may use (its affinity mask, capped by its cgroup's CPU
            quota: pooled_predictor.budget.available_cpus); 0: num_threads.
            A job queued while that many workers run is taken by one of them when it comes
            back, with no other worker woken: as many jobs compute as there are cores, each
            handed over once (pooled_predictor.serving.jobqueue). A worker about to run user
            code (a Future's done callbacks or then() chains, the Callback's hooks) stops
            counting first, so a callback that blocks never holds the queue up. It binds only
            below num_threads, on a CPU pool that does not batch and whose workers are not
            pinned (worker_affinity "none"). With 16 client threads and 16 workers on 2
            cores, PP-OCR rec went from 846 to ~990 images/s (benchmarks/cpu_check.py). Idle
            workers are woken last in, first out (the one that slept last, its arena in the
            caches), except where they differ (pinned to CPUs, or on several devices): in turn.
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
    devices: Sequence[int] = ()
    cuda_graphs: int = 8
    output_device: str = "cpu"
    unknown_output: str = "raise"
    max_batch_size: int | Sequence[int] = 0
    max_queue_delay: float | Sequence[float] = 0.0
    preferred_batch_sizes: Sequence[int] | Sequence[Sequence[int]] = ()
    priority_aging: float | None = None
    memory_limit_bytes: int | None = None
    external_data_dir: str | os.PathLike | None = None
    enable_profiling: bool = False
    warmup: bool = False
    warmup_shapes: Sequence[Mapping[str, Sequence[int]]] = ()
    int8_arithmetic: str | None = None
    worker_affinity: str | Sequence[int] = "none"
    infer_slots: int | None = None
    active_workers: int | None = None

    def validate(self) -> None:
        """Raises ValueError naming the first inconsistent field."""
        if bool(self.model_paths) == bool(self.model_bytes):
            raise ValueError("Config: give exactly one of model_paths and model_bytes")
        if int(self.num_threads) < 1:
            raise ValueError(f"Config: num_threads must be >= 1, got {self.num_threads}")
        for name in ("infer_slots", "active_workers"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError(f"Config: {name} must be None or an int >= 0, got {v!r}")
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
        if self.devices:
            if not str(self.device).lower().startswith("cuda"):
                raise ValueError(f"Config: devices {list(self.devices)} needs device 'cuda', got {self.device!r}")
            if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in self.devices):
                raise ValueError(f"Config: devices must be GPU ordinals >= 0, got {list(self.devices)}")
        if isinstance(self.cuda_graphs, bool) or not isinstance(self.cuda_graphs, (int, np.integer)) \
                or self.cuda_graphs < 0:
            raise ValueError(f"Config: cuda_graphs must be a count >= 0, got {self.cuda_graphs!r}")
        if str(self.output_device).lower() != "cpu" and not (
                str(self.output_device).lower() == "cuda" and str(self.device).lower().startswith("cuda")):
            raise ValueError(f"Config: output_device must be 'cpu', or 'cuda' with device 'cuda', got "
                             f"{self.output_device!r} (device {self.device!r})")
        if self.int8_arithmetic is not None and self.int8_arithmetic not in ("onnxruntime", "exact"):
            raise ValueError("Config: int8_arithmetic must be 'onnxruntime', 'exact' or None, "
                             f"got {self.int8_arithmetic!r}")
        if self.unknown_output not in ("warn", "raise"):
            raise ValueError(f"Config: unknown_output must be 'warn' or 'raise', got {self.unknown_output!r}")
        if int(self.blas_threads) < 1:
            raise ValueError(f"Config: blas_threads must be >= 1, got {self.blas_threads}")
        self.worker_cpus()  # raises ValueError for a bad worker_affinity
        if int(self.max_inline_depth) < 0:
            raise ValueError("Config: max_inline_depth must be >= 0")
        n = len(self.model_paths) or len(self.model_bytes)
        for size, delay, preferred in zip(self.batch_sizes(n), self.queue_delays(n), self.preferred_sizes(n)):
            if int(size) < 0:
                raise ValueError(f"Config: max_batch_size must be >= 0, got {size}")
            if not float(delay) >= 0:
                raise ValueError(f"Config: max_queue_delay must be >= 0 seconds, got {delay}")
            if any(not 1 <= int(p) <= max(int(size), 1) for p in preferred):
                raise ValueError(f"Config: preferred_batch_sizes {tuple(preferred)} must lie in 1..max_batch_size "
                                 f"({size})")
        if self.priority_aging is not None and not float(self.priority_aging) > 0:
            raise ValueError(f"Config: priority_aging must be > 0 seconds or None, got {self.priority_aging}")
        if self.memory_limit_bytes is not None:
            try:
                resolve_limit(self.memory_limit_bytes)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"Config: {exc}") from None

    @property
    def capacity(self) -> int:
        return int(self.queue_capacity or self.num_threads)

    def worker_cpus(self) -> list[int] | None:
        """The CPUs workers are pinned to in turn (worker i on cpus[i % len(cpus)]), None when they
        are not pinned (worker_affinity "none"). Raises ValueError for a bad worker_affinity."""
        affinity = self.worker_affinity
        if isinstance(affinity, str):
            if affinity == "none":
                return None
            if affinity != "spread":
                raise ValueError(f"Config: worker_affinity must be 'none', 'spread' or CPU ids, got {affinity!r}")
        if not hasattr(os, "sched_setaffinity"):
            raise ValueError("Config: worker_affinity needs os.sched_setaffinity (Linux)")
        allowed = sorted(os.sched_getaffinity(0))
        if isinstance(affinity, str):
            return allowed
        try:
            cpus = list(affinity)
        except TypeError:  # an int, None, a float: not a sequence of CPU ids
            cpus = []
        if not cpus or any(isinstance(c, bool) or not isinstance(c, (int, np.integer)) for c in cpus):
            raise ValueError(f"Config: worker_affinity must be 'none', 'spread' or CPU ids, got {affinity!r}")
        if bad := [int(c) for c in cpus if c not in allowed]:
            raise ValueError(f"Config: worker_affinity CPUs {bad} are not among this process's CPUs {allowed}")
        return [int(c) for c in cpus]

    def worker_device(self, index: int) -> str | None:
        """The device worker `index` runs on: "cuda:<n>" by `devices` (engine.device.worker_devices),
        None without them (the Predictors' own device)."""
        if not self.devices:
            return None
        return f"cuda:{worker_devices(index + 1, self.devices)[index]}"

    def batch_sizes(self, n: int) -> list[int]:
        """max_batch_size per model (n models)."""
        return _per_model(self.max_batch_size, n, "max_batch_size")

    def queue_delays(self, n: int) -> list[float]:
        """max_queue_delay per model (n models)."""
        return _per_model(self.max_queue_delay, n, "max_queue_delay")

    def preferred_sizes(self, n: int) -> list[tuple]:
        """preferred_batch_sizes per model (n models)."""
        p = tuple(self.preferred_batch_sizes)
        if p and all(isinstance(x, (list, tuple)) for x in p):
            return [tuple(x) for x in _per_model(p, n, "preferred_batch_sizes")]
        return [p] * n


def _per_model(value, n: int, name: str) -> list:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"Config: {name} has {len(value)} values for {n} model(s)")
        return list(value)
    return [value] * n


class _Job(Future):
    """One request: its Future, and what the worker needs to run it.

    cancel() also takes the job out of the queue (and frees its slot).
    """

    slot = False       # holds one of the queue's `capacity` slots
    queued = False     # in the queue (a worker, cancel or close takes it out under the queue's lock)
    core = None        # set once queued, so that cancel() can take it out
    batch_key = None   # the batch signature, once a Batcher computed it
    rows = 1
    output_device = None  # None: numpy outputs; "cuda": the device's arrays (engine/inputs.outputs_on_device)

    def __init__(self, net_id, inputs, output_names, deadline, priority=0):
        super().__init__()
        self.net_id = net_id
        self.inputs = inputs
        self.output_names = output_names
        self.enqueued = self.submitted = time.perf_counter()
        self.deadline = deadline  # time.perf_counter() value or None
        self.priority = priority

    def cancel(self) -> bool:
        cancelled = super().cancel()
        core = self.core
        if cancelled and core is not None:
            self.core = None
            core.cancelled(self)
        return cancelled

    def _invoke_callbacks(self):
        if self._done_callbacks:  # user code, which may block: a worker hands its wake on first
            _release_wake()
            super()._invoke_callbacks()


_awake_worker = threading.local()  # .release: the queue's release() while this worker counts as awake


def _release_wake() -> None:
    """Before user code on this thread: a worker counted awake (Config.active_workers) releases its
    count, so that a callback that blocks never holds up the queued jobs; a no-op elsewhere."""
    release = getattr(_awake_worker, "release", None)
    if release is not None:
        _awake_worker.release = None
        release()


class _Workers:
    """The worker threads and what they share: models, queue, batchers, callback, stats.

    Holds no reference to the pool (a pool dropped without close() lets its workers go).
    """

    def __init__(self, config: Config, predictors: list[Predictor], callback: Callback | None):
        self.config = config
        self.predictors = predictors
        self.callback = callback
        self.restore = config.shape_policy == "restore"
        self.batch_plans = _batchers(config, predictors)  # every model's Batcher or None (with row_costs)
        self.batchers = [b if b is not None and b.max_rows > 1 else None for b in self.batch_plans]
        self.cpus = config.worker_cpus()  # worker i pinned to cpus[i % len], or None (unpinned)
        cpu_pool = not config.devices and str(config.device).lower() == "cpu"
        # Config.active_workers: bound on a CPU pool whose workers are not pinned (pinned, the awake
        # ones could share a CPU) and which does not batch (a batch waits for jobs while workers idle)
        active = config.active_workers if config.active_workers is not None else available_cpus()
        self.wake_limit = (active if cpu_pool and self.cpus is None and not any(self.batchers)
                           and 0 < active < config.num_threads else None)
        # the worker that slept last first, unless workers differ (pinned, or on several devices): they take turns
        self.queue = JobQueue(config.capacity, config.priority_aging, self.wake_limit,
                              lifo=self.cpus is None and len(config.devices) <= 1)
        self.stats = StatsRecorder(range(len(predictors)))
        self.stats.batching = {i for i, b in enumerate(self.batchers) if b is not None}
        # the Callback's methods, None where it keeps Callback's no-op (not called at all)
        self.on_enqueued, self.on_dequeued, self.on_processed = (
            _hook(callback, name) for name in ("on_job_enqueued", "on_job_dequeued", "on_job_processed"))
        self.threads: list[threading.Thread] = []
        self.threads_lock = threading.Lock()
        self.idle: list[bool] = []  # per worker, written only by that worker
        self.running: list = []     # per worker, (net_id, rows) of its run or None; written only by it
        self.started = False        # all num_threads workers are running
        self.local = threading.local()  # .worker: True on this pool's workers; .depth: inline depth
        self.known_outputs = [self._readable(p) for p in predictors]
        # PooledPredictor.infer()'s caller runs: per model whether it may run on the calling thread
        # (a CPU pool on one device, no dynamic batching), its free caller Nets, and how many run now
        self.direct = [cpu_pool and b is None for b in self.batchers]
        self.caller_nets: list[list] = [[] for _ in predictors]
        self.callers = 0  # infer() jobs on callers' threads, running or waiting for a slot
        self.callers_lock = threading.Lock()
        slots = config.infer_slots if config.infer_slots is not None else available_cpus()
        # None where it cannot bind: no more than num_threads callers run at once anyway
        self.caller_slots = threading.Semaphore(slots) if 0 < slots < config.num_threads else None

    @staticmethod
    def _readable(p: Predictor) -> set:
        """Blob names a job may ask for: under MEMORY only inputs, outputs, weights and `keep`."""
        names = set(p.program.output_names) | set(p.program.input_names) | set(p.program.weights)
        if p.optimization is Optimization.MEMORY:
            return names | set(p.canonical_net.keep)
        return names | {o for s in p.program.steps for o in s.node.outputs if o}

    # ---- callbacks (never raise) -----------------------------------------------
    def notify(self, hook, *args) -> None:
        """Call a Callback method (one of on_enqueued, on_dequeued, on_processed); errors logged, counted."""
        try:
            hook(*args)
        except Exception:
            self.stats.callback_error()
            log.exception("Callback.%s raised; ignored", hook.__name__)

    # ---- workers -----------------------------------------------------------------
    def cancelled(self, job: _Job) -> None:
        """A job's Future was cancelled: out of the queue if it is still there."""
        if self.queue.remove(job):
            self.stats.count(job.net_id, "cancelled")

    def in_worker(self) -> bool:
        return getattr(self.local, "worker", False)

    def take_caller_net(self, net_id: int):
        """For infer(): a caller slot (waited for, Config.infer_slots) and the caller Net of model
        `net_id` used last (a new one if none is free); None, at once, when num_threads jobs run or
        wait already (the callers' and the busy workers') or the pool closed."""
        with self.callers_lock:
            if self.queue.closed or self.callers + self.idle.count(False) >= self.config.num_threads:
                return None
            self.callers += 1
        slots = self.caller_slots
        if slots is not None:
            try:
                slots.acquire()
            except BaseException:  # interrupted (KeyboardInterrupt): not a caller any more
                self._leave(None)
                raise
        with self.callers_lock:
            free = self.caller_nets[net_id]
            net = free.pop() if free else None  # last in, first out: its arena is in the caches
        if net is None:
            try:
                net = self.predictors[net_id].new_net()
            except BaseException:
                self._leave(slots)
                raise
        return net

    def give_caller_net(self, net_id: int, net) -> None:
        with self.callers_lock:
            if not self.queue.closed:  # a closed pool lets its caller Nets go
                self.caller_nets[net_id].append(net)
        self._leave(self.caller_slots)

    def _leave(self, slots) -> None:
        with self.callers_lock:
            self.callers -= 1
        if slots is not None:
            slots.release()

    def release_wake(self) -> None:
        """Config.active_workers: this worker is about to run user code and counts as asleep; when
        jobs wait, another worker is woken (started, if every one started is busy)."""
        self.queue.release()
        if not self.started and len(self.queue):
            self.maybe_start_worker()

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
            self.running.append(None)
            self.threads.append(t)
            self.started = len(self.threads) >= self.config.num_threads  # then no more checks
        t.start()

    def worker_main(self, index: int) -> None:
        self.local.worker = True
        self.local.depth = 0
        if self.cpus:
            cpu = self.cpus[index % len(self.cpus)]
            try:
                os.sched_setaffinity(0, {cpu})  # 0: the calling thread (Linux)
            except OSError:  # the CPU went away since validate(): the worker runs unpinned
                log.warning("pool worker %d: cannot pin to CPU %d; running unpinned", index, cpu)
        device = self.local.device = self.config.worker_device(index)
        try:
            context = get_device(device or self.config.device).worker_context()
            context.__enter__()
        except BaseException:  # no device context: the jobs still run, and fail on the Net if the device does
            log.exception("pool worker %d: cannot set up device %s", index, device or self.config.device)
            context = None
        try:
            self._work(index)
        finally:
            if context is not None:
                try:
                    context.__exit__(None, None, None)
                except Exception:
                    log.exception("pool worker %d: device teardown failed", index)

    def _work(self, index: int) -> None:
        idle = self.idle
        running = self.running
        jobs = self.queue
        get = jobs.get
        batchers = self.batchers
        limited = self.wake_limit is not None
        awake = _awake_worker
        awake.release = None  # not counted awake before its first job
        counted = False
        while True:
            # idle or running, never neither: another worker's batch shares with this one (fair_share)
            idle[index] = True
            running[index] = None
            if limited:  # counted awake (Config.active_workers) unless it released to user code
                job = get(awake.release is not None)
                awake.release = self.release_wake
            else:  # no bound: the count is kept, never released
                job = get(counted)
                counted = True
            if job is STOP:
                idle[index] = False
                awake.release = None
                return
            running[index] = (job.net_id, job.rows)
            idle[index] = False
            try:
                batcher = batchers[job.net_id]
                # gather only when other jobs wait, or a batch may wait for them
                if batcher is not None and (jobs._size or batcher.delay) and self.run_batch(job, batcher, index):
                    continue
                if not job.set_running_or_notify_cancel():
                    self.stats.count(job.net_id, "cancelled")  # cancelled between take and start
                    continue
                if self.on_dequeued is not None:
                    _release_wake()
                    self.notify(self.on_dequeued)
                self.process(job, inline=False)
            except BaseException:  # last line of defence: the worker survives, the Future ends
                log.exception("unexpected error in a pool worker")
                if not job.done():
                    job.set_exception(RuntimeError("internal error in the pool worker"))

    def expired(self, job: _Job, now: float) -> bool:
        """Fail a job whose deadline passed before it ran; True if it did."""
        if job.deadline is None or now <= job.deadline:
            return False
        wait = now - job.enqueued
        self.stats.record(job.net_id, "expired", queue_wait=wait)
        job.inputs = None
        job.set_exception(DeadlineExceededError(
            f"the job's deadline passed {now - job.deadline:.3f} s before a worker "
            f"took it (it waited {wait * 1e3:.1f} ms)"))
        return True

    def process(self, job: _Job, inline: bool, net=None) -> None:
        """Run one job on this thread's Net for its model (or on `net`, a caller Net: infer())
        and complete its Future."""
        direct = net is not None
        if (inline or direct) and not job.set_running_or_notify_cancel():
            return
        if direct:
            self.stats.count(job.net_id, "direct")  # taken on the calling thread, whether it runs or expires
        started = time.perf_counter()
        if job.deadline is not None and started > job.deadline and self.expired(job, started):
            return
        result = error = None
        try:
            if net is None:
                net = self.predictors[job.net_id].net(getattr(self.local, "device", None))
            # CheckedInputs (checked in the caller's thread at submit), read in place where they can be
            blobs = net.forward(job.inputs, job.output_names, share_inputs="large", output_device=job.output_device)
            result = owned_copies(blobs, job.output_names, net.device, job.output_device is not None)
        except BaseException as exc:
            error = exc
        if net is not None and not net.restored and self.restore and not inline:
            net.restore()
        end = time.perf_counter()
        ran = end - started
        if self.on_processed is not None:
            _release_wake()
            self.notify(self.on_processed, ran * 1e3)
        stats = self.stats
        stats.record(job.net_id, "failed" if error is not None else "completed",
                     queue_wait=started - job.enqueued, run=ran, end_to_end=end - job.submitted)
        if inline:
            stats.count(job.net_id, "inline")
        job.inputs = None  # do not keep the caller's arrays alive through the Future
        if error is not None:
            job.set_exception(error)
        else:
            job.set_result(result)

    def run_batch(self, first: _Job, batcher: Batcher, index: int) -> bool:
        """Gather jobs like `first` into one batched run; False (nothing done) when `first` runs alone.

        Each job of the batch is started on its own (a cancelled one leaves, an
        expired one fails, on_job_dequeued once each); one run; each job gets
        its rows of the outputs, on_job_processed and its stats. The Net keeps
        the batch's layout (shape_policy "restore" applies to jobs run alone). When the
        batched run raises, every job is run again alone, so an error fails
        only the jobs that cause it.
        """
        net_id = first.net_id
        net = self.predictors[net_id].net(self.local.device)
        if not batcher.admits(first, net):
            return False
        key = first.batch_key
        idle, running = self.idle, self.running

        def taken(rows):  # under the queue's lock: the next batch's share counts these rows
            running[index] = (net_id, rows)

        # this batch's share of the model's rows in the pool (batching.fair_share)
        more = self.queue.gather(first, lambda j: j.net_id == net_id and batcher.key(j) == key, _rows,
                                 batcher.max_rows, batcher.delay, batcher.preferred,
                                 lambda rows: fair_share(rows, net_id, index, idle, running), taken)
        if not more:
            return False
        live = []
        started = time.perf_counter()
        for job in [first] + more:
            if not job.set_running_or_notify_cancel():
                self.stats.count(net_id, "cancelled")
                continue
            if self.on_dequeued is not None:
                self.notify(self.on_dequeued)
            if job.deadline is None or started <= job.deadline or not self.expired(job, started):
                live.append(job)
        if len(live) < 2:
            for job in live:
                self.process(job, inline=False)
            return True
        try:
            results = batcher.run(net, live)
        except BaseException as exc:
            if isinstance(exc, NotBatchable):
                batcher.reject(key)
                log.warning("net %d: outputs did not follow the batch (%s); this input signature runs "
                            "unbatched from now on", net_id, exc)
            if not net.restored and self.restore:
                net.restore()
            for job in live:
                self.process(job, inline=False)
            return True
        # No restore() here: the batch's layout is bounded by max_batch_size and stays in the
        # Net's layout cache anyway; keeping it current saves two reshapes per batch.
        end = time.perf_counter()
        ran = end - started
        stats = self.stats
        stats.batch(net_id, len(live))
        for job, result in zip(live, results):
            if self.on_processed is not None:
                self.notify(self.on_processed, ran * 1e3)
            stats.record(net_id, "completed", queue_wait=started - job.enqueued, run=ran,
                         end_to_end=end - job.submitted)
            job.inputs = None
            job.set_result(result)
        return True


def _hook(callback: Callback | None, name: str):
    """The callback's bound method `name`, or None when there is none or it is Callback's no-op."""
    if callback is None or getattr(type(callback), name, None) is getattr(Callback, name):
        return None
    return getattr(callback, name)


def _rows(job: _Job) -> int:
    return job.rows


def _batchers(config: Config, predictors: list[Predictor]) -> list[Batcher | None]:
    """A Batcher per model whose max_batch_size > 1 (None: that model never batches).

    With Config.warmup, each is calibrated at the warm-up shapes (Batcher.calibrate), on
    the thread's CPU time when BLAS is limited to one thread (a forward runs on its thread alone).
    """
    n = len(predictors)
    calibration = None
    if config.warmup:
        shapes = list(config.warmup_shapes) + [None] * (n - len(config.warmup_shapes))
        calibration = [(p.new_net, s) for p, s in zip(predictors, shapes)]
    one_thread = config.disable_blas_threading and int(config.blas_threads) == 1
    return make_batchers([p.program for p in predictors], config.batch_sizes(n), config.queue_delays(n),
                         config.preferred_sizes(n), explicit=isinstance(config.max_batch_size, (list, tuple)),
                         calibration=calibration, clock=time.thread_time if one_thread else time.perf_counter)


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
        predictors = [Predictor(src, device=config.worker_device(0) or config.device, optimization=config.optimization,
                                planner=config.planner, keep=config.keep,
                                cache_bytes=config.layout_cache_bytes,
                                graph_optimization_level=config.graph_optimization_level,
                                disabled_passes=config.disabled_passes, disable_blas_threading=False,
                                memory_limit_bytes=config.memory_limit_bytes,
                                external_data_dir=config.external_data_dir,
                                enable_profiling=config.enable_profiling, cuda_graphs=config.cuda_graphs,
                                int8_arithmetic=config.int8_arithmetic)
                      for src in sources]
        if config.warmup:
            for i, p in enumerate(predictors):
                p.warmup(config.warmup_shapes[i] if i < len(config.warmup_shapes) else None)
        self._blas_token = limit_blas_threads(config.blas_threads) if config.disable_blas_threading else None
        self._core = _Workers(config, predictors, callback)
        self._closed = False
        self._close_lock = threading.Lock()
        self._closing_thread = None                  # the thread of the first close()
        self._cancelled_pending = threading.Event()  # set once that close() has cancelled the queued jobs
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
                timeout: float | None = None, priority: int = 0, output_device: str | None = None) -> Future:
        """Queue one inference job.

        Args:
            inputs: list in input order, dict name -> array, or one array
                (float32 etc. as the model declares): numpy arrays, DLPack producers, and on
                device "cuda" CuPy / CUDA DLPack arrays (copied device to device by the worker;
                jobs with them run unbatched). Read when the job runs: do not modify them until
                the Future is done.
            output_names: blobs to return; None: the model's outputs. An unknown
                name raises UnknownBlobError (Config.unknown_output="warn": it is
                logged and skipped).
            net_id: which model (index in the Config).
            deadline: seconds from now; a job not started by then fails with
                DeadlineExceededError without running.
            block / timeout: admission for this call (default: the Config's).
            priority: the job's priority level (Triton's): workers take the
                highest level first, FIFO within a level (see Config.priority_aging).
            output_device: "cpu" or "cuda" for this job (None: Config.output_device); jobs
                with device outputs run unbatched.
        Returns:
            Future of a dict output name -> numpy array (copies), or CuPy arrays on the GPU
            that ran the job (output_device "cuda"); done when the worker's stream is.
        Raises:
            UnknownNetError, InputError (count, names, rank, dims, dtype),
            UnknownBlobError (an unknown output name, unless unknown_output="warn"),
            QueueFullError, PoolClosedError; TypeError: a priority that is not an int.
        """
        job = self._job(inputs, output_names, net_id, deadline, block, timeout, priority, output_device, "forward")
        return self._submit(job, block, timeout)

    def infer(self, inputs, output_names: Sequence[str] | None = None, net_id: int = 0, *,
              deadline: float | None = None, block: bool | None = None,
              timeout: float | None = None, priority: int = 0, output_device: str | None = None) -> dict:
        """Run one inference job and wait for it: forward(...).result(), run on the calling thread
        when it can be (onnxruntime's InferenceSession.run; Java's caller-runs policy).

        When no job waits in the queue and fewer than num_threads jobs run (the workers' and
        other callers'), the job runs on this thread once one of Config.infer_slots is free
        (default: one per CPU), on one of the pool's caller Nets (a free list per model, created
        on first use: at most one per slot, over the models' shared weights). Otherwise it is
        queued and waited for as forward().result().
        A job run here skips the queue, the workers and the on_job_enqueued/on_job_dequeued
        callbacks (on_job_processed is called), and counts in stats() as "direct". It saves the
        two thread handoffs of a queued job (the worker's wake-up and the caller's), each a
        context switch and a GIL acquisition: 60-70 us a job on a 2-vCPU VM, and more where
        other Python threads hold the GIL (benchmarks/neighbours.py).

        Caller runs need a CPU pool on one device, a model without dynamic batching and numpy
        outputs; other jobs, and calls from a pool worker, go through forward().

        Args: as forward() (block/timeout: admission, when the job is queued).
        Returns:
            dict output name -> numpy array (copies), as forward()'s Future.
        Raises:
            as forward(), and the job's own error (InputError for a shape the model rejects,
            KernelError, DeadlineExceededError...), raised here instead of set on a Future.
        """
        job = self._job(inputs, output_names, net_id, deadline, block, timeout, priority, output_device, "infer")
        core = self._core
        net_id = job.net_id
        if core.direct[net_id] and job.output_device is None and not core.queue._size \
                and not getattr(core.local, "worker", False):
            net = core.take_caller_net(net_id)
            if net is not None:
                core.stats.submitted(net_id)
                try:
                    core.process(job, inline=False, net=net)
                finally:
                    core.give_caller_net(net_id, net)
                return job.result()
        return self._submit(job, block, timeout).result()

    def _job(self, inputs, output_names, net_id, deadline, block, timeout, priority, output_device, call) -> "_Job":
        """A checked job (forward()'s checks, in the caller's thread)."""
        core = self._core
        if self._closed or core.queue.closed:
            raise PoolClosedError(f"{call}() on a closed PooledPredictor")
        if net_id.__class__ is not int or not 0 <= net_id < len(core.predictors):
            net_id = self._check_net_id(net_id)
        predictor = core.predictors[net_id]
        arrays = predictor.canonical_net.input_spec.check(inputs)
        names = predictor.program.output_names if output_names is None else self._resolve_outputs(net_id, output_names)
        if deadline is not None or timeout is not None or block is not None:
            check_admission_args(deadline, block, timeout)
        dl = None if deadline is None else time.perf_counter() + float(deadline)
        if priority.__class__ is not int:
            priority = _check_priority(priority)
        job = _Job(net_id, arrays, names, dl, priority)
        od = self.config.output_device if output_device is None else output_device
        if od is not None and od != "cpu" and str(od).lower() != "cpu":
            outputs_on_device(od, predictor.canonical_net.device)  # InputError at the call
            job.output_device = od
        return job

    def _submit(self, job: "_Job", block, timeout) -> "_Job":
        """Run a checked job inline (from a worker, with allow_inline_scheduling) or queue it."""
        core = self._core
        net_id = job.net_id
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
        try:
            # A worker never blocks on its own queue: that could deadlock the pool.
            size = core.queue.put(job, block, timeout, force=in_worker)
        except QueueFullError:
            core.stats.count(net_id, "rejected")
            raise
        core.stats.submitted(net_id)
        job.core = core  # so that cancel() can take it out of the queue
        if core.on_enqueued is not None:  # job.enqueued moved on if put() waited for room
            core.notify(core.on_enqueued, size, (job.enqueued - job.submitted) * 1e3)
        return job

    def _resolve_outputs(self, net_id: int, output_names) -> list[str]:
        program = self._core.predictors[net_id].program
        if output_names is None:
            return program.output_names  # shared, never modified
        output_names = check_output_names(output_names)
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
        import asyncio  # here, not at the top: 16 ms of every import for a caller that never awaits (issue 31)

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
        Safe from anywhere, any number of times at once: another thread, a
        Callback, a then() chain, a worker, the done-callback of a job this very
        close() is cancelling. The first call closes; the jobs it cancels run
        their callbacks outside every lock; with wait, other callers wait until
        those cancellations are done (unless called from inside them).
        """
        core = self._core
        with self._close_lock:
            first = not self._closed
            self._closed = True
            if first:
                self._closing_thread = threading.get_ident()
                with core.threads_lock:  # no worker starts while the queue closes
                    pending = core.queue.close(drain=cancel_pending)
                with core.callers_lock:  # infer()'s caller Nets go; one running now is dropped when it ends
                    core.caller_nets = [[] for _ in core.caller_nets]
                _live_pools.discard(self)
                if self._blas_token is not None:
                    release_blas_threads(self._blas_token)
                    self._blas_token = None
        if first:
            try:
                for job in pending:  # callbacks run here may call close() again: no lock is held
                    if job.cancel():
                        core.stats.count(job.net_id, "cancelled")
            finally:
                self._cancelled_pending.set()
        elif wait and self._closing_thread != threading.get_ident():
            self._cancelled_pending.wait()
        if wait and not core.in_worker():
            for t in list(core.threads):
                if t is not threading.current_thread():
                    t.join()

    def __enter__(self) -> "PooledPredictor":
        return self

    def __exit__(self, *exc) -> None:
        self.close(wait=True)


def _check_priority(priority) -> int:
    if isinstance(priority, bool) or not isinstance(priority, (int, np.integer)):
        raise TypeError(f"priority must be an int, got {type(priority).__name__} {priority!r}")
    return int(priority)
def check_admission_args(deadline, block, timeout) -> None:
    """forward()'s deadline (seconds, a real number), block (bool) and timeout (seconds >= 0 or None).

    Raises:
        InputError: naming the argument and the type or value given.
    """
    for name, value in (("deadline", deadline), ("timeout", timeout)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise InputError(f"{name} must be a number of seconds or None, not {type(value).__name__}")
        if value != value:
            raise InputError(f"{name} must be a number of seconds, not NaN")
    if timeout is not None and timeout < 0:
        raise InputError(f"timeout must be >= 0 seconds, got {timeout}")
    if block is not None and not isinstance(block, (bool, np.bool_)):
        raise InputError(f"block must be True, False or None, not {type(block).__name__}")


def _finalize(core: _Workers, blas_token) -> None:
    """The pool was garbage-collected without close(): let its workers exit."""
    with core.threads_lock:
        if not core.queue.closed:
            core.queue.close(drain=False)


class PinnedPooledPredictor(HandleAPI):
    """A PooledPredictor bound to one model (fb-caffe-exts' PinnedPooledPredictor).

    It also has Paddle's handle API (pooled_predictor/paddle_api.py): run() with
    no arguments sends the fed handles through the pool and waits.
    """

    def __init__(self, pool: PooledPredictor, net_id: int):
        self.pool = pool
        self.net_id = pool._check_net_id(net_id)

    def forward(self, inputs, output_names: Sequence[str] | None = None, **kwargs) -> Future:
        """pool.forward(inputs, output_names, net_id=self.net_id, ...)."""
        return self.pool.forward(inputs, output_names, self.net_id, **kwargs)

    def infer(self, inputs, output_names: Sequence[str] | None = None, **kwargs) -> dict:
        """pool.infer(inputs, output_names, net_id=self.net_id, ...): run and wait, on this thread when it can."""
        return self.pool.infer(inputs, output_names, self.net_id, **kwargs)

    async def forward_async(self, inputs, output_names: Sequence[str] | None = None, **kwargs):
        return await self.pool.forward_async(inputs, output_names, self.net_id, **kwargs)

    @property
    def predictor(self) -> Predictor:
        return self.pool.predictor(self.net_id)

    def run(self) -> None:
        """Paddle's run(): the fed input handles through the pool (blocks until done)."""
        self._paddle_run()

    def _handle_inputs(self):
        return self.predictor.inputs

    def _handle_outputs(self):
        return self.predictor.outputs

    def _handle_run(self, arrays: dict) -> dict:
        return self.infer(arrays)

    def canonical_net(self):
        return self.pool.canonical_net(self.net_id)

    def close(self, wait: bool = True, cancel_pending: bool = False) -> None:
        self.pool.close(wait, cancel_pending)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.pool.close(wait=True)
