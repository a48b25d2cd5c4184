"""compiled/dqgemm.py: DynamicQuantizeLinear, the saturating u8 x s8 GEMM and the float epilogue in one call,
bit for bit the numpy reference (ops/cpu/quantize.dynamic_quantize_linear, quantized.saturating_matmul, the
Cast / Mul / Add arithmetic); and its k loop keeps every accumulator in a register."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pooled_predictor.ops.cpu.compiled import dqgemm, qgemm
from pooled_predictor.ops.cpu.quantize import dynamic_quantize_linear
from pooled_predictor.ops.cpu.quantized import saturating_matmul

rng = np.random.default_rng(33)


def _reference(a, w, b_scale, bias):
    q, s, z = np.empty(a.shape, np.uint8), np.zeros((), np.float32), np.zeros((), np.uint8)
    dynamic_quantize_linear(a, out=(q, s, z))
    acc = saturating_matmul(q, w) - int(z) * w.astype(np.int64).sum(axis=0)
    y = acc.astype(np.int32).astype(np.float32) * (np.float32(s) * b_scale).astype(np.float32)
    return y if bias is None else (y + bias).astype(np.float32)


def _ours(a, w, b_scale, bias):
    m, k = a.shape
    n = w.shape[1]
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    none = np.zeros(0, np.float32)
    none.flags.writeable = False
    y = np.full((m, n), np.nan, np.float32)
    xq = np.empty(m * ((k + 3) // 4 * 4), np.uint8)
    dqgemm.dynamic_qmatmul_sat(a, a.min(), a.max(), dqgemm.pack_panels(w),
                               dqgemm.padded(w.astype(np.int64).sum(axis=0), np.int32),
                               dqgemm.padded(np.broadcast_to(b_scale, (n,)), np.float32),
                               none if bias is None else dqgemm.padded(bias, np.float32), y, xq,
                               np.empty(dqgemm.ROWS * 16, np.float32), qgemm.ONES)
    return y


def _saturating(k, n):
    """int8 W whose pairs saturate int16 against A's top values (255 * 127 * 2 > 32767)."""
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    w[: k // 2 * 2 : 2][rng.random((k // 2, n)) < 0.3] = 127
    w[1: k // 2 * 2 : 2][rng.random((k // 2, n)) < 0.3] = 127
    return w


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 4, 16), (5, 8, 16), (7, 5, 3), (13, 33, 17), (6, 64, 48),
                                   (11, 100, 40), (3, 7, 31), (37, 130, 65), (128, 96, 32)])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("per_column", [False, True])
