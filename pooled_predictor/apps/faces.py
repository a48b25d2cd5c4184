"""Face detection in a photo with OpenCV's res10 SSD face detector (a Caffe model) through the pool.

Pipeline (OpenCV's dnn face detector sample):

1. the photo, resized to 300 x 300 (bilinear), as BGR minus the per-channel
   means (104, 177, 123), NCHW float32 (cv2.dnn.blobFromImage(image, 1.0,
   (300, 300), (104, 177, 123)));
2. the model (a ResNet-10 SSD, Caffe prototxt + caffemodel) in a pool, its
   DetectionOutput giving rows [image, label, score, xmin, ymin, xmax, ymax]
   with coordinates relative to the image;
3. rows with score >= threshold, scaled to the photo's pixels and clipped.

Source: Liu et al. 2016, "SSD: Single Shot MultiBox Detector"; OpenCV's
samples/dnn/face_detector (res10_300x300_ssd_iter_140000).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ocr import _resize, load_image  # noqa: F401  (load_image is part of this app's API)

MEANS_BGR = np.array([104.0, 177.0, 123.0], np.float32)
SIZE = 300


@dataclass(frozen=True)
class Face:
    """A detected face: score in [0, 1], box corners in pixels of the photo."""

    score: float
    x0: float
    y0: float
    x1: float
    y1: float


def preprocess(image: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 RGB -> (1, 3, 300, 300) float32 BGR minus the means."""
    small = _resize(image, SIZE, SIZE).astype(np.float32)[:, :, ::-1]
    return np.ascontiguousarray((small - MEANS_BGR).transpose(2, 0, 1)[None])


def faces_from_detections(rows: np.ndarray, width: int, height: int, threshold: float = 0.5) -> list[Face]:
    """DetectionOutput rows (1, 1, N, 7) -> faces with score >= threshold, in pixels, best first."""
    rows = rows.reshape(-1, 7)
    keep = rows[(rows[:, 2] >= threshold) & (rows[:, 1] >= 0)]
    faces = []
    for r in keep[np.argsort(-keep[:, 2], kind="stable")]:
        x0, x1 = (np.clip(r[[3, 5]], 0.0, 1.0) * width).tolist()
        y0, y1 = (np.clip(r[[4, 6]], 0.0, 1.0) * height).tolist()
        faces.append(Face(float(r[2]), x0, y0, x1, y1))
    return faces


def detect_faces(pool, image: np.ndarray, *, net_id: int = 0, threshold: float = 0.5):
    """Queue one photo on a PooledPredictor serving res10 as `net_id`.

    Returns:
        Future of list[Face] (then() on the job's Future).
    """
    height, width = image.shape[:2]
    job = pool.forward({"data": preprocess(image)}, ["detection_out"], net_id)
    return job.then(lambda outs: faces_from_detections(outs["detection_out"], width, height, threshold))


def draw_faces(image: np.ndarray, faces: list[Face], path) -> None:
    """Write the photo with a box and the score over each face as a PNG (Pillow)."""
    from PIL import Image, ImageDraw

    im = Image.fromarray(image)
    draw = ImageDraw.Draw(im)
    width = max(2, round(min(im.size) / 200))
    for f in faces:
        draw.rectangle([f.x0, f.y0, f.x1, f.y1], outline=(0, 255, 0), width=width)
        label = f"{f.score:.3f}"
        tx, ty = f.x0, max(0.0, f.y0 - 12)
        box = draw.textbbox((tx, ty), label)
        draw.rectangle(box, fill=(0, 255, 0))
        draw.text((tx, ty), label, fill=(0, 0, 0))
    im.save(path, format="PNG")
