"""u8 x s8 GEMMs on Intel AMX tiles, for hosts that have AMX-INT8: DynamicQuantizeMatMul's product (TDPBUSD)
and QLinearConv's (TDPBSUD, amx_qconv_u8 / _s8: below).

    acc[m, n] = sum_k A_q[m, k] W[k, n]                      exact int32 sums (Intel SDM, TDPBUSD)
    Y[m, n]   = float32(acc[m, n] - zp colsum[n]) * float32(a_scale * b_scale[n])  (+ bias[n])

The same arithmetic and epilogue as compiled/dqgemm.py's vpdpbusd kernels, so the same bits: A_q uint8
(DynamicQuantizeLinear's codes, zero point zp), W int8 with zero point 0, colsum[n] = sum_k W[k, n].
onnxruntime's MLAS runs its u8 x s8 QGEMM on AMX where the host has it (qgemm_kernel_amx.cpp): on a
Sapphire / Emerald Rapids Xeon one TDPBUSD multiplies a 16 x 64 tile of A by a 64 x 16 tile of W (16 K
products) where AVX512-VNNI's VPDPBUSD does 64, and its DynamicQuantizeMatMul ran a BERT-base-sized
encoder's projections at 145 u8 x s8 products a cycle, above VPDPBUSD's peak of 128 (two a cycle): the
0.95x row of benchmarks/int8.py there (2026-11-28); this kernel took it to 1.21-1.36x.

The kernels are LLVM IR with the AMX intrinsics (`llvm.x86.tileloadd64.internal`, `tdpbusd.internal`,
`tilestored64.internal`: LLVM configures the tiles itself, ldtilecfg at entry and tilerelease at exit),
compiled once per process by llvmlite for the host CPU into its own MCJIT engine (numba's IR types have no
x86_amx, so they cannot be numba intrinsics). The nodes call them from numba by their address
(compiled/indirect.py: dynamic_qmatmul_amx, qmatmul_amx here, qgemm.qconv_amx): one numba call a node, the
GIL released once, fusible into a Net's native runs; gemm() calls one through ctypes (tests, benchmarks).

Blocking: W's packed panels (compiled/dqgemm.pack_panels: 16 columns, quads of k as 64-byte rows: one
panel's 16 quads are exactly TDPBUSD's 16 x 64-byte B tile) go two at a time (32 columns); for each pair
the rows go 32 at a time: 2 A tiles, 2 B tiles and 4 int32 C tiles (16 x 16), the 8 tile registers; K in
steps of 64. The pair's panels stay in L1 / L2 across the row blocks. The C tiles are stored to a 4 KiB
stack buffer and the epilogue reads them back 16 columns a vector, storing with a mask past N.
Callers pad: W to K64 = K rounded up to 64 (at least 64) and to an even number of panels (zeros), A_q's
rows to K64 bytes (zeros past K) in a buffer of M32 rows (M rounded up to 32: the rows past M are read
and their results dropped), the per-column vectors to N32 floats / ints.

QLinearConv (ops/cpu/qconv.py, the quad kernels' case: uint8 X, int8 W of zero point 0, exact sums):
Y[m, p] = requantize(b[m] + sum_k W[m, k] X[k, p]) with W's rows as the signed A tiles (pack_rows: rows
of K64 bytes) and X's 16-pixel tiles as packed by compiled/qgemm.py (its _pack_block: quad j of a tile is 16
pixels x 4 k, one 64-byte B tile row) as the unsigned B tiles: TDPBSUD, 32 channels x 32 pixels a block,
pairs of pixel tiles outer (their X stays in L1 across the channel blocks), then MLAS's requantization as
compiled/qgemm.py's wide strips run it (the same bits as the vpdpbusd kernels). compiled/qgemm.py's qconv_amx
packs X a block of 256 pixels at a time (their tiles stay in L2) and calls the kernel on each through its
address (compiled/indirect.py). Off unless POOLED_PREDICTOR_AMX_CONV=1 (conv_enabled()): written and tested
through its numpy walk on hosts without AMX, not yet run or timed on one.

Availability (usable()): the host has AMX-TILE and AMX-INT8 (llvmlite's host features), Linux granted
this process the tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), as every AMX user
must ask since Linux 5.16), and POOLED_PREDICTOR_AMX is not 0. Elsewhere nothing here compiles: LLVM
cannot select the instructions without the features.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import threading

import numpy as np
from numba import types

from .dqgemm import _quantize_rows
from .indirect import call_dqgemm
from .jit import njit

__all__ = ["HOST_AMX", "K_STEP", "ROW_BLOCK", "address", "conv_enabled", "dynamic_qmatmul_amx", "gemm", "ir_text",
           "kernel", "module_ir", "pack_panels", "pack_rows", "padded", "qmatmul_amx", "status",
           "usable"]

K_STEP = 64  # bytes of k per A tile row / quads per B tile x 4
ROW_BLOCK = 32  # rows of A per block: 2 tiles of 16
COL_BLOCK = 32  # columns of W per block: 2 panels of 16

_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
_SYS_ARCH_PRCTL = 158  # x86-64


def _host_features() -> dict:
    try:
        from llvmlite import binding

        return dict(binding.get_host_cpu_features())
    except Exception:  # no feature query on this platform
        return {}


_HOST = _host_features()
HOST_AMX = bool(_HOST.get("amx-tile", False) and _HOST.get("amx-int8", False))
"""Whether this host's CPU has AMX-TILE and AMX-INT8."""

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_state: dict = {}


