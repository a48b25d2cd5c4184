"""Micro-benchmark: one node of ours (compiled kernels on and off) against onnxruntime, one thread.

The pooling, Resize, ConvTranspose, Sigmoid, GlobalAveragePool and ReduceMean nodes
of the PP-OCR detector at 480x640 and recognizer at 48x320, with their shapes from
the models (and a few common pooling shapes of the zoo's image classifiers), and
the recognizer's MatMul + bias Add pairs at 48x320 (ours: one MatMulAdd node;
onnxruntime: the MatMul and Add nodes, which it keeps apart for a 3-D A). Ours:
the kernel built as a Net builds it (weights static, scratch preallocated),
once with compiled kernels (compiled.ENABLED) and once with the numpy
reference paths; onnxruntime: a one-node session, intra_op_num_threads=1,
ORT_ENABLE_ALL, I/O bound to preallocated arrays. Times: the fastest of
several samples of this process's CPU time (conv_kernels.per_call).

    python benchmarks/node_kernels.py

Prints a table (ms per call) and writes benchmarks/results/node_kernels.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import helper, numpy_helper
from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import write_results  # noqa: E402
from benchmarks.conv_kernels import per_call  # noqa: E402
from pooled_predictor.ir import Node  # noqa: E402
from pooled_predictor.ops import registry  # noqa: E402
from pooled_predictor.ops.context import OpContext  # noqa: E402
from pooled_predictor.ops.cpu import compiled  # noqa: E402
from pooled_predictor.ops.shapes import get_rule  # noqa: E402
from pooled_predictor.ops.shapes.fused import DOMAIN  # noqa: E402
from tests.onnx_helpers import make_node_model  # noqa: E402

ort.set_default_logger_severity(3)
OPSET = 17
_f = np.float32
_UP2 = np.array([1, 1, 2, 2], _f)
_UP8 = np.array([1, 1, 8, 8], _f)
_HW = {"axes": [2, 3], "keepdims": 1}   # PP-OCR's ReduceMean over H, W (opset 17: axes an attribute)
_NEAREST = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}

# name, op, input shapes (None: an absent input; arrays: static values), attributes
CASES = [
    ("det MaxPool 2x2 s1 SAME_UPPER 16x240x320", "MaxPool", [(1, 16, 240, 320)],
     {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("MaxPool 3x3 s2 p1 64x112x112 (ResNet)", "MaxPool", [(1, 64, 112, 112)],
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool 3x3 s2 ceil 64x112x112 (GoogLeNet)", "MaxPool", [(1, 64, 112, 112)],
     {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("AveragePool 3x3 s1 p1 excl 32x120x160", "AveragePool", [(1, 32, 120, 160)],
     {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("det ConvTranspose 2x2 s2 16->16 120x160", "ConvTranspose", [(1, 16, 120, 160), (16, 16, 2, 2)],
     {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("det ConvTranspose 2x2 s2 16->1 240x320", "ConvTranspose", [(1, 16, 240, 320), (16, 1, 2, 2)],
     {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("ConvTranspose 2x2 s2 16->16 +B 120x160", "ConvTranspose", [(1, 16, 120, 160), (16, 16, 2, 2), (16,)],
     {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("det Resize x2 nearest 64x60x80", "Resize", [(1, 64, 60, 80), None, _UP2], _NEAREST),
    ("det Resize x2 nearest 64x30x40", "Resize", [(1, 64, 30, 40), None, _UP2], _NEAREST),
    ("det Resize x8 nearest 16x15x20", "Resize", [(1, 16, 15, 20), None, _UP8], _NEAREST),
    ("det Resize x2 nearest 16x60x80", "Resize", [(1, 16, 60, 80), None, _UP2], _NEAREST),
    ("Resize x2 linear half_pixel 64x60x80", "Resize", [(1, 64, 60, 80), None, _UP2],
     {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}),
    ("rec MatMul 40x80 @ 80x6906", "MatMul", [(1, 40, 80), (80, 6906)], {}),
    ("rec MatMul+Add 40x80 @ 80x6906 + 6906", "MatMulAdd", [(1, 40, 80), (80, 6906), (6906,)], {}),
    ("rec MatMul 40x160 @ 160x80", "MatMul", [(1, 40, 160), (160, 80)], {}),
    ("rec MatMul+Add 40x160 @ 160x80 + 80", "MatMulAdd", [(1, 40, 160), (160, 80), (80,)], {}),
    ("det Sigmoid 1x480x640", "Sigmoid", [(1, 1, 480, 640)], {}),
    ("det GlobalAveragePool 64x120x160", "GlobalAveragePool", [(1, 64, 120, 160)], {}),
    ("det GlobalAveragePool 64x60x80", "GlobalAveragePool", [(1, 64, 60, 80)], {}),
    ("det GlobalAveragePool 64x30x40", "GlobalAveragePool", [(1, 64, 30, 40)], {}),
    ("det GlobalAveragePool 64x15x20", "GlobalAveragePool", [(1, 64, 15, 20)], {}),
    ("det GlobalAveragePool 16x120x160", "GlobalAveragePool", [(1, 16, 120, 160)], {}),
    ("det GlobalAveragePool 16x60x80", "GlobalAveragePool", [(1, 16, 60, 80)], {}),
    ("det GlobalAveragePool 16x30x40", "GlobalAveragePool", [(1, 16, 30, 40)], {}),
    ("det GlobalAveragePool 16x15x20", "GlobalAveragePool", [(1, 16, 15, 20)], {}),
    ("det ReduceMean [2,3] 32x120x160", "ReduceMean", [(1, 32, 120, 160)], _HW),
    ("det ReduceMean [2,3] 48x60x80", "ReduceMean", [(1, 48, 60, 80)], _HW),
    ("det ReduceMean [2,3] 64x30x40 (x2)", "ReduceMean", [(1, 64, 30, 40)], _HW),
    ("det ReduceMean [2,3] 160x15x20", "ReduceMean", [(1, 160, 15, 20)], _HW),
    ("rec ReduceMean [2,3] 48x12x80", "ReduceMean", [(1, 48, 12, 80)], _HW),
    ("rec ReduceMean [2,3] 96x6x80", "ReduceMean", [(1, 96, 6, 80)], _HW),
    ("rec ReduceMean [2,3] 160x3x80", "ReduceMean", [(1, 160, 3, 80)], _HW),
    ("rec AveragePool.0 k3x2 s3x2 160x3x80", "AveragePool", [(1, 160, 3, 80)],
     {"kernel_shape": [3, 2], "strides": [3, 2], "pads": [0, 0, 0, 0]}),
    ("AveragePool 2x2 s2 64x56x56", "AveragePool", [(1, 64, 56, 56)], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("MobileNetV2 GlobalAveragePool 1280x7x7", "GlobalAveragePool", [(1, 1280, 7, 7)], {}),
    ("GlobalMaxPool 1280x7x7", "GlobalMaxPool", [(1, 1280, 7, 7)], {}),
    ("ReduceMax [2,3] 160x15x20", "ReduceMax", [(1, 160, 15, 20)], _HW),
    # no compiled path (numpy at the memory limit): for comparison with onnxruntime
    ("det Concat 2x 16x240x320", "Concat", [(1, 16, 240, 320), (1, 16, 240, 320)], {"axis": 1}),
    ("det Add 64x120x160", "Add", [(1, 64, 120, 160), (1, 64, 120, 160)], {}),
    ("det Relu 16x240x320", "Relu", [(1, 16, 240, 320)], {}),
]


_DYNAMIC = ("Concat", "Add")  # every input fed at run time
_DOMAIN = {"MatMulAdd": DOMAIN}  # our fused ops; onnxruntime runs the nodes they replace (_ort_model)


def _ort_model(op, inputs, attrs, static):
    if op != "MatMulAdd":
        return make_node_model(op, inputs, attrs, opset=OPSET, static=static)
    nodes = [helper.make_node("MatMul", ["in0", "in1"], ["mm"]), helper.make_node("Add", ["mm", "in2"], ["out0"])]
    graph = helper.make_graph(nodes, "matmul_add", [helper.make_tensor_value_info("in0", 1, inputs[0].shape)],
                              [helper.make_empty_tensor_value_info("out0")],
                              [numpy_helper.from_array(inputs[1], "in1"), numpy_helper.from_array(inputs[2], "in2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)


def _inputs(shapes, rng):
    return [None if s is None else s if isinstance(s, np.ndarray) else rng.standard_normal(s).astype(_f)
            for s in shapes]


def ours(op, inputs, attrs):
    """Our kernel for the node, built as the Net builds it (inputs 1.. static), and a call closure."""
    names = ["" if a is None else f"in{i}" for i, a in enumerate(inputs)]
    node = Node(op, names, ["out0"], dict(attrs), "", "bench")
    kdef = registry.lookup(op, _DOMAIN.get(op, ""), OPSET, "cpu")
    values = [None] * len(inputs) if op in _DYNAMIC else [None] + list(inputs[1:])
    ctx = OpContext(node, kdef.since, [None if a is None else a.shape for a in inputs],
                    [None if a is None else a.dtype for a in inputs], values, "cpu", None)
    (shape, dtype) = get_rule(op, _DOMAIN.get(op, ""))(ctx)[0]
    ctx.out_shapes, ctx.out_dtypes = [shape], [dtype]
    out = np.empty(shape, dtype)
    if kdef.is_class:
        k = kdef.impl(ctx, **attrs)
        return out, (lambda: k(*inputs, out=out))
    return out, (lambda: kdef.impl(*inputs, out=out, **attrs))


def onnxruntime_call(op, inputs, attrs, out):
    static = () if op in _DYNAMIC else tuple(i for i in range(1, len(inputs)) if inputs[i] is not None)
    model = _ort_model(op, inputs, attrs, static)
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    io = sess.io_binding()
    for i, a in enumerate(inputs):
        if i == 0 or (a is not None and i not in static):
            io.bind_cpu_input(f"in{i}", a)
    ref = np.empty_like(out)
    io.bind_output("out0", "cpu", 0, np.float32, ref.shape, ref.ctypes.data)
    sess.run_with_iobinding(io)
    return ref, (lambda: sess.run_with_iobinding(io))


def main():
    rng = np.random.default_rng(0)
    rows = []
    head = f"{'case':<46} {'compiled':>9} {'numpy':>8} {'ort':>8} {'/ort':>6} {'max|d|/max|ref|':>16}"
    print("ms per call, one thread; /ort = compiled / onnxruntime\n" + head + "\n" + "-" * len(head))
    saved = compiled.ENABLED
    with threadpool_limits(1):
        for name, op, shapes, attrs in CASES:
            inputs = _inputs(shapes, rng)
            times = {}
            for label, enabled in (("numpy", False), ("compiled", True)):
                compiled.ENABLED = enabled
                out, call = ours(op, inputs, attrs)
                times[label] = per_call(call) * 1e3
            compiled.ENABLED = saved
            ref, ort_run = onnxruntime_call(op, inputs, attrs, out)
            t_ort = per_call(ort_run) * 1e3
            err = float(np.max(np.abs(out - ref)) / max(1e-30, float(np.max(np.abs(ref)))))
            rows.append({"name": name, "op": op, "compiled_ms": times["compiled"], "numpy_ms": times["numpy"],
                         "ort_ms": t_ort, "max_rel_err": err})
            print(f"{name:<46} {times['compiled']:9.3f} {times['numpy']:8.3f} {t_ort:8.3f} "
                  f"{times['compiled'] / t_ort:6.2f} {err:16.2e}", flush=True)
    out = write_results("node_kernels", rows)  # with the machine, the versions and the command
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
