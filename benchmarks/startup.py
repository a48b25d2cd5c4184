"""Time to first result with numba's disk cache cold and warm (issue 11: compile time).

    python benchmarks/startup.py [--models resnet50 ppocr_det ppocr_rec]

For each model, two fresh Python processes share one new, empty NUMBA_CACHE_DIR: the
first compiles every kernel it needs (cold), the second loads them from that cache
(warm). Each times, from before `import pooled_predictor` to the first forward's output:
the import, building the Predictor (import, passes, Program) and the first forward
(its kernels compiled or loaded, its layout planned). `Config(warmup=True)` and
`pooled-predictor warmup` pay the same before a server takes traffic. Prints a table
and writes benchmarks/results/startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import table, write_results  # noqa: E402

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import pooled_predictor
from benchmarks.vs_onnxruntime import load_model
t_import = time.perf_counter() - t0
data, name, x = load_model(sys.argv[1], 1)
t1 = time.perf_counter()
p = pooled_predictor.Predictor(data)
t_build = time.perf_counter() - t1
t2 = time.perf_counter()
out = p.run(None, {name: x})
t_first = time.perf_counter() - t2
t3 = time.perf_counter()
p.run(None, {name: x})
t_second = time.perf_counter() - t3
print(json.dumps({"import_s": t_import, "build_s": t_build, "first_forward_s": t_first,
                  "second_forward_s": t_second, "to_first_result_s": t_import + t_build + t_first}))
"""


def measure(model: str, cache: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", CHILD, model], env=env, cwd=root, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet50", "ppocr_det", "ppocr_rec"])
    args = ap.parse_args(argv)
    rows = []
    for model in args.models:
        with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
            for state in ("cold", "warm"):
                r = measure(model, cache)
                rows.append({"model": model, "cache": state, **r})
                print(f"{model} {state}: {r['to_first_result_s']:.1f} s to the first result", flush=True)
    print()
    print(table(rows, [("model", "model", "s"), ("cache", "numba cache", "s"), ("import_s", "import s", ".2f"),
                       ("build_s", "Predictor s", ".2f"), ("first_forward_s", "first forward s", ".2f"),
                       ("to_first_result_s", "to first result s", ".2f"),
                       ("second_forward_s", "second forward s", ".3f")]))
    print(f"\nwritten to {write_results('startup', rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
