"""Products of 8-bit A (M, K) with a weight B (K, N), compiled: QLinearMatMul's and com.microsoft QGemm's
fast path (ops/cpu/quantized.py, ops/cpu/quantized_contrib.py)."""

from __future__ import annotations

import numpy as np

from .. import int8_arithmetic
from . import compiled
from .conv_shared import shared_weights
from .tensor import tile_kernel

GEMV_ROWS = 3  # A's rows up to which the saturating product runs as GEMVs (qgemv_sat)


def _ro(a):
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


_ONE_BASE = np.zeros(1, np.int64)
_ONE_BASE.flags.writeable = False


def _transpose_into(src: np.ndarray, dst: np.ndarray) -> None:
    """dst (flat, C-contiguous) = src (R, C) transposed: compiled/transpose.py's register tiles for 1- and 4-byte
    elements (16 x 16 bytes, 8 x 8 floats), numpy's copy of the transposed view otherwise. numpy's walk of an 8-bit
    transpose took 0.28-0.49 ms at ViT-B/16's (197, 3072) and Swin-T's (3136, 288), as long as a third of the GEMM
    between the two copies; the tiles 0.03-0.09."""
    r, c = src.shape
    if compiled.active() and src.flags.c_contiguous and r >= 8 and c >= 8 and src.itemsize in (1, 4):
        kernel, view = tile_kernel(src.itemsize)
        kernel(src.reshape(-1).view(view), dst.view(view), _ONE_BASE, c, r, c)
        return
    np.copyto(dst.reshape(c, r), src.T)


