"""The 16-lane kernels (NCHW16c, compiled/lanes16, compiled/widths.py) on any x86 machine: LLVM splits
their <16 x float> where the host has no AVX-512, so their bits and shapes are checked everywhere.

Each kernel does, per channel, the 8-lane kernel's float32 operations in its order, so the checks are
bit for bit against the NCHW kernels (the GEMM, the blocked chain) or the 8-lane kernels (depthwise,
Winograd, the fused chain), and against onnxruntime within the suite's tolerances for whole models.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.engine.program import Program
from pooled_predictor.importers import load_onnx
from pooled_predictor.ops.cpu import conv_nchwc
from pooled_predictor.ops.cpu.compiled import epilogue, isa, widths
from pooled_predictor.ops.cpu.compiled import gemm as nchw_gemm
from pooled_predictor.ops.cpu.compiled.reorder import from_blocked, to_blocked
from pooled_predictor.ops.layouts import TRANSFORM_OP, physical_shape
from pooled_predictor.passes import optimize
from tests.conftest import SUITE_LANES
from tests.onnx_helpers import run_ort
from tests.ops import test_nchwc as nchwc_tests  # its NCHW <-> blocked helpers, at 16 lanes here

rng = np.random.default_rng(16)
L16 = "NCHW16c"
g16 = widths.module("nchwc_gemm", 16)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def blocked(x, layout=L16):
    return nchwc_tests.blocked(x, layout)


def unblocked(x, shape, layout=L16):
    return nchwc_tests.unblocked(x, shape, layout)


# ---- the ISA module -----------------------------------------------------------------------------
def _isa_in_child(value, **numba_env):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU_")}
    env.update(numba_env, POOLED_PREDICTOR_ISA=value)
    code = "from pooled_predictor.ops.cpu.compiled import isa; print(isa.ISA, isa.LANES, isa.DETECTED)"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)


def test_isa_override_and_unknown_value():
    got = _isa_in_child("avx512").stdout.split()
    assert got[:2] == ["avx512", "16"] and got[2] in isa.ISAS
    assert _isa_in_child("AVX2").stdout.split()[:2] == ["avx2", "8"]
    bad = _isa_in_child("sse9")
    assert bad.stdout.split()[0] == bad.stdout.split()[2]  # the detected one
    assert "POOLED_PREDICTOR_ISA" in bad.stderr and "sse9" in bad.stderr


def test_the_detected_isa_is_numbas_target():
    """NUMBA_CPU_FEATURES naming another target decides the width (numba compiles for it, not the host):
    an AVX2 fleet's cache gets 8 lanes, an AVX-512 one 16; NUMBA_CPU_NAME alone keeps the host's features."""
    hsw = "+avx,+avx2,+fma,+f16c,-avx512f,-avx512vl,-avx512bw,-avx512vnni,-avxvnni"
    assert _isa_in_child("", NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES=hsw).stdout.split() == ["avx2", "8", "avx2"]
    skx = "+avx,+avx2,+fma,+avx512f,+avx512vl,+avx512bw,+avx512dq"
    assert _isa_in_child("", NUMBA_CPU_NAME="skylake-avx512",
                         NUMBA_CPU_FEATURES=skx).stdout.split() == ["avx512", "16", "avx512"]
    host = _isa_in_child("").stdout.split()
    assert _isa_in_child("", NUMBA_CPU_NAME="haswell").stdout.split() == host


def test_use_lanes_sets_the_width_of_nets_made_inside():
    before = isa.lanes()  # the suite's (tests/conftest.py: 8 unless POOLED_PREDICTOR_TEST_LANES), whatever the host's
    assert before == SUITE_LANES and isa.blocked_layout() == f"NCHW{SUITE_LANES}c" and isa.LANES in isa.ISAS.values()
    with isa.use_lanes(16):
        assert isa.lanes() == 16 and isa.blocked_layout() == L16
        assert Net(Program(load_onnx(_small_model()))).lanes == 16
        with isa.use_lanes(8):
            assert isa.lanes() == 8
        assert isa.lanes() == 16
    assert isa.lanes() == before
    with pytest.raises(ValueError, match="lanes"):
        with isa.use_lanes(4):
            pass
    assert isa.describe().startswith(isa.ISA)


def test_each_width_has_its_own_cache_names_and_functions():
    g8 = widths.module("nchwc_gemm", 8)
    assert g8.LANES == 8 and g16.LANES == 16 and g8.BLOCK == 8 and g16.BLOCK == 16
    assert g8.gemm_nchwc is not g16.gemm_nchwc
    assert g8.gemm_nchwc.py_func.__qualname__ == g16.gemm_nchwc.py_func.__qualname__ == "gemm_nchwc"
    # numba's cache index files of the two differ (compiled/jit.py: _tagged)
    assert g8.gemm_nchwc._cache._cache_path and g16.gemm_nchwc._cache._impl.filename_base.startswith(
        "nchwc_gemm.gemm_nchwc__w16-")
    assert not g8.gemm_nchwc._cache._impl.filename_base.startswith("nchwc_gemm.gemm_nchwc__")
    with pytest.raises(ValueError, match="multiple of 16"):
        g16.pack_weights(f32(24, 16))


def _small_model():
    from tests.ops.test_nchwc import _chain_model

    return _chain_model(c=16, n=1)


# ---- kernels, bit for bit ---------------------------------------------------------------------------
# M: one 16-block, the 32 panel, 48 (the 3-vector tile), 32 + 32 and 32 + 48; K: one block, a KC chunk crossed
@pytest.mark.parametrize("k", [16, g16.KC + 16])
@pytest.mark.parametrize("m", [16, 32, 48, 64, 80])
@pytest.mark.parametrize("p", [1, 5, 7, 13])
@pytest.mark.parametrize("z, act", [(False, epilogue.NONE), (True, epilogue.CLIP)])
def test_pointwise_gemm16_gives_the_nchw_gemms_bits(k, m, p, z, act):
    w, x, b, zz = f32(m, k), f32(1, k, p, 1), f32(m), f32(1, m, p, 1)
    a0, a1 = np.float32(-0.5), np.float32(0.75)
    ref = np.empty((1, m, p, 1), np.float32)
    ws = np.empty(max(1, nchw_gemm.scratch_size(p)), np.float32)
    args = (nchw_gemm.pack_weights(w), x.reshape(-1), 0, nchw_gemm.row_offsets(k, p), ref.reshape(-1), 0, p, m, p, b,
            ws, act, a0, a1)
    if z:
        nchw_gemm.gemm2d_sum(*args, zz.reshape(-1))
    else:
        nchw_gemm.gemm2d(*args)
    yb = np.full(physical_shape(ref.shape, L16), np.nan, np.float32)
    g16.gemm_nchwc(g16.pack_weights(w), blocked(x).reshape(-1), 0, g16.channel_offsets(k, p), 16, yb.reshape(-1), 0,
                   16 * p, m, p, b, act, a0, a1, blocked(zz).reshape(-1), z)
    np.testing.assert_array_equal(unblocked(yb, ref.shape), ref)


@pytest.mark.parametrize("k, m, p, rows", [(48, 32, 7, 7), (g16.KC + 16, 64, 7, 7), (16, 48, 13, 4),
                                           (16, 512, 7, 20), (32, 64, 28, 6), (16, 48, 40, 3)])
@pytest.mark.parametrize("gather", [False, True], ids=["per-band", "across-bands"])
def test_gemm16_over_bands_gives_the_gemm_over_their_pixels_bits(k, m, p, rows, gather):
    n = rows * p
    w, x, b, zz = f32(m, k), f32(1, k, n, 1), f32(m), f32(1, m, n, 1)
    wp, xb, zb = g16.pack_weights(w), blocked(x).reshape(-1), blocked(zz).reshape(-1)
    offs = g16.channel_offsets(k, n)
    want = np.full(m * n, np.nan, np.float32)
    got = want.copy()
    g16.gemm_nchwc(wp, xb, 0, offs, 16, want, 0, 16 * n, m, n, b, epilogue.RELU, np.float32(0), np.float32(0), zb,
                   True)
    px = g16.pixel_offsets(p, rows, 16, 16 * p) if gather else np.zeros(0, np.int64)
    g16.gemm_nchwc_rows(wp, xb, 0, offs, 16, 16 * p, got, 0, 16 * p, 16 * n, m, p, rows, b, epilogue.RELU,
                        np.float32(0), np.float32(0), zb, True, px)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernel, strides, dilations, pads", [
    ((3, 3), (1, 1), (1, 1), (1, 1)), ((3, 3), (2, 2), (1, 1), (1, 1)), ((5, 5), (1, 1), (1, 1), (2, 2)),
    ((5, 5), (2, 2), (1, 1), (2, 2)), ((3, 3), (1, 1), (2, 2), (2, 2)), ((1, 7), (1, 2), (1, 1), (0, 3))])
@pytest.mark.parametrize("act", [epilogue.NONE, epilogue.CLIP, epilogue.HARD_SWISH])
def test_depthwise16_gives_the_8_lane_kernels_bits(kernel, strides, dilations, pads, act):
    d8, d16 = widths.module("nchwc_depthwise", 8), widths.module("nchwc_depthwise", 16)
    c, (h, w) = 32, (13, 11)
    x, wt, b = f32(2, c, h, w), f32(c, 1, *kernel), f32(c)
    oh = (h + 2 * pads[0] - dilations[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    ow = (w + 2 * pads[1] - dilations[1] * (kernel[1] - 1) - 1) // strides[1] + 1
    outs = {}
    for lanes, mod in ((8, d8), (16, d16)):
        lay = f"NCHW{lanes}c"
        y = np.full(physical_shape((2, c, oh, ow), lay), np.nan, np.float32)
        mod.depthwise_nchwc(blocked(x, lay), mod.pack_depthwise(wt), b, y, *kernel, *strides, *dilations, *pads, act,
                            0.0, 6.0)
        outs[lanes] = unblocked(y, (2, c, oh, ow), lay)
    np.testing.assert_array_equal(outs[16], outs[8])


@pytest.mark.parametrize("shape", [(1, 16, 8, 8), (2, 19, 13, 11), (2, 32, 3, 5), (1, 40, 1, 1), (2, 5, 7),
                                   (1, 24, 24, 20), (2, 40, 3, 11), (1, 27, 5, 7), (2, 8, 17), (1, 56, 9, 9)])
def test_reorders16_round_trip_and_match_numpy(shape):
    """Partial last blocks included: 24, 40, 56 channels (8 of 16 in the last block: its 8 x 8 tiles), 27 (8
    tiled, 3 more by the scalar loop), 8 (one partial block only); pixel counts on and off multiples of 8."""
    x = f32(*shape)
    n, c = shape[0], shape[1]
    p = int(np.prod(shape[2:]))
    got = np.full(physical_shape(shape, L16), np.nan, np.float32)
    to_blocked(x.reshape(-1), got.reshape(-1), n, c, p, 16)
    ref = np.zeros(physical_shape(shape, L16), np.float32)
    for cb in range(ref.shape[1]):
        part = x[:, cb * 16:cb * 16 + 16]
        ref[:, cb, ..., :part.shape[1]] = np.moveaxis(part, 1, -1)
    np.testing.assert_array_equal(got, ref)
    back = np.full(shape, np.nan, np.float32)
    from_blocked(got.reshape(-1), back.reshape(-1), n, c, p, 16)
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("pixels", [1, 8, 9, 255, 257, 8 * 33 + 5])
def test_pixel_mean16_gives_the_nchw_row_sums_bits(pixels):
    from pooled_predictor.ops.cpu.compiled.rowreduce import sum_rows

    x = f32(2, 32, pixels, 1) * np.float32(10) + np.float32(3)
    ref = np.empty(64, np.float32)
    sum_rows(x.reshape(-1), ref, 64, pixels, 1.0 / pixels)
    got = np.empty(64, np.float32)
    widths.module("blocked", 16).pixel_mean(blocked(x).reshape(-1), got, 4, pixels, 1.0 / pixels,
                                            np.empty(128, np.float32), np.empty(16, np.float64))
    np.testing.assert_array_equal(got, ref)


# ---- Nets at 16 lanes -------------------------------------------------------------------------------
def _net(model, lanes, passes=True, optimization=Optimization.NONE):
    graph = load_onnx(model)
    if passes:
        graph = optimize(graph, "all")[0]
    with isa.use_lanes(lanes):
        return Net(Program(graph), optimization=optimization)


def _layouts(net):
    return {o.split("@", 1)[1] for node in net.layout.run_nodes for o in node.outputs if "@" in o}


@pytest.mark.parametrize("passes", [False, True])
def test_blocked_chain16_gives_the_nchw_kernels_bits(passes, monkeypatch, nchw_winograd_minimums):
    """test_nchwc.py's chain (convs, SE block, ReduceMean, Sub, Concat, MaxPool, Resize, Sigmoid) at 32
    channels in NCHW16c: onnxruntime's values, and the NCHW kernels' bits."""
    from tests.ops.test_nchwc import _chain_model

    model = _chain_model(c=32, n=2)
    x = f32(2, 32, 9, 7)
    net = _net(model, 16, passes)
    net.forward(x)
    assert _layouts(net) == {L16}
    ref = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(net.blob_by_name("y"), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    monkeypatch.setattr(conv_nchwc, "ENABLED", False)
    plain = _net(model, 16, passes)
    plain.forward(x)
    assert not any(node.op_type == TRANSFORM_OP for node in plain.layout.run_nodes)
    np.testing.assert_array_equal(net.blob_by_name("y"), plain.blob_by_name("y"))


def test_winograd16_and_fused_chain16_give_the_8_lane_bits():
    """3x3 convolutions (the Winograd kind), strided 3x3 (indirect), a stem (NCHW -> blocked) and an
    inverted residual block (FusedConvDepthwise): the same bits at 16 lanes as at 8, each width's own
    layout, under MEMORY at the arena's lower bound."""
    from tests.ops.test_nchwc_chain import _block

    w = {name: f32(*shape) * np.float32(0.2) for name, shape in
         (("Ws", (32, 3, 3, 3)), ("W1", (32, 32, 3, 3)), ("B1", (32,)), ("W2", (48, 32, 3, 3)))}
    nodes = [helper.make_node("Conv", ["img", "Ws"], ["s"], pads=[1] * 4),
             helper.make_node("Relu", ["s"], ["s1"]),
             helper.make_node("Conv", ["s1", "W1", "B1"], ["a"], pads=[1] * 4),
             helper.make_node("Relu", ["a"], ["a1"]),
             helper.make_node("Conv", ["a1", "W2"], ["x"], pads=[1] * 4, strides=[2, 2])]
    from tests.passes.pass_helpers import make_model

    stem = make_model(nodes, {"img": (2, 3, 20, 18)}, ["x"], w, opset=13)
    block, inputs = _block(c=48, m=96, hw=(10, 9))
    for model, feeds in ((stem, {"img": f32(2, 3, 20, 18)}), (block, {k: f32(*s) for k, s in inputs.items()})):
        outs = {}
        for lanes in (8, 16):
            net = _net(model, lanes, optimization=Optimization.MEMORY)
            net.forward(feeds)
            assert _layouts(net) == {f"NCHW{lanes}c"}
            outs[lanes] = np.array(net.blob_by_name(model.graph.output[0].name))
            plan = net.memory_plan
            assert plan.arena_bytes == plan.lower_bound_bytes
        np.testing.assert_array_equal(outs[16], outs[8])
        ref = run_ort(model, feeds)[0]
        np.testing.assert_allclose(outs[16], ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())


