"""torchvision's detection models, ours against onnxruntime, one thread: outputs and forward times.

    python benchmarks/detection.py [--torch-python /work/torchenv/bin/python] [--rounds R]
                                   [--seconds S] [--only SUBSTRING ...] [--reexport]

Two stages, two environments. torch and torchvision are never dependencies of the
package, so the export runs in an environment of its own: this script, run in the
project's environment, starts `<torch-python> benchmarks/detection.py --export`
for the models whose .onnx files are not cached yet. The files are cached under
~/.cache/pooled-predictor/detection/ (with a JSON note of how each was made).

Models (torchvision.models.detection, weights=None, torch.manual_seed(0)):
ssdlite320_mobilenet_v3_large (320 x 320), ssd300_vgg16 (300 x 300),
fasterrcnn_mobilenet_v3_large_320_fpn (min_size 320), retinanet_resnet50_fpn
(min_size = max_size = 320) and maskrcnn_resnet50_fpn (min_size = max_size = 320),
each exported by the TorchScript exporter (torch.onnx.export(dynamo=False),
opset 17) and by the dynamo exporter (torch.onnx.export(dynamo=True), asked for opset 17;
it keeps 18 where its down-conversion fails: the table's `opset` column says which). The input
is one image [3, H, W] in [0, 1]: skimage's astronaut photo resized to the model's
size; the outputs are torchvision's boxes, scores, labels (and masks).

Weights whose scores are distinct. Random weights saturate the backbone: after
a few layers of unit-variance convolutions the activations are huge and every
anchor gets the same few scores, so a comparison would be about ties. The
weights here stay seeded random, but every BatchNorm's running mean and variance
are calibrated on real images (BatchNorm in training mode, momentum None: the
exact average over the batches; torchvision's own layers otherwise, in eval
mode): crops and flips of skimage's astronaut and page photos, 16 images in 2
batches. Each BatchNorm then normalizes what it really sees, as a trained
network's statistics do, and the activations stay in range. The score
thresholds are lowered (box_score_thresh 0.001 and the like) so that the
data-dependent tail works on hundreds of candidates, as a trained detector on a
busy image does. RetinaNet's classification head and the RPN's objectness (`cls_logits`,
drawn with std 0.01) have their weights multiplied by 5 after the calibration: unscaled,
their scores lie within a few percent of the prior 0.011 and hundreds sit within 1e-6
(relative) of another, closer than the two engines' float32 rounding of a 256-channel
convolution. The script reports, per model, how many scores are distinct and the
smallest relative gap between two of them; a swap of two detections whose scores are
that close is a tie, not a fault.

torchvision's C++ extension (torchvision::nms, torchvision::roi_align) may not
load next to a CPU-only torch (the PyPI torchvision wheel is built against CUDA
torch). The export stage then defines those two operators itself, with their
published schemas and reference implementations in torch, before importing
torchvision, so that both exporters see the same operators and emit ONNX's
NonMaxSuppression and RoiAlign. torchvision's batched_nms picks its method by the number of
boxes unless tracing, a data-dependent branch torch.export cannot follow: the export stage
makes it take the tracing branch (one NMS over boxes offset by class) for both exporters.

Comparison (project environment): ours is Predictor.run with BLAS on one thread
(threadpoolctl); onnxruntime is one InferenceSession with intra_op_num_threads =
inter_op_num_threads = 1, ORT_ENABLE_ALL. Every output must be within 1e-4 x
max|ref| of onnxruntime's (integer outputs exact): "match". The outputs compared are the
timed forwards' (steady: after the background compiles of a tiered first forward, which runs
the reference kernels meanwhile); the first forward's are judged too (status_first_forward). Where they are not, the
rows (detections) are matched as a set by boxes, scores and labels (rows_match):
"match but N rows in another order (near ties)" when every output then agrees within
the same tolerances; otherwise MISMATCH, saying what the matching found. For a
MISMATCH the row also holds onnxruntime judged against itself the same way (ort_self,
onnxruntime_spread): its ORT_DISABLE_ALL session, and its ORT_ENABLE_ALL session fed
the image moved by one ulp up and down; the table's outputs column then says how many
of those three mismatch too. Mask R-CNN (TorchScript export) is such a case, and it is
ties, not a fault: comparing every intermediate (ours with no graph passes against
onnxruntime ORT_DISABLE_ALL), the first that differs beyond float rounding is the RPN's
TopK indices: its input, the objectness scores, differs by 3e-5 of max (the rounding of
the ResNet-50 FPN's convolutions), and 34 of the top 1000 of the first level lie within
3e-5 (relative) of the next, so 62 of the 1000 indices swap. Fed onnxruntime's input our
TopK gives its indices exactly (tests/ops/test_indexing.py). The RPN then keeps other
proposals, detections trade places or change, and the masks pasted into the boxes
differ: with the reference (numpy) kernels of a tiered first forward 4 rows trade places
and the masks differ by 1.3e-3 after matching; with the compiled kernels (their rounding
6e-5 of max at layer4, 3e-5 at the RPN) one detection's score moves by 1.08e-4 of max, its
box within 0.002 px, so rows_match finds it no counterpart within 1e-4. onnxruntime against itself with the image moved by one ulp down reports the
same: boxes 0.26 of max apart in place, labels differing, masks 0.99 (2 rows in
another order, masks 5e-4 after matching); its ORT_DISABLE_ALL session differs in the
masks by 1.4e-3. Each round then times bothEach round then times both
engines back to back (the order alternating by round) for S seconds each. A time is
the CPU time of this process per call in its fastest sample over the rounds
(time.process_time: other processes' load stays out); "ort / ours" above 1 means
ours is faster; "wall ratio" is the median over rounds of the ratio of median wall
times. The load average is printed before and after.

Writes benchmarks/results/detection.json (machine, CPU ISA, versions, command, load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("POOLED_PREDICTOR_CACHE", Path.home() / ".cache" / "pooled-predictor")) / "detection"
OPSET = 17
SEED = 0

# name -> (torchvision builder, input H x W, keyword arguments for the builder)
MODELS = {
    "ssdlite320_mobilenet_v3_large": ((320, 320), {"score_thresh": 0.001}),
    "ssd300_vgg16": ((300, 300), {"score_thresh": 0.001}),
    "fasterrcnn_mobilenet_v3_large_320_fpn": ((320, 320), {"box_score_thresh": 0.001}),
    "retinanet_resnet50_fpn": ((320, 320), {"min_size": 320, "max_size": 320, "score_thresh": 0.001}),
    "maskrcnn_resnet50_fpn": ((320, 320), {"min_size": 320, "max_size": 320, "box_score_thresh": 0.001}),
    # the same Mask R-CNN at 128 x 128 with an RPN that keeps every anchor (4092: no TopK cut before or
    # after its NMS): the comparison then is not about which near-tied objectness scores make a top 1000
    # (module docstring); at 320 x 320 keeping all 25,575 would send thousands of proposals to the box head
    "maskrcnn_resnet50_fpn_every_proposal": ((128, 128), {"min_size": 128, "max_size": 128, "box_score_thresh": 0.001,
                                                          "rpn_pre_nms_top_n_test": 10000,
                                                          "rpn_post_nms_top_n_test": 10000}),
}
# a key's torchvision builder: the key itself, or its prefix before a variant suffix
VARIANTS = {"maskrcnn_resnet50_fpn_every_proposal": "maskrcnn_resnet50_fpn"}
EXPORTERS = ("torchscript", "dynamo")


def onnx_path(model: str, exporter: str) -> Path:
    return CACHE / f"{model}.{exporter}.opset{OPSET}.onnx"


def images(size, count: int, seed: int):
    """`count` float32 [3, H, W] images in [0, 1]: the astronaut, then random crops and flips of the
    astronaut and the page (seeded), each resized to `size` (PIL, bilinear)."""
    import numpy as np
    from PIL import Image

    # cached by the project stage (pooled_predictor.zoo.fetch_astronaut_image / fetch_page_image)
    photos = [Image.open(CACHE.parent / "scikit-image-0.26.0" / n).convert("RGB")
              for n in ("astronaut.png", "page.png")]
    rng = np.random.default_rng(seed)
    out = [photos[0].resize(size[::-1], Image.BILINEAR)]
    while len(out) < count:
        p = photos[len(out) % 2]
        w, h = p.size
        cw, ch = int(w * rng.uniform(0.4, 1.0)), int(h * rng.uniform(0.4, 1.0))
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        im = p.crop((x0, y0, x0 + cw, y0 + ch)).resize(size[::-1], Image.BILINEAR)
        if rng.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        out.append(im)
    return [np.ascontiguousarray(np.asarray(im, np.float32).transpose(2, 0, 1) / 255.0) for im in out]


# --------------------------------------------------------------------------- export stage (torch)

def _define_torchvision_ops():
    """torchvision::nms and torchvision::roi_align, with torchvision's schemas, when its C++
    extension does not load (see the module docstring). Reference implementations in torch."""
    import torch

    import importlib.util

    folder = Path(importlib.util.find_spec("torchvision").origin).parent
    for ext in ("_C_stable.so", "_C.so"):  # torchvision >= 0.28 / older
        if (folder / ext).exists():
            try:
                torch.ops.load_library(str(folder / ext))
                return False
            except Exception:  # noqa: BLE001 - any failure: define the operators ourselves
                pass
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")  # torchvision registers its fake
    lib.define("roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
               "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor")

    def nms(dets, scores, iou_threshold):
        import numpy as np

        d = dets.detach().double().numpy()
        order = np.argsort(-scores.detach().double().numpy(), kind="stable")
        area = (d[:, 2] - d[:, 0]) * (d[:, 3] - d[:, 1])
        w = np.clip(np.minimum(d[:, None, 2], d[None, :, 2]) - np.maximum(d[:, None, 0], d[None, :, 0]), 0, None)
        h = np.clip(np.minimum(d[:, None, 3], d[None, :, 3]) - np.maximum(d[:, None, 1], d[None, :, 1]), 0, None)
        inter = w * h
        with np.errstate(invalid="ignore", divide="ignore"):
            over = inter / (area[:, None] + area[None, :] - inter) > iou_threshold
        suppressed = np.zeros(len(d), bool)
        keep = []
        for i in order:
            if not suppressed[i]:
                keep.append(i)
                suppressed |= over[i]
        return torch.tensor(keep, dtype=torch.long)

    def roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
        from torchvision.ops.roi_align import _roi_align

        return _roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)

    lib.impl("nms", nms, "CPU")
    lib.impl("roi_align", roi_align, "CPU")

    @torch.library.register_fake("torchvision::roi_align", lib=lib)
    def _(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
        return input.new_empty((rois.size(0), input.size(1), pooled_height, pooled_width))

    _define_torchvision_ops.lib = lib  # keep the registrations alive
    return True


def _calibrate_batchnorm(model, size, torch):
    """Every BatchNorm's running statistics: the exact average over batches of real images."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
        m.train()
    ims = [torch.from_numpy(a) for a in images(size, 16, seed=1)]
    with torch.no_grad():
        for b in range(0, len(ims), 8):
            model(ims[b:b + 8])
    for m in bns:
        m.eval()
    return len(bns)


