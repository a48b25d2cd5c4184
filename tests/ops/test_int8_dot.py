"""compiled/dots.py: the u8 x s8 quad kernels with the exact dot products (vpdpbusd on a VNNI host, and its
generic-IR emulation on any host), bit for bit the exact sums, and the instruction each compiles to.

The emulated kernels are the vpdpbusd kernels but for the one step that sums a lane's 4 products, so on a
host without VNNI they test the VNNI kernels' packing, tiling, tails and epilogue (the node-level tests run
on them there); where the host has VNNI the node-level tests run the vpdpbusd kernels themselves (and
tests/ops/test_int8_arithmetic.py runs them against onnxruntime), the emulation only at the kernel level. Their
assembly is checked for VNNI CPUs on any host: numba compiles (never runs) them for a named CPU in a
subprocess.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pooled_predictor.ops import int8_arithmetic
from pooled_predictor.ops.cpu.compiled import dots, qgemm
from tests.onnx_helpers import make_node_model, run_ort, run_ours, type_outputs
from tests.ops.test_compiled_int8 import _reference
from tests.ops.test_int8_arithmetic import CONVS, _crafted_conv, _crafted_product, _f, run_qgemm2d_sat

rng = np.random.default_rng(4444)
VNNI = int8_arithmetic.host_vnni() and int8_arithmetic.target_vnni()
NATIVE = "vpdpbusd" if VNNI else "emulated"  # the exact dot product the kernels below run on: the host's, if any
KERNEL_DOTS = ["emulated"] + (["vpdpbusd"] if VNNI else [])  # the emulation's kernel-level tests on every host
ROOT = Path(__file__).resolve().parents[2]


def _operands(m, k, p):
    w = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w[:, ::3] = np.where(rng.random((m, 1)) < 0.5, -128, 127)  # pairs that would saturate in int16
    x = rng.integers(0, 256, (k, p)).astype(np.uint8)
    x[:, ::2] = 255
    return w, x


def _requantized(acc, mult, zp, y_type):
    fa = (acc.astype(np.float32) * mult[:, None]).astype(np.float32)
    if y_type == np.float32:
        return fa
    info = np.iinfo(y_type)
    return (np.rint(np.clip(fa, info.min - zp, info.max - zp)) + zp).astype(y_type)


@pytest.mark.parametrize("dot", KERNEL_DOTS)
@pytest.mark.parametrize("m,k,p,y_type", [(13, 27, 50, np.uint8),  # strips, a half tile, MRS rows and 3
                                          (15, 40, 49, np.int8),  # the last pixel: _make_cols
                                          (10, 64, 36, np.uint8),  # _make_cols: whole groups, 2 passes
                                          (9, 16, 272, np.uint8),  # blocks of PB pixels, a 16-pixel tail
                                          (7, 5, 20, np.float32),  # k % 4 != 0, the float epilogue
                                          (6, 12, 40, np.uint8),  # 16-lane strips: a group of 3 tiles, partial
                                          (11, 8, 87, np.int8),  # a group of 4, then single tiles, the last partial
                                          (5, 4, 120, np.float32),  # a group of 4 and one of 3, partial, float
                                          (3, 9, 90, np.uint8)])  # 6 tiles: 3 + 3, not 4 + 1 + 1
def test_qgemm2d_quads_sum_exactly(dot, m, k, p, y_type):
    """qgemm2d_sat's tiles with an exact dot product: acc = b + W @ X exactly (int16 pairs would saturate)."""
    q = dots.module("qgemm", dot)
    w, x = _operands(m, k, p)
    b = rng.integers(-100000, 100000, m).astype(np.int32)
    mult = (rng.random(m) * 1e-4).astype(np.float32)
    zp = 0 if y_type == np.float32 else 5
    y = run_qgemm2d_sat(q, w, x, b, mult, zp, y_type)
    acc = (w.astype(np.int64) @ x.astype(np.int64) + b[:, None]).astype(np.int32)
    assert np.array_equal(y.reshape(m, p), _requantized(acc, mult, zp, y_type))


@pytest.mark.parametrize("dot", KERNEL_DOTS)
@pytest.mark.parametrize("m,k,p,y_type", [(48, 40, 49, np.uint8),  # blocks of 32 and 16 channels, 7 calls of 7
                                          (16, 9, 13, np.int8),  # k % 4 != 0, a last call of 6 pixels
                                          (32, 64, 3, np.uint8)])  # fewer pixels than a call
