"""The ops between convolutions in the blocked layout NCHW8c, so conv chains stay blocked.

A convolution chain that leaves NCHW8c for an activation, a residual Add, a
squeeze-and-excitation Mul or its GlobalAveragePool pays two layout
transforms (passes/assign.py counts them): onnxruntime's NchwcTransformer
keeps these ops in the blocked layout for the same reason. Here:

* element-wise activations (Relu, Sigmoid, HardSigmoid, HardSwish, Clip,
  LeakyRelu, Tanh, Gelu) run their NCHW kernels unchanged over the
  blocked array: with C % 8 == 0 there are no padding channels, so the
  blocked array holds exactly X's elements;
* Add, Sub, Mul whose inputs are 4-D with the same C (a multiple of 8),
  broadcasting over N, H, W only, or one-element constants: numpy's
  broadcasting over the blocked arrays (N, C/8, H, W, 8) pairs the same
  elements as over NCHW;
* GlobalAveragePool and ReduceMean over axes [2, 3] with keepdims: the mean
  of each (block, lane) over the H x W pixels (compiled/blocked.py);
* Concat along C (the inputs' blocks in order), nearest Resize over H, W (the
  NCHW kernel's index tables), 2-D MaxPool without Indices.

Each is registered under layouts "NCHW8c" and "NCHW16c" (ops/registry.py; the
16-lane kernels are compiled/lanes16's, compiled/widths.py) for every version
of its NCHW kernel, with a `supports(ctx)` that checks the shapes; element-wise
ops register the NCHW kernel itself, class kernels getting a context whose
shapes are the physical (blocked) ones, for their workspace. Every one gives
the NCHW kernel's bits.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from .. import registry
from ..layouts import physical_shape
from ..registry import kernel
from ..shapes.fused import DOMAIN
from ..shapes.pooling import pool_geometry
from . import activation, elementwise, fused, math as _math, pooling, reduce, resize, tensor  # noqa: F401  (theirs first)
from . import compiled
from . import conv_nchwc
from .compiled.widths import module as _width_module
from .conv_nchwc import LAYOUT, WIDTHS, layout_of
from .resize import Resize

BLOCK = 8


def kernels(block: int = BLOCK):
    """compiled/blocked.py at `block` lanes (compiled/widths.py), imported on first use."""
    return _width_module("blocked", block)
UNARY = [("", "Relu"), ("", "Sigmoid"), ("", "HardSigmoid"), ("", "HardSwish"), ("", "Clip"), ("", "LeakyRelu"),
         ("", "Tanh"), ("", "Gelu"), (DOMAIN, "Gelu"), (DOMAIN, "HardSwish")]
BINARY = [("", "Add"), ("", "Sub"), ("", "Mul")]
MAX_CONCAT_INPUTS = 64  # inputs a blocked Concat takes (each declared NCHW8c)
# passes/assign.py's preferences: memory-bound ops (element-wise, Concat, Resize) run as fast in either
# layout, so they only follow their inputs' layout (0: a tie keeps NCHW); pooling gains (MaxPool: a
# vector per tap, 5x the NCHW kernel on ResNet-50's stem) a little, less than a transform's cost
FOLLOW = 0
POOL_PREFERENCE = -1


def _blockable(shape, block: int = BLOCK) -> bool:
    return len(shape) == 4 and shape[1] % block == 0 and shape[1] > 0


def _on() -> bool:
    return conv_nchwc.ENABLED and compiled.active()


def _unary_supported(ctx, block: int = BLOCK) -> bool:
    return _on() and np.dtype(ctx.dtype(0)) == np.float32 and _blockable(ctx.shape(0), block)


def _binary_supported(ctx, block: int = BLOCK) -> bool:
    if not _on() or np.dtype(ctx.dtype(0)) != np.float32:
        return False
    channels = set()
    for i in range(2):
        shape = tuple(ctx.shape(i))
        if ctx.is_static(i):  # read as stored: only a one-element constant broadcasts the same way
            if int(np.prod(shape)) != 1:
                return False
            continue
        if not _blockable(shape, block):
            return False
        channels.add(shape[1])
    return len(channels) == 1


class _PhysicalContext:
    """An OpContext whose input and output shapes are the physical NCHW<c>c ones (for workspace)."""

    def __init__(self, ctx, blocked_inputs, layout: str = LAYOUT):
        self._ctx, self._blocked, self._layout = ctx, set(blocked_inputs), layout

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def shape(self, i):
        s = self._ctx.shape(i)
        return physical_shape(s, self._layout) if i in self._blocked and not self._ctx.is_static(i) else s

    @property
    def out_shapes(self):
        return [physical_shape(s, self._layout) for s in self._ctx.out_shapes]


def _physical_class(impl, blocked_inputs, layout: str = LAYOUT):
    """A kernel class running `impl` built over physical shapes (in `layout`)."""

    class Blocked:
        def __init__(self, ctx, **attrs):
            self.inner = impl(_PhysicalContext(ctx, blocked_inputs, layout), **attrs)

        def __call__(self, *args, **kwargs):
            return self.inner(*args, **kwargs)

        def prepare_run(self, *args, out):
            prepare = getattr(self.inner, "prepare_run", None)
            return None if prepare is None else prepare(*args, out=out)

    Blocked.__name__ = Blocked.__qualname__ = f"{impl.__name__}{'NCHWc' if layout == LAYOUT else layout}"
    Blocked.__doc__ = f"{impl.__name__} over {layout} arrays (ops/cpu/blocked.py)."
    return Blocked


def _register_like(op: str, impl, supports, preference: int, n_blocked: int, domain: str = "",
                   block: int = BLOCK) -> None:
    """Register in NCHW<block>c, for every version of op's NCHW cpu kernel, with its inplace and check:
    impl(NCHW KernelDef, block) -> the blocked implementation of that version; its first n_blocked inputs
    NCHW<block>c (the rest as stored); supports(ctx, block)."""
    layout = layout_of(block)
    for version, k in sorted(registry.versions(op, domain).items()):
        kernel(op, since=version, domain=domain, inplace=k.inplace, check=k.check, layout=layout,
               input_layouts=(layout,) * n_blocked,
               output_layouts=(layout,), preference=preference,
               supports=partial(supports, block=block))(impl(k, block))


def _same_kernel(k, block):
    """The NCHW kernel itself over the blocked arrays (a class built over the physical shapes)."""
    return _physical_class(k.impl, (0,), layout_of(block)) if k.is_class else k.impl


def _at_width(cls):
    """cls at a block: cls itself at BLOCK, else a subclass with `block` set (e.g. SpatialMean16)."""
    def make(k, block):
        if block == BLOCK:
            return cls
        return type(f"{cls.__name__}{block}", (cls,), {"block": block, "__module__": __name__})
    return make


for _b in WIDTHS:
    for _domain, _op in UNARY:
        _register_like(_op, _same_kernel, _unary_supported, FOLLOW, 1, _domain, _b)


class _OneCall:
    """A kernel that is one call on flat views of its arrays: _call(x, *rest, out) -> (function,
    arguments). Called per forward, or bound once (prepare_run; engine/layout.py: _prepared) where X and Y
    are C-contiguous (their flat views are views)."""

    def __call__(self, x, *rest, out):
        fn, args = self._call(x, *rest, out=out)
        fn(*args)

    def prepare_run(self, x, *rest, out):
        y = out[0] if isinstance(out, tuple) else out
        if not all(a.flags.c_contiguous for a in (x, y, *rest) if isinstance(a, np.ndarray)):
            return None
        fn, args = self._call(x, *rest, out=out)
        return compiled.bound(fn, *args)


class BlockedBinary(_OneCall):
    """Add, Sub, Mul over NCHW8c inputs (ONNX Add/Sub/Mul-7/-13/-14, multidirectional broadcasting).

    X (N, C/8, H, W, 8) with a per-channel operand (N or 1, C/8, 1, 1, 8) -- a squeeze-and-excitation
    scale -- runs compiled/blocked.py's channel_op (numpy's broadcast over an inner axis of 8 ran at
    a third of its NCHW speed); every other pairing, numpy's broadcasting over the blocked arrays.
    The same float32 operation per element either way.
    """

    _OPS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}
    block = BLOCK

    def __init__(self, ctx, **attrs):
        BLOCK, kernels_ = self.block, kernels(self.block)  # noqa: N806 -- this kernel's block
        op = ctx.node.op_type
        self.ufunc = self._OPS[op]
        self.compiled = None
        out = tuple(ctx.out_shapes[0])
        a, b = (tuple(ctx.shape(i)) for i in range(2))
        for full, vec, swapped in ((a, b, False), (b, a, True)):
            if (full == out and not ctx.is_static(int(swapped)) and not ctx.is_static(int(not swapped))
                    and len(vec) == 4 and vec[2:] == (1, 1) and vec[1] == out[1] and vec[0] in (1, out[0])):
                code = {"Add": kernels_.ADD, "Mul": kernels_.MUL,
                        "Sub": kernels_.RSUB if swapped else kernels_.SUB}[op]
                n, c, h, w = out
                self.compiled = (kernels_.channel_op, swapped, n * c // BLOCK, h * w, vec[0] * c // BLOCK, code)
                break

    def _call(self, a, b, *, out):
        if self.compiled is None:
            return self.ufunc, (a, b, out)
        fn, swapped, rows, pixels, s_rows, code = self.compiled
        x, s = (b, a) if swapped else (a, b)
        return fn, (x.reshape(-1), s.reshape(-1), out.reshape(-1), rows, pixels, s_rows, code)


for _b in WIDTHS:
    for _domain, _op in BINARY:
        _register_like(_op, _at_width(BlockedBinary), _binary_supported, FOLLOW, 2, _domain, _b)


# ---- spatial means ---------------------------------------------------------------
def _mean_axes(ctx):
    """ReduceMean's axes (attribute, or the static input from ReduceMean-18), or None if unknown."""
    axes = ctx.attr("axes")
    if axes is None and ctx.has_input(1):
        if not ctx.is_static(1):
            return None
        axes = [int(a) for a in np.asarray(ctx.value(1)).reshape(-1)]
    return None if axes is None else sorted(int(a) % 4 for a in axes)