LOGIT_SCALE = 5.0


def _spread_logits(model, torch) -> list[str]:
    """Multiply the weights of every `cls_logits` convolution (RetinaNet's classification head, the
    RPN's objectness) by LOGIT_SCALE. torchvision draws them with std 0.01: over calibrated,
    unit-variance features their logits spread by about 0.2, every sigmoid score lies within a few
    percent of the prior's 0.011 and hundreds of them sit within 1e-6 of another, where the two
    engines' rounding decides the order. Scaled, the logits spread by about 1."""
    names = []
    with torch.no_grad():
        for name, m in model.named_modules():
            if name.endswith("cls_logits") and hasattr(m, "weight"):
                m.weight.mul_(LOGIT_SCALE)
                names.append(name)
    return names


def export(names, exporters, force: bool) -> None:
    """Export each (model, exporter) not cached yet; notes go to <file>.json."""
    import numpy as np
    import torch

    defined = _define_torchvision_ops()
    import torchvision
    import torchvision.extension

    if defined:  # call torch.ops.torchvision.* (ours), not torchvision's decomposition in torch ops
        def has_ops() -> bool:
            return True

        def assert_has_ops() -> None:
            pass

        torchvision.extension._has_ops = torchvision.ops.roi_align._has_ops = has_ops
        torchvision.ops.boxes._assert_has_ops = assert_has_ops
    # batched_nms chooses between one NMS over class-offset boxes and a loop over classes by the
    # boxes' count unless tracing: a data-dependent branch torch.export cannot take. Both exporters
    # get the branch the TorchScript exporter takes (one NMS over offset boxes).
    import torchvision.ops.boxes as box_ops

    def batched_nms(boxes, scores, idxs, iou_threshold: float):
        """torchvision's _batched_nms_coordinate_trick without its early return for no boxes (a guard
        on a data-dependent size; the ONNX graph handles zero boxes the same way without it)."""
        offsets = idxs.to(boxes) * (boxes.max() + torch.tensor(1).to(boxes))
        return box_ops.nms(boxes + offsets[:, None], scores, iou_threshold)

    box_ops.batched_nms = batched_nms
    from torchvision.models import detection

    CACHE.mkdir(parents=True, exist_ok=True)
    for name in names:
        size, kw = MODELS[name]
        todo = [e for e in exporters if force or not onnx_path(name, e).with_suffix(".json").exists()]
        if not todo:
            continue
        torch.manual_seed(SEED)
        model = getattr(detection, VARIANTS.get(name, name))(weights=None, weights_backbone=None, **kw).eval()
        n_bn = _calibrate_batchnorm(model, size, torch)
        spread = _spread_logits(model, torch)
        x = torch.from_numpy(images(size, 1, seed=0)[0])
        with torch.no_grad():
            ref = model([x])[0]
        scores = ref["scores"].numpy()
        s = np.sort(scores)
        gaps = np.diff(s) / np.maximum(np.abs(s[1:]), 1e-30)
        note = {"model": name, "torch": torch.__version__, "torchvision": torchvision.__version__,
                "seed": SEED, "input_shape": [3, *size], "builder_kwargs": kw,
                "batchnorms_calibrated": n_bn, "logits_scaled": spread, "logit_scale": LOGIT_SCALE,
                "torchvision_ops_defined_here": defined,
                "detections": int(len(scores)), "distinct_scores": int(len(np.unique(scores))),
                "min_relative_score_gap": float(gaps.min()) if len(gaps) else None}
        print(f"{name}: {note['detections']} detections, {note['distinct_scores']} distinct scores, "
              f"smallest relative gap {note['min_relative_score_gap']}", flush=True)
        for exporter in todo:
            path = onnx_path(name, exporter)
            t0 = time.perf_counter()
            try:
                with torch.no_grad():
                    if exporter == "torchscript":
                        torch.onnx.export(model, ([x],), str(path), opset_version=OPSET, dynamo=False,
                                          input_names=["images"], do_constant_folding=True)
                    else:
                        prog = torch.onnx.export(model, ([x],), dynamo=True, opset_version=OPSET,
                                                 input_names=["images"], optimize=True, verbose=False)
                        prog.save(str(path))
                status = "ok"
            except Exception as e:  # noqa: BLE001 - recorded in the note and the table
                status = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                cause = e.__cause__ or e
                note["error_detail"] = f"{type(cause).__name__}: {str(cause)[-3000:]}"
                path.unlink(missing_ok=True)
            note_e = {**note, "exporter": exporter, "status": status, "export_s": time.perf_counter() - t0}
            path.with_suffix(".json").write_text(json.dumps(note_e, indent=2) + "\n")
            print(f"  {exporter}: {status} ({note_e['export_s']:.1f} s)", flush=True)


