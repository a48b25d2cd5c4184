"""Convolution CPU kernels: Conv and ConvTranspose (ONNX spec; 1-D, 2-D, 3-D, N-D).

Shapes and padding follow ops/shapes/conv.py (ConvGeometry). Each kernel picks
its path at reshape, from shapes only:

Conv, X (N, C, *in), W (M, C/group, *k), Y (N, M, *out), P = prod(out):
* pointwise_compiled -- 1x1 kernel, stride 1, no padding, group 1, float32, static
  weights: compiled/gemm.py, Y[n] = act(W @ X[n] + B) with W packed once, the bias
  and a fused activation applied to each block of Y while it is in cache.
* pointwise -- 1x1 kernel, stride 1, no padding (the rest):
  Y[n, g] = W[g] @ X[n, g], a GEMM straight from X into Y.
* depthwise_compiled -- group == C (any multiplier), 2-D float32, static weights, any
  kernel size, stride, dilation and padding (DEPTHWISE_COMPILED_MIN_PLANE and
  DEPTHWISE_COMPILED_ANY_KERNEL can narrow it): compiled/depthwise.py, the input split
  into stride phases in scratch, float32 tap passes, bias and activation fused.
* depthwise -- group == C (one input channel per group, M = C * multiplier,
  multiplier <= DEPTHWISE_MAX_MULTIPLIER):
  the zero-padded input is split into its stride phases, each phase plane
  flattened with its row pitch, so every kernel tap reads one contiguous run
  of a plane (outputs past the right edge of a row are computed and dropped).
  The runs are copied into columns (one as_strided copy per phase) and
  Y[c] = w[c] @ cols[c] is a GEMV per channel (numpy.matmul batched over
  channels). Measured faster than accumulating Y += w_t * X_t tap by tap
  (two passes over Y per tap), at every PP-OCR shape.
* patch_compiled -- 2-D, non-overlapping windows (kernel == strides, dilation 1, no
  padding), at least PATCH_MIN_TAPS taps, group 1, float32, static weights: the
  transposed product of conv1d_compiled below, cols^T then a permutation of X (ViT's and
  Swin's patch embeddings). ViT-B/16's 16x16 stride 16, 3 -> 768 at 224x224, one thread
  at 16 lanes: 2.35 -> 1.15 ms (the indirect GEMM before; onnxruntime 1.06-1.10); at 8 lanes
  2.09 -> 2.01; Swin-T's 4x4 stride 4, 3 -> 96: 0.47 -> 0.46 (onnxruntime 0.19).
* winograd -- stride-1 3x3, group 1, float32, >= 16 channels in and out, static
  weights: Winograd F(2x2,3x3) (or F(4x4,3x3)), compiled/winograd.py.
* indirect -- other 2-D float32 convolutions with static weights: conv_indirect.py,
  one GEMM per image and group whose rows are read in place from the stride phases
  of the padded input through an offset table (compiled/gemm.py), bias and
  activation fused.
* conv1d_compiled -- 1-D, group 1, float32, static weights, columns of at most
  CONV1D_COMPILED_MAX_BYTES: the transposed product Y^T = cols^T @ W^T + B, one row
  per output position (N * O rows, K = C * k, N = M), on compiled/matmul.py's
  packed-panel GEMM (W^T and B packed once, shared by every Net), then Y^T copied
  into Y. cols^T (N * O, C * k) is one strided copy of the (zero-padded) input's
  windows. A short sequence is then a GEMM of few rows over a wide weight, which
  the packed kernel runs at full width, where im2col's W @ cols has few columns
  (silero-vad's encoder, 128 x 387 @ 387 x 4: 29 -> 8 us; its STFT, stride 128 over
  640 samples, 258 filters of 256: 26 -> 9 us; measured, one thread). Where the
  product is too small for the packed kernel (matmul.COMPILED_MIN_ROWS, _FLOPS: one
  output position) im2col instead.
* im2col -- everything else: zero-pad X into scratch, copy its sliding windows
  (an as_strided view) into cols (N, group, C/group * prod(k), P), then
  Y[n, g] = W[g] @ cols[n, g] (a GEMM batched over n and groups).

ConvTranspose, X (N, C, *in), W (C, M/group, *k):
* gemm -- 1x1 kernel, stride 1, no padding: Y[n, g] = W[g]^T @ X[n, g] directly;
* otherwise cols[n, g] = W[g]^T @ X[n, g] (GEMM), cols (N, M, *k, *in), then
  - tile -- kernel == stride, no padding: the taps' outputs partition Y, so
    each tap is one strided copy into Y (bias fused); 2-D float32 with
    compiled.active(): compiled/col2im.py writes each Y row once, interleaving
    its taps, GEMM columns in L2-sized bands (PP-OCR det 16->16 at 120x160:
    3.4 -> 2.3 ms, measured; thresholds below); kernel (kh, 2), group 1, W a
    weight: compiled/col2im.py's tile_gemm_scatter_w2 computes each 16-pixel
    strip of columns in registers and writes its Y rows directly, no column
    buffer (the same strip 1.35 ms, onnxruntime 2.1);
  - col2im -- Y = B, then Y[o = s*i + k*d - pad_begin] += cols[k, i], one
    strided add per kernel tap.

Columns are built a tile at a time (a band of rows of the first spatial axis;
depthwise: a chunk of channels), so they stay in cache and a large image
needs no large workspace. The bias rides in the GEMM (im2col: a row of ones
in the columns), in the copy that crops the depthwise rows, in the tile copies
or the col2im start; else it takes one pass over Y. Every large temporary
(padded input, phase planes, columns) is per-Net scratch; views of it are
built on the first call and reused while the arrays stay the same.
"""

from __future__ import annotations

import itertools
import math
from functools import partial

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..registry import kernel
from . import compiled, reference_split
from ..shapes.conv import conv_geometry
from .conv_indirect import IndirectConv2d, phase_planes_fit
from .conv_shared import _run_fills, shared_weights
from .matmul import ConstRightProduct
from .winograd_reference import WinogradReference, fits as winograd_reference_fits

_ALL = slice(None)