def test_small_3x3_runs_indirect_where_its_u_is_large_at_both_widths(monkeypatch):
    """A stride-1 3x3 at 7x7 (4 F(4x4) tiles): with its U over WINOGRAD_MAX_U_BYTES (lowered here, so that 32
    channels suffice) the indirect kind, within it Winograd, at 8 and at 16 lanes alike
    (conv_nchwc.winograd_fits); each within the suite's tolerance of onnxruntime."""
    from tests.passes.pass_helpers import make_model

    u_bytes = 4 * 36 * 32 * 32
    seen = []
    init = conv_nchwc._BlockedConv.__init__
    monkeypatch.setattr(conv_nchwc._BlockedConv, "__init__",
                        lambda self, ctx: (init(self, ctx), seen.append((self.block, self.kind))))
    w = {name: f32(*shape) * np.float32(0.2) for name, shape in
         (("Wa", (32, 32, 1, 1)), ("Wb", (32, 32, 3, 3)), ("Bb", (32,)), ("Wc", (32, 32, 1, 1)))}
    nodes = [helper.make_node("Conv", ["x", "Wa"], ["a"]),
             helper.make_node("Conv", ["a", "Wb", "Bb"], ["b"], pads=[1] * 4),
             helper.make_node("Relu", ["b"], ["r"]),
             helper.make_node("Conv", ["r", "Wc"], ["y"])]
    model = make_model(nodes, {"x": (2, 32, 7, 7)}, ["y"], w, opset=13)
    x = f32(2, 32, 7, 7)
    ref = run_ort(model, {"x": x})[0]
    for bound, kind in ((u_bytes - 1, "indirect"), (u_bytes, "winograd")):
        monkeypatch.setattr(conv_nchwc, "WINOGRAD_MAX_U_BYTES", bound)
        for lanes in (8, 16):
            seen.clear()
            net = _net(model, lanes)
            net.forward({"x": x})
            assert _layouts(net) == {f"NCHW{lanes}c"}
            kinds = [k for block, k in seen if block == lanes]
            assert kinds.count(kind) == 1, (bound, seen)
            np.testing.assert_allclose(net.blob_by_name("y"), ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())


