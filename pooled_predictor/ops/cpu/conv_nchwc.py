"""Conv and FusedConv in the blocked layout NCHW8c: kernel types the layout-assignment pass may choose.

onnxruntime (MLAS's NCHWc kernels, its NchwcTransformer) and oneDNN keep
whole convolution chains in a channel-blocked layout: eight channels of a
pixel are one AVX2 vector, so a pointwise conv's output block and a
depthwise conv's taps are vector operations whatever the plane size. These
kernels are registered under layout "NCHW8c" (ops/registry.py) with
`supports(ctx)` saying where they apply; passes/assign.py takes them when
the chain's gain pays for the LayoutTransform nodes in and out (ops/layouts.py,
compiled/reorder.py), and graph inputs and outputs keep ONNX's NCHW.

Where they apply (`blocked_kind`): 2-D float32 convolutions with static W
(and B), C and M multiples of 8 (no padding channels, so any activation may
run over the whole blocked array), and
  * pointwise: 1x1 kernel, group 1, no padding (compiled/nchwc_gemm.py: the same
    operations as the NCHW GEMM, so the same bits); strided too (ResNet's
    downsampling 1x1s: an image's X[:, ::SH, ::SW] copied out, then the same
    GEMM; reading the strided rows in place ran a GEMM per output row, which
    streamed W once a row: layer4's 2048 x 1024 W, 8 MB, 7 times);
  * depthwise: group == C == M, any kernel, strides, dilations and pads
    (compiled/nchwc_depthwise.py: the taps in the NCHW kernel's order and
    roundings, so the same bits);
  * winograd: 3x3, stride 1, dilation 1, group 1, any pads, any channels (multiples
    of 8: WINOGRAD_MIN_CHANNELS; the NCHW path wants 16 in, 32 out): Winograd F(4x4, 3x3)
    (compiled/nchwc_winograd.py: both transforms on eight channels at once, each
    position's product as this layout's pointwise GEMM); not the NCHW kernel's bits
    (other sums), within the error bound of compiled/winograd.py; not on small outputs with
    a large U (WINOGRAD_MIN_TILES: ResNet-50's 512-channel 3x3s at 7x7 run indirect);
  * indirect: group 1, any other kernel, strides, dilations and pads:
    X is copied once into a zero-padded blocked buffer and the NCHW8c
    micro-kernel reads each output row's taps from it through a table of
    offsets in the NCHW kernel's (c, kh, kw) order, any stride through the
    pixel pitch (no stride-phase split): where the NCHW Conv takes its
    indirect GEMM (conv.Conv._choose_path: wide outputs), the same sums, so the same
    bits; elsewhere the NCHW Conv copies columns for a GEMM (other sums), and
    this kind ran faster even on outputs 7 wide (GoogLeNet's 5x5s at 28, 14
    and 7: 9.8 -> 7.1 ms in all; ResNet-50's 3x3 stride-2 at 7x7).
FusedConvDepthwise (passes/pointwise_depthwise.py: a pointwise convolution and the
depthwise convolution that alone reads it) has an NCHW8c kernel here where both
would have theirs: compiled/nchwc_chain.py, the same bits as the two.
Shapes: X (N, C/8, H, W, 8), W (M, C/group, KH, KW) as ONNX gives it, B (M,),
Z (FusedConv's sum input) and Y (N, M/8, OH, OW, 8).

Widths: every kernel type here is registered at 8 lanes (NCHW8c, NCHW->NCHW8c) and at 16
(NCHW16c, NCHW->NCHW16c: compiled/lanes16's kernels, the same operations per channel, so the
same bits), with channel counts multiples of the block; read 8 above as the block. A Net's
assignment takes the kernel types of its width only (compiled/isa.py: the host's, AVX-512's 16).
At 16 lanes, channel counts that are multiples of 8 but not of 16 (MobileNetV2's and GoogLeNet's 24)
run blocked too, the last block half padding (blocked_channels: W and B padded with zero output
channels, the padding input channels never read, so the 8-lane kernels' sums and bits), where the
activation keeps 0 at 0, as onnxruntime's NchwcTransformer pads its filters; not on Winograd.
"""

from __future__ import annotations

import math
import os
from functools import partial

import numpy as np

from ..layouts import physical_shape
from ..registry import DEFAULT_LAYOUT, kernel
from ..shapes.conv import conv_geometry
from ..shapes.fused import DOMAIN, depthwise_chain_parts
from . import compiled, conv
from .compiled.codes import CODES, NONE, RANGE_CODES
from .compiled.widths import module as _width_module
from .conv import _readonly, winograd_geometry
from .conv_indirect import indirect_layout, phase_planes_fit
from .conv_shared import shared_weights
from .fused import Activation, _check, _compiled_params

