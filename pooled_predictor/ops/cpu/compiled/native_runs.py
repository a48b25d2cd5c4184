"""Runs of prepared kernel calls as one native call: one GIL release for many kernels.

    run = fuse(calls)     # a Layout's calls -> the same work, runs of compiled kernels fused
    for f in run: f()

A Net's forward calls one zero-argument callable per node (engine/layout.py). Where the node's
kernel is a numba function bound to its arrays (compiled.bound: the specialization's CPython
entry point), every call unboxes its arguments, releases the GIL, runs the native code and
takes the GIL back, waiting for it wherever another thread holds it: up to the switch interval
(5 ms) beside a busy Python thread, a futex wake among many pool workers. Beside a pure-Python
loop, MobileNetV2's 41 calls made a forward take 205 ms on Zen 5 (3.5 alone); as one native run,
8.7 ms (onnxruntime's run: 9.3; benchmarks/neighbours.py).

fuse() finds the runs of two or more consecutive calls whose kernels are compiled numba
specializations returning nothing (Bound calls, chains of them) with arguments of the types
below, and replaces each run by a NativeRun. Each specialization gets a shim, i32 shim(i64*
slots): an LLVM function built with numba's target context (its data models and calling
convention, as numba's own calls between compiled functions) that reads the arguments from 8-byte
slots and calls the specialization's native function at its address, returning whether it failed.
One runner, i64 run(i64* table, i64 n), calls the shims of a table of (shim, slots) pairs in turn
and returns the index of the first that fails (-1: none); a NativeRun calls it through ctypes,
which releases the GIL for the whole run. The arguments are fixed (a Layout binds its arrays
once), so a NativeRun fills its slots and table once. Shims are built once a process per
specialization and argument types (MobileNetV2's 10: 0.09 s; a second model's run of known ones:
2-3 ms), the runner once.

Arguments taken: numba Arrays (the array structure: meminfo and parent null -- the arrays are
borrowed, as numba's own calls pass them -- size, itemsize, data pointer, shape, strides),
integers, floats, booleans, and tuples of those. A call with any other argument, or whose
specialization returns a value, stays a Python call and ends the run.

A kernel that fails (an exception in nopython code) returns its error status and the run stops
there; the NativeRun calls that kernel's call again through its CPython entry point, which raises
the kernel's own exception (`failed_at` names the call for the Net's error message; a call that
does not fail again raises RuntimeError: its outputs may be partial). POOLED_PREDICTOR_NATIVE_RUNS=0
turns fusing off (read at import; ENABLED is read at each Layout's first compiled run).
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from functools import partial

import numpy as np
from llvmlite import ir
from numba import types

__all__ = ["ENABLED", "Bound", "NativeRun", "fuse", "fusible"]

ENABLED = os.environ.get("POOLED_PREDICTOR_NATIVE_RUNS", "1") != "0"
"""Whether Nets fuse runs of compiled kernel calls (POOLED_PREDICTOR_NATIVE_RUNS=0: no)."""

_I64 = ir.IntType(64)
_LOCK = threading.Lock()  # the tables below
_BUILD = threading.Lock()  # one shim or runner built at a time: their symbol names are unique in numba's JIT
_SHIMS: dict = {}  # (id(cres), argument types) -> (library, cres, shim address): every run shares them
_RUN = None  # (library, the runner through ctypes): _runner()


class Bound(partial):
    """compiled.bound()'s call of a numba specialization: partial(cres.entry_point, *args), with `cres`
    (the CompileResult) kept for fuse()."""

    __slots__ = ("cres",)


def _leaves(ty, value) -> list[int] | None:
    """The 8-byte slots of an argument of numba type `ty`, in the order of its LLVM value type's
    leaves (see _build_value), or None where this module does not take the type."""
    if isinstance(ty, types.Array):
        if not isinstance(value, np.ndarray) or value.ndim != ty.ndim:
            return None
        return [0, 0, value.size, value.itemsize, value.ctypes.data, *value.shape, *value.strides]
    if isinstance(ty, types.Boolean):
        return [int(bool(value))]
    if isinstance(ty, types.Integer):
        return [int(value) & 0xFFFFFFFFFFFFFFFF]
    if isinstance(ty, types.Float):
        if ty.bitwidth == 32:
            return [struct.unpack("<I", struct.pack("<f", float(value)))[0]]
        return [struct.unpack("<Q", struct.pack("<d", float(value)))[0]]
    if isinstance(ty, types.BaseTuple) and isinstance(value, tuple) and len(value) == len(ty.types):
        out = []
        for t, v in zip(ty.types, value):
            part = _leaves(t, v)
            if part is None:
                return None
            out += part
        return out
    return None


def _count(lt) -> int:
    """The leaves of an LLVM value type: a scalar or pointer is one; aggregates their elements'."""
    if isinstance(lt, ir.ArrayType):
        return lt.count * _count(lt.element)
    if isinstance(lt, (ir.LiteralStructType, ir.IdentifiedStructType)):
        return sum(_count(e) for e in lt.elements)
    return 1