# --------------------------------------------------------------------------- compare stage (project)

def engines(path: Path, feeds: dict):
    """(ours, onnxruntime, output names): zero-argument calls returning the output lists."""
    import onnxruntime as ort

    from pooled_predictor import Predictor

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ours = Predictor(str(path))
    return (lambda: ours.run(names, feeds)), (lambda: sess.run(names, feeds)), names


def compare(ours: list, ref: list) -> tuple[bool, float, list]:
    """(all within tolerance, worst error / max|ref| over float outputs, per-output notes): float
    outputs within 1e-4 x max|ref|, integer and bool outputs exact, shapes equal."""
    import numpy as np

    ok, worst, notes = True, 0.0, []
    for o, r in zip(ours, ref):
        o, r = np.asarray(o), np.asarray(r)
        if o.shape != r.shape:
            ok = False
            notes.append(f"shape {o.shape} vs {r.shape}")
            continue
        if r.dtype.kind in "fc":
            scale = float(np.abs(r).max(initial=0.0))
            err = float(np.abs(o.astype(np.float64) - r).max(initial=0.0)) / max(scale, 1e-30)
            worst = max(worst, err)
            ok &= err <= 1e-4
            notes.append(f"{r.dtype} {r.shape} err {err:.1e}")
        else:
            same = bool((o == r).all())
            ok &= same
            notes.append(f"{r.dtype} {r.shape} {'exact' if same else 'DIFFERS'}")
    return ok, worst, notes