def _request_permission() -> bool:
    """Ask Linux for the AMX tile data state for this process (arch_prctl(ARCH_REQ_XCOMP_PERM)); True when
    granted. Without it the first tile instruction raises SIGILL."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM),
                          ctypes.c_long(_XFEATURE_XTILEDATA)) == 0
        _state["errno"] = 0 if ok else ctypes.get_errno()
        return ok
    except (OSError, AttributeError) as e:
        _state["errno"] = str(e)
        return False


def usable() -> bool:
    """Whether the AMX kernels may run here: HOST_AMX, POOLED_PREDICTOR_AMX not "0", the permission granted
    and the kernels compiled (both once per process; a failure is logged, status() names it, and the
    nodes keep their VNNI kernels)."""
    if not HOST_AMX or os.environ.get("POOLED_PREDICTOR_AMX", "1").strip() == "0":
        return False
    with _lock:
        if "granted" not in _state:
            _state["granted"] = _request_permission()
        if _state["granted"] and "fns" not in _state and "broken" not in _state:
            try:
                _compile()
            except Exception as exc:  # an LLVM without the AMX intrinsics, ...: the VNNI kernels serve
                _state["broken"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                _log.warning("AMX kernels not compiled (%s): the int8 nodes keep their VNNI kernels",
                             _state["broken"])
        return _state["granted"] and "fns" in _state


def conv_enabled() -> bool:
    """Whether QLinearConv takes the AMX kernel: usable() and POOLED_PREDICTOR_AMX_CONV=1. Off by default until
    it has been timed on AMX hardware (its kernels are checked on any host only through their numpy walks)."""
    return os.environ.get("POOLED_PREDICTOR_AMX_CONV", "0").strip() == "1" and usable()


def status() -> str:
    """One line: whether the AMX kernel runs here, or why not (profiles and benchmarks print it)."""
    if not HOST_AMX:
        return "AMX: not on this CPU"
    if os.environ.get("POOLED_PREDICTOR_AMX", "1").strip() == "0":
        return "AMX: off (POOLED_PREDICTOR_AMX=0)"
    if usable():
        return "AMX: on (tdpbusd tiles)"
    if "broken" in _state:
        return f"AMX: its kernels did not compile ({_state['broken']})"
    code = _state.get("errno")
    name = errno.errorcode.get(code, code) if isinstance(code, int) else code
    return f"AMX: Linux refused the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM: {name})"


def _intrinsics() -> str:
    return """
declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare x86_amx @llvm.x86.tdpbusd.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)
declare x86_amx @llvm.x86.tilezero.internal(i16, i16)
declare x86_amx @llvm.x86.tdpbsud.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.masked.store.v16f32.p0(<16 x float>, ptr, i32 immarg, <16 x i1>)
declare void @llvm.masked.store.v16i8.p0(<16 x i8>, ptr, i32 immarg, <16 x i1>)
declare <16 x float> @llvm.rint.v16f32(<16 x float>)
"""


def _splat(name: str, ty: str, scalar: str, value: str) -> str:
    return (f"  %{name}.i = insertelement <16 x {ty}> poison, {scalar} {value}, i64 0\n"
            f"  %{name} = shufflevector <16 x {ty}> %{name}.i, <16 x {ty}> poison, <16 x i32> zeroinitializer\n")


def ir_text() -> str:
    """The kernel's LLVM IR (textual; opaque pointers):

    void amx_dqgemm(u8* xq, i64 lda, i8* wp, i64 pstride, i64 kb, i64 m, i64 n, i32* cs, f32* bs, f32* bias,
                    i64 has_bias, i64 zp, f32 a_scale, f32* y, i64 ldy)

    xq: A_q, row r at xq + r lda (lda >= 64 kb bytes), at least M32 rows; wp: panels of 16 columns, panel p
    at wp + p pstride, its quad j (64 bytes: 16 columns x 4 k) at + 64 j, an even number of panels covering
    n; kb: K64 / 64 (at least 1); cs, bs, bias: N32 elements (bias read only when has_bias); y: (m, n) float32
    of row stride ldy floats, its first n columns of m rows written."""
    return _intrinsics() + _dqgemm_ir()


def _mask_ir(name: str, first: str, bound: str) -> str:
    """%name = the <16 x i1> of lanes i with first + i < bound (bound a <16 x i64> splat)."""
    return _splat(f"{name}.b", "i64", "i64", first) + f"""
  %{name}.ix = add <16 x i64> %{name}.b, <{", ".join(f"i64 {i}" for i in range(16))}>
  %{name} = icmp slt <16 x i64> %{name}.ix, {bound}
"""


def _close_ir(outer: str, counter: str) -> str:
    """The kernels' loop ends: the epilogue's row loop back to %r_body, mb_latch, the outer loop's latch
    (`outer`_latch stepping %`counter`) and the exit."""
    return f"""
  %r1 = add i64 %r, 1
  %rc = icmp slt i64 %r1, %rows
  br i1 %rc, label %r_body, label %mb_latch

mb_latch:
  %mb1 = add i64 %mb, 1
  br label %mb_head

{outer}_latch:
  %{counter}1 = add i64 %{counter}, 1
  br label %{outer}_head

