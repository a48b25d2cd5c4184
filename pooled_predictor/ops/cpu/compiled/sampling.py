"""Sampling loops of GridSample, RoiAlign and DeformConv (numba).

Each walks the output positions once, computes its taps (indices and weights)
once per position, and reuses them for every channel.
"""

from __future__ import annotations

import math

import numpy as np

from .jit import njit

NEAREST, LINEAR, CUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2
_CUBIC_A = -0.75   # Keys' cubic convolution coefficient (onnxruntime, PyTorch)


@njit(nogil=True, cache=True)
def _reflect(x, lo, hi):
    """Reflect x by the nearer border until it lies in [lo, hi] (onnxruntime's GsReflect)."""
    rng = hi - lo
    if rng <= 0:
        return lo
    if x < lo:
        dx = lo - x
        n = int(dx / rng)
        r = dx - n * rng
        return lo + r if n % 2 == 0 else hi - r
    if x > hi:
        dx = x - hi
        n = int(dx / rng)
        r = dx - n * rng
        return hi - r if n % 2 == 0 else lo + r
    return x


@njit(nogil=True, cache=True)
def _pixel(i, size, padding, lo, hi):
    """The index read for tap i on an axis of `size`, or -1 for a zero (padding zeros)."""
    if padding == ZEROS:
        return i if 0 <= i < size else -1
    if padding == BORDER:
        return min(max(i, 0), size - 1)
    return int(_reflect(float(i), lo, hi))


