"""Shape rules of If, Loop and Scan: inferred through their bodies (nested Nets).

A body is laid out for the input shapes the node sees (a BodyRun, from the body
runner the Net hands down: OpContext.body_run; engine/control_flow.py),
so its output shapes come from the same shape rules as any Net's. Where an
output's shape is known only by running (a branch chosen by a condition fed
at forward whose branches disagree, a trip count fed at forward with scan
outputs, loop-carried values that change shape), the rule raises NotStatic
and the Net runs the node per forward (its kernel's `evaluate`).
"""

from __future__ import annotations

import numpy as np

from ...errors import PooledPredictorError
from ...ir import readonly
from ..context import NotStatic
from . import shape_rule

INT64, BOOL = np.dtype(np.int64), np.dtype(np.bool_)
TRUE = readonly(np.array(True))  # a Loop body runs only while its condition is true


def specs_or_raise(run, shapes, what: str) -> list:
    """Body output (shape, dtype) list; NotStatic when one is known only by running."""
    specs = run.output_specs(shapes)
    if any(s is None for s in specs):
        raise NotStatic(f"{what}: a body output's shape depends on data")
    return specs


def input_values(ctx, idx) -> list:
    return [ctx.value(i) if ctx.is_static(i) else None for i in idx]


def branch_run(ctx, sub):
    """If: the branch's BodyRun (its inputs are the node's captures, inputs 1..)."""
    idx = range(1, ctx.num_inputs)
    return ctx.body_run(sub, [ctx.dtype(i) for i in idx], input_values(ctx, idx))


@shape_rule("If")
def _if(ctx):
    branches = [ctx.attr("then_branch"), ctx.attr("else_branch")]
    if ctx.is_static(0):
        branches = [branches[0] if bool(np.asarray(ctx.value(0)).reshape(-1)[0]) else branches[1]]
    shapes = ctx.shapes[1:]
    if len(branches) == 1:
        return specs_or_raise(branch_run(ctx, branches[0]), shapes, ctx.node.name)
    # A branch may reject these shapes (silero-vad's 8 kHz branch a 16 kHz chunk): onnxruntime never
    # runs a branch not taken. Shape inference depends on shapes and static values only, so choosing
    # that branch at forward raises the same error (If's kernel runs it then); the outputs are the
    # other branch's, planned. Both rejecting: per forward, where the chosen one raises.
    specs, errors = [], []
    for b in branches:
        try:
            specs.append(specs_or_raise(branch_run(ctx, b), shapes, ctx.node.name))
        except PooledPredictorError as exc:
            errors.append(exc)
    if not specs:
        raise NotStatic(f"node {ctx.node.name!r}: both branches reject these shapes: {errors[0]}") from errors[0]
    if len(specs) == 2 and specs[0] != specs[1]:
        raise NotStatic(f"node {ctx.node.name!r}: the branches give different shapes {specs}")
    return specs[0]


def loop_run(ctx, body):
    """Loop: the body's BodyRun (iteration number, condition, carried values, captures)."""
    idx = range(2, ctx.num_inputs)
    dtypes = [INT64, BOOL] + [ctx.dtype(i) for i in idx]
    return ctx.body_run(body, dtypes, [None, None] + input_values(ctx, idx), {1: TRUE})


def static_trip_count(ctx, run) -> int | None:
    """Iterations when known before forward: M static, cond absent or static, the body's condition static true."""
    m = int(np.asarray(ctx.value(0)).reshape(-1)[0]) if ctx.is_static(0) else None
    if ctx.has_input(1):
        if not ctx.is_static(1):
            return None
        if not bool(np.asarray(ctx.value(1)).reshape(-1)[0]):
            return 0
    if m == 0:
        return 0
    cond_out = run.static_output(0)  # the body's condition stops the loop (as in onnxruntime)
    if m is not None and cond_out is not None and bool(np.asarray(cond_out).reshape(-1)[0]):
        return m
    return None


@shape_rule("Loop")
def _loop(ctx):
    body = ctx.attr("body")
    n_carried = body.num_formal_inputs - 2
    run = loop_run(ctx, body)
    shapes = [(), ()] + list(ctx.shapes[2:])
    specs = specs_or_raise(run, shapes, ctx.node.name)
    carried = specs[1:1 + n_carried]
    for k, (s, t) in enumerate(carried):
        if s != tuple(ctx.shape(2 + k)) or t != ctx.dtype(2 + k):
            raise NotStatic(f"node {ctx.node.name!r}: loop-carried value {k} changes shape or type")
    scans = specs[1 + n_carried:]
    if not scans:
        return carried
    trips = static_trip_count(ctx, run)
    if trips is None:
        raise NotStatic(f"node {ctx.node.name!r}: the trip count is known only at forward")
    return carried + [((trips,) + tuple(s), t) for s, t in scans]


