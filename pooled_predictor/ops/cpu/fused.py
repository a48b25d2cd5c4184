"""Fused CPU kernels of our own domain ("pooled_predictor", opset 1), emitted by the graph passes.

FusedConv and FusedGemm run the existing Conv / Gemm kernel class into `out`
and then apply their activation to `out` in place: one pass over Y instead of
a second node writing a second blob. Gelu and HardSwish are the ONNX ops
(Gelu-20, HardSwish-14) under our domain, for models whose default-domain
opset predates them (a pass never raises a model's opset: that would change
the meaning of its other ops, e.g. Squeeze-13 or ReduceMean-18).

Semantics and attributes: ops/shapes/fused.py. Every activation is computed
with the same numpy operations as its stand-alone kernel (elementwise.py,
activation.py), so a fused graph gives the same bits as the unfused one.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from ._special import special

from ..registry import kernel
from ..shapes.fused import DOMAIN, GEMM_ACTIVATIONS, activation_problem, depthwise_chain_parts
from .activation import Gelu as _OnnxGelu
from .activation import HardSwish as _OnnxHardSwish
from .activation import _gelu_check, hard_swish_into, leaky_relu_into
from .elementwise import hard_sigmoid, relu, sigmoid
from ._special import CHUNK, erf_float32, erf_workspace_shape
from .compiled.codes import CODES, GELU, NONE
from .conv import Conv
from . import compiled
from .gemm import Gemm


def _check(attrs, version):
    return activation_problem(attrs)


def _bound(value: float, dtype: np.dtype, lowest: bool):
    """A Clip bound as a scalar of `dtype`; an infinite one is the absent bound (finfo extreme)."""
    if np.isinf(value):
        info = np.finfo(dtype)
        return info.min if lowest else info.max
    with np.errstate(over="ignore"):
        return np.asarray(value).astype(dtype)[()]


def _compiled_params(name: str, p: list) -> tuple:
    """(p0, p1) float32 for compiled/epilogue.py; Clip's bounds as the numpy kernel takes them."""
    if name == "Clip":
        f = np.dtype(np.float32)
        return np.float32(_bound(p[0], f, True)), np.float32(_bound(p[1], f, False))
    p = list(p) + [0.0, 0.0]
    return np.float32(p[0]), np.float32(p[1])


class Activation:
    """An activation applied in place to an array of fixed shape and dtype.

    Args:
        ctx: the fused node's OpContext (for scratch workspace).
        name: one of ops.shapes.fused.ACTIVATIONS.
        params: its activation_params (floats).
        shape, dtype: of the array it will be applied to.
    """

    def __init__(self, ctx, name: str, params, shape, dtype):
        self.name = name
        dtype = np.dtype(dtype)
        p = [float(v) for v in params]
        self.tmp = None
        if compiled.active() and dtype == np.float32 and name in CODES:
            # one compiled pass instead of up to four numpy passes; the same float32 operations
            self.code, self.params = CODES[name], _compiled_params(name, p)
            self.apply = self._compiled
            return
        if name == "Gelu":  # our domain's Gelu (the Gelu kernel below): its compiled pass or numpy chunks
            self.sqrt2 = np.asarray(np.sqrt(2.0), dtype)[()]
            if compiled.active() and dtype == np.float32:
                self.code, self.params = GELU, (np.float32(self.sqrt2), np.float32(0))
                self.apply = self._compiled
                return
            self.chunk = max(1, min(int(np.prod(shape)), CHUNK))
            self.tmp = ctx.scratch((self.chunk,), dtype)
            self.erf_work = ctx.scratch(erf_workspace_shape(self.chunk), np.float32) if dtype == np.float32 else None
        if name in ("HardSwish", "LeakyRelu"):
            self.tmp = ctx.scratch(shape, dtype)
        if name == "Clip":
            self.lo, self.hi = _bound(p[0], dtype, True), _bound(p[1], dtype, False)
        elif name == "LeakyRelu":
            self.alpha = p[0]
        elif name == "HardSigmoid":
            self.alpha, self.beta = p
        self.apply = getattr(self, "_" + name.lower())

    def _compiled(self, y):
        compiled.epilogue.activate_inplace(y.reshape(-1), self.code, *self.params)

    def prepare(self, y):
        """apply(y) as a zero-argument call for this array (engine/layout.py: _prepared)."""
        if self.apply == self._compiled and y.flags.c_contiguous:
            # activate_range itself, bound: activate_inplace is a Python function (its call, the scalars' numpy
            # types and numba's dispatch held the GIL on every forward)
            flat = y.reshape(-1)
            return compiled.bound(compiled.epilogue.activate_range, flat, np.uint64(0), np.uint64(flat.size),
                                  int(self.code), np.float32(self.params[0]), np.float32(self.params[1]))
        return partial(self.apply, y)

    # The stand-alone kernels' own code, applied in place: a fused graph gives the same bits.
    def _relu(self, y):
        relu(y, out=y)

    def _sigmoid(self, y):
        sigmoid(y, out=y)

    def _tanh(self, y):
        np.tanh(y, out=y)

    def _clip(self, y):
        np.clip(y, self.lo, self.hi, out=y)

    def _hardsigmoid(self, y):
        hard_sigmoid(y, out=y, alpha=self.alpha, beta=self.beta)

    def _hardswish(self, y):
        hard_swish_into(y, y, self.tmp.array)

    def _leakyrelu(self, y):
        leaky_relu_into(y, y, self.tmp.array, self.alpha)

    def _gelu(self, y):
        gelu_chunks(y.reshape(-1), y.reshape(-1), self.tmp.array, None if self.erf_work is None else
                    self.erf_work.array, self.sqrt2)


