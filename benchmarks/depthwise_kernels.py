"""Micro-benchmark: depthwise convolutions of MobileNetV2 and the PP-OCR detector, ours against onnxruntime.

One thread. Each layer's FusedConv as the Net runs it (bias, Clip(0, 6) fused:
MobileNetV2's ReLU6; the detector's layers without activation), against a
one-node onnxruntime session (ORT_ENABLE_ALL, its fastest; the Conv alone, the
activation being nearly free there too). Times as in conv_kernels.py: the
fastest of several samples of this process's CPU time.

The NCHW8c column is compiled/nchwc_depthwise.py on an input already in
NCHW8c, writing NCHW8c (the layout transforms not counted: a blocked chain
stays blocked); onnxruntime's ORT_ENABLE_ALL session does count its own
reorders to and from NCHWc around its one node, so for the stride-1 layers
"ort chain" also gives onnxruntime's time for the conv inside a blocked chain:
the time of two such convs in a row less that of one (ORT keeps NCHWc between
them; one reorder each way in both).

    python benchmarks/depthwise_kernels.py

Prints a table and writes benchmarks/results/depthwise_kernels.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conv_kernels import ROOT, onnxruntime_call, ours, per_call  # noqa: E402

sys.path.insert(0, str(ROOT))
from benchmarks._common import write_results  # noqa: E402

from pooled_predictor.ops.cpu.compiled.epilogue import CLIP, NONE  # noqa: E402
from pooled_predictor.ops.cpu.compiled.nchwc_depthwise import depthwise_nchwc, pack_depthwise  # noqa: E402
from pooled_predictor.ops.layouts import physical_shape, transform  # noqa: E402

# name, channels, H, W, kernel, stride, layers of the model with this shape
LAYERS = [
    ("mv2 32ch 112x112 s1", 32, 112, 112, 3, 1, 1), ("mv2 96ch 112x112 s2", 96, 112, 112, 3, 2, 1),
    ("mv2 144ch 56x56 s1", 144, 56, 56, 3, 1, 1), ("mv2 144ch 56x56 s2", 144, 56, 56, 3, 2, 1),
    ("mv2 192ch 28x28 s1", 192, 28, 28, 3, 1, 2), ("mv2 192ch 28x28 s2", 192, 28, 28, 3, 2, 1),
    ("mv2 384ch 14x14 s1", 384, 14, 14, 3, 1, 4), ("mv2 576ch 14x14 s1", 576, 14, 14, 3, 1, 2),
    ("mv2 576ch 14x14 s2", 576, 14, 14, 3, 2, 1), ("mv2 960ch 7x7 s1", 960, 7, 7, 3, 1, 3),
    ("det 5x5 64ch 120x160", 64, 120, 160, 5, 1, 1), ("det 5x5 64ch 60x80", 64, 60, 80, 5, 1, 1),
    ("det 3x3 32ch 120x160", 32, 120, 160, 3, 1, 1),
]


def nchw8c(inputs, out, k, s, act, ref):
    """Seconds per call of depthwise_nchwc on the input already in NCHW8c, and its error against `ref`."""
    x, w, b = inputs
    xb = np.empty(physical_shape(x.shape, "NCHW8c"), np.float32)
    transform(x, "NCHW", "NCHW8c", xb)
    yb = np.empty(physical_shape(out.shape, "NCHW8c"), np.float32)
    wp, p = pack_depthwise(w), k // 2
    # Python floats for p0, p1: numba's dispatcher takes np.float32 scalars 2 us slower
    call = lambda: depthwise_nchwc(xb, wp, b, yb, k, k, s, s, 1, 1, p, p, act, 0.0, 6.0)  # noqa: E731
    t = per_call(call)
    y = np.empty_like(out)
    transform(yb, "NCHW8c", "NCHW", y)
    return t, float(np.abs(y - ref).max() / max(1.0, float(np.abs(ref).max())))


def ort_in_chain(inputs, attrs, t_one):
    """Seconds of one conv inside onnxruntime's blocked chain: two of them in a row less one (stride 1)."""
    x, w, b = inputs
    w2 = np.ascontiguousarray(w[::-1])
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (w2, "w2"))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["mid"], **attrs),
             helper.make_node("Conv", ["mid", "w2", "b"], ["y"], **attrs)]
    graph = helper.make_graph(nodes, "dw2", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = min(model.ir_version, 10)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    io = sess.io_binding()
    io.bind_cpu_input("x", x)
    y = np.empty_like(x)
    io.bind_output("y", "cpu", 0, np.float32, y.shape, y.ctypes.data)
    return per_call(lambda: sess.run_with_iobinding(io)) - t_one


def main():
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'layer':<24} {'path (NCHW)':<20} {'NCHW ms':>8} {'NCHW8c':>8} {'ort ms':>8} {'chain':>8} "
          f"{'ratio':>6} {'8c/ort':>6} {'8c/chn':>7}")
    with threadpool_limits(1):
        for name, c, h, w, k, s, count in LAYERS:
            attrs = {"group": c, "pads": [k // 2] * 4, "strides": [s, s], "kernel_shape": [k, k]}
            inputs = [rng.standard_normal((1, c, h, w)).astype(np.float32),
                      rng.standard_normal((c, 1, k, k)).astype(np.float32), rng.standard_normal(c).astype(np.float32)]
            kern, out, call = ours("Conv", inputs, attrs)
            act = CLIP if name.startswith("mv2") else NONE
            fused = kern.fuse_activation(act, 0.0, 6.0)
            t_ours = per_call(call)
            ref, ort_call = onnxruntime_call("Conv", inputs, attrs, out, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
            t_ort = per_call(ort_call)
            call()
            if act == CLIP:
                ref = np.clip(ref, 0, 6)
            err = float(np.abs(out - ref).max() / max(1.0, float(np.abs(ref).max())))
            t_c, err_c = nchw8c(inputs, out, k, s, act, ref)
            t_chain = ort_in_chain(inputs, attrs, t_ort) if s == 1 else float("nan")
            rows.append({"name": name, "path": kern.path, "fused_activation": fused, "count": count,
                         "ours_ms": t_ours * 1e3, "ort_ms": t_ort * 1e3, "ratio": t_ours / t_ort, "max_rel_err": err,
                         "nchw8c_ms": t_c * 1e3, "nchw8c_ratio": t_c / t_ort, "nchw8c_max_rel_err": err_c,
                         "ort_chain_ms": t_chain * 1e3 if s == 1 else None})
            print(f"{name:<24} {kern.path:<20} {t_ours * 1e3:8.3f} {t_c * 1e3:8.3f} {t_ort * 1e3:8.3f} "
                  f"{t_chain * 1e3:8.3f} {t_ours / t_ort:6.2f} {t_c / t_ort:6.2f} {t_c / t_chain:7.2f}", flush=True)
    total = {k: sum(r[k] * r["count"] for r in rows if r["name"].startswith("mv2"))
             for k in ("ours_ms", "nchw8c_ms", "ort_ms")}
    print(f"\nMobileNetV2's 17 depthwise layers: ours {total['ours_ms']:.2f} ms, ours NCHW8c "
          f"{total['nchw8c_ms']:.2f} ms, onnxruntime {total['ort_ms']:.2f} ms (ratios "
          f"{total['ours_ms'] / total['ort_ms']:.2f}, {total['nchw8c_ms'] / total['ort_ms']:.2f})")
    out = write_results("depthwise_kernels", rows, mobilenet_v2_total=total)  # with the machine and versions
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
