"""compiled/amx.py: DynamicQuantizeMatMul's u8 x s8 GEMM on AMX tiles.

On any x86 host: the kernel's IR verifies and compiles for a Sapphire Rapids CPU to the tile instructions
(LLVM's tile configuration included), and a numpy walk of the kernel's loops over the packed tiles (the
same blocking, offsets and epilogue) gives the reference bits, which checks the packing and padding the
kernel reads. On a host with AMX (usable()): the kernel itself, bit for bit against the reference over a
grid of shapes, zero points and scales, and the DynamicQuantizeMatMul node on it against the vpdpbusd
kernel's bits (POOLED_PREDICTOR_AMX=0).
"""

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


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("zp,with_bias", [(0, True), (131, False), (255, True)])
def test_tile_walk_matches_reference(m, k, n, zp, with_bias):
    a_q, w, bs, bias = _operands(m, k, n)
    bias = bias if with_bias else None
    xq, k64, _, wp, cs, bsp, biasp = _buffers(a_q, w, bs, bias)
    got = _walk(xq, k64, m, wp, cs, bsp, biasp, zp, np.float32(0.0123), n)
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
    assert not amx.usable()
    with pytest.raises(RuntimeError, match="AMX"):
        amx.kernel()


needs_amx = pytest.mark.skipif(not amx.usable(), reason="needs a CPU with AMX-INT8 (Sapphire Rapids or later)")


@needs_amx
@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("zp,with_bias", [(0, True), (131, False), (255, True)])
def test_kernel_matches_reference(m, k, n, zp, with_bias):
    a_q, w, bs, bias = _operands(m, k, n)
    bias = bias if with_bias else None
    xq, k64, _, wp, cs, bsp, biasp = _buffers(a_q, w, bs, bias)
    y = np.full((m, n), np.nan, np.float32)
    amx.gemm(xq, k64, m, wp, cs, bsp, biasp, zp, np.float32(0.0123), y)
    np.testing.assert_array_equal(y, _reference(a_q, w, zp, np.float32(0.0123), bs, bias))


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
