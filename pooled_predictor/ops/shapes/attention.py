"""Shape rules of the attention family: Attention (23, 24, 25), RotaryEmbedding (23),
LinearAttention (27) and CausalConvWithState (27).

`attention_geometry` is shared with the CPU kernel: it resolves the head counts
and sequence lengths of Q, K, V (3-D packed or 4-D) once per reshape.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import shape_rule
from .common import check_types


@dataclass(frozen=True)
class AttentionGeometry:
    """Sizes of one Attention node (ONNX Attention, "Inputs" section).

    Attributes:
        batch: batch_size.
        q_heads, kv_heads: q_num_heads, kv_num_heads.
        q_len: q_sequence_length.
        kv_len: kv_sequence_length of the incoming K, V.
        past_len: past_sequence_length (0 without past_key).
        head_size, v_head_size: per-head sizes of Q/K and of V.
        packed: Q, K, V (and Y) are 3-D (batch, sequence, heads * size).
    """

    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    past_len: int
    head_size: int
    v_head_size: int
    packed: bool

    @property
    def total_len(self) -> int:
        return self.past_len + self.kv_len


def attention_geometry(ctx) -> AttentionGeometry:
    """Resolve an Attention node's sizes from its input shapes and attributes.

    Raises:
        ShapeInferenceError: ranks other than 3 or 4, 3-D inputs without
            q_num_heads/kv_num_heads, hidden sizes not divisible by the head
            counts, q heads not a multiple of kv heads, or past_key/past_value
            given alone or with the wrong shape.
    """
    q, k, v = (tuple(ctx.shape(i)) for i in range(3))
    if not len(q) == len(k) == len(v) or len(q) not in (3, 4):
        raise ctx.error(f"Q, K, V must all be 3-D or all 4-D; got shapes {q}, {k}, {v}")
    if len(q) == 3:
        qh, kvh = int(ctx.attr("q_num_heads", 0) or 0), int(ctx.attr("kv_num_heads", 0) or 0)
        if qh <= 0 or kvh <= 0:
            raise ctx.error("3-D Q, K, V need the q_num_heads and kv_num_heads attributes")
        for name, hidden, heads in (("Q", q[2], qh), ("K", k[2], kvh), ("V", v[2], kvh)):
            if hidden % heads:
                raise ctx.error(f"{name} hidden size {hidden} is not divisible by its {heads} heads")
        geo = dict(batch=q[0], q_heads=qh, kv_heads=kvh, q_len=q[1], kv_len=k[1],
                   head_size=q[2] // qh, v_head_size=v[2] // kvh, packed=True)
        if k[2] // kvh != geo["head_size"]:
            raise ctx.error(f"K head size {k[2] // kvh} differs from Q head size {geo['head_size']}")
    else:
        if ctx.version >= 25 and (ctx.attr("q_num_heads") is not None or ctx.attr("kv_num_heads") is not None):
            raise ctx.error("q_num_heads and kv_num_heads must not be given with 4-D Q, K, V")
        if k[3] != q[3] or k[1] != v[1] or k[2] != v[2]:
            raise ctx.error(f"Q {q}, K {k}, V {v}: K must share Q's head size and V's heads and length")
        geo = dict(batch=q[0], q_heads=q[1], kv_heads=k[1], q_len=q[2], kv_len=k[2],
                   head_size=q[3], v_head_size=v[3], packed=False)
    if geo["q_heads"] % geo["kv_heads"]:
        raise ctx.error(f"q_num_heads={geo['q_heads']} must be a multiple of kv_num_heads={geo['kv_heads']}")
    if ctx.has_input(4) != ctx.has_input(5):
        raise ctx.error("past_key and past_value must be given together")
    past = 0
    if ctx.has_input(4):
        pk, pv = tuple(ctx.shape(4)), tuple(ctx.shape(5))
        b, h = geo["batch"], geo["kv_heads"]
        if len(pk) != 4 or pk[:2] != (b, h) or pk[3] != geo["head_size"] or pv[:3] != pk[:3] \
                or pv[3] != geo["v_head_size"]:
            raise ctx.error(f"past_key {pk} / past_value {pv} must be (batch, kv_num_heads, past_length, "
                            f"head_size / v_head_size)")
        past = pk[2]
    return AttentionGeometry(past_len=past, **geo)


@shape_rule("Attention")
def attention(ctx):
    """Y (B, Hq, Sq, Dv) or (B, Sq, Hq*Dv); present_key/value (B, Hkv, past+Skv, D/Dv);
    qk_matmul_output (B, Hq, Sq, past+Skv)."""
    check_types(ctx)
    g = attention_geometry(ctx)
    q_dtype, v_dtype = ctx.dtype(0), ctx.dtype(2)
    y = (g.batch, g.q_len, g.q_heads * g.v_head_size) if g.packed else (g.batch, g.q_heads, g.q_len, g.v_head_size)
    if ctx.has_input(6) and (ctx.has_input(4) or ctx.has_output(1) or ctx.has_output(2)):
        raise ctx.error("nonpad_kv_seqlen cannot be used with past_key/past_value or present_key/present_value")
    return [(y, q_dtype),
            ((g.batch, g.kv_heads, g.total_len, g.head_size), q_dtype),
            ((g.batch, g.kv_heads, g.total_len, g.v_head_size), v_dtype),
            ((g.batch, g.q_heads, g.q_len, g.total_len), q_dtype)]


@shape_rule("RotaryEmbedding")
def rotary_embedding(ctx):
    """Y has X's shape and dtype: X (B, H, S, D) or (B, S, H*D) with num_heads."""
    check_types(ctx)
    x = tuple(ctx.shape(0))
    if len(x) == 3:
        heads = int(ctx.attr("num_heads", 0) or 0)
        if heads <= 0 or x[2] % heads:
            raise ctx.error(f"3-D X {x} needs num_heads dividing its hidden size; num_heads={heads}")
        head = x[2] // heads
    elif len(x) == 4:
        head = x[3]
    else:
        raise ctx.error(f"X must be 3-D or 4-D, got shape {x}")
    dim = int(ctx.attr("rotary_embedding_dim", 0) or 0) or head
    if dim % 2 or dim > head:
        raise ctx.error(f"rotary_embedding_dim={dim} must be even and at most the head size {head}")
    for i, name in ((1, "cos_cache"), (2, "sin_cache")):
        if ctx.shape(i)[-1] != dim // 2:
            raise ctx.error(f"{name} shape {tuple(ctx.shape(i))}: last dimension must be "
                            f"rotary_embedding_dim / 2 = {dim // 2}")
    return [(x, ctx.dtype(0))]


