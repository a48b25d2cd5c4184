"""Quantized models: our pool against onnxruntime and against our own float32, side by side, interleaved.

    python benchmarks/int8.py [--quick] [--models resnet50 mobilenet_v2 bert ppocr_det ppocr_rec vit_b_16 swin_t
                                                googlenet]
                              [--formats qdq qop]
                              [--rounds R] [--seconds S] [--bert-layers L] [--bert-seq T]
                              [--int8-arithmetic onnxruntime|exact] [--host-without-vnni] [--out-suffix S]

Quantized here, with onnxruntime's own tool (onnxruntime.quantization), from the
zoo's float models (224x224, seeded weights) and a BERT-base-sized encoder built
here (hidden 768, 12 heads, FFN 3072, --bert-layers layers, --bert-seq tokens,
seeded weights, opset 17 LayerNormalization and Erf GELU):
* quantize_static, per channel, uint8 activations / int8 weights, calibrated on 16
  seeded random images (uniform -1..1), in both formats: QDQ and QOperator ("qop");
* quantize_dynamic (uint8 activations, int8 weights: MatMulInteger) for the encoder.
Configurations, each closed-loop at batch 1 (benchmarks/vs_onnxruntime.py's):
* ours      -- PooledPredictor(num_threads=2), 2 client threads, the quantized model;
* ort_2x1 / ort_1x2 -- onnxruntime on the quantized model, 2 intra-op threads and 1
  caller / 1 thread and 2 callers; ort_best is the better;
* ours_f32  -- our pool on the float32 model the quantized one came from.
Every round runs every configuration for S seconds (after 0.2 s idle: benchmarks/_common.settle)
in a rotated order; the table
gives medians over rounds and ours / ort_best, ours / ours_f32 (the issue's goals:
>= 1.0 and >= 1.5). Accuracy: max |ours - onnxruntime| over the output, in units of
the output's quantization step (the scale of the DequantizeLinear that produces
it), or / max|ref| for a float output (the encoder's); also against onnxruntime with
its graph optimizations off (the quantized graph run as written), and onnxruntime's
two outputs against each other; onnxruntime's output when every input element moves by one ulp
("ort, input +1 ulp": the model's own sensitivity to the last bit, a floor under the difference of
any two implementations whose float operations are not bit-identical); and what quantizing cost: ours and onnxruntime's int8 outputs against
onnxruntime's float32 run of the source model, / max|float32| ("ours vs f32", "ort vs f32"). Our int8 arithmetic (pooled_predictor/ops/int8_arithmetic.py):
"onnxruntime" (default; on a host without VNNI, u8 x s8 pairs summed in int16 with saturation,
as onnxruntime's MLAS there) or "exact". A model we cannot load gets
a row saying why. Writes benchmarks/results/int8.json (machine, ISA, versions, command; --out-suffix S:
int8_S.json). --host-without-vnni builds our kernels as on a host without VNNI (the saturating pairs): under
tests/avx2_target.sh's environment (NUMBA_CPU_NAME=haswell ...) our side of an AVX2 host's rows, ours / our
float32 among them, on an AVX-512 machine (onnxruntime's columns still run that machine's kernels, unless
PYTHONPATH selects benchmarks/ort_avx2.py's copy of onnxruntime, held to its AVX2 kernels: then both sides of
the rows run AVX2 code on this core, the AVX2 rows' proxy).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks._common import cpu, settle, table, write_results  # noqa: E402
from benchmarks.vs_onnxruntime import Ours, OrtSession  # noqa: E402

MODELS = ("resnet50", "mobilenet_v2", "bert")
OPTIONAL = ("ppocr_det", "ppocr_rec", "vit_b_16", "swin_t", "googlenet")
"""--models may name these too: PP-OCR's detector (480 x 640) and recognizer (48 x 320), the package's models
(pooled_predictor.zoo.fetch_ppocr), quantized static as the CNNs: larger images, where the in-place int8
convolutions differ most from packed tiles; the recognizer's attention and head stay float32 where the quantizer
leaves them; ViT-B/16 and Swin-T (benchmarks/export_transformers.py's files, 224 x 224), quantized static in
the same way (their MatMuls QLinearMatMul, their softmax and LayerNormalization left float32 by the quantizer);
GoogLeNet (the zoo's, 224 x 224: its LRNs stay float32)."""
TRANSFORMER_ROWS = ("vit_b_16", "swin_t")
PPOCR_SHAPES = {"ppocr_det": (1, 3, 480, 640), "ppocr_rec": (1, 3, 48, 320)}
CALIBRATION_IMAGES = 16


def assume_host_without_vnni() -> None:
    """Our int8 arithmetic from here on as on a host without VNNI (--host-without-vnni): onnxruntime's there, u8 x s8
    pairs summed in int16 with saturation (vpmaddubsw), as benchmarks/ort_avx2.py's onnxruntime computes them."""
    from pooled_predictor.ops import int8_arithmetic

    int8_arithmetic.host_vnni = lambda: False  # read by saturating() when each Net builds its kernels


def bert_encoder(layers: int, seq: int, hidden: int = 768, heads: int = 12, ffn: int = 3072, seed: int = 0):
    """A BERT-base-sized encoder (post-LayerNorm, GELU by Erf) as an ONNX model: input 'x' (1, seq, hidden)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def weight(name, shape, scale):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    dh = hidden // heads
    split = const("split_heads", [1, seq, heads, dh], np.int64)
    merge = const("merge_heads", [1, seq, hidden], np.int64)
    sqrt_d, half, one, inv_sqrt2 = (const(n, v) for n, v in
                                    (("sqrt_d", np.sqrt(dh)), ("half", 0.5), ("one", 1.0), ("inv_sqrt2", 2 ** -0.5)))
    x = "x"
    for i in range(layers):
        p = f"l{i}"

        def dense(inp, n_in, n_out, tag):
            y = node("MatMul", [inp, weight(f"{p}.{tag}.w", (n_in, n_out), n_in ** -0.5)], f"{p}.{tag}.mm")
            return node("Add", [y, weight(f"{p}.{tag}.b", (n_out,), 0.02)], f"{p}.{tag}")

        def heads_of(t, tag, perm):
            r = node("Reshape", [t, split], f"{p}.{tag}.r")
            return node("Transpose", [r], f"{p}.{tag}.t", perm=perm)

        q = heads_of(dense(x, hidden, hidden, "q"), "q", [0, 2, 1, 3])
        k = heads_of(dense(x, hidden, hidden, "k"), "k", [0, 2, 3, 1])
        v = heads_of(dense(x, hidden, hidden, "v"), "v", [0, 2, 1, 3])
        s = node("Div", [node("MatMul", [q, k], f"{p}.qk"), sqrt_d], f"{p}.scores")
        a = node("MatMul", [node("Softmax", [s], f"{p}.probs", axis=-1), v], f"{p}.ctx")
        a = node("Reshape", [node("Transpose", [a], f"{p}.ctx.t", perm=[0, 2, 1, 3]), merge], f"{p}.ctx.r")
        h = node("Add", [dense(a, hidden, hidden, "o"), x], f"{p}.res1")
        h = node("LayerNormalization", [h, const(f"{p}.ln1.g", np.ones(hidden)), const(f"{p}.ln1.b", np.zeros(hidden))],
                 f"{p}.ln1", axis=-1)
        f = dense(h, hidden, ffn, "ff1")
        g = node("Mul", [node("Mul", [f, half], f"{p}.g.h"),
                         node("Add", [node("Erf", [node("Mul", [f, inv_sqrt2], f"{p}.g.s")], f"{p}.g.e"), one],
                              f"{p}.g.a")], f"{p}.gelu")
        h2 = node("Add", [dense(g, ffn, hidden, "ff2"), h], f"{p}.res2")
        x = node("LayerNormalization", [h2, const(f"{p}.ln2.g", np.ones(hidden)), const(f"{p}.ln2.b",
                                                                                      np.zeros(hidden))],
                 f"{p}.ln2", axis=-1)
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "bert_encoder",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def fold_batchnorm(src: Path, dst: Path) -> None:
    """Write `src` with onnxruntime's basic graph optimizations applied (Conv + BatchNormalization folded,
    Dropout and Identity removed): the float model the quantizer is meant to see. quant_pre_process runs
    the same step, but not on every onnxruntime version: 1.30 (the lent Xeon's) left MobileNetV2's 52
    BatchNormalization and ResNet-50's in place, each then a float island between DequantizeLinear and
    QuantizeLinear in both formats, and the int8 models ran slower than their float32 selves on both
    engines. Raises RuntimeError if one is left after a Conv, so that every machine's table times the same graph
    (PP-OCR rec's two after a Squeeze have no Conv to fold into, and stay)."""
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    graph = onnx.load(str(dst)).graph
    prod = {o: n for n in graph.node for o in n.output}
    left = sum(n.op_type == "BatchNormalization" and getattr(prod.get(n.input[0]), "op_type", "") == "Conv"
               for n in graph.node)
    if left:
        raise RuntimeError(f"{left} BatchNormalization nodes left in {src.name} after onnxruntime "
                           f"{ort.__version__}'s basic optimizations")


def quantized(name: str, fmt: str, work: Path, args) -> tuple[bytes, bytes, str, np.ndarray]:
    """(quantized model bytes, float model bytes, input name, input) for a model and format."""
    import onnx
    from onnxruntime import quantization as q

    src = work / f"{name}.onnx"
    if name == "bert":
        model = bert_encoder(args.bert_layers, args.bert_seq)
        onnx.save(model, src)
        dst = work / f"{name}_dynamic.onnx"
        q.quantize_dynamic(str(src), str(dst), weight_type=q.QuantType.QInt8)
        x = np.random.default_rng(1).standard_normal((1, args.bert_seq, 768)).astype(np.float32)
        return dst.read_bytes(), src.read_bytes(), "x", x
    from pooled_predictor.zoo import build, fetch_ppocr, sample_input

    shape, input_name = (1, 3, 224, 224), "data"
    if name in TRANSFORMER_ROWS:
        from benchmarks.vs_onnxruntime import exported_path

        if not exported_path(name).exists():
            raise FileNotFoundError(f"{exported_path(name)} is missing: make it with benchmarks/export_transformers.py")
        model = onnx.load(exported_path(name))
        input_name = model.graph.input[0].name
        onnx.save(model, src)
    elif name in PPOCR_SHAPES:
        models = fetch_ppocr()
        model = onnx.load(models.det if name == "ppocr_det" else models.rec)
        shape, input_name = PPOCR_SHAPES[name], model.graph.input[0].name
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        if opset < 13:  # per-channel DequantizeLinear (its axis) needs opset 13: the quantizer emits it regardless,
            # and both engines reject that model at the package's opset
            from onnx import version_converter

            model = version_converter.convert_version(model, 13)
        onnx.save(model, src)
    else:
        onnx.save(build(name), src)
    pre = work / f"{name}_pre.onnx"
    folded = work / f"{name}_folded.onnx"
    fold_batchnorm(src, folded)
    q.quant_pre_process(str(folded), str(pre), skip_optimization=True, skip_symbolic_shape=True)
    rng = np.random.default_rng(0)
    images = [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(CALIBRATION_IMAGES)]

    class Images(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{input_name: im} for im in images])

        def get_next(self):
            return next(self.it, None)

    dst = work / f"{name}_{fmt}.onnx"
    q.quantize_static(str(pre), str(dst), Images(), quant_format=q.QuantFormat.QDQ if fmt == "qdq" else
                      q.QuantFormat.QOperator, per_channel=True, activation_type=q.QuantType.QUInt8,
                      weight_type=q.QuantType.QInt8)
    x = (np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)
         if name in PPOCR_SHAPES or name in TRANSFORMER_ROWS else sample_input(name, 1))
    return dst.read_bytes(), src.read_bytes(), input_name, x


def output_step(data: bytes) -> float | None:
    """The quantization step of the model's first output: the scale of the DequantizeLinear producing it."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(data)
    prod = {o: n for n in model.graph.node for o in n.output}
    node = prod.get(model.graph.output[0].name)
    if node is None or node.op_type != "DequantizeLinear":
        return None
    inits = {t.name: t for t in model.graph.initializer}
    return float(numpy_helper.to_array(inits[node.input[1]]).reshape(-1)[0])


def unfused_reference(data: bytes, input_name: str, x: np.ndarray):
    """onnxruntime's output with its graph optimizations off: the quantized graph run as written (QDQ:
    dequantize, float op, quantize), beside its fused integer kernels' output (whose u8 x s8 pair sums
    may saturate on AVX2): how far onnxruntime's own two readings of the model lie apart."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, {input_name: x})[0]