# Column matrices are built a tile at a time (a band of output rows; for
# depthwise, a chunk of channels), at most this many bytes, so they stay in
# cache and a large image needs no large workspace. 4 MiB measured best on a
# 512 KiB-L2 / 32 MiB-L3 core (benchmarks/conv_kernels.py).
TILE_BYTES = 4 << 20
# A grouped conv with one input channel per group and at most this many
# outputs per group uses the depthwise path; more use im2col + batched GEMM.
DEPTHWISE_MAX_MULTIPLIER = 4
# The compiled depthwise kernel for planes of at least this many outputs (0: every plane;
# measured faster than the numpy path at every MobileNetV2 / PP-OCR shape, down to 7x7).
DEPTHWISE_COMPILED_MIN_PLANE = 0
# ... and every kernel size (False: 3x3 only).
DEPTHWISE_COMPILED_ANY_KERNEL = True
# Winograd for stride-1 3x3 convolutions with at least this many input
# channels (fewer: the transforms cost more than the GEMM saves), while
# its transformed input and output take at most this many bytes of scratch.
WINOGRAD_MIN_CHANNELS = 16
# ... and at least this many output channels: the input transform is paid per
# input channel, the saving per output channel (PP-OCR det, 64 -> 16 channels at
# 120x160: Winograd 2x slower than im2col, measured)
WINOGRAD_MIN_OUT_CHANNELS = 32
WINOGRAD_MAX_SCRATCH = 64 << 20
# Output tile: F(4x4,3x3) (4x fewer multiplies) on planes of at least this size
# (0: never), else F(2x2,3x3) (2.25x, as exact as direct convolution). F(2x2)
# by default: with written-out transforms it is about as fast here (ResNet-50
# 270 ms with F4, 274 ms with F2, single thread) and F4's larger error moved the
# PP-OCR detector past its float64-closeness test (1.1e-5 of max|Y| vs 1e-5).
WINOGRAD_F4_MIN_SIZE = 0
# ConvTranspose's compiled tile path computes its GEMM columns in bands of at most
# this many bytes, so the scatter reads them from L2 (PP-OCR det 16->16, 2x2 s2 at
# 120x160: 2.7 ms at 128 KiB, 3.1-3.3 at 64 KiB and 256 KiB-1 MiB, 3.5 at 4 MiB).
CONV_TRANSPOSE_TILE_BYTES = 128 << 10
# ... from this many output elements (below, numba's call overhead makes it a tie or a
# few us slower: 16x16x16 -> 16x32x32 58 vs 55 us; 32x16x16 -> 32x32x32 111 vs 118 us).
CONV_TRANSPOSE_TILE_COMPILED_MIN_OUTPUT = 32768
# ... and GEMM rows per group (M/group * kh * kw) of at least this many: with fewer, a
# tie (16->1 2x2 at 240x320: 0.93 vs 0.92 ms numpy; 16->2: 1.37 vs 1.47-1.54).
CONV_TRANSPOSE_TILE_COMPILED_MIN_ROWS = 8
# ConvTranspose with kernel (kh, 2) = strides (2x2 stride-2 upsampling), group 1, static W:
# the GEMM and the scatter in one compiled pass (compiled/col2im.py) from this input width
# (narrower: mostly its scalar column tail; the tile path above instead).
CONV_TRANSPOSE_FUSED_MIN_WIDTH = 16
# 1x1 convolutions (group 1, float32, static weights) run compiled/gemm.py's packed-weight
# GEMM with the bias and activation fused into its output blocks (False: numpy's matmul).
POINTWISE_COMPILED = True
# Other 2-D convolutions (group 1 or grouped, float32, static weights) that no path above
# takes run as an indirect GEMM (conv_indirect.py: no column matrix; False: im2col).
INDIRECT_COMPILED = True
# ... where it measured faster (single thread, benchmarks/conv_kernels.py): outputs at least this
# wide (3x3 s1 64ch 56x56: 6.2 ms vs Winograd 7.8, im2col 9.1; at 28x28 and below Winograd wins
# and im2col ties, since each output row is computed (KW - 1) * dw // sw pixels wider), or
# few output channels per group, where im2col's GEMM is skinny and its copy dominates (PP-OCR
# det 64 -> 16, 3x3 at 120x160: 11.4 ms vs im2col 29.3; 32 -> 16 3x3 s2: 12.8 vs 21.4).
INDIRECT_MIN_WIDTH = 48
# ... or, for strided KxK convolutions (no Winograd for them), at least this wide: there the
# NCHW8c kernel (conv_nchwc.py) runs the same sums on a padded blocked copy of X, with no
# reorder in or out. ResNet-50's 3x3 stride-2 convs, one thread, im2col in NCHW with reorders
# -> NCHW8c indirect: 28 wide 6.95 -> 6.12 ms, 14 wide 6.58 -> 6.02 (NCHW alone: 7.46 -> 7.78);
# at 7 wide it lost (7.5 -> 8.7). (The NCHW8c indirect kind no longer follows this choice: it takes
# every group-1 KxK convolution, and measured in the tenth session it won at 7 wide too, ResNet-50's
# layer4 3x3 stride 2 9.4 ms against this path's im2col at 17.1.)
INDIRECT_STRIDED_MIN_WIDTH = 14
INDIRECT_SKINNY_M = 32
INDIRECT_SKINNY_MIN_WIDTH = 16
# 1-D convolutions (group 1, float32, static weights) whose transposed columns, N * O x C * k
# floats, take at most this many bytes: conv1d_compiled (False: im2col)
CONV1D_COMPILED = True
CONV1D_COMPILED_MAX_BYTES = TILE_BYTES
# 2-D convolutions over non-overlapping patches (kernel == strides, no padding, group 1, float32, static
# weights) of at least PATCH_MIN_TAPS taps, transposed columns of at most PATCH_COMPILED_MAX_BYTES: the
# same transposed product (patch_compiled; False: the paths below). cols^T is then a permutation of X.
PATCH_COMPILED = True
PATCH_MIN_TAPS = 16
PATCH_COMPILED_MAX_BYTES = 4 * TILE_BYTES
# ... and for weights of at most this many elements (C * k * M) also where the product is too small
# for the packed GEMM elsewhere (matmul.COMPILED_MIN_ROWS, _FLOPS): one output position, few flops
CONV1D_SMALL_WEIGHT = 1 << 16  # as matmul.GEMV_COMPILED_MAX_WEIGHT (measured there)


def _winograd_tile(out_shape) -> int:
    return 4 if WINOGRAD_F4_MIN_SIZE and min(out_shape) >= WINOGRAD_F4_MIN_SIZE else 2


def winograd_geometry(g, min_channels: tuple[int, int] | None = None) -> bool:
    """A 2-D stride-1, dilation-1, group-1 3x3 convolution with enough channels for Winograd to pay:
    at least min_channels = (input, output) channels, by default this path's (WINOGRAD_MIN_CHANNELS,
    WINOGRAD_MIN_OUT_CHANNELS); the NCHW8c kind passes its own (conv_nchwc.WINOGRAD_MIN_CHANNELS)."""
    min_in, min_out = (WINOGRAD_MIN_CHANNELS, WINOGRAD_MIN_OUT_CHANNELS) if min_channels is None else min_channels
    return (g.kernel == (3, 3) and g.strides == (1, 1) and g.dilations == (1, 1) and g.group == 1
            and g.in_channels >= min_in and g.out_channels >= min_out)


def _winograd_weights(w: np.ndarray, m: int) -> np.ndarray:
    """U = G W G^T, computed once per weight array and tile size, shared read-only by every Net."""
    return shared_weights(w, ("winograd", m), lambda w: compiled.winograd.transform_weights(w, m))


