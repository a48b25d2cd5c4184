"""The background compiler's process: compile the kernels of one layout into numba's disk cache.

    python -m pooled_predictor.engine.compile_worker < job.pickle
    python -m pooled_predictor.engine.compile_worker --share LOCKDIR [MODULE:FUNCTION ...]  (else on stdin)

The job (engine/tiering.py writes it to stdin) is a pickled dict: graph (the optimized
ir.Graph of a Program), device, shapes (input name -> shape), options (LayoutOptions),
feeds (input name -> array, or None for zeros) and jobs (processes to compile in). This
process rebuilds the Program and first builds the layout under compiled.discovering(),
which names the functions it binds without compiling them; with jobs > 1 it has started
jobs - 1 processes in `--share` mode at its own start (they import while it discovers; the
names reach them on stdin), and all of them take those functions one at a
time (a lock file each in LOCKDIR says who compiles it), each compile going to numba's
disk cache; a function goes after its callees (jit.callees), never beside one of them in another
process. Then it builds the compiled layout again, loading those from the cache, and
runs it once, compiling whatever else it calls; the serving process loads the lot from
the cache. Exits 0; early, with status 3, when the process that started it is gone.
Nothing here serves requests: its work is only the cache's.

POOLED_PREDICTOR_COMPILE_LOG=PATH: every process appends one JSON line to PATH per function it
compiles ({"pid", "name", "start", "end" (time.time(), s), "cpu" (its process CPU seconds)}) and one
per phase of the job ("name": "<discover>", "<helpers>", "<run>"), to see where a cold start's
compile time goes (benchmarks/startup.py --compile-log).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ..ops.cpu import compiled
from ..ops.cpu.compiled import jit
from .device import get_device
from .layout import build_layout
from .net import BODIES
from .program import Program
from .tiering import worker_command


def _exit_with_parent(parent: int) -> None:
    """Stop compiling when the serving process is gone (its compile is of no use to anyone now)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(3)


class _Log:
    """Timing lines for POOLED_PREDICTOR_COMPILE_LOG (module docstring); does nothing without it."""

    def __init__(self):
        self.path = os.environ.get("POOLED_PREDICTOR_COMPILE_LOG") or None

    def __call__(self, name: str, start: float, cpu0: float) -> None:
        if self.path is None:
            return
        line = json.dumps({"pid": os.getpid(), "name": name, "start": start, "end": time.time(),
                           "cpu": time.process_time() - cpu0})
        try:
            with open(self.path, "a") as f:  # one short line per write: appends from several processes stay whole
                f.write(line + "\n")
        except OSError as exc:  # a log it cannot write never stops the compile: said once, then off
            print(f"POOLED_PREDICTOR_COMPILE_LOG={self.path!r} cannot be written ({type(exc).__name__}: {exc}); "
                  "compiling without it", file=sys.stderr)
            self.path = None


_log = _Log()


WAIT_S = 300.0
"""How long a process waits for a callee another process is compiling before it compiles the caller (and so
the callee) itself: far longer than any one function takes, only a bound should that process be gone."""


def with_callees(names: list[str]) -> list[str]:
    """`names` and the functions with explicit signatures they compile first (jit.callees), each once, in
    the order the processes take them: the callees first, those more functions wait on before the others
    (a caller cannot start before them: MobileNetV2's chain waited on depthwise_nchwc, taken late, while
    the other process sat idle), then `names` in their order."""
    waits = {name: [jit.name_of(c) for c in jit.callees(jit.function_named(name))] for name in names}
    count: dict[str, int] = {}
    for name in names:
        for callee in waits[name]:
            count[callee] = count.get(callee, 0) + 1
    first = sorted(count, key=lambda c: -count[c])  # stable: ties in the order met
    return first + [n for n in names if n not in count]


