"""Pool statistics: per-net counters and latency histograms with p50/p95/p99.

Latencies go into log-spaced buckets (each 2% wider than the last, from 1 us to
about 20 min), as HdrHistogram does: fixed memory, O(1) record, percentiles
within 2%, and two histograms merge by adding their counts. A snapshot is a
plain, immutable copy; snapshots of several pools (or processes) merge.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import numpy as np

_RATIO = 1.02
_MIN_S = 1e-6
_BUCKETS = int(math.ceil(math.log(1.2e3 / _MIN_S) / math.log(_RATIO))) + 2
_LOG_RATIO = math.log(_RATIO)


def _bucket(seconds: float) -> int:
    if seconds <= _MIN_S:
        return 0
    return min(int(math.log(seconds / _MIN_S) / _LOG_RATIO) + 1, _BUCKETS - 1)


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
        self.counts = np.zeros(_BUCKETS, np.int64)
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def record(self, seconds: float) -> None:
        self.counts[_bucket(seconds)] += 1
        self.count += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds

    def merge(self, other: "LatencyHistogram") -> "LatencyHistogram":
        """A new histogram holding both."""
        h = LatencyHistogram()
        h.counts = self.counts + other.counts
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
        rank = max(1, int(math.ceil(p / 100.0 * self.count)))
        i = int(np.searchsorted(np.cumsum(self.counts), rank))
        return min(_bucket_value(i), self.max)

    def summary_ms(self) -> dict:
        """count, mean, p50, p95, p99 and max, in milliseconds."""
        ms = 1e3
        return {"count": self.count,
                "mean_ms": (self.total / self.count * ms) if self.count else 0.0,
                "p50_ms": self.percentile(50) * ms, "p95_ms": self.percentile(95) * ms,
                "p99_ms": self.percentile(99) * ms, "max_ms": self.max * ms}


COUNTERS = ("submitted", "completed", "failed", "cancelled", "expired", "rejected", "inline")
HISTOGRAMS = ("queue_wait", "run", "end_to_end")


@dataclass
class NetStats:
    """Counters and histograms of one net_id.

    Counters: submitted (accepted jobs), completed (ran and succeeded), failed
    (ran and raised), cancelled, expired (deadline passed before running),
    rejected (refused at admission: queue full), inline (ran inline on a worker).
    Histograms: queue_wait (enqueue -> picked up), run (forward + copy-out),
    end_to_end (submit -> Future completed).
    """

    counts: dict = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    histograms: dict = field(default_factory=lambda: {h: LatencyHistogram() for h in HISTOGRAMS})

    def merge(self, other: "NetStats") -> "NetStats":
        return NetStats({k: self.counts[k] + other.counts[k] for k in COUNTERS},
                        {h: self.histograms[h].merge(other.histograms[h]) for h in HISTOGRAMS})

    def copy(self) -> "NetStats":
        return NetStats(dict(self.counts), {h: v.copy() for h, v in self.histograms.items()})

    def to_dict(self) -> dict:
        return {**self.counts, **{h: v.summary_ms() for h, v in self.histograms.items()}}


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


class StatsRecorder:
    """Thread-safe recording into per-net NetStats (used by the pool).

    A job's record is one list append (atomic in CPython, no lock on the hot
    path); records are folded into the histograms in batches, with numpy, when
    a snapshot is taken or every `fold_every` records.
    """

    def __init__(self, net_ids, fold_every: int = 4096):
        self._lock = threading.Lock()
        self._nets = {i: NetStats() for i in net_ids}
        self._pending: list = []
        self._fold_every = fold_every
        self.callback_errors = 0

    def count(self, net_id: int, counter: str, n: int = 1) -> None:
        with self._lock:
            self._nets[net_id].counts[counter] += n

    def record(self, net_id: int, counter: str | None, queue_wait: float | None = None,
               run: float | None = None, end_to_end: float | None = None) -> None:
        """Count `counter` and record the durations (seconds) of one job."""
        self._pending.append((net_id, counter, queue_wait, run, end_to_end))
        if len(self._pending) >= self._fold_every:
            with self._lock:
                self._fold()

    def _fold(self) -> None:
        # take what is there now; appends racing with us stay for the next fold
        n = len(self._pending)
        if not n:
            return
        pending = self._pending[:n]
        del self._pending[:n]
        by_net: dict = {}
        for net_id, counter, *durations in pending:
            s = self._nets[net_id]
            if counter:
                s.counts[counter] += 1
            by_net.setdefault(net_id, []).append(durations)
        for net_id, rows in by_net.items():
            values = np.array([[np.nan if v is None else v for v in r] for r in rows], np.float64)
            for column, name in enumerate(HISTOGRAMS):
                v = values[:, column]
                v = v[~np.isnan(v)]
                if v.size:
                    h = self._nets[net_id].histograms[name]
                    idx = np.where(v <= _MIN_S, 0, np.minimum(
                        (np.log(np.maximum(v, _MIN_S) / _MIN_S) / _LOG_RATIO).astype(np.int64) + 1, _BUCKETS - 1))
                    np.add.at(h.counts, idx, 1)
                    h.count += int(v.size)
                    h.total += float(v.sum())
                    h.max = max(h.max, float(v.max()))

    def callback_error(self) -> None:
        with self._lock:
            self.callback_errors += 1

    def snapshot(self, workers: int = 0, queue_size: int = 0) -> StatsSnapshot:
        with self._lock:
            self._fold()
            return StatsSnapshot({k: v.copy() for k, v in self._nets.items()}, self.callback_errors,
                                 workers, queue_size)