def rows_match(ours: list, ref: list) -> tuple[int, list] | None:
    """Whether the detections agree as a set, the order of some aside: outputs that share their first
    dimension N (one row per detection) are matched row to row by the per-detection outputs of at
    most 16 values (boxes, scores, labels), each row of ours to a row of the reference within the
    same tolerances as compare() (greedy, each used once). Returns (how many rows sit at another
    position, the error / max|ref| of each float output with ours reordered to the reference's rows
    (0.0 for integer outputs, which then agree exactly)), or None when some row has no match. Two
    detections trade places when their scores are closer than the two engines' rounding of them: a
    near tie, not a fault. The per-detection images (masks) are not part of the matching: their
    error after it is reported, for the caller to judge (onnxruntime_spread)."""
    import numpy as np

    ours, ref = [np.asarray(o) for o in ours], [np.asarray(r) for r in ref]
    n = ref[0].shape[0] if ref and ref[0].ndim else None
    if n is None or any(r.ndim == 0 or r.shape[0] != n or o.shape != r.shape for o, r in zip(ours, ref)):
        return None
    scale = [max(float(np.abs(r).max(initial=0.0)), 1e-30) for r in ref]
    small = [k for k, r in enumerate(ref) if r[0].size <= 16]  # boxes, scores, labels
    if not small:
        return None
    used, perm = np.zeros(n, bool), np.empty(n, np.int64)
    for i in range(n):
        ok = ~used
        for k in small:
            o, r = ours[k][i].reshape(-1), ref[k].reshape(n, -1)
            if r.dtype.kind in "fc":
                ok &= np.abs(r.astype(np.float64) - o).max(axis=1) <= 1e-4 * scale[k]
            else:
                ok &= (r == o).all(axis=1)
        hits = np.flatnonzero(ok)
        if not hits.size:
            return None
        perm[i] = hits[0]
        used[hits[0]] = True
    errors = []
    for k, (o, r) in enumerate(zip(ours, ref)):
        placed = np.empty_like(o)
        placed[perm] = o  # ours' row i sits at the reference's row perm[i]
        if r.dtype.kind in "fc":
            errors.append(float(np.abs(placed.astype(np.float64) - r).max(initial=0.0)) / scale[k])
        else:
            errors.append(0.0 if (placed == r).all() else float("inf"))
    if any(e == float("inf") for e in errors):
        return None
    return int((perm != np.arange(n)).sum()), errors