class StaticProduct:
    """Y = requant(A @ B + bias) for 8-bit A (M, K) and a weight B (K, N): compiled/qgemm.py with B^T
    packed once as its weight and A^T (K rows of M pixels) copied into scratch, Y^T copied back.

        acc[m, n] = bias[n] + sum_k (A[m, k] - a_zp) (B[k, n] - b_zp[n])   (the Net's int8 arithmetic)
        Y[m, n]   = saturate(rint(float32(acc) * mult[n]) + y_zp)   (integer Y; float32 Y: float32(acc) * mult[n])

    The products of QLinearMatMul and com.microsoft's QGemm where their B, scales and zero points are
    weights (ops/cpu/quantized.py, quantized_contrib.py: the same float32 multipliers). Under the
    "onnxruntime" arithmetic without VNNI, uint8 A x int8 B with b_zp = 0 runs qgemm2d_sat (pairs of k
    in K's order, as MLAS), or for M <= GEMV_ROWS qgemv_sat (the same sums, N in the lanes); on a VNNI
    host the same kernels with exact sums (vpdpbusd: int8_arithmetic.dot_product()); else the exact
    qgemm2d. With exact sums, an 8-bit Y and POOLED_PREDICTOR_AMX_CONV=1 on a host with AMX-INT8,
    compiled/qgemm.py's qconv_amx (AMX tiles, the same bits). Called as obj(a, out): a (M, K), out (M, N).
    """

    def __init__(self, ctx, b, b_zp, a_dtype, a_zp: int, bias, mult, y_dtype, y_zp: int, m: int):
        b = np.asarray(b)
        self.k, self.n = b.shape
        self.m = m
        zp = np.broadcast_to(np.asarray(b_zp if b_zp is not None else 0).astype(np.int32).reshape(-1), (self.n,))
        dot = int8_arithmetic.dot_product()  # the quad kernels' dot product (ops/int8_arithmetic.py), if any
        self.sat = dot is not None and np.dtype(a_dtype) == np.uint8 and b.dtype == np.int8 and not zp.any()
        self.q = compiled.dots.module("qgemm", dot) if self.sat else compiled.qgemm
        self.gemv = self.sat and m <= GEMV_ROWS
        # AMX tiles (compiled/amx.py's amx_qconv through qgemm.qconv_amx) where the host has them and the output
        # is 8-bit: the exact sums, so the vpdpbusd kernels' bits (off unless POOLED_PREDICTOR_AMX_CONV=1)
        self.amx = (self.sat and not self.gemv and dot != "vpmaddubsw" and np.dtype(y_dtype) != np.float32
                    and compiled.amx.conv_enabled())
        if self.gemv:  # the output columns in the lanes (qgemv_sat): at batch 1 the pixel GEMM uses 1 lane of 16
            n8 = -(-self.n // 8) * 8
            self.wp = shared_weights(b, ("qproduct_gemv",), lambda w: compiled.qgemm.pack_quads(
                np.concatenate([np.asarray(w).T, np.zeros((n8 - self.n, self.k), np.int8)]), tile=8))
            self.kq = -(-self.k // 4)
            self.a_ref = ctx.scratch((m * 4 * self.kq,), np.uint8)
        elif self.amx:
            self.offs = compiled.qgemm.quad_offsets(np.arange(self.k, dtype=np.int64) * m)
            self.wp = shared_weights(b, ("qproduct_rows_amx",),
                                     lambda w: compiled.amx.pack_rows(np.ascontiguousarray(np.asarray(w).T)))
            self.k64 = compiled.amx.k_padded(self.offs.size)
            self.xq_ref = ctx.scratch((compiled.qgemm.amx_workspace_bytes(self.offs.size),), np.uint8)
            self.amx_addr = compiled.amx.address("amx_qconv_s8" if np.dtype(y_dtype) == np.int8 else "amx_qconv_u8")
        elif self.sat:
            self.wp = shared_weights(b, ("qproduct_quads",),
                                     lambda w: compiled.qgemm.pack_quads(np.ascontiguousarray(np.asarray(w).T)))
            self.offs = compiled.qgemm.quad_offsets(np.arange(self.k, dtype=np.int64) * m)
            self.xq_ref = ctx.scratch((compiled.qgemm.packed_bytes(self.offs.size),), np.uint8)
        else:
            self.wp = shared_weights(b, ("qproduct", tuple(zp)), lambda w: compiled.qgemm.pack_pairs(np.asarray(w).T, zp))
            self.offs = compiled.qgemm.pair_offsets(np.arange(self.k, dtype=np.int64) * m)
        self.bias = _ro((np.asarray(bias, np.int64) - a_zp * compiled.qgemm.row_sums(b.T, zp)).astype(np.int32))
        self.mult = _ro(np.asarray(mult, np.float32).reshape(self.n))
        if self.gemv:  # read 8 columns at a time: padded to whole blocks
            pad = -self.n % 8
            self.bias = _ro(np.concatenate([self.bias, np.zeros(pad, np.int32)]))
            self.mult = _ro(np.concatenate([self.mult, np.zeros(pad, np.float32)]))
        self.y_zp = int(y_zp)
        self.y_float = np.dtype(y_dtype) == np.float32
        self.x_ref = ctx.scratch((self.k * m + 64,), a_dtype)
        self.y_ref = ctx.scratch((self.n * m,), y_dtype)
        self.ws_ref = ctx.scratch((max(compiled.qgemm.MR, compiled.qgemm.MRS) * compiled.qgemm.NP,), y_dtype)

    def steps(self, a, out):
        """__call__'s compiled calls for these arrays as (function, arguments) (compiled.prepared binds
        them once), or None where it has none to bind (only the GEMV path into a contiguous out)."""
        if not self.gemv or not out.flags.c_contiguous:
            return None
        m, k = self.m, self.k
        ab = self.a_ref.array
        return [(np.copyto, (ab.reshape(m, 4 * self.kq)[:, :k], a.reshape(m, k))),
                (self.q.qgemv_sat, (self.wp, ab, out.reshape(-1), m, self.n, self.kq, self.bias, self.mult,
                                            self.y_zp, compiled.qgemm.ONES, self.ws_ref.array))]

    def __call__(self, a, out):
        m, k, n = self.m, self.k, self.n
        if self.gemv:
            ab = self.a_ref.array
            np.copyto(ab.reshape(m, 4 * self.kq)[:, :k], a.reshape(m, k))
            y = out.reshape(-1) if out.flags.c_contiguous else self.y_ref.array
            self.q.qgemv_sat(self.wp, ab, y, m, n, self.kq, self.bias, self.mult, self.y_zp,
                                     compiled.qgemm.ONES, self.ws_ref.array)
            if not out.flags.c_contiguous:
                np.copyto(out.reshape(m, n), y[:m * n].reshape(m, n))
            return
        x = self.x_ref.array
        _transpose_into(a.reshape(m, k), x[:k * m])
        yt = self.y_ref.array
        args = (self.wp, x, 0, self.offs, yt, 0, m, n, m, self.bias, self.mult, self.y_zp, self.ws_ref.array)
        if self.amx:  # Y^T (N rows of M pixels) on AMX tiles: X^T packed 256 pixels at a time
            self.q.qconv_amx(self.amx_addr, self.wp, self.k64, x, 0, self.offs, self.xq_ref.array, yt, 0, m, n, m,
                             self.bias, self.mult, self.y_zp, 0, 0)
        elif self.sat:
            (self.q.qgemm2d_sat_f32 if self.y_float else self.q.qgemm2d_sat)(*args, compiled.qgemm.ONES, self.xq_ref.array)
        else:
            (compiled.qgemm.qgemm2d_f32 if self.y_float else compiled.qgemm.qgemm2d)(*args)
        if out.flags.c_contiguous:
            _transpose_into(yt[:n * m].reshape(n, m), out.reshape(-1))
        else:
            np.copyto(out.reshape(m, n), yt.reshape(n, m).T)
