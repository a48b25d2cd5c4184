"""Per-op-type time of one forward, ours beside onnxruntime's, one thread each, on the benchmark models.

    python benchmarks/op_profiles.py [--models vit_b_16 bert_base ppocr_rec ...] [--batch 1] [--runs 5] [--nodes N]
                                     [--host-without-vnni] [--out-suffix S]
    python benchmarks/op_profiles.py --int8 [--models bert resnet50 mobilenet_v2 ppocr_det] [--formats qdq qop]
                                     [--bert-layers L] [--bert-seq T] [--int8-arithmetic onnxruntime|exact]

The models and inputs of benchmarks/vs_onnxruntime.py (load_model); with --int8, benchmarks/int8.py's
quantized models instead (quantized there by onnxruntime's tool: dynamic for its BERT-base-sized
encoder, static QDQ / QOperator for the CNNs), our Net in the given int8 arithmetic. Ours: one Net on one thread
with its profiler on (`pooled-predictor profile`'s numbers); onnxruntime: one session with one
intra-op thread and SessionOptions.enable_profiling, its "<node>_kernel_time" events summed by
op type. Both are timed on this thread's CPU clock (time.thread_time), so that other processes
on a shared machine do not count: ours by that clock directly (--clock cpu, the default; --clock
wall: perf_counter), onnxruntime's per-op figures (its profiler reads the wall clock) scaled by
the ratio of the run's CPU time to its wall time, which leaves its shares exact and its total the
CPU time. One thread: the rows compare kernels, not the pool (benchmarks/vs_onnxruntime.py does).

Op types differ between the two graphs (our MatMulAdd and ScaledDotProductAttention against
onnxruntime's MatMul, Add, Softmax; our FusedConv* against its fused Conv): read the totals and
the rows together. --int8 qdq|qop profiles the model quantized by benchmarks/int8.py's
quantized() (onnxruntime's quantize_static, per channel, u8/s8, in that format; ResNet-50 and
MobileNetV2 at batch 1) instead of the float model; our rows then run in the default int8
arithmetic. Prints a table per model and writes benchmarks/results/op_profiles.json
(op_profiles_int8_qdq.json / op_profiles_int8_qop.json with --int8).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import table, write_results  # noqa: E402
from benchmarks import int8  # noqa: E402
from benchmarks.vs_onnxruntime import MODELS, available, load_model  # noqa: E402


def ours(data: bytes, input_name: str, x, runs: int, clock: str, nodes: list | None = None,
         **options) -> tuple[float, dict]:
    """(ms per forward in kernels, {op_type: ms per forward}) of one Net on this thread (options: Predictor's);
    with `nodes` (a list), its per-node rows appended to it: {node, op_type, ms, shape} costliest first (shape:
    the node's first output blob's, in its layout: NCHW16c 5-D)."""
    if clock == "cpu":  # the engine reads time.perf_counter_ns at every forward (engine/net.py)
        time.perf_counter_ns = time.thread_time_ns
    from pooled_predictor import Predictor
    from pooled_predictor.engine.tiering import COMPILER

    predictor = Predictor(data, **options)  # kept alive: while it lives BLAS runs one thread a call (as in the pool)
    net = predictor.new_net()
    net.forward({input_name: x})
    COMPILER.wait()  # the compiled kernels loaded or compiled (engine/tiering.py): the reference tier not timed
    net.forward({input_name: x})
    net.forward({input_name: x})
    profiler = net.enable_profiling()
    for _ in range(runs):
        net.forward({input_name: x})
    result = profiler.total_ms_per_forward(), {r["op_type"]: r["ms_per_forward"] for r in profiler.by_op_type()}
    if nodes is not None:
        run = {n.name: n for n in net.layout.run_nodes}
        for r in profiler.by_node():
            node = run.get(r["node"])
            out = node.outputs[0] if node is not None and node.outputs else None
            blob = net.layout.blobs.get(out) if out is not None else None  # (blocked: its physical shape)
            shape = list(blob.shape) if blob is not None else None
            nodes.append({"node": r["node"], "op_type": r["op_type"], "ms": r["ms_per_forward"], "shape": shape})
    del net, predictor
    return result


def onnxruntime_ops(data: bytes, input_name: str, x, runs: int, nodes: list | None = None) -> tuple[float, dict]:
    """(CPU ms per run, {op_type: ms per run}) of one onnxruntime session with one intra-op thread; with `nodes`
    (a list), its per-node rows appended: {node, op_type, ms, inputs, shape} costliest first (the input shapes
    and the first output's, as its profiler records them)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "ort")
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    sess.run(None, {input_name: x})
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(runs):
        sess.run(None, {input_name: x})
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    events = json.loads(Path(sess.end_profiling()).read_text())
    by = collections.defaultdict(float)
    per_node, info = collections.defaultdict(float), {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by[e["args"]["op_name"]] += e["dur"] / 1e3 / (runs + 1)  # us; the warm-up run is in the file
            name = e["name"][:-len("_kernel_time")]
            per_node[name] += e["dur"] / 1e3 / (runs + 1)
            info[name] = e["args"]
    scale = cpu / wall
    if nodes is not None:
        def shapes(entries):
            return [next(iter(d.values())) for d in entries or []]

        for name, ms in sorted(per_node.items(), key=lambda kv: -kv[1]):
            a = info[name]
            out = shapes(a.get("output_type_shape"))
            nodes.append({"node": name, "op_type": a.get("op_name"), "ms": ms * scale,
                          "inputs": shapes(a.get("input_type_shape")), "shape": out[0] if out else None})
    return cpu / runs * 1e3, {k: v * scale for k, v in by.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["vit_b_16", "bert_base", "ppocr_rec", "mobilenet_v2"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    ap.add_argument("--int8", action="store_true", help="benchmarks/int8.py's quantized models (--models from "
                    f"{', '.join(int8.MODELS + int8.OPTIONAL)})")
    ap.add_argument("--formats", nargs="+", default=["qdq"], choices=["qdq", "qop"],
                    help="with --int8: the CNNs' formats")
    ap.add_argument("--bert-layers", type=int, default=12, help="with --int8")
    ap.add_argument("--bert-seq", type=int, default=128, help="with --int8")
    ap.add_argument("--int8-arithmetic", choices=["onnxruntime", "exact"], default="onnxruntime", help="with --int8")
    ap.add_argument("--nodes", type=int, default=0, metavar="N",
                    help="also print each side's N costliest nodes with their output shapes (all of them in the JSON)")
    ap.add_argument("--host-without-vnni", action="store_true",
                    help="with --int8: our int8 arithmetic as on a host without VNNI (int8.py's flag)")
    ap.add_argument("--out-suffix", default="", metavar="S",
                    help="write op_profiles[_int8]_S.json, beside the default file (e.g. avx2_proxy: under "
                         "tests/avx2_target.sh's environment with benchmarks/ort_avx2.py's onnxruntime)")
    args = ap.parse_args()
    if args.int8 and "--models" not in sys.argv:
        args.models = ["bert"]
    known = int8.MODELS + int8.OPTIONAL if args.int8 else MODELS
    if bad := [m for m in args.models if m not in known]:
        ap.error(f"unknown model(s) {bad}; choose from {known}")
    if args.host_without_vnni:
        int8.assume_host_without_vnni()
    results = []
    work = Path(tempfile.mkdtemp())
    for name, fmt in [(m, f) for m in args.models
                      for f in (["dynamic"] if m == "bert" else args.formats if args.int8 else [None])]:
        options = {}
        if args.int8:
            data, _, input_name, x = int8.quantized(name, fmt, work, args)
            options["int8_arithmetic"] = args.int8_arithmetic
            name = f"{name} int8 {fmt}"
        elif not available(name):
            continue
        else:
            data, input_name, x = load_model(name, args.batch)
        ort_nodes, our_nodes = ([], []) if args.nodes else (None, None)
        t_ort, ort_ops = onnxruntime_ops(data, input_name, x, args.runs, ort_nodes)
        t_ours, our_ops = ours(data, input_name, x, args.runs, args.clock, our_nodes, **options)
        rows = [{"op_type": k, "ours": our_ops.get(k), "ort": ort_ops.get(k)}
                for k in sorted(set(our_ops) | set(ort_ops), key=lambda k: -max(our_ops.get(k, 0), ort_ops.get(k, 0)))]
        rows = [r for r in rows if max(r["ours"] or 0, r["ort"] or 0) >= 0.005 * max(t_ours, t_ort)]
        print(f"\n{name} batch {args.batch}: ours {t_ours:.2f} ms in kernels, onnxruntime {t_ort:.2f} ms "
              f"(one thread, {args.clock} clock; ours / ort {t_ours / t_ort:.2f})")
        print(table(rows, [("op_type", "op_type", ""), ("ours", "ours ms", ".3f"), ("ort", "ort ms", ".3f")]))
        results.append({"model": name, "int8": args.int8, "batch": args.batch, "ours_ms": t_ours, "ort_ms": t_ort,
                        "ours_ops": our_ops, "ort_ops": ort_ops})
        if args.nodes:
            for side, rows in (("ours", our_nodes), ("onnxruntime", ort_nodes)):
                print(f"\n{side}: the {args.nodes} costliest nodes")
                print(table(rows[:args.nodes], [("ms", "ms", ".4f"), ("op_type", "op_type", ""), ("node", "node", ""),
                                                ("shape", "output shape", "")]))
            results[-1].update(ours_nodes=our_nodes, ort_nodes=ort_nodes)
    extra = {"int8_arithmetic": args.int8_arithmetic, "bert": {"layers": args.bert_layers, "seq": args.bert_seq}} \
        if args.int8 else {}
    stem = "op_profiles_int8" if args.int8 else "op_profiles"
    path = write_results(f"{stem}_{args.out_suffix}" if args.out_suffix else stem, results, runs=args.runs,
                         clock=args.clock, **extra)
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
