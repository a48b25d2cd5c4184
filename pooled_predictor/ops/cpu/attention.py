"""Attention-family CPU kernels: Attention (23, 24, 25), RotaryEmbedding (23),
LinearAttention (27), CausalConvWithState (27), and our ScaledDotProductAttention (the
exported MatMul -> scale -> mask -> Softmax -> MatMul pattern, passes/attention.py).

Attention is computed per (batch, kv head, group) with batched matmuls: grouped-query
heads are never copied (query head h reads kv head h // (q_heads / kv_heads), the
spec's interleaved repeat). It computes in Q's type (float16 too, as the spec's
function body does); softmax_precision, when given, sets the softmax's precision.
The other kernels compute float16 in float32 and round once at the end.
"""

from __future__ import annotations

import numpy as np
from ._special import special

from ...errors import InputError
from ..registry import kernel
from ..shapes.fused import DOMAIN
from . import compiled
from .matmul import ActivationProduct, matmul_into

# softmax_precision (ONNX TensorProto elem_type) -> numpy dtype; 16 (bfloat16) has none.
_PRECISIONS = {1: np.float32, 10: np.float16, 11: np.float64}


def _compute_dtype(dtype) -> np.dtype:
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, S, H*D) -> a (B, H, S, D) view; 4-D arrays as they are."""
    if x.ndim == 4:
        return x
    b, s, hd = x.shape
    return x.reshape(b, s, heads, hd // heads).transpose(0, 2, 1, 3)


def _check_attention(attrs, version):
    p = attrs.get("softmax_precision")
    if p is not None and int(p) not in _PRECISIONS:
        return f"softmax_precision={p}: only 1 (float), 10 (float16) and 11 (double) have numpy dtypes"
    for name in ("left_window_size", "right_window_size"):
        if int(attrs.get(name, -1)) < -1:
            return f"{name}={attrs[name]} must be -1 or non-negative"
    return None


def attention_bias(mask, q_len: int, total: int, *, dtype, causal: bool, offset, left: int = -1,
                   right: int = -1, nonpad=None):
    """The additive bias of Attention's scores, broadcastable to (B, Hq, Sq, total).

    Args:
        mask: attn_mask or None; bool (True attends) or numbers added to the scores;
            a last dimension shorter than `total` is padded with False / -inf.
        causal: is_causal: query i attends key j iff j <= i + offset.
        offset: the count of valid keys before the query block: past length
            (int), or nonpad_kv_seqlen - Sq per batch (array (B,)).
        left, right: left_window_size / right_window_size (-1: unbounded):
            keys j with i + offset - left <= j <= i + offset + right.
        nonpad: nonpad_kv_seqlen (B,) or None: keys j >= nonpad[b] are padding.
    Returns:
        (bias, fully_masked): bias in `dtype` (0 / -inf where structure
        forbids, plus a float mask) or None when nothing is masked; fully_masked
        marks rows (..., Sq, 1) with no attendable key (their probabilities are 0).
    Source: ONNX Attention-25, "Attention bias" and the causal / window figures.
    """
    parts = []
    if mask is not None:
        mask = np.asarray(mask)
        short = total - mask.shape[-1]
        if mask.dtype == np.bool_:
            m = np.where(mask, dtype.type(0), dtype.type(-np.inf))
        else:
            m = mask.astype(dtype, copy=False)
        if short > 0:
            m = np.concatenate([m, np.full(m.shape[:-1] + (short,), -np.inf, dtype)], axis=-1)
        parts.append(m)
    allowed = None
    if causal or left >= 0 or right >= 0 or nonpad is not None:
        j = np.arange(total)
        pos = np.arange(q_len)[:, None] + (np.reshape(offset, (-1, 1, 1, 1)) if np.ndim(offset) else int(offset))
        allowed = np.ones(np.broadcast_shapes(np.shape(pos), (total,)), bool)
        if causal:
            allowed &= j <= pos
        if left >= 0:
            allowed &= pos - j <= left
        if right >= 0:
            allowed &= j - pos <= right
        if nonpad is not None:
            allowed = allowed & (j < np.reshape(nonpad, (-1, 1, 1, 1)))
        parts.append(np.where(allowed, dtype.type(0), dtype.type(-np.inf)))
    if not parts:
        return None, None
    bias = parts[0] if len(parts) == 1 else parts[0] + parts[1]
    if bias.ndim < 2 or bias.shape[-2] != q_len:  # rank-1 masks: one row for every query
        bias = np.broadcast_to(bias, bias.shape[:-2] + (q_len, total)) if bias.ndim >= 2 else \
            np.broadcast_to(bias, (q_len, total))
    fully_masked = np.isneginf(bias.max(axis=-1, keepdims=True))
    return bias, fully_masked


@kernel("Attention", since=(23, 24, 25), check=_check_attention)
def attention(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *, out,
              is_causal=0, kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None,
              softcap=0.0, softmax_precision=None, left_window_size=-1, right_window_size=-1):
    """Scaled dot-product attention (ONNX Attention-23/24/25).

    Shapes: Q (B, Hq, Sq, D) or (B, Sq, Hq*D); K (B, Hkv, Skv, D) or packed; V
    (B, Hkv, Skv, Dv) or packed; past_key/past_value (B, Hkv, P, D/Dv);
    attn_mask broadcastable to (B, Hq, Sq, P+Skv) (bool: True attends; numbers:
    added); nonpad_kv_seqlen (B,) int64 (24+). Outputs: Y like Q with Dv;
    present_key/present_value (B, Hkv, P+Skv, D/Dv); qk_matmul_output
    (B, Hq, Sq, P+Skv): mode 0 the scaled Q K^T, 1 after softcap, 2 plus the
    bias, 3 the probabilities. Scores = (Q sqrt(s)) (K sqrt(s))^T, s = scale or
    1/sqrt(D); softcap c > 0 maps x to c tanh(x / c) before the bias; a query
    row with no attendable key gives probabilities 0 (Y row 0).
    Types: float16, float, double (bfloat16 has no numpy dtype).
    """
    y, present_key, present_value, qk_out = out if isinstance(out, tuple) else (out, None, None, None)
    packed = q.ndim == 3
    q4 = _heads(q, int(q_num_heads or 0))
    k4, v4 = _heads(k, int(kv_num_heads or 0)), _heads(v, int(kv_num_heads or 0))
    b, hq, sq, d = q4.shape
    hkv, dv = k4.shape[1], v4.shape[3]
    group = hq // hkv
    past = 0 if past_key is None else past_key.shape[2]
    total = past + k4.shape[2]
    if past_key is not None:
        keys = present_key if present_key is not None else np.empty((b, hkv, total, d), k4.dtype)
        values = present_value if present_value is not None else np.empty((b, hkv, total, dv), v4.dtype)
        keys[:, :, :past], keys[:, :, past:] = past_key, k4
        values[:, :, :past], values[:, :, past:] = past_value, v4
    else:
        keys, values = k4, v4
        if present_key is not None:
            np.copyto(present_key, k4)
        if present_value is not None:
            np.copyto(present_value, v4)

    ct = q.dtype     # the spec's precision (T1), float16 included, as its function body computes
    root = np.sqrt(ct.type(1.0 / np.sqrt(d)) if not scale else ct.type(scale), dtype=ct)
    # query heads of one kv head are consecutive: (B, Hq, Sq, D) -> (B, Hkv, G*Sq, D), one matmul per kv head
    qs = (q4 * root).astype(ct, copy=False).reshape(b, hkv, group * sq, d)
    ks = (keys * root).astype(ct, copy=False)
    scores = np.matmul(qs, ks.swapaxes(-1, -2)).reshape(b, hq, sq, total)
    raw = scores.copy() if qk_out is not None and qk_matmul_output_mode == 0 and softcap else None
    if softcap and softcap > 0:
        np.divide(scores, ct.type(softcap), out=scores)
        np.tanh(scores, out=scores)
        scores *= ct.type(softcap)
    if qk_out is not None and qk_matmul_output_mode in (0, 1):
        np.copyto(qk_out, raw if raw is not None else scores, casting="unsafe")

    offset = past
    if nonpad_kv_seqlen is not None and past_key is None:
        offset = np.asarray(nonpad_kv_seqlen).reshape(-1) - sq
    bias, fully_masked = attention_bias(attn_mask, sq, total, dtype=ct, causal=bool(is_causal), offset=offset,
                                        left=int(left_window_size), right=int(right_window_size),
                                        nonpad=nonpad_kv_seqlen)
    if bias is not None:
        scores += bias
    if qk_out is not None and qk_matmul_output_mode == 2:
        np.copyto(qk_out, scores, casting="unsafe")

    sp = np.dtype(_PRECISIONS[int(softmax_precision)]) if softmax_precision else q.dtype
    logits = scores.astype(sp, copy=False)
    top = logits.max(axis=-1, keepdims=True)
    top[~np.isfinite(top)] = 0
    logits -= top
    np.exp(logits, out=logits)
    sums = logits.sum(axis=-1, keepdims=True)
    sums[sums == 0] = 1
    logits /= sums
    if fully_masked is not None and fully_masked.any():
        logits = np.where(fully_masked, sp.type(0), logits)
    probs = logits.astype(q.dtype, copy=False).astype(ct, copy=False)
    if qk_out is not None and qk_matmul_output_mode == 3:
        np.copyto(qk_out, probs, casting="unsafe")
    vs = values.astype(ct, copy=False)
    res = np.matmul(probs.reshape(b, hkv, group * sq, total), vs).reshape(b, hq, sq, dv)
    if packed:
        res = res.transpose(0, 2, 1, 3).reshape(b, sq, hq * dv)
    np.copyto(y, res, casting="unsafe")


@kernel("RotaryEmbedding", since=23)
def rotary_embedding(x, cos_cache, sin_cache, position_ids=None, *, out, interleaved=0,
                     rotary_embedding_dim=0, num_heads=0):
    """Rotate pairs of X's features by per-position angles (ONNX RotaryEmbedding-23).

    Shapes: X (B, H, S, D) or (B, S, H*D) with num_heads; with position_ids
    (B, S) int64, cos_cache/sin_cache are (max_position + 1, R/2), else (B, S, R/2);
    R = rotary_embedding_dim (0: D). Pairs are (x[i], x[i + R/2]) or, interleaved,
    (x[2i], x[2i+1]); (a, b) -> (a cos - b sin, a sin + b cos); features past R
    are copied. Y has X's shape and dtype (float16 computed in float32).
    Raises:
        InputError: a position id outside the caches.
    Source: Su et al. 2021, "RoFormer" (rotary position embedding).
    """
    if x.ndim == 4:
        xv, yv = x.transpose(0, 2, 1, 3), out.transpose(0, 2, 1, 3)     # (B, S, H, D)
    else:
        b, s, hd = x.shape
        xv, yv = x.reshape(b, s, num_heads, hd // num_heads), out.reshape(b, s, num_heads, hd // num_heads)
    dim = int(rotary_embedding_dim) or xv.shape[3]
    half = dim // 2
    if position_ids is not None:
        if position_ids.size and (position_ids.min() < 0 or position_ids.max() >= cos_cache.shape[0]):
            raise InputError(f"RotaryEmbedding: position_ids in [{position_ids.min()}, {position_ids.max()}] "
                             f"outside the caches' {cos_cache.shape[0]} positions")
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    ct = _compute_dtype(x.dtype)
    cos = cos_cache.astype(ct, copy=False)[:, :, None, :]
    sin = sin_cache.astype(ct, copy=False)[:, :, None, :]
    if interleaved:
        x1, x2 = xv[..., 0:dim:2], xv[..., 1:dim:2]
        o1, o2 = yv[..., 0:dim:2], yv[..., 1:dim:2]
    else:
        x1, x2 = xv[..., :half], xv[..., half:dim]
        o1, o2 = yv[..., :half], yv[..., half:dim]
    x1, x2 = x1.astype(ct, copy=False), x2.astype(ct, copy=False)
    np.copyto(o1, cos * x1 - sin * x2, casting="unsafe")
    np.copyto(o2, sin * x1 + cos * x2, casting="unsafe")
    if dim < xv.shape[3]:
        yv[..., dim:] = xv[..., dim:]


@kernel("LinearAttention", since=27)
def linear_attention(query, key, value, past_state=None, decay=None, beta=None, *, out, chunk_size=0,
                     kv_num_heads=0, q_num_heads=0, scale=0.0, update_rule="gated_delta"):
    """Recurrent (linear) attention over a state S (B, Hkv, Dk, Dv) (ONNX LinearAttention-27).

    For every step t, with q, k (Dk), v (Dv) of each head:
        gated rules:  S *= exp(decay_t)            (per head or per key feature)
        delta rules:  v = beta_t * (v - S^T k)
        S += k v^T;   o_t = scale * S^T q           (query head h reads kv head h // group)
    update_rule: linear, gated, delta or gated_delta. Shapes: query (B, T, Hq*Dk),
    key (B, T, Hkv*Dk), value (B, T, Hkv*Dv), decay (B, T, Hkv) or (B, T, Hkv*Dk),
    beta (B, T, Hkv) or (B, T, 1). Outputs: output (B, T, Hq*Dv), present_state.
    Computed in float32 (the state accumulates over T steps); chunk_size is a
    tuning hint without effect on the result. A loop over time steps, vectorized
    over batch and heads.
    Source: Yang et al. 2024, "Gated Delta Networks".
    """
    output, present = out
    rule = update_rule.decode() if isinstance(update_rule, bytes) else update_rule
    b, t, _ = query.shape
    hq, hkv = int(q_num_heads), int(kv_num_heads)
    group = hq // hkv
    f32 = np.float32
    q4 = _heads(query, hq).astype(f32).reshape(b, hkv, group, t, -1)   # (B, Hkv, G, T, Dk)
    k4 = _heads(key, hkv).astype(f32)                                 # (B, Hkv, T, Dk)
    v4 = _heads(value, hkv).astype(f32)                               # (B, Hkv, T, Dv)
    dk, dv = k4.shape[3], v4.shape[3]
    state = np.zeros((b, hkv, dk, dv), f32) if past_state is None else past_state.astype(f32)
    gate = None
    if decay is not None:
        per_head = decay.shape[2] == hkv
        gate = np.exp(decay.astype(f32).reshape(b, t, hkv, 1 if per_head else dk)).transpose(0, 2, 1, 3)
    rate = None if beta is None else beta.astype(f32).transpose(0, 2, 1)  # (B, Hkv or 1, T)
    sc = f32(scale) if scale else f32(1.0 / np.sqrt(dk))
    res = np.empty((b, hkv, group, t, dv), f32)
    for i in range(t):
        if gate is not None:
            state *= gate[:, :, i, :, None]
        kt, vt = k4[:, :, i], v4[:, :, i]
        if rate is not None:
            vt = rate[:, :, i, None] * (vt - np.einsum("bhdm,bhd->bhm", state, kt))
        state += kt[..., :, None] * vt[..., None, :]
        np.matmul(q4[:, :, :, i, None, :], state[:, :, None], out=res[:, :, :, i, None, :])
    res *= sc
    np.copyto(output, res.reshape(b, hq, t, dv).transpose(0, 2, 1, 3).reshape(b, t, hq * dv), casting="unsafe")
    if present is not None:
        np.copyto(present, state, casting="unsafe")


@kernel("CausalConvWithState", since=27)
def causal_conv_with_state(x, weight, bias=None, past_state=None, *, out, activation="none"):
    """Depthwise causal 1-D convolution carrying its left context (ONNX CausalConvWithState-27).

    padded = concat(past_state or zeros (B, C, k-1), X (B, C, L)) along time;
    Y[b, c, t] = sum_j W[c, 0, j] padded[b, c, t + j] + bias[c], then SiLU
    (x sigmoid(x)) for activation silu/swish; present_state = the last k-1
    steps of padded. float16 is computed in float32.
    """
    y, present = out
    act = activation.decode() if isinstance(activation, bytes) else activation
    bsz, c, length = x.shape
    taps = weight.shape[2]
    ct = _compute_dtype(x.dtype)
    padded = np.zeros((bsz, c, length + taps - 1), ct)
    if past_state is not None:
        padded[:, :, :taps - 1] = past_state
    padded[:, :, taps - 1:] = x
    w = weight.astype(ct, copy=False)[:, 0, :]
    acc = np.zeros((bsz, c, length), ct) if bias is None else np.broadcast_to(
        bias.astype(ct)[:, None], (bsz, c, length)).copy()
    for j in range(taps):
        acc += w[:, j, None] * padded[:, :, j:j + length]
    if act in ("silu", "swish"):
        acc *= special.expit(acc)
    np.copyto(y, acc, casting="unsafe")
    if present is not None:
        np.copyto(present, padded[:, :, length:], casting="unsafe")


def _check_flex(attrs, version):
    mods = [m for m in ("score_mod", "prob_mod") if attrs.get(m) is not None]
    if mods:
        return (f"{' and '.join(mods)} subgraphs are not supported yet (they need nested Programs, "
                f"as If/Loop bodies); FlexAttention without them runs")
    p = attrs.get("softmax_precision")
    if p is not None and int(p) not in _PRECISIONS:
        return f"softmax_precision={p}: only 1 (float), 10 (float16) and 11 (double) have numpy dtypes"
    return None


@kernel("FlexAttention", since=1, domain="ai.onnx.preview", check=_check_flex)
def flex_attention(q, k, v, *, out, scale=None, softmax_precision=None, score_mod=None, prob_mod=None):
    """Scaled dot-product attention with optional modifier subgraphs (ONNX ai.onnx.preview
    FlexAttention-1), here without score_mod / prob_mod (rejected at compile time).

    Scores = (Q sqrt(s)) (K sqrt(s))^T in Q's type, s = scale or 1/sqrt(E); softmax in
    softmax_precision (default float32, double for double inputs); Y = P V in that
    precision, returned in V's type. Shapes: Q (B, Hq, L, E), K (B, Hkv, S, E), V
    (B, Hkv, S, Ev); Y (B, Hq, L, Ev); query head h reads kv head h // (Hq / Hkv).
    """
    b, hq, length, e = q.shape
    hkv, s = k.shape[1], k.shape[2]
    group = hq // hkv
    root = np.sqrt(np.float32(1.0 / np.sqrt(e) if scale is None else scale)).astype(q.dtype)
    scores = np.matmul((q * root).reshape(b, hkv, group, length, e), (k * root)[:, :, None].swapaxes(-1, -2))
    ct = np.dtype(_PRECISIONS[int(softmax_precision)]) if softmax_precision is not None else (
        np.dtype(np.float64) if q.dtype == np.float64 else np.dtype(np.float32))
    scores = scores.astype(ct, copy=False)
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    res = np.matmul(scores, v.astype(ct, copy=False)[:, :, None])
    np.copyto(out, res.reshape(b, hq, length, -1), casting="unsafe")


# ---- ScaledDotProductAttention (our domain; passes/attention.py) ------------------------------
@kernel("ScaledDotProductAttention", since=1, domain=DOMAIN)
class ScaledDotProductAttention:
    """Y = MatMul(Softmax(op(MatMul(Q, Kt), scale) + M, axis=-1), V): the attention pattern exporters
    write (Vaswani et al. 2017, eq. 1, with the scale and an additive mask or bias), one node.

    Shapes: Q (..., S, D), Kt (..., D, T) (K already transposed), V (..., T, Dv), M (optional)
    broadcasting with the scores (..., S, T); numpy.matmul's batch broadcasting throughout;
    Y (..., S, Dv). op: * scale (divide 0) or / scale (divide 1). Types: float16/32/64.
    The same arithmetic as the nodes it replaces, in their order and rounding: both products by
    MatMul's rule for two activations (ops/cpu/matmul.py: ActivationProduct, compiled/matmul.py's
    matmul_rows8 / 16 where it applies, else np.matmul), the scale and the mask rounded one by one, then
    Softmax. float32 with scores M does not enlarge: the scale, the mask and the softmax are one
    compiled pass per row of the scores (compiled/softmax.py: softmax_rows_biased) while the row
    is in cache, instead of three passes over the (..., S, T) scores. Otherwise numpy's passes.
    Workspace: the scores (their broadcast shape) and, on the numpy path, their row maxima.
    """

    def __init__(self, ctx, *, scale=1.0, divide=0):
        self.scale, self.divide = float(scale), int(divide)
        dtype = np.dtype(ctx.dtype(0))
        raw = np.broadcast_shapes(tuple(ctx.shape(0))[:-2], tuple(ctx.shape(1))[:-2]) + (
            tuple(ctx.shape(0))[-2], tuple(ctx.shape(1))[-1])
        self.masked = ctx.has_input(3)
        full = np.broadcast_shapes(raw, tuple(ctx.shape(3))) if self.masked else raw
        self.raw_shape, self.full_shape = raw, full
        self.scores = ctx.scratch(full, dtype)
        # both products by the rule of MatMul's of two activations (ops/cpu/matmul.py), so the same bits
        self.qk = ActivationProduct.build(ctx, ctx.shape(0), ctx.shape(1), dtype) \
            if np.dtype(ctx.dtype(1)) == dtype else None
        self.pv = ActivationProduct.build(ctx, full, ctx.shape(2), dtype) if np.dtype(ctx.dtype(2)) == dtype else None
        d = full[-1] if full else 1
        rows = int(np.prod(full, dtype=np.int64)) // max(d, 1)
        self.rows = None
        if compiled.active() and dtype == np.float32 and full == raw and d > 0 and rows > 0 and (
                not self.masked or np.dtype(ctx.dtype(3)) == np.float32):
            self.rows = (rows, d)
            # / scale as * (1 / scale) where 1 / scale is a float32 power of two: both are the correctly
            # rounded x / scale, bit for bit (BERT's / 8)
            s32 = np.float32(self.scale)
            inverse = np.float32(1) / s32 if s32 != 0 and np.isfinite(s32) else np.float32(0)
            exact = self.divide and inverse != 0 and np.isfinite(inverse) and np.frexp(inverse)[0] == 0.5 \
                and np.float32(1) / inverse == s32
            self.mode, self.op_scale = (1, inverse) if exact else (2 if self.divide else 1, s32)
            if self.masked:  # the mask's element offset at each score row's start, and its step along the row
                m_shape = tuple(ctx.shape(3))
                index = np.arange(int(np.prod(m_shape, dtype=np.int64)), dtype=np.int64).reshape(m_shape)
                self.m_rows = np.ascontiguousarray(np.broadcast_to(index, full)[..., 0]).reshape(-1)
                self.m_step = 1 if m_shape and m_shape[-1] == d and d > 1 else 0
            else:
                self.m_rows, self.m_step = np.empty(0, np.int64), 0
            self.m_rows.flags.writeable = False
        else:
            self.red = ctx.scratch(full[:-1] + (1,) if full else (1,), dtype)
            self.raw = None if raw == full else ctx.scratch(raw, dtype)  # the scores before a mask enlarges them

    def __call__(self, q, kt, v, m=None, *, out):
        s = self.scores.array
        if self.rows is not None:
            matmul_into(self.qk, q, kt, s)
            flat = s.reshape(-1)
            mask = _NO_MASK if m is None else np.ascontiguousarray(m, np.float32).reshape(-1)
            compiled.softmax.softmax_rows_biased(flat, self.rows[0], self.rows[1], self.op_scale, self.mode, mask,
                                                 self.m_rows, self.m_step)
            matmul_into(self.pv, s, v, out)
            return
        raw = s if self.raw is None else self.raw.array
        matmul_into(self.qk, q, kt, raw)
        c = s.dtype.type(self.scale)
        (np.divide if self.divide else np.multiply)(raw, c, out=raw)
        if self.masked:
            np.add(raw, m, out=s)
        elif raw is not s:
            np.copyto(s, raw)
        mx = self.red.array
        np.max(s, axis=-1, keepdims=True, out=mx)
        np.subtract(s, mx, out=s)
        np.exp(s, out=s)
        np.sum(s, axis=-1, keepdims=True, out=mx)
        s /= mx
        matmul_into(self.pv, s, v, out)


    def prepare_run(self, q, kt, v, m=None, *, out):
        """__call__'s compiled path bound to these arrays: the two products and the row softmax as one chain of
        compiled calls (a native run takes it: compiled/native_runs.py), or None where a part would not run
        compiled (then __call__ runs)."""
        if self.rows is None or self.qk is None or self.pv is None:
            return None
        s = self.scores.array
        first = self.qk.prepare(q, kt, s)
        second = self.pv.prepare(s, v, out)
        if first is None or second is None or (m is not None and not (m.dtype == np.float32 and m.flags.c_contiguous)):
            return None
        mask = _NO_MASK if m is None else m.reshape(-1)
        soft = compiled.bound(compiled.softmax.softmax_rows_biased, s.reshape(-1), self.rows[0], self.rows[1],
                              self.op_scale, self.mode, mask, self.m_rows, self.m_step)
        return compiled.chain(first, soft, second)


_NO_MASK = np.empty(0, np.float32)