@kernel("FusedConv", since=1, domain=DOMAIN, check=_check)
class FusedConv:
    """Y = activation(X (*) W + B [+ Z]): the Conv kernel class, then the activation in place on Y.

    Shapes: X (N, C, D1, ..., Dn), W (M, C / group, k1, ..., kn), B (M,),
    Y (N, M, O1, ..., On), as ONNX Conv (ops/cpu/conv.py); Z (the sum input of
    passes/conv_sum.py, onnxruntime's FusedConv "sum"), when given, Y's shape:
    added after the bias and before the activation, as the Add node it replaces
    did (inside the compiled 1x1 GEMM's output blocks; else one numpy add).
    """

    def __init__(self, ctx, *, activation, activation_params=(), auto_pad="NOTSET", dilations=None,
                 group=1, kernel_shape=None, pads=None, strides=None):
        self.conv = Conv(ctx, auto_pad=auto_pad, dilations=dilations, group=group,
                         kernel_shape=kernel_shape, pads=pads, strides=strides)
        name = activation.decode() if isinstance(activation, bytes) else activation
        self.act = None
        self.sum_fused = False
        params = [float(v) for v in activation_params]
        code = NONE if name == "Identity" else CODES.get(name)
        if ctx.has_input(3):  # the activation must follow + Z: fused only where the kernel adds Z too
            self.sum_fused = code is not None and self.conv.fuse_sum(code, *_compiled_params(name, params))
            if not self.sum_fused and name != "Identity":
                self.act = Activation(ctx, activation, activation_params, ctx.out_shapes[0], ctx.out_dtypes[0])
            return
        if name == "Identity":
            return
        if name not in CODES or not self.conv.fuse_activation(CODES[name], *_compiled_params(name, params)):
            self.act = Activation(ctx, activation, activation_params, ctx.out_shapes[0], ctx.out_dtypes[0])

    def __call__(self, x, w, b=None, z=None, *, out):
        if z is not None:
            if self.sum_fused:
                self.conv.run_sum(x, z, out)
                return
            self.conv(x, w, b, out=out)
            np.add(out, z, out=out)
        else:
            self.conv(x, w, b, out=out)
        if self.act is not None:
            self.act.apply(out)

    def prepare_run(self, x, w, b=None, z=None, *, out):
        if z is not None and self.sum_fused:
            return self.conv.prepare_sum(x, z, out)
        conv = self.conv.prepare_run(x, w, b, out=out)
        if conv is None:
            return None
        return compiled.chain(conv, None if z is None else partial(np.add, out, z, out=out),
                              None if self.act is None else self.act.prepare(out))


def _gemm_check(attrs, version):
    return activation_problem(attrs, GEMM_ACTIVATIONS)


