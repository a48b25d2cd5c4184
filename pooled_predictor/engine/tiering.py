"""Tiered execution: the numpy reference kernels serve while the compiled ones load or compile.

numba compiles a model's kernels in 20-90 s on a fresh machine (issue 31): a first result
that waited for them came after 80 s (PP-OCR det), against 0.37 s for onnxruntime; with a
warm cache, loading them took 1-2 s more. With tiering (ops/cpu/compiled.TIERED, on unless
POOLED_PREDICTOR_TIERED=0), a Net builds each layout in memory-only mode first: a kernel
this process has not loaded yet raises compiled.NotCached. The Net then builds the layout
from the numpy reference kernels (compiled.reference_kernels(): NCHW, every kernel's tested
numpy path) and asks the process's one background compiler for those shapes. Its thread
builds the compiled layout in cache-only mode, loading each kernel from numba's disk cache;
where one is not there, a process of its own (engine/compile_worker.py, given the Program's
Graph) compiles that layout's kernels into the cache, several processes in parallel, and
the thread loads them after it. Each finished job bumps `COMPILER.generation`; a Net
running a reference layout sees the change at its next forward and builds the compiled
layout, every kernel now in memory (engine/net.py). So the first result comes after the
import, the passes and one reference forward, cold or warm; the compiled speed follows;
nothing is compiled that a layout does not call; no serving thread waits on a compile or
a disk load.

The compile runs in processes because numba's compile holds Python's GIL for most of its
time: in a thread it slowed the reference forwards beside it 10x or more. The compile
processes end with the process that started them.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from typing import Callable, Hashable

from ..ops.cpu import compiled, reference_split

__all__ = ["COMPILER", "BackgroundCompiler", "compile_jobs", "not_cached", "worker_command"]

log = logging.getLogger("pooled_predictor.tiering")


def not_cached(exc: BaseException | None) -> bool:
    """Whether `exc` is, or was raised from, compiled.NotCached (kernels wrap their setup's errors)."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, compiled.NotCached):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


_BOOT = ("import json, runpy, sys; sys.path[:] = json.loads(sys.argv.pop(1)); "
         "runpy.run_module('pooled_predictor.engine.compile_worker', run_name='__main__', alter_sys=True)")


def worker_command(*args: str) -> list[str]:
    """The command line of a compile process (engine/compile_worker.py, its arguments `args`): this
    interpreter, with this process's sys.path, so it imports the same pooled_predictor as this process
    whatever its working directory holds (`python -m` puts the working directory first: a checkout of
    the project there, beside an installed copy, compiled that copy's kernels into another cache
    directory, and the serving process never found them)."""
    return [sys.executable, "-c", _BOOT, json.dumps(sys.path), *args]


class BackgroundCompiler:
    """One thread that runs compile jobs in order, each once per key, each in a process of its own
    (python -m pooled_predictor.engine.compile_worker): numba's compile holds Python's GIL for
    most of its time, so in a thread of the serving process it slowed the reference forwards
    beside it 10x or more; a process shares nothing with them but a core and the disk cache.

    Attributes:
        generation: finished jobs so far (each a chance that more layouts find their kernels loaded).
        compiles: jobs that needed a compile process (the others loaded every kernel from the cache).
        log: (key, seconds, error or None) of each finished job, in order.
    """

    TIMEOUT_S = 1800  # one layout's kernels: minutes at most on a loaded 2-core machine

    def __init__(self):
        self.generation = 0
        self.compiles = 0
        self.log: list[tuple[Hashable, float, str | None]] = []
        self._jobs: "queue.Queue[tuple[Hashable, Callable[[], dict]] | None]" = queue.Queue()
        self._seen: set = set()
        self._finished: set = set()
        self._held: list = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._stopping = False

    def request(self, key: Hashable, load: Callable[[], None], payload: Callable[[], dict],
                hold: bool = False) -> bool:
        """Queue a job unless `key` was requested before. In the compiler's thread, load() (it builds a
        layout and runs it once) runs in cache-only mode, loading its kernels from numba's disk cache
        into this process; where one is not there, payload() (the compile_worker's job dict: graph,
        device, shapes, options, feeds, jobs), pickled, goes to a compile process, and load() runs
        again after it.

        With hold, the job waits for release() (the end of the forward that asked: loading kernels
        beside it slowed the first result by up to 1.5 s on 2 cores).

        Returns:
            whether it was queued now.
        """
        with self._lock:
            if key in self._seen or self._stopping:
                return False
            self._seen.add(key)
            self._idle.clear()
            if hold:
                self._held.append((key, (load, payload)))
                return True
            self._put((key, (load, payload)))
        return True

    def finished(self, key: Hashable) -> bool:
        """Whether the job of `key` has run (successfully or not)."""
        return key in self._finished

    @property
    def holding(self) -> bool:
        """Whether request(hold=True) jobs wait for release()."""
        return bool(self._held)

    def release(self) -> None:
        """Queue the jobs held by request(hold=True)."""
        with self._lock:
            held, self._held = self._held, []
            for item in held:
                self._put(item)

    def _put(self, item) -> None:  # under self._lock
        self._jobs.put(item)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="pooled-predictor-compile", daemon=True)
            self._thread.start()

    def pending(self) -> int:
        """Jobs held, queued or running."""
        return self._jobs.unfinished_tasks + len(self._held)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every queued job has finished (benchmarks, tests).

        Returns:
            False when `timeout` seconds passed first.
        """
        return self._idle.wait(timeout)

    def _loop(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                self._jobs.task_done()
                return
            key, (load, payload) = item
            t0, error = time.perf_counter(), None
            try:
                if not self._stopping:
                    with reference_split.background_job():  # the reference forwards leave it the other cores
                        error = self._load_or_compile(load, payload)
            except Exception as exc:  # noqa: BLE001 -- the serving threads keep the reference kernels
                error = f"{type(exc).__name__}: {exc}"
            if error is not None:
                log.warning("background compile of %s failed (its Nets keep the reference kernels): %s", key, error)
            self.log.append((key, time.perf_counter() - t0, error))
            with self._lock:
                self._finished.add(key)
                self.generation += 1
                self._jobs.task_done()
                if self._jobs.unfinished_tasks == 0:
                    self._idle.set()

    def _load_or_compile(self, load: Callable[[], None], payload: Callable[[], dict]) -> str | None:
        try:
            with compiled.cache_only():
                load()
            return None
        except Exception as exc:
            if not not_cached(exc):
                raise
        self.compiles += 1
        error = self._compile(pickle.dumps(payload(), protocol=pickle.HIGHEST_PROTOCOL))
        if error is None:
            with compiled.cache_only():
                load()
        return error

    def _compile(self, payload: bytes) -> str | None:
        """Run one compile_worker on `payload`; None when it succeeded, else what went wrong."""
        with self._lock:
            if self._stopping:
                return "stopped"
            self._process = subprocess.Popen(worker_command(),
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE)
        try:
            _, err = self._process.communicate(payload, timeout=self.TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.communicate()
            return f"no result in {self.TIMEOUT_S} s"
        finally:
            code = self._process.returncode
            self._process = None
        if code != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-3:]
            return f"compile_worker exited {code}: " + " | ".join(tail)
        return None

    def stop(self) -> None:
        """Run no further job and end the one running (at exit: its kernels are of no use now)."""
        with self._lock:
            self._stopping = True
            process = self._process
        if process is not None:
            process.kill()


def compile_jobs() -> int:
    """Processes one layout's compile runs in: POOLED_PREDICTOR_COMPILE_JOBS, else the CPU count up to 4
    (on 2 cores, both: the serving thread loses speed for a while, the compile ends sooner)."""
    given = os.environ.get("POOLED_PREDICTOR_COMPILE_JOBS", "").strip()
    if given.isdigit():
        return max(1, int(given))
    if given:
        log.warning("POOLED_PREDICTOR_COMPILE_JOBS=%r is not a count of processes: using the CPU count", given)
    return max(1, min(4, os.cpu_count() or 1))


COMPILER = BackgroundCompiler()
"""The process's background compiler (every Net's tiered layouts)."""
atexit.register(COMPILER.stop)