def scan_layout(ctx, body):
    """(N states, M scan inputs, input axes, input directions, output axes, output directions)."""
    m = int(ctx.attr("num_scan_inputs"))
    n = body.num_formal_inputs - m
    k = len(body.outputs) - n
    in_axes = list(ctx.attr("scan_input_axes") or [0] * m)
    in_dirs = list(ctx.attr("scan_input_directions") or [0] * m)
    out_axes = list(ctx.attr("scan_output_axes") or [0] * k)
    out_dirs = list(ctx.attr("scan_output_directions") or [0] * k)
    for j in range(m):
        rank = len(ctx.shape(n + j))
        if not -rank <= in_axes[j] < rank:
            raise ctx.error(f"scan_input_axes[{j}]={in_axes[j]} out of range for rank {rank}")
        in_axes[j] %= rank
    return n, m, in_axes, in_dirs, out_axes, out_dirs


def drop_axis(shape, axis: int) -> tuple:
    return tuple(shape[:axis]) + tuple(shape[axis + 1:])


def scan_run(ctx, body):
    idx = range(ctx.num_inputs)
    return ctx.body_run(body, [ctx.dtype(i) for i in idx], input_values(ctx, idx))


def scan8_run(ctx, body):
    """Scan-8: the body's BodyRun (inputs after sequence_lens: states, scan inputs, captures)."""
    idx = range(1, ctx.num_inputs)
    return ctx.body_run(body, [ctx.dtype(i) for i in idx], input_values(ctx, idx))


def _scan8(ctx):
    """Scan-8: states [batch, ...], scan inputs [batch, seq, ...]; outputs keep both leading axes."""
    body = ctx.attr("body")
    m = int(ctx.attr("num_scan_inputs"))
    n = body.num_formal_inputs - m
    shapes = list(ctx.shapes[1:])
    batch = {s[0] for s in shapes[:n + m] if len(s)}
    seq = {s[1] for s in shapes[n:n + m] if len(s) > 1}
    if len(batch) != 1 or len(seq) != 1 or any(len(s) < 2 for s in shapes[n:n + m]):
        raise ctx.error(f"states and scan inputs need one batch size and one sequence length, got {shapes[:n + m]}")
    (b,), (t,) = batch, seq
    body_shapes = [tuple(s[1:]) for s in shapes[:n]] + [tuple(s[2:]) for s in shapes[n:n + m]] + shapes[n + m:]
    specs = specs_or_raise(scan8_run(ctx, body), body_shapes, ctx.node.name)
    return [((b,) + tuple(s), d) for s, d in specs[:n]] + [((b, t) + tuple(s), d) for s, d in specs[n:]]


@shape_rule("Scan")
def _scan(ctx):
    if ctx.version < 9:
        return _scan8(ctx)
    body = ctx.attr("body")
    n, m, in_axes, _, out_axes, _ = scan_layout(ctx, body)
    lengths = {ctx.shape(n + j)[in_axes[j]] for j in range(m)}
    if len(lengths) != 1:
        raise ctx.error(f"scan inputs have different lengths {sorted(lengths)} along their scan axes")
    steps = lengths.pop()
    shapes = list(ctx.shapes[:n]) + [drop_axis(ctx.shape(n + j), in_axes[j])
                                     for j in range(m)] + list(ctx.shapes[n + m:])
    specs = specs_or_raise(scan_run(ctx, body), shapes, ctx.node.name)
    for k, (s, t) in enumerate(specs[:n]):
        if s != tuple(ctx.shape(k)):
            raise ctx.error(f"state {k}: the body returns shape {s} for a state of shape {ctx.shape(k)}")
    out = list(specs[:n])
    for k, (s, t) in enumerate(specs[n:]):
        axis = out_axes[k]
        if not -(len(s) + 1) <= axis <= len(s):
            raise ctx.error(f"scan_output_axes[{k}]={axis} out of range for rank {len(s) + 1}")
        axis %= len(s) + 1
        out.append((tuple(s[:axis]) + (steps,) + tuple(s[axis:]), t))
    return out
