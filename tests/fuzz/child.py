"""Runs a range of fuzz cases in this process (started by tests/fuzz/harness.py).

    python -m tests.fuzz.child --seed S --start A --stop B --workdir DIR [--as-bytes N] [--budget N]

Limits its own address space first (RLIMIT_AS), installs an audit hook that
records every open() of a path inside DIR/bait, then prints one JSON line per
case: {"start": i} before it, the outcome after it. The harness reads them; a
case that never reports was a hang (killed) or a crash (the process died).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import traceback

_outside: list[str] = []
_bait_root = ""


def _audit(event: str, args) -> None:
    if event == "open" and args:
        path = args[0]
        if isinstance(path, (str, bytes, os.PathLike)):
            try:
                real = os.path.realpath(os.fsdecode(path))
            except (OSError, ValueError):
                return
            if real == _bait_root or real.startswith(_bait_root + os.sep):
                _outside.append(real)


def main(argv=None) -> None:
    global _bait_root
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, required=True)
    ap.add_argument("--stop", type=int, required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--as-bytes", type=int, default=4 << 30, help="RLIMIT_AS of this process")
    ap.add_argument("--budget", type=int, default=256 << 20, help="memory_limit_bytes of each Predictor")
    args = ap.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_AS, (args.as_bytes, args.as_bytes))
    _bait_root = os.path.realpath(os.path.join(args.workdir, "bait"))
    sys.addaudithook(_audit)

    import warnings

    warnings.simplefilter("ignore")
    import onnxruntime as ort

    from tests.fuzz.cases import make_case

    ort.set_default_logger_severity(4)
    sabotage = os.environ.get("POOLED_PREDICTOR_FUZZ_SABOTAGE") == "1"
    print(json.dumps({"ready": True}), flush=True)
    for i in range(args.start, args.stop):
        print(json.dumps({"start": i}), flush=True)
        case = make_case(args.seed, i)
        del _outside[:]
        if sabotage:  # the harness's own test: a hang, a crash, a read of the bait
            _sabotage(i, args.workdir)
        result = run_case(case, args.workdir, args.budget)
        result["outside"] = sorted(set(_outside))
        print(json.dumps(result), flush=True)


def _sabotage(k: int, workdir: str) -> None:
    import time

    if k == 0:
        time.sleep(3600)
    elif k == 1:
        os.abort()
    else:
        with open(os.path.join(workdir, "bait", "secret.bin"), "rb") as f:
            f.read(1)


def _materialize(case, model_dir: str, bait: str) -> None:
    os.makedirs(model_dir)
    for name, content in case.files.items():
        path = os.path.join(model_dir, name)
        if isinstance(content, bytes):
            with open(path, "wb") as f:
                f.write(content)
        elif content[0] == "symlink":
            os.symlink(content[1].replace("@BAITDIR@", os.path.dirname(bait)).replace("@BAIT@", bait), path)
        elif content[0] == "fifo":
            os.mkfifo(path)
        elif content[0] == "dir":
            os.makedirs(path)


def run_case(case, workdir: str, budget: int) -> dict:
    """Load the case's model and run its requests; classify every outcome."""
    import numpy as np
    import onnx

    from pooled_predictor import PooledPredictorError, Predictor

    bait = os.path.join(workdir, "bait", "secret.bin")
    model_dir = os.path.join(workdir, "cases", str(case.index))
    result = {"i": case.index, "family": case.family, "what": case.what, "outcomes": [], "detail": ""}
    try:
        _materialize(case, model_dir, bait)
        data = case.model.replace(b"@BAIT@", bait.encode())
        if case.load_as == "path":
            src = os.path.join(model_dir, "m.onnx")
            with open(src, "wb") as f:
                f.write(data)
        elif case.load_as == "proto":
            try:
                src = onnx.load_model_from_string(data)
            except Exception:
                src = data
        else:
            src = data
        kwargs = {"external_data_dir": model_dir} if case.external_data_dir else {}

        def attempt(fn):
            try:
                value = fn()
            except PooledPredictorError as exc:
                result["outcomes"].append("typed:" + type(exc).__name__)
                return None, False
            except Exception as exc:  # the finding the fuzz suite exists for
                result["outcomes"].append("untyped:" + type(exc).__name__)
                result["detail"] += "".join(traceback.format_exception(exc))[-3000:]
                return None, False
            result["outcomes"].append("ok")
            return value, True

        if case.caffe is not None:
            predictor, ok = attempt(lambda: Predictor.strings(*case.caffe, memory_limit_bytes=budget))
        else:
            predictor, ok = attempt(lambda: Predictor(src, memory_limit_bytes=budget, **kwargs))
        if not ok:
            return result
        for inputs, names, out in case.requests:
            attempt(lambda: predictor.forward(inputs, names, out))
        ours, ok = attempt(lambda: predictor.forward(case.feeds, predictor.output_names))
        from pooled_predictor.ops import int8_arithmetic

        if ok and int8_arithmetic.saturating():
            # onnxruntime's saturating u8 x s8 pairs (a host without VNNI): compared after the compiled kernels, as
            # a tiered Net's reference tier sums its QLinearConvs exactly (ops/int8_arithmetic.py)
            from pooled_predictor.engine.tiering import COMPILER

            COMPILER.wait(60)
            ours, ok = attempt(lambda: predictor.forward(case.feeds, predictor.output_names))
        if ok:  # the harness counts a crash from here on as the reference's (onnxruntime, OpenCV), not ours
            print(json.dumps({"comparing": case.index}), flush=True)
            if os.environ.get("POOLED_PREDICTOR_FUZZ_SABOTAGE") == "reference":  # the harness's own test
                os.abort()
        if ok and case.caffe is not None:
            result["compared"] = _compare_opencv(case.caffe, case.feeds, predictor.output_names, ours, result)
        elif ok and case.load_as == "path":
            names = predictor.output_names
            # under onnxruntime's saturating u8 x s8 pairs (a host without VNNI), ours again in the exact arithmetic
            exact = (lambda: Predictor(src, memory_limit_bytes=budget, int8_arithmetic="exact", **kwargs)
                     .forward(case.feeds, names)) if int8_arithmetic.saturating() else None
            result["compared"] = _compare(os.path.join(model_dir, "m.onnx"), case.feeds, ours, result, exact)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    return result


