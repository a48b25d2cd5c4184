"""Convolution on the GPU: Conv, FusedConv (bias, the sum input Z, activation) and FusedConvDepthwise.

Algorithm, chosen once per shape (MLAS's habit), float32, 1-D and 2-D (1-D as H = 1):

* depthwise (group = C, W (M, 1, KH, KW)): kernels/conv.cu depthwise_f32, the epilogue fused;
* 1x1, stride 1, no padding, group 1: no im2col -- Y[n] (M, HW) = W (M, C) @ X[n] (C, HW), one
  strided batched cuBLAS GEMM over the images;
* otherwise im2col + GEMM, col (C*KH*KW, OH*OW) per image in scratch (kernels/conv.cu im2col_f32):
  group 1: the images in chunks whose cols fit COL_SCRATCH_BYTES (at least one image), each chunk one
  im2col and one strided batched GEMM over its images, W (M, C*KH*KW) @ col[n] -- a batch of 32 is
  a few launches of large GEMMs, not 64 small ones (ResNet-50 b32 on the H200: 29 ms, 20 of them in
  per-image GEMMs at 4-8 TFLOP/s where cuBLAS reaches 46 on large ones, benchmarks/gpu_profile.py);
  grouped: per image, a strided batched GEMM over the groups, W_g (Mg, Cg*KH*KW) @ col_g;

then, unless fused above, the epilogue y = act(y + bias + Z) in place (kernels/conv.cu conv_epilogue_f32).

Group 1 with more than one image per chunk, "wide" (CONV_GEMM; "auto", the default, times it against the
above on the first run and keeps the faster): the chunk's images side by side along the GEMM's N instead --
col (C*KH*KW, nb*OH*OW) (kernels/conv.cu im2col_wide_f32; for 1x1, stride 1, no padding it is the transpose
to (C, nb*HW)), one GEMM W (M, K) @ col into scratch t (M, nb*OH*OW), and conv_unfold_f32 writes
y (nb, M, OH, OW) = act(t + bias + Z) from it. The strided batched GEMM runs each image's small GEMM
(M = 64, N = 3136: cuBLAS at 7.7 TFLOP/s on the H200) where one wide GEMM may run at the large-GEMM rate
(47 TFLOP/s at 256 x 100352 x 576); the price is a transposing pass over y and the scratch t. ResNet-50 b32
on the H200 with the batched GEMMs: 13.7 ms of device time, 12.2 in convolutions (benchmarks/gpu_profile.py,
2026-11-28).

3x3, stride 1, dilation 1, group 1, "winograd" (timed against the above under "auto"): Winograd F(2x2,3x3)
(Lavin & Gray 2016; kernels/conv.cu winograd_input_f32 / winograd_output_f32): the input transform V (16, C,
tiles), 16 GEMMs U_k (M, C) @ V_k in one strided batched call, then the output transform with the epilogue;
U = G g G^T made once per weight array and GPU (winograd_filters_on_device), V and the GEMMs' output in the
column scratch. 2.25x fewer multiply-adds than im2col's GEMM, and V is 16/9 of the input where im2col's
columns are 9 times it (on the H200 the 3x3 layers of ResNet-50 b32 spent 0.3-0.45 ms each writing columns).
The im2col, unfold, epilogue and Winograd kernels launch on a 3-D grid (runtime.launch_planes): a block's
row and image are uniform, so a thread divides once per element, not six times.
CuPy 14 has no cuDNN (DEVICE.md): these are ours, the GEMMs cuBLAS's (runtime.gemm).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading

import numpy as np

from ..cpu.conv_shared import shared_weights
from ..shapes.conv import conv_geometry
from ..shapes.fused import DOMAIN, depthwise_chain_parts
from . import runtime
from .codes import activation_of, cuda_kernel, float32_io

COL_SCRATCH_BYTES = 64 << 20
"""The im2col scratch of a group-1 convolution holds as many images' columns as fit in this (at least one);
on the wide path, so does the GEMM's scratch t."""

CONV_GEMM = os.environ.get("PP_CUDA_CONV_GEMM", "auto").strip().lower() or "auto"
if CONV_GEMM not in ("auto", "wide", "batched", "winograd"):
    logging.getLogger("pooled_predictor").warning(
        "PP_CUDA_CONV_GEMM=%r is not auto, wide, batched or winograd; using auto", CONV_GEMM)
    CONV_GEMM = "auto"
