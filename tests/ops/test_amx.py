"""compiled/amx.py: the u8 x s8 GEMMs on AMX tiles (DynamicQuantizeMatMul, MatMulIntegerToFloat, QLinearConv).

On any x86 host: the kernels' IR verifies and compiles for a Sapphire Rapids CPU to the tile instructions
(LLVM's tile configuration included); numpy walks of the kernels' loops over the real packings (the same
blocking, offsets and epilogues) give the exact reference's and the VNNI kernels' bits; and on a VNNI host
the nodes' AMX paths -- the numba drivers calling the kernels by address (compiled/indirect.py) -- run with
the kernels replaced by ctypes callbacks of their walks, matching the vpdpbusd kernels' bits (and checked to
have run). On a host with AMX (usable()): the kernels themselves against the reference over a grid of
shapes, zero points and scales, and the nodes with and without AMX (POOLED_PREDICTOR_AMX=0).
"""

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pooled_predictor.ops.cpu.compiled import amx

ROOT = Path(__file__).resolve().parents[2]
rng = np.random.default_rng(2026)
SHAPES = [(1, 1, 1), (5, 63, 15), (31, 64, 16), (32, 65, 17), (33, 100, 33), (40, 128, 64), (128, 768, 96),
          (7, 300, 50)]


def _operands(m, k, n, zp=0):
    a_q = rng.integers(0, 256, (m, k)).astype(np.uint8)
    a_q[:, ::5] = 255
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    w[::3, :] = -128
    bs = rng.uniform(1e-3, 2e-2, n).astype(np.float32)
    bias = rng.normal(0, 1, n).astype(np.float32)
    return a_q, w, bs, bias


def _reference(a_q, w, zp, a_scale, bs, bias):
    """float32(A_q W - zp colsum) * float32(a_scale * bs) (+ bias): the exact sums, the epilogue's roundings."""
    acc = (a_q.astype(np.int64) @ w.astype(np.int64)).astype(np.int32)
    cs = w.astype(np.int64).sum(axis=0).astype(np.int32)
    y = (acc + cs * np.int32(-zp)).astype(np.float32) * (np.float32(a_scale) * bs)
    return y if bias is None else y + bias


