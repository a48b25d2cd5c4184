"""Spatial sampling CPU kernels: GridSample, AffineGrid, RoiAlign, DeformConv, Col2Im,
MaxUnpool.

The per-pixel sampling loops (GridSample, RoiAlign, DeformConv's deformable im2col)
are compiled (compiled/sampling.py); AffineGrid is one matmul, Col2Im a loop over
the block's taps adding strided slices, MaxUnpool one scatter, DeformConv's
contraction one GEMM per group.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...errors import InputError
from ..registry import kernel
from ..shapes.spatial import col2im_geometry, deform_geometry, grid_sample_modes
from . import compiled


def _work_dtype(dtype) -> np.dtype:
    """The compiled kernels' type for `dtype`: float64 stays, everything else is float32 or float64."""
    dtype = np.dtype(dtype)
    if dtype == np.float64 or dtype.kind in "iu":
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def _store(res: np.ndarray, out: np.ndarray) -> None:
    """Write a float result into `out`; integer outputs truncate toward zero (a C cast, as the
    onnx reference does)."""
    np.copyto(out, res, casting="unsafe")


@kernel("GridSample", since=(16, 20, 22))
class GridSample:
    """Sample X at the grid's normalized coordinates (ONNX GridSample-16/20/22).

    Shapes: X (N, C, D1..Dr), r = 2 (16) or 1..3 (20+); grid (N, O1..Or, r) with
    grid[..., 0] the last axis (x), grid[..., 1] the one before (y), ...
    Coordinates in [-1, 1] map to pixel centres of the corners (align_corners=1)
    or to the image's outer edges (0). mode: nearest (round half to even),
    bilinear/linear (N-linear), bicubic/cubic (Keys, a = -0.75, on 4^r taps);
    padding_mode: zeros (outside taps read 0), border (clamp), reflection (mirror
    at the borders), applied to each tap's index, as onnxruntime and PyTorch do (for
    cubic with border, onnx's reference clamps the coordinate first: it differs
    within two pixels of the border). Output (N, C, O1..Or) in X's dtype (integers truncated).
    Computed in float32 (float64 for double and integer inputs) by a compiled loop.
    """

    def __init__(self, ctx, *, align_corners=0, mode=None, padding_mode="zeros"):
        self.sampling = compiled.sampling
        self.mode, self.padding = grid_sample_modes(ctx)
        self.align = int(align_corners)
        shape = tuple(ctx.shape(0))
        self.rank = len(shape) - 2
        self.x_shape = shape[:2] + (1,) * (3 - self.rank) + shape[2:]
        self.work = _work_dtype(ctx.dtype(0))

    def __call__(self, x, grid, *, out):
        n = x.shape[0]
        sizes = x.shape[2:][::-1]                  # (W, H, D): the order of the grid's last axis
        g = grid.reshape(n, -1, self.rank)
        coords = np.zeros((n, g.shape[1], 3), np.float64)
        for k, size in enumerate(sizes):
            c = g[..., k]
            if self.align:
                c = (c + 1) / 2 * (size - 1)
            else:
                c = ((c + 1) * size - 1) / 2
            if self.mode == self.sampling.NEAREST:
                c = np.rint(c)
            coords[..., k] = c                     # computed in the grid's dtype, as onnxruntime
        xs = np.ascontiguousarray(x.reshape(self.x_shape), dtype=self.work)
        res = out.reshape(n, x.shape[1], -1)
        direct = res.dtype == self.work and res.flags.c_contiguous
        target = res if direct else np.empty(res.shape, self.work)
        self.sampling.grid_sample(xs, coords, target, self.rank, self.mode, self.padding, self.align)
        if not direct:
            _store(target, res)


