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
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from ..engine.inputs import CheckedInputs
from ..errors import PooledPredictorError
from ..engine.program import Program

log = logging.getLogger("pooled_predictor")


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
        # outputs proven by their declared shape; the rest need the probe
        self.needs_probe = [v.name for v in program.outputs
                            if not (symbol and v.shape and v.shape[0] == symbol)]
        self._signatures: dict = {}  # signature -> batchable (bool), filled by probes
        self._lock = threading.Lock()

    # ---- which jobs go together -----------------------------------------------------
    def key(self, job):
        """The job's batch signature (cached on it), or None when it must run alone; sets job.rows."""
        if job.batch_key is not None:
            return job.batch_key
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
    def run(self, net, jobs) -> list[dict]:
        """Run `jobs` (same signature) as one batch on `net`; one output dict per job.

        The jobs' inputs are concatenated along the first dimension and go through
        Net.forward (read in place where large, as any job's); each job's outputs are
        its rows of the output blobs, copied once.

        Raises:
            NotBatchable: an output's first dimension is not the batch's rows.
            whatever the Net raises (InputError, ShapeInferenceError, KernelError).
        """
        rows = [j.rows for j in jobs]
        total = sum(rows)
        inputs = CheckedInputs((name, np.concatenate([j.inputs[name] for j in jobs], axis=0))
                               for name in self.input_names)  # each job's arrays were checked at submit
        names = list(dict.fromkeys(name for j in jobs for name in j.output_names))
        wanted = net.forward(inputs, names, share_inputs="large")
        for name, blob in wanted.items():
            if blob.ndim == 0 or blob.shape[0] != total:
                raise NotBatchable(f"output {name!r} has shape {blob.shape} for a batch of {total} rows")
        results, start = [], 0
        for j, r in zip(jobs, rows):
            results.append({n: wanted[n][start:start + r].copy() for n in j.output_names})
            start += r
        return results


def make_batchers(programs, sizes, delays, preferred, *, explicit: bool) -> list[Batcher | None]:
    """A Batcher per model whose max_batch_size (`sizes`) is > 1; None for the others.

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
        out.append(batcher)
    return out