LAYOUT = "NCHW8c"
BLOCK = 8
WIDTHS = (8, 16)
"""Blocks registered: NCHW8c and NCHW16c kernel types (compiled/isa.py: a Net takes its host's width's)."""
# Below the default kernel's 0 by more than two transforms' cost (passes/assign.py TRANSFORM_COST):
# a chain of two blocked convolutions pays for its way in and out.
PREFERENCE = -2
# POOLED_PREDICTOR_NCHWC=0 keeps every convolution in NCHW (A/B measurements, a suspected kernel bug)
ENABLED = os.environ.get("POOLED_PREDICTOR_NCHWC", "1") != "0"
# Stride-1 3x3 convolutions (group 1, dilation 1) run Winograd F(m x m, 3 x 3) in NCHW8c
# (compiled/nchwc_winograd.py), with the NCHW Winograd's channel minimums (conv.py: fewer input
# channels, and the transforms cost more than the GEMM saves). Single thread, F(4x4,3x3) vs the NCHW8c
# indirect GEMM or the NCHW Winograd the node took before, ResNet-50's shapes: 64 ch 56x56 1.75 vs 5.3 ms,
# 128 ch 28x28 1.63 vs 4.1, 256 ch 14x14 2.5 vs 3.8, 512 ch 7x7 3.1 vs 5.5.
# POOLED_PREDICTOR_WINOGRAD_NCHWC=0: those convolutions take the kernels they took before.
WINOGRAD = os.environ.get("POOLED_PREDICTOR_WINOGRAD_NCHWC", "1") != "0"
# Output tile m: F(4x4,3x3) (4x fewer multiplies, error below 1e-5 x max|Y| measured) or F(2x2,3x3)
# (2.25x, as exact as direct convolution; 1.3-1.9x slower here at ResNet-50's shapes)
WINOGRAD_TILE = 4
# ... with at least this many (input, output) channels: in NCHW8c (channels in blocks of 8) every such
# convolution, where conv.py's NCHW Winograd wants (16, 32). Single thread, each between two 1x1s so
# it runs blocked, the three convolutions' forward, F(4x4) vs the indirect GEMM: 64 -> 16 at 120x160
# (PP-OCR det's head) 16.8 -> 12.8 ms, 32 -> 8 5.5 -> 4.6, 8 -> 16 2.1 -> 1.8, 64 -> 24 at 60x80
# 5.4 -> 3.4, 32 -> 16 at 8x8 0.128 -> 0.063: 0.49-0.96x at every shape tried, 17 of them; error
# 2-4e-6 x max|Y| against onnxruntime.
WINOGRAD_MIN_CHANNELS = (8, 8)
# Not where an image has fewer F(4x4) output tiles than WINOGRAD_MIN_TILES and U (36 x M x C floats) takes
# more than WINOGRAD_MAX_U_BYTES: each of the 36 positions' GEMMs then streams its U[xi] for a few pixels from
# memory (U beyond what the last-level cache keeps), 4x the direct kernel's W, and that costs more than the
# multiplies saved. First found at 16 lanes (NCHW16c); Zen 5 (AVX-512, 32 MiB L3), one
# thread, in the model: ResNet-50's 512 -> 512 3x3 at 7x7 (4 tiles, U 36 MiB), F(4x4) vs the indirect kernel,
# 1.70-1.81 vs 1.25-1.32 ms at batch 1 (the forward 33.8 -> 32.0 and 33.6 -> 32.6 ms), 10.9-11.1 vs 8.7 at
# batch 8; GoogLeNet's 160 -> 320 and 192 -> 384 at 7x7 (U 7 and 10 MiB) 0.23 vs 0.26 and 0.33 vs 0.39:
# kept on Winograd; ResNet-50's 256 -> 256 at 14x14 (16 tiles) 0.64-0.71 vs 0.97-1.00. The same at 8 lanes
# (NCHW8c, the kernels compiled for Haswell on that Zen 5), since the indirect kernel's 8-lane gains: ResNet-50's
# 512 -> 512 at 7x7, one thread, F(4x4) 3.11 vs indirect 2.25 ms at batch 1 (the 8-lane rule was "every
# size takes Winograd", measured at 3.1 against 5.5 ms on the AVX2 EPYC with the indirect kernel of then), 14.3
# vs 15.8 at batch 8; through the pool at 2 workers (benchmarks/ab_checkouts.py, interleaved), the model
# 1.040x at batch 1 and 1.025x at batch 8 with these layers indirect, where two workers share the memory
# bandwidth that U's streaming takes.
# The bound is the host's, not Zen 5's constant: half its last-level cache (last_level_cache_bytes; 16 MiB
# of Zen 5's 32, between the U measured to win and to lose there), so that a host whose cache keeps a 36 MiB
# U keeps those layers on Winograd (the lent Xeon's cpu_check gave ResNet-50 at one worker 0.82x onnxruntime
# with them on Winograd, 0.69x after a fixed 16 MiB sent them indirect; not yet checked against its cache
# size). POOLED_PREDICTOR_WINOGRAD_MIN_TILES and
# POOLED_PREDICTOR_WINOGRAD_MAX_U_BYTES (bytes) override both, for an A/B on one machine
# (benchmarks/cpu_check.py --compare-winograd runs both choices side by side in one process).


def last_level_cache_bytes(default: int = 32 << 20) -> int:
    """The size of cpu0's highest-level data or unified cache, from Linux's /sys/devices/system/cpu (bytes);
    `default` where that cannot be read (another OS, a container without /sys)."""
    best = (0, 0)
    try:
        from pathlib import Path

        for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
            if (d / "type").read_text().strip() not in ("Data", "Unified"):
                continue
            size = (d / "size").read_text().strip().upper()
            unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
            best = max(best, (int((d / "level").read_text()), int(size.rstrip("KMG")) * unit))
    except (OSError, ValueError):
        return default
    return best[1] or default


WINOGRAD_MIN_TILES = int(os.environ.get("POOLED_PREDICTOR_WINOGRAD_MIN_TILES", "9"))
WINOGRAD_MAX_U_BYTES = int(os.environ.get("POOLED_PREDICTOR_WINOGRAD_MAX_U_BYTES", 0)) or last_level_cache_bytes() // 2
# Images transformed together (sharing each U[xi] while it is in cache) while their padded X,
# V and M take at most this many bytes (at least one image)
WINOGRAD_GROUP_BYTES = 2 << 20