def judge(ours: list, ref: list) -> tuple[str, float, int | None, list | None]:
    """(status, worst error / max|ref| in place, rows in another order or None, each output's error
    after matching the rows or None): "match" (compare()), "match but N rows in another order (near
    ties)" (rows_match, every output then within compare()'s tolerances), else "MISMATCH", with what
    rows_match found."""
    ok, worst, _ = compare(ours, ref)
    if ok:
        return "match", worst, 0, compare_errors(ours, ref)
    found = rows_match(ours, ref)
    if found is None:
        return "MISMATCH (some detections without a counterpart)", worst, None, None
    moved, after = found
    if max(after) <= 1e-4:
        return f"match but {moved} rows in another order (near ties)", worst, moved, after
    return (f"MISMATCH ({moved} rows in another order (near ties), then error {max(after):.1e} after matching them)",
            worst, moved, after)


def onnxruntime_spread(path: Path, feeds: dict, ref: list) -> dict:
    """onnxruntime against itself, judged as ours is (judge): {variant: {status, err, err_after_matching_rows}}
    for its ORT_DISABLE_ALL session (no graph fusions: the same arithmetic, rounded otherwise) and for
    its ORT_ENABLE_ALL session fed the image moved by one ulp up and down (np.nextafter) against `ref`,
    its ORT_ENABLE_ALL outputs. How far float rounding alone moves these outputs: a detector's
    data-dependent selection (TopK, NMS, pasting masks into boxes) turns rounding into larger
    differences downstream."""
    import numpy as np
    import onnxruntime as ort

    variants = {}
    for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"):
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        if level == "ORT_DISABLE_ALL":
            variants["ORT_DISABLE_ALL"] = sess.run(names, feeds)
            continue
        for label, toward in (("input 1 ulp up", np.inf), ("input 1 ulp down", -np.inf)):
            moved = {k: np.nextafter(v, np.asarray(toward, v.dtype)) if v.dtype.kind == "f" else v
                     for k, v in feeds.items()}
            variants[label] = sess.run(names, moved)
    out = {}
    for label, outputs in variants.items():
        status, worst, _, after = judge(outputs, ref)
        out[label] = {"status": status, "err": worst, "err_after_matching_rows": after}
    return out