@njit(nogil=True, cache=True)
def _axis_taps(x, size, mode, padding, lo, hi, idx, wts):
    """Taps (indices, -1 for a zero, and weights) of one axis at pixel coordinate x."""
    if mode == NEAREST:
        idx[0] = _pixel(int(x), size, padding, lo, hi)
        wts[0] = 1.0
        return 1
    x0 = math.floor(x)
    t = x - x0
    i0 = int(x0)
    if mode == LINEAR:
        idx[0] = _pixel(i0, size, padding, lo, hi)
        idx[1] = _pixel(i0 + 1, size, padding, lo, hi)
        wts[0] = 1.0 - t
        wts[1] = t
        return 2
    a = _CUBIC_A
    s = t + 1.0
    wts[0] = ((a * s - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a
    wts[1] = ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
    s = 1.0 - t
    wts[2] = ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0
    s = 2.0 - t
    wts[3] = ((a * s - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a
    for k in range(4):
        idx[k] = _pixel(i0 - 1 + k, size, padding, lo, hi)
    return 4


@njit(nogil=True, cache=True)
def grid_sample(x, coords, out, rank, mode, padding, align_corners):
    """Y[n, c, p] = sum over taps of X[n, c, taps(coords[n, p])] (ONNX GridSample).

    Args:
        x: (N, C, D, H, W) input (1-D and 2-D inputs have D = H = 1 or D = 1).
        coords: (N, P, 3) float64 pixel coordinates (w, h, d order), already
            denormalized and (nearest) rounded; the padding mode applies to each
            tap's index (zeros: skipped, border: clamped, reflection: mirrored).
        out: (N, C, P) output.
        rank: the input's spatial rank (1, 2 or 3); the axes past it have size 1.
        mode, padding: NEAREST/LINEAR/CUBIC and ZEROS/BORDER/REFLECTION.
    """
    n_batch, channels, depth, height, width = x.shape
    sizes = (width, height, depth)
    plane = depth * height * width
    flat = x.reshape(-1)                    # x is C-contiguous: a view
    n_points = coords.shape[1]
    per_axis = 1 if mode == NEAREST else (2 if mode == LINEAR else 4)
    most = per_axis ** rank
    idx = np.zeros((3, 4), np.int64)
    wts = np.zeros((3, 4), np.float64)
    counts = np.zeros(3, np.int64)
    offs = np.zeros((n_points, most), np.int64)    # per point, its taps combined: offset in a plane
    cw = np.zeros((n_points, most), np.float64)    # and weight (0 for a zero-padding tap)
    for n in range(n_batch):
        for p in range(n_points):
            for a in range(3):
                size = sizes[a]
                if a >= rank:            # an axis the input does not have: one tap at 0
                    idx[a, 0], wts[a, 0], counts[a] = 0, 1.0, 1
                    continue
                lo = 0.0 if align_corners else -0.5
                hi = size - 1.0 if align_corners else size - 0.5
                counts[a] = _axis_taps(coords[n, p, a], size, mode, padding, lo, hi, idx[a], wts[a])
            m = 0
            for kd in range(counts[2]):
                d = idx[2, kd]
                for kh in range(counts[1]):
                    h = idx[1, kh]
                    for kw in range(counts[0]):
                        w = idx[0, kw]
                        if d < 0 or h < 0 or w < 0:
                            offs[p, m], cw[p, m] = 0, 0.0
                        else:
                            offs[p, m] = (d * height + h) * width + w
                            cw[p, m] = wts[2, kd] * wts[1, kh] * wts[0, kw]
                        m += 1
        for c in range(channels):            # one plane at a time: it stays in cache
            base = (n * channels + c) * plane
            for p in range(n_points):
                acc = 0.0
                for k in range(most):
                    acc += cw[p, k] * flat[base + offs[p, k]]
                out[n, c, p] = acc


@njit(nogil=True, cache=True)
def _roi_samples(y0, x0, bin_h, bin_w, grid_h, grid_w, oh, ow, height, width, pos, wts):
    """Corner offsets (pos) and bilinear weights (wts) of every sample of one ROI, in the
    order (ph, pw, iy, ix). A sample outside [-1, H] x [-1, W] keeps weights 0."""
    k = 0
    for ph in range(oh):
        for pw in range(ow):
            for iy in range(grid_h):
                for ix in range(grid_w):
                    y = y0 + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                    x = x0 + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                    for c in range(4):
                        pos[k, c] = 0
                        wts[k, c] = 0.0
                    if -1.0 <= y <= height and -1.0 <= x <= width:
                        if y < 0.0:
                            y = 0.0
                        if x < 0.0:
                            x = 0.0
                        y_lo, x_lo = int(y), int(x)
                        y_hi, x_hi = y_lo + 1, x_lo + 1
                        if y_lo >= height - 1:
                            y_lo = y_hi = height - 1
                            y = float(y_lo)
                        if x_lo >= width - 1:
                            x_lo = x_hi = width - 1
                            x = float(x_lo)
                        ly, lx = y - y_lo, x - x_lo
                        pos[k, 0], pos[k, 1] = y_lo * width + x_lo, y_lo * width + x_hi
                        pos[k, 2], pos[k, 3] = y_hi * width + x_lo, y_hi * width + x_hi
                        wts[k, 0], wts[k, 1] = (1.0 - ly) * (1.0 - lx), (1.0 - ly) * lx
                        wts[k, 2], wts[k, 3] = ly * (1.0 - lx), ly * lx
                    k += 1


@njit(nogil=True, cache=True)
def roi_align(x, rois, batch_indices, out, spatial_scale, sampling_ratio, half_pixel, use_max):
    """RoiAlign's average or max of bilinear samples per output bin (onnxruntime's algorithm).

    x (N, C, H, W); rois (R, 4) float64 (x1, y1, x2, y2); batch_indices (R,) int64;
    out (R, C, OH, OW); half_pixel, use_max: 0 or 1. A sample outside [-1, H] x [-1, W]
    counts as 0; max mode takes the max over samples of max(w_i * v_i) of the 4
    corners, as onnxruntime.
    """
    channels, height, width = x.shape[1], x.shape[2], x.shape[3]
    n_rois, _, oh, ow = out.shape
    offset = 0.5 if half_pixel else 0.0
    for r in range(n_rois):
        start_w = rois[r, 0] * spatial_scale - offset
        start_h = rois[r, 1] * spatial_scale - offset
        roi_w = rois[r, 2] * spatial_scale - offset - start_w
        roi_h = rois[r, 3] * spatial_scale - offset - start_h
        if not half_pixel:
            roi_w = roi_w if roi_w > 1.0 else 1.0
            roi_h = roi_h if roi_h > 1.0 else 1.0
        grid_h = sampling_ratio if sampling_ratio > 0 else int(math.ceil(roi_h / oh))
        grid_w = sampling_ratio if sampling_ratio > 0 else int(math.ceil(roi_w / ow))
        per_bin = grid_h * grid_w
        pos = np.empty((oh * ow * per_bin, 4), np.int64)
        wts = np.empty((oh * ow * per_bin, 4), np.float64)
        _roi_samples(start_h, start_w, roi_h / oh, roi_w / ow, grid_h, grid_w, oh, ow, height, width, pos, wts)
        count = per_bin if per_bin > 1 else 1
        for c in range(channels):
            plane = x[batch_indices[r], c].ravel()
            for b in range(oh * ow):
                acc = 0.0
                for s in range(b * per_bin, (b + 1) * per_bin):
                    v = 0.0
                    for q in range(4):
                        t = wts[s, q] * plane[pos[s, q]]
                        if use_max:
                            v = t if q == 0 or t > v else v
                        else:
                            v += t
                    if use_max:
                        acc = v if s == b * per_bin or v > acc else acc
                    else:
                        acc += v
                out[r, c, b // ow, b % ow] = acc if use_max else acc / count


@njit(nogil=True, cache=True)
def deform_columns(x, offset, mask, cols, kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, offset_groups):
    """Deformable im2col for one image: cols[c, i, j, oh, ow] = mask * bilinear(x[c], p + offset).

    x (C, H, W); offset (G * kh * kw * 2, OH, OW) as (dy, dx) pairs per tap; mask
    (G * kh * kw, OH, OW) (all ones when the op has none); cols (C, kh, kw, OH, OW).
    Channel c uses offset group c // (C / G). Samples outside (-1, H) x (-1, W)
    are 0, corners outside the image count 0 (torchvision's deform_conv2d). The
    corners and weights of a group's samples are computed once and read for each of
    its channels. x and cols must be C-contiguous.
    """
    channels, height, width = x.shape
    out_h, out_w = cols.shape[3], cols.shape[4]
    per_group = channels // offset_groups
    n_pix = out_h * out_w
    taps = kh * kw
    pos = np.zeros((taps, n_pix, 4), np.int64)     # corner offsets in a plane
    wts = np.zeros((taps, n_pix, 4), np.float64)   # their bilinear weights times the mask (0 outside)
    flat = x.reshape(-1)
    cols2 = cols.reshape(channels, taps, n_pix)
    for g in range(offset_groups):
        for i in range(kh):
            for j in range(kw):
                tap = i * kw + j
                for oh in range(out_h):
                    for ow in range(out_w):
                        q = oh * out_w + ow
                        y = oh * stride_h - pad_h + i * dil_h + offset[(g * taps + tap) * 2, oh, ow]
                        xx = ow * stride_w - pad_w + j * dil_w + offset[(g * taps + tap) * 2 + 1, oh, ow]
                        for k in range(4):
                            pos[tap, q, k], wts[tap, q, k] = 0, 0.0
                        if -1.0 < y < height and -1.0 < xx < width:
                            m = mask[g * taps + tap, oh, ow]
                            y0, x0 = math.floor(y), math.floor(xx)
                            ly, lx = y - y0, xx - x0
                            iy, ix = int(y0), int(x0)
                            if iy >= 0 and ix >= 0:
                                pos[tap, q, 0], wts[tap, q, 0] = iy * width + ix, (1 - ly) * (1 - lx) * m
                            if iy >= 0 and ix + 1 < width:
                                pos[tap, q, 1], wts[tap, q, 1] = iy * width + ix + 1, (1 - ly) * lx * m
                            if iy + 1 < height and ix >= 0:
                                pos[tap, q, 2], wts[tap, q, 2] = (iy + 1) * width + ix, ly * (1 - lx) * m
                            if iy + 1 < height and ix + 1 < width:
                                pos[tap, q, 3], wts[tap, q, 3] = (iy + 1) * width + ix + 1, ly * lx * m
        for c in range(g * per_group, (g + 1) * per_group):
            base = c * height * width
            for tap in range(taps):
                for q in range(n_pix):
                    cols2[c, tap, q] = (wts[tap, q, 0] * flat[base + pos[tap, q, 0]]
                                        + wts[tap, q, 1] * flat[base + pos[tap, q, 1]]
                                        + wts[tap, q, 2] * flat[base + pos[tap, q, 2]]
                                        + wts[tap, q, 3] * flat[base + pos[tap, q, 3]])
