"""Micro-benchmark: our Conv / ConvTranspose kernels against onnxruntime, one thread.

For each case, the time of one call of our kernel object (built as a Net
builds it at reshape, scratch preallocated) and of a one-node onnxruntime
session (intra_op_num_threads=1, I/O bound to preallocated arrays) with
ORT_ENABLE_ALL (NCHWc layout transforms, its fastest) and ORT_DISABLE_ALL.
BLAS is limited to one thread (threadpoolctl), the deployment case. Times are
the fastest of several samples of this process's CPU time (see per_call).

Two sets: representative shapes of every path, and every distinct conv of the
PP-OCR detector at one image size (counted as often as the model uses it),
when the model is in the local cache.

    python benchmarks/conv_kernels.py [--size 640x480] [--quick]

Prints a table and writes benchmarks/results/conv_kernels.json.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from threadpoolctl import threadpool_info, threadpool_limits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pooled_predictor.ir import Node  # noqa: E402
from pooled_predictor.ops.context import OpContext  # noqa: E402
from pooled_predictor.ops.cpu.conv import Conv, ConvTranspose  # noqa: E402
from pooled_predictor.ops.shapes import get_rule  # noqa: E402
from tests.onnx_helpers import make_node_model  # noqa: E402

ort.set_default_logger_severity(3)

# name, op, X shape, W shape, attributes, bias
CASES = [
    ("dw 3x3 s1 16x160x160", "Conv", (1, 16, 160, 160), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1]}, True),
    ("dw 3x3 s2 16x160x160 SAME_UPPER", "Conv", (1, 16, 160, 160), (16, 1, 3, 3),
     {"group": 16, "strides": [2, 2], "auto_pad": "SAME_UPPER"}, True),
    ("dw 3x3 s1 64x80x60", "Conv", (1, 64, 80, 60), (64, 1, 3, 3), {"group": 64, "pads": [1, 1, 1, 1]}, False),
    ("dw 5x5 s1 64x40x40 SAME_UPPER", "Conv", (1, 64, 40, 40), (64, 1, 5, 5),
     {"group": 64, "auto_pad": "SAME_UPPER"}, True),
    ("dw 5x5 s2 96x40x40 SAME_UPPER", "Conv", (1, 96, 40, 40), (96, 1, 5, 5),
     {"group": 96, "strides": [2, 2], "auto_pad": "SAME_UPPER"}, True),
    ("dw x2 3x3 s1 32x80x80", "Conv", (1, 32, 80, 80), (64, 1, 3, 3), {"group": 32, "pads": [1, 1, 1, 1]}, True),
    ("pw 1x1 64->128 80x80", "Conv", (1, 64, 80, 80), (128, 64, 1, 1), {}, True),
    ("pw 1x1 16->64 160x120", "Conv", (1, 16, 160, 120), (64, 16, 1, 1), {}, False),
    ("pw 1x1 g2 64->64 80x80", "Conv", (1, 64, 80, 80), (64, 32, 1, 1), {"group": 2}, True),
    ("3x3 s2 3->16 640x480", "Conv", (1, 3, 640, 480), (16, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]},
     True),
    ("3x3 s1 32->32 80x80", "Conv", (1, 32, 80, 80), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    ("2x2 s1 16->8 160x120 SAME_UPPER", "Conv", (1, 16, 160, 120), (8, 16, 2, 2), {"auto_pad": "SAME_UPPER"},
     False),
    ("g32 3x3 128->128 40x40", "Conv", (1, 128, 40, 40), (128, 4, 3, 3), {"group": 32, "pads": [1, 1, 1, 1]},
     True),
    ("1-D dw 5 s1 64x2000", "Conv", (1, 64, 2000), (64, 1, 5), {"group": 64, "pads": [2, 2]}, True),
    ("3-D 3x3x3 8->8 16x32x32", "Conv", (1, 8, 16, 32, 32), (8, 8, 3, 3, 3), {"pads": [1] * 6}, True),
    ("convT 2x2 s2 64->32 40x40", "ConvTranspose", (1, 64, 40, 40), (64, 32, 2, 2), {"strides": [2, 2]}, True),
    ("convT 2x2 s2 16->1 160x120", "ConvTranspose", (1, 16, 160, 120), (16, 1, 2, 2), {"strides": [2, 2]}, False),
    ("convT 3x3 s2 p1 32->16 40x40", "ConvTranspose", (1, 32, 40, 40), (32, 16, 3, 3),
     {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, True),
]


def per_call(fn, min_sample=0.004, samples=9):
    """Seconds per call: the fastest of `samples` samples, each long enough to time.

    CPU time of this process (time.process_time), not wall time, and the
    minimum, not the median: on a shared machine both keep other processes'
    load out of the numbers.
    """
    fn()
    t0 = time.process_time()
    fn()
    one = max(time.process_time() - t0, 1e-7)
    inner = max(1, int(min_sample / one))
    best = math.inf
    for _ in range(samples):
        t0 = time.process_time()
        for _ in range(inner):
            fn()
        best = min(best, (time.process_time() - t0) / inner)
    return best


def warm_blas():
    """Put numpy's OpenBLAS in the state a model run leaves it in (measured: until one
    large GEMM has run in the process, its small-channel GEMMs run up to 2x slower;
    PP-OCR det's 64->16 3x3 conv through im2col: 27 ms cold, 14-16 ms warm or inside
    the model)."""
    a = np.ones((1000, 1000), np.float32)
    a @ a


def ours(op, inputs, attrs):
    """Our kernel, built as the Net builds it (W and B static), and a call timing closure."""
    names = [f"in{i}" for i in range(len(inputs))]
    node = Node(op, names, ["out0"], dict(attrs), "", "bench")
    values = [None] + list(inputs[1:])
    ctx = OpContext(node, 11, [a.shape for a in inputs], [a.dtype for a in inputs], values, "cpu", None)
    (shape, dtype), = get_rule(op)(ctx)
    ctx.out_shapes, ctx.out_dtypes = [shape], [dtype]
    k = (Conv if op == "Conv" else ConvTranspose)(ctx, **attrs)
    out = np.empty(shape, dtype)
    return k, out, (lambda: k(*inputs, out=out))


def onnxruntime_call(op, inputs, attrs, out, level):
    model = make_node_model(op, inputs, attrs, opset=11, static=tuple(range(1, len(inputs))))
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    io = sess.io_binding()
    io.bind_cpu_input("in0", inputs[0])
    ref = np.empty_like(out)
    io.bind_output("out0", "cpu", 0, np.float32, ref.shape, ref.ctypes.data)
    sess.run_with_iobinding(io)
    return ref, (lambda: sess.run_with_iobinding(io))


def measure(name, op, xs, ws, attrs, bias, rng):
    m = ws[0] if op == "Conv" else ws[1] * attrs.get("group", 1)
    inputs = [rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)]
    if bias:
        inputs.append(rng.standard_normal(m).astype(np.float32))
    k, out, call = ours(op, inputs, attrs)
    t_ours = per_call(call)
    ref, ort_all = onnxruntime_call(op, inputs, attrs, out, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    err = float(np.max(np.abs(out - ref)) / max(1.0, float(np.max(np.abs(ref)))))
    t_all = per_call(ort_all)
    _, ort_none = onnxruntime_call(op, inputs, attrs, out, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    t_none = per_call(ort_none)
    path = k.path
    return {"name": name, "op": op, "x": list(xs), "w": list(ws), "attrs": attrs, "bias": bias, "path": path,
            "ours_ms": t_ours * 1e3, "ort_all_ms": t_all * 1e3, "ort_none_ms": t_none * 1e3,
            "ratio_all": t_ours / t_all, "ratio_none": t_ours / t_none, "max_rel_err": err}


def detector_cases(size):
    """Every distinct Conv/ConvTranspose of the cached PP-OCR detector at 1x3xHxW, with its count."""
    try:
        from pooled_predictor.zoo import fetch_ppocr

        path = fetch_ppocr().det
    except Exception as exc:  # no cache and no network
        print(f"(PP-OCR detector unavailable: {exc})")
        return []
    model = onnx.load(str(path))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for d, v in zip(dims, (1, 3) + size):
        d.dim_value = v
    model = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
              for v in list(model.graph.value_info) + list(model.graph.input)}
    inits = {i.name: tuple(i.dims) for i in model.graph.initializer}
    count = Counter()
    for n in model.graph.node:
        if n.op_type in ("Conv", "ConvTranspose"):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
            attrs.pop("kernel_shape", None)
            key = (n.op_type, shapes[n.input[0]], inits[n.input[1]], json.dumps(attrs, sort_keys=True),
                   len(n.input) > 2 and n.input[2] != "")
            count[key] += 1
    cases = []
    for (op, xs, ws, attrs, bias), c in sorted(count.items(), key=lambda kv: -math.prod(kv[0][1])):
        name = f"{c}x {op} {'x'.join(map(str, xs[1:]))} W{'x'.join(map(str, ws))}"
        cases.append((name, op, xs, ws, json.loads(attrs), bias, c))
    return cases


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="640x480", help="detector input HxW")
    ap.add_argument("--quick", action="store_true", help="representative shapes only")
    args = ap.parse_args(argv)
    size = tuple(int(v) for v in args.size.split("x"))
    rng = np.random.default_rng(0)
    rows, det_rows = [], []
    with threadpool_limits(1):
        warm_blas()
        for case in CASES:
            rows.append(measure(*case, rng))
            print_row(rows[-1])
        if not args.quick:
            print(f"\nPP-OCR detector at 1x3x{size[0]}x{size[1]}:")
            for name, op, xs, ws, attrs, bias, count in detector_cases(size):
                r = measure(name, op, xs, ws, attrs, bias, rng)
                r["count"] = count
                det_rows.append(r)
                print_row(r)
    table(rows, "representative shapes")
    summary = {}
    if det_rows:
        table(det_rows, f"PP-OCR detector convs at 1x3x{size[0]}x{size[1]}")
        total = {k: sum(r[k] * r["count"] for r in det_rows) for k in ("ours_ms", "ort_all_ms", "ort_none_ms")}
        summary = {**total, "ratio_all": total["ours_ms"] / total["ort_all_ms"],
                   "ratio_none": total["ours_ms"] / total["ort_none_ms"]}
        print(f"detector total (every conv, counted): ours {total['ours_ms']:.2f} ms, onnxruntime "
              f"{total['ort_all_ms']:.2f} ms (ENABLE_ALL, ratio {summary['ratio_all']:.2f}), "
              f"{total['ort_none_ms']:.2f} ms (DISABLE_ALL, ratio {summary['ratio_none']:.2f})")
    result = {
        "command": "python " + " ".join(["benchmarks/conv_kernels.py"] + (argv if argv is not None else sys.argv[1:])),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "python": platform.python_version(), "numpy": np.__version__, "onnxruntime": ort.__version__,
                    "blas": [{k: i.get(k) for k in ("internal_api", "version", "architecture")}
                             for i in threadpool_info() if i.get("user_api") == "blas"],
                    "blas_threads": 1},
        "cases": rows, "detector": det_rows, "detector_total": summary,
    }
    out = ROOT / "benchmarks" / "results" / "conv_kernels.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {out.relative_to(ROOT)}")


def print_row(r):
    print(f"  {r['name']:<44} {r['path']:<15} {r['ours_ms']:8.3f} {r['ort_all_ms']:8.3f} {r['ort_none_ms']:8.3f}",
          flush=True)


def table(rows, title):
    print(f"\n{title} (ms per call, one thread; ratio = ours / onnxruntime)")
    head = f"{'case':<46} {'path':<16} {'ours':>8} {'ort all':>8} {'ort none':>8} {'/all':>6} {'/none':>6}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['name']:<46} {r['path']:<16} {r['ours_ms']:8.3f} {r['ort_all_ms']:8.3f} {r['ort_none_ms']:8.3f} "
              f"{r['ratio_all']:6.2f} {r['ratio_none']:6.2f}")


if __name__ == "__main__":
    main()
