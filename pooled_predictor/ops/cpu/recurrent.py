"""RNN, GRU and LSTM CPU kernels (ONNX spec: RNN, GRU, LSTM; versions 7, 14, 22).

Every attribute of the spec: direction (forward, reverse, bidirectional),
activations with activation_alpha / activation_beta, clip, hidden_size,
layout (0: time-major X [seq, batch, input]; 1: batch-major [batch, seq,
input], from version 14), sequence_lens, initial_h / initial_c, peepholes P
(LSTM), input_forget (LSTM), linear_before_reset (GRU).

The input projection X W^T + Wb (+ Rb where it commutes with the recurrence)
is one GEMM for all time steps and both directions, before the time loop,
into workspace planned by the Net (ctx.scratch); the time loop then does one
small GEMM per step (H_{t-1} R^T) and the gate arithmetic in place in
per-Net workspace: compiled with numba for float32/float64
(compiled/recurrent.py), in numpy otherwise (recurrent_cell.py, also the
reference the compiled loops are tested against). Weights are read through
views (W.T, R.T): nothing is copied per thread; the projection bias and the
time indices are computed once per reshape.

Shapes (D = 2 if bidirectional else 1, H = hidden_size, G = gates: 1 RNN,
3 GRU, 4 LSTM): W [D, G*H, input], R [D, G*H, H], B [D, 2*G*H],
sequence_lens [batch] int32, initial_h/initial_c [D, batch, H] (layout 1:
[batch, D, H]), P [D, 3*H]; Y [seq, D, batch, H] (layout 1: [batch, seq, D, H]),
Y_h/Y_c as initial_h.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from ..registry import kernel
from .compiled import recurrent as recurrent_loops
from .recurrent_cell import ACTIVATIONS, gru_steps, lstm_steps, rnn_steps

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
# float32/float64 time loops run compiled (compiled/recurrent.py); others, and tests of the
# compiled loops, use the numpy loops of recurrent_cell.py.
USE_COMPILED = True
_DEFAULT_ACTS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
_DIRECTIONS = ("forward", "reverse", "bidirectional")


def _check(op):
    def check(attrs, version):
        direction = attrs.get("direction", "forward")
        if direction not in _DIRECTIONS:
            return f"direction {direction!r} is not one of {_DIRECTIONS}"
        for a in attrs.get("activations") or ():
            if a.lower() not in ACTIVATIONS:
                return f"activation {a!r} is not one of the spec's {sorted(ACTIVATIONS)}"
        return None
    return check


def parse_activations(op, activations, alphas, betas, num_directions):
    """[(code, alpha, beta)] per activation, per direction: alphas/betas are consumed in order
    by the activations that take them (the spec's defaults otherwise)."""
    names = list(activations) if activations else list(_DEFAULT_ACTS[op]) * num_directions
    per = len(_DEFAULT_ACTS[op])
    if len(names) == per and num_directions == 2:
        names = names * 2
    if len(names) != per * num_directions:
        raise UnsupportedOpError(f"{op}: {len(names)} activations given, {per * num_directions} expected")
    alphas, betas = list(alphas or ()), list(betas or ())
    out = []
    for name in names:
        code, takes_alpha, takes_beta, a0, b0 = ACTIVATIONS[name.lower()]
        a = alphas.pop(0) if takes_alpha and alphas else a0
        b = betas.pop(0) if takes_beta and betas else b0
        out.append((code, float(a), float(b)))
    return [out[d * per:(d + 1) * per] for d in range(num_directions)]


class _Recurrent:
    """What the three ops share: projection, layouts, sequence lengths, directions."""

    op = ""

    def setup(self, ctx, activations, activation_alpha, activation_beta, clip, direction, hidden_size,
              layout):
        self.layout = int(layout)
        self.num_dir = 2 if direction == "bidirectional" else 1
        self.reverse = direction == "reverse"
        x_shape, w_shape = ctx.shape(0), ctx.shape(1)
        seq, batch = (x_shape[1], x_shape[0]) if self.layout else (x_shape[0], x_shape[1])
        self.seq, self.batch, self.input_size = seq, batch, x_shape[2]
        self.hidden = int(hidden_size) if hidden_size is not None else w_shape[1] // _GATES[self.op]
        self.gh = _GATES[self.op] * self.hidden
        self.dtype = np.dtype(ctx.dtype(0))
        self.clip = -1.0 if clip is None else float(clip)
        self.acts = parse_activations(self.op, activations, activation_alpha, activation_beta, self.num_dir)
        # one spare column: every direction's slice of the projection is then strided alike, so
        # the compiled loops see one array layout (fewer numba specializations to compile)
        self.xw = ctx.scratch((seq * batch, self.num_dir * self.gh + 1), self.dtype)
        self.work = ctx.scratch((batch * (2 * self.gh + 3 * self.hidden),), self.dtype)
        self.compiled = USE_COMPILED and self.dtype in (np.float32, np.float64)
        if self.compiled:
            self.loops = recurrent_loops
            self.act_tables = [recurrent_loops.act_table(a) for a in self.acts]

    def buffers(self, *widths):
        """Contiguous [batch, width] pieces of the workspace (the compiled loops' g, h, c, ...)."""
        flat, at, out = self.work.array, 0, []
        for w in widths:
            out.append(flat[at:at + self.batch * w].reshape(self.batch, w))
            at += self.batch * w
        return out

    def numpy_work(self):
        return self.work.array.reshape(self.batch, -1)

    def y_arg(self, y, d):
        """(Y view of direction d, write it?) for the compiled loops; zeroed where sequences end early."""
        if y is None:
            return np.empty((0, 0, 0), self.dtype), False
        return y[:, d], True

    def prepare(self, ctx, rb_mask):
        """Once per reshape: the projection bias when B is a weight, the time indices without sequence_lens."""
        self.rb_mask = rb_mask
        self.bias = self.fold_bias(ctx.value(3)) if ctx.is_static(3) else None
        self.indices = [self.time_index(None, d) for d in range(self.num_dir)]

    def fold_bias(self, b):
        """Wb + Rb where Rb commutes with the recurrence (rb_mask), flattened over directions."""
        return (b[:, :self.gh] + np.where(self.rb_mask, b[:, self.gh:], 0)).reshape(-1).astype(self.dtype)

    def project(self, x, w, b):
        """XW[t, b, d*GH + g] = X[t, b] . W[d, g] + Wb[d, g] (+ Rb[d, g] where rb_mask): one GEMM.

        Returns a [seq, batch, D*GH] view (time-major whatever the layout)."""
        xw = self.xw.array[:, :-1]
        np.matmul(x.reshape(-1, self.input_size), w.reshape(-1, self.input_size).T, out=xw)
        if b is not None:
            xw += self.bias if self.bias is not None else self.fold_bias(b)
        if self.layout:
            return xw.reshape(self.batch, self.seq, -1).transpose(1, 0, 2)
        return xw.reshape(self.seq, self.batch, -1)  # a view: rows keep their spare column

    def views(self, out):
        """Y as [seq, D, batch, H] and Y_h (Y_c) as [D, batch, H], whatever the layout."""
        y = out[0]
        if y is not None and self.layout:
            y = y.transpose(1, 2, 0, 3)
        states = [o.transpose(1, 0, 2) if (o is not None and self.layout) else o for o in out[1:]]
        return y, states

    def initial(self, h0):
        if h0 is None:
            return np.zeros((self.num_dir, self.batch, self.hidden), self.dtype)
        return h0.transpose(1, 0, 2) if self.layout else h0

    def start(self, y, seq_lens):
        """Zero Y when some sequence ends before seq (its tail stays zero)."""
        if y is not None and seq_lens is not None and (np.asarray(seq_lens) < self.seq).any():
            y[...] = 0

    def time_index(self, seq_lens, d):
        """lens [batch] (int64) and, per step s and batch row, the time index, for direction d."""
        if seq_lens is None and getattr(self, "indices", None):
            return self.indices[d]
        backward = self.reverse or d == 1
        steps = np.arange(self.seq, dtype=np.int64)[:, None]
        if seq_lens is None:
            lens = np.full(self.batch, self.seq, np.int64)
        else:
            lens = np.asarray(seq_lens, dtype=np.int64).reshape(self.batch)
            if lens.min(initial=0) < 0 or lens.max(initial=0) > self.seq:
                raise ValueError(f"sequence_lens {lens.tolist()} outside [0, {self.seq}]")
        if not backward:
            return lens, np.broadcast_to(steps, (self.seq, self.batch)).copy()  # writeable: one numba type
        return lens, np.where(steps < lens[None, :], lens[None, :] - 1 - steps, steps)


_COMMON = dict(activation_alpha=None, activation_beta=None, activations=None, clip=None,
               direction="forward", hidden_size=None, layout=0)


@kernel("RNN", since=(7, 14, 22), check=_check("RNN"))
class RNN(_Recurrent):
    """H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb) (ONNX RNN). Inputs X, W, R, B, sequence_lens, initial_h."""

    op = "RNN"

    def __init__(self, ctx, *, activation_alpha=None, activation_beta=None, activations=None, clip=None,
                 direction="forward", hidden_size=None, layout=0):
        self.setup(ctx, activations, activation_alpha, activation_beta, clip, direction, hidden_size, layout)
        self.prepare(ctx, np.ones(self.gh, bool))

    def __call__(self, x, w, r, b=None, seq_lens=None, h0=None, *, out):
        xw = self.project(x, w, b)
        y, (yh,) = self.views(out)
        h0 = self.initial(h0)
        self.start(y, seq_lens)
        for d in range(self.num_dir):
            lens, tidx = self.time_index(seq_lens, d)
            xw_d = xw[:, :, d * self.gh:(d + 1) * self.gh]
            if self.compiled:
                g, h = self.buffers(self.gh, self.hidden)
                h[...] = h0[d]
                self.loops.rnn_loop(xw_d, r[d].T, lens, tidx, h, g, *self.y_arg(y, d), self.act_tables[d],
                                    self.clip)
                if yh is not None:
                    yh[d] = h
                continue
            rnn_steps(xw_d, r[d], h0[d], lens, tidx, None if y is None else y[:, d],
                      None if yh is None else yh[d], self.numpy_work(), self.acts[d], self.clip)


@kernel("GRU", since=(7, 14, 22), check=_check("GRU"))
class GRU(_Recurrent):
    """GRU (ONNX GRU, gates z, r, h). Inputs X, W, R, B, sequence_lens, initial_h.

    z = f(X Wz + H Rz + Wbz + Rbz); r = f(X Wr + H Rr + Wbr + Rbr);
    h~ = g(X Wh + (r * H) Rh + Rbh + Wbh), or with linear_before_reset
    h~ = g(X Wh + r * (H Rh + Rbh) + Wbh); H' = (1 - z) * h~ + z * H.
    """

    op = "GRU"

    def __init__(self, ctx, *, activation_alpha=None, activation_beta=None, activations=None, clip=None,
                 direction="forward", hidden_size=None, layout=0, linear_before_reset=0):
        self.setup(ctx, activations, activation_alpha, activation_beta, clip, direction, hidden_size, layout)
        self.linear_before_reset = bool(linear_before_reset)
        self.prepare(ctx, np.arange(self.gh) < 2 * self.hidden)  # Rbh stays inside the reset product

    def __call__(self, x, w, r, b=None, seq_lens=None, h0=None, *, out):
        hid = self.hidden
        xw = self.project(x, w, b)
        y, (yh,) = self.views(out)
        h0 = self.initial(h0)
        self.start(y, seq_lens)
        for d in range(self.num_dir):
            rbh = np.zeros(hid, self.dtype) if b is None else b[d, self.gh + 2 * hid:].astype(self.dtype)
            lens, tidx = self.time_index(seq_lens, d)
            xw_d = xw[:, :, d * self.gh:(d + 1) * self.gh]
            if self.compiled:
                g, h, gh, rh = self.buffers(2 * hid, hid, hid, hid)
                h[...] = h0[d]
                self.loops.gru_loop(xw_d, r[d, :2 * hid].T, r[d, 2 * hid:].T, rbh, lens, tidx, h, g, gh, rh,
                                    *self.y_arg(y, d), self.act_tables[d], self.clip, self.linear_before_reset)
                if yh is not None:
                    yh[d] = h
                continue
            gru_steps(xw_d, r[d], rbh, h0[d], lens, tidx, None if y is None else y[:, d],
                      None if yh is None else yh[d], self.numpy_work(), self.acts[d], self.clip,
                      self.linear_before_reset)


@kernel("LSTM", since=(7, 14, 22), check=_check("LSTM"))
class LSTM(_Recurrent):
    """LSTM (ONNX LSTM, gates i, o, f, c; peepholes P = [Pi, Po, Pf]).

    i = f(X Wi + H Ri + Pi * C + Wbi + Rbi); f = f(X Wf + H Rf + Pf * C + Wbf + Rbf)
    (f = 1 - i with input_forget); c~ = g(X Wc + H Rc + Wbc + Rbc);
    C' = f * C + i * c~; o = f(X Wo + H Ro + Po * C' + Wbo + Rbo); H' = o * h(C').
    Inputs X, W, R, B, sequence_lens, initial_h, initial_c, P. Outputs Y, Y_h, Y_c.
    """

    op = "LSTM"

    def __init__(self, ctx, *, activation_alpha=None, activation_beta=None, activations=None, clip=None,
                 direction="forward", hidden_size=None, layout=0, input_forget=0):
        self.setup(ctx, activations, activation_alpha, activation_beta, clip, direction, hidden_size, layout)
        self.input_forget = bool(input_forget)
        self.prepare(ctx, np.ones(self.gh, bool))

    def __call__(self, x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None, *, out):
        xw = self.project(x, w, b)
        y, (yh, yc) = self.views(out)
        h0, c0 = self.initial(h0), self.initial(c0)
        self.start(y, seq_lens)
        for d in range(self.num_dir):
            peep = None if p is None else p[d].astype(self.dtype)
            lens, tidx = self.time_index(seq_lens, d)
            xw_d = xw[:, :, d * self.gh:(d + 1) * self.gh]
            if self.compiled:
                g, h, c = self.buffers(self.gh, self.hidden, self.hidden)
                h[...], c[...] = h0[d], c0[d]
                self.loops.lstm_loop(xw_d, r[d].T, np.zeros(0, self.dtype) if peep is None else peep,
                                     peep is not None, lens, tidx, h, c, g, *self.y_arg(y, d),
                                     self.act_tables[d], self.clip, self.input_forget)
                if yh is not None:
                    yh[d] = h
                if yc is not None:
                    yc[d] = c
                continue
            lstm_steps(xw_d, r[d], peep, h0[d], c0[d], lens, tidx, None if y is None else y[:, d],
                       None if yh is None else yh[d], None if yc is None else yc[d], self.numpy_work(),
                       self.acts[d], self.clip, self.input_forget)