def _compare(path: str, feeds: dict, ours: list, result: dict, exact=None) -> str:
    """'same', 'ort_refuses', 'reference', 'unchecked' or 'mismatch' (with details) against onnxruntime. Where ours
    differs from onnxruntime, or onnxruntime refuses the model, onnx's reference implementation (onnx.reference)
    arbitrates: 'reference' when ours is what it computes (onnxruntime wraps int32 arithmetic where the spec's
    difference overflows, for one), 'mismatch' when it computes something else; 'ort_refuses' when neither
    runs it. `exact` (under onnxruntime's saturating u8 x s8 pairs, a host without VNNI): a call that gives ours in
    the exact arithmetic, which onnx.reference computes; asked only where onnxruntime is no judge of the pairs --
    it refuses the model, or an int8 weight has a zero point other than 0 (MLAS saturates the raw products there,
    we sum exactly: ops/int8_arithmetic.py's known difference). 'unchecked': a float parameter of the model is
    NaN or infinite and the three differ (a NaN quantized is implementation-defined: onnxruntime's AVX2 and AVX-512
    kernels give different codes), or such a zero point where onnx.reference cannot run the model (contrib ops)."""
    import onnx
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        ref = sess.run(None, feeds)
    except Exception as exc:
        result["ort_error"] = str(exc)[:300]
        ref = None
    if ref is not None:
        detail = _differs(ours, ref)
        if not detail:
            return "same"
        result["detail"] += "onnxruntime: " + detail
    model = onnx.load(path)
    again = []  # ours in the exact arithmetic, computed once where asked

    def ours_exact():
        if not again:
            try:
                again.append(exact())
            except Exception as exc:
                result["detail"] += f"ours in the exact arithmetic: {type(exc).__name__}\n"
                again.append(None)
        return again[0]

    try:
        from onnx.reference import ReferenceEvaluator

        spec = ReferenceEvaluator(model).run(None, feeds)
    except Exception as exc:  # contrib ops, or what it does not implement
        if ref is None:
            return "ort_refuses"
        result["detail"] += f"onnx.reference cannot run it: {str(exc)[:200]}\n"
        spec = None
    if spec is not None:
        detail = _differs(ours, spec)
        if not detail:
            return "reference"
        result["detail"] += "onnx.reference: " + detail
        if exact is not None and ours_exact() is not None:
            detail = _differs(ours_exact(), spec)
            result["detail"] += ("ours in the exact arithmetic: onnx.reference's\n" if not detail else
                                 "ours in the exact arithmetic against onnx.reference: " + detail)
            # a verdict only where onnxruntime is no judge of the pairs; elsewhere a diagnostic (a difference of
            # ours in the saturating pairs from onnxruntime's stays a mismatch, to be read)
            if not detail and (ref is None or _nonzero_int8_weight_zero_point(model)):
                return "reference"
    if _non_finite_parameter(model):
        result["ort_error"] = "not compared: a float parameter is NaN or infinite\n" + result["detail"]
        result["detail"] = ""
        return "unchecked"
    if spec is None and exact is not None and _nonzero_int8_weight_zero_point(model):
        result["ort_error"] = ("not compared: an int8 weight zero point other than 0 under the saturating pairs "
                               "(onnxruntime saturates the raw products, ours sums exactly) and no other judge\n"
                               + result["detail"])
        result["detail"] = ""
        return "unchecked"
    return "mismatch"


_WEIGHT_ZERO_POINTS = {"QLinearConv": 5, "QLinearMatMul": 5, "MatMulInteger": 3, "QGemm": 5,
                       "DynamicQuantizeMatMul": 3, "MatMulIntegerToFloat": 5, "ConvInteger": 3}
"""The input index of the weight's zero point, by op type."""


