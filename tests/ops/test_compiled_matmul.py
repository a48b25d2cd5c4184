"""MatMul with a constant 2-D B and MatMulAdd (MatMul + bias) on the compiled path (compiled/matmul.py)
against onnxruntime: row tiles 1..MR and several, K from 1 to 3000, N with tails past 8 and 16 (the
last panel) and several blocks of panels, broadcast batch dims, every bias shape; the numpy path too."""

import numpy as np
import pytest
from onnx import helper, numpy_helper

from pooled_predictor.ir import Node
from pooled_predictor.ops.context import OpContext
from pooled_predictor.ops.cpu import compiled
from pooled_predictor.ops.cpu import matmul as matmul_module
from pooled_predictor.ops.cpu.compiled.gemm import KC, MR
from pooled_predictor.ops.shapes.fused import DOMAIN
from tests.onnx_helpers import assert_close, make_node_model, run_ort, run_ours

rng = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def every_size_compiled(monkeypatch):
    """Small products and single rows take the compiled path too (the thresholds are speed choices only)."""
    monkeypatch.setattr(matmul_module, "COMPILED_MIN_FLOPS", 0)
    monkeypatch.setattr(matmul_module, "COMPILED_MIN_ROWS", 1)


def f32(*shape):
    return (rng.standard_normal(shape) * 3).astype(np.float32)


