"""FusedConvDepthwise: the compiled pointwise-then-depthwise kernel (compiled/nchwc_chain.py) against the two
NCHW8c kernels it fuses (bit for bit), and whole models against onnxruntime and the unfused graph."""

import numpy as np
import pytest
from onnx import helper

from pooled_predictor.importers import load_onnx
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.ops.cpu import conv_nchwc
from pooled_predictor.ops.cpu.compiled import epilogue, widths
from pooled_predictor.ops.cpu.compiled.nchwc_chain import panel_starts, pointwise_depthwise_nchwc, scratch_size
from pooled_predictor.ops.cpu.compiled.nchwc_depthwise import depthwise_nchwc, pack_depthwise
from pooled_predictor.ops.cpu.compiled.nchwc_gemm import KC, channel_offsets, gemm_nchwc, pack_weights
from pooled_predictor.passes import optimize
from pooled_predictor.engine.program import Program
from tests.passes.pass_helpers import make_model, rand, run_ort

pytestmark = pytest.mark.usefixtures("lanes8")  # NCHW8c structures (the 16-lane ones: test_nchwc16.py)

rng = np.random.default_rng(31)
F = np.float32


def _ro(a):
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


def _reference(wp, x, offs, b1, act1, z, w2, b2, out, geo, act2, lanes=8):
    """The two kernels apart: gemm_nchwc image by image into T, then depthwise_nchwc over T (at `lanes`)."""
    n_b, k_b, h, w, _ = x.shape
    m, L = b1.size, lanes  # noqa: N806
    t = np.full((n_b, m // L, h, w, L), np.nan, F)
    zf = b1 if z is None else z.reshape(-1)
    gemm = widths.module("nchwc_gemm", lanes).gemm_nchwc
    for n in range(n_b):
        gemm(wp, x.reshape(-1), n * k_b * L * h * w, offs, L, t.reshape(-1), n * m * h * w, L * h * w, m, h * w,
             b1, *act1, zf, z is not None)
    widths.module("nchwc_depthwise", lanes).depthwise_nchwc(t, w2, b2, out, *geo, *act2)


# K: one block, a projection (K > M, M in 32..96: gemm_nchwc's smaller K chunks), past one KC chunk;
# M: one block, a 16 panel, a 24 panel, 16 + 24, six panels; planes down to one pixel; strides, dilations,
# 3x3 and 5x5 and 1x3 kernels, asymmetric pads (the end padding set by OH, OW); Z; groups of one panel
# (group_bytes 0) and of several
CASES = [  # k, m, (h, w), (kh, kw), (sh, sw), (dh, dw), (ph, pw), end pads, z
    (8, 8, (5, 7), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), False),
    (16, 24, (9, 6), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True),
    (72, 32, (6, 6), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), True),
    (KC + 8, 40, (4, 5), (3, 3), (1, 2), (1, 1), (0, 1), (2, 0), False),
    (24, 96, (11, 13), (5, 5), (2, 1), (1, 1), (2, 2), (2, 2), True),
    (16, 16, (1, 1), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), False),
    (8, 48, (10, 9), (3, 3), (1, 1), (2, 2), (2, 2), (2, 2), False),
    (32, 16, (7, 12), (1, 3), (1, 3), (1, 1), (0, 1), (0, 0), True),
]


@pytest.mark.parametrize("k, m, hw, kernel, strides, dilations, pads, ends, z", CASES)
@pytest.mark.parametrize("acts", [(epilogue.CLIP, epilogue.CLIP), (epilogue.NONE, epilogue.HARD_SWISH),
                                  (epilogue.LEAKY_RELU, epilogue.NONE)])
