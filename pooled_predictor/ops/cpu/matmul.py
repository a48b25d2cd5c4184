"""Matrix-product CPU kernels: MatMul (numpy.matmul semantics) and our MatMulAdd (MatMul + bias).

Three paths, chosen once when the kernel is built:

* numpy -- np.matmul into Y (OpenBLAS sgemm per batch), then + C in place for
  MatMulAdd. Every dtype, every broadcast; the tested reference.
* compiled (float32, B a 2-D weight, A C-contiguous at call) -- A's batch dims
  collapse into rows, A (R, K) @ B (K, N) with Y rows of N contiguous:
  compiled/matmul.py's packed-panel GEMM, B (and MatMulAdd's bias, as one
  more row) packed once into 16-column panels (32 at 16 lanes: compiled/isa.py's
  lanes() when the kernel is built) shared by every thread, A read
  where it lies, the bias added after the sum. Nothing allocated per call
  (the last panel's tile is per-Net scratch). PP-OCR rec's (1, 40, 80) @
  (80, 6906) + c: 1.19-1.21 ms, onnxruntime's MatMul 1.18-1.21 plus its Add,
  OpenBLAS 1.57-1.66 (one thread; benchmarks/node_kernels.py).
* compiled, B an activation (float32, A (..., M, K) and B (..., K, N) of the same
  batch dims, C-contiguous at call): compiled/matmul.py's matmul_rows8 / 16, the
  same micro-kernels with B read in place (ActivationProduct: the rule that
  ScaledDotProductAttention's products follow too, for the same bits). ViT-B/16's
  12 heads of Q K^T, one thread, at 16 lanes: 0.28 ms against OpenBLAS's 0.50.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..registry import kernel
from ..shapes.fused import DOMAIN
from . import compiled
from .compiled import isa
from .conv_shared import shared_weights

# The compiled path where it measured at least as fast as OpenBLAS (one thread, OpenBLAS
# warmed by a large GEMM first; rows 2 to 1024, K 64 to 1280, N 64 to 6906): A of at least
# 2 rows (one row is a GEMV: the micro-kernel's 2 multiply-add chains cannot hide their
# latency, 0.19 ms against OpenBLAS's 0.14 at 1280 x 1000; 2 or 3 rows: 0.3x OpenBLAS's
# time) and a product large enough that one call (~4 us) does not dominate it (8 x 64 @
# 64 x 64: 0.93x). Inside a model that runs no large BLAS GEMM, OpenBLAS's small products
# run ~2.5x slower than warmed (PP-OCR rec's (40, 160) @ (160, 80): 0.087 ms in-model
# against 0.034 warmed; ours 0.028 either way).
COMPILED_MIN_ROWS = 2
COMPILED_MIN_FLOPS = 1 << 16
# ... and one row (a GEMV) over a weight of at most this many elements, bound once (a prepared call:
# no dispatch per call), where the call's overhead outweighs the latency chains: [1, 64] @ [64, 64]
# 0.55 against OpenBLAS's 1.29 us, [1, 128] @ [128, 512] 4.7 against 7.0; [1, 256] @ [256, 512]
# 13.7 against 12.0 (one thread, measured)
GEMV_COMPILED_MAX_WEIGHT = 1 << 16
# ... and at 16 lanes (matmul_const16's 8 x 32 tiles) over a weight of at most this many elements: in the model,
# where the weight comes from the last-level cache after the convolutions, the classifiers' [1, K] @ [K, 1000]
# ran 0.09-0.11 ms against OpenBLAS's 0.15-0.19 (MobileNetV2's K = 1280; GoogLeNet's 1024 0.11 vs 0.18;
# ResNet-50's 2048 0.22 vs 0.33; Zen 5, one thread, each Net's profile), though a hot loop over the one product
# favours OpenBLAS (63 vs 49 us at 1280). Bounded so that a far larger weight (VGG's 25088 x 4096) is not
# packed a second time for one row.
GEMV16_COMPILED_MAX_WEIGHT = 1 << 22


# ... and, for a product of two activations (ActivationProduct), N whose last, zero-padded panel wastes at
# most 1/ACTIVATION_MAX_PAD of the columns computed: the tile of the padded columns costs a full one (one
# thread, batched; matmul_rows16 / 8 vs numpy.matmul (OpenBLAS) at 16 / 8 lanes: ViT's 12 x (197 x 64 @ 64 x 197,
# 224 columns computed) 0.28 / 0.48 ms vs 0.50, and 12 x (197 x 197 @ 197 x 64) 0.24 / 0.43 vs 0.49; Swin's
# 192 x (49 x 32 @ 32 x 49, 64 computed) 0.38 / 0.37 vs 0.30, and 192 x (49 x 49 @ 49 x 32) 0.12 / 0.22 vs 0.29)
ACTIVATION_MAX_PAD = 8


def BIAS_SHAPES(n: int) -> tuple:  # noqa: N802 -- a table, computed
    """The shapes of a bias over a last axis of n: added to Y (..., n) it is one value per column."""
    return ((n,), (1, n), (1,), (1, 1), ())


class ConstRightProduct:
    """Y = A @ B (+ c) on the compiled path (compiled/matmul.py), B a 2-D float32 weight.

    Built by `build` when the path applies; calling it runs the product into `out`
    and returns True, or returns False (nothing written) when A or Y is not
    C-contiguous at that call, for the caller's numpy path. `lanes`: the kernel's vector width,
    compiled/isa.py's lanes() at the build (16: matmul_const16's 8 x 32 tiles of <16 x float>,
    8: matmul_const's 6 x 16 of <8 x float>); the two give the same bits.
    """

    __slots__ = ("rows", "k_n", "n_n", "bias", "x", "ws_ref", "run", "lanes")

    @classmethod
    def build(cls, ctx, a_shape, a_dtype, b, c=None, trans_b=False, owner=None, min_rows=None, min_flops=None):
        """The product for A of `a_shape` (..., K) and B (K, N) (B.T when trans_b), c a bias
        of N ((N,), (1, N), (1,), (1, 1) or ()) or None; None where the path does not apply.

        B's panels (with c) are computed once per weight and shared by every Net: keyed by the
        arrays b and c themselves, or, where they are views made per kernel (a Conv's W reshaped),
        by owner = (the Program's weight arrays they view, e.g. (W, B) or (W,)). min_rows, min_flops:
        the smallest product taken (None: COMPILED_MIN_ROWS, _FLOPS, or one row over a weight of at
        most GEMV_COMPILED_MAX_WEIGHT elements, GEMV16_COMPILED_MAX_WEIGHT at 16 lanes: where it measured at
        least as fast as OpenBLAS).
        """
        if not compiled.active() or b is None or b.ndim != 2 or len(a_shape) < 1:
            return None
        bt = b.T if trans_b else b
        k_n, n_n = bt.shape
        if (np.dtype(a_dtype) != np.float32 or b.dtype != np.float32
                or (c is not None and (c.dtype != np.float32 or tuple(c.shape) not in BIAS_SHAPES(n_n)))):
            return None
        rows = int(np.prod(a_shape[:-1], dtype=np.int64))
        gemv_max = GEMV16_COMPILED_MAX_WEIGHT if isa.lanes() == 16 else GEMV_COMPILED_MAX_WEIGHT
        if min_rows is None and rows == 1 and k_n * n_n <= gemv_max:
            min_rows, min_flops = 1, 0
        min_rows = COMPILED_MIN_ROWS if min_rows is None else max(min_rows, 1)
        min_flops = COMPILED_MIN_FLOPS if min_flops is None else min_flops
        if k_n == 0 or n_n == 0 or rows < min_rows or 2 * rows * k_n * n_n < min_flops:
            return None
        self = cls()
        mm = compiled.matmul
        self.lanes = 16 if isa.lanes() == 16 else 8
        panel, scratch = (mm.PANEL16, mm.scratch_size16()) if self.lanes == 16 else (mm.PANEL, mm.scratch_size())
        self.rows, self.k_n, self.n_n, self.bias = rows, k_n, n_n, c is not None
        if mm.BLOCKED:  # K and rows in cache-sized blocks where A is large (Intel hosts; compiled/matmul.py)
            self.run = mm.matmul_const16_blocked if self.lanes == 16 else mm.matmul_const_blocked
        else:
            self.run = mm.matmul_const16 if self.lanes == 16 else mm.matmul_const
        cb = None if c is None else np.broadcast_to(np.asarray(c, np.float32).reshape(-1), (n_n,))
        if owner is not None:
            key = ("matmul_panels", tuple(id(o) for o in owner[1:]), trans_b, b.shape, panel)
            self.x = shared_weights(owner[0], key, lambda _: mm.pack_right(bt, cb, panel))
        elif c is None:
            self.x = shared_weights(b, ("matmul_panels", trans_b, panel), lambda _: mm.pack_right(bt, None, panel))
        else:
            self.x = shared_weights(c, ("matmul_panels", id(b), trans_b, panel), lambda _: mm.pack_right(bt, cb, panel))
        self.ws_ref = ctx.scratch((scratch,), np.float32)
        return self

    def __call__(self, a, out) -> bool:
        if not (a.flags.c_contiguous and out.flags.c_contiguous):
            return False
        self.run(a.reshape(-1), self.rows, self.k_n, self.bias, self.x, out.reshape(-1), self.n_n,
                 self.ws_ref.array)
        return True

    def prepare(self, a, out):
        """self(a, out) as one zero-argument call for these arrays (engine/layout.py: _prepared), or None where
        it would return False."""
        if not (a.flags.c_contiguous and out.flags.c_contiguous):
            return None
        return compiled.bound(self.run, a.reshape(-1), self.rows, self.k_n, self.bias, self.x, out.reshape(-1),
                              self.n_n, self.ws_ref.array)


class ActivationProduct:
    """Y = A @ B on the compiled path (compiled/matmul.py: matmul_rows8, matmul_rows16) for B an activation: float32 A
    (..., M, K) and B (..., K, N) of the same batch dimensions, B read where it lies (no packing but its
    last, partial panel), at compiled/isa.py's lanes() when built (both widths give the same bits).

    The one rule for every product of two activations that the graph's nodes compute (MatMul, MatMulAdd,
    ScaledDotProductAttention's two products): a fused node and the nodes it replaces take the same path
    for the same shapes, so they give the same bits. Built by `build` where it applies (compiled kernels
    active, products of at least COMPILED_MIN_ROWS rows and COMPILED_MIN_FLOPS); calling it runs the
    product and returns True, or returns False (nothing written) when an operand is not C-contiguous at
    that call, for the caller's numpy.matmul.
    """

    __slots__ = ("batch", "m_n", "k_n", "n_n", "wide", "ws_ref")

    @classmethod
    def build(cls, ctx, a_shape, b_shape, dtype):
        """The product of A (a_shape) and B (b_shape), both `dtype`; None where the path does not apply."""
        a_shape, b_shape = tuple(a_shape), tuple(b_shape)
        if (not compiled.active() or np.dtype(dtype) != np.float32 or len(a_shape) < 2
                or len(a_shape) != len(b_shape) or a_shape[:-2] != b_shape[:-2] or a_shape[-1] != b_shape[-2]):
            return None
        m_n, k_n, n_n = a_shape[-2], a_shape[-1], b_shape[-1]
        if m_n < COMPILED_MIN_ROWS or k_n == 0 or n_n == 0 or 2 * m_n * k_n * n_n < COMPILED_MIN_FLOPS:
            return None
        wide = isa.lanes() == 16
        width = compiled.matmul.PANEL16 if wide else compiled.matmul.PANEL
        padded = -(-n_n // width) * width
        if (padded - n_n) * ACTIVATION_MAX_PAD > padded:
            return None
        self = cls()
        self.batch = int(np.prod(a_shape[:-2], dtype=np.int64))
        self.m_n, self.k_n, self.n_n = m_n, k_n, n_n
        self.wide = wide
        self.ws_ref = ctx.scratch((compiled.matmul.rows_scratch_size(k_n, 16 if self.wide else 8),), np.float32)
        return self

    def _kernel(self):
        return compiled.matmul.matmul_rows16 if self.wide else compiled.matmul.matmul_rows8

    def _ok(self, a, b, out) -> bool:
        return a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous

    def __call__(self, a, b, out) -> bool:
        if not self._ok(a, b, out):
            return False
        self._kernel()(a.reshape(-1), b.reshape(-1), out.reshape(-1), self.batch, self.m_n, self.k_n, self.n_n,
                       self.ws_ref.array)
        return True

    def prepare(self, a, b, out):
        """self(a, b, out) as one zero-argument call for these arrays, or None where it would return False."""
        if not self._ok(a, b, out):
            return None
        return compiled.bound(self._kernel(), a.reshape(-1), b.reshape(-1), out.reshape(-1), self.batch, self.m_n,
                              self.k_n, self.n_n, self.ws_ref.array)


def matmul_into(product, a, b, out) -> None:
    """out = a @ b: `product` (an ActivationProduct, or None) where it runs, else numpy.matmul."""
    if product is None or not product(a, b, out):
        np.matmul(a, b, out=out)


class _MatMul:
    """Y = A @ B (+ C): shared by MatMul (no C) and MatMulAdd (C a bias over Y's last axis)."""

    def __init__(self, ctx, bias: bool):
        self.bias = bias
        self.fast = self.act = None
        if ctx.is_static(1) and (not bias or ctx.is_static(2)):
            self.fast = ConstRightProduct.build(ctx, ctx.shape(0), ctx.dtype(0), ctx.value(1),
                                                ctx.value(2) if bias else None)
        elif not ctx.is_static(1) and np.dtype(ctx.dtype(1)) == np.dtype(ctx.dtype(0)):
            self.act = ActivationProduct.build(ctx, ctx.shape(0), ctx.shape(1), ctx.dtype(0))

    def __call__(self, a, b, c=None, *, out):
        if self.fast is not None and self.fast(a, out):
            return
        matmul_into(self.act, a, b, out)
        if self.bias:
            np.add(out, c, out=out)

    def prepare_run(self, a, b, c=None, *, out):
        """The compiled product bound to these arrays; on the numpy path (no bias) numpy.matmul bound to
        them, `out` positional (a [1, 64] @ [64, 64] Loop-body MatMul: 1.25 against 1.77 us a call)."""
        if self.fast is not None:
            return self.fast.prepare(a, out)
        if self.act is not None:
            run = self.act.prepare(a, b, out)
            return None if run is None or self.bias else run
        return None if self.bias else partial(np.matmul, a, b, out)


@kernel("MatMul", since=(1, 9, 13))
class MatMul(_MatMul):
    """Y = A @ B with numpy.matmul's broadcasting of batch dimensions (ONNX MatMul-1/-9/-13).

    Shapes: A (..., M, K), B (..., K, N) (1-D operands promoted and squeezed as
    numpy.matmul does), Y the broadcast batch dims + (M, N). Paths: module docstring.
    Spec: Operators.md#MatMul.
    """

    def __init__(self, ctx):
        super().__init__(ctx, bias=False)


@kernel("MatMulAdd", since=1, domain=DOMAIN)
class MatMulAdd(_MatMul):
    """Y = MatMul(A, B) + C, C a bias broadcast over Y's last axis (passes/fc_fuse.py emits it).

    Shapes: A (..., M, K) of rank >= 2, or A (K,) with C of rank <= 1 (Y (N,)), B (K, N),
    C (N,), (1, N), (1,), (1, 1) or (); Y (..., M, N). The same bits as the MatMul and Add nodes it replaces on
    the numpy path; the compiled path adds C in the product's last rounding
    (compiled/matmul.py), as a GEMM followed by + C does.
    """

    def __init__(self, ctx):
        super().__init__(ctx, bias=True)