exit:
  ret void
}}
"""


def _block_ir(enter: str, leave: str, a_base: str, a_stride: str, b0: str, b1: str, tdp: str) -> str:
    """The kernels' shared loop over blocks of 32 A rows (mb_head .. the int32 C tiles stored, %rows set):
    2 A tiles from %a_base (rows of %a_stride bytes, 32 a block, %a1step = 16 a_stride set at entry), 2 B tiles
    from %b0 / %b1 (16 rows of 64 bytes, 1024 bytes a step of K), 4 C tiles by `tdp` (tdpbusd: unsigned A;
    tdpbsud: signed A), %kb steps of K; entered from block `enter`, left to `leave`; ends branching to %r_body
    (the caller's epilogue, which ends in mb_latch)."""
    return """  br label %mb_head

mb_head:
  %mb = phi i64 [0, %{enter}], [%mb1, %mb_latch]
  %mc = icmp slt i64 %mb, %mblocks
  br i1 %mc, label %mb_body, label %{leave}

mb_body:
  %row0 = mul i64 %mb, 32
  %a0off = mul i64 %row0, %{a_stride}
  %a0 = getelementptr i8, ptr %{a_base}, i64 %a0off
  %a1 = getelementptr i8, ptr %a0, i64 %a1step
  %z00 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z01 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z10 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z11 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  br label %k_body

k_body:
  %kk = phi i64 [0, %mb_body], [%kk1, %k_body]
  %c00 = phi x86_amx [%z00, %mb_body], [%c00n, %k_body]
  %c01 = phi x86_amx [%z01, %mb_body], [%c01n, %k_body]
  %c10 = phi x86_amx [%z10, %mb_body], [%c10n, %k_body]
  %c11 = phi x86_amx [%z11, %mb_body], [%c11n, %k_body]
  %ko = mul i64 %kk, 64
  %pa0 = getelementptr i8, ptr %a0, i64 %ko
  %pa1 = getelementptr i8, ptr %a1, i64 %ko
  %bo = mul i64 %kk, 1024
  %pb0 = getelementptr i8, ptr %{b0}, i64 %bo
  %pb1 = getelementptr i8, ptr %{b1}, i64 %bo
  %ta0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pa0, i64 %{a_stride})
  %ta1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pa1, i64 %{a_stride})
  %tb0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pb0, i64 64)
  %tb1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pb1, i64 64)
  %c00n = call x86_amx @llvm.x86.{tdp}.internal(i16 16, i16 64, i16 64, x86_amx %c00, x86_amx %ta0, x86_amx %tb0)
  %c01n = call x86_amx @llvm.x86.{tdp}.internal(i16 16, i16 64, i16 64, x86_amx %c01, x86_amx %ta0, x86_amx %tb1)
  %c10n = call x86_amx @llvm.x86.{tdp}.internal(i16 16, i16 64, i16 64, x86_amx %c10, x86_amx %ta1, x86_amx %tb0)
  %c11n = call x86_amx @llvm.x86.{tdp}.internal(i16 16, i16 64, i16 64, x86_amx %c11, x86_amx %ta1, x86_amx %tb1)
  %kk1 = add i64 %kk, 1
  %kc = icmp slt i64 %kk1, %kb
  br i1 %kc, label %k_body, label %k_done

k_done:
  %ct01 = getelementptr i8, ptr %ct, i64 64
  %ct10 = getelementptr i8, ptr %ct, i64 2048
  %ct11 = getelementptr i8, ptr %ct, i64 2112
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %ct, i64 128, x86_amx %c00n)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %ct01, i64 128, x86_amx %c01n)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %ct10, i64 128, x86_amx %c10n)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %ct11, i64 128, x86_amx %c11n)
  %left = sub i64 %m, %row0
  %rl = icmp slt i64 %left, 32
  %rows = select i1 %rl, i64 %left, i64 32
  br label %r_body
""".format(enter=enter, leave=leave, a_base=a_base, a_stride=a_stride, b0=b0, b1=b1,
                                tdp=tdp)


def _dqgemm_ir() -> str:
    body = ["""
define void @amx_dqgemm(ptr noalias nocapture readonly %xq, i64 %lda, ptr noalias nocapture readonly %wp,
                        i64 %pstride, i64 %kb, i64 %m, i64 %n, ptr noalias nocapture readonly %cs,
                        ptr noalias nocapture readonly %bs, ptr noalias nocapture readonly %bias, i64 %has_bias,
                        i64 %zp, float %a_scale, ptr noalias nocapture %y, i64 %ldy) {
entry:
  %ct = alloca [1024 x i32], align 64
  %n31 = add i64 %n, 31
  %npairs = sdiv i64 %n31, 32
  %m31 = add i64 %m, 31
  %mblocks = sdiv i64 %m31, 32
  %pstride2 = mul i64 %pstride, 2
  %a1step = mul i64 %lda, 16
  %zp32 = trunc i64 %zp to i32
  %nzp32 = sub i32 0, %zp32
""", _splat("nzp", "i32", "i32", "%nzp32"), _splat("scv", "float", "float", "%a_scale"),
            _splat("nv", "i64", "i64", "%n"), """
  %hb = icmp ne i64 %has_bias, 0
  br label %np_head

np_head:
  %p = phi i64 [0, %entry], [%p1, %np_latch]
  %pc = icmp slt i64 %p, %npairs
  br i1 %pc, label %np_body, label %exit

np_body:
  %b0off = mul i64 %p, %pstride2
  %b0 = getelementptr i8, ptr %wp, i64 %b0off
  %b1 = getelementptr i8, ptr %b0, i64 %pstride
  %col0 = mul i64 %p, 32
  %col1 = add i64 %col0, 16
"""]
    # the pair's per-column vectors: - zp colsum (int32), a_scale * b_scale (float32), bias; masks past n
    for h in (0, 1):
        body.append(f"""
  %csp{h} = getelementptr i32, ptr %cs, i64 %col{h}
  %csv{h} = load <16 x i32>, ptr %csp{h}, align 4
  %corr{h} = mul <16 x i32> %csv{h}, %nzp
  %bsp{h} = getelementptr float, ptr %bs, i64 %col{h}
  %bsv{h} = load <16 x float>, ptr %bsp{h}, align 4
  %mult{h} = fmul <16 x float> %scv, %bsv{h}
  %biasp{h} = getelementptr float, ptr %bias, i64 %col{h}
  %biasv{h} = load <16 x float>, ptr %biasp{h}, align 4
""" + _mask_ir(f"mask{h}", f"%col{h}", "%nv"))
    body.append(_block_ir("np_body", "np_latch", "xq", "lda", "b0", "b1", "tdpbusd"))
    body.append("""

r_body:
  %r = phi i64 [0, %k_done], [%r1, %r_body]
  %yr = add i64 %row0, %r
  %yoff = mul i64 %yr, %ldy
  %yrow = getelementptr float, ptr %y, i64 %yoff
  %ctoff = mul i64 %r, 128
  %ctrow = getelementptr i8, ptr %ct, i64 %ctoff
""")
    for h in (0, 1):  # float32(acc - zp colsum) * float32(a_scale * b_scale) (+ bias: selected, so -0.0 stays)
        body.append(f"""
  %ctp{h} = getelementptr i8, ptr %ctrow, i64 {64 * h}
  %acc{h} = load <16 x i32>, ptr %ctp{h}, align 64
  %sum{h} = add <16 x i32> %acc{h}, %corr{h}
  %fl{h} = sitofp <16 x i32> %sum{h} to <16 x float>
  %sc{h} = fmul <16 x float> %fl{h}, %mult{h}
  %bi{h} = fadd <16 x float> %sc{h}, %biasv{h}
  %out{h} = select i1 %hb, <16 x float> %bi{h}, <16 x float> %sc{h}
  %yp{h} = getelementptr float, ptr %yrow, i64 %col{h}
  call void @llvm.masked.store.v16f32.p0(<16 x float> %out{h}, ptr %yp{h}, i32 4, <16 x i1> %mask{h})
""")
    body.append(_close_ir("np", "p"))
    return "".join(body)


QCONV_KINDS = {"u8": (0.0, 255.0), "s8": (-128.0, 127.0)}
"""qconv_ir's outputs: uint8 / int8 Y and its range."""

def _qconv_ir(kind: str) -> str:
    """amx_qconv_<kind>: Y = requantize(W X + b), W int8 (M, K) as A tiles, X uint8 packed 16 pixels a tile
    (compiled/qgemm.py's packing) as B tiles, TDPBSUD (signed A, unsigned B); the epilogue MLAS's
    requantization as compiled/qgemm.py's wide strips run it (quantize.wide): float32(acc + b[m]) * mult[m],
    clamped to [lo - zp, hi - zp] (compare and select), rounded half to even, + zp, truncated to 8 bits.

    void amx_qconv_<kind>(i8* wa, i64 k64, u8* xq, i64 tile_b, i64 t_n, i64 m, i64 p_n, i32* b, f32* mult,
                          i64 zp, <kind>* y, i64 ldy)

    wa: pack_rows(W), W (M, K) int8 as rows of k64 bytes (zeros past K), rows_padded(M) rows; xq: X's
    16-pixel tiles packed by compiled/qgemm.py (tile t at xq + t tile_b, its quad j -- 16 pixels x 4 k,
    byte 4p + i -- at + 64 j; tile_b = 16 k64), t_n tiles and one more readable (a pair's second tile);
    b (M,) int32 bias (the input's zero point folded in), mult (M,) float32; Y[m, p] at y + m ldy + p, its
    p_n pixels written."""
    lo, hi = QCONV_KINDS[kind]
    body = [f"""
define void @amx_qconv_{kind}(ptr noalias nocapture readonly %wa, i64 %k64, ptr noalias nocapture readonly %xq,
                         i64 %tile_b, i64 %t_n, i64 %m, i64 %p_n, ptr noalias nocapture readonly %b,
                         ptr noalias nocapture readonly %mult, i64 %zp, ptr noalias nocapture %y, i64 %ldy) {{
entry:
  %ct = alloca [1024 x i32], align 64
  %kb = sdiv i64 %k64, 64
  %t1 = add i64 %t_n, 1
  %npairs = sdiv i64 %t1, 2
  %m31 = add i64 %m, 31
  %mblocks = sdiv i64 %m31, 32
  %a1step = mul i64 %k64, 16
  %tile_b2 = mul i64 %tile_b, 2
  %zp32 = trunc i64 %zp to i32
  %zpf = sitofp i32 %zp32 to float
  %lof = fsub float {lo:.1f}, %zpf
  %hif = fsub float {hi:.1f}, %zpf
""", _splat("lov", "float", "float", "%lof"), _splat("hiv", "float", "float", "%hif"),
            _splat("zpv", "i32", "i32", "%zp32"), _splat("pnv", "i64", "i64", "%p_n"), """
  br label %tp_head

tp_head:
  %tp = phi i64 [0, %entry], [%tp1, %tp_latch]
  %tpc = icmp slt i64 %tp, %npairs
  br i1 %tpc, label %tp_body, label %exit

tp_body:
  %x0off = mul i64 %tp, %tile_b2
  %x0 = getelementptr i8, ptr %xq, i64 %x0off
  %x1 = getelementptr i8, ptr %x0, i64 %tile_b
  %px0 = mul i64 %tp, 32
  %px1 = add i64 %px0, 16
"""]
    for h in (0, 1):
        body.append(_mask_ir(f"mask{h}", f"%px{h}", "%pnv"))
    body.append(_block_ir("tp_body", "tp_latch", "wa", "k64", "x0", "x1", "tdpbsud"))
    body.append("""

r_body:
  %r = phi i64 [0, %k_done], [%r1, %r_body]
  %co = add i64 %row0, %r
  %yoff = mul i64 %co, %ldy
  %yrow = getelementptr i8, ptr %y, i64 %yoff
  %ctoff = mul i64 %r, 128
  %ctrow = getelementptr i8, ptr %ct, i64 %ctoff
  %bp = getelementptr i32, ptr %b, i64 %co
  %bco = load i32, ptr %bp, align 4
  %mp = getelementptr float, ptr %mult, i64 %co
  %mco = load float, ptr %mp, align 4
""" + _splat("bv", "i32", "i32", "%bco") + _splat("mv", "float", "float", "%mco"))
    for h in (0, 1):
        body.append(f"""
  %ctp{h} = getelementptr i8, ptr %ctrow, i64 {64 * h}
  %acc{h} = load <16 x i32>, ptr %ctp{h}, align 64
  %sum{h} = add <16 x i32> %acc{h}, %bv
  %fl{h} = sitofp <16 x i32> %sum{h} to <16 x float>
  %sc{h} = fmul <16 x float> %fl{h}, %mv
  %lt{h} = fcmp olt <16 x float> %sc{h}, %hiv
  %hic{h} = select <16 x i1> %lt{h}, <16 x float> %sc{h}, <16 x float> %hiv
  %gt{h} = fcmp ogt <16 x float> %hic{h}, %lov
  %loc{h} = select <16 x i1> %gt{h}, <16 x float> %hic{h}, <16 x float> %lov
  %rn{h} = call <16 x float> @llvm.rint.v16f32(<16 x float> %loc{h})
  %iv{h} = fptosi <16 x float> %rn{h} to <16 x i32>
  %q{h} = add <16 x i32> %iv{h}, %zpv
  %q8{h} = trunc <16 x i32> %q{h} to <16 x i8>
  %yp{h} = getelementptr i8, ptr %yrow, i64 %px{h}
  call void @llvm.masked.store.v16i8.p0(<16 x i8> %q8{h}, ptr %yp{h}, i32 1, <16 x i1> %mask{h})
""")
    body.append(_close_ir("tp", "tp"))
    return "".join(body)


_PROTO = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                          ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_int64, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_int64)