def _walk(xq, k64, m, wp, cs, bs, bias, zp, a_scale, n):
    """The kernel's loops in numpy: 32 x 32 blocks of 2 x 2 tiles, K in steps of 64 bytes, B tiles read as
    16 rows of 64 bytes (16 columns x 4 k) from the packed panels, the epilogue on the int32 tiles."""
    y = np.zeros((m, n), np.float32)
    pstride = 16 * k64
    for p in range((n + 31) // 32):
        for mb in range((m + 31) // 32):
            c = np.zeros((32, 32), np.int64)
            for kk in range(k64 // 64):
                a = xq[mb * 32 * k64:(mb * 32 + 32) * k64].reshape(32, k64)[:, 64 * kk:64 * kk + 64].astype(np.int64)
                for h in (0, 1):
                    base = (2 * p + h) * pstride + 1024 * kk
                    tile = wp[base:base + 1024].reshape(16, 16, 4).astype(np.int64)  # quad row, column, byte
                    b = tile.transpose(0, 2, 1).reshape(64, 16)  # k = 4 quad + byte, column
                    c[:, 16 * h:16 * h + 16] += a @ b
            c = c.astype(np.int32)
            rows = min(32, m - 32 * mb)
            for h in (0, 1):
                col = 32 * p + 16 * h
                if col >= n:
                    continue
                f = (c[:rows, 16 * h:16 * h + 16] + cs[col:col + 16] * np.int32(-zp)).astype(np.float32)
                f = f * (np.float32(a_scale) * bs[col:col + 16])
                if bias is not None:
                    f = f + bias[col:col + 16]
                cols = min(16, n - col)
                y[32 * mb:32 * mb + rows, col:col + cols] = f[:, :cols]
    return y


def _buffers(a_q, w, bs, bias):
    m, k = a_q.shape
    n = w.shape[1]
    k64 = amx.k_padded(k)
    xq = np.full(amx.rows_padded(m) * k64, 77, np.uint8)  # rows past M hold junk: their results are dropped
    rows = xq[:m * k64].reshape(m, k64)
    rows[:, :k] = a_q
    rows[:, k:] = 0
    cs = amx.padded(w.astype(np.int64).sum(axis=0), np.int32, n)
    return (xq, k64, m, amx.pack_panels(w), cs, amx.padded(bs, np.float32, n),
            None if bias is None else amx.padded(bias, np.float32, n))


def _kernel_run(xq, k64, m, wp, cs, bsp, biasp, zp, a_scale, n):
    y = np.full((m, n), np.nan, np.float32)
    amx.gemm(xq, k64, m, wp, cs, bsp, biasp, zp, a_scale, y)
    return y


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("zp,with_bias", [(0, True), (131, False), (255, True)])
@pytest.mark.parametrize("runner", ["walk", "kernel"])
def test_dqgemm_matches_reference(m, k, n, zp, with_bias, runner):
    """The numpy walk of amx_dqgemm's loops (any host) and the kernel itself (an AMX host): the reference's bits."""
    if runner == "kernel" and not amx.usable():
        pytest.skip("needs a CPU with AMX-INT8 (Sapphire Rapids or later)")
    a_q, w, bs, bias = _operands(m, k, n)
    bias = bias if with_bias else None
    xq, k64, _, wp, cs, bsp, biasp = _buffers(a_q, w, bs, bias)
    got = (_walk if runner == "walk" else _kernel_run)(xq, k64, m, wp, cs, bsp, biasp, zp, np.float32(0.0123), n)
    np.testing.assert_array_equal(got, _reference(a_q, w, zp, np.float32(0.0123), bs, bias))


def test_padding():
    assert [amx.k_padded(k) for k in (0, 1, 64, 65, 768)] == [64, 64, 64, 128, 768]
    assert [amx.rows_padded(m) for m in (1, 32, 33)] == [32, 32, 64]
    wp = amx.pack_panels(np.ones((65, 17), np.int8))
    assert wp.size == 128 * 32 and not wp.flags.writeable
    with pytest.raises(TypeError):
        amx.pack_panels(np.ones((4, 4), np.uint8))


def test_ir_compiles_to_tile_instructions():
    """The IR verifies and, compiled for Sapphire Rapids (any host: emitted, never run), configures the tiles,
    runs 4 TDPBUSD per step of K on 2 A and 2 B tile loads, stores 4 C tiles and releases the tiles."""
    from llvmlite import binding as llvm

    mod = llvm.parse_assembly(amx.ir_text())
    mod.verify()
    asm = amx.target_machine("sapphirerapids", "+amx-tile,+amx-int8,+avx512f,+avx512bw,+avx512vl,+avx512dq") \
        .emit_assembly(mod)
    count = {op: sum(1 for line in asm.splitlines() if line.split() and line.split()[0] == op)
             for op in ("ldtilecfg", "tileloadd", "tdpbusd", "tilestored", "tilerelease", "tilezero")}
    assert count == {"ldtilecfg": 1, "tileloadd": 4, "tdpbusd": 4, "tilestored": 4, "tilerelease": 1,
                     "tilezero": 4}, count


def test_not_usable_without_amx(monkeypatch):
    monkeypatch.setenv("POOLED_PREDICTOR_AMX", "0")
    monkeypatch.setenv("POOLED_PREDICTOR_AMX_CONV", "1")
    assert not amx.usable() and not amx.conv_enabled()
    with pytest.raises(RuntimeError, match="AMX"):
        amx.kernel()


needs_amx = pytest.mark.skipif(not amx.usable(), reason="needs a CPU with AMX-INT8 (Sapphire Rapids or later)")


@needs_amx
def test_gemm_rejects_small_buffers():
    a_q, w, bs, bias = _operands(40, 100, 33)
    xq, k64, m, wp, cs, bsp, biasp = _buffers(a_q, w, bs, bias)
    with pytest.raises(ValueError, match="too small"):
        amx.gemm(xq[:10], k64, m, wp, cs, bsp, biasp, 0, 0.5, np.zeros((m, 33), np.float32))


@needs_amx
def test_node_on_amx_matches_vpdpbusd_kernel(tmp_path):
    """DynamicQuantizeMatMul (a BERT-like projection) on AMX tiles and, in a process with
    POOLED_PREDICTOR_AMX=0, on the vpdpbusd kernel: the same bits."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        from tests.onnx_helpers import make_node_model, run_ours
        rng = np.random.default_rng(7)
        m, k, n = 77, 200, 70
        inputs = [rng.normal(0, 1, (m, k)).astype(np.float32), rng.integers(-128, 128, (k, n)).astype(np.int8),
                  rng.uniform(1e-3, 1e-2, n).astype(np.float32), np.zeros(n, np.int8),
                  rng.normal(0, 1, n).astype(np.float32)]
        model = make_node_model("DynamicQuantizeMatMul", inputs, domain="com.microsoft", static=(1, 2, 3, 4))
        np.save(sys.argv[1], run_ours(model, {"in0": inputs[0]})[0])
    """)
    outs = {}
    for flag in ("1", "0"):
        path = tmp_path / f"y{flag}.npy"
        env = dict(os.environ, POOLED_PREDICTOR_AMX=flag, POOLED_PREDICTOR_TIERED="0", PYTHONPATH=str(ROOT))
        subprocess.run([sys.executable, "-c", script, str(path)], check=True, env=env, cwd=ROOT, timeout=600)
        outs[flag] = np.load(path)
    np.testing.assert_array_equal(outs["1"], outs["0"])


# --- QLinearConv's GEMM on AMX tiles (amx_qconv_u8 / _s8) ---

def _qconv_operands(m, k, p_n, y_signed, spread=3):
    """W (m, k) int8, X through a random offset table into a flat uint8 buffer (readable past each row),
    the int32 bias, the float32 multipliers and the output zero point."""
    w = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w[:, ::4] = -128
    xf = rng.integers(0, 256, k * spread + p_n + 128).astype(np.uint8)
    xf.flags.writeable = False
    offs = rng.integers(0, k * spread, k).astype(np.int64)
    b = rng.integers(-20000, 20000, m).astype(np.int32)
    mult = rng.uniform(2e-5, 4e-4, m).astype(np.float32)
    zp = 3 if y_signed else 121
    return w, xf, offs, b, mult, zp


def _requantize(acc, b, mult, zp, y_signed):
    lo, hi = amx.QCONV_KINDS["s8" if y_signed else "u8"]
    f = (acc + b[:, None]).astype(np.float32) * mult[:, None]
    lo_f, hi_f = np.float32(lo) - np.float32(zp), np.float32(hi) - np.float32(zp)
    f = np.where(f < hi_f, f, hi_f)
    f = np.where(f > lo_f, f, lo_f)
    q = np.rint(f).astype(np.int32) + np.int32(zp)
    return q.astype(np.int8 if y_signed else np.uint8)


def _walk_qconv(wa, k64, xq, tile_b, t_n, m, p_n, b, mult, zp, y_signed):
    """amx_qconv's loops in numpy: pairs of 16-pixel tiles, 32 rows of W a block, K in steps of 64 bytes,
    W's rows as A tiles (signed) and the packed tiles' quads as B (unsigned), then the requantization."""
    acc = np.zeros((rows_padded := amx.rows_padded(m), 16 * (t_n + 1)), np.int64)
    w2 = wa.reshape(rows_padded, k64).astype(np.int64)
    for tp in range((t_n + 1) // 2):
        for mb in range(rows_padded // 32):
            for kk in range(k64 // 64):
                a = w2[32 * mb:32 * mb + 32, 64 * kk:64 * kk + 64]
                for h in (0, 1):
                    t = 2 * tp + h
                    base = t * tile_b + 1024 * kk
                    tile = xq[base:base + 1024].reshape(16, 16, 4).astype(np.int64)  # quad, pixel, byte
                    acc[32 * mb:32 * mb + 32, 16 * t:16 * t + 16] += a @ tile.transpose(0, 2, 1).reshape(64, 16)
    return _requantize(acc[:m, :p_n].astype(np.int32), b, mult, zp, y_signed)


@pytest.mark.parametrize("m,k,p_n", [(1, 1, 1), (5, 7, 17), (32, 64, 32), (33, 100, 47), (70, 147, 100),
                                     (64, 576, 196), (40, 100, 600)])
@pytest.mark.parametrize("y_signed", [False, True])
@pytest.mark.parametrize("runner", ["walk", "kernel"])
def test_qconv_amx_matches_the_vnni_kernel(m, k, p_n, y_signed, runner):
    """qgemm.qconv_amx (X packed 256 pixels at a time, the kernel called by its address) with amx_qconv as its
    numpy walk behind a ctypes callback (any host), or the kernel itself (an AMX host): the bits of
    qgemm2d_sat with exact sums (the emulated vpdpbusd kernel), into a Y of row stride > P at an offset, nothing
    written outside it."""
    from pooled_predictor.ops.cpu.compiled import dots, qgemm

    if runner == "kernel" and not amx.usable():
        pytest.skip("needs a CPU with AMX-INT8 (Sapphire Rapids or later)")
    q = dots.module("qgemm", "emulated")
    w, xf, offs, b, mult, zp = _qconv_operands(m, k, p_n, y_signed)
    offs4 = qgemm.quad_offsets(offs)
    y_t = np.int8 if y_signed else np.uint8
    ref = np.zeros(m * p_n, y_t)
    q.qgemm2d_sat(qgemm.pack_quads(w), xf, 0, offs4, ref, 0, p_n, m, p_n, b, mult, zp,
                  np.zeros(qgemm.MRS * 16, y_t), qgemm.ONES, np.zeros(qgemm.packed_bytes(offs4.size), np.uint8))
    name = "amx_qconv_s8" if y_signed else "amx_qconv_u8"
    addr = amx.address(name) if runner == "kernel" else _fake_address(name)
    ldy, y0 = p_n + 5, 3
    y = np.full(y0 + m * ldy + 64, 77, y_t)
    xq = np.full(qgemm.amx_workspace_bytes(offs4.size), 201, np.uint8)  # quads past K, the extra tile: junk
    q.qconv_amx(addr, amx.pack_rows(w), amx.k_padded(offs4.size), xf, 0, offs4, xq, y, y0, ldy, m, p_n, b, mult, zp,
                0, 0)
    np.testing.assert_array_equal(y[y0:y0 + m * ldy].reshape(m, ldy)[:, :p_n], ref.reshape(m, p_n))
    untouched = np.ones(y.size, bool)
    untouched[y0:y0 + m * ldy] = np.tile(np.arange(ldy) >= p_n, m)
    assert (y[untouched] == 77).all()


def test_qconv_ir_compiles_to_tile_instructions():
    from llvmlite import binding as llvm

    mod = llvm.parse_assembly(amx.module_ir())
    mod.verify()
    asm = amx.target_machine("sapphirerapids", "+amx-tile,+amx-int8,+avx512f,+avx512bw,+avx512vl,+avx512dq") \
        .emit_assembly(mod)
    ops = [line.split()[0] for line in asm.splitlines() if line.split()]
    assert ops.count("tdpbsud") == 8 and ops.count("tdpbusd") == 4 and ops.count("ldtilecfg") == 3
    assert ops.count("tilerelease") == 3


CONVS = [  # (C, M, H, W, kernel, stride, pad, group): pointwise, strided pointwise, 3x3, stem-like, grouped, 7x7 out
    (16, 24, 9, 11, 1, 1, 0, 1), (32, 40, 14, 14, 1, 2, 0, 1), (24, 36, 13, 10, 3, 1, 1, 1),
    (3, 20, 23, 23, 7, 2, 3, 1), (16, 32, 8, 8, 3, 1, 1, 2), (64, 64, 7, 7, 3, 1, 1, 1), (8, 16, 5, 3, 3, 1, 1, 1)]


def _qlinearconv_models(conv, batch):
    """(x, output type, model) of a QLinearConv with uint8 then int8 output: uint8 X of `batch` images, int8 W
    per output channel with zero point 0, an int32 bias."""
    from tests.onnx_helpers import make_node_model

    c, m, h, wd, kk, s, pad, group = conv
    x = rng.integers(0, 256, (batch, c, h, wd)).astype(np.uint8)
    w = rng.integers(-128, 128, (m, c // group, kk, kk)).astype(np.int8)
    for y_t in (np.uint8, np.int8):
        inputs = [x, np.float32(0.02), np.uint8(117), w, rng.uniform(2e-3, 8e-3, m).astype(np.float32),
                  np.zeros(m, np.int8), np.float32(0.5), y_t(3), rng.integers(-5000, 5000, m).astype(np.int32)]
        attrs = {"kernel_shape": [kk, kk], "strides": [s, s], "pads": [pad] * 4, "group": group}
        yield x, y_t, make_node_model("QLinearConv", inputs, attrs, static=tuple(range(1, 9)))


@needs_amx
@pytest.mark.parametrize("conv", CONVS)
def test_qlinearconv_on_amx_matches_vpdpbusd(conv, monkeypatch):
    """QLinearConv nodes built with the AMX kernel and with POOLED_PREDICTOR_AMX=0 (the vpdpbusd kernels):
    the same bits, uint8 and int8 outputs."""
    from tests.onnx_helpers import run_ours

    for x, _, model in _qlinearconv_models(conv, 1):
        outs = {}
        monkeypatch.setenv("POOLED_PREDICTOR_AMX_CONV", "1")
        for flag in ("1", "0"):
            monkeypatch.setenv("POOLED_PREDICTOR_AMX", flag)
            assert amx.conv_enabled() == (flag == "1")
            (outs[flag],) = run_ours(model, {"in0": x})
        np.testing.assert_array_equal(outs["1"], outs["0"])


# --- the nodes' AMX paths on any host: the kernels replaced by their numpy walks (same arguments, memory) ---

def _view(addr, dtype, n):
    dtype = np.dtype(dtype)
    return np.ctypeslib.as_array((ctypes.c_uint8 * (n * dtype.itemsize)).from_address(addr)).view(dtype)


FAKE_CALLS = []  # the fake kernels' names, as called: the tests check that the AMX paths ran
_FAKES = {}  # name -> the ctypes callback (kept alive: numba code calls it by address)


def _fake_kernel(name="amx_dqgemm"):
    """amx.kernel(name) as a ctypes callback of its signature running its numpy walk over the memory it is
    passed (callable from Python and, by address, from the numba drivers)."""
    if name not in _FAKES:
        proto = amx._PROTO if name == "amx_dqgemm" else amx._QPROTO
        _FAKES[name] = proto(_fake_function(name))
    return _FAKES[name]


def _fake_address(name):
    return int(ctypes.cast(_fake_kernel(name), ctypes.c_void_p).value)


def _fake_function(name):
    if name == "amx_dqgemm":
        def dqgemm(xq, lda, wp, pstride, kb, m, n, cs, bs, bias, has_bias, zp, a_scale, y, ldy):
            FAKE_CALLS.append(name)
            n32 = (n + 31) // 32 * 32
            got = _walk(_view(xq, np.uint8, amx.rows_padded(m) * lda), lda, m, _view(wp, np.int8, n32 * lda),
                        _view(cs, np.int32, n32), _view(bs, np.float32, n32),
                        _view(bias, np.float32, n32) if has_bias else None, zp, np.float32(a_scale), n)
            for r in range(m):
                _view(y + 4 * r * ldy, np.float32, n)[:] = got[r]
        return dqgemm
    y_signed = name.endswith("s8")

    def qconv(wa, k64, xq, tile_b, t_n, m, p_n, b, mult, zp, y, ldy):
        FAKE_CALLS.append(name)
        got = _walk_qconv(_view(wa, np.int8, amx.rows_padded(m) * k64), k64,
                          _view(xq, np.uint8, (t_n + 1) * tile_b), tile_b, t_n, m, p_n, _view(b, np.int32, m),
                          _view(mult, np.float32, m), zp, y_signed)
        for r in range(m):
            _view(y + r * ldy, np.int8 if y_signed else np.uint8, p_n)[:] = got[r]
    return qconv


@pytest.fixture
def fake_amx(monkeypatch):
    """Nodes built inside take their AMX paths, the kernels run as numpy walks (no AMX needed)."""
    from pooled_predictor.ops import int8_arithmetic

    if int8_arithmetic.dot_product() in (None, "vpmaddubsw"):
        pytest.skip("the AMX paths replace the quad kernels with an exact dot product (a VNNI host)")
    monkeypatch.setattr(amx, "usable", lambda: True)
    monkeypatch.setattr(amx, "kernel", _fake_kernel)
    monkeypatch.setattr(amx, "address", _fake_address)
    monkeypatch.setenv("POOLED_PREDICTOR_AMX_CONV", "1")
    return monkeypatch


@pytest.mark.parametrize("conv", CONVS)
def test_qlinearconv_amx_path_matches_vnni(conv, fake_amx):
    """QLinearConv's AMX steps (pack_tiles over each group's pixels, the kernel into Y or the cropped scratch,
    the direct, strided, indirect-rows and grouped layouts) with the kernel as its numpy walk: the vpdpbusd
    kernels' bits."""
    from tests.onnx_helpers import run_ours

    for x, y_t, model in _qlinearconv_models(conv, 2):
        FAKE_CALLS.clear()
        (on_amx,) = run_ours(model, {"in0": x})
        assert FAKE_CALLS and set(FAKE_CALLS) == {"amx_qconv_s8" if y_t is np.int8 else "amx_qconv_u8"}
        fake_amx.undo()
        (vnni,) = run_ours(model, {"in0": x})
        fake_amx.setattr(amx, "usable", lambda: True)
        fake_amx.setattr(amx, "kernel", _fake_kernel)
        fake_amx.setattr(amx, "address", _fake_address)
        fake_amx.setenv("POOLED_PREDICTOR_AMX_CONV", "1")
        np.testing.assert_array_equal(on_amx, vnni)


def test_dynamic_quantize_matmul_amx_path_matches_vnni(fake_amx):
    from tests.onnx_helpers import make_node_model, run_ours

    m, k, n = 37, 100, 50
    inputs = [rng.normal(0, 1, (m, k)).astype(np.float32), rng.integers(-128, 128, (k, n)).astype(np.int8),
              rng.uniform(1e-3, 1e-2, n).astype(np.float32), np.zeros(n, np.int8),
              rng.normal(0, 1, n).astype(np.float32)]
    model = make_node_model("DynamicQuantizeMatMul", inputs, domain="com.microsoft", static=(1, 2, 3, 4))
    FAKE_CALLS.clear()
    (on_amx,) = run_ours(model, {"in0": inputs[0]})
    assert FAKE_CALLS == ["amx_dqgemm"]
    fake_amx.undo()
    (vnni,) = run_ours(model, {"in0": inputs[0]})
    np.testing.assert_array_equal(on_amx, vnni)


def test_matmul_integer_to_float_amx_path_matches_vnni(fake_amx):
    """com.microsoft MatMulIntegerToFloat (uint8 A of zero point 121, int8 B, per-column scales, a bias) on the
    AMX path (compiled/amx.py's qmatmul_amx, the kernel as its walk) and on the vpdpbusd kernel: the same bits."""
    from tests.onnx_helpers import make_node_model, run_ours

    m, k, n = 19, 130, 45
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    inputs = [a, rng.integers(-128, 128, (k, n)).astype(np.int8), np.float32(0.05),
              rng.uniform(1e-3, 1e-2, n).astype(np.float32), np.array(121, np.uint8), np.zeros(n, np.int8),
              rng.normal(0, 1, n).astype(np.float32)]
    model = make_node_model("MatMulIntegerToFloat", inputs, domain="com.microsoft", static=tuple(range(1, 7)))
    FAKE_CALLS.clear()
    (on_amx,) = run_ours(model, {"in0": a})
    assert FAKE_CALLS == ["amx_dqgemm"]
    fake_amx.undo()
    (vnni,) = run_ours(model, {"in0": a})
    np.testing.assert_array_equal(on_amx, vnni)


def test_a_kernel_that_does_not_compile_leaves_the_vnni_kernels(monkeypatch, caplog):
    """Where the permission is granted but the module does not compile (an LLVM without the AMX intrinsics,
    say), usable() is False, status() says why, a warning is logged once, and kernel() raises a clear error:
    the nodes keep their VNNI kernels instead of failing to load."""
    monkeypatch.setattr(amx, "HOST_AMX", True)
    monkeypatch.setattr(amx, "_state", {})
    monkeypatch.setattr(amx, "_request_permission", lambda: True)
    monkeypatch.setattr(amx, "module_ir", lambda: "this is not LLVM IR")
    monkeypatch.delenv("POOLED_PREDICTOR_AMX", raising=False)
    with caplog.at_level("WARNING"):
        assert not amx.usable() and not amx.usable()
    assert sum("AMX kernels not compiled" in r.message for r in caplog.records) == 1
    assert "did not compile" in amx.status()
    with pytest.raises(RuntimeError, match="cannot run here"):
        amx.kernel()


@pytest.mark.parametrize("y_t", [np.uint8, np.int8])
def test_qlinearmatmul_amx_path_matches_vnni(y_t, fake_amx):
    """QLinearMatMul (uint8 A of 37 x 100, int8 B per column with zero point 0) on the AMX path (ops/cpu/qproduct.py
    through qgemm.qconv_amx, the kernel as its walk) and on the vpdpbusd kernel: the same bits."""
    from tests.onnx_helpers import make_node_model, run_ours

    m, k, n = 37, 100, 45
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    inputs = [a, np.float32(0.05), np.uint8(121), rng.integers(-128, 128, (k, n)).astype(np.int8),
              rng.uniform(1e-3, 1e-2, n).astype(np.float32), np.zeros(n, np.int8), np.float32(0.2), y_t(7)]
    model = make_node_model("QLinearMatMul", inputs, static=tuple(range(1, 8)))
    FAKE_CALLS.clear()
    (on_amx,) = run_ours(model, {"in0": a})
    assert FAKE_CALLS and set(FAKE_CALLS) == {"amx_qconv_s8" if y_t is np.int8 else "amx_qconv_u8"}
    fake_amx.undo()
    (vnni,) = run_ours(model, {"in0": a})
    np.testing.assert_array_equal(on_amx, vnni)