"""How a group-1 convolution runs its GEMMs: "wide" (one GEMM per chunk of images, side by side along N;
module docstring), "batched" (a strided batched GEMM over the chunk's images), "winograd" (Winograd
F(2x2,3x3) where the convolution is 3x3, stride 1, dilation 1; elsewhere as "auto"), or "auto" (the
default: every path that applies timed with CUDA events on the kernel's first run, outside any CUDA graph
capture, and the fastest kept for the kernel's life -- cuDNN's benchmark mode,
torch.backends.cudnn.benchmark). Read when a kernel is set up (a Net's reshape); PP_CUDA_CONV_GEMM sets it."""

_U_LOCK = threading.Lock()
def winograd_filters_on_device(w: np.ndarray):
    """The transformed filters of the static weight `w` (M, C, 3, 3) on the current GPU, made once per weight
    array and GPU and shared by every worker's Net (the weights are held once per device: a copy per worker
    would add ResNet-50's 80 MB of them per worker)."""
    dev = runtime.cupy.cuda.runtime.getDevice()
    # U = G g G^T, (16, M, C), by the CPU Winograd's transform (float64, then float32): imported on first use,
    # as it loads numba
    transform = importlib.import_module("pooled_predictor.ops.cpu.compiled.winograd").transform_weights
    with _U_LOCK:
        return shared_weights(w, ("cuda-winograd-2x2", dev), lambda w: runtime.device_array(transform(w, 2)))


def _conv_supported(ctx) -> bool:
    if not float32_io(ctx) or len(ctx.shape(0)) not in (3, 4):
        return False
    return ctx.is_static(1)  # weights known at reshape (the GEMM's layout is fixed once)