def _mm_add_model(a, b, c, bias_first=False):
    """MatMul(a, B) + c with B and c initializers: onnxruntime's reference for MatMulAdd."""
    nodes = [helper.make_node("MatMul", ["a", "B"], ["m"]),
             helper.make_node("Add", ["c", "m"] if bias_first else ["m", "c"], ["y"])]
    graph = helper.make_graph(nodes, "mm_add", [helper.make_tensor_value_info("a", 1, a.shape)],
                              [helper.make_empty_tensor_value_info("y")],
                              [numpy_helper.from_array(b, "B"), numpy_helper.from_array(c, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _kernel(op, a, b, c=None):
    """Our kernel class as a Net builds it (B and c static), its output array and a call."""
    inputs = [a, b] + ([] if c is None else [c])
    node = Node(op, [f"in{i}" for i in range(len(inputs))], ["out0"], {}, DOMAIN if c is not None else "", "t")
    ctx = OpContext(node, 1 if c is not None else 13, [x.shape for x in inputs], [x.dtype for x in inputs],
                    [None] + inputs[1:], "cpu", None)
    k = (matmul_module.MatMulAdd if c is not None else matmul_module.MatMul)(ctx)
    shape = np.matmul(np.zeros(a.shape, np.float32), np.zeros(b.shape, np.float32)).shape
    out = np.full(shape, np.nan, np.float32)
    return k, out, (lambda: k(*inputs, out=out))


# rows: every tile height 1..MR (alone and after full tiles); K: 1, odd and even (the k loop
# runs in pairs), past gemm.KC; N: below one panel, on and past panel edges, several blocks of
# panels (PANEL * K' floats per panel, blocks of NB_BYTES), the last panel partial or full
SHAPES = [((1, 3), (3, 5)), ((MR, 1), (1, 16)), ((5, 7), (7, 13)), ((1, 40, 80), (80, 37)),
          ((2, 3, 13, 20), (20, 100)), ((7,), (7, 24)), ((2, 9, KC + 3), (KC + 3, 21)), ((128, 16), (16, 8)),
          ((3, 20), (20, 40)), ((2, 2, 90), (90, 700)), ((4, 3000), (3000, 40))]


@pytest.mark.parametrize("a_shape,b_shape", SHAPES, ids=str)
@pytest.mark.parametrize("enabled", [True, False], ids=["compiled", "numpy"])
def test_matmul_constant_b(a_shape, b_shape, enabled, monkeypatch):
    monkeypatch.setattr(compiled, "ENABLED", enabled)
    a, b = f32(*a_shape), f32(*b_shape)
    k, out, call = _kernel("MatMul", a, b)
    assert (k.fast is not None) == enabled
    model = make_node_model("MatMul", [a, b], opset=13, static=(1,))
    call()
    assert_close(out, run_ort(model, {"in0": a})[0], 1e-5, "MatMul")
    assert_close(run_ours(model, {"in0": a})[0], out, 0.0, "MatMul through a Net")


@pytest.mark.parametrize("a_shape,b_shape", [s for s in SHAPES if len(s[0]) >= 2], ids=str)
@pytest.mark.parametrize("bias", ["N", "1N", "1", "11", "scalar"])
@pytest.mark.parametrize("enabled", [True, False], ids=["compiled", "numpy"])
def test_matmul_add_against_onnxruntime(a_shape, b_shape, bias, enabled, monkeypatch):
    monkeypatch.setattr(compiled, "ENABLED", enabled)
    n = b_shape[1]
    c_shape = {"N": (n,), "1N": (1, n), "1": (1,), "11": (1, 1), "scalar": ()}[bias]
    a, b, c = f32(*a_shape), f32(*b_shape), f32(*c_shape)
    k, out, call = _kernel("MatMulAdd", a, b, c)
    assert (k.fast is not None) == enabled
    call()
    assert_close(out, run_ort(_mm_add_model(a, b, c, bias_first=bias == "1N"), {"a": a})[0], 1e-5, "MatMulAdd")
    model = make_node_model("MatMulAdd", [a, b, c], static=(1, 2), domain=DOMAIN)
    assert_close(run_ours(model, {"in0": a})[0], out, 0.0, "MatMulAdd through a Net")


@pytest.mark.parametrize("a_shape,b_shape", [((1, 40, 80), (80, 37)), ((2, 9, KC + 3), (KC + 3, 21))], ids=str)
def test_bias_row_rounds_as_matmul_then_add(a_shape, b_shape):
    """The bias added in registers after the sum, round(s + c): bit for bit the compiled MatMul then + c."""
    a, b, c = f32(*a_shape), f32(*b_shape), f32(b_shape[1])
    _, y_add, call_add = _kernel("MatMulAdd", a, b, c)
    _, y_mm, call_mm = _kernel("MatMul", a, b)
    call_add()
    call_mm()
    assert np.array_equal(y_add, y_mm + c)


def test_non_contiguous_a_takes_the_numpy_path():
    a_full, b = f32(2, 5, 16), f32(8, 24)
    a = a_full[:, :, ::2]
    k, out, call = _kernel("MatMul", np.ascontiguousarray(a), b)
    k(a, b, out=out)
    assert_close(out, a @ b, 1e-5, "strided A")


def test_batched_b_or_float64_takes_the_numpy_path():
    k, _, _ = _kernel("MatMul", f32(2, 3, 4), f32(2, 4, 5))
    assert k.fast is None
    k, _, _ = _kernel("MatMul", f32(3, 4).astype(np.float64), f32(4, 5).astype(np.float64))
    assert k.fast is None


def _gemm(a, b, c, attrs):
    from pooled_predictor.ops.cpu.gemm import Gemm

    inputs = [a, b] + ([] if c is None else [c])
    node = Node("Gemm", [f"in{i}" for i in range(len(inputs))], ["out0"], dict(attrs), "", "g")
    ctx = OpContext(node, 13, [x.shape for x in inputs], [x.dtype for x in inputs], [None] + inputs[1:], "cpu", None)
    return Gemm(ctx, **attrs)


@pytest.mark.parametrize("m,k,n", [(5, 7, 13), (40, 80, 37), (2, 300, 700)], ids=str)
@pytest.mark.parametrize("c_shape", [None, "N", "1N", "11", "MN", "M1"])
@pytest.mark.parametrize("attrs", [{}, {"transB": 1}, {"beta": 2.0}, {"transA": 1}, {"alpha": 0.5}], ids=str)
def test_gemm_with_weight_b_against_onnxruntime(m, k, n, c_shape, attrs):
    """Gemm (fc_fuse's MatMul + Add) on the compiled product where it means the same: B a weight, no
    transA, alpha 1, C absent or a bias of N with beta 1; every other case on the numpy path."""
    a = f32(k, m) if attrs.get("transA") else f32(m, k)
    b = f32(n, k) if attrs.get("transB") else f32(k, n)
    c = None if c_shape is None else f32(*{"N": (n,), "1N": (1, n), "11": (1, 1), "MN": (m, n), "M1": (m, 1)}[c_shape])
    fast = (not attrs.get("transA") and attrs.get("alpha", 1.0) == 1.0
            and (c is None or (attrs.get("beta", 1.0) == 1.0 and c_shape in ("N", "1N", "11"))))
    assert (_gemm(a, b, c, attrs).fast is not None) == fast
    inputs = [a, b] + ([] if c is None else [c])
    model = make_node_model("Gemm", inputs, attrs, opset=13, static=tuple(range(1, len(inputs))))
    assert_close(run_ours(model, {"in0": a})[0], run_ort(model, {"in0": a})[0], 1e-5, "Gemm")


@pytest.mark.parametrize("a_shape,b_shape,compiled_path", [((1, 64), (64, 64), (True, True)),
                                                            ((64,), (64, 100), (True, True)),
                                                            ((1, 128), (128, 512), (True, True)),
                                                            ((1, 256), (256, 512), (False, True)),
                                                            ((1, 1024), (1024, 4097), (False, False))], ids=str)
@pytest.mark.parametrize("lanes", [8, 16])
def test_one_row_over_a_small_weight_runs_the_compiled_gemv(a_shape, b_shape, compiled_path, lanes, monkeypatch):
    """One row (a Loop body's, an LSTM-free RNN cell's GEMV, a classifier at batch 1) over a weight of at most
    GEMV_COMPILED_MAX_WEIGHT elements (GEMV16_COMPILED_MAX_WEIGHT at 16 lanes) takes the compiled product at the
    default thresholds; a larger weight keeps OpenBLAS's GEMV. Either matches onnxruntime, through a Net (the
    prepared call) too."""
    from pooled_predictor.ops.cpu.compiled import isa

    monkeypatch.setattr(matmul_module, "COMPILED_MIN_FLOPS", 1 << 16)  # the defaults (the fixture lowers them)
    monkeypatch.setattr(matmul_module, "COMPILED_MIN_ROWS", 2)
    a, b = f32(*a_shape), f32(*b_shape)
    with isa.use_lanes(lanes):
        k, out, call = _kernel("MatMul", a, b)
    assert (k.fast is not None) == (compiled_path[lanes == 16] and compiled.ENABLED)
    model = make_node_model("MatMul", [a, b], opset=13, static=(1,))
    call()
    ref = run_ort(model, {"in0": a})[0]
    assert_close(out, ref, 1e-5, "MatMul")
    assert_close(run_ours(model, {"in0": a})[0], ref, 1e-5, "MatMul through a Net")


# rows: every 16-lane tile height 1..MR16 and past it; N: tails below 16, between 16 and 32 (the last panel),
# several panels and blocks; K: 1, odd, even and past one block's worth of the L2 budget
WIDTH_SHAPES = [((1, 3), (3, 5)), ((8, 1), (1, 32)), ((5, 7), (7, 13)), ((9, 20), (20, 33)),
                ((2, 17, 64), (64, 100)), ((23, 301), (301, 47)), ((12, 3000), (3000, 70))]


@pytest.mark.parametrize("a_shape,b_shape", WIDTH_SHAPES, ids=str)
@pytest.mark.parametrize("op", ["MatMul", "MatMulAdd"])
def test_sixteen_lanes_same_bits_as_eight(a_shape, b_shape, op):
    """The 16-lane product (matmul_const16: 8 x 32 tiles of <16 x float>, panels of 32) is built where lanes() is
    16 and gives the 8-lane product's bits (the same multiply-add chain over k, then + c), on every host."""
    from pooled_predictor.ops.cpu.compiled import isa

    a, b = f32(*a_shape), f32(*b_shape)
    c = f32(b_shape[1]) if op == "MatMulAdd" else None
    outs = []
    for lanes in (8, 16):
        with isa.use_lanes(lanes):
            k, out, call = _kernel(op, a, b, c)
        assert k.fast.lanes == lanes
        call()
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])
    assert_close(outs[1], a @ b + (0 if c is None else c), 1e-5, op)


def _activation_kernel(a, b):
    """MatMul with both operands activations (values unknown at build), as a Net builds it."""
    node = Node("MatMul", ["in0", "in1"], ["out0"], {}, "", "t")
    ctx = OpContext(node, 13, [a.shape, b.shape], [a.dtype, b.dtype], [None, None], "cpu", None)
    k = matmul_module.MatMul(ctx)
    out = np.full(np.matmul(a, b).shape, np.nan, np.float32)
    return k, out


# batched and not; N on a panel edge at both widths (64, 128), and 197 (the last panel partial: 13 of 208
# or 27 of 224 columns padded); K odd and even; rows past and below a tile
ACTIVATION_SHAPES = [((2, 3, 37, 64), (2, 3, 64, 197)), ((3, 19, 197), (3, 197, 64)), ((40, 7), (7, 128)),
                     ((1, 4, 9, 30), (1, 4, 30, 96))]


@pytest.mark.parametrize("a_shape,b_shape", ACTIVATION_SHAPES, ids=str)
def test_activation_product_both_widths_against_onnxruntime(a_shape, b_shape):
    """Two activations: compiled/matmul.py's matmul_rows8 / 16 (B read in place) at 8 and 16 lanes, the same bits,
    within 1e-5 of onnxruntime; through a Net the same bits as the kernel."""
    from pooled_predictor.ops.cpu.compiled import isa

    a, b = f32(*a_shape), f32(*b_shape)
    outs = []
    for lanes in (8, 16):
        with isa.use_lanes(lanes):
            k, out = _activation_kernel(a, b)
        assert k.act is not None and k.act.wide == (lanes == 16)
        k(a, b, out=out)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])
    model = make_node_model("MatMul", [a, b], opset=13)
    assert_close(outs[0], run_ort(model, {"in0": a, "in1": b})[0], 1e-5, "MatMul of activations")
    assert_close(run_ours(model, {"in0": a, "in1": b})[0], outs[0], 0.0, "MatMul of activations through a Net")


