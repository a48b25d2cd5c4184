"""Converters of the SSD layers (Wei Liu's Caffe branch) and ArgMax: ops of the "caffe" domain."""

from __future__ import annotations

import math

from .builder import CAFFE, Builder, _axis


def normalize(b: Builder, layer) -> None:
    """Normalize (SSD): L2 normalization over C (per position) or C*H*W, times a learned scale."""
    p = layer.proto.norm_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    (s,) = b.learned(layer, 1)
    b.node(layer, "Normalize", [x, b.const(layer, "scale", s.reshape(-1))], [b.top(layer, rank=rank)],
           domain=CAFFE, across_spatial=int(p.across_spatial), channel_shared=int(p.channel_shared),
           eps=float(p.eps))


def prior_box(b: Builder, layer) -> None:
    """PriorBox (SSD): prior boxes of a feature map (bottom 0) for an image (bottom 1): (1, 2, H*W*P*4)."""
    p = layer.proto.prior_box_param
    feat, img = b.bottom(layer, 0), b.bottom(layer, 1)
    attrs = dict(min_size=[float(v) for v in p.min_size], max_size=[float(v) for v in p.max_size],
                 aspect_ratio=[float(v) for v in p.aspect_ratio], flip=int(p.flip), clip=int(p.clip),
                 variance=[float(v) for v in p.variance], offset=float(p.offset))
    if p.HasField("img_size"):
        attrs["img_h"] = attrs["img_w"] = int(p.img_size)
    elif p.HasField("img_h") or p.HasField("img_w"):
        attrs["img_h"], attrs["img_w"] = int(p.img_h), int(p.img_w)
    if p.HasField("step"):
        attrs["step_h"] = attrs["step_w"] = float(p.step)
    elif p.HasField("step_h") or p.HasField("step_w"):
        attrs["step_h"], attrs["step_w"] = float(p.step_h), float(p.step_w)
    b.node(layer, "PriorBox", [feat, img], [b.top(layer, rank=3)], domain=CAFFE, **attrs)


_CODE_TYPES = {1: "CORNER", 2: "CENTER_SIZE", 3: "CORNER_SIZE"}


def detection_output(b: Builder, layer) -> None:
    """DetectionOutput (SSD): decode, per-class NMS, keep_top_k: (1, 1, N, 7) rows [image, label, score, box]."""
    p = layer.proto.detection_output_param
    ins = [b.bottom(layer, i) for i in range(3)]
    attrs = dict(num_classes=int(p.num_classes), share_location=int(p.share_location),
                 background_label_id=int(p.background_label_id), code_type=_CODE_TYPES[p.code_type],
                 variance_encoded_in_target=int(p.variance_encoded_in_target), keep_top_k=int(p.keep_top_k),
                 confidence_threshold=float(p.confidence_threshold) if p.HasField("confidence_threshold")
                 else -math.inf,
                 nms_threshold=float(p.nms_param.nms_threshold),
                 top_k=int(p.nms_param.top_k) if p.nms_param.HasField("top_k") else -1,
                 eta=float(p.nms_param.eta))
    b.node(layer, "DetectionOutput", ins, [b.top(layer, rank=4)], domain=CAFFE, **attrs)


def argmax(b: Builder, layer) -> None:
    p = layer.proto.argmax_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    attrs = dict(out_max_val=int(p.out_max_val), top_k=int(p.top_k))
    if p.HasField("axis"):
        attrs["axis"] = _axis(b, layer, p.axis, rank)
    b.node(layer, "ArgMax", [x], [b.top(layer, rank=max(rank, 3))], domain=CAFFE, **attrs)


