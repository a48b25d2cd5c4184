"""The k-block and row-block sizes of the packed-panel MatMul (compiled/matmul.py), swept, one thread.

    python benchmarks/matmul_blocking.py [--lanes 16 8] [--kc 64 128 256 ...] [--repeat 5]

For the transformers' projection shapes (BERT-base and ViT-B/16: rows 128 / 197, K and N 768 / 3072) and
two CNN classifier / pointwise-like ones, it times matmul_const16_kc / matmul_const_kc (the packed weight
with its bias, as MatMulAdd runs it) at each k-block size KC, the row block from MC_BYTES as the library
picks it, beside one pass over K (kc = K, mc = all rows: the panel streamed from L2 for every row tile, the
order before k-blocking) and numpy's sgemm (OpenBLAS) of the same product. Prints GFLOP/s (2 flops a
multiply-add) per case and the geometric mean per setting, and writes benchmarks/results/matmul_blocking.json
naming the CPU. Every setting gives the same bits (tests/ops/test_compiled_matmul.py); this picks the fastest.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import write_results  # noqa: E402
from pooled_predictor.ops.cpu.compiled import isa  # noqa: E402
from pooled_predictor.ops.cpu.compiled import matmul as mm  # noqa: E402

# (rows, K, N): BERT-base (sequence 128) Q/K/V and output projections, its FFN up and down; ViT-B/16's
# fused QKV (197 tokens) and FFN; a classifier row block; a pointwise-like tall product
CASES = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (197, 768, 2304), (197, 3072, 768),
         (64, 2048, 1000), (3136, 64, 256)]


def per_call(fn, repeat: int) -> float:
    """The fastest of `repeat` samples of this thread's CPU time per call (seconds), each sample >= 20 ms."""
    fn()
    n, best = 1, math.inf
    while True:
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        dt = time.thread_time() - t0
        if dt >= 0.02:
            break
        n *= 2
    best = dt / n
    for _ in range(repeat - 1):
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time() - t0) / n)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lanes", type=int, nargs="+", default=[isa.LANES], choices=[8, 16])
    ap.add_argument("--kc", type=int, nargs="+", default=[64, 128, 192, 256, 384, 512])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    results = []
    header = ["numpy", "one pass"] + [f"kc {kc}" for kc in args.kc]
    with threadpool_limits(1):
        for lanes in args.lanes:
            panel, run, ws_n = ((mm.PANEL16, mm.matmul_const16_kc, mm.scratch_size16()) if lanes == 16
                                else (mm.PANEL, mm.matmul_const_kc, mm.scratch_size()))
            mr = mm.MR16 if lanes == 16 else mm.MR
            print(f"\n{lanes} lanes (GFLOP/s, one thread; library default KC {mm.KC16 if lanes == 16 else mm.KC}, "
                  f"MC_BYTES {mm.MC_BYTES >> 10} KB)")
            print(f"{'rows x K x N':<20}" + "".join(f"{h:>10}" for h in header))
            for rows, k_n, n_n in CASES:
                a = rng.standard_normal((rows, k_n)).astype(np.float32)
                b = rng.standard_normal((k_n, n_n)).astype(np.float32)
                c = rng.standard_normal(n_n).astype(np.float32)
                xp = mm.pack_right(b, c, panel)
                y = np.empty((rows, n_n), np.float32)
                ws = np.zeros(ws_n, np.float32)
                af, yf = a.reshape(-1), y.reshape(-1)
                flops = 2.0 * rows * k_n * n_n
                row = {"lanes": lanes, "rows": rows, "k": k_n, "n": n_n}
                row["numpy"] = flops / per_call(lambda: np.add(np.matmul(a, b, out=y), c, out=y), args.repeat) / 1e9
                row["one pass"] = flops / per_call(lambda: run(af, rows, k_n, True, xp, yf, n_n, ws, k_n, rows),
                                                   args.repeat) / 1e9
                for kc in args.kc:
                    mc = max(mr, mm.MC_BYTES // (4 * min(kc, k_n)))
                    row[f"kc {kc}"] = flops / per_call(lambda: run(af, rows, k_n, True, xp, yf, n_n, ws, kc, mc),
                                                       args.repeat) / 1e9
                results.append(row)
                print(f"{f'{rows} x {k_n} x {n_n}':<20}" + "".join(f"{row[h]:>10.1f}" for h in header), flush=True)
            mine = [r for r in results if r["lanes"] == lanes]
            print(f"{'geomean':<20}" + "".join(
                f"{math.exp(sum(math.log(r[h]) for r in mine) / len(mine)):>10.1f}" for h in header))
    out = write_results("matmul_blocking", results, kernels=isa.describe(), kc=mm.KC, kc16=mm.KC16,
                        mc_bytes=mm.MC_BYTES, one_pass_bytes=mm.ONE_PASS_BYTES, blocked_here=mm.BLOCKED)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
