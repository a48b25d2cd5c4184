"""Pool statistics: per-net counters and latency histograms with p50/p95/p99.

Latencies go into log-spaced buckets (each 2% wider than the last, from 1 us to
about 20 min), as HdrHistogram does: fixed memory, O(1) record, percentiles
within 2%, and two histograms merge by adding their counts. A snapshot is a
plain, immutable copy; snapshots of several pools (or processes) merge.
"""

from __future__ import annotations

import itertools
import math
import threading
from dataclasses import dataclass, field

import numpy as np

_RATIO = 1.02
_MIN_S = 1e-6
_BUCKETS = int(math.ceil(math.log(1.2e3 / _MIN_S) / math.log(_RATIO))) + 2
_LOG_RATIO = math.log(_RATIO)


def _bucket(seconds):
    """Bucket index of a duration in seconds (0 at or below 1 us), elementwise over an array of them
    (a float gives a 0-d array): the one formula of record() and of the pool's batched folds."""
    s = np.asarray(seconds, np.float64)
    return np.where(s <= _MIN_S, 0, np.minimum(
        (np.log(np.maximum(s, _MIN_S) / _MIN_S) / _LOG_RATIO).astype(np.int64) + 1, _BUCKETS - 1))


def _bucket_value(i: int) -> float:
    """Representative value (seconds) of bucket i: the geometric middle of its edges."""
    if i == 0:
        return _MIN_S
    lo = _MIN_S * _RATIO ** (i - 1)
    return lo * math.sqrt(_RATIO)


class LatencyHistogram:
    """A log-bucketed histogram of durations (seconds); not thread-safe by itself."""

    __slots__ = ("counts", "count", "total", "max")

    def __init__(self):
        self.counts = [0] * _BUCKETS  # a list: one increment per record is cheaper than numpy's
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def record(self, seconds: float) -> None:
        self.counts[int(_bucket(seconds))] += 1
        self.count += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds

    def merge(self, other: "LatencyHistogram") -> "LatencyHistogram":
        """A new histogram holding both."""
        h = LatencyHistogram()
        h.counts = [a + b for a, b in zip(self.counts, other.counts)]
        h.count = self.count + other.count
        h.total = self.total + other.total
        h.max = max(self.max, other.max)
        return h

    def copy(self) -> "LatencyHistogram":
        return self.merge(LatencyHistogram())

    def percentile(self, p: float) -> float:
        """The p-th percentile (0 < p <= 100) in seconds, within the 2% bucket width; 0 if empty."""
        if self.count == 0:
            return 0.0
        cumulative = np.cumsum(np.array(self.counts))  # read once: a worker may be recording meanwhile
        total = int(cumulative[-1])
        if total == 0:
            return 0.0
        rank = max(1, int(math.ceil(p / 100.0 * total)))
        i = min(int(np.searchsorted(cumulative, rank)), _BUCKETS - 1)
        return min(_bucket_value(i), self.max)

    def summary_ms(self) -> dict:
        """count, mean, p50, p95, p99 and max, in milliseconds."""
        ms = 1e3
        return {"count": self.count,
                "mean_ms": (self.total / self.count * ms) if self.count else 0.0,
                "p50_ms": self.percentile(50) * ms, "p95_ms": self.percentile(95) * ms,
                "p99_ms": self.percentile(99) * ms, "max_ms": self.max * ms}


COUNTERS = ("submitted", "completed", "failed", "cancelled", "expired", "rejected", "inline", "direct")
HISTOGRAMS = ("queue_wait", "run", "end_to_end")


@dataclass
class NetStats:
    """Counters and histograms of one net_id.

    Counters: submitted (accepted jobs), completed (ran and succeeded), failed
    (ran and raised), cancelled, expired (deadline passed before running),
    rejected (refused at admission: queue full), inline (ran inline on a worker),
    direct (taken on the calling thread by PooledPredictor.infer(): run there, or expired).
    Histograms: queue_wait (enqueue -> picked up), run (forward + copy-out;
    for a batched job, its batch's run), end_to_end (submit -> Future completed).
    batch_sizes: jobs per run -> number of runs, for nets that batch (a job
    run alone counts as a batch of 1).
    """

    counts: dict = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    histograms: dict = field(default_factory=lambda: {h: LatencyHistogram() for h in HISTOGRAMS})
    batch_sizes: dict = field(default_factory=dict)

    def merge(self, other: "NetStats") -> "NetStats":
        sizes = dict(self.batch_sizes)
        for k, v in other.batch_sizes.items():
            sizes[k] = sizes.get(k, 0) + v
        return NetStats({k: self.counts[k] + other.counts[k] for k in COUNTERS},
                        {h: self.histograms[h].merge(other.histograms[h]) for h in HISTOGRAMS},
                        dict(sorted(sizes.items())))

    def copy(self) -> "NetStats":
        return NetStats(dict(self.counts), {h: v.copy() for h, v in self.histograms.items()},
                        dict(sorted(self.batch_sizes.items())))

    def to_dict(self) -> dict:
        return {**self.counts, **{h: v.summary_ms() for h, v in self.histograms.items()},
                "batch_sizes": dict(self.batch_sizes)}