def target_machine(cpu: str | None = None, features: str | None = None):
    """llvmlite's target machine for the host CPU (or `cpu` / `features`, e.g. "sapphirerapids" and
    "+amx-tile,+amx-int8" to emit this module's assembly on any host: tests)."""
    from llvmlite import binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    if cpu is None:
        cpu = llvm.get_host_cpu_name()
        features = llvm.get_host_cpu_features().flatten()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=cpu, features=features or "", opt=3, codemodel="jitdefault")


_QPROTO = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                           ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                           ctypes.c_void_p, ctypes.c_int64)


def module_ir() -> str:
    """The whole module's IR: amx_dqgemm (ir_text) and amx_qconv_u8 / _s8 (_qconv_ir)."""
    return _intrinsics() + _dqgemm_ir() + "".join(_qconv_ir(kind) for kind in QCONV_KINDS)


def _compile() -> None:
    """The module compiled by llvmlite for the host into its own MCJIT engine (kept for the process's life:
    it owns the code); its kernels as ctypes functions in _state["fns"]. Called under _lock."""
    from llvmlite import binding as llvm

    mod = llvm.parse_assembly(module_ir())
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, target_machine())
    engine.finalize_object()
    fns = {"amx_dqgemm": _PROTO(engine.get_function_address("amx_dqgemm"))}
    fns.update({f"amx_qconv_{k}": _QPROTO(engine.get_function_address(f"amx_qconv_{k}")) for k in QCONV_KINDS})
    _state.update(fns=fns, engine=engine)