def test_activation_product_rule():
    """numpy.matmul where the last panel would waste more than 1/ACTIVATION_MAX_PAD of the columns (N = 49: 64
    computed at both widths), where the batch dimensions differ (broadcast), or where A or B is strided."""
    a, b = f32(4, 49, 32), f32(4, 32, 49)
    k, out = _activation_kernel(a, b)
    assert k.act is None
    k(a, b, out=out)
    assert_close(out, a @ b, 1e-5, "N = 49")
    k, _ = _activation_kernel(f32(4, 20, 32), f32(1, 32, 64))
    assert k.act is None
    a, b = f32(4, 20, 32), f32(4, 64, 32)
    k, out = _activation_kernel(a, b.swapaxes(1, 2))
    assert k.act is not None
    k(a, b.swapaxes(1, 2), out=out)  # B a strided view at the call: numpy's path
    assert_close(out, a @ b.swapaxes(1, 2), 1e-5, "strided B")


@pytest.mark.parametrize("rows,k_n,n_n", [(1, 1, 5), (7, 300, 70), (23, 513, 33), (16, 64, 96), (9, 0, 40)], ids=str)
@pytest.mark.parametrize("bias", [False, True], ids=["matmul", "bias"])
@pytest.mark.parametrize("lanes", [8, 16])
def test_k_and_row_blocks_give_the_bits_of_one_pass(rows, k_n, n_n, bias, lanes):
    """matmul_const(16)_kc over any k-block and row-block sizes: each output's chain continues through Y from one
    k-block to the next, so every blocking gives the bits of one pass over K (kc = K, mc = all rows), the bias
    added once after the last block, the last partial panel included; within 1e-5 of numpy. K = 0: Y = c or 0."""
    from pooled_predictor.ops.cpu.compiled import matmul as mm

    rng = np.random.default_rng(rows * 1000 + k_n)
    a = rng.standard_normal((rows, k_n)).astype(np.float32)
    b = rng.standard_normal((k_n, n_n)).astype(np.float32)
    c = rng.standard_normal(n_n).astype(np.float32) if bias else None
    panel, run, ws_n = ((mm.PANEL16, mm.matmul_const16_kc, mm.scratch_size16()) if lanes == 16
                        else (mm.PANEL, mm.matmul_const_kc, mm.scratch_size()))
    xp = mm.pack_right(b, c, panel)

    def product(kc, mc):
        y = np.full((rows, n_n), np.nan, np.float32)
        run(a.reshape(-1), rows, k_n, bias, xp, y.reshape(-1), n_n, np.zeros(ws_n, np.float32), kc, mc)
        return y

    one_pass = product(max(k_n, 1), rows)
    for kc, mc in ((1, 1), (3, 5), (64, 8), (256, 37), (k_n + 7, 2)):
        assert np.array_equal(product(kc, mc), one_pass), (kc, mc)
    assert_close(one_pass, (a.astype(np.float64) @ b + (0 if c is None else c)).astype(np.float32), 1e-5, "blocked")


