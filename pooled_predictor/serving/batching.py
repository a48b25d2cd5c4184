"""Dynamic batching (Triton's dynamic batcher): which models can batch, and one batched run.

A model batches when its first dimension is free and means "rows", which we
decide conservatively, in two steps:

1. From the declared graph (`free_batch_dimension`): every graph input has a
   known rank >= 1 and a first dimension that is not a number (a symbol such as
   "N", or unset), and the inputs that name it all name the same symbol. An
   output whose declared first dimension is that same symbol is proven to
   follow the batch.
2. For each other output (an unrelated symbol, a number, unknown), a shape
   probe per input signature (the inputs' shapes without their first dimension,
   and dtypes): the worker's Net infers every shape at batch 1 and at batch 2;
   each output must then have first dimension 1 and 2 and the same other
   dimensions. An output whose shape depends on data (NonZero, say) fails the
   probe. The answer is cached per signature.

After every batched run each output's first dimension is checked against the
batch's rows; a mismatch runs the jobs alone and never batches that signature
again. Shapes cannot show that rows stay independent (a model normalizing over
the batch axis keeps its shapes): such a model must be served with
max_batch_size=0 for it, as in Triton, where the model's configuration says so.

Jobs batch together when they are for the same net_id, have the same
signature, and ask only for graph outputs; a job asking for a kept
intermediate or a weight runs alone.

How large a batch is (measured on 2 cores, 8 closed-loop clients, 2 workers;
benchmarks/serving.py):

* Its share (`fair_share`): the rows of the model in the pool, those waiting and
  those other workers run, split evenly over this worker, the idle ones and
  those running the model. Taking every queued job left the other worker one
  client to serve, each of its jobs waiting out the delay, while seven waited
  through one long batch (PP-OCR rec's p99 2.5x the pool's without batching);
  a lone job never waits for the delay while a worker is idle.
* Whether it pays (`Batcher.calibrate`, at warm-up, when the model has no
  preferred_batch_sizes): the seconds per row of one forward at batch 1, 2, 4,
  ... max_batch_size. The preferred size is the smallest within 5% of the
  cheapest per row; unless it costs at most PAYS (0.8) of a row alone, the
  model does not batch. Even sharing, batches widen the spread of latencies:
  at every size up to 8, PP-OCR rec's and MobileNetV2's p99s were 1.0-1.3x the
  pool's (median of rounds, four runs), their rows costing 0.9-1.05 of a row
  alone; a batch must make rows cheaper by more than that costs. PP-OCR rec
  and MobileNetV2, one single-threaded forward per worker, do not batch (rows
  at batch 8 cost 0.93-1.05 of a row alone; 0.83 once at batch 4 under load 6,
  where other processes shared the cores' caches); the tests' MLP, mostly
  per-forward cost, batches 8 (0.2).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Mapping, Sequence

import numpy as np

from ..engine.inputs import CheckedInputs
from ..errors import PooledPredictorError
from ..engine.program import Program

log = logging.getLogger("pooled_predictor")


PAYS = 0.8        # a batch size pays when a row costs at most this much of a row alone
NEAR_BEST = 1.05  # the preferred size: the smallest whose row costs at most this much of the cheapest


class NotBatchable(Exception):
    """A batched run's outputs did not follow the batch: run the jobs alone."""


def free_batch_dimension(program: Program) -> tuple[str | None, str]:
    """The symbol of a free first dimension shared by all inputs, and why not if there is none.

    Returns:
        (symbol, reason): symbol is the common dim_param ("" when every input
        leaves it unset), or None with a reason naming the input that blocks
        batching.
    """
    symbols = set()
    if not program.inputs:
        return None, "the model has no inputs"
    for v in program.inputs:
        if v.shape is None or len(v.shape) == 0:
            return None, f"input {v.name!r} has {'no' if v.shape is None else 'a scalar'} shape"
        d0 = v.shape[0]
        if isinstance(d0, int):
            return None, f"input {v.name!r} has a fixed first dimension {d0}"
        if d0:
            symbols.add(d0)
    if len(symbols) > 1:
        return None, f"the inputs' first dimensions are different symbols {sorted(symbols)}"
    return (symbols.pop() if symbols else ""), ""