def _off_block_model(act="Clip"):
    """24 and 72 channels (multiples of 8, not of 16), batch 2: a 1x1, then an inverted residual block (a
    FusedConvDepthwise chain, the projection adding the block's input), a strided 3x3 (indirect), a strided 1x1 (pointwise), `act`
    after the last convolution."""
    from tests.passes.pass_helpers import make_model

    w = {name: f32(*shape) * np.float32(0.3) for name, shape in
         (("W0", (24, 24, 1, 1)), ("W1", (72, 24, 1, 1)), ("B1", (72,)), ("Wd", (72, 1, 3, 3)), ("Bd", (72,)), ("W2", (24, 72, 1, 1)), ("B2", (24,)),
          ("W3", (40, 24, 3, 3)), ("B3", (40,)), ("W4", (24, 40, 1, 1)), ("B4", (24,)))}
    w.update(lo=np.float32(0), hi=np.float32(6))
    nodes = [helper.make_node("Conv", ["x", "W0"], ["h0"]),
             helper.make_node("Relu", ["h0"], ["h"]),
             helper.make_node("Conv", ["h", "W1", "B1"], ["e"]),
             helper.make_node("Clip", ["e", "lo", "hi"], ["e1"]),
             helper.make_node("Conv", ["e1", "Wd", "Bd"], ["d"], group=72, pads=[1] * 4),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d1"]),
             helper.make_node("Conv", ["d1", "W2", "B2"], ["p"]),
             helper.make_node("Add", ["p", "h"], ["r"]),
             helper.make_node("Conv", ["r", "W3", "B3"], ["c"], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["c1"]),
             helper.make_node("Conv", ["c1", "W4", "B4"], ["q"], strides=[2, 1]),
             helper.make_node(act, ["q", "lo", "hi"] if act == "Clip" else ["q"], ["y"])]
    return make_model(nodes, {"x": (2, 24, 11, 10)}, ["y"], w, opset=13)