def _build_value(builder, lt, slots, at: list):
    """The value of LLVM type lt from the slots at at[0] on (advanced): integers truncated, floats from
    their bits, pointers from addresses, aggregates element by element."""
    if isinstance(lt, ir.ArrayType):
        v = ir.Constant(lt, ir.Undefined)
        for i in range(lt.count):
            v = builder.insert_value(v, _build_value(builder, lt.element, slots, at), i)
        return v
    if isinstance(lt, (ir.LiteralStructType, ir.IdentifiedStructType)):
        v = ir.Constant(lt, ir.Undefined)
        for i, e in enumerate(lt.elements):
            v = builder.insert_value(v, _build_value(builder, e, slots, at), i)
        return v
    raw = builder.load(builder.gep(slots, [ir.Constant(_I64, at[0])]))
    at[0] += 1
    if isinstance(lt, ir.PointerType):
        return builder.inttoptr(raw, lt)
    if isinstance(lt, ir.FloatType):
        return builder.bitcast(builder.trunc(raw, ir.IntType(32)), lt)
    if isinstance(lt, ir.DoubleType):
        return builder.bitcast(raw, lt)
    if isinstance(lt, ir.IntType):
        return raw if lt.width == 64 else builder.trunc(raw, lt)
    raise TypeError(f"native_runs: no slot reading for LLVM type {lt}")


def _context():
    from numba.core.registry import cpu_target

    return cpu_target.target_context


def fusible(call) -> list | None:
    """The (cres, args, argument types) of each kernel call `call` makes, where every one can run in a
    NativeRun (a Bound call of a specialization returning nothing, or compiled.chain() of such calls, none
    for an empty chain); else None."""
    inner = getattr(call, "calls", None)
    if inner is not None and not inner:
        return []  # compiled.chain() of nothing (a Flatten of a view): no kernel, nothing to call
    if inner is not None:  # a chain: its calls' kernels, chains in it included
        out = []
        for c in inner:
            part = fusible(c)
            if part is None:
                return None
            out += part
        return out
    out = []
    for c in (call,):
        cres = getattr(c, "cres", None)
        if cres is None or c.keywords or cres.signature.return_type != types.none:
            return None
        argtys = tuple(cres.signature.args)
        if len(argtys) != len(c.args):
            return None
        out.append((cres, c.args, argtys))
    return out


def _slots(kernels) -> tuple[np.ndarray, list[int]] | None:
    """The slot buffer of a run's kernel calls (int64) and each call's first slot, or None where an argument
    is not taken."""
    ctx = _context()
    flat, firsts = [], []
    for cres, args, argtys in kernels:
        firsts.append(len(flat))
        for ty, v in zip(argtys, args):
            leaves = _leaves(ty, v)
            if leaves is None or len(leaves) != _count(ctx.get_value_type(ty)):
                return None
            flat += leaves
    return np.array(flat + [0], np.uint64).view(np.int64), firsts


def _library(name: str, build):
    """A code library of numba's JIT holding one function `name`, i32/i64 (...) built by build(module)
    (under numba's compiler lock); returns (library, the function's address)."""
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:  # numba's code libraries are built under it
        library = _context().codegen().create_library(name)
        module = library.create_ir_module(name)
        build(module)
        library.add_ir_module(module)
        library.finalize()
        return library, library.get_pointer_to_function(name)


def _shim(cres, argtys) -> int:
    """The address of i32 shim(i64* slots): cres's native function called with its arguments read from the
    slots (_build_value), 1 returned where it fails, 0 where not. One per specialization and argument types,
    shared by every run (_SHIMS)."""
    key = (id(cres), argtys)
    with _BUILD:
        with _LOCK:
            hit = _SHIMS.get(key)
        if hit is not None:
            return hit[2]
        return _build_shim(key, cres, argtys)


def _build_shim(key, cres, argtys) -> int:
    """_shim's build, under _BUILD."""
    ctx = _context()
    cc = ctx.call_conv
    from numba.core import cgutils
    from numba.core.callconv import excinfo_t

    addr = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    if not addr:
        raise RuntimeError(f"native_runs: no native function for {cres.fndesc.llvm_func_name}")
    name = f"pooled_predictor_shim_{len(_SHIMS)}_{cres.fndesc.llvm_func_name}"

    def build(module):
        fn = ir.Function(module, ir.FunctionType(ir.IntType(32), [_I64.as_pointer()]), name)
        fn.linkage = "external"
        builder = ir.IRBuilder(fn.append_basic_block("entry"))
        fnty = cc.get_function_type(types.none, argtys)
        target = builder.inttoptr(ir.Constant(_I64, addr), fnty.as_pointer())
        at = [0]
        values = [_build_value(builder, ctx.get_value_type(t), fn.args[0], at) for t in argtys]
        retty = cc.get_return_type(types.none).pointee
        ret = cgutils.alloca_once(builder, retty)
        builder.store(cgutils.get_null_value(retty), ret)
        exc = cgutils.alloca_once(builder, ir.PointerType(excinfo_t), name="excinfo")
        code = builder.call(target, [ret, exc] + list(cc._get_arg_packer(argtys).as_arguments(builder, values)))
        status = cc._get_return_status(builder, code, builder.load(exc))
        builder.ret(builder.zext(status.is_error, ir.IntType(32)))

    library, address = _library(name, build)
    with _LOCK:  # the CompileResult is kept too: its library holds the code called at its address
        _SHIMS[key] = (library, cres, address)
    return address


