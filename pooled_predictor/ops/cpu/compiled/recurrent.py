"""Compiled time loops of RNN, GRU and LSTM (numba; float32 and float64).

Same semantics as the numpy loops of ops/cpu/recurrent_cell.py (the reference they
are tested against), fused: per step one BLAS call H_{t-1} R^T into `g` (numba's
np.dot with an output), then one pass over the gates of every batch row
that updates H (and C) in place and writes Y. Rows past their sequence
length are skipped (their state is kept, Y stays zero). Nothing is
allocated inside the loop; no threads are started.

Arguments: xw [seq, batch, G*H] (the input projection, biases included),
rt = R^T [H, G*H] (a view of the weight), lens [batch], tidx [seq, batch]
(time index per step and row), h / c [batch, H] states (updated in place),
g [batch, G*H] workspace, y [seq, batch, H] (ignored unless write_y),
acts [k, 3] rows (code, alpha, beta) as float64, clip < 0 for none.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(nogil=True, cache=True, inline="always")
def _act(v, act):
    code = int(act[0])
    if code == 0:
        return v if v > 0 else 0.0
    if code == 1:
        return math.tanh(v)
    if code == 2:
        if v >= 0:
            return 1.0 / (1.0 + math.exp(-v))
        e = math.exp(v)
        return e / (1.0 + e)
    if code == 3:
        return act[1] * v + act[2]
    if code == 4:
        return v if v >= 0 else act[1] * v
    if code == 5:
        return v if v > act[1] else 0.0
    if code == 6:
        return act[1] * math.tanh(act[2] * v)
    if code == 7:
        return min(1.0, max(0.0, act[1] * v + act[2]))
    if code == 8:
        return v if v >= 0 else act[1] * (math.exp(v) - 1.0)
    if code == 9:
        return v / (1.0 + abs(v))
    # 10: softplus, ln(1 + e^v) without overflow
    return v + math.log1p(math.exp(-v)) if v > 0 else math.log1p(math.exp(v))


@njit(nogil=True, cache=True, inline="always")
def _clip(v, clip):
    if clip >= 0:
        return min(clip, max(-clip, v))
    return v


@njit(nogil=True, cache=True)
def rnn_loop(xw, rt, lens, tidx, h, g, y, write_y, acts, clip):
    seq, batch = tidx.shape
    hid = h.shape[1]
    for s in range(seq):
        np.dot(h, rt, g)
        for b in range(batch):
            if s >= lens[b]:
                continue
            t = tidx[s, b]
            for j in range(hid):
                v = _act(_clip(g[b, j] + xw[t, b, j], clip), acts[0])
                h[b, j] = v
                if write_y:
                    y[t, b, j] = v


@njit(nogil=True, cache=True)
def gru_loop(xw, rzt, rht, rbh, lens, tidx, h, g, gh, rh, y, write_y, acts, clip, linear_before_reset):
    """rzt = R[:2H]^T, rht = R[2H:]^T; g [batch, 2H] holds H R_zr^T, gh [batch, H] the candidate's
    product (H R_h^T, or (r * H) R_h^T), rh [batch, H] workspace for r * H."""
    seq, batch = tidx.shape
    hid = h.shape[1]
    for s in range(seq):
        np.dot(h, rzt, g)
        for b in range(batch):
            if s >= lens[b]:
                continue
            t = tidx[s, b]
            for j in range(2 * hid):
                g[b, j] = _act(_clip(g[b, j] + xw[t, b, j], clip), acts[0])
        if linear_before_reset:
            np.dot(h, rht, gh)
        else:
            for b in range(batch):
                for j in range(hid):
                    rh[b, j] = g[b, hid + j] * h[b, j]
            np.dot(rh, rht, gh)
        for b in range(batch):
            if s >= lens[b]:
                continue
            t = tidx[s, b]
            for j in range(hid):
                z = g[b, j]
                if linear_before_reset:
                    pre = xw[t, b, 2 * hid + j] + g[b, hid + j] * (gh[b, j] + rbh[j])
                else:
                    pre = xw[t, b, 2 * hid + j] + gh[b, j] + rbh[j]
                cand = _act(_clip(pre, clip), acts[1])
                v = cand + z * (h[b, j] - cand)
                h[b, j] = v
                if write_y:
                    y[t, b, j] = v


@njit(nogil=True, cache=True)
def lstm_loop(xw, rt, peep, has_peep, lens, tidx, h, c, g, y, write_y, acts, clip, input_forget):
    seq, batch = tidx.shape
    hid = h.shape[1]
    for s in range(seq):
        np.dot(h, rt, g)
        for b in range(batch):
            if s >= lens[b]:
                continue
            t = tidx[s, b]
            for j in range(hid):
                cj = c[b, j]
                vi = g[b, j] + xw[t, b, j]
                vo = g[b, hid + j] + xw[t, b, hid + j]
                vf = g[b, 2 * hid + j] + xw[t, b, 2 * hid + j]
                vc = g[b, 3 * hid + j] + xw[t, b, 3 * hid + j]
                if has_peep:
                    vi += peep[j] * cj
                    vf += peep[2 * hid + j] * cj
                i = _act(_clip(vi, clip), acts[0])
                f = 1.0 - i if input_forget else _act(_clip(vf, clip), acts[0])
                cn = f * cj + i * _act(_clip(vc, clip), acts[1])
                if has_peep:
                    vo += peep[hid + j] * cn
                o = _act(_clip(vo, clip), acts[0])
                v = o * _act(cn, acts[2])
                c[b, j] = cn
                h[b, j] = v
                if write_y:
                    y[t, b, j] = v


def act_table(acts) -> np.ndarray:
    """[(code, alpha, beta), ...] -> float64 array [k, 3] for the loops."""
    return np.array([[c, a, b] for c, a, b in acts], np.float64)