@pytest.mark.parametrize("lanes", [8, 16])
def test_the_blocked_kernels_give_the_one_pass_bits_past_the_one_pass_size(lanes):
    """matmul_const(16)_blocked (ConstRightProduct's kernels where BLOCKED: Intel hosts) on an A past
    ONE_PASS_BYTES (k-blocks and row blocks) and on a small one (one pass): matmul_const(16)'s bits."""
    from pooled_predictor.ops.cpu.compiled import matmul as mm

    rng = np.random.default_rng(5)
    for rows, k_n, n_n in ((100, 3000, 40), (9, 70, 33)):
        a = rng.standard_normal((rows, k_n)).astype(np.float32)
        b = rng.standard_normal((k_n, n_n)).astype(np.float32)
        c = rng.standard_normal(n_n).astype(np.float32)
        panel, ws_n = (mm.PANEL16, mm.scratch_size16()) if lanes == 16 else (mm.PANEL, mm.scratch_size())
        xp = mm.pack_right(b, c, panel)
        outs = []
        for run in ((mm.matmul_const16, mm.matmul_const16_blocked) if lanes == 16
                    else (mm.matmul_const, mm.matmul_const_blocked)):
            y = np.full((rows, n_n), np.nan, np.float32)
            run(a.reshape(-1), rows, k_n, True, xp, y.reshape(-1), n_n, np.zeros(ws_n, np.float32))
            outs.append(y)
        assert (4 * rows * k_n > mm.ONE_PASS_BYTES) == (rows == 100)
        assert np.array_equal(outs[0], outs[1])


@pytest.mark.parametrize("blocking", ["0", "1", None], ids=["off", "on", "default"])
def test_the_blocking_switch_picks_the_kernels(blocking):
    """POOLED_PREDICTOR_MATMUL_BLOCKING=1|0 picks ConstRightProduct's kernels, read at import (a fresh
    interpreter); unset, they are blocked on Intel CPUs (/proc/cpuinfo's vendor_id) only."""
    import os
    import subprocess
    import sys

    code = ("from pooled_predictor.ops.cpu.compiled import matmul as mm, isa; "
            "print(mm.BLOCKED, isa.vendor() == 'GenuineIntel')")
    env = {k: v for k, v in os.environ.items() if k != "POOLED_PREDICTOR_MATMUL_BLOCKING"}
    if blocking is not None:
        env["POOLED_PREDICTOR_MATMUL_BLOCKING"] = blocking
    blocked, intel = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True, timeout=300).stdout.split()
    assert blocked == {"0": "False", "1": "True", None: intel}[blocking]
