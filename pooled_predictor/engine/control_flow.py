"""Nested Programs for control-flow bodies (If branches, Loop and Scan bodies).

A body (an ir.Subgraph) is compiled once per device into its own Program,
cached on the Subgraph and shared read-only by every thread, like the outer
Program (program.program_of). It runs as a nested Net (`BodyRun`): one per
(thread, body, input dtypes, static captures), kept in a thread-local cache,
so a body Net is never used by two threads and is reused across iterations,
forwards and the outer Net's layouts.

Kernels reach bodies through their OpContext (`ctx.body_run`): the Net hands
its body runner (a `BodyRuns`, which knows how to make a Net) down the layout
pipeline, so neither ops/ nor program.py import this module or the Net.

Memory: the body Net plans its activations with memory_opt
(Optimization.MEMORY) in its own arena, laid out once per distinct set of
body input shapes (cached like any Net's layouts); an iteration allocates
nothing for its activations. What is copied or allocated, and why:

* every run copies the fed values (If: none but captures; Loop: the
  iteration number, the condition and the loop-carried values; Scan: the
  state and one slice of each scan input) into the body's input blobs, and
  the body's outputs are copied out (into the node's planned outputs when
  their shapes are static). The body's inputs are kept alive for the whole
  body run so that outputs never share their bytes and can be fed back.
* captures that are static (weights, values known at reshape: read-only
  arrays) become weights of the body Net, so its shape inference and
  constant folding see them; other captures are copied into the body's input
  blobs once per outer run (again only after a body re-layout). A Loop's or
  Scan's captures of the outer graph's weights are baked in earlier, at load,
  by the graph passes (passes/subgraphs.py), so that they fuse inside too.
* Loop outputs whose shape is known only by running (a trip count or
  condition fed at forward, carried values that change shape) are computed
  per forward by `evaluate`: scan outputs are then collected per iteration
  (one small array each) and stacked once at the end; the final carried values
  are copied out.
* a body output that is a node of the body whose own shape depends on data
  is allocated by that node per run (as in any Net).

Prepared runs (`BodyRun.bind`, a `Bound`): an If or Loop node whose output
shapes are static binds its bodies once per outer layout, as any kernel's
prepared call (engine/layout.py: _prepared): the body input blobs to copy
into, the output blobs to copy out of and the body's bound calls, looked up
once. A run then costs the copies and the body's calls; no list, tuple or
dict is built per run or per iteration. A Bound holds while its body Net
stays at its layout (`current`); the thread's BodyRun is shared by every
outer layout of the thread, so a prepared call checks that and binds again
when another layout used the body at other shapes.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections import OrderedDict
from functools import partial

import numpy as np

from ..ir import Subgraph, Value
from .program import program_of

_local = threading.local()
_NETS_PER_BODY = 8  # LRU bound per (thread, body): distinct dtypes / static-capture sets


_DTYPE_STRS: dict = {}


def _dtype_str(t) -> str:
    """np.dtype(t).str, kept per t (a key of the body cache, built per forward for nodes run per forward)."""
    try:
        return _DTYPE_STRS[t]
    except KeyError:
        return _DTYPE_STRS.setdefault(t, np.dtype(t).str)
    except TypeError:  # unhashable
        return np.dtype(t).str


def _is_static(array) -> bool:
    """Read-only arrays are weights or values fixed at reshape (the Net's convention)."""
    return isinstance(array, np.ndarray) and not array.flags.writeable


def _alias_output_identities(steps: list, output_names: list) -> tuple[list, list]:
    """Drop each Identity whose output is a body output read by no other node: that output names the
    Identity's input instead (the same values), so a run copies it once, when the caller reads it, not
    also through the Identity (a Loop body's `cond_out = Identity(cond_in)`, a scan output that
    repeats a carried one). Returns new lists (the Program's are shared)."""
    outs = set(output_names)
    consumed = {i for st in steps for i in st.node.inputs if i}
    renamed, kept = {}, []
    for st in steps:
        node = st.node
        if (node.op_type == "Identity" and node.inputs and node.inputs[0] and node.outputs[0] in outs
                and node.outputs[0] not in consumed):
            renamed[node.outputs[0]] = node.inputs[0]
        else:
            kept.append(st)
    return kept, [renamed.get(o, o) for o in output_names]


class BodyRun:
    """One body bound to a nested Net: feed inputs by position, run, read outputs.

    Args:
        sub: the Subgraph (formal inputs, then captures).
        device: the device of the enclosing Program.
        dtypes: dtype of each of sub.inputs, in order.
        static: body input name -> read-only value baked into the body as a weight.
        make_net: program, names to keep -> a Net under Optimization.MEMORY.
    """

    def __init__(self, sub: Subgraph, device: str, dtypes, static: dict, make_net):
        program = copy.copy(program_of(sub, device))
        program.graph = None  # the thread-local cache is keyed weakly by `sub`: hold no reference to it
        program.weights = {**program.weights, **static}
        program.inputs = [Value(v.name, np.dtype(t), None) for v, t in zip(sub.inputs, dtypes)
                          if v.name not in static]
        program.input_names = [v.name for v in program.inputs]
        program.steps, program.output_names = _alias_output_identities(program.steps, program.output_names)
        self.fed = [i for i, v in enumerate(sub.inputs) if v.name not in static]
        self.n_inputs = len(sub.inputs)
        self.names = program.input_names
        self.output_names = program.output_names
        self.net = make_net(program, self.names)
        self._fed_names = frozenset(self.names)
        self._pairs = list(zip(self.names, self.fed))  # (input blob name, index into run()'s arrays)
        self._layout = None
        self._shapes = None  # input shapes of the current layout
        self._bound = None  # the last bind()'s Bound, returned again while current at the same shapes

    def reshape(self, shapes) -> None:
        """Lay the body out for these shapes of its inputs (all of sub.inputs, in order)."""
        self._shapes = tuple(tuple(shapes[i]) for i in self.fed)
        self.net.reshape(dict(zip(self.names, self._shapes)))

    def output_specs(self, shapes) -> list:
        """[(shape, dtype) or None where the shape is known only by running] for each output."""
        self.reshape(shapes)
        layout = self.net.layout
        dyn = layout.dynamic_outputs
        return [None if o in dyn else (layout.blobs[o].shape, layout.blobs[o].dtype) for o in self.output_names]

    def static_output(self, i: int):
        """The value of output i when fixed at reshape (read-only), else None."""
        a = self.net.layout.blobs.get(self.output_names[i])
        return a if _is_static(a) else None

    def run(self, arrays, first: int = 0) -> list:
        """Run the body on `arrays` (one per sub input; static ones ignored).

        Inputs from index `first` on are copied only when the body was laid out
        anew since the last call (captures: constant over the iterations).
        Returns the body's output arrays, valid until the next run.
        """
        net = self.net
        shapes = tuple([arrays[i].shape for i in self.fed])
        if shapes != self._shapes or net.layout is None:
            net.reshape(dict(zip(self.names, shapes)))
            self._shapes = shapes
        layout = net.layout
        if layout is not self._layout:  # a new layout: copy every input, captures included
            self._layout = layout
            first = len(arrays)
        blobs = layout.blobs
        for n, i in self._pairs:
            if i < first:
                blobs[n][...] = arrays[i]  # np.copyto(casting="unsafe") at a third of its call cost
        net.run_in_place()
        blobs = layout.blobs  # dynamic nodes store their outputs here per run
        return [blobs[o].copy() if o in self._fed_names else blobs[o] for o in self.output_names]

    def invalidate(self) -> None:
        """Make the next run copy every input (a new outer run: captures may have changed)."""
        self._layout = None

    def bind(self, shapes) -> "Bound":
        """The body laid out for these shapes of all of sub.inputs (in order), as a Bound.

        Raises:
            ShapeInferenceError, KernelError, ResourceExhaustedError: as Net.reshape (the body
            rejects these shapes).
        """
        self._layout = None  # a generic run() after this copies every input again
        bound = self._bound
        if (bound is not None and bound.body.net.layout is bound.layout
                and bound.shapes == tuple([tuple(shapes[i]) for i in self.fed])):
            return bound  # a Loop run per forward binds every forward: its plan stays (Bound.cache)
        self.reshape(shapes)
        self._bound = bound = Bound(self, self.net.layout, self._shapes)
        return bound


class Bound:
    """A body's layout at fixed input shapes, looked up once (BodyRun.bind).

    Attributes:
        inputs: per input of the Subgraph, in order: the body's input blob to copy into, or None
            for one baked in as a weight (static captures, a Loop's incoming condition).
        outputs: per body output: its array, fixed for the layout (an arena view, a weight, or
            the input blob a pass-through output reads); None for one a data-dependent node
            allocates per run.
        cache: the callers' objects made for this layout (a Loop's iteration plan), dropped with it.
        dynamic: whether some output is allocated per run (prepared callers then run() the
            generic way).
        run: a zero-argument call running the body's calls on its blobs as they are (the inputs
            written by the caller); raises KernelError, ResourceExhaustedError as Net.forward,
            naming the body's node.
        direct: the body's calls, for a caller that runs them itself in a loop (one Python call
            less per call of the body: a Loop's iteration), or None where they must go through
            `run` (the body Net is profiled, or replays CUDA graphs). Such a caller turns an
            exception into the typed error with `error(call, exc)`.
    """

    __slots__ = ("body", "layout", "shapes", "inputs", "outputs", "dynamic", "calls", "run", "direct", "cache")

    def __init__(self, body: BodyRun, layout, shapes):
        self.body, self.layout, self.shapes = body, layout, shapes
        self.cache = {}
        blobs, fed = layout.blobs, dict(zip(body.fed, body.names))
        self.inputs = [blobs[fed[i]] if i in fed else None for i in range(body.n_inputs)]
        self.outputs = [None if o in layout.dynamic_outputs else blobs[o] for o in body.output_names]
        self.dynamic = any(o is None for o in self.outputs)
        self.calls = layout.run
        net = body.net
        # a body's layout runs as built (a body Net is not tiered: Net._build): its calls straight
        # through Net._run_calls (errors name the node), one call less per run than run_in_place
        self.run = partial(net._run_calls if layout.tier == "compiled" else net._run, layout.run)
        self.direct = (layout.run if layout.tier == "compiled" and net.profiler is None and net.graphs is None
                       else None)

    def error(self, call, exc: Exception):
        """The typed error (KernelError, ResourceExhaustedError) for `exc` raised by `call`, one of
        `direct`, naming its node (as Net.forward does)."""
        index = next(k for k, f in enumerate(self.layout.run) if f is call)
        return self.body.net.node_error(index, exc)

    def current(self) -> bool:
        """Whether the body Net is still at this layout (no other shapes used it since)."""
        return self.body.net.layout is self.layout

    def rebind(self) -> "Bound":
        """This Bound if current, else the body laid out at its shapes again (a new Bound)."""
        if self.body.net.layout is self.layout:
            return self
        body = self.body
        body._shapes = self.shapes
        body.net.reshape(dict(zip(body.names, self.shapes)))
        body._layout = None
        return Bound(body, body.net.layout, self.shapes)



class BodyRuns:
    """The body runner a Net hands down to If/Loop/Scan (OpContext.bodies).

    Args:
        make_net: program, names to keep -> a Net (given by engine/net.py, which sits
            above this module).
    """

    def __init__(self, make_net):
        self.make_net = make_net

    def __call__(self, sub: Subgraph, device: str, dtypes, values=None, constants=None) -> BodyRun:
        """This thread's BodyRun of `sub` for these input dtypes and static captures.

        Args:
            dtypes: dtype of each of sub.inputs.
            values: optional value of each of sub.inputs (None where unknown);
                read-only ones among the captures are baked in as weights.
            constants: formal input index -> the value it has on every run (a
                Loop body's incoming condition is always true), baked in too.
        """
        values = values or [None] * len(sub.inputs)
        first = sub.num_formal_inputs
        static = {v.name: a for v, a in zip(sub.inputs[first:], values[first:]) if _is_static(a)}
        for i, a in (constants or {}).items():
            static[sub.inputs[i].name] = a
        key = (device, tuple([_dtype_str(t) for t in dtypes]), tuple([(n, id(a)) for n, a in static.items()]))
        cache = getattr(_local, "runs", None)
        if cache is None:
            cache = _local.runs = weakref.WeakKeyDictionary()
        per = cache.get(sub)
        if per is None:
            per = cache[sub] = OrderedDict()
        entry = per.pop(key, None)
        if entry is None:
            entry = (BodyRun(sub, device, dtypes, static, self.make_net), static)  # static: keeps the ids valid
        per[key] = entry
        while len(per) > _NETS_PER_BODY:
            per.popitem(last=False)
        return entry[0]
