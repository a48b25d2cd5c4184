"""Time loops of RNN, GRU and LSTM over a precomputed input projection (ONNX spec equations).

Each function runs one direction: at step s every batch row b reads the
projection at time tidx[s, b] (s itself forward; lens[b] - 1 - s backward,
so a reverse pass over a shorter sequence starts at its own last element),
rows with s >= lens[b] keep their state and write no output (Y is zero
there; Y_h and Y_c are zero for a row of length 0, as onnxruntime's). Gate
pre-activations are clipped to [-clip, clip] when clip >= 0.
All arithmetic is in place in `work` [batch, 2*G*H + 3*H] (per-Net workspace):
one GEMM H R^T per step (BLAS through numpy), then element-wise ops.

ACTIVATIONS: name (lower case) -> (code, takes alpha, takes beta, default
alpha, default beta), the spec's list with the defaults of the
corresponding ONNX operators.
"""

from __future__ import annotations

import numpy as np
from ._special import special

ACTIVATIONS = {
    "relu": (0, False, False, 0.0, 0.0),
    "tanh": (1, False, False, 0.0, 0.0),
    "sigmoid": (2, False, False, 0.0, 0.0),
    "affine": (3, True, True, 1.0, 0.0),
    "leakyrelu": (4, True, False, 0.01, 0.0),
    "thresholdedrelu": (5, True, False, 1.0, 0.0),
    "scaledtanh": (6, True, True, 1.0, 1.0),
    "hardsigmoid": (7, True, True, 0.2, 0.5),
    "elu": (8, True, False, 1.0, 0.0),
    "softsign": (9, False, False, 0.0, 0.0),
    "softplus": (10, False, False, 0.0, 0.0),
}


def activate(x: np.ndarray, act) -> None:
    """Apply one activation (code, alpha, beta) to x in place."""
    code, alpha, beta = act
    if code == 0:
        np.maximum(x, 0, out=x)
    elif code == 1:
        np.tanh(x, out=x)
    elif code == 2:  # 1 / (1 + exp(-x)), without overflow for large |x|
        special.expit(x, out=x)
    elif code == 3:
        x *= alpha
        x += beta
    elif code == 4:
        np.multiply(x, np.where(x < 0, alpha, 1).astype(x.dtype), out=x)
    elif code == 5:
        x[x <= alpha] = 0
    elif code == 6:
        x *= beta
        np.tanh(x, out=x)
        x *= alpha
    elif code == 7:
        x *= alpha
        x += beta
        np.clip(x, 0, 1, out=x)
    elif code == 8:
        neg = x < 0
        x[neg] = alpha * np.expm1(x[neg])
    elif code == 9:
        np.divide(x, 1 + np.abs(x), out=x)
    elif code == 10:
        np.logaddexp(x, 0, out=x)


def _clip(x, clip):
    if clip >= 0:
        np.clip(x, -clip, clip, out=x)


class _Steps:
    """Per-direction bookkeeping shared by the three cells."""

    def __init__(self, xw, lens, tidx, y, work, gh, hidden):
        self.seq, self.batch = xw.shape[0], xw.shape[1]
        self.rows = np.arange(self.batch)
        self.full = bool((lens == self.seq).all())
        self.xw, self.lens, self.tidx, self.y = xw, lens, tidx, y
        self.g = work[:, :gh]
        self.g2 = work[:, gh:2 * gh]
        self.h = work[:, 2 * gh:2 * gh + hidden]
        self.c = work[:, 2 * gh + hidden:2 * gh + 2 * hidden]
        self.tmp = work[:, 2 * gh + 2 * hidden:2 * gh + 3 * hidden]

    def x_at(self, s):
        t = self.tidx[s]
        if self.full and (t == t[0]).all():
            return self.xw[t[0]]
        return self.xw[t, self.rows]

    def final(self, out, state):
        """Y_h / Y_c = the final state, zero for a row of length 0 (as onnxruntime); out may be None."""
        if out is not None:
            out[...] = state
            out[self.lens == 0] = 0

    def commit(self, s, new_h, state, new_state):
        """Store step s: state rows still inside their sequence take the new values; write Y."""
        if self.full:
            if state is not None:
                state[...] = new_state
            if new_h is not self.h:
                self.h[...] = new_h
            active = None
        else:
            active = s < self.lens
            if state is not None:
                np.copyto(state, new_state, where=active[:, None])
            np.copyto(self.h, new_h, where=active[:, None])
        if self.y is not None:
            t = self.tidx[s]
            if active is None:
                self.y[t, self.rows] = self.h
            else:
                self.y[t[active], self.rows[active]] = self.h[active]