def compare_errors(ours: list, ref: list) -> list:
    """Each output's error / max|ref| (0.0 for integer outputs that agree, inf where they do not or
    the shapes differ), rows in place."""
    import numpy as np

    errors = []
    for o, r in zip(ours, ref):
        o, r = np.asarray(o), np.asarray(r)
        if o.shape != r.shape:
            errors.append(float("inf"))
        elif r.dtype.kind in "fc":
            errors.append(float(np.abs(o.astype(np.float64) - r).max(initial=0.0))
                          / max(float(np.abs(r).max(initial=0.0)), 1e-30))
        else:
            errors.append(0.0 if (o == r).all() else float("inf"))
    return errors


def steady(ours) -> list:
    """Ours' outputs as the timed forwards give them: once the background compiles the first forwards
    queued have finished (engine/tiering.py; a tiered first forward runs the reference kernels
    meanwhile), a forward, until no compile is queued after one (at most 5)."""
    from pooled_predictor.engine import tiering

    out = None
    for _ in range(5):
        tiering.COMPILER.wait(600)
        out = ours()
        if not tiering.COMPILER.pending():
            break
    return out


def timed(call, seconds: float) -> tuple[float, float]:
    """(CPU seconds a call, wall seconds a call): calls for about `seconds` (2 at least); the fastest
    call's CPU time of this process (time.process_time: other processes' load stays out) and the
    median call's wall time."""
    cpu, wall = [], []
    stop = time.perf_counter() + seconds
    while len(cpu) < 2 or time.perf_counter() < stop:
        c0, w0 = time.process_time(), time.perf_counter()
        call()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return min(cpu), statistics.median(wall)


