"""Shape rules of RNN, GRU and LSTM (ONNX spec: outputs Y, Y_h and, for LSTM, Y_c).

layout 0: X [seq, batch, input] -> Y [seq, D, batch, H], Y_h/Y_c [D, batch, H];
layout 1: X [batch, seq, input] -> Y [batch, seq, D, H], Y_h/Y_c [batch, D, H];
D = 2 when direction is bidirectional, else 1; H = hidden_size (else R's last dim).
"""

from __future__ import annotations

from . import shape_rule

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@shape_rule("RNN", "GRU", "LSTM")
def _recurrent(ctx):
    x, w, r = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if len(x) != 3 or len(w) != 3 or len(r) != 3:
        raise ctx.error(f"X, W, R must be 3-D, got {x}, {w}, {r}")
    layout = int(ctx.attr("layout", 0))
    d = 2 if ctx.attr("direction", "forward") == "bidirectional" else 1
    h = ctx.attr("hidden_size")
    h = int(h) if h is not None else r[2]
    gates = _GATES[ctx.node.op_type]
    if w[0] != d or w[1] != gates * h or w[2] != x[2] or r[0] != d or r[1] != gates * h or r[2] != h:
        raise ctx.error(f"W {w} / R {r} do not fit X {x} with {d} direction(s), hidden_size {h}")
    seq, batch = (x[1], x[0]) if layout else (x[0], x[1])
    y = (batch, seq, d, h) if layout else (seq, d, batch, h)
    state = (batch, d, h) if layout else (d, batch, h)
    t = ctx.dtype(0)
    return [(y, t), (state, t), (state, t)][:ctx.num_outputs]
