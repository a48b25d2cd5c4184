"""Recurrent nets, ours against onnxruntime, one thread: LSTM, GRU, RNN and three real models.

    python benchmarks/recurrent.py [--quick] [--rounds R] [--seconds S] [--only SUBSTRING ...] [--merge]

Rows:
* one-node LSTM, GRU and RNN (forward, default activations, GRU with
  linear_before_reset=1 as PyTorch exports it), hidden 64, 128, 256, 512, sequence
  32 and 256, batch 1 and 8, input size 64;
* stacked nets as PyTorch exports them (each layer's Y through Transpose and
  Reshape into the next): 2-layer bidirectional LSTM hidden 128 on a [32, 2, 40]
  input (issue 34: 13 ms against onnxruntime's 1.6), 2-layer GRU hidden 128 on
  the same, and 2-layer bidirectional GRU and LSTM hidden 256, sequence 100,
  batch 4;
* ONNX Loop (issue 34: an iteration cost about 3.5x onnxruntime's): a tanh RNN cell
  written as a Loop body, h = Tanh(MatMul(h, W) + B) with W and B captured from the
  outer graph and h also a scan output, 64 iterations of hidden 64 on [1, 64]; the
  trip count a weight (the node planned at reshape) or fed as an input (run per
  forward, its scan output stacked); and an If whose branches are one Identity,
  chosen by an input (the per-node cost of a body);
* the real recurrent models of tests/models/test_recurrent_models.py: silero-vad
  6.2.3 (one 32 ms chunk at 16 kHz, its state zero), g2p-id-py 0.4.2's encoder
  (a 7-letter word) and decoder (one step), ddddocr 1.6.1's recognizer (a
  64 x 260 text line).
Models are built with onnx.helper, weights uniform in +-1/sqrt(hidden) from a
seeded generator; inputs standard normal (seeded).

Ours: Predictor.run (the Net's compiled kernels) with BLAS limited to one thread
(threadpoolctl); onnxruntime: InferenceSession.run, intra_op_num_threads = inter_op_num_threads = 1,
ORT_ENABLE_ALL. Each round times every row's two engines back to back (the order
alternating by round) for S seconds each, in samples of at least 5 ms. A row's
time is the CPU time a call of this process (time.process_time) in its fastest
sample over all rounds, as conv_kernels.py times (on this shared machine other
processes' load stays out of it); "ort / ours" is onnxruntime's time over ours
(above 1: ours is faster); "wall-time ratio" the median over rounds of the same
ratio in wall time (each round's median sample). Outputs are checked first: max |ours - ort| /
max |ort| over every output. The load average (os.getloadavg) is printed
before and after: the machine is shared.

Writes benchmarks/results/recurrent.json (machine, CPU ISA, versions, command, load); with
--merge, the rows not run now are kept from the file as it was (each row says when and under
which load it was measured).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from benchmarks._common import table, write_results  # noqa: E402

onnxruntime.set_default_logger_severity(3)  # ddddocr declares an output shape it does not produce
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
INPUT = 64


def stacked(op: str, hidden: int, input_size: int, layers: int = 1, bidirectional: bool = False,
            seed: int = 0):
    """An ONNX model: X [seq, batch, input_size] through `layers` op nodes (opset 14), each Y but
    the last through Transpose(0, 2, 1, 3) and Reshape [seq, batch, D * hidden], as PyTorch exports
    nn.LSTM / nn.GRU / nn.RNN; output Y of the last node the same way ([seq, batch, D * hidden])."""
    rng = np.random.default_rng(seed)
    d, g = (2 if bidirectional else 1), GATES[op]
    s = 1 / np.sqrt(hidden)
    nodes, inits, x, size = [], [numpy_helper.from_array(np.array([0, 0, -1], np.int64), "shape")], "X", input_size
    for k in range(layers):
        for name, shape in ((f"W{k}", (d, g * hidden, size)), (f"R{k}", (d, g * hidden, hidden)),
                            (f"B{k}", (d, 2 * g * hidden))):
            inits.append(numpy_helper.from_array(rng.uniform(-s, s, shape).astype(np.float32), name))
        attrs = {"hidden_size": hidden, "direction": "bidirectional" if bidirectional else "forward"}
        if op == "GRU":
            attrs["linear_before_reset"] = 1
        nodes.append(helper.make_node(op, [x, f"W{k}", f"R{k}", f"B{k}"], [f"Y{k}"], name=f"{op.lower()}{k}",
                                      **attrs))
        nodes.append(helper.make_node("Transpose", [f"Y{k}"], [f"T{k}"], perm=[0, 2, 1, 3]))
        x = "Y" if k == layers - 1 else f"Z{k}"
        nodes.append(helper.make_node("Reshape", [f"T{k}", "shape"], [x]))
        size = d * hidden
    graph = helper.make_graph(
        nodes, f"{op.lower()}_{layers}x{hidden}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["seq", "batch", input_size])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["seq", "batch", size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def synthetic_rows(quick: bool):
    """(name, model bytes, feeds) for the one-node grid and the stacked nets."""
    rng = np.random.default_rng(1)
    hiddens, seqs, batches = ((64, 256), (32,), (1, 8)) if quick else ((64, 128, 256, 512), (32, 256), (1, 8))
    for op in ("LSTM", "GRU", "RNN"):
        for hidden in hiddens:
            data = stacked(op, hidden, INPUT).SerializeToString()
            for seq in seqs:
                for batch in batches:
                    x = rng.standard_normal((seq, batch, INPUT)).astype(np.float32)
                    yield f"{op} h{hidden} seq{seq} b{batch}", data, {"X": x}
    stacks = (("LSTM", 128, 2, True, 32, 2, 40), ("GRU", 128, 2, False, 32, 2, 40),
              ("LSTM", 256, 2, True, 100, 4, 80), ("GRU", 256, 2, True, 100, 4, 80))
    for op, hidden, layers, bi, seq, batch, inp in stacks:
        if quick and hidden > 128:
            continue
        x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
        name = f"{layers}-layer {'bi' if bi else ''}{op} h{hidden} [{seq},{batch},{inp}]"
        yield name, stacked(op, hidden, inp, layers, bi).SerializeToString(), {"X": x}


def loop_model(trips_fed: bool, hidden: int = 64, trips: int = 64, seed: int = 3) -> bytes:
    """Loop(M, "", h0) with body h = Tanh(MatMul(h, W) + B), carried h and scan output h (W, B captured);
    M a weight or (trips_fed) an input."""
    rng = np.random.default_rng(seed)
    s = 1 / np.sqrt(hidden)
    f = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["hw"]), helper.make_node("Add", ["hw", "B"], ["hb"]),
         helper.make_node("Tanh", ["hb"], ["h_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["h_out"], ["h_scan"])],
        "cell", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h_in", f, [1, hidden])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", f, [1, hidden]), helper.make_tensor_value_info("h_scan", f, [1, hidden])])
    inits = [numpy_helper.from_array(rng.uniform(-s, s, (hidden, hidden)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.uniform(-s, s, (1, hidden)).astype(np.float32), "B")]
    inputs = [helper.make_tensor_value_info("h0", f, [1, hidden])]
    if trips_fed:
        inputs.append(helper.make_tensor_value_info("M", TensorProto.INT64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(trips, np.int64), "M"))
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "h0"], ["h", "hs"], body=body)], "loop_rnn", inputs,
        [helper.make_tensor_value_info("h", f, [1, hidden]), helper.make_tensor_value_info("hs", f, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def if_model() -> bytes:
    """If(c) with then_branch Identity(x) and else_branch Identity(Neg(x)), x [1, 64], c an input."""
    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [vi("t", f, [1, 64])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", f, [1, 64])])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "if1",
                              [vi("c", TensorProto.BOOL, []), vi("x", f, [1, 64])], [vi("y", f, [1, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def control_rows():
    """(name, model bytes, feeds) of the Loop and If rows."""
    h0 = np.random.default_rng(4).standard_normal((1, 64)).astype(np.float32)
    yield "Loop RNN cell h64 x64 (M a weight)", loop_model(False), {"h0": h0}
    yield "Loop RNN cell h64 x64 (M fed)", loop_model(True), {"h0": h0, "M": np.array(64, np.int64)}
    yield "If, one-node branches", if_model(), {"c": np.array(True), "x": h0}


def model_rows():
    """(name, model path, feeds) for silero-vad, g2p-id's encoder and decoder, ddddocr."""
    from pooled_predictor.zoo.fetch import DDDDOCR, G2P_ID, SILERO_VAD, fetch_wheel_models
    from tests.models.test_recurrent_models import one_hot_word, text_line, voiced_signal

    silero = fetch_wheel_models(SILERO_VAD)["silero_vad/data/silero_vad.onnx"]
    chunk = np.concatenate([np.zeros((1, 64), np.float32), voiced_signal(16000, 0.5)[None, 4096:4096 + 512]], axis=1)
    yield "silero-vad 16 kHz chunk", silero, {"input": chunk, "state": np.zeros((2, 1, 128), np.float32),
                                               "sr": np.array(16000, np.int64)}
    g2p = fetch_wheel_models(G2P_ID)
    yield "g2p-id encoder (7 letters)", g2p["g2p_id/models/lstm/encoder_model.onnx"], {
        "input_1": one_hot_word("selamat", 28)}
    rng = np.random.default_rng(2)
    token = np.zeros((1, 1, 32), np.float32)
    token[0, 0, 1] = 1.0
    yield "g2p-id decoder (1 step)", g2p["g2p_id/models/lstm/decoder_model.onnx"], {
        "input_2": token, "input_3": rng.standard_normal((1, 256)).astype(np.float32) * 0.1,
        "input_4": rng.standard_normal((1, 256)).astype(np.float32) * 0.1}
    ddddocr = fetch_wheel_models(DDDDOCR)["ddddocr/common.onnx"]
    yield "ddddocr line 64x260", ddddocr, {"input1": text_line("pooled42")}


