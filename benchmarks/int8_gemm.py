"""Micro-benchmark: DynamicQuantizeMatMul's kernel at BERT-base's GEMM shapes, ours against onnxruntime.

    python benchmarks/int8_gemm.py [--shapes 128x768x768 128x768x3072 128x3072x768] [--rounds 5]

One thread. Per shape M x K x N: A (M, K) float32 (seeded normal), W (K, N) int8 (seeded, zero point
0), per-column scales and a bias, as onnxruntime.quantization.quantize_dynamic makes the encoder's
projections (after passes/qdq.py fuses them: DynamicQuantizeLinear, MatMulInteger, Cast, Mul, Add).
Ours: the compiled kernel the DynamicQuantizeMatMul node runs (compiled/dqgemm.py, the module of the
host's int8 dot product: vpdpbusd on a VNNI host, its wide tiles at 16 lanes; vpmaddubsw elsewhere),
called directly with its packed weights. onnxruntime: a one-node com.microsoft DynamicQuantizeMatMul
session with 1 intra-op thread. Each round times 30 calls of each, interleaved; the table gives the
fastest round's ms per call and GOPS (2 M K N / time), ours / onnxruntime's time, and the max
difference of the outputs over max|ref| (0: the same bits). On a host with AMX-INT8 the AMX-tile kernel
(compiled/amx.py, what the node runs there) is timed beside them, with its largest difference from our
VNNI kernel's output (0: the same bits). Writes benchmarks/results/int8_gemm.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("POOLED_PREDICTOR_TIERED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks._common import table, write_results  # noqa: E402

SHAPES = ("128x768x768", "128x768x3072", "128x3072x768")


def ort_session(w, b_scale, bias):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    k, n = w.shape
    node = helper.make_node("DynamicQuantizeMatMul", ["a", "w", "bs", "zp", "bias"], ["y"], domain="com.microsoft")
    graph = helper.make_graph([node], "dqmm", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, n])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b_scale, "bs"),
                               numpy_helper.from_array(np.zeros(n, np.int8), "zp"),
                               numpy_helper.from_array(bias, "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def ours_call(a, w, b_scale, bias):
    from pooled_predictor.ops import int8_arithmetic
    from pooled_predictor.ops.cpu import compiled

    dot = int8_arithmetic.dot_product()
    d = compiled.dots.module("dqgemm", dot or "vpmaddubsw")
    m, k = a.shape
    args = (d.pack_panels(w), d.padded(w.astype(np.int64).sum(axis=0), np.int32), d.padded(b_scale, np.float32),
            d.padded(bias, np.float32))
    y = np.empty((m, w.shape[1]), np.float32)
    xq = np.zeros(m * ((k + 3) // 4 * 4), np.uint8)
    ws = np.zeros(d.ROWS * 16, np.float32)

    def call():
        d.dynamic_qmatmul_sat(a, a.min(), a.max(), *args, y, xq, ws, compiled.qgemm.ONES)
        return y

    return call, f"{dot or 'vpmaddubsw'}{' wide' if getattr(d, 'WIDE', False) else ''}"


def amx_call(a, w, b_scale, bias):
    """The AMX-tile kernel (compiled/amx.py) the node runs on a host with AMX-INT8; None elsewhere."""
    from pooled_predictor.ops.cpu.compiled import amx

    if not amx.usable():
        return None
    m, k = a.shape
    n = w.shape[1]
    k64 = amx.k_padded(k)
    wp, cs = amx.pack_panels(w), amx.padded(w.astype(np.int64).sum(axis=0), np.int32, n)
    bs, bp = amx.padded(b_scale, np.float32, n), amx.padded(bias, np.float32, n)
    y = np.empty((m, n), np.float32)
    xq = np.zeros(amx.rows_padded(m) * k64, np.uint8)

    addr = amx.address("amx_dqgemm")

    def call():  # what the node runs: one numba call, quantizing A and calling the kernel by its address
        amx.dynamic_qmatmul_amx(addr, a, a.min(), a.max(), xq, k64, wp, cs, bs, bp, 1, y)
        return y

    return call


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES))
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    for text in args.shapes:
        m, k, n = map(int, text.split("x"))
        a = rng.standard_normal((m, k)).astype(np.float32)
        a.flags.writeable = False
        w = rng.integers(-127, 128, (k, n)).astype(np.int8)
        b_scale = (rng.uniform(0.5, 1.5, n) * 1e-3).astype(np.float32)
        bias = rng.standard_normal(n).astype(np.float32)
        ours, kernel = ours_call(a, w, b_scale, bias)
        on_amx = amx_call(a, w, b_scale, bias)
        sess = ort_session(w, b_scale, bias)
        ref = sess.run(None, {"a": a})[0]
        err = float(np.abs(ours() - ref).max() / np.abs(ref).max())
        amx_vs_ours = None if on_amx is None else float(np.abs(on_amx() - ours()).max())
        best = {"ours": 1e9, "ort": 1e9, "amx": None if on_amx is None else 1e9}
        configs = [("ours", ours), ("ort", lambda: sess.run(None, {"a": a}))] + ([("amx", on_amx)] if on_amx else [])
        for _ in range(args.rounds):
            for name, f in configs:
                t0 = time.perf_counter()
                for _ in range(30):
                    f()
                best[name] = min(best[name], (time.perf_counter() - t0) / 30)
        ops = 2 * m * k * n
        rows.append({"shape": text, "kernel": kernel, "ours_ms": best["ours"] * 1e3, "ort_ms": best["ort"] * 1e3,
                     "ours_gops": ops / best["ours"] / 1e9, "ort_gops": ops / best["ort"] / 1e9,
                     "time_vs_ort": best["ours"] / best["ort"], "max_rel_diff": err,
                     "amx_ms": best["amx"] and best["amx"] * 1e3, "amx_gops": best["amx"] and ops / best["amx"] / 1e9,
                     "amx_vs_ort": best["amx"] and best["amx"] / best["ort"], "amx_vs_ours_max_diff": amx_vs_ours})
        print(f"{text}: ours {best['ours'] * 1e3:.3f} ms, onnxruntime {best['ort'] * 1e3:.3f} ms", flush=True)
    print()
    print(table(rows, [("shape", "M x K x N", "s"), ("kernel", "our kernel", "s"), ("ours_ms", "ours ms", ".3f"),
                       ("ort_ms", "ort ms", ".3f"), ("ours_gops", "ours GOPS", ".0f"), ("ort_gops", "ort GOPS", ".0f"),
                       ("time_vs_ort", "ours/ort time", ".2f"), ("max_rel_diff", "max rel diff", ".1e"),
                       ("amx_ms", "AMX ms", ".3f"), ("amx_gops", "AMX GOPS", ".0f"),
                       ("amx_vs_ort", "AMX/ort time", ".2f"),
                       ("amx_vs_ours_max_diff", "AMX vs ours max diff", ".1e")]))
    from pooled_predictor.ops.cpu.compiled import amx

    print(amx.status())
    print(f"written to {write_results('int8_gemm', rows, rounds=args.rounds, amx=amx.status())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