@kernel("FusedGemm", since=1, domain=DOMAIN, check=_gemm_check)
class FusedGemm:
    """Y = activation(alpha * A' @ B' + beta * C): the Gemm kernel class, then the activation in place.

    Shapes: A' (M, K), B' (K, N), C broadcasting to (M, N), Y (M, N), as ONNX Gemm (ops/cpu/gemm.py).
    Where the Gemm takes the compiled product (float32, B a weight, alpha 1, no transA, C absent or a
    weight bias of N with beta 1) and the activation is compiled (epilogue.py's codes, or Tanh), the
    product and the activation run in one compiled call (compiled/fc.py). The epilogue's activations
    give the numpy kernels' bits; Tanh there is tanh32 (at most 4.9 ulp, 2.9e-7 absolute from tanh,
    as the RNN/GRU/LSTM kernels compute it), not np.tanh's bits; elsewhere Tanh is np.tanh (the Tanh
    node's kernel).
    """

    def __init__(self, ctx, *, activation, activation_params=(), alpha=1.0, beta=1.0, transA=0, transB=0):
        self.gemm = Gemm(ctx, alpha=alpha, beta=beta, transA=transA, transB=transB)
        self.act = Activation(ctx, activation, activation_params, ctx.out_shapes[0], ctx.out_dtypes[0])
        # the compiled product (B a weight: ops/cpu/matmul.py) and an activation it can apply in the same
        # call (compiled/fc.py): epilogue codes (the same bits as the numpy kernels) or Tanh (tanh32)
        self.code = None
        if self.gemm.fast is not None and (activation in CODES or activation == "Tanh"):
            self.code = compiled.fc.TANH if activation == "Tanh" else CODES[activation]
            self.params = _compiled_params(activation, [float(v) for v in activation_params])

    def __call__(self, a, b, c=None, *, out):
        if self.code is not None and a.flags.c_contiguous and out.flags.c_contiguous:
            f = self.gemm.fast
            compiled.fc.act_kernel(f.lanes)(a.reshape(-1), f.rows, f.k_n, f.bias, f.x, out.reshape(-1), f.n_n,
                                         f.ws_ref.array, self.code, *self.params)
            return
        self.gemm(a, b, c, out=out)
        self.act.apply(out)

    def _fused(self, a, out):
        """Y = act(A @ B + c) as one compiled call (compiled/fc.py), for C-contiguous A and Y."""
        f = self.gemm.fast
        return compiled.bound(compiled.fc.act_kernel(f.lanes), a.reshape(-1), f.rows, f.k_n, f.bias, f.x,
                              out.reshape(-1), f.n_n, f.ws_ref.array, self.code, *self.params)

    def prepare_run(self, a, b, c=None, *, out):
        if self.code is not None and a.flags.c_contiguous and out.flags.c_contiguous:
            return self._fused(a, out)
        gemm = self.gemm.prepare_run(a, b, c, out=out)
        return gemm and compiled.chain(gemm, self.act.prepare(out))


def _chain_check(attrs, version):
    return _check(attrs, version) or _check({"activation": attrs.get("dw_activation"),
                                            "activation_params": attrs.get("dw_activation_params", [])}, version)


def _conv_attrs(node) -> dict:
    return {k: v for k, v in node.attrs.items() if k not in ("activation", "activation_params")}