def _mean_supported(ctx, block: int = BLOCK) -> bool:
    if not (_unary_supported(ctx, block)):
        return False
    if ctx.node.op_type == "GlobalAveragePool":
        return True
    return _mean_axes(ctx) == [2, 3] and int(ctx.attr("keepdims", 1)) == 1


class SpatialMean(_OneCall):
    """Y = mean of X over H, W; X (N, C/8, H, W, 8) NCHW8c float32, Y (N, C/8, 1, 1, 8).

    GlobalAveragePool (ONNX GlobalAveragePool-1/-22) and ReduceMean axes [2, 3],
    keepdims 1, in NCHW8c: compiled/blocked.py, in compiled/rowreduce.py's summation order (the bits
    of the NCHW kernels).
    """

    block = BLOCK

    def __init__(self, ctx, **attrs):
        n, c, h, w = ctx.shape(0)
        self.rows, self.pixels = n * c // self.block, h * w
        self.scale = 1.0 / max(1, self.pixels)  # sum_rows' scale for a mean (ops/cpu/reduce.py, pool.py)
        self._mean = kernels(self.block).pixel_mean
        self.acc = ctx.scratch((128,), np.float32)
        self.tot = ctx.scratch((self.block,), np.float64)

    def _call(self, x, *rest, out):
        return self._mean, (x.reshape(-1), out.reshape(-1), self.rows, self.pixels, self.scale, self.acc.array,
                            self.tot.array)