class _ConvCore:
    """One convolution at fixed shapes: __call__(x, w, b, z, out) with the epilogue (code, alpha, beta)."""

    def __init__(self, ctx, act=(0, 0.0, 0.0)):
        g = conv_geometry(ctx)
        if g.rank == 1:  # 1-D: H = 1
            def two(t, v):
                return (v,) + tuple(t)
            g_in, g_out = two(g.in_shape, 1), two(g.out_shape, 1)
            kern, strides, dil = two(g.kernel, 1), two(g.strides, 1), two(g.dilations, 1)
            pads = (0,) + tuple(g.pads_begin)
        else:
            g_in, g_out, kern, strides, dil, pads = g.in_shape, g.out_shape, g.kernel, g.strides, g.dilations, g.pads_begin
        self.n, self.c, self.m, self.groups = g.batch, g.in_channels, g.out_channels, g.group
        (self.h, self.w), (self.oh, self.ow) = g_in, g_out
        self.kh, self.kw = kern
        self.geom = tuple(np.int32(v) for v in (*strides, *pads, *dil))
        self.act = (np.int32(act[0]), runtime.f32(act[1]), runtime.f32(act[2]))
        self.depthwise = self.groups == self.c and self.groups > 1 and self.m % self.c == 0
        self.pointwise = (not self.depthwise and self.groups == 1 and (self.kh, self.kw) == (1, 1)
                          and tuple(strides) == (1, 1) and not any(g.pads_begin) and not any(g.pads_end))
        self.choice = "depthwise"
        if self.depthwise:
            self.dw = runtime.function("conv.cu", "depthwise_f32")
            return
        winograd = (g.rank == 2 and self.groups == 1 and (self.kh, self.kw) == (3, 3) and tuple(strides) == (1, 1)
                    and tuple(dil) == (1, 1))
        mode = CONV_GEMM if CONV_GEMM in ("wide", "batched") or (CONV_GEMM == "winograd" and winograd) else "auto"
        if runtime.TF32 and mode == "auto":  # TF32's 1e-2 bar was measured on the im2col GEMMs only: Winograd's
            winograd = False                 # transforms under TF32 run when asked for (PP_CUDA_CONV_GEMM=winograd)
        self.epilogue = runtime.function("conv.cu", "conv_epilogue_f32")
        self.rows = self.c * self.kh * self.kw
        hw_out = self.oh * self.ow
        modes, col_size = ["batched"], 0
        if mode == "winograd":
            modes = []
        if self.groups == 1 and self.n > 1 and mode not in ("batched", "winograd"):
            chunk = max(1, min(self.n, COL_SCRATCH_BYTES // (4 * max(self.rows, self.m) * hw_out)))
            if chunk > 1:  # one image a chunk gains nothing over the batched path
                modes = ["wide"] if mode == "wide" else ["wide", "batched"]
                self.wide_chunk = chunk
                self.im2col_wide = runtime.function("conv.cu", "im2col_wide_f32")
                self.unfold = runtime.function("conv.cu", "conv_unfold_f32")
                self.t = ctx.scratch((self.m, chunk * hw_out), np.float32)
                col_size = self.rows * chunk * hw_out
        if winograd and mode in ("auto", "winograd"):
            modes.append("winograd")
            self.wino_in = runtime.function("conv.cu", "winograd_input_f32")
            self.wino_out = runtime.function("conv.cu", "winograd_output_f32")
            self.th, self.tw = (self.oh + 1) // 2, (self.ow + 1) // 2
            per_image = 16 * (self.c + self.m) * self.th * self.tw  # V and the GEMMs' output, floats
            chunk = max(1, min(self.n, COL_SCRATCH_BYTES // (4 * per_image)))
            chunks = -(-self.n // chunk)
            self.wino_chunk = -(-self.n // chunks)  # balanced: 32 images in 4 x 8, not 10 + 10 + 10 + 2
            self.wino_v = 16 * self.c * self.wino_chunk * self.th * self.tw  # where the GEMMs' output starts
            col_size = max(col_size, per_image * self.wino_chunk)
            self.u = winograd_filters_on_device(ctx.value(1))
        if "batched" in modes and not self.pointwise:
            self.im2col = runtime.function("conv.cu", "im2col_f32")
            self.chunk = 1 if self.groups > 1 else max(1, min(self.n, COL_SCRATCH_BYTES // (4 * self.rows * hw_out)))
            col_size = max(col_size, self.chunk * self.rows * hw_out)
        self.modes = tuple(modes)
        self.choice = modes[0] if len(modes) == 1 else None  # None: timed on the first run
        self.timings_ms: dict = {}
        if col_size:  # one scratch for the columns of whichever path runs
            self.col = ctx.scratch((col_size,), np.float32)

    def __call__(self, x, w, b, z, out):
        if self.choice == "depthwise":
            i32, null = np.int32, runtime.NULL
            runtime.launch(self.dw, out.size, (x, w, b if b is not None else null, z if z is not None else null, out,
                                               i32(self.n), i32(self.c), i32(self.h), i32(self.w), i32(self.m),
                                               i32(self.oh), i32(self.ow), i32(self.kh), i32(self.kw), *self.geom,
                                               *self.act))
            return
        if self.choice is None:
            self.choice = self._tune(x, w, b, z, out)
        if self.choice == "wide":
            self._wide(x, w, b, z, out)
        elif self.choice == "winograd":
            self._winograd(x, b, z, out)
        else:
            self._batched(x, w, b, z, out)

    def _tune(self, x, w, b, z, out) -> str:
        """The faster of self.modes at these shapes: each run once (warm), then twice between CUDA events on
        the current stream. Inside a graph capture nothing can be timed: "wide", untimed."""
        cp = runtime.cupy
        stream = cp.cuda.get_current_stream()
        if getattr(stream, "is_capturing", lambda: False)():
            return self.modes[0]
        paths = {"wide": self._wide, "batched": self._batched,
                 "winograd": lambda x, w, b, z, out: self._winograd(x, b, z, out)}
        for mode in self.modes:
            run = paths[mode]
            run(x, w, b, z, out)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            run(x, w, b, z, out)
            run(x, w, b, z, out)
            end.record(stream)
            end.synchronize()
            self.timings_ms[mode] = cp.cuda.get_elapsed_time(start, end) / 2
        return min(self.timings_ms, key=self.timings_ms.get)

    def _shape(self):
        i32 = np.int32
        return (i32(self.c), i32(self.h), i32(self.w), i32(self.kh), i32(self.kw), i32(self.oh), i32(self.ow))

    def _batched(self, x, w, b, z, out):
        i32 = np.int32
        hw_out, hw_in = self.oh * self.ow, self.h * self.w
        if self.pointwise:  # Y[n] (M, HW) = W (M, C) @ X[n] (C, HW), all images in one batched call
            runtime.gemm(w, x, out, self.m, hw_out, self.c, batch=self.n, stride_a=0, stride_b=self.c * hw_in,
                         stride_c=self.m * hw_out)
        else:
            col = self.col.array
            kk = self.c // self.groups * self.kh * self.kw
            mg = self.m // self.groups
            rows = self.rows
            shape = self._shape()
            for i in range(0, self.n, self.chunk):
                nb = min(self.chunk, self.n - i)
                runtime.launch_planes(self.im2col, hw_out, rows, nb, (x[i:i + nb], col, i32(nb), *shape, *self.geom))
                if self.groups == 1:  # the chunk's images: one strided batched GEMM, W shared
                    runtime.gemm(w, col, out, self.m, hw_out, rows, batch=nb, stride_a=0, stride_b=rows * hw_out,
                                 stride_c=self.m * hw_out, offset_c=i * self.m * hw_out)
                else:  # one image (chunk 1): a strided batched GEMM over its groups
                    runtime.gemm(w, col, out, mg, hw_out, kk, batch=self.groups, stride_a=mg * kk,
                                 stride_b=kk * hw_out, stride_c=mg * hw_out, offset_c=i * self.m * hw_out)
        if b is not None or z is not None or int(self.act[0]) != 0:
            runtime.launch_planes(self.epilogue, hw_out, self.m, self.n,
                                  (out, b if b is not None else runtime.NULL, z if z is not None else runtime.NULL,
                                   i32(self.n), i32(self.m), np.int64(hw_out), *self.act))

    def _winograd(self, x, b, z, out):
        """Winograd F(2x2,3x3) in chunks of images (kernels/conv.cu): V, the 16 GEMMs M_k = U_k @ V_k (one strided
        batched call), then the output transform with the epilogue; V and M_k share the column scratch."""
        i32, null = np.int32, runtime.NULL
        tiles = self.th * self.tw
        buf = self.col.array
        base = buf.data.ptr
        for i in range(0, self.n, self.wino_chunk):
            nb = min(self.wino_chunk, self.n - i)
            p = nb * tiles
            runtime.launch_planes(self.wino_in, tiles, self.c, nb,
                                  (x[i:i + nb], np.uint64(base), i32(nb), i32(self.c), i32(self.h), i32(self.w),
                                   i32(self.th), i32(self.tw), self.geom[2], self.geom[3]))
            runtime.gemm(self.u, buf, buf, self.m, p, self.c, batch=16, stride_a=self.m * self.c, stride_b=self.c * p,
                         stride_c=self.m * p, offset_c=self.wino_v)
            runtime.launch_planes(self.wino_out, tiles, self.m, nb,
                                  (np.uint64(base + 4 * self.wino_v), out[i:i + nb], b if b is not None else null,
                                   z[i:i + nb] if z is not None else null, i32(nb), i32(self.m), i32(self.oh),
                                   i32(self.ow), i32(self.th), i32(self.tw), *self.act))

    def _wide(self, x, w, b, z, out):
        i32, null = np.int32, runtime.NULL
        hw_out = self.oh * self.ow
        col, t = self.col.array, self.t.array
        shape = self._shape()
        for i in range(0, self.n, self.wide_chunk):
            nb = min(self.wide_chunk, self.n - i)
            runtime.launch_planes(self.im2col_wide, hw_out, self.rows, nb, (x[i:i + nb], col, i32(nb), *shape,
                                                                             *self.geom))
            runtime.gemm(w, col, t, self.m, nb * hw_out, self.rows)  # t (M, nb*HW) = W (M, K) @ col (K, nb*HW)
            runtime.launch_planes(self.unfold, hw_out, self.m, nb,
                                  (t, out[i:i + nb], b if b is not None else null,
                                   z[i:i + nb] if z is not None else null, i32(nb), i32(self.m), np.int64(hw_out),
                                   *self.act))


@cuda_kernel("Conv", supports=_conv_supported)
class Conv:
    """ONNX Conv (float32, 1-D or 2-D, static W) on the GPU; see the module docstring."""

    def __init__(self, ctx, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
                 strides=None):
        self.core = _ConvCore(ctx)

    def __call__(self, x, w, b=None, *, out):
        self.core(x, w, b, None, out)


@cuda_kernel("FusedConv", domain=DOMAIN, supports=_conv_supported)
class FusedConv:
    """activation(Conv(X, W, B) + Z) on the GPU (ops/shapes/fused.py), the epilogue in one pass."""

    def __init__(self, ctx, *, activation, activation_params=(), auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
        self.core = _ConvCore(ctx, activation_of({"activation": activation, "activation_params": activation_params}))

    def __call__(self, x, w, b=None, z=None, *, out):
        self.core(x, w, b, z, out)


def _chain_supported(ctx) -> bool:
    return float32_io(ctx) and len(ctx.shape(0)) == 4 and ctx.is_static(1) and ctx.is_static(4)


@cuda_kernel("FusedConvDepthwise", domain=DOMAIN, supports=_chain_supported)
class FusedConvDepthwise:
    """The 1x1 FusedConv into scratch, then the depthwise FusedConv reading it (ops/shapes/fused.py)."""

    def __init__(self, ctx, *, activation, activation_params=(), dw_activation="Identity", dw_activation_params=(),
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
        pw, dw = depthwise_chain_parts(ctx)
        self.pw = _ConvCore(pw, activation_of(pw.attrs))
        self.dw = _ConvCore(dw, activation_of(dw.attrs))
        self.mid = ctx.scratch(pw.out_shapes[0], np.float32)

    def __call__(self, x, w, b, z, w_dw, b_dw=None, *, out):
        t = self.mid.array
        self.pw(x, w, b, z, t)
        self.dw(t, w_dw, b_dw, None, out)