@kernel("FusedConvDepthwise", since=1, domain=DOMAIN, check=_chain_check)
class FusedConvDepthwise:
    """Y = FusedConv(FusedConv(X, W, B, Z), W_dw, B_dw): a 1x1 convolution and the depthwise convolution
    reading it (ops/shapes/fused.py; passes/pointwise_depthwise.py), here as the two FusedConv kernels
    with T (N, M, H, W), the 1x1 convolution's output, in a scratch buffer: the same bits as the two
    nodes. The NCHW8c kernel (conv_nchwc.py) computes T a panel of channels at a time instead.

    Shapes: X (N, C, H, W), W (M, C, 1, 1), B (M,), Z (N, M, H, W), W_dw (M, 1, KH, KW), B_dw (M,),
    Y (N, M, OH, OW) as the depthwise Conv gives it; float.
    """

    def __init__(self, ctx, *, activation, activation_params=(), dw_activation, dw_activation_params=(),
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
        pw, dw = depthwise_chain_parts(ctx)
        self.pointwise = FusedConv(pw, activation=activation, activation_params=activation_params)
        self.depthwise = FusedConv(dw, activation=dw_activation, activation_params=dw_activation_params,
                                   **_conv_attrs(dw.node))
        self.t = ctx.scratch(pw.out_shapes[0], pw.out_dtypes[0])

    def __call__(self, x, w, b=None, z=None, w_dw=None, b_dw=None, *, out):
        t = self.t.array
        self.pointwise(x, w, b, z, out=t)
        self.depthwise(t, w_dw, b_dw, out=out)

    def prepare_run(self, x, w, b=None, z=None, w_dw=None, b_dw=None, *, out):
        t = self.t.array
        first = self.pointwise.prepare_run(x, w, b, z, out=t)
        second = self.depthwise.prepare_run(t, w_dw, b_dw, out=out)
        return None if first is None or second is None else compiled.chain(first, second)


@kernel("Gelu", since=1, domain=DOMAIN, inplace=(0,), check=_gelu_check)
class Gelu:
    """ONNX Gelu-20 for models whose default opset is below 20 (Hendrycks & Gimpel 2016).

    approximate="none": Y = 0.5 X (1 + erf(X / sqrt(2))), computed in the
    exporters' order -- X / sqrt(2) (sqrt(2) rounded to X's dtype), erf, + 1,
    * X, * 0.5 -- with the Erf kernel's own erf (ops/cpu/_special.py for
    float32): the same operations, hence the same bits, as the Div/Erf/Add/Mul/
    Mul nodes PyTorch and PaddlePaddle export and the GELU pass replaces
    (multiplying by 0.5 is exact, so where the exporter put it does not matter).
    ONNX Gelu's kernel computes erf(X * (1/sqrt(2))) and differs from those
    nodes by rounding, which a deep network amplifies (PP-OCR det: ~1e-5 of
    its output scale).
    approximate="tanh": ONNX Gelu's kernel (ops/cpu/activation.py).
    float32: one compiled pass (compiled/epilogue.py gelu_erf, the same
    operations in the same order: the same bits). Otherwise computed a chunk of
    CHUNK elements at a time. Shapes: Y as X. Workspace: one chunk (not float32).
    """

    def __init__(self, ctx, *, approximate="none"):
        self.onnx = _OnnxGelu(ctx, approximate=approximate) if approximate == "tanh" else None
        if self.onnx is not None:
            return
        dtype = np.dtype(ctx.dtype(0))
        self.sqrt2 = np.asarray(np.sqrt(2.0), dtype)[()]
        self.compiled = dtype == np.float32 and compiled.active()
        if self.compiled:  # one pass, the same float32 operations (compiled/epilogue.py)
            return
        size = int(np.prod(ctx.shape(0)))
        self.chunk = max(1, min(size, CHUNK))
        self.tmp = ctx.scratch((self.chunk,), dtype)
        self.erf_work = None
        if dtype == np.float32:
            self.erf_work = ctx.scratch(erf_workspace_shape(self.chunk), np.float32)

    def __call__(self, x, *, out):
        if self.onnx is not None:
            self.onnx(x, out=out)
            return
        xf, of = x.reshape(-1), out.reshape(-1)
        if self.compiled:
            if xf.ctypes.data == of.ctypes.data:  # the arena put Y on X (memory_opt's in-place)
                compiled.epilogue.gelu_erf_inplace(of, self.sqrt2)
            else:
                compiled.epilogue.gelu_erf(xf, of, self.sqrt2)
            return
        self._chunked(xf, of)

    def prepare_run(self, x, *, out):
        if self.onnx is not None or not self.compiled or not (x.flags.c_contiguous and out.flags.c_contiguous):
            return None
        xf, of = x.reshape(-1), out.reshape(-1)
        if xf.ctypes.data == of.ctypes.data:
            return compiled.bound(compiled.epilogue.gelu_erf_inplace, of, self.sqrt2)
        return compiled.bound(compiled.epilogue.gelu_erf, xf, of, self.sqrt2)

    def _chunked(self, xf, of):
        gelu_chunks(xf, of, self.tmp.array, None if self.erf_work is None else self.erf_work.array, self.sqrt2)


def gelu_chunks(xf, of, tmp, erf_work, sqrt2) -> None:
    """of = 0.5 * (xf * (erf(xf / sqrt2) + 1)) over flat arrays (of may be xf), a chunk of tmp.size
    elements at a time (its five passes stay in cache): the Gelu kernel's numpy path and FusedConv's Gelu.
    erf_work: erf_float32's workspace for float32 (ops/cpu/_special.py), None for scipy's erf."""
    n, chunk = xf.size, tmp.size
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        t, xs, os_ = tmp[:e - s], xf[s:e], of[s:e]
        np.divide(xs, sqrt2, out=t)
        if erf_work is not None:
            erf_float32(t, t, erf_work)
        else:
            special.erf(t, out=t)
        t += 1.0
        np.multiply(xs, t, out=os_)  # out may be x: each chunk is read before it is written
        os_ *= 0.5


@kernel("HardSwish", since=1, domain=DOMAIN, inplace=(0,))
class HardSwish(_OnnxHardSwish):
    """ONNX HardSwish-14 (see ops/cpu/activation.py) for models whose default opset is below 14."""