@shape_rule("LinearAttention")
def linear_attention(ctx):
    """output (B, T, Hq*Dv) in query's dtype; present_state (B, Hkv, Dk, Dv) in past_state's
    dtype (query's without past_state)."""
    check_types(ctx)
    q, k, v = (tuple(ctx.shape(i)) for i in range(3))
    qh, kvh = int(ctx.attr("q_num_heads", 0) or 0), int(ctx.attr("kv_num_heads", 0) or 0)
    if qh <= 0 or kvh <= 0 or qh % kvh:
        raise ctx.error(f"q_num_heads={qh} must be a positive multiple of kv_num_heads={kvh}")
    if not len(q) == len(k) == len(v) == 3:
        raise ctx.error(f"query, key, value must be 3-D (B, T, H*D); got {q}, {k}, {v}")
    if q[2] % qh or k[2] % kvh or v[2] % kvh or q[2] // qh != k[2] // kvh:
        raise ctx.error(f"query {q}, key {k}, value {v} do not split into {qh} / {kvh} heads of one key size")
    dk, dv = q[2] // qh, v[2] // kvh
    state = (q[0], kvh, dk, dv)
    if ctx.has_input(3) and tuple(ctx.shape(3)) != state:
        raise ctx.error(f"past_state shape {tuple(ctx.shape(3))} must be {state}")
    rule = ctx.attr("update_rule", "gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else rule
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ctx.error(f"update_rule={rule!r}; expected linear, gated, delta or gated_delta")
    for i, name, needed in ((4, "decay", rule in ("gated", "gated_delta")),
                            (5, "beta", rule in ("delta", "gated_delta"))):
        if ctx.has_input(i) != needed:
            raise ctx.error(f"update_rule={rule!r} {'requires' if needed else 'forbids'} the {name} input")
    if ctx.has_input(4) and tuple(ctx.shape(4)) not in ((q[0], q[1], kvh), (q[0], q[1], kvh * dk)):
        raise ctx.error(f"decay shape {tuple(ctx.shape(4))} must be (B, T, {kvh}) or (B, T, {kvh * dk})")
    if ctx.has_input(5) and tuple(ctx.shape(5)) not in ((q[0], q[1], kvh), (q[0], q[1], 1)):
        raise ctx.error(f"beta shape {tuple(ctx.shape(5))} must be (B, T, {kvh}) or (B, T, 1)")
    state_dtype = ctx.dtype(3) if ctx.has_input(3) else ctx.dtype(0)
    return [((q[0], q[1], qh * dv), ctx.dtype(0)), (state, state_dtype)]


@shape_rule("CausalConvWithState")
def causal_conv_with_state(ctx):
    """output: input's shape (B, C, L); present_state (B, C, k - 1)."""
    check_types(ctx)
    x, w = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    if len(x) != 3 or len(w) != 3 or w[0] != x[1] or w[1] != 1 or w[2] < 1:
        raise ctx.error(f"input {x} must be (B, C, L) and weight {w} (C, 1, k)")
    state = (x[0], x[1], w[2] - 1)
    if ctx.has_input(2) and tuple(ctx.shape(2)) != (x[1],):
        raise ctx.error(f"bias shape {tuple(ctx.shape(2))} must be ({x[1]},)")
    if ctx.has_input(3) and tuple(ctx.shape(3)) != state:
        raise ctx.error(f"past_state shape {tuple(ctx.shape(3))} must be {state}")
    act = ctx.attr("activation", "none")
    act = act.decode() if isinstance(act, bytes) else act
    if act not in ("none", "silu", "swish"):
        raise ctx.error(f"activation={act!r}; expected none, silu or swish")
    return [(x, ctx.dtype(0)), (state, ctx.dtype(0))]



@shape_rule("FlexAttention", domain="ai.onnx.preview")
def flex_attention(ctx):
    """Y (B, Hq, L, Ev) in V's dtype; Q, K, V rank 4, Hq a multiple of Hkv."""
    check_types(ctx)
    q, k, v = (tuple(ctx.shape(i)) for i in range(3))
    if not len(q) == len(k) == len(v) == 4 or k[3] != q[3] or k[:3] != v[:3] or q[0] != k[0] or q[1] % k[1]:
        raise ctx.error(f"Q {q}, K {k}, V {v} must be (B, Hq, L, E), (B, Hkv, S, E), (B, Hkv, S, Ev) "
                        f"with Hq a multiple of Hkv")
    return [((q[0], q[1], q[2], v[3]), ctx.dtype(2))]