class _Fill:
    """dst[j] = src[start + step * j] per spatial axis where that index is inside src; 0 elsewhere.

    Used to zero-pad (step 1, start = -pad_begin) and to split a padded input
    into stride phases (step = stride, start = phase - pad_begin). Only the
    border slabs are zeroed, never the whole destination.
    """

    def __init__(self, src_shape, dst_shape, start, step, src_lead=(_ALL, _ALL), dst_lead=(_ALL, _ALL)):
        lo, hi, src = [], [], []
        for size, q, a, s in zip(src_shape, dst_shape, start, step):
            j0 = max(0, -(a // s))
            j1 = min(q, (size - 1 - a) // s + 1)
            lo.append(j0)
            hi.append(max(j0, j1))
            src.append(slice(a + s * j0, a + s * (j1 - 1) + 1, s) if j1 > j0 else None)
        self.copy = None
        self.zeros = []
        if any(h == l for l, h in zip(lo, hi)):
            self.zeros.append(tuple(dst_lead))
            return
        self.copy = (tuple(dst_lead) + tuple(slice(l, h) for l, h in zip(lo, hi)),
                     tuple(src_lead) + tuple(src))
        for i in range(len(dst_shape)):
            box = tuple(slice(l, h) for l, h in zip(lo[:i], hi[:i]))
            tail = (_ALL,) * (len(dst_shape) - i - 1)
            if lo[i] > 0:
                self.zeros.append(tuple(dst_lead) + box + (slice(0, lo[i]),) + tail)
            if hi[i] < dst_shape[i]:
                self.zeros.append(tuple(dst_lead) + box + (slice(hi[i], dst_shape[i]),) + tail)

    def views(self, src, dst):
        """[(dst_view, src_view or None)]: copy src_view into dst_view, or zero dst_view."""
        out = [(dst[z], None) for z in self.zeros]
        if self.copy is not None:
            out.append((dst[self.copy[0]], src[self.copy[1]]))
        return out


def _phase_groups(kernel, dilations, strides):
    """Kernel taps grouped by stride phase, for reading a padded input split into phase planes.

    Tap k on an axis reads padded-X[s*o + k*d] = plane (k*d % s) at (o + k*d // s).
    Within one phase the offsets k*d // s step regularly, so each group is a
    grid of taps one as_strided view reaches.
    Returns:
        [(phase, first, step, counts, taps)]: phase, first offset, offset step
        and tap count per axis (plane units); taps: the flat tap indices in
        the group's C order.
    """
    per_axis = []
    for size, d, s in zip(kernel, dilations, strides):
        classes = {}
        for k in range(size):
            classes.setdefault(k * d % s, []).append(k)
        per_axis.append(sorted(classes.items()))
    groups = []
    for combo in itertools.product(*per_axis):
        ks = [cls[1] for cls in combo]
        groups.append((tuple(cls[0] for cls in combo),
                       tuple(k[0] * d // s for k, d, s in zip(ks, dilations, strides)),
                       tuple(k[1] * d // s - k[0] * d // s if len(k) > 1 else 0
                             for k, d, s in zip(ks, dilations, strides)),
                       tuple(len(k) for k in ks),
                       [int(np.ravel_multi_index(kk, kernel)) for kk in itertools.product(*ks)]))
    return groups


def _phase_fills(geo, plane_shape, phases):
    """Fills of the phase planes (axis 2 of the planes array) from X, zero-padded."""
    return [_Fill(geo.in_shape, plane_shape, tuple(a - b for a, b in zip(phase, geo.pads_begin)), geo.strides,
                  dst_lead=(_ALL, _ALL, i)) for i, phase in enumerate(phases)]


def _bands(rows: int, bytes_per_row: int) -> list[tuple[int, int]]:
    """Split `rows` output rows into bands whose temporaries take at most TILE_BYTES (one row at least)."""
    band = max(1, min(rows, TILE_BYTES // max(1, bytes_per_row)))
    return [(r, min(rows, r + band)) for r in range(0, rows, band)]


def _matmul_into(a, b, out):
    np.matmul(a, b, out=out)


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view (compiled kernels take weights as read-only arrays: one signature)."""
    v = a.view()
    v.flags.writeable = False
    return v


class _ConvBase:
    """Shared setup: geometry, static weights and bias, the view cache."""

    def _setup(self, ctx):
        g = conv_geometry(ctx)
        self.geo = g
        self.dtype = np.dtype(ctx.dtype(0))
        self.rank = g.rank
        self.cg, self.mg = g.in_channels // g.group, g.out_channels // g.group  # channels per group
        self.w_static = np.asarray(ctx.value(1)) if ctx.is_static(1) else None
        self.has_bias = ctx.has_input(2)
        self.bshape = (g.out_channels,) + (1,) * g.rank
        self.b_static = None
        if self.has_bias and ctx.is_static(2):
            self.b_static = np.ascontiguousarray(np.asarray(ctx.value(2), self.dtype).reshape(self.bshape))
        self.empty = g.batch * g.out_channels * math.prod(g.out_shape) == 0
        split = compiled.reference_tier()  # large products on the idle cores (reference_split.py)
        self._matmul = reference_split.matmul if split else np.matmul
        self._copyto = partial(reference_split.copyto, axis=2) if split else np.copyto  # im2col: by channels
        self._key = None
        self._views = None
        self._scratch = []

    def _bias_vector(self) -> np.ndarray:
        """B as a flat read-only float32 vector for the compiled paths (zeros without a bias)."""
        if self.b_static is None:
            return _readonly(np.zeros(self.geo.out_channels, np.float32))
        return _readonly(np.ascontiguousarray(self.b_static.reshape(-1)))

    def _bias(self, b):
        if not self.has_bias:
            return None
        return self.b_static if self.b_static is not None else b.reshape(self.bshape)

    def _cached(self, x, out):
        """Views of x, out and the scratch arrays, rebuilt when any of them changes."""
        key = (x, out) + tuple(r.array for r in self._scratch)
        old = self._key
        if old is None or len(old) != len(key) or any(a is not b for a, b in zip(old, key)):
            self._views = self._make_views(x, out, *key[2:])
            self._key = key
        return self._views


@kernel("Conv", since=(1, 11, 22))
class Conv(_ConvBase):
    """Y = X (*) W + B: N-D cross-correlation with strides, dilations, padding, groups.

    ONNX Conv-1/-11/-22 (the versions differ only in documentation and types).
    Shapes: X (N, C, D1, ..., Dn), W (M, C / group, k1, ..., kn), B (M,),
    Y (N, M, O1, ..., On); float32 or float64. W and B may be weights (prepared
    once here) or computed at run time. Paths: see the module docstring.
    """

    def __init__(self, ctx, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                 pads=None, strides=None):
        self._setup(ctx)
        g = self.geo
        c, m = g.in_channels, g.out_channels
        self.taps = math.prod(g.kernel)
        self.p = math.prod(g.out_shape)
        self.fold_bias = False
        self.act = (0, np.float32(0), np.float32(0))  # fused activation (compiled paths)
        self.path = self._choose_path(ctx)
        if self.path == "pointwise_compiled":
            self._init_pointwise_compiled(ctx)
        elif self.path == "indirect":
            self._init_indirect(ctx)
        elif self.path == "winograd":
            self._init_winograd(ctx)
        elif self.path == "depthwise_compiled":
            self._init_depthwise_compiled(ctx)
        elif self.path == "depthwise":
            self._init_depthwise(ctx, m // c)
        elif self.path in ("conv1d_compiled", "patch_compiled"):
            self._init_conv1d_compiled(ctx)
        elif self.path == "winograd_reference":
            self.winograd_reference = WinogradReference(ctx, g, split=True)
        if self.path == "im2col":  # also where conv1d_compiled's product does not apply
            self._init_im2col(ctx)
        if self.path not in ("depthwise", "depthwise_compiled", "winograd", "pointwise_compiled", "indirect",
                             "conv1d_compiled", "patch_compiled", "winograd_reference"):
            self.w_mat = None
            if self.w_static is not None and (not self.fold_bias or self.b_static is not None):
                self.w_mat = self._gemm_weights(self.w_static, self.b_static)

    def _choose_path(self, ctx) -> str:
        """The path for this node (the module docstring's order), from _setup's fields alone."""
        g = self.geo
        c, m, grp = g.in_channels, g.out_channels, g.group
        pointwise = (all(k == 1 for k in g.kernel) and all(s == 1 for s in g.strides)
                     and not any(g.pads_begin) and g.out_shape == g.in_shape)
        mult = m // c if grp == c else 0
        if pointwise and POINTWISE_COMPILED and grp == 1 and self._packed_gemm_fits():
            return "pointwise_compiled"
        if pointwise:
            return "pointwise"
        if self._patch_fits():
            return "patch_compiled"
        if self._indirect_fits(wide_only=True):
            return "indirect"
        if self._winograd_fits(ctx):
            return "winograd"
        if (compiled.active() and grp == c > 1 and mult >= 1 and g.rank == 2 and self.dtype == np.float32
                and self.w_static is not None and math.prod(g.out_shape) >= DEPTHWISE_COMPILED_MIN_PLANE
                and (g.kernel == (3, 3) or DEPTHWISE_COMPILED_ANY_KERNEL)):
            return "depthwise_compiled"
        if grp == c > 1 and 1 <= mult <= DEPTHWISE_MAX_MULTIPLIER:
            return "depthwise"
        if self._indirect_fits(wide_only=False):
            return "indirect"
        if (CONV1D_COMPILED and g.rank == 1 and grp == 1 and self._packed_gemm_fits()
                and g.batch * g.out_shape[0] * c * self.taps * 4 <= CONV1D_COMPILED_MAX_BYTES):
            return "conv1d_compiled"
        if compiled.reference_tier() and winograd_reference_fits(g, self.dtype):
            return "winograd_reference"  # a tiered Net's first forwards: 2.25x fewer multiplies than im2col
        return "im2col"

    def _gemm_weights(self, w, b=None):
        """W as (group, M/group, C/group * prod(k) [+ 1: B, when folded]), 2-D when group == 1."""
        g = self.geo
        w = np.asarray(w).reshape(g.group, self.mg, self.cg * self.taps)
        if self.fold_bias:
            w = np.concatenate([w, np.asarray(b, w.dtype).reshape(g.group, self.mg, 1)], axis=2)
        return np.ascontiguousarray(w[0] if g.group == 1 else w)

    # ---- im2col ------------------------------------------------------------
    def _init_im2col(self, ctx):
        g = self.geo
        n, c = g.batch, g.in_channels
        # Windows are read from X itself when it needs no padding, else from a
        # zero-bordered copy. (Reading stride-s windows from X's phase planes,
        # as depthwise does, makes the window copies unit-stride but the
        # phase split costs more than it saves: measured.)
        extent = tuple((o - 1) * s + k for o, s, k in zip(g.out_shape, g.strides, g.dilated_kernel))
        self.pad_ref = None
        if any(g.pads_begin) or any(e > i for e, i in zip(extent, g.in_shape)):
            self.pad_ref = ctx.scratch((n, c) + extent, self.dtype)
            self.fill = _Fill(g.in_shape, extent, tuple(-b for b in g.pads_begin), (1,) * g.rank)
            self._scratch.append(self.pad_ref)
        # Columns for a band of output rows (first spatial axis) at a time, so
        # they stay cache-sized however large the image. With a bias, a row of
        # ones in the columns and a column B in W add it within the GEMM -- but not
        # in a tiered Net's reference layout (compiled.reference_kernels(), compiled
        # kernels enabled), which serves a few first forwards until the compiled one
        # is ready: there W [| B] would be a copy of every such weight made for those
        # few (0.1 s of ResNet-50's warm first result, issue 31), so W is read as
        # stored and B added after the GEMM.
        self.fold_bias = self.has_bias and not compiled.reference_tier()
        self.rest = math.prod(g.out_shape[1:])
        # One image at a time (batch > 1): wider bands, one GEMM per band per image.
        self.bands = _bands(g.out_shape[0], c * self.taps * self.rest * self.dtype.itemsize)
        rows = self.cg * self.taps + self.fold_bias
        self.cols_ref = ctx.scratch((1, g.group, rows, self.bands[0][1] * self.rest), self.dtype)
        self._scratch.append(self.cols_ref)

    def _im2col_views(self, x, out, *scratch):
        g = self.geo
        n, grp, cg, mg, rest = g.batch, g.group, self.cg, self.mg, self.rest
        fills, src = [], x
        if self.pad_ref is not None:
            src = self.pad_ref.array
            fills = self.fill.views(x, src)
        st = src.strides
        windows = as_strided(src, (n, grp, cg) + g.kernel + g.out_shape,
                             (st[0], st[1] * cg, st[1]) + tuple(a * d for a, d in zip(st[2:], g.dilations))
                             + tuple(a * s for a, s in zip(st[2:], g.strides)), writeable=False)
        cols = self.cols_ref.array
        ckk = cg * self.taps
        rows_out = out.reshape(n, grp, mg, g.out_shape[0], rest)
        lead = (_ALL,) * (3 + g.rank)
        tiles = []
        for b in range(n):  # an image at a time, a band of output rows at a time
            for r0, r1 in self.bands:
                m = (r1 - r0) * rest
                c_tile = cols[..., :m]
                copy = (c_tile[:, :, :ckk].reshape((1, grp, cg) + g.kernel + (r1 - r0,) + g.out_shape[1:]),
                        windows[(slice(b, b + 1),) + lead[1:] + (slice(r0, r1),)])
                ones = c_tile[:, :, ckk] if self.fold_bias else None
                o_tile = rows_out[b:b + 1, :, :, r0:r1].reshape(1, grp, mg, m)
                if grp == 1:
                    c_mm, o_mm = c_tile[0, 0], o_tile[0, 0]
                else:
                    c_mm, o_mm = c_tile[0], o_tile[0]
                tiles.append((copy, ones, c_mm, o_mm))
        return fills, tiles

    # ---- 1-D and patches, compiled: Y^T = cols^T @ W^T + B ----------------------
    def _patch_fits(self) -> bool:
        """patch_compiled applies: a 2-D, group-1 convolution over non-overlapping windows (kernel == strides,
        dilation 1, no padding) of at least PATCH_MIN_TAPS taps (ViT's and Swin's patch embeddings), static
        float32 weights, transposed columns of at most PATCH_COMPILED_MAX_BYTES."""
        g = self.geo
        return (PATCH_COMPILED and g.rank == 2 and g.group == 1 and g.kernel == g.strides and g.dilations == (1, 1)
                and not any(g.pads_begin) and not any(g.pads_end) and self.taps >= PATCH_MIN_TAPS
                and self._packed_gemm_fits()
                and g.batch * self.p * g.in_channels * self.taps * 4 <= PATCH_COMPILED_MAX_BYTES)

    def _init_conv1d_compiled(self, ctx):
        """conv1d_compiled's (patch_compiled's) product and scratch; falls back to im2col (self.path) where
        the packed product does not apply (too few rows or flops: matmul.ConstRightProduct.build)."""
        g = self.geo
        n, c, m, o = g.batch, g.in_channels, g.out_channels, self.p
        ck = c * self.taps
        bias = self.b_static.reshape(-1) if self.has_bias else None
        owner = (ctx.value(1), ctx.value(2)) if self.has_bias else (ctx.value(1),)  # the panels' key: shared
        # a small weight: every product, one output position too (the GEMV's latency is then
        # smaller than im2col's copies and calls: silero-vad's 64 x 192 @ 192 x 1, 7.9 -> 3 us)
        small = ck * m <= CONV1D_SMALL_WEIGHT
        self.product = ConstRightProduct.build(ctx, (n * o, ck), np.float32, self.w_static.reshape(m, ck), bias,
                                               trans_b=True, owner=owner, **({"min_rows": 1, "min_flops": 0}
                                                                             if small else {}))
        if self.product is None:
            self.path = "im2col"
            return
        extent = tuple((o_ - 1) * s + k for o_, s, k in zip(g.out_shape, g.strides, g.dilated_kernel))
        self.pad_ref = None
        if any(g.pads_begin) or any(e > i for e, i in zip(extent, g.in_shape)):
            self.pad_ref = ctx.scratch((n, c) + extent, np.float32)
            self.fill = _Fill(g.in_shape, extent, tuple(-b for b in g.pads_begin), (1,) * g.rank)
            self._scratch.append(self.pad_ref)
        self.cols_t_ref = ctx.scratch((n * o, ck), np.float32)
        self.y_t_ref = ctx.scratch((n * o, m), np.float32)

    def _conv1d_steps(self, x, out):
        """conv1d_compiled's (patch_compiled's) (function, arguments) steps for these arrays: the zero-padding
        copy, the windows into cols^T, the product, Y^T into Y."""
        g = self.geo
        n, c, m, o = g.batch, g.in_channels, g.out_channels, self.p
        steps, src = [], x
        if self.pad_ref is not None:
            src = self.pad_ref.array
            for dst, part in self.fill.views(x, src):
                steps.append((dst.fill, (0,)) if part is None else (np.copyto, (dst, part)))
        st = src.strides
        windows = as_strided(src, (n,) + g.out_shape + (c,) + g.kernel,
                             (st[0],) + tuple(a * s for a, s in zip(st[2:], g.strides)) + (st[1],)
                             + tuple(a * d for a, d in zip(st[2:], g.dilations)), writeable=False)
        cols_t, y_t = self.cols_t_ref.array, self.y_t_ref.array
        steps.append((np.copyto, (cols_t.reshape((n,) + g.out_shape + (c,) + g.kernel), windows)))
        pr = self.product
        steps.append((pr.run, (cols_t.reshape(-1), pr.rows, pr.k_n, pr.bias, pr.x, y_t.reshape(-1), pr.n_n,
                               pr.ws_ref.array)))
        steps.append((np.copyto, (out.reshape(n, m, o), y_t.reshape(n, o, m).transpose(0, 2, 1))))
        return steps

    # ---- pointwise, compiled (float32, group 1, static weights) -------------
    def _packed_gemm_fits(self) -> bool:
        """compiled/gemm.py applies: float32, W and B weights (packed once)."""
        return (compiled.active() and self.dtype == np.float32 and self.w_static is not None
                and (not self.has_bias or self.b_static is not None))

    def _indirect_fits(self, wide_only: bool) -> bool:
        """The indirect path applies and measured faster: wide outputs (before Winograd is
        considered), or few output channels per group (after it)."""
        g = self.geo
        if not (INDIRECT_COMPILED and self._packed_gemm_fits() and g.rank == 2 and g.group < g.in_channels
                and phase_planes_fit(g)):
            return False
        ow = g.out_shape[1]
        if wide_only:
            strided = g.strides != (1,) * g.rank and g.kernel != (1,) * g.rank
            return ow >= (INDIRECT_STRIDED_MIN_WIDTH if strided else INDIRECT_MIN_WIDTH)
        return self.mg <= INDIRECT_SKINNY_M and ow >= INDIRECT_SKINNY_MIN_WIDTH

    def _init_indirect(self, ctx):
        self.path = "indirect"
        self.indirect = IndirectConv2d(ctx, self.geo, self.w_static, self._bias_vector(), _phase_fills)

    def _init_pointwise_compiled(self, ctx):
        gemm = compiled.gemm
        self._gemm2d, self._gemm2d_sum = gemm.gemm2d, gemm.gemm2d_sum  # read once, when the kernel is built

        g = self.geo
        self.wp = shared_weights(self.w_static, "packed",
                                 lambda w: compiled.gemm.pack_weights(w.reshape(g.out_channels, g.in_channels)))
        self.offs = compiled.gemm.row_offsets(g.in_channels, self.p)
        self.b_c = self._bias_vector()
        self.ws_ref = ctx.scratch((max(1, compiled.gemm.scratch_size(self.p)),), np.float32)

    def _pointwise_steps(self, x, out, z=None):
        g = self.geo
        xf, yf, ws = x.reshape(-1), out.reshape(-1), self.ws_ref.array
        steps = []
        for n in range(g.batch):  # shapes were fixed at reshape: no per-call checks
            x0, y0 = n * g.in_channels * self.p, n * g.out_channels * self.p
            if z is None:
                steps.append((self._gemm2d, (self.wp, xf, x0, self.offs, yf, y0, self.p, g.out_channels, self.p,
                                             self.b_c, ws, *self.act)))
            else:
                steps.append((self._gemm2d_sum, (self.wp, xf, x0, self.offs, yf, y0, self.p, g.out_channels, self.p,
                                                 self.b_c, ws, *self.act, z.reshape(-1))))
        return steps

    # ---- depthwise, compiled (2-D float32, static weights) -----------------
    def _init_depthwise_compiled(self, ctx):
        g = self.geo
        self.mult = g.out_channels // g.in_channels
        self.w_c = _readonly(np.ascontiguousarray(self.w_static, np.float32).reshape(g.out_channels, -1))
        self.b_c = self._bias_vector()
        (hq, wq), offs = compiled.depthwise.geometry(g.out_shape, g.kernel, g.strides, g.dilations)
        self.dw_geometry = (_readonly(offs), hq, wq)
        rows = compiled.depthwise.band_rows(g.out_shape[0], wq)
        self.buf_ref = ctx.scratch((g.strides[0] * g.strides[1] * hq * wq,), np.float32)
        self.acc_ref = ctx.scratch((rows * wq,), np.float32)
        self._dw_kernel = compiled.depthwise.depthwise_conv2d

    # ---- Winograd F(m x m, 3 x 3) (compiled/winograd.py) ------------------
    def _winograd_fits(self, ctx) -> bool:
        g = self.geo
        if not (compiled.active() and winograd_geometry(g) and self.dtype == np.float32
                and self.w_static is not None and (not self.has_bias or self.b_static is not None)):
            return False
        m = _winograd_tile(g.out_shape)
        tiles = math.ceil(g.out_shape[0] / m) * math.ceil(g.out_shape[1] / m)  # one image at a time
        return (m + 2) ** 2 * (g.in_channels + g.out_channels) * tiles * 4 <= WINOGRAD_MAX_SCRATCH

    def _init_winograd(self, ctx):
        g = self.geo
        m = self.wino_m = _winograd_tile(g.out_shape)
        a = m + 2
        self.tiles = (math.ceil(g.out_shape[0] / m), math.ceil(g.out_shape[1] / m))
        t = self.tiles[0] * self.tiles[1]  # one image at a time: the transformed data stays in cache
        self.u = _winograd_weights(self.w_static, m)
        self.b_c = self._bias_vector()
        self.v_ref = ctx.scratch((a * a, g.in_channels, t), np.float32)
        self.mb_ref = ctx.scratch((a * a, g.out_channels, t), np.float32)
        self.small_ref = ctx.scratch((3, a, a), np.float32)

    def _winograd_steps(self, x, out):
        g = self.geo
        small = self.small_ref.array
        v, mb = self.v_ref.array, self.mb_ref.array
        steps, winograd = [], compiled.winograd
        for n in range(g.batch):  # an image at a time: its transformed input and output stay in cache
            steps += [(winograd.input_transform, (x[n:n + 1], v, small[0], small[1], g.pads_begin[0], g.pads_begin[1],
                                                  self.tiles[0], self.tiles[1], self.wino_m)),
                      (_matmul_into, (self.u, v, mb)),  # one GEMM per transform position, all tiles at once
                      (winograd.output_transform, (mb, out[n:n + 1], self.b_c, small[2], self.tiles[0], self.tiles[1],
                                                   self.wino_m, *self.act))]
        return steps

    def fuse_sum(self, code: int, p0: float = 0.0, p1: float = 0.0) -> bool:
        """Add a same-shape Z and then apply activation `code` inside the kernel (FusedConv's sum
        input, run by `run_sum`); False: this path cannot (the caller adds Z and activates after)."""
        if self.path != "pointwise_compiled" or (self.has_bias and self.b_static is None):
            return False
        self.act = (int(code), np.float32(p0), np.float32(p1))
        return True

    def run_sum(self, x, z, out):
        """out = act((conv(x) + B) + z) after fuse_sum: z C-contiguous, of out's shape and dtype."""
        compiled.run_steps(self._pointwise_steps(x, out, np.ascontiguousarray(z)))

    def prepare_sum(self, x, z, out):
        """run_sum(x, z, out) as one zero-argument call for these arrays (engine/layout.py: _prepared), or None."""
        if not all(a.flags.c_contiguous for a in (x, z, out)):
            return None
        return compiled.prepared(self._pointwise_steps(x, out, z))

    def fuse_activation(self, code: int, p0: float = 0.0, p1: float = 0.0) -> bool:
        """Apply activation `code` (compiled/epilogue.py) inside the kernel; False: this path cannot."""
        if self.path not in ("depthwise_compiled", "winograd", "pointwise_compiled", "indirect") \
                or (self.has_bias and self.b_static is None):
            return False
        self.act = (int(code), np.float32(p0), np.float32(p1))
        return True

    def _depthwise_steps(self, x, b, out):
        g = self.geo
        bias = self.b_c if not self.has_bias or self.b_static is not None else \
            _readonly(np.ascontiguousarray(b, np.float32))
        return [(self._dw_kernel, (x, self.w_c, bias, out, self.buf_ref.array, self.acc_ref.array, *self.dw_geometry,
                                   g.strides[0], g.strides[1], g.pads_begin[0], g.pads_begin[1], self.mult,
                                   *self.act))]

    # ---- depthwise ---------------------------------------------------------
    def _init_depthwise(self, ctx, mult):
        g = self.geo
        n, c, r = g.batch, g.in_channels, g.rank
        self.mult = mult
        out, item = g.out_shape, self.dtype.itemsize
        # Phase planes: plane a holds padded-X[a + s * j] with its rows flattened,
        # so the tap k reads the run starting at offset k*d // s of plane k*d % s.
        # Runs of the last row may overrun the row: one spare row of zeros.
        reach = tuple(((k - 1) * d) // s for k, d, s in zip(g.kernel, g.dilations, g.strides))
        qd = (out[0] + reach[0] + (1 if r > 1 else 0),) + tuple(o + e for o, e in zip(out[1:], reach[1:]))
        qstride = [math.prod(qd[i + 1:]) for i in range(r)]
        self.qd, self.rest = qd, qstride[0]
        self.ragged = qd[1:] != out[1:]  # rows carry dropped outputs past the right edge
        # One as_strided copy per phase group fills its taps' rows of the columns.
        groups = _phase_groups(g.kernel, g.dilations, g.strides)
        self.groups = []
        for i, (_, first, step, counts, taps) in enumerate(groups):
            self.groups.append((i, sum(f * q for f, q in zip(first, qstride)), counts,
                                tuple(k * q * item for k, q in zip(step, qstride)),
                                sum(len(grp[4]) for grp in groups[:i])))
        self.tap_order = [t for grp in groups for t in grp[4]]
        self.fills = _phase_fills(g, qd, [grp[0] for grp in groups])
        self.q_ref = ctx.scratch((n, c, len(groups), math.prod(qd)), self.dtype)
        # Tiles: whole channels while their columns fit TILE_BYTES, else one
        # channel and a band of output rows.
        per_row = n * (self.taps + mult * self.ragged) * self.rest * item
        if per_row * out[0] <= TILE_BYTES:
            chunk, self.bands = min(c, TILE_BYTES // (per_row * out[0])), [(0, out[0])]
        else:
            chunk, self.bands = 1, _bands(out[0], per_row)
        self.chunks = [(c0, min(c, c0 + chunk)) for c0 in range(0, c, chunk)]
        length = self.bands[0][1] * self.rest
        self.cols_ref = ctx.scratch((n, chunk, self.taps, length), self.dtype)
        self.acc_ref = ctx.scratch((n, chunk, mult, length), self.dtype) if self.ragged else None
        self._scratch += [r for r in (self.q_ref, self.cols_ref, self.acc_ref) if r is not None]
        self.w_taps = None if self.w_static is None else self._depthwise_weights(self.w_static)

    def _depthwise_weights(self, w):
        """(C, multiplier, taps), the taps in the order of the column rows."""
        c = self.geo.in_channels
        return np.ascontiguousarray(np.asarray(w).reshape(c, self.mult, self.taps)[:, :, self.tap_order])

    def _depthwise_views(self, x, out, *scratch):
        """Per tile (channels c0:c1, output rows r0:r1): copies into the columns, the GEMV's output."""
        g = self.geo
        n, mult, rest = g.batch, self.mult, self.rest
        q = self.q_ref.array
        planes = q.reshape((n, g.in_channels, q.shape[2]) + self.qd)
        fills = [p for f in self.fills for p in f.views(x, planes)]
        out_flat = out.reshape(n, g.in_channels, mult, -1)
        out_rows = out.reshape((n, g.in_channels, mult) + g.out_shape)
        crop = (_ALL,) * 4 + tuple(slice(0, o) for o in g.out_shape[1:])
        tiles = []
        for c0, c1 in self.chunks:
            for r0, r1 in self.bands:
                m, base = (r1 - r0) * rest, r0 * rest
                cols = self.cols_ref.array[:, :c1 - c0, :, :m]
                copies = []
                for ph, first, counts, steps, row in self.groups:
                    dst = cols[:, :, row:row + math.prod(counts)].reshape((n, c1 - c0) + counts + (m,))
                    src = as_strided(q[:, c0:c1, ph, base + first:], dst.shape,
                                     q.strides[:2] + steps + q.strides[3:], writeable=False)
                    copies.append((dst, src))
                if self.ragged:
                    acc = self.acc_ref.array[:, :c1 - c0, :, :m]
                    valid = (acc.reshape((n, c1 - c0, mult, r1 - r0) + self.qd[1:])[crop],
                             out_rows[:, c0:c1, :, r0:r1])
                else:
                    acc, valid = out_flat[:, c0:c1, :, base:base + m], None
                tiles.append((slice(c0, c1), copies, cols, acc, valid))
        return fills, tiles

    def _depthwise(self, x, w, b, out):
        wt = self.w_taps if self.w_taps is not None else self._depthwise_weights(w)
        bias = None
        if self.has_bias:
            bias = self._bias(b).reshape((self.geo.in_channels, self.mult) + (1,) * self.rank)
        fills, tiles = self._cached(x, out)
        _run_fills(fills)
        for chan, copies, cols, acc, valid in tiles:
            for dst, src in copies:
                np.copyto(dst, src)
            np.matmul(wt[chan], cols, out=acc)
            if valid is not None:  # drop the outputs past the right edge; add B on the way
                if bias is None:
                    np.copyto(valid[1], valid[0])
                else:
                    np.add(valid[0], bias[chan], out=valid[1])
        if bias is not None and not self.ragged:
            out += self._bias(b)

    # ---- call --------------------------------------------------------------
    def _make_views(self, x, out, *scratch):
        if self.path == "im2col":
            return self._im2col_views(x, out, *scratch)
        if self.path == "depthwise":
            return self._depthwise_views(x, out, *scratch)
        g = self.geo
        if g.group == 1 and g.batch == 1:
            return x.reshape(self.cg, self.p), out.reshape(self.mg, self.p)
        if g.group == 1:
            return x.reshape(g.batch, self.cg, self.p), out.reshape(g.batch, self.mg, self.p)
        return (x.reshape(g.batch, g.group, self.cg, self.p), out.reshape(g.batch, g.group, self.mg, self.p))

    def _compiled_steps(self, x, b, out):
        """The call's (function, arguments) on the compiled paths, in order; None on the others."""
        if self.empty:
            return []
        if self.path == "pointwise_compiled":
            return self._pointwise_steps(x, out)
        if self.path == "indirect":
            return self.indirect.steps(x, out, self.act)
        if self.path == "depthwise_compiled":
            return self._depthwise_steps(x, b, out)
        if self.path == "winograd":
            return self._winograd_steps(x, out)
        if self.path in ("conv1d_compiled", "patch_compiled"):
            return self._conv1d_steps(x, out)
        return None

    def prepare_run(self, x, w, b=None, *, out):
        """__call__ as one zero-argument call for these arrays (engine/layout.py: _prepared), on the compiled
        paths of C-contiguous arrays with static B (the numpy paths: None)."""
        if not (x.flags.c_contiguous and out.flags.c_contiguous) or (self.has_bias and self.b_static is None):
            return None
        steps = self._compiled_steps(x, b, out)
        return None if steps is None else compiled.prepared(steps)

    def __call__(self, x, w, b=None, *, out):
        steps = self._compiled_steps(x, b, out)
        if steps is not None:
            compiled.run_steps(steps)
            return
        if self.path == "depthwise":
            self._depthwise(x, w, b, out)
            return
        if self.path == "winograd_reference":
            self.winograd_reference(x, w, out)
            if self.has_bias:
                out += self._bias(b)
            return
        w_mat = self.w_mat if self.w_mat is not None else self._gemm_weights(w, b)
        if self.path == "pointwise":
            x_mm, out_mm = self._cached(x, out)
            self._matmul(w_mat, x_mm, out=out_mm)
        else:
            fills, tiles = self._cached(x, out)
            _run_fills(fills)
            for (cols_nd, windows), ones, cols_mm, out_mm in tiles:
                self._copyto(cols_nd, windows)
                if ones is not None:
                    ones.fill(1)
                self._matmul(w_mat, cols_mm, out=out_mm)
        if self.has_bias and not self.fold_bias:
            out += self._bias(b)


@kernel("ConvTranspose", since=(1, 11, 22))
class ConvTranspose(_ConvBase):
    """Y = the transpose (gradient) of Conv applied to X, plus B.

    ONNX ConvTranspose-1/-11/-22 with strides, dilations, pads, output_padding,
    output_shape, auto_pad and groups; pads and output size per
    ops/shapes/conv.py. Shapes: X (N, C, D1, ..., Dn), W (C, M / group, k1, ..., kn),
    B (M,), Y (N, M, O1, ..., On). Paths: see the module docstring.
    """

    def __init__(self, ctx, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                 output_padding=None, output_shape=None, pads=None, strides=None):
        self._setup(ctx)
        g = self.geo
        n, grp = g.batch, g.group
        self.taps = math.prod(g.kernel)
        no_crop = not any(g.pads_begin)
        if self.taps == 1 and all(s == 1 for s in g.strides) and no_crop and g.out_shape == g.in_shape:
            self.path = "gemm"
        elif (no_crop and all(k == s for k, s in zip(g.kernel, g.strides))
              and all(d == 1 or k == 1 for k, d in zip(g.kernel, g.dilations))
              and g.out_shape == tuple(s * i for s, i in zip(g.strides, g.in_shape))):
            self.path = "tile"
        else:
            self.path = "col2im"
        # Columns for a band of input rows (first spatial axis) at a time.
        self.rest = math.prod(g.in_shape[1:])
        self.bands = [(0, g.in_shape[0])]
        # kernel width 2 (2x2 stride 2 upsampling): the GEMM and the scatter in one compiled pass
        self.tile_fused = (
            compiled.active() and self.path == "tile" and g.rank == 2 and self.dtype == np.float32
            and g.kernel[1] == 2 and grp == 1 and g.in_shape[1] >= CONV_TRANSPOSE_FUSED_MIN_WIDTH
            and self.w_static is not None and (not self.has_bias or self.b_static is not None))
        self.tile_compiled = (
            compiled.active() and self.path == "tile" and g.rank == 2 and self.dtype == np.float32
            and not self.tile_fused
            and n * g.out_channels * math.prod(g.out_shape) >= CONV_TRANSPOSE_TILE_COMPILED_MIN_OUTPUT
            and self.mg * self.taps >= CONV_TRANSPOSE_TILE_COMPILED_MIN_ROWS)
        if self.path != "gemm" and not self.tile_fused:
            rows = self.mg * self.taps
            row_bytes = n * grp * rows * self.rest * self.dtype.itemsize
            if self.tile_compiled:  # columns kept in L2 between the GEMM and the scatter
                band = max(1, min(g.in_shape[0], CONV_TRANSPOSE_TILE_BYTES // row_bytes))
                self.bands = [(r, min(g.in_shape[0], r + band)) for r in range(0, g.in_shape[0], band)]
            else:
                self.bands = _bands(g.in_shape[0], row_bytes)
            self.cols_ref = ctx.scratch((n, grp, rows, self.bands[0][1] * self.rest), self.dtype)
            self._scratch.append(self.cols_ref)
        self.w_mat = None if self.w_static is None else self._gemm_weights(self.w_static)
        if self.tile_compiled or self.tile_fused:
            self.b_vec = self._bias_vector()
        if self.tile_fused:
            self.w_mat = _readonly(self.w_mat)

    def _tile_views(self, x, out):
        """Per band of input rows: (r0, X's part, the GEMM's output, the same columns as (N, M*k, L))."""
        g = self.geo
        n, grp = g.batch, g.group
        lead = (n, grp) if grp > 1 else (n,) if n > 1 else ()
        x_rows = x.reshape(n, grp, self.cg, g.in_shape[0], self.rest)
        flat = self.cols_ref.array.reshape(-1)
        bands = []
        for r0, r1 in self.bands:
            length = (r1 - r0) * self.rest
            cols = flat[:n * g.out_channels * self.taps * length].reshape(n, g.out_channels * self.taps, length)
            x_mm = x_rows[:, :, :, r0:r1].reshape(lead + (self.cg, length))
            bands.append((r0, x_mm, cols.reshape(lead + (self.mg * self.taps, length)), _readonly(cols)))
        return bands

    def _gemm_weights(self, w):
        """W^T per group: (group, M/group * prod(k), C/group), 2-D when group == 1."""
        g = self.geo
        wt = np.asarray(w).reshape(g.group, self.cg, self.mg * self.taps).transpose(0, 2, 1)
        if g.group == 1:
            wt = wt[0]
        return np.ascontiguousarray(wt) if self.w_static is not None else wt

    def _col2im_slices(self, r0, r1):
        """For each kernel tap k: (output index, cols index) with o = s*i + k*d - pad_begin,
        for the input rows r0:r1 of the first spatial axis (cols indexed from r0)."""
        g = self.geo
        result = []
        for k in np.ndindex(*g.kernel):
            o_idx, i_idx = [], []
            for axis, (ki, s, d, pb, size, o) in enumerate(
                    zip(k, g.strides, g.dilations, g.pads_begin, g.in_shape, g.out_shape)):
                lo, hi = (r0, r1) if axis == 0 else (0, size)
                shift = ki * d - pb  # o = s * i + shift
                i0 = max(lo, -(shift // s))
                i1 = min(hi, (o - 1 - shift) // s + 1)
                if i1 <= i0:
                    break
                o0 = s * i0 + shift
                o_idx.append(slice(o0, o0 + s * (i1 - i0 - 1) + 1, s))
                i_idx.append(slice(i0 - lo, i1 - lo))
            else:
                result.append(((_ALL, _ALL) + tuple(o_idx), (_ALL, _ALL) + tuple(k) + tuple(i_idx)))
        return result

    def _make_views(self, x, out, *scratch):
        """Per band of input rows: X's part, the columns and the (Y part, cols part) of each tap."""
        if self.tile_compiled:
            return self._tile_views(x, out)
        g = self.geo
        n, grp, m, rest = g.batch, g.group, g.out_channels, self.rest
        lead = (n, grp) if grp > 1 else (n,) if n > 1 else ()
        x_rows = x.reshape(n, grp, self.cg, g.in_shape[0], rest)
        if self.path == "gemm":
            return [(x.reshape(lead + (self.cg, -1)), out.reshape(lead + (self.mg, -1)), None)]
        tiles = []
        for r0, r1 in self.bands:
            length = (r1 - r0) * rest
            x_mm = x_rows[:, :, :, r0:r1].reshape(lead + (self.cg, length))
            cols = self.cols_ref.array[..., :length]
            cols_nd = cols.reshape((n, m) + g.kernel + (r1 - r0,) + g.in_shape[1:])
            taps = [(out[o], cols_nd[i]) for o, i in self._col2im_slices(r0, r1)]
            tiles.append((x_mm, cols.reshape(lead + cols.shape[2:]), taps))
        return tiles

    def __call__(self, x, w, b=None, *, out):
        if self.empty:
            return
        if self.tile_fused:  # (no column scratch on this path; a Net's X and Y are contiguous blobs)
            scatter = compiled.col2im.tile_gemm_scatter_w2
            if out.flags.c_contiguous:
                scatter(self.w_mat, np.ascontiguousarray(x), out, self.b_vec, self.has_bias, self.geo.kernel[0])
            else:
                y = np.empty(out.shape, out.dtype)
                scatter(self.w_mat, np.ascontiguousarray(x), y, self.b_vec, self.has_bias, self.geo.kernel[0])
                np.copyto(out, y)
            return
        w_mat = self.w_mat if self.w_mat is not None else self._gemm_weights(w)
        bias = self._bias(b)
        tiles = self._cached(x, out)
        if self.tile_compiled:
            g = self.geo
            b_vec = self.b_vec if bias is None or self.b_static is not None else \
                _readonly(np.ascontiguousarray(b, np.float32))
            scatter = compiled.col2im.tile_scatter
            for r0, x_mm, cols_mm, cols in tiles:
                np.matmul(w_mat, x_mm, out=cols_mm)
                scatter(cols, out, b_vec, bias is not None, g.kernel[0], g.kernel[1], r0, g.in_shape[1])
            return
        if self.path == "gemm":
            x_mm, out_mm, _ = tiles[0]
            np.matmul(w_mat, x_mm, out=out_mm)
            if bias is not None:
                out += bias
            return
        if self.path == "col2im":
            if bias is None:
                out.fill(0)
            else:
                np.copyto(out, bias)
        for x_mm, cols_mm, taps in tiles:
            np.matmul(w_mat, x_mm, out=cols_mm)
            for dst, src in taps:
                if self.path == "col2im":
                    np.add(dst, src, out=dst)
                elif bias is None:  # tile: the taps' outputs partition Y, so copy
                    np.copyto(dst, src)
                else:
                    np.add(src, bias, out=dst)