PAD_CHANNELS = os.environ.get("POOLED_PREDICTOR_NCHWC_PAD", "1") != "0"
"""At blocks wider than PAD_UNIT (NCHW16c), convolutions whose channel counts are multiples of PAD_UNIT but
not of the block run blocked with the last block's padding channels zero (blocked_channels), as onnxruntime's
NchwcTransformer pads its filters: MobileNetV2's 24-channel blocks at 16 lanes ran NCHW, with a transform in
and out, 0.56 vs onnxruntime's 0.38 ms for features.3 alone (Zen 5, one thread). POOLED_PREDICTOR_NCHWC_PAD=0:
such convolutions keep NCHW (A/B)."""
PAD_UNIT = 8


def blocked_channels(n: int, block: int = BLOCK) -> int | None:
    """The channels a value of `n` logical channels takes in NCHW<block>c: n where block divides it, else, where
    PAD_UNIT does (and PAD_CHANNELS), n rounded up to the block (the padding channels are zero: ops/layouts.py);
    None where no blocked kernel here takes it."""
    if n % block == 0:
        return n
    if PAD_CHANNELS and n % PAD_UNIT == 0:
        return -(-n // block) * block
    return None


def _keeps_zero(activation, params) -> bool:
    """The activation maps 0 to 0 (so a padding channel, whose sum is 0, stays 0): Identity, Relu, LeakyRelu,
    HardSwish, Gelu, and Clip with min <= 0 <= max."""
    name = _name(activation) if activation is not None else "Identity"
    if name == "Clip":
        lo, hi = _compiled_params(name, [float(v) for v in params] + [float("-inf"), float("inf")][len(params):])
        return bool(lo <= 0 <= hi)
    return name in ("Identity", "Relu", "LeakyRelu", "HardSwish", "Gelu")


def _padded(g, block: int) -> tuple | None:
    """(C, M) as stored at `block` lanes (blocked_channels) for a geometry, or None where either has none."""
    c, m = blocked_channels(g.in_channels, block), blocked_channels(g.out_channels, block)
    return None if c is None or m is None else (c, m)


WINOGRAD_BLOCK_BYTES = 256 << 10
"""A block of tile rows of the Winograd kind (compiled/nchwc_winograd.py) keeps its V and M (a^2 x (C + M)
floats a tile) within this size, so they stay in L2 ..."""
WINOGRAD_BLOCK_MAX_U = 1 << 20
"""... where U (a^2 x M x C floats) is at most this size: every block streams all of U once, and a larger
U is read once for all the group's tiles instead (ResNet-50's 128- to 512-channel layers)."""


def winograd_block_rows(a: int, c: int, m: int, tiles_w: int, rows: int) -> int:
    """Tile rows per block of a Winograd call over `rows` rows of tiles_w tiles (see WINOGRAD_BLOCK_BYTES)."""
    if 4 * a * a * m * c > WINOGRAD_BLOCK_MAX_U:
        return rows
    return max(1, min(rows, WINOGRAD_BLOCK_BYTES // (4 * a * a * (c + m) * tiles_w)))


def _compiled_geometry(ctx):
    """The ConvGeometry of a 2-D float32 Conv/FusedConv node with static W (and B) and a non-empty
    output, while NCHW8c and compiled kernels are enabled; else None (the NCHW kernel runs it, and
    reports its shape errors)."""
    if not (ENABLED and compiled.active()) or np.dtype(ctx.dtype(0)) != np.float32 or len(ctx.shape(0)) != 4:
        return None
    if not ctx.is_static(1) or (ctx.has_input(2) and not ctx.is_static(2)):
        return None
    try:
        g = conv_geometry(ctx)
    except Exception:
        return None
    return g if g.batch * math.prod(g.out_shape) > 0 else None


def _bias_vector(ctx, m: int, stored: int = 0) -> np.ndarray:
    """B as a flat read-only float32 vector (stored,) (zeros without a bias, and after the M logical channels:
    stored, as blocked_channels gives it, defaults to M)."""
    b = np.zeros(max(m, stored), np.float32)
    if ctx.has_input(2):
        b[:m] = np.asarray(ctx.value(2), np.float32).reshape(m)
    return _readonly(b)


def _pad_rows(w: np.ndarray, block: int) -> np.ndarray:
    """W (M, ...) float32 with zero rows after M up to a multiple of `block` (W itself where block divides M)."""
    w = np.asarray(w, np.float32)
    m = w.shape[0]
    if m % block == 0:
        return w
    out = np.zeros((-(-m // block) * block,) + w.shape[1:], np.float32)
    out[:m] = w
    return out


def layout_of(block: int) -> str:
    """"NCHW<block>c"."""
    return f"NCHW{block}c"


def kernels(name: str, block: int = BLOCK):
    """The compiled module `name` (nchwc_gemm, nchwc_depthwise, nchwc_winograd, nchwc_chain) at `block`
    lanes (compiled/widths.py), imported on first use."""
    return _width_module(name, block)


def packed_weights(w: np.ndarray, m: int, block: int = BLOCK) -> np.ndarray:
    """W (M, C/group, KH, KW) as compiled/nchwc_gemm.py's panels of (M, C * KH * KW) at `block` lanes,
    once per weight array and width, shared read-only by every Net (pointwise, indirect and stem kernels); M not
    a multiple of the block: zero rows after it (blocked_channels' padding outputs)."""
    pack = kernels("nchwc_gemm", block).pack_weights
    return shared_weights(w, ("packed", layout_of(block)),
                          lambda w: pack(_pad_rows(np.asarray(w, np.float32).reshape(m, -1), block)))


def depthwise_weights(w: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """W (M, 1, KH, KW) packed by compiled/nchwc_depthwise.pack_depthwise at `block` lanes, once per weight
    array and width, shared read-only by every Net (the depthwise kernel and FusedConvDepthwise's alike); zero
    channels after M up to the block (blocked_channels)."""
    pack = kernels("nchwc_depthwise", block).pack_depthwise
    return shared_weights(w, ("depthwise", layout_of(block)), lambda w: pack(_pad_rows(w, block)))


def blocked_kind(ctx, block: int = BLOCK) -> str | None:
    """"pointwise", "depthwise", "winograd" or "indirect" when an NCHW<block>c kernel here implements this
    Conv/FusedConv node at its shapes, else None (the node keeps its NCHW kernel). Channel counts off the block
    (blocked_channels: padded) need an activation that keeps 0 at 0, and are not taken by Winograd."""
    g = _compiled_geometry(ctx)
    stored = None if g is None else _padded(g, block)
    if stored is None:
        return None
    padded = stored != (g.in_channels, g.out_channels)  # the last block's padding channels must stay 0
    if padded and not _keeps_zero(ctx.attr("activation"), ctx.attr("activation_params", ())):
        return None
    if g.group == 1 and g.kernel == (1, 1) and not any(g.pads_begin) and not any(g.pads_end):
        return "pointwise"  # any strides (strided: X subsampled first)
    if g.group == g.in_channels == g.out_channels:
        return "depthwise"
    if not padded and winograd_fits(g):
        return "winograd"
    if g.group == 1 and phase_planes_fit(g):
        return "indirect"
    return None


def winograd_fits(g) -> bool:
    """A stride-1 3x3 convolution (group 1, dilation 1) with enough channels for Winograd to pay, and
    enough output tiles an image or a small enough U (WINOGRAD_MIN_TILES); the same at both widths."""
    if not (WINOGRAD and winograd_geometry(g, WINOGRAD_MIN_CHANNELS)):
        return False
    m = WINOGRAD_TILE
    tiles = -(-g.out_shape[0] // m) * -(-g.out_shape[1] // m)
    u_bytes = 4 * (m + 2) ** 2 * g.in_channels * g.out_channels
    return tiles >= WINOGRAD_MIN_TILES or u_bytes <= WINOGRAD_MAX_U_BYTES


def winograd_weights(w: np.ndarray, m: int, block: int = BLOCK) -> np.ndarray:
    """U[xi] = (G W G^T)[xi] (compiled/winograd.py) for each of the (m+2)^2 positions, packed for the
    NCHW<block>c GEMM: (a^2, M * C) float32, read-only, once per weight array and width, shared by every Net."""
    pack_weights = kernels("nchwc_gemm", block).pack_weights

    def make(w):
        u = compiled.winograd.transform_weights(np.asarray(w, np.float32), m)
        packed = np.empty((u.shape[0], u.shape[1] * u.shape[2]), np.float32)
        for i in range(u.shape[0]):  # one position at a time (no second list of copies)
            packed[i] = pack_weights(u[i])
        packed.flags.writeable = False
        return packed

    return shared_weights(w, ("winograd", layout_of(block), m), make)


def _supported(ctx, block: int = BLOCK) -> bool:
    return blocked_kind(ctx, block) is not None


class _Steps:
    """A convolution run as a list of calls, _steps(x, out, z) -> [(function, arguments)]: run() makes
    them, prepare() binds them once (engine/layout.py: _prepared). Called as the Conv kernel (FusedConv overrides)."""

    def run(self, x, out, z=None):
        compiled.run_steps(self._steps(x, out, z))

    def prepare(self, x, out, z=None):
        """run(x, out, z) as one zero-argument call for these arrays, or None where an array is not
        C-contiguous (run()'s flat views of such an array are copies)."""
        if not all(a is None or a.flags.c_contiguous for a in (x, out, z)):
            return None
        return compiled.prepared(self._steps(x, out, z))

    def __call__(self, x, w, b=None, *, out):
        self.run(x, out)

    def prepare_run(self, x, w, b=None, *, out):
        return self.prepare(x, out)


class _BlockedConv(_Steps):
    """The shared part: geometry, packed weights, the compiled call (act fused where it can be).
    `block`: the width (8: NCHW8c; a subclass per width, _register)."""

    block = BLOCK

    def __init__(self, ctx):
        g = self.geo = conv_geometry(ctx)
        block = self.block
        self.kind = blocked_kind(ctx, block)
        if self.kind is None:
            raise ctx.error(f"no {layout_of(block)} kernel for this Conv (group {g.group}, kernel {g.kernel}, "
                            f"{g.in_channels} -> {g.out_channels} channels)")
        self.p = math.prod(g.out_shape)
        m, c = g.out_channels, g.in_channels
        # channels as stored (blocked_channels): the GEMMs read the C logical ones (offs) and write M padded by
        # zero rows of W and B
        self.cs, self.ms = _padded(g, block)
        w = np.asarray(ctx.value(1))
        gemm = kernels("nchwc_gemm", block)
        if self.kind == "pointwise":
            self.wp = packed_weights(w, m, block)
            self.offs = gemm.channel_offsets(c, self.p)
            self._gemm = gemm.gemm_nchwc
            # strided (ResNet's downsampling 1x1s): one image's X[:, ::SH, ::SW] copied out, then the GEMM over it
            self.sub = ctx.scratch((self.cs * self.p,), np.float32) if g.strides != (1, 1) else None
        elif self.kind == "winograd":
            self._init_winograd(ctx, w)
        elif self.kind == "indirect":
            self.wp = packed_weights(w, m, block)
            self.padded_hw, self.offs = padded_layout(g, block)
            hp, wp = self.padded_hw
            (sh, sw), (oh, ow) = g.strides, g.out_shape
            self.px = gemm.pixel_offsets(ow, oh, sw * block, sh * wp * block)  # narrow rows share micro-tiles
            self.padded = ctx.scratch((self.cs * hp * wp,), np.float32)  # one image's zero-padded X, blocked
            self._gemm_rows = gemm.gemm_nchwc_rows
        else:
            self.wp = depthwise_weights(w, block)
            (kh, kw), (sh, sw), (dh, dw), (ph, pw) = g.kernel, g.strides, g.dilations, g.pads_begin
            self.dw_args = (kh, kw, sh, sw, dh, dw, ph, pw)
            self._dw = kernels("nchwc_depthwise", block).depthwise_nchwc
        self.b = _bias_vector(ctx, m, self.ms)
        self.act = (NONE, np.float32(0), np.float32(0))

    def _init_winograd(self, ctx, w):
        g = self.geo
        c, m = g.in_channels, g.out_channels
        t = self.wino_m = WINOGRAD_TILE
        a = t + 2
        (oh, ow) = g.out_shape
        self.tiles_hw = (math.ceil(oh / t), math.ceil(ow / t))
        tiles = self.tiles_hw[0] * self.tiles_hw[1]
        hp, wp = self.padded_hw = (self.tiles_hw[0] * t + 2, self.tiles_hw[1] * t + 2)  # every tile's patch
        per_image = 4 * (a * a * (c + m) * tiles + c * hp * wp)
        self.group = max(1, min(g.batch, WINOGRAD_GROUP_BYTES // per_image))
        self.block_rows = winograd_block_rows(a, c, m, self.tiles_hw[1], self.group * self.tiles_hw[0])
        self.t_pitch = self.block_rows * self.tiles_hw[1]
        self.up = winograd_weights(w, t, self.block)
        self.offs = kernels("nchwc_gemm", self.block).channel_offsets(c, self.t_pitch)
        self.padded = ctx.scratch((self.group * c * hp * wp,), np.float32)
        self.v = ctx.scratch((a * a * c * self.t_pitch,), np.float32)
        self.mb = ctx.scratch((a * a * m * self.t_pitch,), np.float32)
        self.zero_b = _readonly(np.zeros(m, np.float32))
        self._winograd = kernels("nchwc_winograd", self.block).winograd_nchwc

    def _winograd_steps(self, x, yf, zf, has_z):
        """Groups of images: X copied into the zero-padded buffer, its borders zeroed each call (the scratch is
        shared; compiled/reorder.py's window_copy), then one compiled call (transforms and GEMMs)."""
        g = self.geo
        c, m = g.in_channels, g.out_channels
        (hp, wp), (ph, pw), (h, w), (oh, ow) = self.padded_hw, g.pads_begin, g.in_shape, g.out_shape
        pf, block = self.padded.array, self.block
        steps = []
        for n0 in range(0, g.batch, self.group):
            k = min(self.group, g.batch - n0)
            pad = pf[:k * c * hp * wp].reshape(k, c // block, hp, wp, block)
            steps.append((compiled.reorder.window_copy, (pad, x[n0:n0 + k], ph, pw, True)))
            steps.append((self._winograd, (pf, k, c, hp, wp, *self.tiles_hw, self.t_pitch, self.up, self.offs,
                                           self.v.array, self.mb.array, yf, n0 * m * oh * ow, m, oh, ow, self.b,
                                           self.zero_b, *self.act, zf, has_z, self.wino_m, self.block_rows)))
        return steps

    def _steps(self, x, out, z):
        """out = act(conv(x) + B (+ z)), every array NCHW<block>c (z: not depthwise): the calls, in order."""
        if self.kind == "depthwise":
            return [(self._dw, (x, self.wp, self.b, out, *self.dw_args, *self.act))]
        g, has_z, BLOCK = self.geo, z is not None, self.block  # noqa: N806 -- this kernel's block
        c, m = self.cs, self.ms  # as stored
        yf = out.reshape(-1)
        zf = self.b if z is None else np.ascontiguousarray(z).reshape(-1)  # Z indexed as Y
        if self.kind == "winograd":
            return self._winograd_steps(x, yf, zf, has_z)
        if self.kind == "pointwise":
            p = self.p
            if self.sub is None:
                xf = x.reshape(-1)
                return [(self._gemm, (self.wp, xf, n * c * p, self.offs, BLOCK, yf, n * m * p, BLOCK * p, m, p,
                                      self.b, *self.act, zf, has_z)) for n in range(g.batch)]
            (sh, sw), (oh, ow), sf = g.strides, g.out_shape, self.sub.array
            sub = sf.reshape(c // BLOCK, oh, ow, BLOCK)
            steps = []
            for n in range(g.batch):
                steps.append((compiled.reorder.window_copy, (sub[None], x[n:n + 1, :, :(oh - 1) * sh + 1:sh,
                                                                              :(ow - 1) * sw + 1:sw], 0, 0, False)))
                steps.append((self._gemm, (self.wp, sf, 0, self.offs, BLOCK, yf, n * m * p, BLOCK * p, m, p, self.b,
                                           *self.act, zf, has_z)))
            return steps
        # indirect: image by image, X zero-padded into the blocked buffer, then every output row in one call
        (hp, wp), (sh, sw), (ph, pw), (oh, ow) = self.padded_hw, g.strides, g.pads_begin, g.out_shape
        h, w = g.in_shape
        pf = self.padded.array
        pad = pf.reshape(c // BLOCK, hp, wp, BLOCK)
        y1, x1 = max(0, min(h, hp - ph)), max(0, min(w, wp - pw))  # X's rows and columns a tap reads
        steps = []
        for n in range(g.batch):  # the scratch is shared: its borders zeroed every call, with the first image
            steps.append((compiled.reorder.window_copy, (pad[None], x[n:n + 1, :, :y1, :x1], ph, pw, n == 0)))
            steps.append((self._gemm_rows, (self.wp, pf, 0, self.offs, sw * BLOCK, sh * wp * BLOCK, yf,
                                            n * m * oh * ow, ow * BLOCK, BLOCK * oh * ow, m, ow, oh, self.b,
                                            *self.act, zf, has_z, self.px)))
        return steps


def padded_layout(g, block: int = BLOCK):
    """The zero-padded blocked input of an indirect NCHW8c convolution and its tap offsets.

    Returns:
        ((HP, WP), offs): the padded plane's size, (OH - 1) * SH + (KH - 1) * DH + 1 rows by the
        same in columns (pads_begin before X; pads_end, or X's unread tail, cut or zero-filled), and
        offs (C * KH * KW,) read-only int64: tap k = (c, kh, kw)'s element offset from an output
        pixel's window origin in one image's (C/block, HP, WP, block) buffer, in the NCHW indirect
        kernel's k order (conv_indirect.indirect_layout), so the micro-kernel's sums are the same.
    """
    BLOCK = block  # noqa: N806
    (sh, sw), (dh, dw), (kh_n, kw_n), (oh, ow) = g.strides, g.dilations, g.kernel, g.out_shape
    hp, wp = (oh - 1) * sh + (kh_n - 1) * dh + 1, (ow - 1) * sw + (kw_n - 1) * dw + 1
    offs = np.asarray([(ci // BLOCK) * hp * wp * BLOCK + (kh * dh * wp + kw * dw) * BLOCK + ci % BLOCK
                       for ci in range(g.in_channels) for kh in range(kh_n) for kw in range(kw_n)], np.int64)
    offs.flags.writeable = False
    return (hp, wp), offs


class ConvNCHWc(_BlockedConv):
    """ONNX Conv (Conv-1/-11/-22) in NCHW<block>c: Y = X (*) W + B; see the module docstring for where."""

    def __init__(self, ctx, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
                 strides=None):
        super().__init__(ctx)


def fused_activation(ctx, activation, activation_params, in_kernel: bool, layout: str = LAYOUT,
                     over_blocks: bool = False):
    """FusedConv's activation for an NCHW<c>c kernel: (act, after). act: the (code, p0, p1) the compiled
    kernel applies to each block of Y while it is in cache (epilogue.py codes; NONE if not in_kernel or
    not compiled): CODES, and where the kernel's epilogue is epilogue.activate_range over stored blocks
    (over_blocks: the GEMM and Winograd kinds) codes.RANGE_CODES' too (Gelu); after: an Activation to
    apply in place over the blocked Y (in `layout`) afterwards, or None."""
    name = activation.decode() if isinstance(activation, bytes) else activation
    params = [float(v) for v in activation_params]
    if name in CODES and in_kernel:
        return (CODES[name], *_compiled_params(name, params)), None
    if name == "Gelu" and in_kernel and over_blocks:  # our domain's Gelu: p0 = sqrt(2) in float32
        return (RANGE_CODES[name], np.float32(np.sqrt(2.0)), np.float32(0)), None
    none = (NONE, np.float32(0), np.float32(0))
    if name == "Identity":
        return none, None
    return none, Activation(ctx, name, params, physical_shape(ctx.out_shapes[0], layout), ctx.out_dtypes[0])


def then_after(conv, after, out):
    """A prepared convolution followed by its `after` Activation over `out` (None: conv alone; None
    if conv is None)."""
    if conv is None or after is None:
        return conv
    return compiled.chain(conv, after.prepare(out))


def _fused_check(attrs, version):
    return _check(attrs, version)


class FusedConvNCHWc(_BlockedConv):
    """Our FusedConv (ops/shapes/fused.py) in NCHW<block>c: Y = act(X (*) W + B (+ Z)).

    The activations of compiled/epilogue.py run inside the kernel on each block of Y while it
    is in cache, after the bias and Z; any other (Sigmoid, Gelu...) runs after, in place over
    the blocked Y (its padding channels, where M is off the block, stay 0: blocked_kind takes those only with an
    activation that keeps 0 at 0).
    """

    def __init__(self, ctx, *, activation, activation_params=(), auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
        super().__init__(ctx)
        # Z inside the kernel for the GEMMs (after the bias, as the NCHW kernel's np.add after it); the
        # depthwise conv adds it after, then activates (the NCHW FusedConv's order: the same bits)
        self.z_inside = self.kind in ("pointwise", "indirect", "winograd")
        self.act, self.after = fused_activation(ctx, activation, activation_params,
                                                self.z_inside or not ctx.has_input(3), layout_of(self.block),
                                                over_blocks=self.z_inside)

    def __call__(self, x, w, b=None, z=None, *, out):
        if z is not None and not self.z_inside:
            self.run(x, out)
            np.add(out, z, out=out)
        else:
            self.run(x, out, z)
        if self.after is not None:
            self.after.apply(out)

    def prepare_run(self, x, w, b=None, z=None, *, out):
        if z is not None and not self.z_inside:
            conv = self.prepare(x, out)
            conv = conv and compiled.chain(conv, partial(np.add, out, z, out=out))
        else:
            conv = self.prepare(x, out, z)
        return then_after(conv, self.after, out)


# ---- a 1x1 convolution and the depthwise convolution reading it, fused ----------------
# FusedConvDepthwise (ops/shapes/fused.py) in NCHW<c>c: compiled/nchwc_chain.py computes the 1x1
# convolution's output T a group of output panels at a time, into a scratch of at most CHAIN_GROUP_BYTES
# (or one panel over the plane), and runs the depthwise convolution on it while it is in L2. The group
# size, one thread, MobileNetV2's pairs at batch 8 (tests in tests/ops/test_nchwc_chain.py): one panel
# was 2-4% slower than groups of 64 KB at 7x7 and 14x14; 32, 64 and 128 KB were within the noise.
CHAIN_GROUP_BYTES = 64 << 10


def chain_fits(ctx, block: int = BLOCK) -> bool:
    """Both convolutions of a FusedConvDepthwise node have their NCHW<block>c kernels (pointwise and
    depthwise kinds), with activations the compiled kernels apply in registers (epilogue.CODES, or Identity)."""
    if not all(_name(a) in CODES or _name(a) == "Identity"
               for a in (ctx.attr("activation"), ctx.attr("dw_activation"))):
        return False
    try:
        pw, dw = depthwise_chain_parts(ctx)
    except Exception:
        return False
    return blocked_kind(pw, block) == "pointwise" and blocked_kind(dw, block) == "depthwise"


def _name(activation) -> str:
    return activation.decode() if isinstance(activation, bytes) else str(activation)


class FusedConvDepthwiseNCHWc(_Steps):
    """Our FusedConvDepthwise in NCHW<block>c: Y = act2(depthwise(act1(W X + B (+ Z)), W_dw) + B_dw), T never
    stored whole (compiled/nchwc_chain.py); the same bits as the two FusedConv nodes in NCHW<block>c or NCHW.
    Preference: two blocked convolutions' (a chain through it pays for the same transforms as through them).
    """

    block = BLOCK

    def __init__(self, ctx, *, activation, activation_params=(), dw_activation, dw_activation_params=(),
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
        block = self.block
        pw, dw = depthwise_chain_parts(ctx)
        gp, gd = conv_geometry(pw), conv_geometry(dw)
        m, c = gp.out_channels, gp.in_channels
        ms = blocked_channels(m, block)  # T and Y as stored: M padded (zero rows of both W and B)
        h, w = gp.out_shape
        chain = kernels("nchwc_chain", block)
        self.wp = packed_weights(np.asarray(pw.value(1)), m, block)
        self.offs = kernels("nchwc_gemm", block).channel_offsets(c, h * w)
        self.b1 = _bias_vector(pw, m, ms)
        self.starts = chain.panel_starts(ms)
        self.wd = depthwise_weights(np.asarray(dw.value(1)), block)
        self.b2 = _bias_vector(dw, m, ms)
        self.scr = ctx.scratch((chain.scratch_size(ms, h, w, CHAIN_GROUP_BYTES),), np.float32)
        (kh, kw), (sh, sw), (dh, dw_), (ph, pw_) = gd.kernel, gd.strides, gd.dilations, gd.pads_begin
        self.geometry = (h, w, kh, kw, sh, sw, dh, dw_, ph, pw_)
        # chain_fits: both activations run in registers (no `after` pass)
        self.act1 = fused_activation(pw, activation, activation_params, True)[0]
        self.act2 = fused_activation(dw, dw_activation, dw_activation_params, True)[0]
        self._chain = chain.pointwise_depthwise_nchwc

    def _steps(self, x, out, z):
        zf = self.b1 if z is None else np.ascontiguousarray(z).reshape(-1)
        return [(self._chain, (self.wp, x.reshape(-1), self.offs, self.b1, *self.act1, zf, z is not None, self.starts,
                               self.scr.array, self.wd, self.b2, out, *self.geometry, *self.act2,
                               CHAIN_GROUP_BYTES))]

    def __call__(self, x, w, b=None, z=None, w_dw=None, b_dw=None, *, out):
        self.run(x, out, z)

    def prepare_run(self, x, w, b=None, z=None, w_dw=None, b_dw=None, *, out):
        return self.prepare(x, out, z)


# ---- NCHW in, NCHW<c>c out: a chain's first convolution ----------------------------
# The kernel type of a convolution reading NCHW and writing NCHW<c>c (onnxruntime's NCHWc
# transformer gives a chain's first conv, e.g. a network's 3-channel stem, NCHW input and
# blocked output, so no reorder of its large output is needed).
TO_BLOCKED = "NCHW->NCHW8c"
# One unit below the NCHW kernel: taken where its consumers read NCHW<c>c (no gain otherwise).
TO_BLOCKED_PREFERENCE = -1


def to_blocked_layout(block: int = BLOCK) -> str:
    """The kernel-type name of a convolution reading NCHW and writing NCHW<block>c."""
    return f"NCHW->{layout_of(block)}"


def to_blocked_fits(ctx, block: int = BLOCK) -> bool:
    """The node is a 2-D float32 group-1 Conv with static W (and B), C not blocked (blocked_channels),
    M % block == 0, that the
    NCHW kernel runs as an indirect GEMM of wide rows (conv.py: the same sums in the same order here,
    so the same bits); its output in NCHW<block>c."""
    g = _compiled_geometry(ctx)
    if g is None or not conv.INDIRECT_COMPILED:
        return False
    pointwise = g.kernel == (1, 1) and g.strides == (1, 1) and not any(g.pads_begin) and g.out_shape == g.in_shape
    # only where X cannot be blocked (C % block != 0: a network's stem): elsewhere a producer could
    # have written X blocked, and this kernel would pull the chain back to NCHW in front of it
    return (g.group == 1 < g.in_channels and blocked_channels(g.in_channels, block) is None and not pointwise
            and g.out_channels % block == 0 and g.out_shape[1] >= conv.INDIRECT_MIN_WIDTH)


class _ToBlockedConv(_Steps):
    """X (N, C, H, W) NCHW -> Y (N, M/block, OH, OW, block): the indirect GEMM of conv_indirect.py (X split
    into its zero-padded stride phases, a table of tap offsets) with the NCHW<block>c micro-kernel
    (compiled/nchwc_gemm.py) writing each output row's pixels as vectors of `block` output channels."""

    block = BLOCK

    def __init__(self, ctx):
        g = self.geo = conv_geometry(ctx)
        self.hq, self.wq, phases, self.offs = indirect_layout(g, g.in_channels)
        self.image = g.in_channels * len(phases) * self.hq * self.wq
        self.planes = ctx.scratch((g.batch * self.image,), np.float32)
        m = g.out_channels
        w = np.asarray(ctx.value(1))
        gemm = kernels("nchwc_gemm", self.block)
        self.wp = packed_weights(w, m, self.block)
        self.b = _bias_vector(ctx, m)
        self._gemm_rows, self._split = gemm.gemm_nchwc_rows, compiled.phases.split_phases
        self.px = gemm.pixel_offsets(g.out_shape[1], g.out_shape[0], 1, self.wq)
        self.act = (NONE, np.float32(0), np.float32(0))

    def _steps(self, x, out, z):
        g, block = self.geo, self.block
        (sh, sw), (ph, pw) = g.strides, g.pads_begin
        planes = self.planes.array
        oh, ow = g.out_shape
        m, yf = g.out_channels, out.reshape(-1)
        zf = self.b if z is None else np.ascontiguousarray(z).reshape(-1)
        # output rows: OW pixels one float apart in the phase planes, in one call per image
        return [(self._split, (np.ascontiguousarray(x), planes, self.hq, self.wq, sh, sw, ph, pw))] + [
            (self._gemm_rows, (self.wp, planes, n * self.image, self.offs, 1, self.wq, yf, n * m * oh * ow,
                               ow * block, block * oh * ow, m, ow, oh, self.b, *self.act, zf, z is not None, self.px))
            for n in range(g.batch)]


class ConvToNCHWc(_ToBlockedConv):
    """ONNX Conv (-1/-11/-22) reading NCHW and writing NCHW<block>c: see _ToBlockedConv and to_blocked_fits."""

    def __init__(self, ctx, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
                 strides=None):
        super().__init__(ctx)


class FusedConvToNCHWc(_ToBlockedConv):
    """Our FusedConv reading NCHW X and writing NCHW<block>c Y = act(X (*) W + B (+ Z)), Z in NCHW<block>c: the
    compiled activations and Z inside the micro-kernel (as conv.py's pointwise path), others after."""

    def __init__(self, ctx, *, activation, activation_params=(), auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
        super().__init__(ctx)
        self.act, self.after = fused_activation(ctx, activation, activation_params, True, layout_of(self.block),
                                                over_blocks=True)

    def __call__(self, x, w, b=None, z=None, *, out):
        self.run(x, out, z)
        if self.after is not None:
            self.after.apply(out)

    def prepare_run(self, x, w, b=None, z=None, *, out):
        return then_after(self.prepare(x, out, z), self.after, out)


def _at_width(cls, block: int):
    """cls with `block` lanes: cls itself at BLOCK, else a subclass named for the width (ConvNCHW16c)."""
    if block == BLOCK:
        return cls
    sub = type(cls.__name__.replace("NCHWc", f"NCHW{block}c"), (cls,), {"block": block, "__module__": __name__})
    sub.__qualname__ = sub.__name__
    return sub


def _register(block: int) -> dict:
    """Register the NCHW<block>c kernel types of Conv, FusedConv and FusedConvDepthwise, and the
    NCHW -> NCHW<block>c ones of Conv and FusedConv; returns name -> class."""
    layout = layout_of(block)
    blocked = dict(layout=layout, output_layouts=(layout,), preference=PREFERENCE,
                   supports=partial(_supported, block=block))
    to = dict(layout=to_blocked_layout(block), output_layouts=(layout,), preference=TO_BLOCKED_PREFERENCE,
              supports=partial(to_blocked_fits, block=block))
    made = {cls.__name__: _at_width(cls, block) for cls in (ConvNCHWc, FusedConvNCHWc, FusedConvDepthwiseNCHWc,
                                                              ConvToNCHWc, FusedConvToNCHWc)}
    kernel("Conv", since=(1, 11, 22), input_layouts=(layout, None, None), **blocked)(made["ConvNCHWc"])
    kernel("FusedConv", since=1, domain=DOMAIN, check=_fused_check, input_layouts=(layout, None, None, layout),
           **blocked)(made["FusedConvNCHWc"])
    kernel("FusedConvDepthwise", since=1, domain=DOMAIN, input_layouts=(layout, None, None, layout, None, None),
           layout=layout, output_layouts=(layout,), preference=2 * PREFERENCE,
           supports=partial(chain_fits, block=block))(made["FusedConvDepthwiseNCHWc"])
    kernel("Conv", since=(1, 11, 22), input_layouts=(DEFAULT_LAYOUT, None, None), **to)(made["ConvToNCHWc"])
    kernel("FusedConv", since=1, domain=DOMAIN, check=_fused_check, input_layouts=(DEFAULT_LAYOUT, None, None, layout),
           **to)(made["FusedConvToNCHWc"])
    return made


KERNELS = {block: _register(block) for block in WIDTHS}
"""block -> the registered kernel classes at that width (8: this module's classes themselves)."""