def _nonzero_int8_weight_zero_point(model) -> bool:
    """Whether an int8 weight zero point other than 0 meets a u8 x s8 product: one of the ops above, or the
    DequantizeLinear of an int8 initializer (QDQ's weights)."""
    import numpy as np
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}

    def nonzero_int8(name):
        t = inits.get(name)
        return t is not None and t.data_type == 3 and np.any(numpy_helper.to_array(t))  # 3: INT8

    for node in model.graph.node:
        at = _WEIGHT_ZERO_POINTS.get(node.op_type)
        if node.op_type == "DequantizeLinear" and len(node.input) > 2 and node.input[0] in inits:
            at = 2
        if at is not None and len(node.input) > at and nonzero_int8(node.input[at]):
            return True
    return False


def _non_finite_parameter(model) -> bool:
    """Whether a float initializer or Constant value of the model holds a NaN or an infinity."""
    import numpy as np
    from onnx import numpy_helper

    tensors = list(model.graph.initializer) + [a.t for n in model.graph.node for a in n.attribute if a.type == 4]
    for t in tensors:
        if t.data_type in (1, 10, 11, 16):  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
            try:
                if not np.all(np.isfinite(numpy_helper.to_array(t).astype(np.float64))):
                    return True
            except Exception:
                continue
    return False


def _compare_opencv(pair, feeds: dict, names: list, ours: list, result: dict) -> str:
    """'same', 'ort_refuses' (OpenCV refuses it, or is not installed), 'unchecked' or 'mismatch' against
    OpenCV dnn's Caffe importer, the project's Caffe reference. 'unchecked': the two readers are each
    entitled to their answer -- the text holds a field outside Caffe's schema as we declare it (both
    parsers skip unknown fields, where Caffe refuses them; OpenCV then reads the rest otherwise), or a
    weight is NaN, infinite or beyond 1e15 (a byte changed in a float: its products overflow, and ReLU and max
    pooling of NaN, fused or not, differ between implementations)."""
    import numpy as np
    from google.protobuf import text_format

    from pooled_predictor.importers.caffe import caffe_pb

    text, weights = pair
    try:
        text_format.Parse(text, caffe_pb.NetParameter())
        model = caffe_pb.NetParameter.FromString(weights)
        finite = all(np.all(np.abs(np.asarray(b.data, np.float32)) < 1e15) and np.all(np.abs(b.double_data) < 1e15)
                     for layer in list(model.layer) + list(model.layers) for b in layer.blobs)
    except Exception as exc:
        result["ort_error"] = f"not compared: {str(exc)[:200]}"
        return "unchecked"
    if not finite:
        result["ort_error"] = "not compared: a weight is NaN, infinite or beyond 1e15"
        return "unchecked"
    try:
        import cv2

        net = cv2.dnn.readNetFromCaffe(np.frombuffer(text.encode(), np.uint8), np.frombuffer(weights, np.uint8))
        for name, x in feeds.items():
            net.setInput(x, name)
        # OpenCV's forward() takes layer names: the net's outputs are its unconnected layers (our outputs are
        # Caffe's blob names, which an in-place layer's output shares with the layer before it)
        layers = list(net.getUnconnectedOutLayersNames())
        if len(layers) != len(names):
            result["ort_error"] = f"OpenCV: outputs {layers}, ours {list(names)}"
            return "ort_refuses"
        ref = [np.asarray(o) for o in net.forward(layers)]
    except Exception as exc:  # cv2.error: OpenCV refuses the pair
        result["ort_error"] = f"OpenCV: {str(exc)[:300]}"
        return "ort_refuses"
    ours = [np.asarray(o).reshape(r.shape) if np.size(o) == r.size else o for o, r in zip(ours, ref)]
    detail = _differs(ours, ref)
    if detail and any(np.isnan(np.asarray(o, np.float64)).any() for o in ours):
        # a NaN of ours (a negative variance, an overflow) that OpenCV's ReLU turned into 0: Caffe's ReLU
        # (std::max(x, 0)) keeps it, as ours does
        result["ort_error"] = "not compared: NaN in ours, " + detail
        return "unchecked"
    if detail:
        result["detail"] += "OpenCV: " + detail
        return "mismatch"
    return "same"


def _differs(ours: list, ref: list) -> str:
    """'' where every output matches (float: rtol 1e-3, atol 1e-4 x max|ref|, NaN where NaN; else equal),
    else what differs."""
    import numpy as np

    for a, b in zip(ours, ref):
        b = np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}\n"
        if a.dtype.kind == "f":
            finite = np.isfinite(b)
            scale = max(1.0, float(np.abs(b[finite]).max())) if finite.any() else 1.0
            same = np.array_equal(np.isnan(a), np.isnan(b)) and np.allclose(
                np.nan_to_num(a, nan=0.0), np.nan_to_num(b, nan=0.0), rtol=1e-3, atol=1e-4 * scale)
        else:
            same = np.array_equal(a, b)
        if not same:
            return f"values differ (max |diff| {np.nanmax(np.abs(a.astype(np.float64) - b))})\n"
    return ""


if __name__ == "__main__":
    main()
