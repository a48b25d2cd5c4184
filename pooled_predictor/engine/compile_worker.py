"""The background compiler's process: compile the kernels of one layout into numba's disk cache.

    python -m pooled_predictor.engine.compile_worker < job.pickle
    python -m pooled_predictor.engine.compile_worker --share LOCKDIR MODULE:FUNCTION ...

The job (engine/tiering.py writes it to stdin) is a pickled dict: graph (the optimized
ir.Graph of a Program), device, shapes (input name -> shape), options (LayoutOptions),
feeds (input name -> array, or None for zeros) and jobs (processes to compile in). This
process rebuilds the Program and first builds the layout under compiled.discovering(),
which names the functions it binds without compiling them; with jobs > 1 it starts
jobs - 1 processes in `--share` mode, and all of them take those functions one at a
time (a lock file each in LOCKDIR says who compiles it), each compile going to numba's
disk cache. Then it builds the compiled layout again, loading those from the cache, and
runs it once, compiling whatever else it calls; the serving process loads the lot from
the cache. Exits 0; early, with status 3, when the process that started it is gone.
Nothing here serves requests: its work is only the cache's.
"""

from __future__ import annotations

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


def _exit_with_parent(parent: int) -> None:
    """Stop compiling when the serving process is gone (its compile is of no use to anyone now)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(3)


def _take_turns(lockdir: Path, names: list[str]) -> int:
    """Compile each function of `names` that no other process has taken (its lock file); how many."""
    done = 0
    for name in names:
        try:
            os.close(os.open(lockdir / name.replace(":", "."), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        jit.ensure(jit.function_named(name))
        done += 1
    return done


def main(argv: list[str]) -> int:
    parent = os.getppid()
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    if argv[:1] == ["--share"]:
        with compiled.compile_inline():
            _take_turns(Path(argv[1]), argv[2:])
        return 0
    job = pickle.load(sys.stdin.buffer)
    t0 = time.perf_counter()
    with compiled.compile_inline():
        program = Program(job["graph"], job["device"])
        shapes, feeds, device = job["shapes"], job["feeds"], get_device(program.device)
        if feeds is None:
            feeds = {v.name: np.zeros(shapes[v.name], v.dtype if v.dtype is not None else np.float32)
                     for v in program.inputs}
        if job.get("jobs", 1) > 1:
            with compiled.discovering() as found:
                build_layout(program, shapes, device, job["options"], BODIES)
            names = list(dict.fromkeys(jit.name_of(f) for f in found))
            with tempfile.TemporaryDirectory(prefix="pooled-predictor-compile-") as lockdir:
                helpers = [subprocess.Popen([sys.executable, "-m", "pooled_predictor.engine.compile_worker", "--share",
                                            lockdir, *names])
                           for _ in range(min(job["jobs"], len(names)) - 1)]
                _take_turns(Path(lockdir), names)
                for h in helpers:
                    h.wait()
        layout = build_layout(program, shapes, device, job["options"], BODIES)
        layout.feed(feeds, False)
        for call in layout.run:
            call()
    print(f"compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