@pytest.mark.parametrize("optimization", [Optimization.NONE, Optimization.MEMORY])
def test_channels_off_the_block_run_padded_at_16_lanes(optimization, monkeypatch):
    """24 and 72 channels at 16 lanes: every convolution (pointwise, strided pointwise, depthwise, indirect, the
    fused chain, a sum input) in NCHW16c with the last block half padding (conv_nchwc.blocked_channels), one
    transform in and one out; the 8-lane Net's bits (the same sums: padding channels are never read), within
    the suite's tolerance of onnxruntime, MEMORY at the arena's lower bound. POOLED_PREDICTOR_NCHWC_PAD=0
    (PAD_CHANNELS): those convolutions stay NCHW at 16 lanes."""
    model = _off_block_model()
    x = f32(2, 24, 11, 10)
    kinds = []
    init = conv_nchwc._BlockedConv.__init__
    monkeypatch.setattr(conv_nchwc._BlockedConv, "__init__",
                        lambda self, ctx: (init(self, ctx), kinds.append((self.block, self.kind))))
    outs = {}
    for lanes in (8, 16):
        net = _net(model, lanes, optimization=optimization)
        net.forward({"x": x})
        assert _layouts(net) == {f"NCHW{lanes}c"}
        ops = [node.op_type for node in net.layout.run_nodes]
        assert ops.count(TRANSFORM_OP) == 2 and "FusedConvDepthwise" in ops, ops
        outs[lanes] = np.array(net.blob_by_name("y"))
        if optimization == Optimization.MEMORY:
            assert net.memory_plan.arena_bytes == net.memory_plan.lower_bound_bytes
    assert {k for b, k in kinds if b == 16} == {"pointwise", "indirect"}, kinds
    np.testing.assert_array_equal(outs[16], outs[8])
    kinds.clear()  # the chain's two convolutions apart: the depthwise kind on 72 channels
    graph = optimize(load_onnx(model), "all", disable=("fuse_pointwise_depthwise",))[0]
    with isa.use_lanes(16):
        unfused = Net(Program(graph), optimization=optimization)
    unfused.forward({"x": x})
    assert _layouts(unfused) == {L16} and ("depthwise" in [k for b, k in kinds if b == 16]), kinds
    np.testing.assert_array_equal(unfused.blob_by_name("y"), outs[16])
    ref = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(outs[16], ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())
    monkeypatch.setattr(conv_nchwc, "PAD_CHANNELS", False)
    net = _net(model, 16, optimization=optimization)
    net.forward({"x": x})
    assert not _layouts(net)