def ensure_exported(names, python: str, reexport: bool) -> None:
    """Run the export stage in the torch environment for the (model, exporter) pairs not cached."""
    missing = [n for n in names if reexport or any(not onnx_path(n, e).with_suffix(".json").exists()
                                                   for e in EXPORTERS)]
    if not missing:
        return
    from pooled_predictor.zoo import fetch_astronaut_image, fetch_page_image

    fetch_astronaut_image(), fetch_page_image()  # the export stage reads them from the cache
    cmd = [python, str(Path(__file__).resolve()), "--export", "--only", *missing] + (["--reexport"] if reexport else [])
    print("exporting:", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, cwd=str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--torch-python", default=os.environ.get("DETECTION_TORCH_PYTHON", "/work/torchenv/bin/python"),
                    help="a Python with torch, torchvision, onnx and onnxscript (the export stage)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0, help="per engine per model per round")
    ap.add_argument("--only", nargs="*", default=None, help="models whose name contains one of these")
    ap.add_argument("--exporters", nargs="*", default=list(EXPORTERS))
    ap.add_argument("--reexport", action="store_true")
    ap.add_argument("--results", default="detection", help="benchmarks/results/<this>.json")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows of the models not run now from the results file (each row says when and "
                         "under which load it was measured)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import numpy as np
    from threadpoolctl import threadpool_limits

    from benchmarks._common import table, write_results

    names = [n for n in MODELS if not args.only or any(s in n for s in args.only)]
    ensure_exported(names, args.torch_python, args.reexport)
    load_before = os.getloadavg()
    rows, calls = [], []
    with threadpool_limits(1):
        for name in names:
            size, _ = MODELS[name]
            feeds = {"images": images(size, 1, seed=0)[0]}
            for exporter in args.exporters:
                path = onnx_path(name, exporter)
                note = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else {}
                row = {"model": name, "exporter": exporter, "distinct_scores": note.get("distinct_scores"),
                       "detections": note.get("detections"),
                       "min_relative_score_gap": note.get("min_relative_score_gap")}
                rows.append(row)
                if not path.exists():
                    row["status"] = "not exported: " + note.get("status", "?")
                    row["export_error"] = note.get("error_detail", "")[:600]
                    calls.append(None)
                    print(f"{name} ({exporter}): {row['status']}", file=sys.stderr)
                    continue
                try:
                    import onnx

                    proto = onnx.load(str(path), load_external_data=False)
                    row["opset"] = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
                    del proto
                    ours, theirs, _ = engines(path, feeds)
                    t0 = time.perf_counter()
                    first = ours()
                    row["ours_first_s"] = time.perf_counter() - t0
                    row["status_first_forward"] = judge(first, theirs())[0]
                    mine = steady(ours)
                    ok, worst, notes = compare(mine, theirs())
                except Exception as e:  # noqa: BLE001 - reported in the row
                    row["status"] = f"error: {type(e).__name__}: {str(e)[:300]}"
                    calls.append(None)
                    print(f"{name} ({exporter}): {row['status']}", file=sys.stderr)
                    continue
                status = "match"
                if not ok:
                    ref = theirs()
                    status, _, moved, after = judge(mine, ref)
                    row["rows_in_another_order"] = moved
                    row["err_after_matching_rows"] = after
                    if not status.startswith("match"):
                        # onnxruntime against itself: how far float rounding alone moves these outputs
                        row["ort_self"] = onnxruntime_spread(path, feeds, ref)
                        for label, v in row["ort_self"].items():
                            print(f"  onnxruntime against itself, {label}: {v['status']} (in place {v['err']:.1e})",
                                  file=sys.stderr)
                row.update(status=status, err_vs_ort=worst, outputs=notes)
                calls.append((ours, theirs))
                print(f"{name} ({exporter}): {row['status']} {notes}", file=sys.stderr, flush=True)
        times = [([], []) for _ in rows]
        for r in range(args.rounds):
            for pair, (t_ours, t_ort) in zip(calls, times):
                if pair is None:
                    continue
                order = [(pair[0], t_ours), (pair[1], t_ort)]
                for call, into in (order if r % 2 == 0 else order[::-1]):
                    into.append(timed(call, args.seconds))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    for row, (t_ours, t_ort) in zip(rows, times):
        if not t_ours:
            continue
        row["ours_ms"] = min(c for c, _ in t_ours) * 1e3
        row["ort_ms"] = min(c for c, _ in t_ort) * 1e3
        row["ours_over_ort"] = row["ours_ms"] / row["ort_ms"]
        row["wall_ratio"] = statistics.median(a[1] / b[1] for a, b in zip(t_ours, t_ort))
    for r in rows:
        status = r.get("status") or ""
        r["outputs_short"] = status[:40]
        if status.startswith("MISMATCH") and r.get("ort_self"):
            same = sum(not v["status"].startswith("match") for v in r["ort_self"].values())
            r["outputs_short"] = f"MISMATCH (ort vs itself: {same}/{len(r['ort_self'])} too)"
    print(table(rows, [("model", "model", "s"), ("exporter", "exporter", "s"), ("opset", "opset", "d"),
                       ("outputs_short", "outputs", "s"),
                       ("err_vs_ort", "max err / max|ort|", ".1e"), ("ours_ms", "ours ms", ".1f"),
                       ("ort_ms", "onnxruntime ms", ".1f"), ("ours_over_ort", "ours / ort", ".2f"),
                       ("wall_ratio", "wall ratio", ".2f"), ("distinct_scores", "distinct scores", "d")]))
    timed_rows = [r for r in rows if "ours_ms" in r]
    within = [r for r in timed_rows if r["ours_over_ort"] <= 1.5]
    print(f"\nload average (1, 5, 15 min) before {load_before}, after {load_after}; "
          f"{sum(r.get('status') == 'match' for r in rows)}/{len(rows)} match in order, "
          f"{sum((r.get('status') or '').startswith('match but') for r in rows)} as sets (near ties); "
          f"{len(within)}/{len(timed_rows)} timed rows within 1.5x onnxruntime")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for r in rows:
        r.update(measured_at=stamp, load_average_before=load_before, load_average_after=load_after)
    if args.merge:  # keep the rows of the models not run now from the file as it was
        from benchmarks._common import RESULTS

        old = RESULTS / f"{args.results}.json"
        if old.exists():
            ran = {(r["model"], r["exporter"]) for r in rows}
            kept = [r for r in json.loads(old.read_text())["rows"] if (r["model"], r["exporter"]) not in ran]
            order = {m: k for k, m in enumerate(MODELS)}
            rows = sorted(kept + rows, key=lambda r: (order.get(r["model"], 99), EXPORTERS.index(r["exporter"])))
    path = write_results(args.results, rows, load_average_before=load_before, load_average_after=load_after,
                         rounds=args.rounds, seconds=args.seconds, blas_threads=1, ort_threads=1,
                         opset=OPSET, seed=SEED, onnx_cache=str(CACHE))
    print(f"wrote {path}")
    return 0


def _export_main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--export", action="store_true")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--exporters", nargs="*", default=list(EXPORTERS))
    ap.add_argument("--reexport", action="store_true")
    args = ap.parse_args(argv)
    names = [n for n in MODELS if not args.only or any(s in n for s in args.only)]
    export(names, args.exporters, args.reexport)
    return 0


if __name__ == "__main__":
    if "--export" in sys.argv:
        sys.exit(_export_main(sys.argv[1:]))
    sys.exit(main())
