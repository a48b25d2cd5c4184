"""Micro-benchmark: the int8 convolutions of MobileNetV2 (depthwise) and ResNet-50 (3x3), ours against onnxruntime.

One thread. Each layer is a one-node QLinearConv (uint8 activations, int8 weights per
output channel with zero point 0, as onnxruntime.quantization makes them) run by our Net
and by a one-node onnxruntime session (ORT_ENABLE_ALL, its fastest: it runs the node
channels-last, its transposes to and from NCHW counted, as ours are: our depthwise kernel
transposes each block of 8 channels in and out, compiled/qdepthwise.py). Times as in
conv_kernels.py: the fastest of several samples of this process's CPU time. Every output
is checked against onnxruntime's: the depthwise sums are exact in both (0 differences);
the 3x3 ones under our default "onnxruntime" arithmetic on an AVX2 host are its
int16-saturated pairs, so they match too.

    python benchmarks/int8_conv_kernels.py [--host-without-vnni] [--out-suffix S]

--host-without-vnni: our arithmetic as on a host without VNNI (benchmarks/int8.py's switch; with
tests/avx2_target.sh's environment and benchmarks/ort_avx2.py's onnxruntime, the AVX2 rows' proxy);
--out-suffix S: write int8_conv_kernels_S.json instead.

Each 3x3 layer is also built with POOLED_PREDICTOR_QCONV_DIRECT=0 ("packed": X packed into 16-pixel tiles, not read
in place from quad planes, ops/cpu/qconv.py) and timed beside (packed / ours > 1: the default faster; the same bits).
On a host with AMX-INT8 each non-depthwise layer is also built with POOLED_PREDICTOR_AMX_CONV=1 (compiled/amx.py's
QLinearConv kernel) and timed beside the others, its outputs compared with ours without it (0: the same bits).
ResNet-50's pointwise layers ("1x1") are rows too.

Prints a table and writes benchmarks/results/int8_conv_kernels.json.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("POOLED_PREDICTOR_TIERED", "0")  # as _common.py: the compiled kernels from the first forward,
# set before conv_kernels.py imports pooled_predictor

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conv_kernels import ROOT, per_call  # noqa: E402

sys.path.insert(0, str(ROOT))
from benchmarks._common import table, write_results  # noqa: E402

from pooled_predictor.engine.net import Net  # noqa: E402
from pooled_predictor.engine.program import Program  # noqa: E402
from pooled_predictor.importers import load_onnx  # noqa: E402
from tests.onnx_helpers import make_node_model  # noqa: E402

ort.set_default_logger_severity(3)

# name, channels in, channels out (0: depthwise), H = W, stride, layers of the model with this shape
LAYERS = [
    ("mv2 dw 32ch 112x112 s1", 32, 0, 112, 1, 1), ("mv2 dw 96ch 112x112 s2", 96, 0, 112, 2, 1),
    ("mv2 dw 144ch 56x56 s1", 144, 0, 56, 1, 1), ("mv2 dw 144ch 56x56 s2", 144, 0, 56, 2, 1),
    ("mv2 dw 192ch 28x28 s1", 192, 0, 28, 1, 2), ("mv2 dw 192ch 28x28 s2", 192, 0, 28, 2, 1),
    ("mv2 dw 384ch 14x14 s1", 384, 0, 14, 1, 4), ("mv2 dw 576ch 14x14 s1", 576, 0, 14, 1, 2),
    ("mv2 dw 576ch 14x14 s2", 576, 0, 14, 2, 1), ("mv2 dw 960ch 7x7 s1", 960, 0, 7, 1, 3),
    ("r50 3x3 64ch 56x56 s1", 64, 64, 56, 1, 3), ("r50 3x3 128ch 56x56 s2", 128, 128, 56, 2, 1),
    ("r50 3x3 128ch 28x28 s1", 128, 128, 28, 1, 3), ("r50 3x3 256ch 28x28 s2", 256, 256, 28, 2, 1),
    ("r50 3x3 256ch 14x14 s1", 256, 256, 14, 1, 5), ("r50 3x3 512ch 14x14 s2", 512, 512, 14, 2, 1),
    ("r50 3x3 512ch 7x7 s1", 512, 512, 7, 1, 2),
    # ResNet-50's pointwise convolutions (kernel 1, no padding; "1x1" in the name)
    ("r50 1x1 64->256 56x56", 64, 256, 56, 1, 3), ("r50 1x1 256->64 56x56", 256, 64, 56, 1, 2),
    ("r50 1x1 256->128 56x56", 256, 128, 56, 1, 1), ("r50 1x1 128->512 28x28", 128, 512, 28, 1, 4),
    ("r50 1x1 512->128 28x28", 512, 128, 28, 1, 3), ("r50 1x1 512->256 28x28", 512, 256, 28, 1, 1),
    ("r50 1x1 256->1024 14x14", 256, 1024, 14, 1, 6), ("r50 1x1 1024->256 14x14", 1024, 256, 14, 1, 5),
    ("r50 1x1 512->2048 7x7", 512, 2048, 7, 1, 3), ("r50 1x1 2048->512 7x7", 2048, 512, 7, 1, 2),
]


def layer(c, m, h, s, rng, k=3):
    """(model, feeds) of one QLinearConv, k x k (padded by k // 2): depthwise when m == 0."""
    dw = m == 0
    m = c if dw else m
    x = rng.integers(0, 256, (1, c, h, h)).astype(np.uint8)
    w = rng.integers(-127, 128, (m, 1 if dw else c, k, k)).astype(np.int8)
    inputs = [x, np.float32(0.02), np.uint8(0), w, (rng.random(m) * 0.01 + 0.001).astype(np.float32),
              np.zeros(m, np.int8), np.float32(0.05), np.uint8(3), rng.integers(-500, 500, m).astype(np.int32)]
    attrs = {"pads": [k // 2] * 4, "strides": [s, s], "group": c if dw else 1}
    return make_node_model("QLinearConv", inputs, attrs, opset=10, static=range(1, 9)), {"in0": x}


def main(argv=None) -> int:
    import argparse

    from pooled_predictor.ops.cpu.compiled import amx

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host-without-vnni", action="store_true", help="our int8 arithmetic as on a host without VNNI")
    ap.add_argument("--out-suffix", default="", metavar="S", help="write int8_conv_kernels_S.json")
    args = ap.parse_args(argv)
    if args.host_without_vnni:
        from benchmarks.int8 import assume_host_without_vnni

        assume_host_without_vnni()

    rng = np.random.default_rng(0)
    rows = []
    on_amx = amx.usable()  # also time QLinearConv on AMX tiles (POOLED_PREDICTOR_AMX_CONV=1 while built)
    for name, c, m, h, s, count in LAYERS:
        model, feeds = layer(c, m, h, s, rng, 1 if " 1x1 " in name else 3)
        # a Net builds its kernels at its first forward of a shape: the switch held through it
        os.environ["POOLED_PREDICTOR_AMX_CONV"] = "0"
        net = Net(Program(load_onnx(model), "cpu"))
        net.forward(feeds)
        net_packed = None
        if m and " 1x1 " not in name:  # the same layer with X packed into tiles (no quad planes: qconv_direct)
            os.environ["POOLED_PREDICTOR_QCONV_DIRECT"] = "0"
            net_packed = Net(Program(load_onnx(model), "cpu"))
            net_packed.forward(feeds)
            os.environ.pop("POOLED_PREDICTOR_QCONV_DIRECT")
        net_amx = None
        if on_amx and m:
            os.environ["POOLED_PREDICTOR_AMX_CONV"] = "1"
            net_amx = Net(Program(load_onnx(model), "cpu"))
            net_amx.forward(feeds)
            os.environ["POOLED_PREDICTOR_AMX_CONV"] = "0"
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        ours_s = per_call(lambda: net.forward(feeds))
        ort_s = per_call(lambda: sess.run(None, feeds))
        ours = np.asarray(net.blob_by_name(net.output_names[0]), np.int64)
        diff = int((ours != sess.run(None, feeds)[0]).sum())
        row = {"name": name, "count": count, "ours_ms": ours_s * 1e3, "ort_ms": ort_s * 1e3,
               "ratio": ort_s / ours_s, "differing_outputs": diff}
        if net_packed is not None:
            packed_s = per_call(lambda: net_packed.forward(feeds))
            packed_out = np.asarray(net_packed.blob_by_name(net_packed.output_names[0]), np.int64)
            row.update(packed_ms=packed_s * 1e3, packed_vs_ours=packed_s / ours_s,
                       packed_differing=int((packed_out != ours).sum()))
        if net_amx is not None:
            amx_s = per_call(lambda: net_amx.forward(feeds))
            amx_out = np.asarray(net_amx.blob_by_name(net_amx.output_names[0]), np.int64)
            row.update(amx_ms=amx_s * 1e3, amx_ratio=ort_s / amx_s, amx_differing=int((amx_out != ours).sum()))
        rows.append(row)
        print(rows[-1], flush=True)
    for prefix in ("mv2 dw", "r50 3x3", "r50 1x1"):
        sel = [r for r in rows if r["name"].startswith(prefix)]
        if not sel:
            continue
        ours, ref = sum(r["ours_ms"] * r["count"] for r in sel), sum(r["ort_ms"] * r["count"] for r in sel)
        total = {"name": f"{prefix}: the model's layers (x count)", "ours_ms": ours, "ort_ms": ref, "ratio": ref / ours}
        if sel and all("amx_ms" in r for r in sel):
            amx_total = sum(r["amx_ms"] * r["count"] for r in sel)
            total.update(amx_ms=amx_total, amx_ratio=ref / amx_total)
        if sel and all("packed_ms" in r for r in sel):
            packed_total = sum(r["packed_ms"] * r["count"] for r in sel)
            total.update(packed_ms=packed_total, packed_vs_ours=packed_total / ours)
        rows.append(total)
    print()
    print(table(rows, [("name", "layer", "s"), ("count", "in model", "d"), ("ours_ms", "ours ms", ".3f"),
                       ("ort_ms", "ort ms", ".3f"), ("ratio", "ort / ours", ".2f"),
                       ("differing_outputs", "outputs != ort", "d"), ("packed_ms", "packed ms", ".3f"),
                       ("packed_vs_ours", "packed / ours", ".2f"), ("packed_differing", "packed != ours", "d"),
                       ("amx_ms", "AMX ms", ".3f"),
                       ("amx_ratio", "ort / AMX", ".2f"), ("amx_differing", "AMX != ours", "d")]))
    print("\none thread; the fastest of 9 samples of process CPU time; ort / ours > 1: ours faster; " + amx.status())
    name = f"int8_conv_kernels_{args.out_suffix}" if args.out_suffix else "int8_conv_kernels"
    print(f"written to {write_results(name, rows, host_without_vnni=args.host_without_vnni)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