class Batcher:
    """Batching of one model's jobs (built by the pool for each model with max_batch_size > 1).

    Args:
        program: the model's Program.
        max_rows: Config.max_batch_size for this model (rows of one batched run).
        delay: Config.max_queue_delay (seconds).
        preferred: Config.preferred_batch_sizes for this model (rows).
    Raises:
        ValueError: the model cannot batch (the message says why).
    """

    def __init__(self, program: Program, max_rows: int, delay: float, preferred=()):
        symbol, why = free_batch_dimension(program)
        if symbol is None:
            raise ValueError(why)
        self.max_rows = int(max_rows)
        self.delay = float(delay)
        self.preferred = tuple(int(p) for p in preferred)
        self.input_names = list(program.input_names)
        self.output_names = program.output_names  # the very list forward() gives jobs asking for the outputs
        self._outputs = set(self.output_names)
        self._dtypes = [v.dtype for v in program.inputs]
        self._dims = [d for v in program.inputs for d in v.shape[1:]]  # all but the batch dimension
        # outputs proven by their declared shape; the rest need the probe
        self.needs_probe = [v.name for v in program.outputs
                            if not (symbol and v.shape and v.shape[0] == symbol)]
        self._signatures: dict = {}  # signature -> batchable (bool), filled by probes
        self._lock = threading.Lock()
        self.row_costs: dict[int, float] = {}  # batch rows -> seconds per row, once calibrated

    # ---- how large a batch is ------------------------------------------------------
    def calibrate(self, net, shapes: Mapping[str, Sequence[int]] | None = None, rounds: int = 7,
                  budget: float = 2.0, clock: Callable[[], float] | None = None) -> bool:
        """Set the preferred size (and max_rows) from `net`'s seconds per row at each batch size.

        Runs forwards at 1, 2, 4, ... max_rows rows (and max_rows), zeros of the
        inputs' dtypes, `shapes` with the first dimension replaced, after one
        untimed forward each (its layout). A round runs about max_rows rows at
        each size (max_rows // size forwards), the sizes in a rotated order; up to
        `rounds` rounds, none started after `budget` seconds (at least 3). Time is
        read on `clock`: the wall clock by default; the pool gives time.thread_time
        when it limits BLAS to one thread (the forward then runs on this thread
        alone, and its CPU time moves little with other processes' load). Sizes are
        compared within a round, where the machine was the same: row_costs[b] is
        the median over rounds of a row's time at b over a row's time at 1, times
        the median time of a row at 1. The preferred size is the smallest whose
        row costs at most NEAR_BEST of the cheapest; max_rows becomes it, or 1
        (the model does not batch) unless its row costs at most PAYS of a row
        alone. The Net keeps those layouts.

        Args:
            net: a Net of the model (a scratch one: the pool's workers have their own).
            shapes: input name -> shape (the first dimension is ignored); None: the
                declared shapes, when every dimension but the first is a number.
            rounds, budget: rounds at most; seconds (wall) after which no new round starts.
            clock: seconds, read before and after each size's forwards in a round
                (None: time.perf_counter).
        Returns:
            False (nothing changed) when `shapes` is None and a declared dimension
            beyond the first is free: timings at a guessed size would mislead.
        Raises:
            InputError, ShapeInferenceError: shapes the model does not take.
        """
        if shapes is None:
            if not all(isinstance(d, int) for d in self._dims):
                return False
            shapes = net.default_input_shapes()
        else:
            shapes = net.input_spec.check_shapes(shapes)
        sizes = sorted({min(1 << k, self.max_rows) for k in range(self.max_rows.bit_length() + 1)})
        feeds = {b: {n: np.zeros((b,) + tuple(shapes[n][1:]), dt if dt is not None else np.float32)
                     for n, dt in zip(self.input_names, self._dtypes)} for b in sizes}
        for b in sizes:
            net.forward(feeds[b])
        clock = clock or time.perf_counter
        per_row = {b: [] for b in sizes}  # seconds per row at b, one entry per round
        start = time.perf_counter()
        for r in range(rounds):
            for b in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
                n = max(1, self.max_rows // b)
                t0 = clock()
                for _ in range(n):
                    net.forward(feeds[b])
                per_row[b].append((clock() - t0) / (n * b))
            if r >= 2 and time.perf_counter() - start > budget:
                break
        one = float(np.median(per_row[1]))
        self.row_costs = {b: one * float(np.median(np.divide(per_row[b], per_row[1]))) for b in sizes}
        size = preferred_size(self.row_costs)
        self.preferred = (size,) if size > 1 else ()
        self.max_rows = size
        return True

    # ---- which jobs go together -----------------------------------------------------
    def key(self, job):
        """The job's batch signature (cached on it), or None when it must run alone; sets job.rows."""
        if job.batch_key is not None:
            return job.batch_key
        if getattr(job, "output_device", None) is not None or getattr(job.inputs, "on_device", None):
            return None  # device arrays at its edges: the job runs alone
        names = job.output_names
        if names is not self.output_names and not self._outputs.issuperset(names):
            return None
        shapes, rows = [], None
        for name in self.input_names:
            a = job.inputs[name]
            if a.ndim == 0 or (rows is not None and a.shape[0] != rows):
                return None
            rows = a.shape[0]
            shapes.append((a.shape[1:], a.dtype.str))
        if rows is None or rows > self.max_rows or rows == 0:
            return None
        job.rows = rows
        job.batch_key = key = tuple(shapes)
        return key

    def admits(self, job, net) -> bool:
        """True when `job` may lead a batch: it has a signature and that signature batches."""
        key = self.key(job)
        if key is None:
            return False
        ok = self._signatures.get(key)
        if ok is None:
            ok = self._probe(key, net)
            with self._lock:
                self._signatures[key] = ok
        return ok

    def _probe(self, key, net) -> bool:
        if not self.needs_probe:
            return True
        try:
            seen = []
            for b in (1, 2):
                net.reshape({n: (b,) + shape for n, (shape, _) in zip(self.input_names, key)})
                shapes = net.output_shapes
                seen.append([shapes.get(o) for o in self.needs_probe])
        except PooledPredictorError:
            return False  # the jobs run alone and get the model's own error
        for one, two in zip(*seen):
            if one is None or two is None or one[:1] != (1,) or two[:1] != (2,) or one[1:] != two[1:]:
                return False
        return True

    def reject(self, key) -> None:
        """Never batch this signature again (its outputs did not follow the batch)."""
        with self._lock:
            self._signatures[key] = False

    # ---- one batched run -------------------------------------------------------------
    def graph_rows(self, rows: int) -> int:
        """The rows a batch of `rows` is padded to on a Net with CUDA graphs (Triton's graph batch
        sizes, as TensorRT configurations list them: 1, 2, 4, 8, 16, 24, 32, ...): the next power of
        two up to 8, then the next multiple of 8, and max_rows above the largest size under it -- at
        most 4 + max_rows / 8 shapes, each captured once and replayed. Powers of two alone padded
        ResNet-50's batches of 17-23 rows (the pool at 64 clients on the H200) to 32: a third of
        each forward spent on rows of zeros."""
        rows = int(rows)
        size = 1 << max(0, rows - 1).bit_length() if rows <= 8 else -(-rows // 8) * 8
        return min(size, max(self.max_rows, rows))

    def run(self, net, jobs) -> list[dict]:
        """Run `jobs` (same signature) as one batch on `net`; one output dict per job.

        The jobs' inputs are concatenated along the first dimension and go through
        Net.forward (read in place where large, as any job's); each job's outputs are
        its rows of the output blobs, copied once. On a Net with CUDA graphs the batch
        is padded with rows of zeros to graph_rows() (rows are independent in a
        batching model), and the padding's outputs are dropped.

        Raises:
            NotBatchable: an output's first dimension is not the batch's rows.
            whatever the Net raises (InputError, ShapeInferenceError, KernelError).
        """
        rows = [j.rows for j in jobs]
        total = sum(rows)
        # on a Net with CUDA graphs, rows of zeros up to a graph size: few shapes, each replayed
        padded = self.graph_rows(total) if getattr(net, "graphs", None) is not None else total
        inputs = CheckedInputs()
        for name in self.input_names:  # each job's arrays were checked at submit
            parts = [j.inputs[name] for j in jobs]
            if padded > total:
                parts.append(np.zeros((padded - total,) + parts[0].shape[1:], parts[0].dtype))
            inputs[name] = np.concatenate(parts, axis=0)
        names = list(dict.fromkeys(name for j in jobs for name in j.output_names))
        wanted = net.forward(inputs, names, share_inputs="large")
        for name, blob in wanted.items():
            if blob.ndim == 0 or blob.shape[0] != padded:
                raise NotBatchable(f"output {name!r} has shape {blob.shape} for a batch of {padded} rows")
        results, start = [], 0
        for j, r in zip(jobs, rows):
            results.append({n: wanted[n][start:start + r].copy() for n in j.output_names})
            start += r
        return results


def preferred_size(row_costs: Mapping[int, float]) -> int:
    """The batch size to prefer from seconds per row by batch size (1 must be there); 1: do not batch.

    The smallest size whose row costs at most NEAR_BEST of the cheapest, if that
    costs at most PAYS of a row alone.
    """
    cheapest = min(row_costs.values())
    size = min(b for b, c in row_costs.items() if c <= cheapest * NEAR_BEST)
    return size if row_costs[size] <= PAYS * row_costs[1] else 1


def fair_share(waiting: int, net_id: int, me: int, idle: Sequence[bool], running: Sequence) -> tuple[int, bool]:
    """How many rows a batch of model `net_id` may take, and whether a worker is idle.

    The model's rows in the pool, those `waiting` (the batch's first job and the
    queued jobs it could take) and those the other workers run now, split
    evenly over this worker, the idle ones and those running the model; a
    worker running a large batch leaves more to this one, an idle one gets its
    part at once. The lists are read without a lock: a stale entry only moves
    one batch's size.

    Args:
        waiting: rows of the first job and of the queued jobs that could join it.
        net_id: the model.
        me: this worker's index.
        idle: per worker, True while it waits for a job.
        running: per worker, (net_id, rows) of the run it is in, or None.
    Returns:
        (cap in rows, or None when no other worker takes the model's rows;
        True when another worker is idle).
    """
    peers = rows = 0
    any_idle = False
    for i, (free, run) in enumerate(zip(idle, running)):
        if i == me:
            continue
        if free:
            peers += 1
            any_idle = True
        elif run is not None and run[0] == net_id:
            peers += 1
            rows += run[1]
    return (-(-(waiting + rows) // (1 + peers)) if peers else None), any_idle


def make_batchers(programs, sizes, delays, preferred, *, explicit: bool,
                  calibration: Sequence[tuple[Callable, Mapping]] | None = None,
                  clock: Callable[[], float] | None = None) -> list[Batcher | None]:
    """A Batcher per model whose max_batch_size (`sizes`) is > 1; None for the others.

    With `calibration` (per model: a factory of scratch Nets and the warm-up
    input shapes or None), each Batcher of a model without preferred sizes is
    calibrated (Batcher.calibrate, on `clock`): one whose max_rows becomes 1 does
    not batch, which its log line says; it stays in the list with its row_costs.

    Raises:
        ValueError: `explicit` (per-model sizes were given) and a model with a
            size > 1 cannot batch; otherwise such a model is skipped with a log line.
    """
    out = []
    for net_id, (program, size, delay, pref) in enumerate(zip(programs, sizes, delays, preferred)):
        batcher = None
        if int(size) > 1:
            try:
                batcher = Batcher(program, int(size), float(delay), pref)
            except ValueError as exc:
                if explicit:
                    raise ValueError(f"Config: net {net_id} cannot batch (max_batch_size={size}): {exc}") from None
                log.info("net %d does not batch: %s", net_id, exc)
        if batcher is not None and calibration is not None and not batcher.preferred:
            new_net, shapes = calibration[net_id]
            if not batcher.calibrate(new_net(), shapes, clock=clock):
                log.info("net %d: batching not calibrated (an input has a free dimension beyond the first: "
                         "give Config.warmup_shapes)", net_id)
                out.append(batcher)
                continue
            costs = ", ".join(f"{b}: {c * 1e3:.3g}" for b, c in batcher.row_costs.items())
            if batcher.max_rows > 1:
                log.info("net %d batches up to %d rows (ms per row by batch size: %s)", net_id, batcher.max_rows, costs)
            else:
                log.info("net %d does not batch: no batch size makes a row cost %.0f%% of a row alone or less "
                         "(ms per row by batch size: %s)", net_id, PAYS * 100, costs)
        out.append(batcher)
    return out
