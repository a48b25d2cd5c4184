"""If, Loop and Scan: control flow over nested Programs (ONNX spec: If, Loop, Scan).

Each body is a Subgraph compiled into its own Program and run as a nested
Net (pooled_predictor/engine/control_flow.py, which says what is copied and
allocated per iteration). The node's inputs are its formal inputs followed by
the outer-scope values its bodies capture (importers/subgraph.py); the body
is fed both, by position. When the node's output shapes are static
(ops/shapes/control.py) the kernel copies the body's outputs into the planned
outputs; otherwise the Net calls `evaluate`, which runs the node and
allocates its outputs per forward (a Loop's setup, its body looked up and
bound, kept per input shapes: Loop.prepare_evaluate, Step.evaluate's memo).

Versions: every schema of each op (If and Loop 1..25, Scan 8..25). Later
versions add sequence, optional and element types, not new semantics for
tensors, except Scan-9 (axes and directions per input and output in place
of Scan-8's batch axis and sequence_lens; both are implemented).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx

from ...errors import PooledPredictorError
from ..registry import kernel
from ..shapes.control import branch_run, loop_run, scan8_run, scan_layout, scan_run


def _since(op: str, first: int) -> tuple:
    """The since_versions of the ONNX-domain `op` from `first` on, newest schema first, one version back at a
    time (onnx.defs.get_schema gives the schema in force at a version; listing every schema with its history
    took 8 ms per call at import)."""
    out, version = set(), onnx.defs.onnx_opset_version()
    while version >= first:
        try:
            schema = onnx.defs.get_schema(op, version, "")
        except onnx.defs.SchemaError:
            break
        if schema.since_version < first:
            break
        out.add(schema.since_version)
        version = schema.since_version - 1
    return tuple(sorted(out))


def _true(x) -> bool:
    return bool(np.asarray(x).reshape(-1)[0])


@kernel("If", since=_since("If", 1))
class If:
    """Run then_branch when cond (a one-element bool tensor) is true, else else_branch.

    Inputs: cond, then the captured outer values (both branches see them).
    Outputs: the chosen branch's outputs, copied into the node's outputs.
    """

    def __init__(self, ctx, *, then_branch, else_branch):
        self.runs = (branch_run(ctx, then_branch), branch_run(ctx, else_branch))
        self.taken = None if not ctx.is_static(0) else (0 if _true(ctx.value(0)) else 1)

    def prepare_run(self, cond, *captures, out):
        """__call__ for these arrays with each branch bound once (engine/control_flow.BodyRun.bind):
        a run reads cond, copies the captures into the chosen branch's input blobs, runs its calls
        and copies its outputs into `out`. A branch that rejects the captures' shapes runs the plain
        call (which raises that error); None (no prepared call) where a branch output is allocated
        per run."""
        shapes = [c.shape for c in captures]
        plans = []
        for k, run in enumerate(self.runs):
            bound = None
            if self.taken is None or k == self.taken:
                try:
                    bound = run.bind(shapes)
                except PooledPredictorError:
                    pass  # the branch rejects these shapes: choosing it raises that (plain call)
                else:
                    if bound.dynamic:
                        return None
            plans.append(None if bound is None else _BranchPlan(bound, captures, out))
        plain = partial(self.__call__, cond, *captures, out=out)

        def run_if():
            k = 0 if cond.item(0) else 1
            plan = plans[k]
            if plan is None:
                plain()
                return
            if not plan.bound.current():
                plan = plans[k] = _BranchPlan(plan.bound.rebind(), captures, out)
            for d, a in plan.copies:
                d[...] = a
            calls = plan.bound.direct
            if calls is None:
                plan.bound.run()
            else:  # the branch's calls run here (one Python call less), errors naming its node
                try:
                    for f in calls:
                        f()
                except PooledPredictorError:
                    raise
                except Exception as exc:
                    raise plan.bound.error(f, exc) from exc
            for o, r in plan.outs:
                o[...] = r

        return run_if

    def __call__(self, cond, *captures, out):
        run = self.runs[0 if _true(cond) else 1]
        run.invalidate()
        for o, r in zip(out, run.run(captures)):
            if o is not None:
                np.copyto(o, r)

    @classmethod
    def evaluate(cls, ctx, cond, *captures, then_branch, else_branch):
        """Run once and return freshly allocated outputs (shapes that depend on cond)."""
        run = branch_run(ctx, then_branch if _true(cond) else else_branch)
        run.invalidate()
        return [np.array(r) for r in run.run(captures)]


class _BranchPlan:
    """A branch bound at fixed captures and outputs: (body input blob, capture) and (output, body
    output) pairs, for If's prepared call. A branch output that passes a capture through (a branch
    `Identity(x)`, its Identity dropped: control_flow._alias_output_identities) is copied from the
    capture itself, and a capture no node of the branch reads is not copied in: one copy, not two."""

    __slots__ = ("bound", "copies", "outs")

    def __init__(self, bound, captures, out):
        self.bound = bound
        body, layout = bound.body, bound.layout
        name_of = dict(zip(body.fed, body.names))  # sub input index -> the branch's input blob name
        fed = [(i, d, a) for i, (d, a) in enumerate(zip(bound.inputs, captures)) if d is not None]
        capture_of = {id(d): a for _, d, a in fed}
        self.outs = [(o, capture_of.get(id(r), r)) for o, r in zip(out, bound.outputs) if o is not None]
        self.copies = [(d, a) for i, d, a in fed if layout.dynamic or layout.readers.get(name_of[i])]


_ROW_VIEWS_MAX = 4096  # a Loop's scan output of at most this many rows is stored through per-row views


class _LoopPlan:
    """A Loop body bound at fixed input shapes (engine/control_flow.Bound) and the pairs an iteration
    copies: the carried outputs fed back into the carried input blobs (through a snapshot where one
    is another carried input's blob, as a body that swaps two values has), the scan outputs stored
    at the iteration's index. Carried values keep their shapes (the caller checks)."""

    __slots__ = ("bound", "n", "dests", "scans", "snap", "back", "carried", "it", "cond_out", "rows", "scan_row_bytes")

    def __init__(self, bound, n_carried: int):
        ins, outs = bound.inputs, bound.outputs
        self.bound, self.n, self.rows = bound, n_carried, {}
        # the iteration number is written only where something reads it; a static condition is not read
        layout, it = bound.layout, ins[0]
        name = bound.body.names[bound.body.fed.index(0)]
        read = layout.dynamic or layout.readers.get(name) or any(o is it for o in outs)
        self.it = it if read else None
        self.cond_out = None if not outs[0].flags.writeable and bool(outs[0].reshape(-1)[0]) else outs[0]
        self.dests = ins[2:]  # the carried and captured values' input blobs (None: baked in)
        self.carried = ins[2:2 + n_carried]
        self.scans = outs[1 + n_carried:]
        self.scan_row_bytes = sum(r.nbytes for r in self.scans)
        dests = {id(d) for d in self.carried}
        self.snap, self.back = [], []
        for d, r in zip(self.carried, outs[1:1 + n_carried]):
            if r is d:
                continue
            if id(r) in dests:  # another carried input, overwritten by the feedback: read it first
                t = np.empty_like(r)
                self.snap.append((t, r))
                r = t
            self.back.append((d, r))

    def run(self, m, cond, rest, scan_out=None, row_views: bool = False) -> int:
        """Run the Loop (the spec's semantics, as run_loop): carried and captured inputs copied in once,
        then per iteration the iteration number written, the body's calls, the condition read, the
        scan outputs stored (into scan_out[j][i] where given, else appended to lists returned), the
        carried outputs fed back. The final carried values are left in `carried` (the body's input
        blobs). rest: the node's carried and captured inputs. Returns the iterations run, or
        (iterations, collected scans) without scan_out."""
        for d, a in zip(self.dests, rest):
            if d is not None:
                d[...] = a
        trips = None if m is None else int(m.item(0))
        keep = True if cond is None else bool(cond.item(0))
        it, cond_out, body, calls = self.it, self.cond_out, self.bound.run, self.bound.direct
        snap, back = self.snap, self.back
        if scan_out is not None:
            # with row_views (a prepared Loop, whose outputs are fixed), each output's rows as views made
            # once per output array: `row[...] = r` costs half of `o[i] = r`; a long output (a huge M
            # that the condition may end early), a 1-D one (rows of scalars) or one allocated per
            # forward (the views would cost what they save) is indexed instead
            stores = [(self._rows(o) if row_views and o.ndim > 1 and len(o) <= _ROW_VIEWS_MAX else o, r)
                      for o, r in zip(scan_out, self.scans) if o is not None]
        else:
            stores = None
            collected = [[] for _ in self.scans]
            appends = [(c.append, r) for c, r in zip(collected, self.scans)]
        if (trips is not None and it is None and cond_out is None and stores is not None and calls is not None
                and keep):
            return self._for_loop(trips, calls, stores)
        i = 0
        while keep and (trips is None or i < trips):
            if it is not None:
                it[...] = i
            if calls is not None:
                try:  # next to free unless raised (zero-cost on Python 3.11)
                    for f in calls:
                        f()
                except PooledPredictorError:
                    raise
                except Exception as exc:
                    raise self.bound.error(f, exc) from exc
            else:
                body()
            if cond_out is not None:
                keep = cond_out.item(0)
            if stores is not None:
                for rows, r in stores:
                    if type(rows) is list:
                        rows[i][...] = r
                    else:
                        rows[i] = r
            else:
                for add, r in appends:
                    add(r.copy())
            for t, r in snap:
                t[...] = r
            for d, r in back:
                d[...] = r
            i += 1
        return i if stores is not None else (i, collected)

    def _for_loop(self, trips: int, calls, stores) -> int:
        """run()'s iterations in the for-loop form (M known, no condition to read, the iteration number
        unread, the scan outputs stored in place, the body's calls run here): exactly max(M, 0) of them,
        with none of the checks of the general form per iteration."""
        views = [(rows, r) for rows, r in stores if type(rows) is list]
        indexed = [(o, r) for o, r in stores if type(o) is not list]
        snap, back = self.snap, self.back
        for i in range(trips):
            try:  # zero-cost on Python 3.11 unless raised
                for f in calls:
                    f()
            except PooledPredictorError:
                raise
            except Exception as exc:
                raise self.bound.error(f, exc) from exc
            for rows, r in views:
                rows[i][...] = r
            for o, r in indexed:
                o[i] = r
            for t, r in snap:
                t[...] = r
            for d, r in back:
                d[...] = r
        return max(trips, 0)

    def _rows(self, o) -> list:
        """o's rows (views along axis 0), kept per array (a prepared Loop's outputs are fixed)."""
        got = self.rows.get(id(o))
        if got is None or got[0] is not o:
            got = self.rows[id(o)] = (o, list(o))
        return got[1]


_PREALLOCATE_BYTES = 16 << 20  # a Loop run per forward allocates its scan outputs for M rows up to this


def _loop_plan(run, n_carried: int, rest) -> _LoopPlan | None:
    """The body bound for the shapes of `rest` (the carried and captured inputs) and its _LoopPlan, when the
    carried values keep their shapes and dtypes and no body output is allocated per run; else None (the
    generic iteration, which also raises what the body rejects where the spec would)."""
    try:
        bound = run.bind([(), ()] + [a.shape for a in rest])
    except PooledPredictorError:
        return None
    if bound.dynamic or bound.inputs[0] is None:
        return None
    for a, r in zip(rest[:n_carried], bound.outputs[1:1 + n_carried]):
        if r.shape != a.shape or r.dtype != a.dtype:
            return None
    plan = bound.cache.get(_LoopPlan)  # one per body layout, kept on its Bound (BodyRun.bind keeps that)
    if plan is None or plan.n != n_carried:
        plan = bound.cache[_LoopPlan] = _LoopPlan(bound, n_carried)
    return plan


def _evaluate_plan(plan: _LoopPlan, m, cond, rest) -> list:
    """run_loop's outputs, allocated, through a bound body: the scan outputs stored in place into M rows
    (cut to the iterations run) when they fit _PREALLOCATE_BYTES, else collected and stacked once (a huge M
    that the condition ends early, as exporters write a while loop); the final carried values copied."""
    trips = None if m is None else int(m.item(0))
    if trips is not None and 0 <= trips and trips * plan.scan_row_bytes <= _PREALLOCATE_BYTES:
        scans = [np.empty((trips,) + r.shape, r.dtype) for r in plan.scans]
        i = plan.run(m, cond, rest, scans)
        if i < trips:
            scans = [s[:i] for s in scans]
    else:
        i, collected = plan.run(m, cond, rest)
        scans = [np.stack(c) if c else np.empty((0,) + r.shape, r.dtype) for c, r in zip(collected, plan.scans)]
    return [np.array(v) for v in plan.carried] + scans


def _fast_loop(run, n_carried: int, m, cond, rest) -> list | None:
    """run_loop's outputs through a bound body (_loop_plan); None: use the generic iteration."""
    plan = _loop_plan(run, n_carried, rest)
    return None if plan is None else _evaluate_plan(plan, m, cond, rest)


def run_loop(run, n_carried: int, m, cond, rest, out=None) -> list | None:
    """The Loop semantics of the spec, over a BodyRun.

    Runs while (M absent or i < M) and (cond absent or cond): the body gets
    (i, cond, carried..., captures...) and returns (cond, carried..., scans...).
    The body's condition output ends the loop even when the node's cond is
    absent (the spec's "for loop" form calls it ignored; onnxruntime and onnx's
    reference evaluator stop on it, and so do we). Scan outputs stack along a
    new axis 0.
    Args:
        out: the node's preallocated outputs, or None to allocate them.
    Returns:
        The outputs when `out` is None.
    """
    if out is None:
        fast = _fast_loop(run, n_carried, m, cond, rest)
        if fast is not None:
            return fast
    carried, captures = list(rest[:n_carried]), list(rest[n_carried:])
    trips = None if m is None else int(np.asarray(m).reshape(-1)[0])
    keep = True if cond is None else _true(cond)
    n_scans = len(run.output_names) - 1 - n_carried
    collected = [[] for _ in range(n_scans)]
    it, c = np.zeros((), np.int64), np.zeros((), np.bool_)
    run.invalidate()
    i = 0
    while keep and (trips is None or i < trips):
        it[...], c[...] = i, keep
        outs = run.run([it, c, *carried, *captures], first=2 + n_carried)
        keep = _true(outs[0])
        carried = outs[1:1 + n_carried]
        for j, s in enumerate(outs[1 + n_carried:]):
            if out is None:
                collected[j].append(np.array(s))
            elif out[n_carried + j] is not None:
                out[n_carried + j][i] = s
        i += 1
    if out is not None:
        for o, v in zip(out, carried):
            if o is not None:
                np.copyto(o, v)
        return None
    results = [np.array(v) for v in carried]
    if n_scans and i == 0:
        shapes = [(), ()] + [v.shape for v in rest]
        specs = run.output_specs(shapes)[1 + n_carried:]
        results += [np.empty((0,) + (tuple(s[0]) if s else ()), s[1] if s else np.float32) for s in specs]
    else:
        results += [np.stack(c) for c in collected]
    return results


@kernel("Loop", since=_since("Loop", 1))
class Loop:
    """Generic loop: trip count M, condition cond, loop-carried values and scan outputs.

    Inputs: M (int64, optional), cond (bool, optional), v_initial..., then the
    captured outer values. Outputs: v_final..., scan_outputs... (each stacked
    over iterations along a new axis 0).
    """

    def __init__(self, ctx, *, body):
        self.run = loop_run(ctx, body)
        self.n_carried = body.num_formal_inputs - 2

    def prepare_run(self, m, cond, *rest, out):
        """__call__ for these arrays with the body bound once (engine/control_flow.BodyRun.bind, _LoopPlan):
        an iteration writes the iteration number, runs the body's calls, reads its condition, stores
        the scan outputs and feeds the carried ones back, building nothing. None (the plain call) where
        a body output is allocated per run."""
        n = self.n_carried
        try:
            bound = self.run.bind([(), ()] + [a.shape for a in rest])
        except PooledPredictorError:
            return None
        if bound.dynamic or bound.inputs[0] is None:
            return None
        holder = [_LoopPlan(bound, n)]
        scan_out = list(out[n:])
        finals = [(o, d) for o, d in zip(out[:n], holder[0].carried) if o is not None]

        def run_loop_prepared():
            plan = holder[0]
            if not plan.bound.current():
                plan = holder[0] = _LoopPlan(plan.bound.rebind(), n)
                finals[:] = [(o, d) for o, d in zip(out[:n], plan.carried) if o is not None]
            plan.run(m, cond, rest, scan_out, row_views=True)
            for o, d in finals:
                o[...] = d

        return run_loop_prepared

    def __call__(self, m, cond, *rest, out):
        run_loop(self.run, self.n_carried, m, cond, rest, out)

    @classmethod
    def evaluate(cls, ctx, m, cond, *rest, body):
        """Run once, allocating the outputs (trip count or carried shapes known only by running)."""
        return run_loop(loop_run(ctx, body), body.num_formal_inputs - 2, m, cond, rest)

    @classmethod
    def prepare_evaluate(cls, ctx, *, body):
        """(runner, guard) for Step.evaluate's memo: runner(m, cond, *rest) is evaluate() on the BodyRun looked
        up once for these input dtypes (the thread's, engine/control_flow.BodyRuns); guard(arrays) holds while
        the read-only captures it baked in as weights are the same arrays."""
        run = loop_run(ctx, body)
        n = body.num_formal_inputs - 2
        first = 2 + n
        values = [ctx.value(i) if ctx.is_static(i) else None for i in range(ctx.num_inputs)]
        baked = [(i, v) for i, v in enumerate(values)
                 if i >= first and isinstance(v, np.ndarray) and not v.flags.writeable]
        held = [None]  # the _LoopPlan for these shapes (the memo serves only arrays of them), or False

        def runner(m, cond, *rest):
            plan = held[0]
            if plan is None or (plan is not False and not plan.bound.current()):
                plan = held[0] = _loop_plan(run, n, rest) or False  # False: the generic iteration
            if plan is False:
                return run_loop(run, n, m, cond, rest)
            return _evaluate_plan(plan, m, cond, rest)

        def guard(arrays) -> bool:
            for i, a in baked:
                if arrays[i] is not a:
                    return False
            return True

        return runner, guard


def run_scan(run, layout, arrays, out=None) -> list | None:
    """The Scan semantics of the spec (Scan-9 and later) over a BodyRun.

    Every step feeds the states and slice t of each scan input (taken along
    its scan_input_axes, from the end when its direction is 1) and stores
    the body's scan outputs at index t along scan_output_axes (reversed when
    their direction is 1). Returns the outputs when `out` is None.
    """
    n, m, in_axes, in_dirs, out_axes, out_dirs = layout
    states, scans, captures = list(arrays[:n]), arrays[n:n + m], list(arrays[n + m:])
    views = [np.moveaxis(x, a, 0) for x, a in zip(scans, in_axes)]
    steps = views[0].shape[0] if views else 0
    n_out = len(run.output_names) - n
    collected = [[None] * steps for _ in range(n_out)]
    out_views = None
    if out is not None:
        out_views = [None if o is None else np.moveaxis(o, a % o.ndim, 0) for o, a in zip(out[n:], out_axes)]
    run.invalidate()
    for t in range(steps):
        slices = [v[steps - 1 - t] if d else v[t] for v, d in zip(views, in_dirs)]
        outs = run.run([*states, *slices, *captures], first=n + m)
        states = outs[:n]
        for k, s in enumerate(outs[n:]):
            at = steps - 1 - t if out_dirs[k] else t
            if out_views is None:
                collected[k][at] = np.array(s)
            elif out_views[k] is not None:
                out_views[k][at] = s
    if out is not None:
        for o, v in zip(out, states):
            if o is not None:
                np.copyto(o, v)
        return None
    results = [np.array(v) for v in states]
    for k, c in enumerate(collected):
        stacked = np.stack(c) if c else np.empty((0,), np.float32)
        results.append(np.moveaxis(stacked, 0, out_axes[k] % stacked.ndim))
    return results


@kernel("Scan", since=_since("Scan", 9))
class Scan:
    """Scan: a body run once per slice of its scan inputs, with state carried across steps.

    Inputs: initial states (N), scan inputs (num_scan_inputs), then the
    captured outer values. Outputs: final states (N), scan outputs (K).
    """

    def __init__(self, ctx, *, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None,
                 scan_output_axes=None, scan_output_directions=None):
        self.run = scan_run(ctx, body)
        self.layout = scan_layout(ctx, body)

    def __call__(self, *arrays, out):
        run_scan(self.run, self.layout, arrays, out)

    @classmethod
    def evaluate(cls, ctx, *arrays, body, **attrs):
        """Run once, allocating the outputs."""
        return run_scan(scan_run(ctx, body), scan_layout(ctx, body), arrays)


@kernel("Scan", since=8)
class Scan8:
    """Scan-8: a batch axis in front of every state and scan input, optional sequence_lens.

    Inputs: sequence_lens (int64 [batch], optional), states [batch, ...], scan
    inputs [batch, seq, ...] (`directions`: 1 scans that input from its last
    valid step), then the captured outer values. Batch item b runs the Scan-9
    semantics over its first sequence_lens[b] steps; scan outputs
    [batch, seq, ...] are zero past them.
    """

    def __init__(self, ctx, *, body, num_scan_inputs, directions=None):
        self.run = scan8_run(ctx, body)
        m = int(num_scan_inputs)
        self.n, self.m = body.num_formal_inputs - m, m
        k = len(body.outputs) - self.n
        self.layout = (self.n, m, [0] * m, list(directions or [0] * m), [0] * k, [0] * k)

    def __call__(self, lens, *arrays, out):
        scan8(self.run, self.layout, lens, arrays, out)

    @classmethod
    def evaluate(cls, ctx, lens, *arrays, body, num_scan_inputs, directions=None):
        """Run once, allocating the outputs (a body whose output shapes depend on data)."""
        kernel = cls.__new__(cls)
        cls.__init__(kernel, ctx, body=body, num_scan_inputs=num_scan_inputs, directions=directions)
        return scan8(kernel.run, kernel.layout, lens, arrays, None)


def scan8(run, layout, lens, arrays, out):
    n, m = layout[0], layout[1]
    batch, seq = arrays[n].shape[0], arrays[n].shape[1]
    results = []
    for b in range(batch):
        steps = seq if lens is None else int(lens[b])
        if not 0 <= steps <= seq:
            raise ValueError(f"sequence_lens[{b}] = {steps} outside [0, {seq}]")
        item = [a[b] for a in arrays[:n]] + [a[b, :steps] for a in arrays[n:n + m]] + list(arrays[n + m:])
        if out is None:
            results.append(run_scan(run, layout, item))
            continue
        views = [o[b] for o in out[:n]] + [o[b, :steps] for o in out[n:]]
        run_scan(run, layout, item, views)
        for o in out[n:]:
            o[b, steps:] = 0
    if out is not None:
        return None
    stacked = [np.stack([r[k] for r in results]) for k in range(n)]
    for k in range(n, len(results[0]) if results else n):
        full = np.zeros((batch, seq) + results[0][k].shape[1:], results[0][k].dtype)
        for b, r in enumerate(results):
            full[b, :r[k].shape[0]] = r[k]
        stacked.append(full)
    return stacked