def kernel(name: str = "amx_dqgemm"):
    """A compiled kernel of this module as a ctypes function: "amx_dqgemm" (ir_text's signature) or
    "amx_qconv_u8" / "amx_qconv_s8" (_qconv_ir's); the module compiles on first use (usable()).

    Raises:
        RuntimeError: the host cannot run it (usable() is False: status() says why). KeyError: no such kernel.
    """
    if not usable():
        raise RuntimeError(f"the AMX kernels cannot run here ({status()}); they need a CPU with AMX-TILE and "
                           "AMX-INT8 and Linux's permission (arch_prctl ARCH_REQ_XCOMP_PERM); "
                           "POOLED_PREDICTOR_AMX=0 turns them off")
    return _state["fns"][name]


def address(name: str) -> int:
    """The native address of kernel(name), for the numba drivers that call it (compiled/indirect.py)."""
    return int(ctypes.cast(kernel(name), ctypes.c_void_p).value)


def pack_rows(w: np.ndarray) -> np.ndarray:
    """int8 W (M, K) as the A tiles of amx_qconv read it: rows of k_padded(K) bytes, rows_padded(M) rows,
    zeros past K and M; flat int8, read-only."""
    w = np.asarray(w)
    if w.dtype != np.int8 or w.ndim != 2:
        raise TypeError(f"amx.pack_rows takes 2-D int8 weights, got {w.dtype} {w.shape}")
    m, k = w.shape
    out = np.zeros((rows_padded(m), k_padded(k)), np.int8)
    out[:m, :k] = w
    out = out.reshape(-1)
    out.flags.writeable = False
    return out