def test_off_block_channels_take_no_activation_that_moves_zero(monkeypatch):
    """A padding channel's sum is 0, so a convolution writing channels off the block runs blocked only with an
    activation that keeps 0 at 0: the last 1x1 (24 channels) with a Sigmoid after it stays NCHW at 16 lanes
    (the rest blocked), and the Net still gives onnxruntime's values."""
    model = _off_block_model("Sigmoid")
    x = f32(2, 24, 11, 10)
    net = _net(model, 16)
    net.forward({"x": x})
    last = [node for node in net.layout.run_nodes if node.outputs[0] == "y"]
    assert len(last) == 1 and "@" not in last[0].inputs[0], net.layout.run_nodes
    assert _layouts(net) == {L16}
    assert conv_nchwc._keeps_zero("Clip", [0.0, 6.0]) and not conv_nchwc._keeps_zero("Clip", [0.5, 6.0])
    assert not conv_nchwc._keeps_zero("HardSigmoid", []) and conv_nchwc._keeps_zero(None, [])
    ref = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(net.blob_by_name("y"), ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())


def test_winograd_bounds_are_the_hosts_and_overridable():
    """WINOGRAD_MAX_U_BYTES defaults to half the host's last-level cache (read from /sys on Linux, 32 MiB where
    it cannot be), and both Winograd bounds take their POOLED_PREDICTOR_WINOGRAD_MIN_TILES / _MAX_U_BYTES
    overrides."""
    llc = conv_nchwc.last_level_cache_bytes()
    assert llc > 0 and conv_nchwc.last_level_cache_bytes(default=7) in (llc, 7)
    code = "from pooled_predictor.ops.cpu import conv_nchwc as c; print(c.WINOGRAD_MIN_TILES, c.WINOGRAD_MAX_U_BYTES)"
    bounds = ("POOLED_PREDICTOR_WINOGRAD_MIN_TILES", "POOLED_PREDICTOR_WINOGRAD_MAX_U_BYTES")
    for env, want in (({}, ["9", str(llc // 2)]),
                      ({"POOLED_PREDICTOR_WINOGRAD_MIN_TILES": "0", "POOLED_PREDICTOR_WINOGRAD_MAX_U_BYTES": "123"},
                       ["0", "123"])):
        env = {k: v for k, v in os.environ.items() if k not in bounds} | env
        got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert got.stdout.split() == want


ONE_WIDTH = r"""
import numpy as np
from pooled_predictor.engine.net import Net
from pooled_predictor.engine.program import Program
from pooled_predictor.importers import load_onnx
from pooled_predictor.ops.cpu.compiled import isa, jit, widths
from tests.ops.test_nchwc import _chain_model
assert isa.LANES == 16, isa.describe()
net = Net(Program(load_onnx(_chain_model(c=32, n=1))))
net.forward(np.ones((1, 32, 9, 7), np.float32))
names = {o.split("@", 1)[1] for node in net.layout.run_nodes for o in node.outputs if "@" in o}
g8, g16 = widths.module("nchwc_gemm", 8), widths.module("nchwc_gemm", 16)
print(sorted(names), jit.is_pending(g8.gemm_nchwc), jit.is_pending(g16.gemm_nchwc),
      jit.is_pending(widths.module("blocked", 8).pixel_mean), jit.is_pending(widths.module("blocked", 16).pixel_mean))
"""


def test_a_net_compiles_only_its_widths_kernels():
    """POOLED_PREDICTOR_ISA=avx512: the Net lays its chain out in NCHW16c and compiles (or loads) the
    16-lane kernels only; the 8-lane ones stay uncompiled in that process (issue 31: one width per model)."""
    env = dict(os.environ, POOLED_PREDICTOR_ISA="avx512", POOLED_PREDICTOR_TIERED="0")
    proc = subprocess.run([sys.executable, "-c", ONE_WIDTH], env=env, capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["['NCHW16c']", "True", "False", "True", "False"], proc.stdout
