"""OCR of a scanned page with PaddleOCR's PP-OCR detector and recognizer in one pool.

Pipeline (PaddleOCR's DB detection + CTC recognition, simplified to upright,
axis-aligned text lines):

1. detector (net_id 0): the page, resized so both sides are multiples of 32
   and normalized with ImageNet mean/std, gives a text probability map;
2. boxes: threshold the map (0.2), label connected regions
   (scipy.ndimage.label), keep regions whose mean probability >= 0.4, and pad
   each box by DB's unclip distance d = area * 1.4 / perimeter;
3. recognizer (net_id 1): one job per box, chained with then(): the crop,
   resized to height 48 and normalized to [-1, 1], gives per-step class
   probabilities;
4. CTC greedy decoding (class 0 is the blank, class i is character i-1 of the
   model's metadata "character" list, the class after the last is the space);
5. lines in reading order (rows of boxes whose centers are within half a line
   height, left to right).

Sources: Liao et al. 2020, "Real-time Scene Text Detection with Differentiable
Binarization" (DB, unclip); Graves et al. 2006, "Connectionist Temporal
Classification"; PaddleOCR's DBPostProcess and CTCLabelDecode.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

from ..serving.futures import collect

# The text of skimage/data/page.png, read by a person (the cut-off URL at the
# bottom-left edge is not part of it).
PAGE_TEXT = """Region-based segmentation
Let us first determine markers of the coins and the
background. These markers are pixels that we can label
unambiguously as either object or background. Here,
the markers are found at the two extreme parts of the
histogram of grey values:
>>> markers = np.zeros_like(coins)"""

DET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
DET_STD = np.array([0.229, 0.224, 0.225], np.float32)


@dataclass
class Box:
    """A text box in image pixels: [x0, x1) x [y0, y1), with the detector's mean probability."""

    x0: int
    y0: int
    x1: int
    y1: int
    score: float

    @property
    def height(self) -> int:
        return self.y1 - self.y0

    @property
    def width(self) -> int:
        return self.x1 - self.x0


@dataclass
class Line:
    box: Box
    text: str
    confidence: float


@dataclass
class PageResult:
    """Lines in reading order and the time spent per stage (ms): "detector preprocess",
    "detector (pool job)", "boxes (label regions)", "recognizer (pool jobs) + CTC decode"
    and "page total" (read_page's wall time, from the page to its lines)."""

    lines: list[Line]
    timings_ms: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)


def load_image(path) -> np.ndarray:
    """An image file as an (H, W, 3) uint8 RGB array (Pillow)."""
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _resize(image: np.ndarray, width: int, height: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((width, height), Image.BILINEAR))


def det_preprocess(image: np.ndarray, limit_side_len: int = 960) -> tuple[np.ndarray, float, float]:
    """Detector input: (1, 3, H32, W32) float32, BGR, ImageNet-normalized; and the x/y scales.

    The longer side is limited to `limit_side_len`; both sides are rounded to
    multiples of 32 (the detector downsamples by 32).
    """
    h, w = image.shape[:2]
    ratio = min(1.0, limit_side_len / max(h, w))
    rh = max(32, int(round(h * ratio / 32)) * 32)
    rw = max(32, int(round(w * ratio / 32)) * 32)
    resized = _resize(image, rw, rh)[:, :, ::-1].astype(np.float32) / 255.0
    x = ((resized - DET_MEAN) / DET_STD).transpose(2, 0, 1)[None]
    return np.ascontiguousarray(x, np.float32), w / rw, h / rh


def boxes_from_probability(prob: np.ndarray, sx: float, sy: float, image_shape, *, thresh: float = 0.2,
                           box_thresh: float = 0.4, unclip_ratio: float = 1.4, min_size: int = 3) -> list[Box]:
    """Text boxes from a DB probability map (H, W) in [0, 1].

    Connected regions of prob > thresh (8-connectivity) whose mean probability
    is >= box_thresh, padded by the unclip distance, scaled by (sx, sy) to the
    image and clipped to it.
    """
    labels, count = ndimage.label(prob > thresh, structure=np.ones((3, 3), bool))
    if count == 0:
        return []
    index = np.arange(1, count + 1)
    scores = ndimage.mean(prob, labels, index)
    H, W = image_shape[:2]
    boxes = []
    for sl, score in zip(ndimage.find_objects(labels), scores):
        h, w = sl[0].stop - sl[0].start, sl[1].stop - sl[1].start
        if score < box_thresh or min(h, w) < min_size:
            continue
        d = (h * w) * unclip_ratio / (2.0 * (h + w))
        x0 = max(0, int(math.floor((sl[1].start - d) * sx)))
        x1 = min(W, int(math.ceil((sl[1].stop + d) * sx)))
        y0 = max(0, int(math.floor((sl[0].start - d) * sy)))
        y1 = min(H, int(math.ceil((sl[0].stop + d) * sy)))
        if x1 - x0 >= min_size and y1 - y0 >= min_size:
            boxes.append(Box(x0, y0, x1, y1, float(score)))
    return boxes


