"""Per-node timing of forward passes (onnxruntime's `enable_profiling`).

A Profiler collects one event per node run: the node's name and op type, the
start and duration (perf_counter_ns), the thread and the forward it belongs to.
It prints a table by op type and by node, and writes a Chrome trace
(the JSON "Trace Event Format" that chrome://tracing and https://ui.perfetto.dev
open: complete events, ph "X", times in microseconds).

    net.enable_profiling()              # or Predictor(..., enable_profiling=True)
    net.forward(x); net.forward(x)
    print(net.profiler.table())
    net.profiler.write_trace("trace.json")

Profiling times each kernel call separately (two perf_counter_ns calls per
node, in Net.forward), so a profiled forward is slightly slower than an unprofiled one; an
unprofiled Net runs the same loop as before.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..ops.cpu.compiled import isa


@dataclass(frozen=True)
class Event:
    """One node run. Times in nanoseconds (time.perf_counter_ns)."""

    name: str
    op_type: str
    start_ns: int
    dur_ns: int
    thread: int
    forward: int


def precision_of(in_dtype, out_dtype) -> str:
    """A node's precision as the profile shows it: its output's element type ("uint8", "float32"),
    or "in->out" where a node changes it (QuantizeLinear: "float32->uint8"); "" when unknown."""
    name = lambda d: "" if d is None else str(d)  # noqa: E731
    i, o = name(in_dtype), name(out_dtype)
    return o if not i or i == o or not o else f"{i}->{o}"


class Profiler:
    """Collects node timings from any number of Nets and threads.

    Attributes:
        events: the Events, in the order they were recorded.
        forwards: how many forward passes were recorded.
    """

    def __init__(self):
        self.events: list[Event] = []
        self.forwards = 0
        self.precisions: dict[str, str] = {}  # node name -> its precision (precision_of), as last seen
        self._lock = threading.Lock()
        self.origin_ns = time.perf_counter_ns()

    def clear(self) -> None:
        with self._lock:
            self.events = []
            self.forwards = 0

    def add_forward(self, nodes, times, precisions=None) -> None:
        """Record one forward: nodes[i] ran from times[i][0] to times[i][1] (perf_counter_ns);
        precisions: optional, node i's precision (precision_of)."""
        tid = threading.get_ident()
        with self._lock:
            if precisions is not None:
                self.precisions.update((n.name, p) for n, p in zip(nodes, precisions))
            index = self.forwards
            self.forwards += 1
            self.events.extend(Event(n.name, n.op_type, t0, t1 - t0, tid, index)
                               for n, (t0, t1) in zip(nodes, times))

    # ---- summaries -------------------------------------------------------------
    def _forwards_seen(self) -> int:
        return max(1, self.forwards)

    def by_op_type(self) -> list[dict]:
        """Rows {op_type, nodes, calls, total_ms, ms_per_forward, percent}, costliest first."""
        return self._group(lambda e: e.op_type, "op_type")

    def by_node(self) -> list[dict]:
        """Rows {node, op_type, precision, calls, total_ms, ms_per_forward, percent}, costliest first."""
        rows = self._group(lambda e: (e.name, e.op_type), "node")
        for r in rows:
            r["precision"] = self.precisions.get(r["node"], "")
        return rows

    def _group(self, key, label) -> list[dict]:
        totals: dict = {}
        names: dict = {}
        for e in self.events:
            k = key(e)
            t = totals.setdefault(k, [0, 0])
            t[0] += e.dur_ns
            t[1] += 1
            names.setdefault(k, set()).add(e.name)
        grand = sum(t[0] for t in totals.values()) or 1
        forwards = self._forwards_seen()
        rows = []
        for k, (ns, calls) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
            row = {label: k[0] if isinstance(k, tuple) else k}
            if isinstance(k, tuple):
                row["op_type"] = k[1]
            else:
                row["nodes"] = len(names[k])
            row.update(calls=calls, total_ms=ns / 1e6, ms_per_forward=ns / 1e6 / forwards,
                       percent=100.0 * ns / grand)
            rows.append(row)
        return rows

    def total_ms_per_forward(self) -> float:
        return sum(e.dur_ns for e in self.events) / 1e6 / self._forwards_seen()

    def table(self, top: int = 15) -> str:
        """Two plain-text tables: by op type (all) and the `top` costliest nodes."""
        forwards = self._forwards_seen()
        lines = [f"{forwards} forward(s), {self.total_ms_per_forward():.3f} ms per forward in kernels; "
                 f"CPU kernels {isa.describe()}",
                 "", f"{'op_type':<28} {'nodes':>5} {'ms/forward':>11} {'%':>6}"]
        for r in self.by_op_type():
            lines.append(f"{r['op_type']:<28} {r['nodes']:>5} {r['ms_per_forward']:>11.3f} {r['percent']:>6.1f}")
        lines += ["", f"{'node':<40} {'op_type':<20} {'precision':<16} {'ms/forward':>11} {'%':>6}"]
        for r in self.by_node()[:top]:
            lines.append(f"{r['node'][:40]:<40} {r['op_type'][:20]:<20} {r['precision'][:16]:<16} "
                         f"{r['ms_per_forward']:>11.3f} {r['percent']:>6.1f}")
        return "\n".join(lines)

    # ---- Chrome trace --------------------------------------------------------
    def chrome_trace(self) -> dict:
        """The events as a Chrome / Perfetto trace: {"traceEvents": [...], "displayTimeUnit": "ms"}.

        Each node run is a complete event (ph "X") with ts/dur in microseconds
        from the Profiler's creation, pid the process, tid the thread, category
        the op type and args {op_type, forward}.
        """
        pid = os.getpid()
        threads = {}
        events = []
        for e in self.events:
            tid = threads.setdefault(e.thread, len(threads))
            events.append({"name": e.name, "cat": e.op_type, "ph": "X",
                           "ts": (e.start_ns - self.origin_ns) / 1e3, "dur": e.dur_ns / 1e3,
                           "pid": pid, "tid": tid, "args": {"op_type": e.op_type, "forward": e.forward}})
        for ident, tid in threads.items():
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"name": f"thread {ident}"}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def write_trace(self, path) -> str:
        """Write chrome_trace() as JSON to `path`; returns the path as a string."""
        path = Path(path)
        path.write_text(json.dumps(self.chrome_trace()))
        return str(path)
