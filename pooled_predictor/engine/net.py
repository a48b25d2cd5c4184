"""Net: a Program bound to blobs (Caffe's Net: reshape(), forward(), blob_by_name()).

A Net owns its activation blobs and shares its Program's weights (read-only).
`reshape(input_shapes)` infers every blob's shape, evaluates what is already
known (Shape chains, constants), lays out memory once and binds each node to
its arrays; `forward()` then only runs bound kernels: it allocates no
activation arrays. Nodes whose output shape depends on data fed at forward time
(a Reshape whose target shape is a graph input, say; or a kernel registered with
dynamic_output=True: NonZero, Unique, NonMaxSuppression, Compress) and everything
downstream of them run in a slower mode that infers shapes and allocates per
forward (`_run_dynamic`); the rest stays planned in the arena, and the inputs of
those nodes are kept alive to the end of the run.

A Net is used by one thread at a time (the Predictor gives each thread its own).
"""

from __future__ import annotations

import enum
import math
import time
from collections import OrderedDict
from functools import partial
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from .. import budget
from ..errors import InputError, KernelError, PooledPredictorError, ResourceExhaustedError, UnknownBlobError
from ..ops.context import NotStatic, ScratchRef
from ..ops.layouts import TRANSFORM_OP, physical_shape
from ..ops.registry import lookup
from ..ops.shapes import get_rule
from ..ops.shapes.fused import DOMAIN
from ..ops.step import SHAPE_ONLY_OPS, Step
from .program import Program


class Optimization(enum.Enum):
    """fb-caffe-exts' names: NONE keeps every blob; MEMORY plans them into one arena."""

    NONE = "none"
    MEMORY = "memory"