def _take_turns(lockdir: Path, names: list[str]) -> int:
    """Compile each function of `names` that no other process has taken (its lock file), once every callee
    it has (jit.callees) is done (its done file), so that no two processes compile one callee at once
    (measured: PP-OCR det's chain compiled depthwise_nchwc, 5.6 s, beside the process compiling it);
    while a callee is in another process's hands, the functions that do not wait on it go first.

    Returns:
        how many this process compiled.
    """
    def path(name: str, suffix: str = "") -> Path:
        return lockdir / (name.replace(":", ".") + suffix)

    waits = {name: [jit.name_of(c) for c in jit.callees(jit.function_named(name))] for name in names}
    left, done, since = list(names), 0, time.monotonic()
    while left:
        taken = False
        for name in list(left):
            if path(name).exists():
                left.remove(name)
                continue
            busy = [c for c in waits[name] if path(c).exists() and not path(c, ".done").exists()]
            if busy and time.monotonic() - since < WAIT_S:
                continue  # its callee is being compiled elsewhere: load it from the cache once done
            try:
                os.close(os.open(path(name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                left.remove(name)
                continue
            start, cpu0 = time.time(), time.process_time()
            jit.ensure(jit.function_named(name))
            _log(name, start, cpu0)
            path(name, ".done").touch()
            left.remove(name)
            done, taken, since = done + 1, True, time.monotonic()
            break  # from the top: what was waiting on it may go now, in the order given
        if left and not taken:
            time.sleep(0.02)
    return done


def _start_helpers(lockdir: str, count: int) -> list[subprocess.Popen]:
    """`count` processes in --share mode, started before the functions are known: each imports numba
    and this package while this process rebuilds the Program and discovers the layout's functions
    (1-5 s of a cold start, measured on 2 cores: a helper started after the discovery began
    compiling that much later), then reads their names from its stdin (send_names)."""
    return [subprocess.Popen(worker_command("--share", lockdir), stdin=subprocess.PIPE) for _ in range(max(0, count))]


def _send_names(helpers: list[subprocess.Popen], names: list[str]) -> None:
    """Give every helper the names to take turns on (none: it exits at once); closes their stdin."""
    data = "\n".join(names).encode()
    for h in helpers:
        if h.stdin is None or h.stdin.closed:
            continue
        try:
            h.stdin.write(data)
            h.stdin.close()
        except (BrokenPipeError, OSError):  # it has gone (its exit status says why): the others go on
            pass


def main(argv: list[str]) -> int:
    parent = os.getppid()
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    if argv[:1] == ["--share"]:
        names = argv[2:] or sys.stdin.read().split()
        with compiled.compile_inline():
            _take_turns(Path(argv[1]), names)
        return 0
    job = pickle.load(sys.stdin.buffer)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pooled-predictor-compile-") as lockdir:
        helpers = _start_helpers(lockdir, job.get("jobs", 1) - 1)
        try:
            with compiled.compile_inline():
                program = Program(job["graph"], job["device"])
                shapes, feeds, device = job["shapes"], job["feeds"], get_device(program.device)
                if feeds is None:
                    feeds = {v.name: np.zeros(shapes[v.name], v.dtype if v.dtype is not None else np.float32)
                             for v in program.inputs}
                if helpers:
                    start, cpu0 = time.time(), time.process_time()
                    with compiled.discovering() as found:
                        build_layout(program, shapes, device, job["options"], BODIES)
                    names = with_callees(list(dict.fromkeys(jit.name_of(f) for f in found)))
                    _log("<discover>", start, cpu0)
                    _send_names(helpers, names)
                    _take_turns(Path(lockdir), names)
                    start, cpu0 = time.time(), time.process_time()
                    for h in helpers:
                        h.wait()
                    _log("<helpers>", start, cpu0)
                start, cpu0 = time.time(), time.process_time()
                layout = build_layout(program, shapes, device, job["options"], BODIES)
                layout.feed(feeds, False)
                for call in layout.run:
                    call()
                _log("<run>", start, cpu0)
        finally:
            _send_names(helpers, [])  # where it failed before the names: they exit
            for h in helpers:
                h.wait()
    print(f"compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
