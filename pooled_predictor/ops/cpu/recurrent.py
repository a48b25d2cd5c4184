"""RNN, GRU and LSTM CPU kernels (ONNX spec: RNN, GRU, LSTM; versions 7, 14, 22).

Every attribute of the spec: direction (forward, reverse, bidirectional),
activations with activation_alpha / activation_beta, clip, hidden_size,
layout (0: time-major X [seq, batch, input]; 1: batch-major [batch, seq,
input], from version 14), sequence_lens, initial_h / initial_c, peepholes P
(LSTM), input_forget (LSTM), linear_before_reset (GRU).

Two paths, chosen when the kernel is built:

* compiled (float32; compiled/recurrent.py): the whole node is one numba call
  -- the input projection X W^T for all time steps and both directions in one
  packed-panel GEMM, then per direction the time loop: per step one GEMM of
  `batch` rows H_{t-1} R^T and the gates in vectorized passes, sequence
  lengths and layouts read in the loop. W^T and R^T are packed once per weight
  and shared by every Net (conv_shared.shared_weights); the projection and the
  states live in per-Net workspace (ctx.scratch); prepare_run binds the call to
  the Net's arrays once per shape, so a forward costs one call. Weights fed as
  graph inputs are packed per call. Issue 34's 2-layer bidirectional LSTM
  (hidden 128, 32 steps, batch 2) went from 13 ms to about 1 ms, onnxruntime's
  1.2-1.6 (benchmarks/recurrent.py, one thread).
* numpy (float16, float64, or compiled kernels off: compiled.active() False,
  USE_COMPILED; recurrent_cell.py): the projection through
  np.matmul, the time loop per step in numpy; the reference the compiled path
  is tested against (tests/ops/test_recurrent.py runs both against
  onnxruntime). Weights are read through views (W.T, R.T); the projection bias
  and the time indices are computed once per reshape.

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
from . import compiled
from .conv_shared import shared_weights
from .recurrent_cell import ACTIVATIONS, gru_steps, lstm_steps, rnn_steps

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
# float32 runs compiled (compiled/recurrent.py: the whole node in one call); other types, and
# tests of the compiled loops, use the numpy loops of recurrent_cell.py.
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
    """What the three ops share: attributes, layouts, the compiled call, the numpy path's projection."""

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
        self.compiled = USE_COMPILED and compiled.active() and self.dtype == np.float32
        if self.compiled:
            op = self.op
            self.wp = shared_weights(ctx.value(1), "recurrent_w", compiled.recurrent.pack_weights) if ctx.is_static(1) else None
            self.rp = (shared_weights(ctx.value(2), ("recurrent_r", op), lambda r: compiled.recurrent.pack_recurrent(r, op))
                       if ctx.is_static(2) else None)
            self.xw = ctx.scratch((seq * batch * self.num_dir * self.gh,), np.float32)
            self.work = ctx.scratch((compiled.recurrent.work_size(op, batch, self.hidden, self.num_dir),), np.float32)
            self.act_rows = compiled.recurrent.act_table(self.acts)
            self.loop = {"RNN": compiled.recurrent.rnn, "GRU": compiled.recurrent.gru, "LSTM": compiled.recurrent.lstm}[op]
            return
        # one spare column: every direction's slice of the projection is then strided alike
        self.xw = ctx.scratch((seq * batch, self.num_dir * self.gh + 1), self.dtype)
        self.work = ctx.scratch((batch * (2 * self.gh + 3 * self.hidden),), self.dtype)

    # ---- the compiled path: one call of compiled/recurrent.py per forward ----

    def loop_args(self, x, w, r, b, seq_lens, h0, outs, extra, *, bind):
        """The compiled loop's arguments for these arrays (outputs: Y, Y_h (, Y_c) or None each;
        extra: the op's own trailing arguments), or None with bind where an array is not a
        C-contiguous one of the loop's type (the plain call converts it instead)."""
        wp = self.wp if self.wp is not None else (None if bind else compiled.recurrent.pack_weights(w))
        rp = self.rp if self.rp is not None else (None if bind else compiled.recurrent.pack_recurrent(r, self.op))
        if wp is None or rp is None:
            return None
        ins = [_flat(a, dt, bind) for a, dt in ((x, np.float32), (b, np.float32), (seq_lens, np.int32),
                                                (h0, np.float32))]
        outs = [_NO_OUTPUT if o is None else (o.reshape(-1) if o.flags.c_contiguous else None) for o in outs]
        if any(a is None for a in ins + outs):
            return None
        x, b, lens, h0 = ins
        return (x, wp, rp, b, lens, h0, *outs[:2], self.xw.array, self.work.array, self.act_rows, self.seq,
                self.batch, self.input_size, self.hidden, self.num_dir, self.layout, self.reverse,
                np.float32(self.clip), *extra(outs))

    def run_compiled(self, inputs, out, extra):
        """The plain call: loop_args with copies where needed (outputs not C-contiguous: through temporaries)."""
        fixed = [o if o is None or o.flags.c_contiguous else np.empty(o.shape, o.dtype) for o in out]
        self.loop(*self.loop_args(*inputs, fixed, extra, bind=False))
        for o, f in zip(out, fixed):
            if o is not None and f is not o:
                o[...] = f

    def prepare_compiled(self, inputs, out, extra):
        """prepare_run: the compiled loop bound to these arrays (compiled.bound), or None."""
        if not self.compiled:
            return None
        args = self.loop_args(*inputs, out, extra, bind=True)
        return None if args is None else compiled.bound(self.loop, *args)

    # ---- the numpy path (float16, float64; the tested reference of the compiled loops) ----

    def numpy_work(self):
        return self.work.array.reshape(self.batch, -1)

    def prepare(self, ctx, rb_mask):
        """Once per reshape: the projection bias when B is a weight, the time indices without sequence_lens."""
        self.rb_mask = rb_mask
        if self.compiled:
            return
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
            return lens, np.broadcast_to(steps, (self.seq, self.batch))
        return lens, np.where(steps < lens[None, :], lens[None, :] - 1 - steps, steps)