def _shape_only_stub(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """A zero-byte array with the given shape, for ops that read only the shape."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape), writeable=False)


class Net:
    """A Program bound to its own activation blobs.

    Args:
        program: the compiled Program (weights shared with every other Net of it).
        input_shapes: optional shapes to reshape to at once (name -> tuple).
        memory_limit_bytes: budget of one layout (arena: activations and scratch;
            each node's outputs, checked before its kernel is set up); None:
            budget.default_memory_limit(). A reshape over it raises
            ResourceExhaustedError and leaves the Net at its previous shapes.
    Attributes:
        input_names / output_names: the graph's, in order.
    """

    def __init__(self, program: Program, input_shapes: Mapping[str, Sequence[int]] | None = None, *,
                 optimization: Optimization = Optimization.NONE, planner: str = "arena",
                 keep: Iterable[str] = (), cache_bytes: int = 256 << 20, memory_limit_bytes: int | None = None):
        if planner not in ("arena", "shared"):
            raise ValueError(f"planner must be 'arena' or 'shared' (fb-caffe-exts' baseline), got {planner!r}")
        self.program = program
        self.device = program.device
        self.optimization = Optimization(optimization)
        self.planner = planner
        self.keep = tuple(keep)
        self.cache_bytes = int(cache_bytes)
        self.memory_limit_bytes = budget.resolve_limit(memory_limit_bytes)
        self._declared = {v.name: v for v in program.inputs}
        # name -> (rank or None, ((axis, fixed size), ...)) for fast shape checks
        self._fixed_dims = {v.name: (None, ()) if v.shape is None else
                            (len(v.shape), tuple((i, d) for i, d in enumerate(v.shape) if isinstance(d, int)))
                            for v in program.inputs}
        self._default_shapes = None
        self._input_specs = [(v.name, v.dtype, *self._fixed_dims[v.name]) for v in program.inputs]
        self._layouts: "OrderedDict[tuple, _Layout]" = OrderedDict()
        self._default_invalid = False
        self.restored = False  # restore() has nothing to do: it ran, and no reshape since
        self.layouts_built = 0
        self.profiler = None  # a profiling.Profiler while profiling (enable_profiling)
        self.prepare_calls = PREPARE_CALLS  # kernels' prepared calls in the run (_prepared)
        self._activate(None, None)
        if input_shapes is not None:
            self.reshape(input_shapes)

    # ---- description ---------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return self.program.input_names

    @property
    def output_names(self) -> list[str]:
        return self.program.output_names

    @property
    def input_shapes(self) -> dict[str, tuple] | None:
        """The shapes the Net is currently laid out for (None before reshape)."""
        return None if self._input_shapes is None else dict(self._input_shapes)

    @property
    def output_shapes(self) -> dict[str, tuple | None]:
        """Output shapes at the current input shapes (None: known only after forward)."""
        dyn = self._dynamic_outputs()
        return {n: (self._blobs[n].shape if n in self._blobs and n not in dyn else None)
                for n in self.output_names}

    @property
    def blob_names(self) -> list[str]:
        """Names of the blobs that can be read (see blob_by_name), as the model names them."""
        if self._layout is None:
            return []
        readable, dynamic, typed = self._layout.readable, self._dynamic_outputs(), self._layout.typed
        hidden = self._layout.typed_names  # read by their model names (blob_by_name)
        names = [n for n in self._blobs if (n in readable or n in dynamic) and n not in hidden]
        return names + [n for n in typed if n not in self._blobs]

    @property
    def has_dynamic_shapes(self) -> bool:
        """True when some nodes' shapes depend on data and are inferred per forward."""
        return bool(self._dynamic)

    def blob_by_name(self, name: str) -> np.ndarray:
        """The Net's own array for a blob (valid until the next forward or reshape).

        Under Optimization.MEMORY only inputs, outputs, weights and the names
        in `keep` can be read: the bytes of other intermediates are reused.
        A value the kernel-type assignment keeps only in another layout (under
        NONE, an intermediate of an NCHW8c chain) comes back as a copy in the
        model's layout (ops/layouts.transform); its typed name ("v@NCHW8c")
        gives the Net's own blocked array.

        Raises:
            UnknownBlobError: no blob has this name, or MEMORY reused its bytes.
        """
        layout = self._layout
        if layout is not None and name in layout.typed:  # held in another layout only: the model's, copied
            from ..ops.layouts import DEFAULT_LAYOUT, transform

            typed, lay, logical = layout.typed[name]
            out = np.empty(logical, layout.blobs[typed].dtype)
            transform(layout.blobs[typed], lay, DEFAULT_LAYOUT, out)
            return out
        if layout is not None and name in layout.blobs:
            if name in layout.readable or name in self._dynamic_outputs():
                return layout.blobs[name]
            raise UnknownBlobError(
                f"blob {name!r} is not kept: under Optimization.MEMORY its bytes are reused by "
                f"later blobs; pass keep=[{name!r}] to read it")
        raise UnknownBlobError(f"no blob named {name!r}; outputs are {self.output_names}")

    def _dynamic_outputs(self) -> set:
        return {o for st in self._dynamic for o in st.node.outputs if o}

    @property
    def memory_plan(self):
        """The memory_opt Plan of the current layout (None under Optimization.NONE)."""
        return None if self._layout is None else self._layout.plan

    @property
    def memory_liveness(self):
        """The memory_opt Liveness the current plan was made from (None under NONE)."""
        return None if self._layout is None else self._layout.liveness

    @property
    def plan_seconds(self) -> float:
        """Seconds memory_opt took to plan the current layout (0 under NONE)."""
        return 0.0 if self._layout is None else self._layout.plan_seconds

    @property
    def arena_bytes(self) -> int:
        """Bytes of the current layout's arena (activations and workspace)."""
        return 0 if self._layout is None else self._layout.nbytes

    @property
    def activation_bytes(self) -> int:
        """Bytes of all activations if each had its own array (the naive total)."""
        return 0 if self._layout is None else self._layout.activation_bytes

    # ---- input checks --------------------------------------------------------
    def default_input_shapes(self) -> dict[str, tuple]:
        """Declared input shapes, symbolic or unknown dimensions taken as 1."""
        if self._default_shapes is None:
            self._default_shapes = {v.name: tuple(d if isinstance(d, int) else 1 for d in (v.shape or ()))
                                    for v in self.program.inputs}
        return dict(self._default_shapes)

    def check_shapes(self, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple]:
        """Validate input shapes against the model's declared ranks and fixed dims.

        Raises:
            InputError: missing or unknown input names, wrong rank, a fixed
                dimension that differs, or a negative dimension.
        """
        names = self.input_names
        if len(input_shapes) != len(names) or any(n not in input_shapes for n in names):
            unknown = [n for n in input_shapes if n not in self._declared]
            missing = [n for n in names if n not in input_shapes]
            raise InputError(f"inputs {sorted(input_shapes)} do not match the model's inputs {names}"
                             + (f"; unknown: {unknown}" if unknown else "")
                             + (f"; missing: {missing}" if missing else ""))
        shapes = {}
        for n in names:
            shape = tuple(map(int, input_shapes[n]))
            rank, fixed = self._fixed_dims[n]
            if rank is not None and len(shape) != rank or min(shape, default=0) < 0 \
                    or any(shape[i] != d for i, d in fixed):
                self._shape_error(n, shape)
            shapes[n] = shape
        return shapes

    def _shape_error(self, n: str, shape: tuple):
        decl = self._declared[n].shape
        if any(d < 0 for d in shape):
            raise InputError(f"input {n!r}: negative dimension in {shape}")
        if len(shape) != len(decl):
            raise InputError(f"input {n!r}: expected rank {len(decl)} (shape {_fmt(decl)}), "
                             f"got rank {len(shape)} (shape {shape})")
        bad = [i for i, (d, e) in enumerate(zip(shape, decl)) if isinstance(e, int) and d != e]
        raise InputError(f"input {n!r}: expected shape {_fmt(decl)}, got {shape} "
                         f"(dimension {bad[0]} must be {decl[bad[0]]})")

    def check_inputs(self, inputs) -> dict[str, np.ndarray]:
        """Normalize inputs (list in input order, dict by name, or one array) and check them.

        Returns:
            name -> ndarray.
        Raises:
            InputError: wrong count, names, rank, fixed dims or dtype.
        """
        if type(inputs) is dict and len(inputs) == len(self._input_specs):
            arrays = {}
            for name, dtype, rank, fixed in self._input_specs:  # the common case, cheaply
                a = inputs.get(name)
                if type(a) is not np.ndarray or (dtype is not None and a.dtype != dtype) \
                        or (rank is not None and a.ndim != rank):
                    break
                if fixed:
                    shape = a.shape
                    for i, d in fixed:
                        if shape[i] != d:
                            break
                    else:
                        arrays[name] = a
                        continue
                    break
                arrays[name] = a
            else:
                return arrays
        return check_inputs(self.program, inputs, self.check_shapes)  # anything else, with messages

    # ---- reshape -------------------------------------------------------------
    def reshape(self, input_shapes: Mapping[str, Sequence[int]] | None = None) -> None:
        """Infer every blob's shape for these input shapes and lay the blobs out once.

        Layouts are cached by input shapes (LRU, at most `cache_bytes` of
        activations beside the current one), so alternating shapes do not
        re-plan every call.

        Args:
            input_shapes: name -> shape; None: the declared shapes with symbolic dims as 1.
        Raises:
            InputError: shapes that do not fit the declared inputs.
            ShapeInferenceError: shapes the model's operators reject.
            ResourceExhaustedError: the layout needs more than memory_limit_bytes
                (the Net stays at its previous shapes).
        """
        current = self._input_shapes
        if input_shapes is not None and current is not None and len(input_shapes) == len(current) \
                and all(tuple(input_shapes.get(n, ())) == s for n, s in current.items()):
            return  # same shapes: nothing to do
        shapes = self.check_shapes(input_shapes if input_shapes is not None else self.default_input_shapes())
        self._reshape_checked(shapes)

    def _reshape_checked(self, shapes: dict[str, tuple]) -> None:
        if shapes == self._input_shapes:
            return
        self.restored = False
        key = tuple(shapes.items())
        layout = self._layouts.pop(key, None)
        if layout is None:
            layout = self._build_layout(shapes)
            self.layouts_built += 1
        self._layouts[key] = layout  # most recently used last
        self._activate(layout, shapes)
        self._trim_cache()

    def release(self) -> None:
        """Drop every layout (activations, arena): the next forward lays them out again."""
        self._layouts.clear()
        self._activate(None, None)

    def restore(self) -> None:
        """Release the memory of a large input's layout: fb-caffe-exts' guard after each pool job.

        A worker should not hold the memory of one large input until its next
        job. While every cached layout, the current one included, fits in
        `cache_bytes`, there is nothing to release (going back to the default
        shapes would keep the current layout cached): the Net keeps its shapes.
        Past the budget it goes back to the default input shapes and trims the
        cache; models whose default shapes are not valid inputs drop the
        current layout instead. Either way `restored` is True until the next
        reshape.
        """
        if self._layout is not None and sum(l.nbytes for l in self._layouts.values()) > self.cache_bytes:
            self._back_to_default()
        self.restored = True  # until the next reshape to other shapes

    def _back_to_default(self) -> None:
        """restore() past the budget: the default shapes, or no layout where they are not valid inputs."""
        if not self._default_invalid:
            try:
                if self._input_shapes != self._default_shapes or self._default_shapes is None:
                    self.reshape()
                if len(self._layouts) > 1:
                    self._trim_cache()
                return
            except PooledPredictorError:
                self._default_invalid = True  # e.g. a spatial size 1 the model cannot take
        self._activate(None, None)
        self._trim_cache()

    @property
    def cached_layouts(self) -> int:
        return len(self._layouts)

    def _trim_cache(self) -> None:
        current = tuple(self._input_shapes.items()) if self._input_shapes is not None else None
        total = sum(l.nbytes for k, l in self._layouts.items() if k != current)
        for k in list(self._layouts):
            if total <= self.cache_bytes:
                break
            if k != current:
                total -= self._layouts.pop(k).nbytes

    def _activate(self, layout, shapes) -> None:
        self._layout = layout
        self._input_shapes = shapes
        self._blobs = layout.blobs if layout is not None else {}
        self._run = layout.run if layout is not None else []
        self._run_nodes = layout.run_nodes if layout is not None else []
        self._dynamic = layout.dynamic if layout is not None else []

    def _build_layout(self, shapes: dict[str, tuple]) -> "_Layout":
        """Infer shapes, fold what is static, bind kernels, plan memory, bind arrays."""
        program, device = self.program, self.device
        shape: dict[str, tuple] = {}
        dtype: dict[str, np.dtype] = {}
        static: dict[str, np.ndarray] = dict(program.weights)
        for name, arr in static.items():
            shape[name], dtype[name] = arr.shape, arr.dtype
        for v in program.inputs:
            shape[v.name] = shapes[v.name]
            dtype[v.name] = v.dtype if v.dtype is not None else np.dtype(np.float32)
        planned: list[tuple[Step, Callable, list[ScratchRef]]] = []
        dynamic: list[Step] = []
        dynamic_values: set[str] = set()

        limit = self.memory_limit_bytes
        for step in program.steps:
            node = step.node
            ins = node.inputs
            if any(i in dynamic_values for i in ins if i):
                dynamic.append(step)
                dynamic_values.update(o for o in node.outputs if o)
                continue
            in_shapes = [shape[i] if i else None for i in ins]
            in_dtypes = [dtype[i] if i else None for i in ins]
            values = [static.get(i) if i else None for i in ins]
            present = [v for i, v in zip(ins, values) if i]
            if node.op_type in SHAPE_ONLY_OPS or all(v is not None for v in present):
                arrays = [v if v is not None or not i else _shape_only_stub(shape[i], dtype[i])
                          for i, v in zip(ins, values)]
                outs = step.evaluate(arrays, "cpu", limit)
                for o, arr in zip(node.outputs, outs):
                    if o:
                        arr.flags.writeable = False
                        static[o], shape[o], dtype[o] = arr, arr.shape, arr.dtype
                continue
            refs: list[ScratchRef] = []
            ctx = step.context(in_shapes, in_dtypes, values, device, refs.append)
            try:
                specs = step.infer(ctx)
                budget.check(sum(budget.nbytes_of(s, t) for s, t in specs if s is not None), limit,
                             f"node {node.name!r} ({node.op_type}) outputs")  # before the kernel's setup
                runner = step.bind(ctx)
            except NotStatic:  # the shape (or the kernel's setup) needs data fed at forward
                dynamic.append(step)
                dynamic_values.update(o for o in node.outputs if o)
                continue
            for o, (s, t) in zip(node.outputs, specs):
                if o:
                    shape[o], dtype[o] = s, t
            planned.append((step, runner, refs))

        # Values that must survive the run: outputs, kept blobs, inputs of dynamic nodes.
        keep = set(self.output_names) | set(self.keep)
        keep.update(i for st in dynamic for i in st.node.inputs if i and i not in static)
        planned, layout_of = self._assign_kernel_types(planned, shape, dtype, static, keep)
        activations = list(self.input_names) + [o for st, _, _ in planned for o in st.node.outputs if o]
        physical = {n: physical_shape(shape[n], layout_of[n]) if n in layout_of else shape[n] for n in activations}
        sizes = {n: _nbytes(physical[n], dtype[n]) for n in activations}

        liveness, plan_seconds, plan = None, 0.0, None
        scratch_offsets: dict[int, int] = {}
        parts, in_place = {}, set()  # Concat inputs stored in their output (_concats_in_place)
        if self.optimization is Optimization.MEMORY and self.planner == "arena" and CONCAT_IN_PLACE:
            parts, in_place = _concats_in_place(planned, shape, physical, dtype, layout_of, static,
                                                keep | set(self.input_names))
        if self.optimization is Optimization.MEMORY:
            t0 = time.perf_counter()
            plan, liveness = self._plan(planned, sizes, static, keep, parts, in_place)
            plan_seconds = time.perf_counter() - t0
            offsets = dict(plan.offsets)
            arena_bytes = _aligned(plan.arena_bytes)
            if self.planner == "arena":  # scratch was planned as values live at one step
                scratch_offsets = {id(r): offsets[f"{st.node.name}/scratch{j}"]
                                   for st, _, refs in planned for j, r in enumerate(refs)}
        else:
            offsets, arena_bytes = {}, 0
            for n in activations:  # NONE: every blob its own region of the arena
                offsets[n] = arena_bytes
                arena_bytes += _aligned(sizes[n])
        if not scratch_offsets:
            # NONE and the fb-caffe-exts baseline: scratch lives while its node runs,
            # so all nodes share one workspace after the blobs (as Caffe's col buffer).
            workspace = max((sum(_aligned(r.nbytes) for r in refs) for _, _, refs in planned), default=0)
            for _, _, refs in planned:
                at = arena_bytes
                for r in refs:
                    scratch_offsets[id(r)] = at
                    at += _aligned(r.nbytes)
            arena_bytes += workspace

        budget.check(arena_bytes, limit, f"the layout for input shapes {shapes} (arena: activations and scratch)")
        try:
            arena = _aligned_empty(arena_bytes)
        except MemoryError as exc:  # under the budget, but the system has less
            raise ResourceExhaustedError(f"cannot allocate the arena of {arena_bytes:,} bytes for input shapes "
                                         f"{shapes}", arena_bytes, limit) from exc
        blobs: dict[str, np.ndarray] = dict(static)
        for n in activations:
            at = offsets[parts[n][0]] + parts[n][1] if n in parts else offsets[n]
            blobs[n] = _view(arena, at, physical[n], dtype[n])
        run, plain, run_nodes = [], [], []
        for k, (step, runner, refs) in enumerate(planned):
            if k in in_place:  # its inputs were written in place: nothing to copy
                continue
            for r in refs:
                r.array = _view(arena, scratch_offsets[id(r)], r.shape, r.dtype)
            args = [blobs[i] if i else None for i in step.node.inputs]
            out = step.out_arg([blobs[o] if o else None for o in step.node.outputs])
            plain.append(partial(runner, *args, out=out))
            run.append(self.prepare_calls and _prepared(runner, args, out) or plain[-1])
            run_nodes.append(step.node)
        for step in dynamic:
            plain.append(partial(self._run_dynamic, step))
            run.append(plain[-1])
            run_nodes.append(step.node)
        input_ids = {id(blobs[n]): n for n in self.input_names}
        readers: dict[str, list[int]] = {}
        for j, f in enumerate(plain):  # the calls that take an input blob as an argument (forward_shared)
            for x in dict.fromkeys(map(id, f.args)) if isinstance(f, partial) else ():
                if x in input_ids:
                    readers.setdefault(input_ids[x], []).append(j)
        if self.optimization is Optimization.MEMORY:
            readable = set(static) | set(self.input_names) | (keep & set(blobs))
        else:
            readable = set(blobs)
        typed = {}
        for n, lay in layout_of.items():  # typed names (passes/assign.typed_name): value@layout
            base = n[:-len(lay) - 1] if n.endswith("@" + lay) else None
            if base and base not in blobs and n in readable:
                typed[base] = (n, lay, shape[n])
        layout = _Layout(blobs, run, run_nodes, dynamic, arena, plan, readable,
                         activation_bytes=sum(sizes.values()), typed=typed, typed_names=layout_of, plain=plain,
                         readers=readers)
        layout.liveness, layout.plan_seconds = liveness, plan_seconds
        return layout

    def _assign_kernel_types(self, planned, shape: dict, dtype: dict, static: dict, keep: set):
        """Stage: a kernel type per node and layout transforms between disagreeing neighbours.

        Returns (planned steps with transforms inserted and changed kernels bound,
        value -> layout for values not in the default layout). A model whose
        ops have one kernel type each comes back unchanged.
        """
        if not any(st.alternatives for st, _, _ in planned):
            return planned, {}
        from ..passes.assign import assign_kernel_types, supported_choices

        def context(step, refs=None):
            ins = step.node.inputs
            return step.context([shape[i] if i else None for i in ins], [dtype[i] if i else None for i in ins],
                                [static.get(i) if i else None for i in ins], self.device,
                                None if refs is None else refs.append)

        choices = [supported_choices(st.kernel, st.alternatives, context(st)) if st.alternatives else [st.kernel]
                   for st, _, _ in planned]
        sizes = {v: math.prod(s) for v, s in shape.items() if s is not None}
        # the plan depends on the candidates and sizes only: every thread's Net of a Program shares it
        key = (tuple(tuple(id(k) for k in c) for c in choices), tuple(sorted(keep)),
               tuple(sorted(sizes.items())))
        cache = self.program.assignments
        plan = cache.get(key)
        if plan is None:
            plan = assign_kernel_types([st.node for st, _, _ in planned], choices, static=set(static),
                                       outputs=keep, sizes=sizes)
            if len(cache) >= 64:
                cache.pop(next(iter(cache)))
            cache[key] = plan
        if not plan.changed:
            return planned, {}
        transform_kernel = lookup(TRANSFORM_OP, DOMAIN, 1, self.device)
        transform_rule = get_rule(TRANSFORM_OP, DOMAIN)

        def bind(step):
            for name in step.node.outputs:  # typed names: the logical shape of their value
                base = name.split("@", 1)[0]
                if name and name != base:
                    shape[name], dtype[name] = shape[base], dtype[base]
            refs = []
            ctx = context(step, refs)
            step.infer(ctx)
            return step, step.bind(ctx), refs

        out = []
        for i, ((st, runner, refs), k, node) in enumerate(zip(planned, plan.kernels, plan.nodes)):
            out += [bind(Step(t, transform_kernel, 1, transform_rule)) for t in plan.before.get(i, ())]
            out.append((st, runner, refs) if k is st.kernel and node is st.node
                       else bind(Step(node, k, st.version, st.rule, st.alternatives)))
        out += [bind(Step(t, transform_kernel, 1, transform_rule)) for t in plan.after]
        return out, plan.layouts

    def _plan(self, planned, sizes: dict, static: dict, keep: set, parts=None, skipped=()):
        """memory_opt plan of the activations (and scratch) of these bound steps.

        parts: value -> (the value whose buffer holds it, byte offset), for Concat inputs stored in
        their output (_concats_in_place): the planner sees one value, the output, written by the
        first of their producers and read wherever any of them is; the Concats (`skipped`, step
        indices) are not steps of the plan.
        """
        from memory_opt import Step as PlanStep
        from memory_opt import analyze, plan_arena, plan_shared_buffers

        parts = parts or {}
        holders = {h for h, _ in parts.values()}

        def buffer(name):
            return parts[name][0] if name in parts else name

        last_use: dict[str, int] = {}
        for k, (st, _, _) in enumerate(planned):
            if k in skipped:
                continue
            for i in st.node.inputs:
                if i:
                    last_use[buffer(i)] = k
        steps, sizes = [], dict(sizes)
        outputs = set(keep) | set(self.output_names)
        written: set = set()
        for k, (st, _, refs) in enumerate(planned):
            if k in skipped:
                continue
            node = st.node
            reads = [buffer(i) for i in dict.fromkeys(node.inputs) if i and i not in static]
            writes = []
            for o in node.outputs:
                if o:  # a later part of a buffer already written: it is read (kept alive), not written again
                    (reads if buffer(o) in written else writes).append(buffer(o))
                    written.add(buffer(o))
            reads = list(dict.fromkeys(reads))
            # the arena planner places scratch too; the fb baseline leaves it to one workspace
            scratch = [f"{node.name}/scratch{j}" for j in range(len(refs))] if self.planner == "arena" else []
            for name, r in zip(scratch, refs):
                sizes[name] = r.nbytes
            inplace = None
            out0 = node.outputs[0] if node.outputs else ""
            if out0 and out0 not in outputs and out0 not in parts and out0 not in holders and st.kernel.inplace:
                for idx in st.kernel.inplace:
                    cand = node.inputs[idx] if idx < len(node.inputs) else ""
                    if cand in parts:
                        continue
                    if cand and cand not in static and last_use.get(cand) == k and sizes.get(cand) == sizes[out0] \
                            and sum(buffer(i) == cand for i in node.inputs if i) == 1:
                        inplace = {out0: cand}
                        break
            # scratch: written and never read, so it lives only at this step
            steps.append(PlanStep(tuple(reads), tuple(writes + scratch), inplace))
        liveness = analyze(steps, sizes, inputs=self.input_names,
                           outputs=[o for o in outputs if o in sizes], inplace=self.planner != "shared")
        if self.planner == "shared":
            plan = plan_shared_buffers(liveness)
        else:
            plan = plan_arena(liveness)
        return plan, liveness

    def _run_dynamic(self, step: Step) -> None:
        """Run a node whose shapes depend on data: infer, allocate and run now."""
        arrays = [self._blobs[i] if i else None for i in step.node.inputs]
        outs = step.evaluate(arrays, self.device, self.memory_limit_bytes)
        for o, arr in zip(step.node.outputs, outs):
            if o:
                self._blobs[o] = arr

    # ---- profiling -----------------------------------------------------------
    def enable_profiling(self, profiler=None):
        """Time every node of each forward from now on (onnxruntime's enable_profiling).

        Args:
            profiler: a profiling.Profiler to record into (shared by several Nets);
                None: a new one.
        Returns:
            the Profiler (also `self.profiler`): table(), chrome_trace(), write_trace().
        """
        from .profiling import Profiler

        self.profiler = profiler if profiler is not None else Profiler()
        return self.profiler

    def disable_profiling(self) -> None:
        """Stop timing nodes; the Profiler keeps what it recorded."""
        self.profiler = None

    # ---- forward -------------------------------------------------------------
    def set_inputs(self, inputs) -> None:
        """Check the inputs, reshape if their shapes changed, and copy them into the input blobs."""
        self._feed(self.check_inputs(inputs))

    def _feed(self, arrays: dict[str, np.ndarray]) -> None:
        """Reshape to and copy in inputs already checked by check_inputs (the pool checks at submit)."""
        current = self._input_shapes
        if current is None:
            self._reshape_checked({n: a.shape for n, a in arrays.items()})
        else:
            for n, a in arrays.items():
                if a.shape != current[n]:
                    self._reshape_checked({n: a.shape for n, a in arrays.items()})
                    break
        blobs = self._blobs
        for n, a in arrays.items():
            np.copyto(blobs[n], a, casting="no")

    def forward_checked(self, arrays: dict[str, np.ndarray]) -> None:
        """forward() for inputs that check_inputs() has already accepted (no second check)."""
        self._feed(arrays)
        self.forward()

    def forward_shared(self, inputs) -> None:
        """forward() reading the caller's input arrays in place: they are not copied into the Net.

        The kernels that read an input get the caller's array instead of the
        Net's input blob, for this call only (Paddle's share_external_data);
        the other nodes keep their prepared calls. The arrays must stay
        unchanged until this returns; afterwards the Net's input blobs do not
        hold them.

        Raises:
            InputError: as forward(), and for arrays that are not C-contiguous.
        """
        arrays = self.check_inputs(inputs)
        for n, a in arrays.items():
            if not a.flags.c_contiguous:
                raise InputError(f"input {n!r}: a shared input must be C-contiguous")
        self._reshape_to(arrays)
        self._forward_reading(arrays)

    def forward_checked_shared(self, arrays: dict[str, np.ndarray]) -> None:
        """forward_checked() reading large inputs in place (forward_shared), copying the rest.

        For inputs check_inputs() has already accepted (the pool's jobs): an
        array of at least SHARED_INPUT_MIN_BYTES is read in place when it is
        C-contiguous, aligned and of the input blob's dtype; any other is copied
        into the Net as forward_checked() does.
        """
        self._reshape_to(arrays)
        blobs = self._blobs
        shared = {}
        for n, a in arrays.items():
            if a.nbytes >= SHARED_INPUT_MIN_BYTES and a.flags.c_contiguous and a.flags.aligned \
                    and a.dtype == blobs[n].dtype:
                shared[n] = a
            else:
                np.copyto(blobs[n], a, casting="no")
        if shared:
            self._forward_reading(shared)
        else:
            self.forward()

    def _reshape_to(self, arrays: dict[str, np.ndarray]) -> None:
        current = self._input_shapes
        if current is None or any(a.shape != current[n] for n, a in arrays.items()):
            self._reshape_checked({n: a.shape for n, a in arrays.items()})

    def _forward_reading(self, arrays: dict[str, np.ndarray]) -> None:
        """forward() with the nodes that read these inputs bound to the given arrays for this call
        (their plain calls, arguments swapped; layout.readers lists them) and the dynamic nodes,
        which look blobs up by name, seeing them too."""
        layout = self._layout
        swap = {id(layout.blobs[n]): a for n, a in arrays.items()}
        run = list(layout.run)
        for j in sorted({j for n in arrays for j in layout.readers.get(n, ())}):
            f = layout.plain[j]
            run[j] = partial(f.func, *[swap.get(id(x), x) for x in f.args], **f.keywords)
        self._run = run
        if layout.dynamic:
            self._blobs = {**layout.blobs, **arrays}
        try:
            self.forward()
        finally:
            if layout.dynamic:  # what the dynamic nodes stored, kept where blob_by_name looks
                for step in layout.dynamic:
                    for o in step.node.outputs:
                        if o and o in self._blobs:
                            layout.blobs[o] = self._blobs[o]
            self._run, self._blobs = layout.run, layout.blobs

    def forward(self, inputs=None) -> None:
        """Run the net (Caffe's ForwardPrefilled when `inputs` is None).

        Args:
            inputs: list (input order), dict name -> array, or a single array;
                None runs on the input blobs as they are.
        Raises:
            InputError: inputs that do not fit (count, names, rank, dims, dtype).
            ShapeInferenceError: shapes the operators reject.
            KernelError: a kernel failed; the message names the node.
        """
        if inputs is not None:
            self.set_inputs(inputs)
        elif self._input_shapes is None:
            raise InputError("forward() with no inputs before any reshape: feed inputs first")
        i = 0
        run = self._run
        try:
            if self.profiler is not None:
                clock, times = time.perf_counter_ns, []
                for f in run:
                    t0 = clock()
                    f()
                    times.append((t0, clock()))
                    i += 1
                self.profiler.add_forward(self._run_nodes, times)
            else:
                for f in run:
                    f()
                    i += 1
        except PooledPredictorError:
            raise
        except Exception as exc:
            node = self._run_nodes[i]
            if isinstance(exc, MemoryError):
                raise ResourceExhaustedError(f"node {node.name!r} ({node.op_type}) ran out of memory: {exc}") from exc
            raise KernelError(f"node {node.name!r} ({node.op_type}) failed: {type(exc).__name__}: {exc}") from exc


def check_inputs(program: Program, inputs, check_shapes=None) -> dict[str, np.ndarray]:
    """Normalize inputs to name -> ndarray and check count, names, dtype (and shapes).

    Args:
        program: the compiled Program (its declared inputs).
        inputs: a list/tuple in input order, a dict name -> array, or one array
            when the model has one input.
        check_shapes: optional callable(name -> shape) that checks ranks and dims.
    Raises:
        InputError: the message names the input and what was expected.
    """
    declared = program.inputs
    names = program.input_names
    if isinstance(inputs, dict) and len(inputs) == len(names) and all(n in inputs for n in names):
        items = [(n, inputs[n]) for n in names]  # the common case, checked cheaply
    elif isinstance(inputs, Mapping):
        unknown = [n for n in inputs if n not in names]
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            raise InputError(f"got inputs {sorted(map(str, inputs))}, the model takes {names}"
                             + (f"; unknown: {unknown}" if unknown else "")
                             + (f"; missing: {missing}" if missing else ""))
        items = [(n, inputs[n]) for n in names]
    else:
        if _is_array(inputs):
            inputs = [inputs]
        if not isinstance(inputs, (list, tuple)):
            raise InputError(f"inputs must be a list, a dict or an array, not {type(inputs).__name__}")
        if len(inputs) != len(names):
            raise InputError(f"the model takes {len(names)} input(s) {names}, got {len(inputs)}")
        items = list(zip(names, inputs))
    arrays = {}
    for (n, a), v in zip(items, declared):
        if type(a) is not np.ndarray:
            if not _is_array(a):
                raise InputError(f"input {n!r} must be an array, not {type(a).__name__}")
            a = np.asarray(a)
        if v.dtype is not None and a.dtype != v.dtype:
            raise InputError(f"input {n!r}: expected dtype {v.dtype}, got {a.dtype}")
        arrays[n] = a
    if check_shapes is not None:
        check_shapes({n: a.shape for n, a in arrays.items()})
    return arrays


class _Layout:
    """Everything a Net binds for one set of input shapes."""

    __slots__ = ("blobs", "run", "plain", "run_nodes", "dynamic", "arena", "plan", "readable", "activation_bytes",
                 "liveness", "plan_seconds", "typed", "typed_names", "readers")

    def __init__(self, blobs, run, run_nodes, dynamic, arena, plan, readable, activation_bytes, typed=None,
                 typed_names=(), plain=None, readers=None):
        self.blobs, self.run, self.run_nodes, self.dynamic = blobs, run, run_nodes, dynamic
        # run: each node's call, prepared where its kernel can (_prepared); plain: runner(*args, out=...)
        # partials, whose arguments forward_shared swaps
        self.plain = run if plain is None else plain
        self.readers = readers or {}  # input name -> indices of the calls that read its blob
        self.arena, self.plan, self.readable = arena, plan, readable
        self.activation_bytes = activation_bytes
        self.liveness, self.plan_seconds = None, 0.0
        # a value held only in another layout: model name -> (its typed blob, layout, logical shape)
        self.typed = typed or {}
        self.typed_names = frozenset(typed_names)  # every value stored in another layout (v@NCHW8c)

    @property
    def nbytes(self) -> int:
        return int(self.arena.nbytes)


CONCAT_IN_PLACE = True
"""Under Optimization.MEMORY (arena planner), layouts built from now on store the inputs of a Concat
in its output where that is one contiguous range per input (_concats_in_place); False: every
Concat copies (its inputs planned as values of their own)."""


def _concats_in_place(planned, shape: dict, physical: dict, dtype: dict, layout_of: dict, static: dict,
                      pinned: set) -> tuple[dict, set]:
    """The Concat nodes whose inputs can be written straight into their output, and where.

    As TensorRT's and OpenVINO's concat elimination: each producer writes its slice of the
    Concat's output, and the Concat copies nothing. A Concat qualifies
    when its inputs' arrays are consecutive ranges of its output's array: they agree with the
    output on every physical axis but one, whose sizes add up to the output's, and all axes
    before it have size 1 (so: batch 1 for a channel Concat, in NCHW or NCHW8c; in a blocked
    layout every input's channels a multiple of the block, so no padding lanes in between).
    Its inputs must be distinct values, each written by a planned node, none a graph input or
    output, kept, read by a node with a data-dependent shape, or part of another such Concat,
    and its output no part of one. Bits: the same (the same values, never copied).

    Returns:
        (value -> (the Concat output holding it, byte offset), indices of those Concat steps).
    """
    from ..ops.layouts import DEFAULT_LAYOUT, block_of

    produced = {o for st, _, _ in planned for o in st.node.outputs if o}
    parts: dict[str, tuple[str, int]] = {}
    holders: set = set()
    steps: set = set()
    for k, (st, _, refs) in enumerate(planned):
        node = st.node
        if node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or refs or len(node.outputs) != 1:
            continue
        out, ins = node.outputs[0], list(node.inputs)
        if not out or out in pinned or out in parts or len(ins) < 2 or len(set(ins)) != len(ins) \
                or dtype[out] == object:
            continue
        if any(not i or i in static or i in pinned or i in parts or i in holders or i not in produced
               or dtype[i] != dtype[out] for i in ins):
            continue
        po = physical[out]
        pis = [physical[i] for i in ins]
        if any(len(p) != len(po) for p in pis) or 0 in po:
            continue
        axes = {a for p in pis for a in range(len(po)) if p[a] != po[a]}
        if len(axes) != 1:
            continue
        (a,) = axes
        if sum(p[a] for p in pis) != po[a] or math.prod(po[:a]) != 1:
            continue
        lay = layout_of.get(out, DEFAULT_LAYOUT)
        if lay != DEFAULT_LAYOUT and (lay == "NHWC" or any(shape[i][1] % block_of(lay) for i in ins)
                                      or any(layout_of.get(i, DEFAULT_LAYOUT) != lay for i in ins)):
            continue
        at = 0
        for i in ins:
            parts[i] = (out, at)
            at += _nbytes(physical[i], dtype[i])
        holders.add(out)
        steps.add(k)
    return parts, steps


SHARED_INPUT_MIN_BYTES = 1 << 20
"""forward_checked_shared reads an input array in place from this size up (bytes). A node that reads
the caller's array runs its kernel's plain call, not its prepared one (net.py: _prepared), which costs
20-85 us more on the stem convolutions measured; copying costs about that below a MiB (MobileNetV2's
588 KiB input: 24 us hot, the pool's throughput the same either way; PP-OCR rec's 180 KiB: 0.99x) and
more above (PP-OCR det's 3.5 MiB: 0.36 ms hot, 0.75-1.5 ms in the pool's workers; its throughput
through the pool, 2 workers, +1.1%)."""

PREPARE_CALLS = True
"""Nets created from now on run each node through its kernel's prepare_run() where it has one
(Net.prepare_calls); False: runner(*inputs, out=...) every time (the same bits: tests/test_prepared.py)."""


def _prepared(runner, args: list, out):
    """The kernel's prepared call for these arrays, or None.

    A kernel may define prepare_run(*inputs, out) (for a function kernel, an attribute of the
    function, called with its bound attributes as keywords): called once when the Net binds
    its arrays, it returns a zero-argument callable that does what runner(*inputs, out=out)
    does for exactly those arrays, with the per-call Python work (views, argument lists,
    numba's type dispatch: compiled.bound) done ahead, or None where it cannot. The
    arrays stay fixed until the next reshape, which binds again (Paddle-Lite's
    PrepareForRun before Run).
    """
    if isinstance(runner, partial):
        prepare = getattr(runner.func, "prepare_run", None)
        return prepare(*runner.args, *args, out=out, **runner.keywords) if prepare is not None else None
    prepare = getattr(runner, "prepare_run", None)
    return prepare(*args, out=out) if prepare is not None else None


def _nbytes(shape, dtype) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize


def _aligned_empty(nbytes: int, alignment: int = 64) -> np.ndarray:
    """An uninitialized byte buffer whose start is aligned to `alignment` bytes."""
    raw = np.empty(nbytes + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes]


def _view(arena: np.ndarray, offset: int, shape, dtype) -> np.ndarray:
    n = _nbytes(shape, dtype)
    if dtype == object:  # object arrays cannot live in raw bytes
        return np.empty(shape, dtype)
    return arena[offset:offset + n].view(dtype).reshape(shape)


def _is_array(x) -> bool:
    return isinstance(x, np.ndarray) or (hasattr(x, "__array__") and hasattr(x, "shape")
                                         and hasattr(x, "dtype"))


def _aligned(n: int, alignment: int = 64) -> int:
    return (n + alignment - 1) // alignment * alignment


def _fmt(shape) -> str:
    return "(" + ", ".join(str(d) if d is not None else "?" for d in shape) + ")"