def test_qgemm2d_chlanes_sum_exactly(dot, m, k, p, y_type):
    """qgemm2d_chlanes (the output channels in the lanes, 16-lane targets): acc = b + W @ X exactly, the same
    requantization as the strips."""
    q = dots.module("qgemm", dot)
    if not q.WIDE:
        pytest.skip("the channel-lane kernels exist on 16-lane targets only (dots.wide_here)")
    w, x = _operands(m, k, p)
    b = rng.integers(-100000, 100000, m).astype(np.int32)
    mult = (rng.random(m) * 1e-4).astype(np.float32)
    xf = np.zeros(k * p + 64, np.uint8)
    xf[:k * p] = x.reshape(-1)
    offs = qgemm.quad_offsets(np.arange(k) * p)
    y = np.zeros(m * p, y_type)
    xq = np.zeros(qgemm.packed_bytes(offs.size), np.uint8)
    q.qgemm2d_chlanes(qgemm.pack_quads(w, tile=qgemm.CH), xf, 0, offs, y, 0, p, m, p, b, mult, 5, xq, 0, 0)
    acc = (w.astype(np.int64) @ x.astype(np.int64) + b[:, None]).astype(np.int32)
    assert np.array_equal(y.reshape(m, p), _requantized(acc, mult, 5, y_type))