@pytest.mark.parametrize("group_bytes", [0, 1 << 20])
@pytest.mark.parametrize("lanes", [8, 16])
def test_chain_kernel_gives_the_two_kernels_bits(k, m, hw, kernel, strides, dilations, pads, ends, z, acts,
                                                  group_bytes, lanes):
    """At 16 lanes (NCHW16c, compiled/lanes16) the channel counts double: the same panels and tiles in blocks."""
    k, m, L = k * lanes // 8, m * lanes // 8, lanes  # noqa: N806
    pack_weights = widths.module("nchwc_gemm", lanes).pack_weights
    pack_depthwise = widths.module("nchwc_depthwise", lanes).pack_depthwise
    chain = widths.module("nchwc_chain", lanes)
    channel_offsets = widths.module("nchwc_gemm", lanes).channel_offsets
    n_b, (h, w), (kh, kw), (sh, sw), (dh, dw), (ph, pw) = 2, hw, kernel, strides, dilations, pads
    oh = (h + ph + ends[0] - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pw + ends[1] - (kw - 1) * dw - 1) // sw + 1
    wp = _ro(pack_weights(rand(m, k, seed=1, scale=0.3)))
    b1, b2 = _ro(rand(m, seed=2)), _ro(rand(m, seed=3))
    w2 = _ro(pack_depthwise(rand(m, 1, kh, kw, seed=4)))
    x = _ro(rand(n_b, k // L, h, w, L, seed=5))
    zz = _ro(rand(n_b, m // L, h, w, L, seed=6)) if z else None
    params = {epilogue.CLIP: (F(0), F(6)), epilogue.LEAKY_RELU: (F(0.1), F(0)), epilogue.NONE: (F(0), F(0)),
              epilogue.HARD_SWISH: (F(0), F(0))}
    act1, act2 = (acts[0], *params[acts[0]]), (acts[1], *params[acts[1]])
    geo = (kh, kw, sh, sw, dh, dw, ph, pw)
    offs = channel_offsets(k, h * w)
    ref = np.full((n_b, m // L, oh, ow, L), np.nan, F)
    _reference(wp, x, offs, b1, act1, zz, w2, b2, ref, geo, act2, lanes)
    got = np.full_like(ref, np.nan)
    scr = np.full(chain.scratch_size(m, h, w, group_bytes), np.nan, F)  # never read before written
    chain.pointwise_depthwise_nchwc(wp, x.reshape(-1), offs, b1, *act1, b1 if zz is None else zz.reshape(-1), z,
                                    chain.panel_starts(m), scr, w2, b2, got, h, w, *geo, *act2, group_bytes)
    np.testing.assert_array_equal(got, ref)


def test_scratch_holds_the_widest_group():
    assert scratch_size(40, 3, 5, 0) == 24 * 15  # panels 16 + 24: the 24
    assert scratch_size(64, 2, 2, 1 << 20) == 64 * 4  # every panel in one group
    assert scratch_size(64, 2, 2, 4 * 32 * 4) == 32 * 4  # two panels a group
    assert list(panel_starts(40)) == [0, 16, 40]


# ---- models -------------------------------------------------------------------------------------
def _block(c=16, m=48, hw=(10, 9), stride=1, kernel=3, acts=("Clip", "Clip"), residual=False, batch=2,
           extra_outputs=()):
    """x -> 1x1 Conv (c -> m) [+ residual z] [+ act] -> depthwise Conv (m) [+ act] -> 1x1 Conv (m -> c) -> y."""
    p = kernel // 2
    w = {"W1": rand(m, c, 1, 1, seed=11, scale=0.3), "B1": rand(m, seed=12),
         "Wd": rand(m, 1, kernel, kernel, seed=13, scale=0.5), "Bd": rand(m, seed=14),
         "W3": rand(c, m, 1, 1, seed=15, scale=0.3), "lo": np.float32(0), "hi": np.float32(6)}
    inputs = {"x": (batch, c, *hw)}
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["e"])]
    t = "e"
    if residual:
        inputs["z"] = (batch, m, *hw)
        nodes.append(helper.make_node("Add", ["e", "z"], ["s"]))
        t = "s"

    def act(name, src, dst):
        if name is None:
            return [helper.make_node("Identity", [src], [dst])]
        if name == "Clip":
            return [helper.make_node("Clip", [src, "lo", "hi"], [dst])]
        return [helper.make_node(name, [src], [dst])]

    nodes += act(acts[0], t, "t")
    nodes.append(helper.make_node("Conv", ["t", "Wd", "Bd"], ["d"], group=m, pads=[p] * 4, strides=[stride] * 2))
    nodes += act(acts[1], "d", "a")
    nodes.append(helper.make_node("Conv", ["a", "W3"], ["y"]))
    return make_model(nodes, inputs, ["y"] + list(extra_outputs), w, opset=13), inputs


def _feeds(inputs):
    return {k: rand(*s, seed=20 + i) for i, (k, s) in enumerate(inputs.items())}


def _net(model, optimization=Optimization.MEMORY, disable=()):
    graph, _ = optimize(load_onnx(model), "all", disable=disable)
    return Net(Program(graph), optimization=optimization)


def _run(net, feeds):
    net.forward(feeds)
    return np.array(net.blob_by_name("y"))


@pytest.mark.parametrize("stride, kernel", [(1, 3), (2, 3), (1, 5)])
@pytest.mark.parametrize("acts", [("Clip", "Clip"), ("Relu", None), (None, "HardSigmoid")])
@pytest.mark.parametrize("residual", [False, True])
def test_block_fuses_runs_blocked_and_keeps_the_bits(stride, kernel, acts, residual, monkeypatch):
    model, inputs = _block(stride=stride, kernel=kernel, acts=acts, residual=residual)
    feeds = _feeds(inputs)
    net = _net(model)
    got = _run(net, feeds)
    fused = [n for n in net.layout.run_nodes if n.op_type == "FusedConvDepthwise"]
    assert len(fused) == 1 and all("@NCHW8c" in v for v in (fused[0].inputs[0], fused[0].outputs[0]))
    assert bool(fused[0].inputs[3]) == residual
    ref = run_ort(model, feeds)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    unfused = _net(model, disable=("fuse_pointwise_depthwise",))
    np.testing.assert_array_equal(got, _run(unfused, feeds))  # the two blocked kernels' bits
    assert not any(n.op_type == "FusedConvDepthwise" for n in unfused.layout.run_nodes)
    np.testing.assert_array_equal(got, _run(_net(model, Optimization.NONE), feeds))  # MEMORY as NONE
    monkeypatch.setattr(conv_nchwc, "ENABLED", False)  # the NCHW kernel: the two FusedConv kernels over a scratch T
    plain = _net(model)
    np.testing.assert_array_equal(got, _run(plain, feeds))
    assert [n for n in plain.layout.run_nodes if n.op_type == "FusedConvDepthwise" and "@" not in n.outputs[0]]


def test_fusion_drops_t_from_the_arena_and_stays_at_the_lower_bound():
    model, inputs = _block(c=16, m=96, hw=(24, 24), batch=2)
    feeds = _feeds(inputs)
    fused, unfused = _net(model), _net(model, disable=("fuse_pointwise_depthwise",))
    _run(fused, feeds), _run(unfused, feeds)
    t_bytes = 2 * 96 * 24 * 24 * 4
    assert fused.arena_bytes <= unfused.arena_bytes - t_bytes // 2
    plan = fused.memory_plan
    assert plan.arena_bytes <= plan.lower_bound_bytes + 64 * len(fused.layout.run_nodes)


def test_off_block_channels_keep_two_nodes():
    model, inputs = _block(c=12, m=36)  # no NCHW8c kernel: the pass leaves the pair alone
    net = _net(model)
    got = _run(net, _feeds(inputs))
    assert not any(n.op_type == "FusedConvDepthwise" for n in net.layout.run_nodes)
    ref = run_ort(model, _feeds(inputs))[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_batches_of_one_and_many_agree():
    model, inputs = _block(batch=3)
    feeds = _feeds(inputs)
    whole = _run(_net(model), feeds)
    model1, _ = _block(batch=1)
    for i in range(3):
        one = _run(_net(model1), {"x": feeds["x"][i:i + 1]})
        np.testing.assert_array_equal(one[0], whole[i])
