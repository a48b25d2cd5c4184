"""A warm start pays only for what a first forward needs (issue 31: warm first result <= 0.6 s).

Each check runs in a fresh interpreter, where `import pooled_predictor` is what a new process pays.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_fresh(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_the_pool_is_imported_on_first_use_and_every_public_name_resolves():
    """serving.pool and serving.futures (and concurrent.futures) come with the first use of their names,
    not with the package; every name of __all__ resolves, star-import included, to the defining module's."""
    run_fresh(
        "import sys, pooled_predictor as pp\n"
        "lazy = ('pooled_predictor.serving.pool', 'pooled_predictor.serving.futures')\n"
        "assert not [m for m in lazy if m in sys.modules], [m for m in lazy if m in sys.modules]\n"
        "assert set(pp.__all__) <= set(dir(pp))\n"
        "from pooled_predictor.serving import pool, futures\n"
        "assert pp.PooledPredictor is pool.PooledPredictor and pp.Config is pool.Config\n"
        "assert pp.Callback is pool.Callback and pp.PinnedPooledPredictor is pool.PinnedPooledPredictor\n"
        "assert pp.Future is futures.Future and pp.collect is futures.collect\n"
        "ns = {}\n"
        "exec('from pooled_predictor import *', ns)\n"
        "assert all(n in ns for n in pp.__all__), sorted(set(pp.__all__) - set(ns))\n"
        "try:\n"
        "    pp.NoSuchName\n"
        "except AttributeError as exc:\n"
        "    assert 'NoSuchName' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('an unknown name resolved')\n")


def test_a_lazy_name_resolves_from_any_thread():
    """The first use may come from several threads at once: each gets the one class."""
    run_fresh(
        "import threading, pooled_predictor as pp\n"
        "got = []\n"
        "ts = [threading.Thread(target=lambda: got.append(pp.PooledPredictor)) for _ in range(8)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "from pooled_predictor.serving.pool import PooledPredictor\n"
        "assert len(got) == 8 and all(g is PooledPredictor for g in got)\n")