for _b in WIDTHS:
    _register_like("GlobalAveragePool", _at_width(SpatialMean), _mean_supported, POOL_PREFERENCE, 1, "", _b)
    _register_like("ReduceMean", _at_width(SpatialMean), _mean_supported, POOL_PREFERENCE, 1, "", _b)


# ---- Concat over channels, nearest Resize over H, W --------------------------------
def _concat_supported(ctx, block: int = BLOCK) -> bool:
    if not _on() or not 1 <= ctx.num_inputs <= MAX_CONCAT_INPUTS or int(ctx.attr("axis", 1)) % 4 != 1:
        return False
    return all(ctx.has_input(i) and not ctx.is_static(i) and _blockable(ctx.shape(i), block)
               and np.dtype(ctx.dtype(i)) == np.float32 for i in range(ctx.num_inputs))


def concat_blocks(*inputs, out, axis):
    """Concat along C of NCHW8c inputs whose C are multiples of 8: their blocks, in order (axis 1 of
    the physical arrays). ONNX Concat-4/-11/-13."""
    np.concatenate(inputs, axis=1, out=out)


concat_blocks.prepare_run = lambda *inputs, out, axis: partial(np.concatenate, inputs, axis=1, out=out)
for _b in WIDTHS:
    _register_like("Concat", lambda k, block: concat_blocks, _concat_supported, FOLLOW, MAX_CONCAT_INPUTS, "", _b)