def engines(model, feeds):
    """(ours, onnxruntime): zero-argument calls returning the output lists."""
    import onnxruntime as ort

    from pooled_predictor import Predictor

    ours = Predictor(model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model if isinstance(model, bytes) else str(model), so,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return (lambda: ours.run(names, feeds)), (lambda: sess.run(names, feeds))


def rel_err(ours, ref) -> float:
    worst = 0.0
    for o, r in zip(ours, ref):
        r = np.asarray(r, np.float64)
        worst = max(worst, float(np.abs(np.asarray(o, np.float64) - r).max(initial=0.0)
                                 / max(np.abs(r).max(initial=0.0), 1e-30)))
    return worst


def timed(call, seconds: float) -> tuple[float, float]:
    """(CPU seconds a call, wall seconds a call) over about `seconds` of calls in samples of at
    least 5 ms: the fastest sample's CPU time of this process (time.process_time, as
    conv_kernels.per_call: on a shared machine other processes' load stays out of it) and the
    median sample's wall time."""
    t0 = time.process_time()
    call()
    inner = max(1, int(0.005 / max(time.process_time() - t0, 1e-7)))
    cpu, wall = [], []
    stop = time.perf_counter() + seconds
    while len(cpu) < 3 or time.perf_counter() < stop:
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(inner):
            call()
        cpu.append((time.process_time() - c0) / inner)
        wall.append((time.perf_counter() - w0) / inner)
    return min(cpu), statistics.median(wall)


def cpu_isa() -> dict:
    """The CPU as LLVM (numba's compiler) sees it: name and the vector extensions our kernels use."""
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features()
    return {"llvm_cpu": llvm.get_host_cpu_name(),
            "features": sorted(f for f in ("sse4.2", "avx", "avx2", "fma", "avx512f", "avx512vl", "avx512bw")
                               if features.get(f, False))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="hidden 64 and 256, sequence 32, no hidden-256 stacks")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.15, help="per engine per row per round")
    ap.add_argument("--only", nargs="*", default=None, help="rows whose name contains one of these")
    ap.add_argument("--no-models", action="store_true", help="skip silero-vad, g2p-id and ddddocr")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows not run now from benchmarks/results/recurrent.json as it was (each row "
                         "says when and under which load it was measured)")
    args = ap.parse_args(argv)

    from threadpoolctl import threadpool_limits

    load_before = os.getloadavg()
    rows, calls = [], []
    sources = list(synthetic_rows(args.quick)) + list(control_rows()) + ([] if args.no_models else list(model_rows()))
    with threadpool_limits(1):
        for name, model, feeds in sources:
            if args.only and not any(s in name for s in args.only):
                continue
            ours, ort_call = engines(model, feeds)
            rows.append({"model": name, "err_vs_ort": rel_err(ours(), ort_call())})
            calls.append((ours, ort_call))
            print(f"built {name}: error {rows[-1]['err_vs_ort']:.1e}", file=sys.stderr)
        times = [([], []) for _ in rows]
        for r in range(args.rounds):
            for (ours, ort_call), (t_ours, t_ort) in zip(calls, times):
                pair = [(ours, t_ours), (ort_call, t_ort)]
                for call, into in (pair if r % 2 == 0 else pair[::-1]):
                    into.append(timed(call, args.seconds))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    load_after = os.getloadavg()
    for row, (t_ours, t_ort) in zip(rows, times):
        row["ours_ms"] = min(c for c, _ in t_ours) * 1e3
        row["ort_ms"] = min(c for c, _ in t_ort) * 1e3
        row["speed"] = row["ort_ms"] / row["ours_ms"]
        # wall time, both engines measured back to back in each round: the median of the rounds' ratios
        row["speed_wall"] = statistics.median(b[1] / a[1] for a, b in zip(t_ours, t_ort))
    print(table(rows, [("model", "model", "s"), ("ours_ms", "ours ms", ".3f"), ("ort_ms", "onnxruntime ms", ".3f"),
                       ("speed", "ort / ours", ".2f"), ("speed_wall", "wall-time ratio", ".2f"),
                       ("err_vs_ort", "max err / max|ort|", ".1e")]))
    slower = [r["model"] for r in rows if r["speed"] < 1.0]
    print(f"\nload average (1, 5, 15 min) before {load_before}, after {load_after}; "
          f"{len(rows) - len(slower)}/{len(rows)} rows at least 1.0x onnxruntime"
          + (f"; below: {', '.join(slower)}" if slower else ""))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for r in rows:
        r.update(measured_at=stamp, load_average_before=load_before, load_average_after=load_after)
    if args.merge:
        from benchmarks._common import RESULTS

        old = RESULTS / "recurrent.json"
        if old.exists():
            ran = {r["model"] for r in rows}
            order = [name for name, _, _ in sources]
            kept = [r for r in json.loads(old.read_text())["rows"] if r["model"] not in ran]
            rows = sorted(kept + rows, key=lambda r: order.index(r["model"]) if r["model"] in order else len(order))
    path = write_results("recurrent", rows, cpu=cpu_isa(), load_average_before=load_before,
                         load_average_after=load_after, rounds=args.rounds, seconds=args.seconds,
                         blas_threads=1, ort_threads=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