def rec_preprocess(image: np.ndarray, box: Box, height: int = 48, min_width: int = 320) -> np.ndarray:
    """Recognizer input (1, 3, 48, W) float32 in [-1, 1], BGR, zero-padded on the right.

    The crop keeps its aspect ratio at height 48; W = max(min_width, its width)
    (PaddleOCR's resize_norm_img with rec_img_shape [3, 48, 320]).
    """
    crop = image[box.y0:box.y1, box.x0:box.x1]
    w = max(1, int(math.ceil(height * crop.shape[1] / max(crop.shape[0], 1))))
    resized = _resize(crop, w, height)[:, :, ::-1].astype(np.float32) / 255.0
    x = np.zeros((1, 3, height, max(min_width, w)), np.float32)
    x[0, :, :, :w] = ((resized - 0.5) / 0.5).transpose(2, 0, 1)
    return x


def ctc_greedy_decode(probs: np.ndarray, charset: list[str]) -> tuple[str, float]:
    """Best-path CTC decoding of (T, C) class probabilities.

    Class 0 is the blank, class i (1 <= i <= len(charset)) is charset[i-1], the
    class len(charset)+1 is a space. Repeats collapse unless a blank separates
    them. Returns the text and the mean probability of the kept steps.
    """
    best = probs.argmax(axis=-1)
    conf = probs[np.arange(len(best)), best]
    keep = best != 0
    keep[1:] &= best[1:] != best[:-1]
    chars = [charset[i - 1] if i <= len(charset) else " " for i in best[keep]]
    return "".join(chars), float(conf[keep].mean()) if keep.any() else 0.0


def reading_order(lines: list[Line]) -> list[Line]:
    """Rows of lines whose vertical centers differ by <= half the smaller height, left to right."""
    rows: list[list] = []
    for line in sorted(lines, key=lambda l: ((l.box.y0 + l.box.y1) / 2, l.box.x0)):
        cy, h = (line.box.y0 + line.box.y1) / 2, line.box.height
        if rows and abs(cy - rows[-1][0]) <= 0.5 * min(h, rows[-1][1]):
            rows[-1][2].append(line)
        else:
            rows.append([cy, h, [line]])
    return [l for _, _, row in rows for l in sorted(row, key=lambda l: l.box.x0)]


def charset_of(pool, net_id: int) -> list[str]:
    """The recognizer's character list, from its ONNX metadata_props "character"."""
    meta = pool.predictor(net_id).graph.metadata
    if "character" not in meta:
        raise KeyError(f"net {net_id} has no 'character' metadata: is it a PP-OCR recognizer?")
    return meta["character"].split("\n")


def read_page(pool, image: np.ndarray, det_net_id: int = 0, rec_net_id: int = 1,
              min_confidence: float = 0.5) -> PageResult:
    """OCR of one page through a pool holding the detector and the recognizer.

    The detector job's Future is chained with then() into one recognizer job
    per box; the per-box Futures are collected into the page's lines.
    """
    charset = charset_of(pool, rec_net_id)
    det_in = pool.predictor(det_net_id).input_names[0]
    det_out = pool.predictor(det_net_id).output_names[0]
    rec_in = pool.predictor(rec_net_id).input_names[0]
    rec_out = pool.predictor(rec_net_id).output_names[0]
    t: dict[str, float] = {}
    start = time.perf_counter()
    x, sx, sy = det_preprocess(image)
    t["detector preprocess"] = time.perf_counter() - start
    marks = {"det_submitted": time.perf_counter()}

    def on_detected(outs):
        marks["det_done"] = time.perf_counter()
        boxes = boxes_from_probability(outs[det_out][0, 0], sx, sy, image.shape)
        marks["boxes_done"] = time.perf_counter()

        def recognize(box):
            crop = rec_preprocess(image, box)
            return pool.forward({rec_in: crop}, net_id=rec_net_id).then(
                lambda o: Line(box, *ctc_greedy_decode(o[rec_out][0], charset)))

        return collect([recognize(b) for b in boxes])

    lines = pool.forward({det_in: x}, net_id=det_net_id).then(on_detected).result()
    end = time.perf_counter()
    t["detector (pool job)"] = marks["det_done"] - marks["det_submitted"]
    t["boxes (label regions)"] = marks["boxes_done"] - marks["det_done"]
    t["recognizer (pool jobs) + CTC decode"] = end - marks["boxes_done"]
    t["page total"] = end - start
    kept = [l for l in lines if l.confidence >= min_confidence and l.text.strip()]
    return PageResult(reading_order(kept), {k: v * 1e3 for k, v in t.items()})


def character_error_rate(text: str, truth: str) -> float:
    """Levenshtein distance / len(truth), lines joined with newlines, spaces collapsed."""
    from rapidfuzz.distance import Levenshtein

    def norm(s):
        return "\n".join(" ".join(line.split()) for line in s.strip().splitlines() if line.strip())

    a, b = norm(text), norm(truth)
    return Levenshtein.distance(a, b) / max(len(b), 1)