def _nearest_plan(ctx):
    """(ih, iw) of a nearest Resize over H, W only (ops/cpu/resize.py's tables), else None."""
    try:
        inner = Resize(ctx, **ctx.attrs)
    except Exception:
        return None
    c = inner.compiled
    if inner.copy or c is None or c[0] != "nearest" or inner.out_shape[:2] != inner.in_shape[:2]:
        return None
    return c[2][0], c[2][1]


def _resize_supported(ctx, block: int = BLOCK) -> bool:
    return _unary_supported(ctx, block) and _nearest_plan(ctx) is not None


class ResizeNearest(_OneCall):
    """ONNX Resize, mode "nearest", over H and W of NCHW8c X (N, C/8, H, W, 8): the NCHW kernel's
    index tables (ops/cpu/resize.py, every coordinate and nearest mode), one vector copy per pixel."""

    block = BLOCK

    def __init__(self, ctx, **attrs):
        self.ih, self.iw = _nearest_plan(ctx)
        n, c, self.h, self.w = ctx.shape(0)
        self.rows = n * c // self.block
        self._nearest = kernels(self.block).nearest

    def _call(self, x, *rest, out):
        return self._nearest, (x.reshape(-1), out.reshape(-1), self.ih, self.iw, self.rows, self.h, self.w)


for _b in WIDTHS:
    _register_like("Resize", _at_width(ResizeNearest), _resize_supported, FOLLOW, 1, "", _b)


# ---- MaxPool ---------------------------------------------------------------------
def _maxpool_supported(ctx, block: int = BLOCK) -> bool:
    if not _unary_supported(ctx, block) or ctx.has_output(1):  # Indices: NCHW's flat indices, the NCHW kernel
        return False
    try:
        return len(pool_geometry(ctx)) == 2
    except Exception:
        return False


class MaxPoolBlocked(_OneCall):
    """ONNX MaxPool (-8/-10/-11/-12/-22, 2-D, no Indices output) over NCHW8c X (N, C/8, H, W, 8):
    each window's input taps, eight channels a vector (onnxruntime's NCHWc MaxPool); the geometry
    (pads, auto_pad, ceil_mode, dilations) of ops/shapes/pooling.py. Max is exact: the NCHW kernel's values."""

    block = BLOCK

    def __init__(self, ctx, **attrs):
        gh, gw = pool_geometry(ctx)
        n, c, h, w = ctx.shape(0)
        self.args = (n * c // self.block, h, w, gh.out, gw.out, gh.kernel, gw.kernel, gh.stride, gw.stride,
                     gh.dilation, gw.dilation, gh.head, gw.head, np.finfo(np.float32).min)
        self._pool = kernels(self.block).maxpool

    def _call(self, x, *, out):
        return self._pool, (x.reshape(-1), (out[0] if isinstance(out, tuple) else out).reshape(-1), *self.args)


for _b in WIDTHS:
    _register_like("MaxPool", _at_width(MaxPoolBlocked), _maxpool_supported, POOL_PREFERENCE, 1, "", _b)