@kernel("AffineGrid", since=20)
def affine_grid(theta, size, *, out, align_corners=0):
    """grid[n, ..., :] = theta[n] @ (x, y[, z], 1) over the base grid (ONNX AffineGrid-20).

    Base coordinates per axis of length L: (2 i + 1) / L - 1 (align_corners=0) or
    -1 + 2 i / (L - 1) (1). theta (N, 2, 3) gives grid (N, H, W, 2), theta (N, 3, 4)
    gives (N, D, H, W, 3); the last axis is (x, y[, z]). Computed in float64.
    """
    spatial = out.shape[1:-1]
    axes = []
    for length in spatial:
        i = np.arange(length, dtype=np.float64)
        if align_corners:
            axes.append(-1.0 + 2.0 * i / (length - 1) if length > 1 else np.full(1, -1.0))
        else:
            axes.append((2.0 * i + 1.0) / length - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")               # (D,) H, W order
    base = np.stack(list(mesh[::-1]) + [np.ones(spatial)], axis=-1).reshape(-1, len(spatial) + 1)
    res = np.matmul(base[None], theta.astype(np.float64).transpose(0, 2, 1))
    np.copyto(out, res.reshape(out.shape), casting="unsafe")


def _roi_half_pixel(attrs, version):
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel" if version >= 16 else "output_half_pixel")
    return (ctm.decode() if isinstance(ctm, bytes) else ctm) == "half_pixel"


@kernel("RoiAlign", since=(10, 16, 22))
class RoiAlign:
    """Average or max of bilinear samples over each ROI bin (ONNX RoiAlign-10/16/22).

    Shapes: X (N, C, H, W); rois (R, 4) as (x1, y1, x2, y2) in input units times
    spatial_scale; batch_indices (R,) int64. Y (R, C, output_height, output_width).
    coordinate_transformation_mode (16+; 10 behaves as output_half_pixel):
    half_pixel shifts the ROI by -0.5. sampling_ratio 0 takes ceil(roi size /
    output size) samples per bin axis. mode max: onnxruntime's rule (the max over
    samples of the largest weighted corner). Source: He et al. 2017, "Mask R-CNN".
    """

    def __init__(self, ctx, *, coordinate_transformation_mode=None, mode="avg", output_height=1,
                 output_width=1, sampling_ratio=0, spatial_scale=1.0):
        attrs = {} if coordinate_transformation_mode is None else {
            "coordinate_transformation_mode": coordinate_transformation_mode}
        self.sampling = compiled.sampling
        self.half_pixel = _roi_half_pixel(attrs, ctx.version)
        self.max = (mode.decode() if isinstance(mode, bytes) else mode) == "max"
        self.ratio, self.scale = int(sampling_ratio), float(spatial_scale)
        self.work = _work_dtype(ctx.dtype(0))

    def __call__(self, x, rois, batch_indices, *, out):
        n = x.shape[0]
        idx = np.asarray(batch_indices, np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise InputError(f"RoiAlign: batch_indices {idx.tolist()} out of range for {n} images")
        xs = np.ascontiguousarray(x, dtype=self.work)
        direct = out.dtype == self.work and out.flags.c_contiguous
        target = out if direct else np.empty(out.shape, self.work)
        self.sampling.roi_align(xs, np.ascontiguousarray(rois, np.float64), idx, target, self.scale, self.ratio,
                                int(self.half_pixel), int(self.max))
        if not direct:
            _store(target, out)


@kernel("DeformConv", since=(19, 22))
class DeformConv:
    """Deformable convolution, 2-D (ONNX DeformConv-19/22).

    Every kernel tap reads X at its regular position plus a learned offset (dy, dx)
    per output pixel (bilinear, 0 outside), optionally scaled by a mask; then a
    grouped convolution contracts the taps with W. Shapes: X (N, C, H, W); W (oC,
    C/group, kH, kW); offset (N, offset_group*kH*kW*2, OH, OW); B (oC,); mask (N,
    offset_group*kH*kW, OH, OW). Y (N, oC, OH, OW). Workspace: the deformed
    columns of one image (C*kH*kW, OH*OW). Source: Dai et al. 2017, "Deformable
    Convolutional Networks"; Zhu et al. 2019 (the mask, DCNv2).
    """

    def __init__(self, ctx, *, dilations=None, group=1, kernel_shape=None, offset_group=1, pads=None,
                 strides=None):
        self.sampling = compiled.sampling
        self.g = deform_geometry(ctx)
        self.work = _work_dtype(ctx.dtype(0))
        c = ctx.shape(0)[1]
        self.cols = ctx.scratch((c,) + self.g.kernel + self.g.out, self.work)

    def __call__(self, x, w, offset, b=None, mask=None, *, out):
        g = self.g
        kh, kw = g.kernel
        n, c = x.shape[:2]
        oc = w.shape[0]
        xs = np.ascontiguousarray(x, dtype=self.work)
        offs = np.ascontiguousarray(offset, dtype=self.work)
        ones = np.ones((g.offset_group * kh * kw,) + g.out, self.work) if mask is None else None
        masks = None if mask is None else np.ascontiguousarray(mask, dtype=self.work)
        wg = w.astype(self.work, copy=False).reshape(g.group, oc // g.group, -1)
        cols = self.cols.array
        cg = c // g.group
        for i in range(n):
            self.sampling.deform_columns(xs[i], offs[i], ones if masks is None else masks[i], cols, kh, kw,
                                    g.strides[0], g.strides[1], g.pads[0], g.pads[1],
                                    g.dilations[0], g.dilations[1], g.offset_group)
            flat = cols.reshape(g.group, cg * kh * kw, -1)
            res = np.matmul(wg, flat).reshape(oc, *g.out)
            if b is not None:
                res += b.astype(self.work, copy=False)[:, None, None]
            np.copyto(out[i], res, casting="unsafe")


@kernel("Col2Im", since=18)
class Col2Im:
    """Sum sliding blocks back into an image (ONNX Col2Im-18), the inverse layout of im2col.

    input (N, C * prod(block_shape), L), L the number of block positions; block
    tap t of position p adds to image[p * stride - pad_head + t * dilation].
    Output (N, C, *image_shape). A loop over the block's taps, each adding one
    strided slice of a padded workspace (no loop over pixels).
    """

    def __init__(self, ctx, *, dilations=None, pads=None, strides=None):
        self.g = col2im_geometry(ctx)
        g = self.g
        padded = (ctx.shape(0)[0], g.channels) + tuple(i + h + t for i, h, t in zip(g.image, g.head, g.tail))
        self.padded = ctx.scratch(padded, ctx.dtype(0)) if any(g.head) or any(g.tail) else None

    def __call__(self, x, image_shape, block_shape, *, out):
        g = self.g
        acc = out if self.padded is None else self.padded.array
        acc.fill(0)
        xv = x.reshape((x.shape[0], g.channels) + g.block + g.blocks)
        for taps in itertools.product(*[range(b) for b in g.block]):
            dst = tuple(slice(t * d, t * d + (n - 1) * s + 1, s)
                        for t, d, n, s in zip(taps, g.dilations, g.blocks, g.strides))
            target = acc[(slice(None), slice(None)) + dst]
            np.add(target, xv[(slice(None), slice(None)) + taps], out=target)
        if self.padded is not None:
            np.copyto(out, acc[(slice(None), slice(None)) + tuple(slice(h, h + i) for h, i in zip(g.head, g.image))])


@kernel("MaxUnpool", since=(11, 22))
def max_unpool(x, indices, output_shape=None, *, out, kernel_shape=None, pads=None, strides=None):
    """Scatter X into zeros at MaxPool's flat Indices (ONNX MaxUnpool-11/22).

    Shapes: X and I (N, C, D1..Dn), I int64; output (N, C, O1..On): output_shape
    when given (pads then ignored), else (Di - 1) * stride - pads + kernel. I
    indexes the flattened output (N, C, O1..On) in row-major order, as MaxPool's
    Indices index its input: with output_shape = the pooled input's shape the
    values return to where they came from (the spec's intent, onnxruntime's and
    PyTorch's max_unpool behaviour).
    Raises:
        InputError: an index outside the output.
    """
    flat = out.reshape(-1)
    idx = indices.reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= flat.size):
        raise InputError(f"MaxUnpool: indices in [{idx.min()}, {idx.max()}] fall outside the output "
                         f"of {flat.size} elements (shape {out.shape})")
    flat.fill(0)
    flat[idx] = x.reshape(-1)
