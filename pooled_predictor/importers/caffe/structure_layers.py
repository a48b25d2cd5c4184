"""Converters of the layers that combine, split or rearrange blobs (Caffe layer documentation)."""

from __future__ import annotations

import numpy as np

from .builder import CAFFE, Builder, _axis


def eltwise(b: Builder, layer) -> None:
    """Eltwise: PROD -> Mul chain, MAX -> Max, SUM -> Sum of coeff_i * x_i (coefficients 1: plain Sum/Add)."""
    p = layer.proto.eltwise_param
    xs = [b.bottom(layer, i) for i in range(len(layer.bottom))]
    rank = b.rank.get(xs[0])
    if p.operation == 0:
        acc = xs[0]
        for i, x in enumerate(xs[1:], 1):
            last = i == len(xs) - 1
            out = b.top(layer, rank=rank) if last else b.tmp(layer, f"prod{i}", rank)
            b.node(layer, "Mul", [acc, x], [out])
            acc = out
        return
    if p.operation == 2:
        b.node(layer, "Max", xs, [b.top(layer, rank=rank)])
        return
    coeff = list(p.coeff)
    if coeff and len(coeff) != len(xs):
        raise b.bad(layer, f"{len(coeff)} coeff for {len(xs)} bottoms")
    terms = []
    for i, x in enumerate(xs):
        c = coeff[i] if coeff else 1.0
        if c == 1.0:
            terms.append(x)
        else:
            t = b.tmp(layer, f"term{i}", rank)
            b.node(layer, "Mul", [x, b.const(layer, f"coeff{i}", np.float32(c))], [t])
            terms.append(t)
    b.node(layer, "Add" if len(terms) == 2 else "Sum", terms, [b.top(layer, rank=rank)])


def concat(b: Builder, layer) -> None:
    p = layer.proto.concat_param
    xs = [b.bottom(layer, i) for i in range(len(layer.bottom))]
    rank = b.bottom_rank(layer)
    axis = p.axis if p.HasField("axis") or not p.HasField("concat_dim") else p.concat_dim
    b.node(layer, "Concat", xs, [b.top(layer, rank=rank)], axis=_axis(b, layer, axis, rank))


def slice_(b: Builder, layer) -> None:
    """Slice: top i = x[slice_point[i-1]:slice_point[i]] along axis; no points: equal parts (ONNX Split)."""
    p = layer.proto.slice_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    axis = p.axis if p.HasField("axis") or not p.HasField("slice_dim") else p.slice_dim
    axis = _axis(b, layer, axis, rank)
    points = list(p.slice_point)
    tops = len(layer.top)
    if not points:
        b.node(layer, "Split", [x], [b.top(layer, i, rank) for i in range(tops)], axis=axis)
        return
    if len(points) != tops - 1:
        raise b.bad(layer, f"{len(points)} slice_point for {tops} tops (needs tops - 1)")
    bounds = [0] + points + [np.iinfo(np.int64).max]
    for i in range(tops):
        b.node(layer, "Slice", [x, b.const(layer, f"starts{i}", np.array([bounds[i]], np.int64)),
                                b.const(layer, f"ends{i}", np.array([bounds[i + 1]], np.int64)),
                                b.const(layer, f"axes{i}", np.array([axis], np.int64))],
               [b.top(layer, i, rank)])


def split(b: Builder, layer) -> None:
    """Split: every top is the bottom (Identity per top)."""
    x = b.bottom(layer)
    for i in range(len(layer.top)):
        b.node(layer, "Identity", [x], [b.top(layer, i, b.rank.get(x))])


