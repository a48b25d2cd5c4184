"""Step: one node bound to its kernel and shape rule (the unit a Program lists and a Net runs).

A Step infers its outputs' shapes (the op's shape rule over an OpContext),
binds its kernel to those shapes (runner(*inputs, out=...)) and can run
once on concrete arrays (`evaluate`: constants folded at compile, values
known at reshape, nodes whose output shape depends on data). Passes that
evaluate static values use it too (passes/analysis.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from .. import budget
from ..errors import KernelError, PooledPredictorError, ResourceExhaustedError, ShapeInferenceError
from ..ir import Node
from .context import NotStatic, OpContext
from .registry import KernelDef
from .widen import Widened, needs_widening

# Ops whose output depends only on the *shape* of their input, never its data:
# once shapes are known at reshape, their outputs are static values.
SHAPE_ONLY_OPS = frozenset({"Shape", "Size"})
# Ops that must never be folded or evaluated early (their output is not a
# function of their inputs).
NONDETERMINISTIC_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform",
                                  "RandomUniformLike", "Multinomial", "Bernoulli"})


@dataclass
class Step:
    """One node bound to its kernel and shape rule.

    Attributes:
        node: the Node (names of inputs/outputs, attributes).
        kernel: the KernelDef for the program's device.
        version: ONNX schema since_version at the model's opset.
        rule: the shape rule, rule(OpContext) -> [(shape, dtype), ...].
        alternatives: kernels of other kernel types (layouts) for the
            assignment pass (passes/assign.py) to choose from at reshape.
    """

    node: Node
    kernel: KernelDef
    version: int
    rule: Callable
    alternatives: tuple = ()

    def context(self, shapes, dtypes, values=None, device="cpu", scratch=None, bodies=None) -> OpContext:
        return OpContext(self.node, self.version, shapes, dtypes, values, device, scratch, bodies)

    def infer(self, ctx: OpContext) -> list[tuple[tuple, np.dtype]]:
        """Output (shape, dtype) per output; None for absent ones.

        Raises:
            ShapeInferenceError: the rule rejects the shapes (any error of a rule
                is turned into one naming the node, the original as __cause__).
            NotStatic: the kernel has a data-dependent output shape (after the
                rule has checked the input types), or the rule needs a value
                known only at forward.
        """
        try:
            specs = self.rule(ctx)
        except (PooledPredictorError, NotStatic):
            raise
        except Exception as exc:
            raise self.typed_error(exc, "shape inference") from exc
        if self.kernel.dynamic_output:
            raise NotStatic(f"node {self.node.name!r} ({self.node.op_type}): output shapes depend on data")
        n = len(self.node.outputs)
        if len(specs) < n:
            raise ctx.error(f"shape rule returned {len(specs)} outputs for {n}")
        specs = [(tuple(int(d) for d in s), np.dtype(t)) if name else (None, None)
                 for (s, t), name in zip(specs, self.node.outputs)]
        for (shape, _), name in zip(specs, self.node.outputs):
            if name and any(d < 0 for d in shape):
                raise ctx.error(f"inferred a negative dimension {shape} for {name!r}")
        ctx.out_shapes = [s for s, _ in specs]
        ctx.out_dtypes = [t for _, t in specs]
        return specs

    def bind(self, ctx: OpContext) -> Callable:
        """The callable that runs this node: runner(*inputs, out=out).

        Inputs or outputs of a small float type (bfloat16, float8: ml_dtypes)
        run through float32 copies (ops/widen.py).

        Raises:
            KernelError: the kernel's setup failed (naming the node, the original
                as __cause__); NotStatic: its setup needs data fed at forward.
        """
        if not self.kernel.dynamic_output and needs_widening(self.node.op_type, ctx):
            return Widened(ctx, self._bind_kernel, self.out_arg)
        return self._bind_kernel(ctx)

    def _bind_kernel(self, ctx: OpContext) -> Callable:
        k = self.kernel
        if k.is_class:
            try:
                return k.impl(ctx, **self.node.attrs)
            except (PooledPredictorError, NotStatic):
                raise
            except Exception as exc:
                raise self.typed_error(exc, "kernel setup") from exc
        return partial(k.impl, **self.node.attrs) if self.node.attrs else k.impl

    def typed_error(self, exc: BaseException, stage: str) -> PooledPredictorError:
        """Our error for an unforeseen one raised at `stage` of this node (the caller chains it)."""
        what = f"node {self.node.name!r} ({self.node.op_type}): {stage} failed: {type(exc).__name__}: {exc}"
        if isinstance(exc, MemoryError):
            return ResourceExhaustedError(what)
        if stage == "shape inference":
            return ShapeInferenceError(what)
        return KernelError(what)

    def out_arg(self, outs: list):
        """`out` for the kernel: one array, or a tuple padded with None to the schema's outputs."""
        if not self.kernel.multi_output:
            return outs[0]
        missing = self.kernel.num_outputs - len(outs)
        return tuple(outs) + (None,) * missing if missing > 0 else tuple(outs)

    def evaluate(self, arrays: list, device: str = "cpu", memory_limit: int | None = None, bodies=None,
                 memo: list | None = None) -> list:
        """Run the node once on concrete arrays, allocating its outputs.

        Used for folding constants, for values known at reshape time, and for
        nodes whose output shape depends on data (computed per forward). The
        outputs, then outputs and scratch, are checked against the memory
        budget before the kernel is set up and before anything is allocated.

        With `memo` (a list the caller keeps for this node, per thread: Layout.run_dynamic),
        what the shape rule and the kernel's setup built (the output shapes and dtypes, the
        bound kernel, its scratch) is kept and reused by a later call whose inputs have the
        same shapes and dtypes and the same values wherever the rule or the setup read one
        (OpContext.track_reads): a node downstream of a data-dependent shape is then set up
        once per distinct shape, not once per forward. Only setups that read small values
        (MEMO_VALUE_MAX elements at most: shapes, axes, counts) are kept; one that read a
        large value (indices, data) is set up per call as before. The outputs are allocated
        per call (they may be returned to the caller). A control-flow node (own evaluate) is kept
        only through its kernel's `prepare_evaluate(ctx, **attrs)`, which gives (runner, guard):
        runner(*arrays) returns the outputs, and the entry serves later arrays of the same shapes
        and dtypes while guard(arrays) holds (Loop: the body bound once, its baked weights the same
        arrays); their bodies keep their own layouts (engine/control_flow.py).

        Args:
            memory_limit: bytes; None: budget.default_memory_limit().
            bodies: the body runner for If/Loop/Scan (OpContext.bodies); None outside a Net.
            memo: the node's kept setups (MemoEntry), most recent first; None: keep nothing.
        Raises:
            ResourceExhaustedError: outputs and scratch over the budget.
            NotStatic: a control-flow node evaluated with no body runner.
        """
        shapes = [None if a is None else a.shape for a in arrays]
        dtypes = [None if a is None else a.dtype for a in arrays]
        if memo:
            entry = _lookup(memo, shapes, dtypes, arrays)
            if entry is not None:
                return entry.run(self, arrays)
        limit = budget.default_memory_limit() if memory_limit is None else memory_limit
        own = getattr(self.kernel.impl, "evaluate", None)
        if self.kernel.dynamic_output or own is not None:
            # a kernel that allocates its outputs (NonZero...) or sizes them by running (Loop, If, Scan)
            ctx = self.context(shapes, dtypes, arrays, device, bodies=bodies)
            if memo is not None and own is None:
                ctx.track_reads()
            try:
                if self.kernel.dynamic_output:
                    return self._evaluate_dynamic(ctx, arrays, memo if own is None else None)
                prepare = None if memo is None else getattr(self.kernel.impl, "prepare_evaluate", None)
                got = None if prepare is None else prepare(ctx, **self.node.attrs)
                if got is not None:  # a control-flow node's setup for these shapes, kept while guard(arrays)
                    outs = got[0](*arrays)
                    memo.insert(0, MemoEntry(specs=None, runner=got[0], own=True, guard=got[1], shapes=list(shapes),
                                             dtypes=list(dtypes)))
                    del memo[MEMO_ENTRIES:]
                    return outs
                return own(ctx, *arrays, **self.node.attrs)
            except (PooledPredictorError, NotStatic):
                raise
            except Exception as exc:
                raise self.typed_error(exc, "kernel") from exc
        refs: list = []
        ctx = self.context(shapes, dtypes, arrays, device, refs.append, bodies)
        if memo is not None:
            ctx.track_reads()
        specs = self.infer(ctx)
        what = f"node {self.node.name!r} ({self.node.op_type})"
        out_bytes = sum(budget.nbytes_of(s, t) for s, t in specs if s is not None)
        budget.check(out_bytes, limit, f"{what} outputs")
        runner = self.bind(ctx)
        budget.check(out_bytes + sum(r.nbytes for r in refs), limit, f"{what} outputs and scratch")
        try:
            for r in refs:  # kernels read scratch arrays when called, never when set up
                r.array = np.empty(r.shape, r.dtype)
            outs = [np.empty(s, t) if s is not None else None for s, t in specs]
            runner(*arrays, out=self.out_arg(outs))
        except PooledPredictorError:
            raise
        except Exception as exc:
            raise self.typed_error(exc, "kernel") from exc
        if memo is not None:
            _keep(memo, ctx, shapes, dtypes, arrays, MemoEntry(specs=specs, runner=runner))
        return outs

    def _evaluate_dynamic(self, ctx: OpContext, arrays: list, memo: list | None = None) -> list:
        """Run a kernel that allocates its outputs; check them against the rule's dtypes."""
        specs = self.rule(ctx)  # checks the input types; gives the output dtypes
        runner = self.bind(ctx)
        if memo is not None:
            _keep(memo, ctx, ctx.shapes, ctx.dtypes, arrays, MemoEntry(specs=specs, runner=runner, dynamic=True))
        return self._dynamic_outputs(specs, runner(*arrays))

    def _dynamic_outputs(self, specs, outs) -> list:
        """A dynamic-output kernel's outputs as a list, each checked against the rule's dtype."""
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        result = []
        for k, name in enumerate(self.node.outputs):
            if not name:
                result.append(None)
                continue
            arr = np.asarray(outs[k])
            if arr.dtype != specs[k][1]:
                raise KernelError(f"node {self.node.name!r} ({self.node.op_type}): output {k} is "
                                  f"{arr.dtype}, its shape rule says {specs[k][1]}")
            result.append(arr)
        return result