def test_equals_the_reference(m, k, n, with_bias, per_column):
    a = (rng.standard_normal((m, k)) * 3 + rng.uniform(-2, 2)).astype(np.float32)
    a[0, 0] = a.max() + 1  # quantized to 255: saturating pairs where W is 127
    w = _saturating(k, n)
    b_scale = (rng.uniform(0.001, 0.01, n) if per_column else rng.uniform(0.001, 0.01, 1)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    ref, ours = _reference(a, w, b_scale, bias), _ours(a, w, b_scale, bias)
    assert np.array_equal(ref.view(np.int32), ours.view(np.int32)), float(np.abs(ref - ours).max())


@pytest.mark.parametrize("fill", ["zeros", "positive", "negative", "nan"])
def test_edge_ranges(fill):
    """An all-zero A (scale 1), one-signed A (zero point 0 or 255), and NaN (the reference's range [0, 0])."""
    m, k, n = 9, 20, 18
    a = {"zeros": np.zeros((m, k)), "positive": rng.random((m, k)) + 0.5,
         "negative": -rng.random((m, k)) - 0.5, "nan": rng.standard_normal((m, k))}[fill].astype(np.float32)
    if fill == "nan":
        a[3, 4] = np.nan
    w = _saturating(k, n)
    b_scale = rng.uniform(0.001, 0.01, n).astype(np.float32)
    with np.errstate(invalid="ignore"):
        ref = _reference(a, w, b_scale, None)
    ours = _ours(a, w, b_scale, None)
    assert np.array_equal(ref.view(np.int32), ours.view(np.int32))


def test_pack_panels_layout():
    """Byte 64 p KQ + 64 j + 4 c + i of the packed weight is W[4j + i, 16p + c], zeros past K and N."""
    k, n = 9, 20
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    p = dqgemm.pack_panels(w)
    kq = 3
    assert p.dtype == np.int8 and p.size == 2 * kq * 64 and not p.flags.writeable
    for kk in range(12):
        for c in range(32):
            got = p[64 * kq * (c // 16) + 64 * (kk // 4) + 4 * (c % 16) + kk % 4]
            assert got == (w[kk, c] if kk < k and c < n else 0)
    with pytest.raises(TypeError):
        dqgemm.pack_panels(w.astype(np.uint8))


def _k_loops(asm: str, op: str = "vpmaddubsw"):
    """The bodies of the loops (label ... backward jump to it) that hold `op` and no inner loop."""
    lines = asm.splitlines()
    labels = {line[:-1]: i for i, line in enumerate(lines) if re.match(r"^\.LBB\d+_\d+:$", line)}
    for i, line in enumerate(lines):
        m = re.match(r"\s+j\w+\s+(\.LBB\d+_\d+)$", line)
        start = labels.get(m.group(1)) if m else None
        if start is not None and start < i:
            body = lines[start:i + 1]
            if any(op in b for b in body) and sum(bool(re.match(r"^\.LBB", b)) for b in body) == 1:
                yield body


def _avx2_only() -> bool:
    from llvmlite import binding

    features = binding.get_host_cpu_features()
    return bool(features.get("avx2")) and not features.get("avx512f")


@pytest.mark.skipif(not _avx2_only(), reason="AVX2's 16 vector registers are the budget at stake (AVX-512 has 32)")
def test_k_loop_keeps_its_accumulators_in_registers():
    """The regression test of the pool worker's 2.4x slower BERT int8 (compiled/dqgemm.py's docstring): a k loop
    that spills to the stack runs 3x slower wherever the thread's stack puts the 16-byte aligned 32-byte slot
    across a page. The micro-kernels are compiled afresh (numba's cache keeps no assembly) and read."""
    import numba

    checked = 0
    for fn, op in ((dqgemm.dynamic_qmatmul_sat, "vpmaddubsw"), (dqgemm.dynamic_qmatmul_exact, "vpmaddwd")):
        fresh = numba.njit([dqgemm._SIG], nogil=True, cache=False, error_model="numpy")(fn.py_func)
        asm = next(iter(fresh.inspect_asm().values()))
        checked += _check_loops(asm, op)
    assert checked >= 2 * dqgemm.ROWS  # one per tile height and kernel, at least


@pytest.mark.skipif(not _avx2_only(), reason="AVX2's 16 vector registers are the budget at stake (AVX-512 has 32)")
def test_convolution_k_loops_keep_their_accumulators_in_registers():
    """The same for QLinearConv's and QLinearMatMul / QGemm's saturating kernels (compiled/qgemm.py): 6-row
    tiles spilled one accumulator in every k loop (4 stack moves each, found by the test above's reading);
    MRS = 5 rows fit. Also the exact kernels (vpmaddwd), which never spilled."""
    import numba

    from numba import types

    checked = 0
    u8, f4 = types.uint8, types.float32
    for fn, sig, op, tiles in ((qgemm.qgemm2d_sat, qgemm._sat_sigs(u8), "vpmaddubsw", qgemm.MRS),
                               (qgemm.qgemm2d_sat_f32, qgemm._sat_sigs(f4), "vpmaddubsw", qgemm.MRS),
                               (qgemm.qgemm2d_sat_rows, qgemm._sat_rows_sigs(u8), "vpmaddubsw", qgemm.MRS),
                               (qgemm.qgemv_sat, qgemm._gemv_sigs(u8), "vpmaddubsw", qgemm.GB),
                               (qgemm.qgemm2d, qgemm._sigs(u8, u8), "vpmaddwd", qgemm.MR),
                               (qgemm.qgemm2d_f32, qgemm._sigs(u8, f4), "vpmaddwd", qgemm.MR)):
        fresh = numba.njit([sig], nogil=True, cache=False, error_model="numpy")(fn.py_func)
        asm = next(iter(fresh.inspect_asm().values()))
        n = _check_loops(asm, op)
        assert n >= tiles  # one k loop per tile height at least
        checked += n
    assert checked > 0


def _check_loops(asm: str, op: str) -> int:
    loops = list(_k_loops(asm, op))
    # addresses off the stack: %rsp-based, and %rbp-based where %rbp is the frame pointer (else it is a register)
    stack_address = r"\(%rsp[,)]|\(%rbp\)" if re.search(r"movq\s+%rsp, %rbp", asm) else r"\(%rsp[,)]"
    for body in loops:
        # a vector to or from the stack, or a store to it (a spill's round trip); a scalar read or compare
        # (8 bytes, aligned: never across a page) is harmless
        stack = [line for line in body if re.search(stack_address, line)
                 and ("%zmm" in line or "%ymm" in line or "%xmm" in line or re.search(r"^\s*mov\w*\s+[^,]+,\s*-?\d*\(%r[sb]p", line))]
        assert not stack, "a k loop spills to the stack:\n" + "\n".join(stack)
    return len(loops)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 5, 3), (13, 33, 17), (37, 130, 65)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_quantized_a_equals_the_reference(m, k, n, with_bias):
    """qmatmul_sat (MatMulIntegerToFloat's path): A given as uint8 with its zero point and scale."""
    aq = rng.integers(0, 256, (m, k)).astype(np.uint8)
    aq[0, :] = 255
    aq.flags.writeable = False
    w = _saturating(k, n)
    zp, scale = 121, np.float32(0.0173)
    b_scale = rng.uniform(0.001, 0.01, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    acc = saturating_matmul(aq, w) - zp * w.astype(np.int64).sum(axis=0)
    ref = acc.astype(np.int32).astype(np.float32) * (scale * b_scale).astype(np.float32)
    if bias is not None:
        ref = (ref + bias).astype(np.float32)
    none = np.zeros(0, np.float32)
    none.flags.writeable = False
    y = np.full((m, n), np.nan, np.float32)
    dqgemm.qmatmul_sat(aq, zp, scale, dqgemm.pack_panels(w), dqgemm.padded(w.astype(np.int64).sum(axis=0), np.int32),
                       dqgemm.padded(b_scale, np.float32), none if bias is None else dqgemm.padded(bias, np.float32), y,
                       np.empty(m * ((k + 3) // 4 * 4), np.uint8), np.empty(dqgemm.ROWS * 16, np.float32), qgemm.ONES)
    assert np.array_equal(ref.view(np.int32), y.view(np.int32))


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 5, 3), (13, 33, 17), (11, 100, 40), (37, 131, 65)])
@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
@pytest.mark.parametrize("with_bias", [False, True])
def test_exact_equals_the_spec(m, k, n, b_type, with_bias):
    """dynamic_qmatmul_exact: exact int32 sums with per-column zero points (the spec's arithmetic)."""
    a = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    info = np.iinfo(b_type)
    w = rng.integers(info.min, info.max + 1, (k, n)).astype(b_type)
    zp = rng.integers(info.min // 2, info.max // 2, n).astype(b_type)
    b_scale = rng.uniform(0.001, 0.01, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    q, s, z = np.empty(a.shape, np.uint8), np.zeros((), np.float32), np.zeros((), np.uint8)
    dynamic_quantize_linear(a, out=(q, s, z))
    wd = w.astype(np.int64) - zp.astype(np.int64)
    ref = ((q.astype(np.int64) - int(z)) @ wd).astype(np.float32) * (s * b_scale).astype(np.float32)
    if bias is not None:
        ref = (ref + bias).astype(np.float32)
    a.flags.writeable = False
    none = np.zeros(0, np.float32)
    none.flags.writeable = False
    y = np.full((m, n), np.nan, np.float32)
    dqgemm.dynamic_qmatmul_exact(a, a.min(), a.max(), dqgemm.pack_panels_exact(w, zp),
                                 dqgemm.padded(wd.sum(axis=0), np.int32), dqgemm.padded(b_scale, np.float32),
                                 none if bias is None else dqgemm.padded(bias, np.float32), y,
                                 np.empty(m * ((k + 1) // 2 * 2), np.uint8), np.empty(dqgemm.ROWS * 16, np.float32),
                                 qgemm.ONES)
    assert np.array_equal(ref.view(np.int32), y.view(np.int32))