def crop(b: Builder, layer) -> None:
    """Crop: for axes >= axis, x[offset_i : offset_i + ref.shape[i]]; ends from Shape(ref) at reshape time."""
    p = layer.proto.crop_param
    x, ref = b.bottom(layer, 0), b.bottom(layer, 1)
    rank = b.bottom_rank(layer)
    axis = _axis(b, layer, p.axis, rank)
    n = rank - axis
    offsets = list(p.offset)
    if len(offsets) == 0:
        offsets = [0] * n
    elif len(offsets) == 1:
        offsets = offsets * n
    elif len(offsets) != n:
        raise b.bad(layer, f"{len(offsets)} offsets for {n} cropped axes")
    starts = b.const(layer, "starts", np.array(offsets, np.int64))
    shape, dims, ends = b.tmp(layer, "ref_shape", 1), b.tmp(layer, "ref_dims", 1), b.tmp(layer, "ends", 1)
    b.node(layer, "Shape", [ref], [shape])
    b.node(layer, "Slice", [shape, b.const(layer, "from", np.array([axis], np.int64)),
                            b.const(layer, "to", np.array([rank], np.int64))], [dims])
    b.node(layer, "Add", [dims, starts], [ends])
    b.node(layer, "Slice", [x, starts, ends, b.const(layer, "axes", np.arange(axis, rank, dtype=np.int64))],
           [b.top(layer, rank=rank)])


def flatten(b: Builder, layer) -> None:
    """Flatten axes [axis, end_axis] into one: ONNX Flatten when end_axis is the last axis, else Caffe's Reshape."""
    p = layer.proto.flatten_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    axis, end = _axis(b, layer, p.axis, rank), _axis(b, layer, p.end_axis, rank)
    out_rank = rank - (end - axis)
    if end == rank - 1 and axis >= 1 and out_rank == 2:
        b.node(layer, "Flatten", [x], [b.top(layer, rank=2)], axis=axis)
        return
    b.node(layer, "Reshape", [x], [b.top(layer, rank=out_rank)], domain=CAFFE, shape=[-1], axis=axis,
           num_axes=end - axis + 1)


def reshape(b: Builder, layer) -> None:
    """Reshape: ONNX Reshape when it covers the whole shape (axis 0, num_axes -1), else Caffe's own."""
    p = layer.proto.reshape_param
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    dims = [int(d) for d in p.shape.dim]
    if p.axis == 0 and p.num_axes == -1:
        b.node(layer, "Reshape", [x, b.const(layer, "shape", np.array(dims, np.int64))],
               [b.top(layer, rank=len(dims))])
        return
    axis = p.axis + rank + 1 if p.axis < 0 else p.axis
    num = rank - axis if p.num_axes == -1 else p.num_axes
    b.node(layer, "Reshape", [x], [b.top(layer, rank=rank - num + len(dims))], domain=CAFFE, shape=dims,
           axis=int(p.axis), num_axes=int(p.num_axes))


def softmax(b: Builder, layer) -> None:
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    b.node(layer, "Softmax", [x], [b.top(layer, rank=rank)],
           axis=_axis(b, layer, layer.proto.softmax_param.axis, rank))


def permute(b: Builder, layer) -> None:
    """Permute -> Transpose; axes the order leaves out follow in their own order (SSD's PermuteLayer)."""
    x = b.bottom(layer)
    rank = b.bottom_rank(layer)
    order = [int(o) for o in layer.proto.permute_param.order]
    if len(set(order)) != len(order) or any(o >= rank for o in order):
        raise b.bad(layer, f"permute order {order} is not a permutation of axes of a rank-{rank} blob")
    order += [a for a in range(rank) if a not in order]
    b.node(layer, "Transpose", [x], [b.top(layer, rank=rank)], perm=order)


def input_layer(b: Builder, layer) -> None:
    """Input: declares its tops as net inputs (one shape for all, or one per top)."""
    shapes = [tuple(int(d) for d in s.dim) for s in layer.proto.input_param.shape]
    for i, top in enumerate(layer.top):
        shape = shapes[i] if len(shapes) == len(layer.top) else (shapes[0] if shapes else None)
        b.define_input(top, shape)


def silence(b: Builder, layer) -> None:
    """Silence: reads its bottoms and produces nothing (they stop being net outputs)."""
    for i in range(len(layer.bottom)):
        b.bottom(layer, i)


