"""RNN, GRU and LSTM against onnxruntime over a grid of their attributes (every schema version)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.onnx_helpers import check_node, feeds_of, make_node_model, run_ort

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@pytest.fixture(params=["compiled", "numpy"])
def loops(request, monkeypatch):
    """Both time loops: the numba one (float32/64) and the numpy reference."""
    from pooled_predictor.ops.cpu import recurrent

    monkeypatch.setattr(recurrent, "USE_COMPILED", request.param == "compiled")
    return request.param
SEQ, BATCH, INPUT, HIDDEN = 5, 3, 4, 6


def _inputs(op, rng, *, direction, layout, bias, seq_lens, initial, peepholes):
    d = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x = rng.standard_normal((BATCH, SEQ, INPUT) if layout else (SEQ, BATCH, INPUT)).astype(np.float32)
    w = (rng.standard_normal((d, g * HIDDEN, INPUT)) * 0.5).astype(np.float32)
    r = (rng.standard_normal((d, g * HIDDEN, HIDDEN)) * 0.5).astype(np.float32)
    b = (rng.standard_normal((d, 2 * g * HIDDEN)) * 0.5).astype(np.float32) if bias else None
    lens = np.array([SEQ, 2, 4][:BATCH], np.int32) if seq_lens else None
    state = (BATCH, d, HIDDEN) if layout else (d, BATCH, HIDDEN)
    h0 = rng.standard_normal(state).astype(np.float32) if initial else None
    inputs = [x, w, r, b, lens, h0]
    if op == "LSTM":
        c0 = rng.standard_normal(state).astype(np.float32) if initial else None
        p = (rng.standard_normal((d, 3 * HIDDEN)) * 0.5).astype(np.float32) if peepholes else None
        inputs += [c0, p]
    while inputs and inputs[-1] is None:
        inputs.pop()
    return inputs


GRID = [
    # direction, layout, bias, seq_lens, initial, peepholes, opset
    ("forward", 0, False, False, False, False, 7),
    ("forward", 0, True, False, True, True, 13),
    ("reverse", 0, True, True, True, False, 14),
    ("bidirectional", 0, True, True, True, True, 14),
    ("bidirectional", 1, True, False, True, True, 22),
    ("reverse", 1, False, True, False, True, 22),
    ("forward", 1, True, True, True, False, 14),
]


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction,layout,bias,seq_lens,initial,peepholes,opset", GRID)
def test_recurrent_grid(op, direction, layout, bias, seq_lens, initial, peepholes, opset, loops):
    rng = np.random.default_rng(hash((op, direction, layout, bias, seq_lens)) % 2**32)
    inputs = _inputs(op, rng, direction=direction, layout=layout, bias=bias, seq_lens=seq_lens,
                     initial=initial, peepholes=peepholes)
    attrs = {"hidden_size": HIDDEN, "direction": direction}
    if layout:
        attrs["layout"] = layout
    outputs = 3 if op == "LSTM" else 2
    reference = _layout0_reference(op, attrs, outputs) if layout else None
    check_node(op, inputs, attrs, opset=opset, outputs=outputs, static=(1, 2, 3, 7), rtol=1e-5,
               reference=reference)


def _layout0_reference(op, attrs, outputs):
    """onnxruntime has no layout=1: run it on the time-major transposes and transpose back."""
    def reference(*inputs):
        x, w, r, *rest = inputs
        rest = list(rest) + [None] * (5 - len(rest))
        b, lens, h0 = rest[0], rest[1], rest[2]
        states = [None if a is None else a.transpose(1, 0, 2) for a in (h0, rest[3])]
        feeds = [x.transpose(1, 0, 2), w, r, b, lens, states[0]]
        if op == "LSTM":
            feeds += [states[1], rest[4]]
        while feeds[-1] is None:
            feeds.pop()
        model = make_node_model(op, feeds, {k: v for k, v in attrs.items() if k != "layout"}, opset=14,
                                outputs=outputs, static=(1, 2, 3, 7))
        y, *hs = run_ort(model, feeds_of(feeds, (1, 2, 3, 7)))
        return [y.transpose(2, 0, 1, 3)] + [h.transpose(1, 0, 2) for h in hs]
    return reference


ACTS = {
    "RNN": [(["Relu"], None, None), (["LeakyRelu"], [0.3], None), (["HardSigmoid"], [0.3], [0.4]),
            (["Softsign"], None, None)],
    "GRU": [(["HardSigmoid", "Tanh"], [0.25], [0.45]), (["Sigmoid", "Elu"], [0.7], None),
            (["Sigmoid", "Softplus"], None, None), (["Sigmoid", "ThresholdedRelu"], [0.1], None)],
    "LSTM": [(["HardSigmoid", "Tanh", "Relu"], [0.3], [0.6]),
             (["Sigmoid", "ScaledTanh", "Affine"], [1.5, 2.0], [0.5, 0.1]),
             (["Sigmoid", "LeakyRelu", "Tanh"], [0.2], None)],
}


@pytest.mark.parametrize("op,acts,alpha,beta", [(op, *a) for op, lst in ACTS.items() for a in lst])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_recurrent_activations_and_clip(op, acts, alpha, beta, direction, loops):
    rng = np.random.default_rng(7)
    inputs = _inputs(op, rng, direction=direction, layout=0, bias=True, seq_lens=False, initial=True,
                     peepholes=False)
    d = 2 if direction == "bidirectional" else 1
    attrs = {"hidden_size": HIDDEN, "direction": direction, "activations": acts * d, "clip": 1.5}
    if alpha:
        attrs["activation_alpha"] = alpha * d
    if beta:
        attrs["activation_beta"] = beta * d
    check_node(op, inputs, attrs, opset=14, outputs=3 if op == "LSTM" else 2, static=(1, 2, 3), rtol=1e-5)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_gru_linear_before_reset(linear_before_reset, direction, loops):
    rng = np.random.default_rng(3)
    inputs = _inputs("GRU", rng, direction=direction, layout=0, bias=True, seq_lens=True, initial=True,
                     peepholes=False)
    attrs = {"hidden_size": HIDDEN, "direction": direction, "linear_before_reset": linear_before_reset}
    check_node("GRU", inputs, attrs, opset=14, outputs=2, static=(1, 2, 3), rtol=1e-5)


def test_lstm_input_forget_and_partial_outputs(loops):
    rng = np.random.default_rng(5)
    inputs = _inputs("LSTM", rng, direction="forward", layout=0, bias=True, seq_lens=False, initial=True,
                     peepholes=True)
    check_node("LSTM", inputs, {"hidden_size": HIDDEN, "input_forget": 1}, opset=14, outputs=3,
               static=(1, 2, 3, 7), rtol=1e-5)
    # Only Y_h requested (Y absent): the kernel must not need Y.
    check_node("LSTM", inputs, {"hidden_size": HIDDEN}, opset=14, outputs=["", "yh"], static=(1, 2, 3, 7))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_recurrent_other_float_types(op, dtype):
    """float64 runs compiled, float16 through the numpy loops (onnxruntime: float32 computed, cast)."""
    rng = np.random.default_rng(11)
    inputs = _inputs(op, rng, direction="bidirectional", layout=0, bias=True, seq_lens=True, initial=True,
                     peepholes=True)
    inputs = [a if a is None or a.dtype == np.int32 else a.astype(dtype) for a in inputs]
    outputs = 3 if op == "LSTM" else 2
    attrs = {"hidden_size": HIDDEN, "direction": "bidirectional"}

    def reference(*ins):
        f32 = [a if a is None or a.dtype == np.int32 else a.astype(np.float32) for a in ins]
        m = make_node_model(op, f32, attrs, opset=14, outputs=outputs, static=(1, 2, 3, 7))
        return [o.astype(dtype) for o in run_ort(m, feeds_of(f32, (1, 2, 3, 7)))]

    check_node(op, inputs, attrs, opset=14, outputs=outputs, static=(1, 2, 3, 7),
               rtol=1e-5 if dtype == np.float64 else 1e-2, reference=reference)


# ---- the compiled path over sizes: panel tails (hidden not a multiple of 16), batch tiles (1 to 4
# rows, 5 to 9 split), both directions, sequence_lens, layouts, against onnxruntime ----

SIZES = [1, 5, 16, 24, 40, 64]
BATCHES = [1, 2, 3, 5, 6, 8, 9]


def _sized_inputs(op, rng, hidden, batch, seq, *, direction, layout, seq_lens, input_size=7):
    d = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    s = 1 / np.sqrt(hidden)
    x = rng.standard_normal((batch, seq, input_size) if layout else (seq, batch, input_size)).astype(np.float32)
    w = rng.uniform(-s, s, (d, g * hidden, input_size)).astype(np.float32)
    r = rng.uniform(-s, s, (d, g * hidden, hidden)).astype(np.float32)
    b = rng.uniform(-s, s, (d, 2 * g * hidden)).astype(np.float32)
    lens = rng.integers(1, seq + 1, batch).astype(np.int32) if seq_lens else None
    if lens is not None:
        lens[0] = seq
    state = (batch, d, hidden) if layout else (d, batch, hidden)
    inputs = [x, w, r, b, lens, rng.standard_normal(state).astype(np.float32)]
    if op == "LSTM":
        inputs.append(rng.standard_normal(state).astype(np.float32))
    return inputs


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("hidden", SIZES)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("seq_lens", [False, True])
def test_recurrent_sizes(op, hidden, direction, seq_lens):
    """Every hidden size of SIZES with each direction; batch, sequence length and layout rotate
    through their values (compiled path: the default activations' fused passes)."""
    k = SIZES.index(hidden) + 3 * ["forward", "reverse", "bidirectional"].index(direction) + int(seq_lens)
    batch, seq, layout = BATCHES[k % len(BATCHES)], (1, 4, 9)[k % 3], k % 2
    rng = np.random.default_rng(k + 100 * hidden)
    inputs = _sized_inputs(op, rng, hidden, batch, seq, direction=direction, layout=layout, seq_lens=seq_lens)
    attrs = {"hidden_size": hidden, "direction": direction}
    if op == "GRU":
        attrs["linear_before_reset"] = k % 2
    outputs = 3 if op == "LSTM" else 2
    if layout:
        attrs["layout"] = 1
    reference = _layout0_reference(op, attrs, outputs) if layout else None
    check_node(op, inputs, attrs, opset=14, outputs=outputs, static=(1, 2, 3), rtol=1e-5, reference=reference)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("batch", [1, 4, 7])
def test_recurrent_weights_as_inputs(op, batch):
    """W, R, B fed per forward (no weight to pack ahead: packed per call, the plain call's path)."""
    rng = np.random.default_rng(batch)
    inputs = _sized_inputs(op, rng, 20, batch, 6, direction="bidirectional", layout=0, seq_lens=True)
    check_node(op, inputs, {"hidden_size": 20, "direction": "bidirectional"}, opset=14,
               outputs=3 if op == "LSTM" else 2, static=(), rtol=1e-5)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_recurrent_prepared_call_same_bits(op, monkeypatch):
    """The bound call (prepare_run) and the plain call give the same bits."""
    from pooled_predictor.engine import layout as layout_module
    from tests.onnx_helpers import run_ours

    rng = np.random.default_rng(9)
    inputs = _sized_inputs(op, rng, 33, 5, 7, direction="bidirectional", layout=1, seq_lens=True)
    attrs = {"hidden_size": 33, "direction": "bidirectional", "layout": 1}
    model = make_node_model(op, inputs, attrs, opset=14, outputs=3 if op == "LSTM" else 2, static=(1, 2, 3))
    feeds = feeds_of(inputs, (1, 2, 3))
    bound = run_ours(model, feeds)
    monkeypatch.setattr(layout_module, "PREPARE_CALLS", False)
    plain = run_ours(model, feeds)
    for a, b in zip(bound, plain):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("lens", [[3, 5], [0, 5], [5, 0]])
def test_recurrent_sequence_lens_bounds(lens, loops):
    """Lengths outside [0, seq] are an error naming the node; a length of 0 leaves Y zero and the
    state as given (onnxruntime's values)."""
    from pooled_predictor.errors import KernelError
    from tests.onnx_helpers import run_ours

    rng = np.random.default_rng(4)
    inputs = _sized_inputs("LSTM", rng, 8, 2, 5, direction="bidirectional", layout=0, seq_lens=False)
    inputs[4] = np.array(lens, np.int32)
    check_node("LSTM", inputs, {"hidden_size": 8, "direction": "bidirectional"}, opset=14, outputs=3,
               static=(1, 2, 3), rtol=1e-5)
    inputs[4] = np.array([6, 2], np.int32)
    model = make_node_model("LSTM", inputs, {"hidden_size": 8, "direction": "bidirectional"}, opset=14, outputs=3,
                            static=(1, 2, 3))
    with pytest.raises(KernelError, match="sequence_lens"):
        run_ours(model, feeds_of(inputs, (1, 2, 3)))