MEMO_VALUE_MAX = 64
"""Step.evaluate keeps a setup only when every input value it read has at most this many elements."""
MEMO_ENTRIES = 4
"""Setups kept per node (distinct input shapes and read values), the most recently used first."""


@dataclass
class MemoEntry:
    """A node's setup kept by Step.evaluate: the rule's output (shape, dtype) per output, the bound
    kernel, and what it was built for (input shapes and dtypes; the values it read, by index)."""

    specs: list | None
    runner: Callable
    dynamic: bool = False
    shapes: list | None = None
    dtypes: list | None = None
    values: tuple = ()
    own: bool = False  # a prepare_evaluate runner: it returns the outputs
    guard: Callable | None = None  # guard(arrays): whether the entry still serves them

    def run(self, step: Step, arrays: list) -> list:
        """Run the kept kernel on `arrays`, allocating the outputs (step.evaluate's last stage)."""
        try:
            if self.own:
                return self.runner(*arrays)
            if self.dynamic:
                return step._dynamic_outputs(self.specs, self.runner(*arrays))
            outs = [np.empty(s, t) if s is not None else None for s, t in self.specs]
            self.runner(*arrays, out=step.out_arg(outs))
            return outs
        except PooledPredictorError:
            raise
        except Exception as exc:
            raise step.typed_error(exc, "kernel") from exc


def _lookup(memo: list, shapes, dtypes, arrays) -> MemoEntry | None:
    for k, e in enumerate(memo):
        if (e.shapes == shapes and e.dtypes == dtypes and all(np.array_equal(arrays[i], v) for i, v in e.values)
                and (e.guard is None or e.guard(arrays))):
            if k:
                memo.insert(0, memo.pop(k))
            return e
    return None


def _keep(memo: list, ctx: OpContext, shapes, dtypes, arrays, entry: MemoEntry) -> None:
    """Keep `entry` when the setup read only small values, each known (OpContext.track_reads)."""
    reads = ctx.reads
    if not isinstance(reads, set):
        return
    values = []
    for i in sorted(reads):
        a = arrays[i] if i < len(arrays) else None
        if a is None or np.size(a) > MEMO_VALUE_MAX:
            return
        values.append((i, np.array(a, copy=True)))
    entry.shapes, entry.dtypes, entry.values = list(shapes), list(dtypes), tuple(values)
    memo.insert(0, entry)
    del memo[MEMO_ENTRIES:]