@dataclass
class StatsSnapshot:
    """An immutable copy of a pool's statistics.

    Attributes:
        nets: net_id -> NetStats.
        callback_errors: exceptions raised by Callback methods (logged, counted).
        workers: worker threads started.
        queue_size: jobs waiting when the snapshot was taken.
    """

    nets: dict = field(default_factory=dict)
    callback_errors: int = 0
    workers: int = 0
    queue_size: int = 0

    def merge(self, other: "StatsSnapshot") -> "StatsSnapshot":
        """Combine two snapshots (e.g. of two pools): counts add, histograms merge."""
        nets = {k: v.copy() for k, v in self.nets.items()}
        for k, v in other.nets.items():
            nets[k] = nets[k].merge(v) if k in nets else v.copy()
        return StatsSnapshot(nets, self.callback_errors + other.callback_errors,
                             self.workers + other.workers, self.queue_size + other.queue_size)

    def total(self) -> NetStats:
        """All nets together."""
        out = NetStats()
        for v in self.nets.values():
            out = out.merge(v)
        return out

    def to_dict(self) -> dict:
        return {"nets": {k: v.to_dict() for k, v in self.nets.items()}, "total": self.total().to_dict(),
                "callback_errors": self.callback_errors, "workers": self.workers,
                "queue_size": self.queue_size}


class _Shard:
    """One worker thread's records: written only by that thread."""

    __slots__ = ("nets", "pending")

    def __init__(self, net_ids):
        self.nets = {i: NetStats() for i in net_ids}
        self.pending: list = []  # (net_id, queue_wait, run, end_to_end), folded in batches

    def fold(self, nets: dict, upto: int) -> None:
        """Fold pending[:upto] into `nets` (vectorized)."""
        table = np.array(self.pending[:upto], np.float64)  # (n, 4); None (not measured) becomes nan
        if not table.size:
            return
        ids = table[:, 0]
        for net_id in np.unique(ids).tolist():
            rows = table[ids == net_id] if len(nets) > 1 else table
            for column, name in enumerate(HISTOGRAMS, 1):
                v = rows[:, column]
                v = v[~np.isnan(v)]
                if v.size:
                    _add(nets[int(net_id)].histograms[name], v)


def _add(h: LatencyHistogram, v: np.ndarray) -> None:
    buckets, counts = np.unique(_bucket(v), return_counts=True)  # a few distinct buckets, not all of them
    hc = h.counts
    for i, c in zip(buckets.tolist(), counts.tolist()):
        hc[i] += c
    h.count += int(v.size)
    h.total += float(v.sum())
    h.max = max(h.max, float(v.max()))


class StatsRecorder:
    """Thread-safe recording into per-net NetStats (used by the pool).

    A worker records a job into a shard of its own (one per thread, written only
    by it: no lock, one tuple appended per job, folded into the histograms in
    vectorized batches of `fold_every`). Counters bumped by callers (submitted,
    rejected, cancelled) go to a shared shard under a lock. A snapshot merges
    all shards, folding what is still pending into its copy.
    """

    def __init__(self, net_ids, fold_every: int = 1024):
        self._lock = threading.Lock()
        self._net_ids = list(net_ids)
        self._submitted = {i: itertools.count() for i in self._net_ids}  # next() is atomic (C)
        self._central = {i: NetStats() for i in self._net_ids}
        self._shards: list[_Shard] = []
        self._tls = threading.local()
        self._fold_every = fold_every
        self.callback_errors = 0
        self.batching: set = set()  # net_ids that batch: their runs of one job are counted at snapshot

    def _shard(self) -> _Shard:
        shard = getattr(self._tls, "shard", None)
        if shard is None:
            shard = self._tls.shard = _Shard(self._net_ids)
            with self._lock:
                self._shards.append(shard)
        return shard

    def submitted(self, net_id: int) -> None:
        """Count one accepted job (any thread, no lock)."""
        next(self._submitted[net_id])

    def count(self, net_id: int, counter: str, n: int = 1) -> None:
        """Bump a counter (any thread)."""
        with self._lock:
            self._central[net_id].counts[counter] += n

    def record(self, net_id: int, counter: str | None, queue_wait: float | None = None,
               run: float | None = None, end_to_end: float | None = None) -> None:
        """A worker's record of one job: its outcome counter and durations (seconds)."""
        try:
            shard = self._tls.shard
        except AttributeError:
            shard = self._shard()
        if counter:
            shard.nets[net_id].counts[counter] += 1
        pending = shard.pending
        pending.append((net_id, queue_wait, run, end_to_end))
        if len(pending) >= self._fold_every:
            with self._lock:  # against a snapshot reading this shard
                n = len(pending)
                shard.fold(shard.nets, n)
                del pending[:n]

    def batch(self, net_id: int, jobs: int) -> None:
        """A worker's record of one batched run of `jobs` (> 1) jobs; runs of one job are counted
        at snapshot, for the nets in `batching` (ran jobs minus batched ones)."""
        sizes = self._shard().nets[net_id].batch_sizes
        sizes[jobs] = sizes.get(jobs, 0) + 1

    def callback_error(self) -> None:
        with self._lock:
            self.callback_errors += 1

    def snapshot(self, workers: int = 0, queue_size: int = 0) -> StatsSnapshot:
        with self._lock:
            nets = {k: v.copy() for k, v in self._central.items()}
            for k, c in self._submitted.items():
                nets[k].counts["submitted"] += c.__reduce__()[1][0]  # count(n) -> n, without advancing
            for shard in self._shards:
                copy = {k: v.copy() for k, v in shard.nets.items()}
                shard.fold(copy, len(shard.pending))
                for k, v in copy.items():
                    nets[k] = nets[k].merge(v)
            for k in self.batching:
                c = nets[k].counts
                alone = c["completed"] + c["failed"] - sum(n * runs for n, runs in nets[k].batch_sizes.items())
                if alone > 0:
                    nets[k].batch_sizes = {1: alone, **nets[k].batch_sizes}
            return StatsSnapshot(nets, self.callback_errors, workers, queue_size)