def rnn_steps(xw, r, h0, lens, tidx, y, yh, work, acts, clip):
    hidden = r.shape[1]
    st = _Steps(xw, lens, tidx, y, work, hidden, hidden)
    st.h[...] = h0
    g = st.g
    for s in range(st.seq):
        np.matmul(st.h, r.T, out=g)
        g += st.x_at(s)
        _clip(g, clip)
        activate(g, acts[0])
        st.commit(s, g, None, None)
    st.final(yh, st.h)


def gru_steps(xw, r, rbh, h0, lens, tidx, y, yh, work, acts, clip, linear_before_reset):
    hid = r.shape[1]
    st = _Steps(xw, lens, tidx, y, work, 3 * hid, hid)
    st.h[...] = h0
    g, h, tmp = st.g, st.h, st.tmp
    zr, hh = g[:, :2 * hid], g[:, 2 * hid:]
    z, rg = g[:, :hid], g[:, hid:2 * hid]
    r_zr, r_h = r[:2 * hid], r[2 * hid:]
    for s in range(st.seq):
        x = st.x_at(s)
        np.matmul(h, r_zr.T, out=zr)
        zr += x[:, :2 * hid]
        _clip(zr, clip)
        activate(z, acts[0])
        activate(rg, acts[0])
        if linear_before_reset:
            np.matmul(h, r_h.T, out=hh)
            hh += rbh
            hh *= rg
        else:
            np.multiply(rg, h, out=tmp)
            np.matmul(tmp, r_h.T, out=hh)
            hh += rbh
        hh += x[:, 2 * hid:]
        _clip(hh, clip)
        activate(hh, acts[1])
        # H' = (1 - z) * h~ + z * H = h~ + z * (H - h~)
        np.subtract(h, hh, out=tmp)
        tmp *= z
        tmp += hh
        st.commit(s, tmp, None, None)
    st.final(yh, h)


def lstm_steps(xw, r, peep, h0, c0, lens, tidx, y, yh, yc, work, acts, clip, input_forget):
    hid = r.shape[1]
    st = _Steps(xw, lens, tidx, y, work, 4 * hid, hid)
    st.h[...] = h0
    st.c[...] = c0
    g, c, tmp = st.g, st.c, st.tmp
    gi, go, gf, gc = (g[:, k * hid:(k + 1) * hid] for k in range(4))
    new_c = st.g2[:, :hid]
    for s in range(st.seq):
        np.matmul(st.h, r.T, out=g)
        g += st.x_at(s)
        if peep is not None:
            gi += peep[:hid] * c
            gf += peep[2 * hid:] * c
        _clip(gi, clip)
        _clip(gf, clip)
        _clip(gc, clip)
        activate(gi, acts[0])
        activate(gf, acts[0])
        activate(gc, acts[1])
        if input_forget:
            np.subtract(1, gi, out=gf)
        np.multiply(gf, c, out=new_c)
        gc *= gi
        new_c += gc
        if peep is not None:
            go += peep[hid:2 * hid] * new_c
        _clip(go, clip)
        activate(go, acts[0])
        np.copyto(tmp, new_c)
        activate(tmp, acts[2])
        tmp *= go
        st.commit(s, tmp, c, new_c)
    st.final(yh, st.h)
    st.final(yc, c)
