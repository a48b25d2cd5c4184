"""Per-op-type profile tables of MobileNetV2 and PP-OCR det: the numpy engine vs the compiled one.

    python benchmarks/profiles.py [--runs 10] [--top 12]

Issue 11 asked for these tables before and after its kernels. "numpy" is today's engine
with the compiled kernels and the NCHW8c kernel types switched off
(POOLED_PREDICTOR_COMPILED=0, POOLED_PREDICTOR_NCHWC=0): the numpy kernels the issue
started from, which stay as the tested reference; "compiled" is the default. Each is
`pooled-predictor profile MODEL --runs N` in a fresh process (one Net, one thread, the
first forward not profiled). Prints both tables per model and writes them, with the
totals, to benchmarks/results/profiles.json.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import write_results  # noqa: E402

ENGINES = {"numpy": {"POOLED_PREDICTOR_COMPILED": "0", "POOLED_PREDICTOR_NCHWC": "0"}, "compiled": {}}


def models() -> dict:
    """name -> (path, --shape argument)."""
    import tempfile

    from pooled_predictor.zoo import build, fetch_ppocr

    mnv2 = Path(tempfile.gettempdir()) / "pooled-predictor-profiles-mobilenet_v2.onnx"
    if not mnv2.exists():
        mnv2.write_bytes(build("mobilenet_v2").SerializeToString())
    return {"mobilenet_v2": (str(mnv2), "data=1x3x224x224"),
            "ppocr_det": (str(fetch_ppocr().det), "x=1x3x480x640")}


def profile(path: str, shape: str, env: dict, runs: int, top: int) -> str:
    cmd = [sys.executable, "-m", "pooled_predictor", "profile", path, "--shape", shape, "--runs", str(runs),
           "--top", str(top)]
    done = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, check=True,
                          cwd=str(Path(__file__).resolve().parents[1]))
    return done.stdout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args(argv)
    rows = []
    for name, (path, shape) in models().items():
        for engine, env in ENGINES.items():
            text = profile(path, shape, env, args.runs, args.top)
            total = re.search(r"([\d.]+) ms per forward", text)
            rows.append({"model": name, "engine": engine, "ms_per_forward": float(total.group(1)) if total else None,
                         "table": text})
            print(f"## {name}, {engine} kernels\n{text}", flush=True)
    for name in dict.fromkeys(r["model"] for r in rows):
        a, b = (next(r for r in rows if r["model"] == name and r["engine"] == e) for e in ENGINES)
        if a["ms_per_forward"] and b["ms_per_forward"]:
            print(f"{name}: {a['ms_per_forward']:.1f} ms (numpy) -> {b['ms_per_forward']:.1f} ms (compiled), "
                  f"{a['ms_per_forward'] / b['ms_per_forward']:.2f}x")
    print(f"\nwritten to {write_results('profiles', rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