def _runner():
    """i64 run(i64* table, i64 n): for k < n, table[2k] a shim's address called with table[2k + 1] (its slots);
    the first k whose shim returns nonzero, or -1. Built once a process; called through ctypes (the GIL
    released for the call)."""
    with _BUILD:
        return _RUN or _build_runner()


def _build_runner():
    """_runner's build, under _BUILD."""
    global _RUN

    def build(module):
        fn = ir.Function(module, ir.FunctionType(_I64, [_I64.as_pointer(), _I64]), "pooled_predictor_native_run")
        fn.linkage = "external"
        table, n = fn.args
        shimty = ir.FunctionType(ir.IntType(32), [_I64.as_pointer()])
        entry = fn.append_basic_block("entry")
        loop = fn.append_basic_block("loop")
        body = fn.append_basic_block("body")
        failed = fn.append_basic_block("failed")
        done = fn.append_basic_block("done")
        b = ir.IRBuilder(entry)
        b.branch(loop)
        b.position_at_end(loop)
        k = b.phi(_I64)
        k.add_incoming(ir.Constant(_I64, 0), entry)
        b.cbranch(b.icmp_signed("<", k, n), body, done)
        b.position_at_end(body)
        two_k = b.mul(k, ir.Constant(_I64, 2))
        shim = b.inttoptr(b.load(b.gep(table, [two_k])), shimty.as_pointer())
        slots = b.inttoptr(b.load(b.gep(table, [b.add(two_k, ir.Constant(_I64, 1))])), _I64.as_pointer())
        status = b.call(shim, [slots])
        k.add_incoming(b.add(k, ir.Constant(_I64, 1)), body)
        b.cbranch(b.icmp_unsigned("!=", status, ir.Constant(ir.IntType(32), 0)), failed, loop)
        b.position_at_end(failed)
        b.ret(k)
        b.position_at_end(done)
        b.ret(ir.Constant(_I64, -1))

    library, address = _library("pooled_predictor_native_run", build)
    _RUN = (library, ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)(address))
    return _RUN


class NativeRun:
    """calls (zero-argument callables of fusible() kernels), in order, as one native call (module docstring).

    Attributes:
        calls: the calls it stands for, in order (run through Python after a failure);
        first: the index of calls[0] in the Layout's run; failed_at: after an exception, the run index of
            the call that raised it (None before).
    """

    __slots__ = ("calls", "first", "failed_at", "_run", "_table", "_slots", "_args")

    def __init__(self, calls: list, first: int, kernels: list, slots: np.ndarray, firsts: list[int]):
        self.calls, self.first, self.failed_at = calls, first, None
        self._slots = slots
        base = slots.ctypes.data
        table = []
        for (cres, _, argtys), f in zip(kernels, firsts):
            table += [_shim(cres, argtys), base + 8 * f]
        self._table = np.array(table, np.uint64).view(np.int64)
        self._run = _runner()[1]
        self._args = (self._table.ctypes.data, len(kernels))

    def __call__(self) -> None:
        k = self._run(*self._args)  # ctypes: the GIL released for the whole run
        if k < 0:
            return
        # kernel k failed: its call again through Python, which raises the kernel's own exception
        done = 0
        for j, c in enumerate(self.calls):
            done += len(fusible(c))
            if done > k:
                self.failed_at = self.first + j
                c()
                raise RuntimeError(f"a kernel of call {self.first + j} returned an error status in a native run "
                                   "and none when called again; its outputs may be partial")
        raise RuntimeError(f"native run: kernel {k} of {done} failed")


def fuse(calls: list, first_min: int = 2) -> tuple[list, list]:
    """calls with every run of at least `first_min` consecutive fusible calls replaced by one NativeRun.

    Returns (the new list, for each entry of it the index in `calls` of its first call). A run whose
    arguments or compilation this module cannot take stays as it was.
    """
    out, starts = [], []
    i, n = 0, len(calls)
    while i < n:
        j = i
        kernels = []
        while j < n:
            k = fusible(calls[j])
            if k is None:
                break
            kernels += k
            j += 1
        if j - i >= first_min:
            run = None
            bound = _slots(kernels)
            if bound is not None:
                try:
                    run = NativeRun(list(calls[i:j]), i, kernels, *bound)
                except Exception:  # noqa: BLE001 -- a run that cannot be built stays Python calls
                    run = None
            if run is not None:
                out.append(run)
                starts.append(i)
                i = j
                continue
        end = max(j, i + 1)
        for t in range(i, end):
            out.append(calls[t])
            starts.append(t)
        i = end
    return out, starts