_EMPTY = np.empty(0, np.float32)
_EMPTY.flags.writeable = False
_NO_OUTPUT = np.empty(0, np.float32)  # an absent output: writable, as the loops' outputs are typed
_EMPTY_LENS = np.empty(0, np.int32)
_EMPTY_LENS.flags.writeable = False


def _flat(a, dtype, bind):
    """a flattened for the compiled loop (an empty array for an absent input); with bind, None where
    that would need a copy (the array's values change per forward), else a copy where needed."""
    if a is None:
        return _EMPTY_LENS if dtype == np.int32 else _EMPTY
    if a.dtype == dtype and a.flags.c_contiguous:
        return a.reshape(-1)
    return None if bind else np.ascontiguousarray(a, dtype).reshape(-1)


@kernel("RNN", since=(7, 14, 22), check=_check("RNN"))
class RNN(_Recurrent):
    """H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb) (ONNX RNN). Inputs X, W, R, B, sequence_lens, initial_h."""

    op = "RNN"

    def __init__(self, ctx, *, activation_alpha=None, activation_beta=None, activations=None, clip=None,
                 direction="forward", hidden_size=None, layout=0):
        self.setup(ctx, activations, activation_alpha, activation_beta, clip, direction, hidden_size, layout)
        self.prepare(ctx, np.ones(self.gh, bool))

    def __call__(self, x, w, r, b=None, seq_lens=None, h0=None, *, out):
        if self.compiled:
            return self.run_compiled((x, w, r, b, seq_lens, h0), out, _no_extra)
        xw = self.project(x, w, b)
        y, (yh,) = self.views(out)
        h0 = self.initial(h0)
        self.start(y, seq_lens)
        for d in range(self.num_dir):
            lens, tidx = self.time_index(seq_lens, d)
            xw_d = xw[:, :, d * self.gh:(d + 1) * self.gh]
            rnn_steps(xw_d, r[d], h0[d], lens, tidx, None if y is None else y[:, d],
                      None if yh is None else yh[d], self.numpy_work(), self.acts[d], self.clip)

    def prepare_run(self, x, w, r, b=None, seq_lens=None, h0=None, *, out):
        return self.prepare_compiled((x, w, r, b, seq_lens, h0), out, _no_extra)


def _no_extra(outs):
    return ()


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

    def extra(self, outs):
        return (self.linear_before_reset,)

    def __call__(self, x, w, r, b=None, seq_lens=None, h0=None, *, out):
        if self.compiled:
            return self.run_compiled((x, w, r, b, seq_lens, h0), out, self.extra)
        hid = self.hidden
        xw = self.project(x, w, b)
        y, (yh,) = self.views(out)
        h0 = self.initial(h0)
        self.start(y, seq_lens)
        for d in range(self.num_dir):
            rbh = np.zeros(hid, self.dtype) if b is None else b[d, self.gh + 2 * hid:].astype(self.dtype)
            lens, tidx = self.time_index(seq_lens, d)
            xw_d = xw[:, :, d * self.gh:(d + 1) * self.gh]
            gru_steps(xw_d, r[d], rbh, h0[d], lens, tidx, None if y is None else y[:, d],
                      None if yh is None else yh[d], self.numpy_work(), self.acts[d], self.clip,
                      self.linear_before_reset)

    def prepare_run(self, x, w, r, b=None, seq_lens=None, h0=None, *, out):
        return self.prepare_compiled((x, w, r, b, seq_lens, h0), out, self.extra)


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

    def extras(self, c0, p, bind):
        """(c0, p, yc, input_forget)'s builder for loop_args, or None where c0 / p need a copy under bind."""
        c0, p = _flat(c0, np.float32, bind), _flat(p, np.float32, bind)
        if c0 is None or p is None:
            return None
        return lambda outs: (c0, p, outs[2], self.input_forget)

    def __call__(self, x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None, *, out):
        if self.compiled:
            return self.run_compiled((x, w, r, b, seq_lens, h0), out, self.extras(c0, p, False))
        xw = self.project(x, w, b)
        y, (yh, yc) = self.views(out)
        h0, c0 = self.initial(h0), self.initial(c0)
        self.start(y, seq_lens)
        for d in range(self.num_dir):
            peep = None if p is None else p[d].astype(self.dtype)
            lens, tidx = self.time_index(seq_lens, d)
            xw_d = xw[:, :, d * self.gh:(d + 1) * self.gh]
            lstm_steps(xw_d, r[d], peep, h0[d], c0[d], lens, tidx, None if y is None else y[:, d],
                       None if yh is None else yh[d], None if yc is None else yc[d], self.numpy_work(),
                       self.acts[d], self.clip, self.input_forget)

    def prepare_run(self, x, w, r, b=None, seq_lens=None, h0=None, c0=None, p=None, *, out):
        extra = self.extras(c0, p, True) if self.compiled else None
        return None if extra is None else self.prepare_compiled((x, w, r, b, seq_lens, h0), out, extra)