@pytest.mark.parametrize("dot", [NATIVE])
@pytest.mark.parametrize("m,n,k", [(1, 37, 70), (3, 8, 9)])
def test_qgemv_quads_sum_exactly(dot, m, n, k):
    """qgemv_sat (the batch-1 product, columns in the lanes) with an exact dot product."""
    q = dots.module("qgemm", dot)
    w, a = _operands(n, k, m)
    a = a.T.copy()
    n8, kq = -(-n // 8) * 8, -(-k // 4)
    wq = qgemm.pack_quads(np.concatenate([w, np.zeros((n8 - n, k), np.int8)]), tile=8)
    ab = np.zeros((m, 4 * kq), np.uint8)
    ab[:, :k] = a
    b = np.zeros(n8, np.int32)
    b[:n] = rng.integers(-5000, 5000, n)
    mult = np.zeros(n8, np.float32)
    mult[:n] = rng.random(n) * 1e-3
    y = np.zeros(m * n, np.uint8)
    q.qgemv_sat(wq, ab.reshape(-1), y, m, n, kq, b, mult, 9, qgemm.ONES, np.zeros(8 * qgemm.GB, np.uint8))
    acc = (a.astype(np.int64) @ w.T.astype(np.int64) + b[:n]).astype(np.int32)
    assert np.array_equal(y.reshape(m, n), _requantized(acc.T, mult[:n], 9, np.uint8).T)


CONV_CASES = [CONVS[1], CONVS[3], CONVS[9], CONVS[12], CONVS[-2], CONVS[-1]]  # pointwise tail, rows across taps,
#   stem, grouped, and two 7 x 7 outputs (channels in the lanes on 16-lane targets)


@pytest.mark.parametrize("dot", [NATIVE])
@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
def test_qlinear_conv_with_an_exact_dot_is_the_specs(dot, x_shape, w_shape, attrs):
    """QLinearConv's quad path (k = (kh, kw, c), the output's pixels only) with vpdpbusd or its emulation
    under the "exact" arithmetic: the spec's bits (and onnxruntime's, where it sums exactly: VNNI hosts)."""
    inputs = _crafted_conv(x_shape, w_shape, attrs, np.uint8, True)
    model = make_node_model("QLinearConv", inputs, attrs, opset=10, static=tuple(range(1, 9)))
    exact = _reference(inputs, attrs)
    type_outputs(model, [exact])
    with int8_arithmetic.use_dot("emulate" if dot == "emulated" else "vnni"), int8_arithmetic.use("exact"):
        assert int8_arithmetic.dot_product() == dot
        (ours,) = run_ours(model, {"in0": inputs[0]})
    assert np.array_equal(ours, exact), f"{int((ours != exact).sum())} of {exact.size} differ"


DIRECT_CASES = [  # QLinearConvs whose X the 16-lane exact kernels read in place from quad planes, and which kernel
    ((1, 16, 32, 32), (7, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "qconv_direct"),  # M = 5 + 2 rows
    ((1, 16, 12, 80), (6, 16, 5, 5), {"pads": [2, 2, 2, 2]}, "qconv_direct"),  # 25 taps
    ((1, 24, 16, 64), (9, 24, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, "qconv_direct"),  # dilated
    ((2, 20, 33, 40), (16, 20, 3, 3), {"pads": [1, 0, 2, 1], "strides": [2, 2]},  # batch 2, 4 phases, asymmetric
     "qconv_direct_chlanes"),  # (17 x 20 on a grid 21 wide: 23 tiles for 340 pixels)
    ((1, 32, 14, 14), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}, "qconv_direct_chlanes"),  # two 16-channel blocks
    ((1, 16, 7, 7), (48, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "qconv_direct_chlanes"),  # blocks of 32, then 16
    ((1, 16, 5, 5), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "qconv_direct_chlanes"),  # a grid 7 wide
]


@pytest.mark.parametrize("dot", KERNEL_DOTS)
@pytest.mark.parametrize("y_type", [np.uint8, np.int8])
@pytest.mark.parametrize("x_shape,w_shape,attrs,kernel", DIRECT_CASES)
def test_qlinear_conv_from_quad_planes_is_the_specs(dot, y_type, x_shape, w_shape, attrs, kernel, monkeypatch):
    """QLinearConv with X read in place from its quad planes (compiled/qgemm.py's qconv_direct: the output on
    the planes' grid, its rows stored by segment; qconv_direct_chlanes: the output channels in the lanes, each
    pixel's quad broadcast) against the spec's exact bits and the packed-tile path's."""
    q = dots.module("qgemm", dot)
    if not q.WIDE:
        pytest.skip("the quad-plane kernels run on 16-lane targets only (dots.wide_here)")
    inputs = _crafted_conv(x_shape, w_shape, attrs, np.uint8, True)
    inputs[7] = np.array(7, y_type)
    model = make_node_model("QLinearConv", inputs, attrs, opset=10, static=tuple(range(1, 9)))
    exact = _reference(inputs, attrs)
    type_outputs(model, [exact])
    calls = []
    for name in ("qconv_direct", "qconv_direct_chlanes"):
        def counted(*args, _f=getattr(q, name), _name=name):
            calls.append(_name)
            return _f(*args)

        monkeypatch.setattr(q, name, counted)
    outs = {}
    for on in ("1", "0"):
        monkeypatch.setenv("POOLED_PREDICTOR_QCONV_DIRECT", on)
        with int8_arithmetic.use_dot("emulate" if dot == "emulated" else "vnni"), int8_arithmetic.use("exact"):
            (outs[on],) = run_ours(model, {"in0": inputs[0]})
        assert set(calls) == ({kernel} if on == "1" else set()), calls
        calls.clear()
    assert np.array_equal(outs["1"], exact), f"{int((outs['1'] != exact).sum())} of {exact.size} differ"
    assert np.array_equal(outs["0"], exact)


@pytest.mark.parametrize("oh,ow,pitch", [(1, 8, 8), (3, 8, 9), (14, 14, 16), (5, 30, 32), (7, 17, 17), (2, 3, 8)])
def test_direct_tables_store_each_output_once(oh, ow, pitch):
    """direct_tables' segments: each output pixel stored exactly once, from the lane of its grid position."""
    taps = np.array([0, 1, pitch])
    assert list(qgemm.direct_offsets(taps, 9, 1000)) == [cq * 1000 + 4 * t for cq in range(3) for t in taps]
    t_n, segs = qgemm.direct_tables(oh, ow, pitch)
    hits = np.zeros(oh * ow, np.int64)
    for t in range(t_n):
        for e in segs[t * qgemm.SEGS:(t + 1) * qgemm.SEGS]:
            mask, dst = int(e) & 0xFFFF, int(e) >> 16
            for lane in range(16):
                if mask >> lane & 1:
                    q = 16 * t + lane  # its grid position, and the output pixel stored there
                    assert dst + lane == q // pitch * ow + q % pitch and q % pitch < ow
                    hits[dst + lane] += 1
    assert (hits == 1).all()
    with pytest.raises(ValueError):
        qgemm.direct_tables(oh, ow, 7)


def _products():
    m, k, n = 3, 33, 20
    a, b, b_scale = _crafted_product(m, k, n, True)
    yield make_node_model("QLinearMatMul", [a, _f(0.05), np.array(121, np.uint8), b, b_scale,
                                            np.zeros(n, np.int8), _f(1.5), np.array(128, np.uint8)],
                          opset=10, static=tuple(range(1, 8))), a  # M <= 3: the GEMV
    a, b, b_scale = _crafted_product(17, k, n, True)
    yield make_node_model("QGemm", [a, _f(0.05), np.array(121, np.uint8), b, b_scale, np.zeros(n, np.int8),
                                    rng.integers(-3000, 3000, n).astype(np.int32)], {"alpha": 0.75},
                          static=tuple(range(1, 7)), domain="com.microsoft"), a  # float output
    yield make_node_model("MatMulIntegerToFloat", [a, b, _f(0.05), b_scale, np.array(121, np.uint8),
                                                   np.zeros(n, np.int8), _f(rng.random(n))],
                          static=tuple(range(1, 7)), domain="com.microsoft"), a
    af = (rng.random((2, 9, k)) * 4 + 1).astype(np.float32)
    yield make_node_model("DynamicQuantizeMatMul", [af, b, b_scale, np.zeros(n, np.int8)], static=(1, 2, 3),
                          domain="com.microsoft"), af


@pytest.mark.parametrize("dot", [NATIVE])
def test_products_with_an_exact_dot_are_the_specs(dot):
    """QLinearMatMul / QGemm / MatMulIntegerToFloat / DynamicQuantizeMatMul on the quad kernels with an exact
    dot product: the "exact" arithmetic's bits with the int16-pair kernels (vpmaddwd), which are the spec's."""
    for model, a in _products():
        with int8_arithmetic.use_dot("pairs"), int8_arithmetic.use("exact"):
            assert int8_arithmetic.dot_product() is None
            (pairs,) = run_ours(model, {"in0": a})
        with int8_arithmetic.use_dot("emulate" if dot == "emulated" else "vnni"), int8_arithmetic.use("exact"):
            (ours,) = run_ours(model, {"in0": a})
        assert np.array_equal(ours.view(np.uint8), pairs.view(np.uint8)), model.graph.node[0].op_type
        if VNNI:  # onnxruntime sums exactly here too
            (ref,) = run_ort(model, {"in0": a})
            assert np.allclose(ours, ref, rtol=1e-6, atol=1e-6 * float(np.abs(ref).max()))



def _exact_dot_dqgemm_cases(dot: str) -> int:
    """dynamic_qmatmul_sat and qmatmul_sat of dots.module("dqgemm", dot) against exact int64 sums over shapes
    that take every tile of the module: on a 16-lane target the wide tiles (PANELS panels x WIDE_ROWS rows
    and their shorter row counts), then the 16-column panels and a last partial one. Returns the cases run."""
    from pooled_predictor.ops.cpu.compiled import qgemm
    from pooled_predictor.ops.cpu.quantize import dynamic_quantize_linear

    d = dots.module("dqgemm", dot)
    group = 16 * getattr(d, "PANELS", 1)
    rng = np.random.default_rng(30)
    cases = 0
    for m, k, n in ((1, 4, 16), (9, 20, 2 * group), (17, 33, group + 16 + 5), (128, 96, group),
                    (13, 130, 3 * group + 1), (3, 768, 2 * group)):
        a = (rng.standard_normal((m, k)) * 3).astype(np.float32)
        a.flags.writeable = False
        w = rng.integers(-128, 128, (k, n)).astype(np.int8)
        b_scale = rng.uniform(0.001, 0.01, n).astype(np.float32)
        for bias in (None, rng.standard_normal(n).astype(np.float32)):
            q, s, z = np.empty(a.shape, np.uint8), np.zeros((), np.float32), np.zeros((), np.uint8)
            dynamic_quantize_linear(a, out=(q, s, z))
            cs = w.astype(np.int64).sum(axis=0)
            ref = ((q.astype(np.int64) @ w.astype(np.int64)) - int(z) * cs).astype(np.float32) * (
                s * b_scale).astype(np.float32)
            if bias is not None:
                ref = (ref + bias).astype(np.float32)
            none = np.zeros(0, np.float32)
            none.flags.writeable = False
            args = (d.pack_panels(w), d.padded(cs, np.int32), d.padded(b_scale, np.float32),
                    none if bias is None else d.padded(bias, np.float32))
            y = np.full((m, n), np.nan, np.float32)
            d.dynamic_qmatmul_sat(a, a.min(), a.max(), *args, y, np.empty(m * ((k + 3) // 4 * 4), np.uint8),
                                  np.empty(d.ROWS * 16, np.float32), qgemm.ONES)
            assert np.array_equal(ref.view(np.int32), y.view(np.int32)), (dot, m, k, n, float(np.abs(ref - y).max()))
            y2 = np.full((m, n), np.nan, np.float32)
            q.flags.writeable = False
            d.qmatmul_sat(q, int(z), np.float32(s), *args, y2, np.empty(m * ((k + 3) // 4 * 4), np.uint8),
                          np.empty(d.ROWS * 16, np.float32), qgemm.ONES)
            assert np.array_equal(ref.view(np.int32), y2.view(np.int32)), (dot, m, k, n)
            cases += 1
    return cases


@pytest.mark.parametrize("dot", KERNEL_DOTS)
def test_dqgemm_with_an_exact_dot_sums_exactly(dot):
    """DynamicQuantizeMatMul's and MatMulIntegerToFloat's kernels with an exact dot product, at this host's
    width (the wide tiles of 64 columns where the kernels are 16 lanes wide): exact int32 sums, bit for bit."""
    assert _exact_dot_dqgemm_cases(dot) == 12


def test_wide_dqgemm_sums_exactly_at_16_lanes():
    """The same for the wide tiles on any host: the emulated dot product at 16 lanes (POOLED_PREDICTOR_ISA=avx512,
    where LLVM splits the 512-bit vectors on an AVX2 host), in a subprocess (numba's cache in it is its own)."""
    if dots.module("dqgemm", "emulated").WIDE:
        pytest.skip("this process's emulated kernels are the wide ones (test_dqgemm_with_an_exact_dot_sums_exactly)")
    code = ("from tests.ops.test_int8_dot import _exact_dot_dqgemm_cases\n"
            "from pooled_predictor.ops.cpu.compiled import dots\n"
            "assert dots.module('dqgemm', 'emulated').WIDE\n"
            "print(_exact_dot_dqgemm_cases('emulated'), 'cases')\n")
    env = dict(os.environ, POOLED_PREDICTOR_ISA="avx512",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "12 cases" in out.stdout

def test_dot_product_choice():
    """"onnxruntime" saturates where the host has no VNNI, and is vpdpbusd's exact sum where it has (the exact
    int16-pair kernels where numba's target lacks VNNI though the host has it: NUMBA_CPU_FEATURES);
    POOLED_PREDICTOR_INT8_DOT's choices; an unknown one is refused."""
    exact_ort = "vpdpbusd" if VNNI else None if int8_arithmetic.host_vnni() else "vpmaddubsw"
    with int8_arithmetic.use_dot("vnni"):
        assert int8_arithmetic.dot_product("onnxruntime") == exact_ort
        assert int8_arithmetic.dot_product("exact") == ("vpdpbusd" if VNNI else None)
    with int8_arithmetic.use_dot("emulate"):
        assert int8_arithmetic.dot_product("exact") == "emulated"
    with int8_arithmetic.use_dot("pairs"):
        assert int8_arithmetic.dot_product("exact") is None
        assert "vpmaddwd" in int8_arithmetic.describe("exact")
    with pytest.raises(ValueError):
        with int8_arithmetic.use_dot("avx"):
            pass
    with pytest.raises(ValueError):
        dots.module("qgemm", "vpdpwssd")


def test_a_cpu_name_alone_keeps_the_hosts_vnni():
    """NUMBA_CPU_NAME without NUMBA_CPU_FEATURES: numba compiles for the host's features (its own rule), so the
    VNNI choice is the host's; with a features string, that string's (here one without VNNI)."""
    code = ("from pooled_predictor.ops.cpu.compiled import vnni; from pooled_predictor.ops import int8_arithmetic as a;"
            "print(vnni.TARGET_VNNI, vnni.TARGET_VNNI512, vnni.HOST_VNNI, a.dot_product('exact'))")
    base = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU_")
            and k not in ("POOLED_PREDICTOR_INT8_DOT", "POOLED_PREDICTOR_HOST_VNNI")}

    def child(**extra):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(base, **extra), capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.split()

    host = child()
    named = child(NUMBA_CPU_NAME="icelake-server")
    assert named == host and named[0] == named[2]  # TARGET_VNNI == HOST_VNNI
    plain = child(NUMBA_CPU_NAME="icelake-server", NUMBA_CPU_FEATURES="+avx,+avx2,+fma,+avx512f,+avx512bw,+avx512vl")
    assert plain[:2] == ["False", "False"] and plain[3] == "None"


def test_host_vnni_override_changes_the_arithmetic_not_the_kernels():
    """POOLED_PREDICTOR_HOST_VNNI=0: onnxruntime's arithmetic as on a host without VNNI (the saturating pairs, as
    benchmarks/ort_avx2.py's onnxruntime computes them); the exact arithmetic keeps the kernels this host runs."""
    code = ("from pooled_predictor.ops.cpu.compiled import vnni; from pooled_predictor.ops import int8_arithmetic as a;"
            "print(vnni.HOST_VNNI, vnni.DETECTED_VNNI, a.saturating('onnxruntime'), a.dot_product('onnxruntime'),"
            "a.dot_product('exact'))")
    base = {k: v for k, v in os.environ.items() if k not in ("POOLED_PREDICTOR_INT8_DOT", "POOLED_PREDICTOR_HOST_VNNI")}

    def child(**extra):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(base, **extra), capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.split()

    host, without, with_ = child(), child(POOLED_PREDICTOR_HOST_VNNI="0"), child(POOLED_PREDICTOR_HOST_VNNI="1")
    assert host[0] == host[1]  # no override: the host's own
    assert without[:4] == ["False", host[1], "True", "vpmaddubsw"] and without[4] == host[4]
    assert with_[:3] == ["True", host[1], "False"]  # onnxruntime's arithmetic exact, as on a VNNI host,
    assert with_[3] == with_[4] == host[4]  # summed by the exact kernels this host has


_ASM = textwrap.dedent("""
    import sys
    import numba
    from numba import types
    from pooled_predictor.ops.cpu.compiled import dots
    from tests.ops.test_compiled_dqgemm import _check_loops, _k_loops

    q, d = dots.module("qgemm", "vpdpbusd"), dots.module("dqgemm", "vpdpbusd")
    for fn, sig, tiles in ((q.qgemm2d_sat, q._sat_sigs(types.uint8), q.MRS), (q.qgemv_sat, q._gemv_sigs(types.uint8), q.GB),
                           (d.qmatmul_sat, d._SIG_Q, d.ROWS)):
        asm = next(iter(numba.njit([sig], nogil=True, cache=False, error_model="numpy")(fn.py_func).inspect_asm().values()))
        loops = list(_k_loops(asm, "vpdpbusd"))
        assert len(loops) >= tiles, (fn, len(loops))  # a k loop per tile height at least
        for body in loops:
            text = "\\n".join(body)
            assert "vpmaddubsw" not in text and "vpmaddwd" not in text, text
            if sys.argv[1] == "vex":  # an AVX-VNNI CPU: the VEX form (ymm), every one
                assert all("{vex}" in line for line in body if "vpdpbusd" in line), text
        zmm = sum(any("vpdpbusd" in line and "%zmm" in line for line in body) for body in loops)
        # AVX512-VNNI at 16 lanes: the whole tiles of the pixel GEMM and dqgemm's tiles on zmm (the GEMV's,
        # the half tiles' and the last pixels' stay ymm); AVX-VNNI: none
        assert (zmm > 0) == (sys.argv[1] == "zmm" and fn is not q.qgemv_sat), (fn, zmm)
        _check_loops(asm, "vpdpbusd")  # no accumulator spilled (16 ymm registers on AVX-VNNI CPUs)
        print(fn.py_func.__name__, len(loops), "k loops", zmm, "on zmm")
""")


@pytest.mark.parametrize("cpu,features,isa,form", [("sapphirerapids", "+avx512vnni", "avx512", "zmm"),
                                                    ("alderlake", "", "avx2", "vex")])
def test_vpdpbusd_kernels_compile_to_vpdpbusd(cpu, features, isa, form, tmp_path):
    """For a VNNI CPU (AVX512-VNNI at 16 lanes: Sapphire Rapids; AVX-VNNI only, 16 ymm registers: Alder Lake),
    whatever this host is: every k loop of the vpdpbusd kernels sums with vpdpbusd (on zmm for Sapphire
    Rapids' whole tiles, VEX-encoded ymm on Alder Lake), with no vpmaddubsw / vpmaddwd, and keeps its
    accumulators in registers. Compiled in a subprocess for that CPU (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES,
    POOLED_PREDICTOR_ISA; numba's cache in tmp_path), never run."""
    env = dict(os.environ, NUMBA_CPU_NAME=cpu, NUMBA_CPU_FEATURES=features, POOLED_PREDICTOR_ISA=isa,
               NUMBA_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    out = subprocess.run([sys.executable, "-c", _ASM, form], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("k loops") == 3
