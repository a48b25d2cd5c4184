"""The background compiler's process: compile the kernels of one layout into numba's disk cache.

    python -m pooled_predictor.engine.compile_worker < job.pickle

The job (engine/tiering.py writes it to stdin) is a pickled dict: graph (the optimized
ir.Graph of a Program), device, shapes (input name -> shape), options (LayoutOptions) and
feeds (input name -> array, or None for zeros). This process rebuilds the Program,
builds the compiled layout for those shapes and runs it once, compiling every kernel the
layout calls (numba saves each to the cache the serving process loads it from), then
exits 0. It exits early, with status 3, when the process that started it is gone.
Nothing here serves requests: its work is only the cache's.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time

import numpy as np

from ..ops.cpu import compiled
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


def main() -> int:
    parent = os.getppid()
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    job = pickle.load(sys.stdin.buffer)
    t0 = time.perf_counter()
    with compiled.compile_inline():
        program = Program(job["graph"], job["device"])
        shapes, feeds = job["shapes"], job["feeds"]
        if feeds is None:
            feeds = {v.name: np.zeros(shapes[v.name], v.dtype if v.dtype is not None else np.float32)
                     for v in program.inputs}
        layout = build_layout(program, shapes, get_device(program.device), job["options"], BODIES)
        layout.feed(feeds, False)
        for call in layout.run:
            call()
    print(f"compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