class Named(Ours):
    def __init__(self, name, data, input_name, x):
        super().__init__(data, input_name, x)
        self.name = name


def bench(name: str, fmt: str, work: Path, args) -> dict:
    label = f"{name} int8 {'dynamic' if name == 'bert' else fmt.upper()}"
    qdata, fdata, input_name, x = quantized(name, fmt, work, args)
    row = {"model": label}
    from pooled_predictor.ops import int8_arithmetic

    try:
        with int8_arithmetic.use(args.int8_arithmetic):  # the pool's Predictor fixes it at creation
            ours = Named("ours", qdata, input_name, x)
    except Exception as exc:  # a format we cannot load: say why
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        return row
    configs = [ours, OrtSession(qdata, input_name, x, 2, 1), OrtSession(qdata, input_name, x, 1, 2),
               Named("ours_f32", fdata, input_name, x)]
    ref = np.asarray(configs[1].once(), np.float64)
    got = np.asarray(ours.once(), np.float64)
    as_written = np.asarray(unfused_reference(qdata, input_name, x), np.float64)
    step = output_step(qdata)
    for key, a, b in (("", got, ref), ("_vs_ort_unfused", got, as_written), ("_ort_fused_vs_unfused", ref, as_written)):
        err = float(np.abs(a - b).max())
        if step:
            row["err_steps" + key] = err / step
        else:
            row["err_rel" + key] = err / max(float(np.abs(b).max()), 1e-30)
    # how far onnxruntime's int8 output moves when every input element moves by one ulp: the model's own
    # sensitivity, a floor for any two implementations whose float operations are not bit-identical
    nudged = np.asarray(configs[1].sess.run(None, {input_name: np.nextafter(x, np.float32(np.inf))})[0],
                        np.float64) if x.dtype == np.float32 else None
    if nudged is not None:
        err = float(np.abs(nudged - ref).max())
        row["err_steps_ort_input_ulp" if step else "err_rel_ort_input_ulp"] = (
            err / step if step else err / max(float(np.abs(ref).max()), 1e-30))
    # what quantizing cost: ours and onnxruntime's int8 against onnxruntime's float32 run of the source model
    f32 = np.asarray(OrtSession(fdata, input_name, x, 1, 1).once(), np.float64)
    scale = max(float(np.abs(f32).max()), 1e-30)
    row["quant_err_ours"] = float(np.abs(got - f32).max()) / scale
    row["quant_err_ort"] = float(np.abs(ref - f32).max()) / scale
    rates = {c.name: [] for c in configs}
    for r in range(args.rounds):
        for c in configs[r % len(configs):] + configs[:r % len(configs)]:
            settle()
            rates[c.name].append(c.run(args.seconds))
    for c in configs:
        c.close()
        row[c.name] = statistics.median(rates[c.name])
    row["ort_best"] = max(row["ort_2x1"], row["ort_1x2"])
    row["vs_ort"] = row["ours"] / row["ort_best"]
    row["vs_f32"] = row["ours"] / row["ours_f32"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS + OPTIONAL)
    ap.add_argument("--formats", nargs="+", default=["qdq", "qop"], choices=["qdq", "qop"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0, help="per configuration per round")
    ap.add_argument("--bert-layers", type=int, default=12)
    ap.add_argument("--bert-seq", type=int, default=128)
    ap.add_argument("--quick", action="store_true", help="3 rounds of 1 s (a smoke run; noisier)")
    ap.add_argument("--int8-arithmetic", choices=["onnxruntime", "exact"], default="onnxruntime",
                    help="our quantized kernels' u8 x s8 arithmetic (pooled_predictor/ops/int8_arithmetic.py)")
    ap.add_argument("--host-without-vnni", action="store_true",
                    help="our kernels built as on a host without VNNI: onnxruntime's arithmetic there, int16-saturated "
                         "pairs (vpmaddubsw). With tests/avx2_target.sh's environment (kernels compiled for Haswell) "
                         "our side of an AVX2 host's rows on this one; onnxruntime still runs this host's kernels "
                         "unless PYTHONPATH selects benchmarks/ort_avx2.py's copy")
    ap.add_argument("--out-suffix", default="", help="write benchmarks/results/int8_<suffix>.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds = 3, 1.0
    if args.host_without_vnni:
        assume_host_without_vnni()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in args.models:
            for fmt in (["dynamic"] if name == "bert" else args.formats):
                row = bench(name, fmt, Path(d), args)
                rows.append(row)
                print(row, flush=True)
    columns = [("model", "model", "s"), ("ours", "ours img/s", ".1f"), ("ort_2x1", "ort 1x2thr", ".1f"),
               ("ort_1x2", "ort 2x1thr", ".1f"), ("ours_f32", "ours f32 img/s", ".1f"),
               ("vs_ort", "ours/ort best", ".2f"), ("vs_f32", "ours/our f32", ".2f"),
               ("err_steps", "err (steps)", ".1f"), ("err_steps_vs_ort_unfused", "err vs ort unfused", ".1f"),
               ("err_steps_ort_fused_vs_unfused", "ort vs itself", ".1f"), ("err_rel", "err / max|ref|", ".1e"),
               ("err_rel_vs_ort_unfused", "vs ort unfused", ".1e"), ("err_rel_ort_fused_vs_unfused", "ort vs itself",
                                                                        ".1e"),
               ("err_steps_ort_input_ulp", "ort, input +1 ulp (steps)", ".1f"),
               ("err_rel_ort_input_ulp", "ort, input +1 ulp", ".1e"),
               ("quant_err_ours", "ours vs f32", ".1e"), ("quant_err_ort", "ort vs f32", ".1e"), ("error", "error", "s")]
    print()
    print(table(rows, columns))
    isa = cpu()
    from pooled_predictor.ops import int8_arithmetic

    sat = int8_arithmetic.saturating(args.int8_arithmetic)
    print(f"\n{isa.get('cpu_model')} ({isa.get('cpu_isa')} {' '.join(isa.get('cpu_isa_extras', []))}); "
          f"goals: ours/ort best >= 1.0, ours/our f32 >= 1.5; {args.rounds} rounds x {args.seconds:g} s, medians; "
          f"our int8 arithmetic {args.int8_arithmetic} ({int8_arithmetic.describe(args.int8_arithmetic)})")
    path = write_results(f"int8_{args.out_suffix}" if args.out_suffix else "int8", rows, rounds=args.rounds,
                         seconds=args.seconds, host_without_vnni=args.host_without_vnni,
                         int8_arithmetic=args.int8_arithmetic, int16_saturated_pairs=sat,
                         u8s8_dot_product=int8_arithmetic.dot_product(args.int8_arithmetic) or "vpmaddwd",
                         bert={"layers": args.bert_layers, "seq": args.bert_seq},
                         calibration_images=CALIBRATION_IMAGES)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
