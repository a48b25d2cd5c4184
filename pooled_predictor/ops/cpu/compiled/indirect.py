"""Calls from numba code to native functions given by address: compiled/amx.py's AMX kernels.

The AMX kernels are compiled by llvmlite into an engine of their own (numba's IR types have no x86_amx), so
numba code cannot name them; it calls them through their address, passed as an int64 argument (not baked
into the code: the functions stay in numba's disk cache, and the caller can pass a ctypes callback instead,
which is how the tests run these paths on hosts without AMX). The driver loops (compiled/qgemm.py's
qconv_amx, compiled/amx.py's dynamic_qmatmul_amx) then run as one numba call each: the GIL released once,
and fusible into a Net's native runs (compiled/native_runs.py) like any other kernel.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["call_dqgemm", "call_qconv"]

_I8P = ir.IntType(8).as_pointer()
_I64 = ir.IntType(64)
_F32 = ir.FloatType()


def _data(context, builder, ty, val, offset=None):
    """The address of element `offset` (an i64 IR value, or 0) of array argument val, as i8*."""
    ptr = context.make_array(ty)(context, builder, val).data
    if offset is not None:
        ptr = builder.gep(ptr, [offset])
    return builder.bitcast(ptr, _I8P)


def _call(builder, addr, arg_types, values):
    fnty = ir.FunctionType(ir.VoidType(), arg_types)
    builder.call(builder.inttoptr(addr, fnty.as_pointer()), values)


@intrinsic
def call_qconv(typingctx, addr, wa, k64, xq, tile_b, t_n, m, p_n, b, mult, zp, y, y_off, ldy):
    """amx_qconv_<kind>(wa, k64, xq, tile_b, t_n, m, p_n, b, mult, zp, &y[y_off], ldy) at address `addr`
    (compiled/amx.py's _qconv_ir signature); arrays by their data pointers."""
    sig = types.void(addr, wa, k64, xq, tile_b, t_n, m, p_n, b, mult, zp, y, y_off, ldy)

    def codegen(context, builder, signature, args):
        a = signature.args
        values = [_data(context, builder, a[1], args[1]), args[2], _data(context, builder, a[3], args[3]), args[4],
                  args[5], args[6], args[7], _data(context, builder, a[8], args[8]),
                  _data(context, builder, a[9], args[9]), args[10], _data(context, builder, a[11], args[11], args[12]),
                  args[13]]
        _call(builder, args[0], [_I8P, _I64, _I8P, _I64, _I64, _I64, _I64, _I8P, _I8P, _I64, _I8P, _I64], values)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def call_dqgemm(typingctx, addr, xq, lda, wp, pstride, kb, m, n, cs, bs, bias, has_bias, zp, a_scale, y, ldy):
    """amx_dqgemm(xq, lda, wp, pstride, kb, m, n, cs, bs, bias, has_bias, zp, a_scale, y, ldy) at address
    `addr` (compiled/amx.py's ir_text signature); arrays by their data pointers, a_scale a float32."""
    sig = types.void(addr, xq, lda, wp, pstride, kb, m, n, cs, bs, bias, has_bias, zp, a_scale, y, ldy)

    def codegen(context, builder, signature, args):
        a = signature.args
        values = [_data(context, builder, a[1], args[1]), args[2], _data(context, builder, a[3], args[3]), args[4],
                  args[5], args[6], args[7], _data(context, builder, a[8], args[8]),
                  _data(context, builder, a[9], args[9]), _data(context, builder, a[10], args[10]), args[11],
                  args[12], args[13], _data(context, builder, a[14], args[14]), args[15]]
        _call(builder, args[0], [_I8P, _I64, _I8P, _I64, _I64, _I64, _I64, _I8P, _I8P, _I8P, _I64, _I64, _F32,
                                 _I8P, _I64], values)
        return context.get_dummy_value()

    return sig, codegen