def pack_panels(w: np.ndarray) -> np.ndarray:
    """int8 W (K, N) as compiled/dqgemm.pack_panels lays it out, with K padded to K64 (a multiple of 64, at
    least 64) and N to a multiple of 32 (zeros): flat int8, read-only; panel p at byte 16 K64 p."""
    w = np.asarray(w)
    if w.dtype != np.int8 or w.ndim != 2:
        raise TypeError(f"amx.pack_panels takes 2-D int8 weights, got {w.dtype} {w.shape}")
    k, n = w.shape
    k64 = k_padded(k)
    n32 = (n + COL_BLOCK - 1) // COL_BLOCK * COL_BLOCK
    wb = np.zeros((k64, n32), np.int8)
    wb[:k, :n] = w
    out = np.ascontiguousarray(wb.reshape(k64 // 4, 4, n32 // 16, 16).transpose(2, 0, 3, 1)).reshape(-1)
    out.flags.writeable = False
    return out


def k_padded(k: int) -> int:
    """K64: K rounded up to a multiple of 64, at least 64 (A_q's row bytes and W's packed k)."""
    return max(K_STEP, (k + K_STEP - 1) // K_STEP * K_STEP)


def rows_padded(m: int) -> int:
    """M32: M rounded up to a multiple of 32 (the rows of A_q's buffer)."""
    return max(ROW_BLOCK, (m + ROW_BLOCK - 1) // ROW_BLOCK * ROW_BLOCK)


def padded(v, dtype, n: int) -> np.ndarray:
    """v (N,) as dtype, zeros up to N rounded up to 32: read-only (gemm's cs, bs, bias)."""
    v = np.asarray(v, dtype).reshape(-1)
    out = np.zeros((n + COL_BLOCK - 1) // COL_BLOCK * COL_BLOCK, dtype)
    out[:len(v)] = v
    out.flags.writeable = False
    return out


_DQ_SIG = types.void(types.int64, types.Array(types.float32, 2, "C", readonly=True), types.float32, types.float32,
                     types.Array(types.uint8, 1, "C"), types.int64, types.Array(types.int8, 1, "C", readonly=True),
                     types.Array(types.int32, 1, "C", readonly=True), types.Array(types.float32, 1, "C", readonly=True),
                     types.Array(types.float32, 1, "C", readonly=True), types.int64, types.Array(types.float32, 2, "C"))


@njit([_DQ_SIG], nogil=True, cache=True, error_model="numpy")
def dynamic_qmatmul_amx(addr, a, lo, hi, xq, k64, wp, cs, bs, bias, has_bias, y):
    """DynamicQuantizeMatMul in one call: A (M, K) float32 quantized into xq (compiled/dqgemm.py's
    quantization, its bits), then amx_dqgemm at
    address `addr` (address("amx_dqgemm"), or a function of its signature) into y (M, N) float32. Arguments
    as gemm()'s: xq of rows_padded(M) * k64 bytes, wp = pack_panels(W), cs / bs / bias padded to N32 (bias
    read only when has_bias)."""
    m_n = a.shape[0]
    n_n = y.shape[1]
    scale, zp = _quantize_rows(a, lo, hi, xq, k64)
    call_dqgemm(addr, xq, k64, wp, 16 * k64, k64 // K_STEP, m_n, n_n, cs, bs, bias, has_bias, zp, scale, y, n_n)


_QM_SIG = types.void(types.int64, types.Array(types.uint8, 2, "C", readonly=True), types.int64, types.float32,
                     types.Array(types.uint8, 1, "C"), types.int64, types.Array(types.int8, 1, "C", readonly=True),
                     types.Array(types.int32, 1, "C", readonly=True), types.Array(types.float32, 1, "C", readonly=True),
                     types.Array(types.float32, 1, "C", readonly=True), types.int64, types.Array(types.float32, 2, "C"))


@njit([_QM_SIG], nogil=True, cache=True, error_model="numpy")
def qmatmul_amx(addr, aq, a_zp, a_scale, xq, k64, wp, cs, bs, bias, has_bias, y):
    """com.microsoft MatMulIntegerToFloat's product for an already quantized uint8 A (M, K) of zero point a_zp
    and scale a_scale: A's rows copied into xq (k64 bytes a row, zeros past K), then amx_dqgemm at `addr` into
    y (M, N) float32; the other arguments as dynamic_qmatmul_amx's."""
    m_n, k_n = aq.shape
    n_n = y.shape[1]
    for m in range(m_n):
        row = m * k64
        for k in range(k_n):
            xq[row + k] = aq[m, k]
        for k in range(k_n, k64):
            xq[row + k] = 0
    call_dqgemm(addr, xq, k64, wp, 16 * k64, k64 // K_STEP, m_n, n_n, cs, bs, bias, has_bias, a_zp, a_scale, y, n_n)


def gemm(xq: np.ndarray, k64: int, m: int, wp: np.ndarray, cs: np.ndarray, bs: np.ndarray, bias, zp: int,
         a_scale: float, y: np.ndarray) -> None:
    """y (M, N) float32 = float32(A_q @ W - zp colsum) * float32(a_scale * bs) (+ bias), on AMX tiles.

    Args:
        xq: uint8 buffer of at least rows_padded(M) * k64 bytes, row r of A_q at r * k64 (zeros past K).
        k64: k_padded(K).
        m: M, the rows of A_q and y.
        wp: pack_panels(W), W (K, N) int8 with zero point 0.
        cs, bs: padded(colsum, int32, N), padded(b_scale, float32, N).
        bias: padded(bias, float32, N), or None.
        zp: A_q's zero point (0..255). a_scale: its scale (float32).
        y: (M, N) float32, C-contiguous rows (written).

    Raises:
        RuntimeError: not usable() here. ValueError: buffers too small for the shapes.
    """
    n = y.shape[-1]
    n32 = (n + COL_BLOCK - 1) // COL_BLOCK * COL_BLOCK
    if (xq.size < rows_padded(m) * k64 or wp.size < n32 * k64 or cs.size < n32 or bs.size < n32
            or (bias is not None and bias.size < n32) or y.size < m * n or not y.flags.c_contiguous):
        raise ValueError(f"amx.gemm: buffers too small for M {m}, K64 {k64}, N {n}")
    fn = kernel()
    b = bs if bias is None else bias  # not read without a bias
    fn(xq.ctypes.data, k64, wp.ctypes.data, 16 * k64, k64 // K_STEP, m, n, cs.ctypes.data, bs.ctypes.data,
       b.ctypes.data, 0 if bias is None else 1, int(zp), float(a_scale), y.ctypes.data, n)
