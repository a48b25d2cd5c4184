"""Program: a Graph compiled for one device.

Compiling resolves every node to a kernel (by op_type, schema version and
device) and a shape rule, rejects what we cannot run (all of it at once), and
folds nodes whose inputs are all weights into new weights (evaluated once here,
shared by every Net of the model, read-only). A Program holds no activations;
a Net binds it to blobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from .errors import KernelError, ModelLoadError, PooledPredictorError, UnsupportedOpError
from .ir import Graph, Node, Value, readonly
from .ops.context import OpContext
from .ops.registry import KernelDef, candidates, find, lookup, schema_version
from .ops.shapes import get_rule

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

    def context(self, shapes, dtypes, values=None, device="cpu", scratch=None) -> OpContext:
        return OpContext(self.node, self.version, shapes, dtypes, values, device, scratch)

    def infer(self, ctx: OpContext) -> list[tuple[tuple, np.dtype]]:
        specs = self.rule(ctx)
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
        """The callable that runs this node: runner(*inputs, out=out)."""
        k = self.kernel
        if k.is_class:
            return k.impl(ctx, **self.node.attrs)
        return partial(k.impl, **self.node.attrs) if self.node.attrs else k.impl

    def out_arg(self, outs: list):
        """`out` for the kernel: one array, or a tuple padded with None to the schema's outputs."""
        if not self.kernel.multi_output:
            return outs[0]
        missing = self.kernel.num_outputs - len(outs)
        return tuple(outs) + (None,) * missing if missing > 0 else tuple(outs)

    def evaluate(self, arrays: list, device: str = "cpu") -> list:
        """Run the node once on concrete arrays, allocating its outputs.

        Used for folding constants, for values known at reshape time, and for
        nodes whose output shape depends on data (computed per forward).
        """
        shapes = [None if a is None else a.shape for a in arrays]
        dtypes = [None if a is None else a.dtype for a in arrays]
        ctx = self.context(shapes, dtypes, arrays, device)
        specs = self.infer(ctx)
        outs = [np.empty(s, t) if s is not None else None for s, t in specs]
        runner = self.bind(ctx)
        runner(*arrays, out=self.out_arg(outs))
        return outs


class Program:
    """A Graph compiled for a device: steps in order and the shared weights.

    Args:
        graph: the (optimized) Graph.
        device: "cpu" or "cuda".
        fold_constants: evaluate nodes whose inputs are all weights now.
    Raises:
        UnsupportedOpError: nodes without a kernel or shape rule, attributes a
            kernel does not implement; every problem listed at once.
        ModelLoadError: the graph reads a value nobody defines.
    """

    def __init__(self, graph: Graph, device: str = "cpu", fold_constants: bool = True):
        self.graph = graph
        self.device = device
        self.inputs: list[Value] = list(graph.inputs)
        self.outputs: list[Value] = list(graph.outputs)
        self.input_names: list[str] = [v.name for v in self.inputs]
        self.output_names: list[str] = [v.name for v in self.outputs]
        self.weights: dict[str, np.ndarray] = dict(graph.weights)
        try:
            graph.toposort()
        except ValueError as exc:
            raise ModelLoadError(f"model {graph.source!r}: {exc}") from exc
        self.steps = self._resolve(graph)
        if fold_constants:
            self._fold()
        declared = set(self.input_names) | set(self.weights) | {o for s in self.steps for o in s.node.outputs}
        missing = [o for o in self.output_names if o not in declared]
        if missing:
            raise ModelLoadError(f"model {graph.source!r}: graph outputs {missing} are never computed")

    def _resolve(self, graph: Graph) -> list[Step]:
        steps, problems, missing = [], [], []
        for node in graph.nodes:
            opset = graph.opset_of(node)
            k = find(node.op_type, node.domain, opset, self.device)
            rule = get_rule(node.op_type, node.domain)
            if k is None or rule is None:
                missing.append((node.op_type, node.domain, opset))
                continue
            version = schema_version(node.op_type, node.domain, opset) or opset
            unknown = k.unknown_attrs(node.attrs)
            if unknown:
                problems.append(f"node {node.name!r} ({node.op_type}): attributes {unknown} not implemented")
                continue
            if node.op_type in NONDETERMINISTIC_OPS:
                problems.append(f"node {node.name!r}: {node.op_type} is not deterministic")
                continue
            if k.check is not None:
                reason = k.check(node.attrs, version)
                if reason:
                    problems.append(f"node {node.name!r} ({node.op_type}): {reason}")
                    continue
            others = tuple(c for c in candidates(node.op_type, node.domain, opset, self.device) if c is not k
                           and (c.check is None or not c.check(node.attrs, version))
                           and not c.unknown_attrs(node.attrs))
            steps.append(Step(node, k, version, rule, others))
        if missing or problems:
            uniq = list(dict.fromkeys(missing))
            parts = []
            if uniq:
                parts.append(f"{len(uniq)} op(s) with no {self.device} kernel: " + ", ".join(
                    f"{op}{' (' + d + ')' if d else ''} opset {v}" for op, d, v in uniq))
            parts.extend(problems)
            raise UnsupportedOpError(f"model {graph.source!r}: " + "; ".join(parts) +
                                     "; see `pooled-predictor ops`", uniq)
        return steps

    def _fold(self) -> None:
        """Evaluate, once, every node whose inputs are all weights (CPU kernels)."""
        kept = []
        for step in self.steps:
            node = step.node
            ins = node.present_inputs()
            if all(i in self.weights for i in ins) and node.op_type not in NONDETERMINISTIC_OPS:
                cpu_step = step if self.device == "cpu" else Step(
                    node, lookup(node.op_type, node.domain, self.graph.opset_of(node), "cpu", node.name),
                    step.version, step.rule)
                arrays = [self.weights[i] if i else None for i in node.inputs]
                try:
                    outs = cpu_step.evaluate(arrays)
                except PooledPredictorError:
                    raise
                except Exception as exc:
                    raise KernelError(f"node {node.name!r} ({node.op_type}) failed on constant "
                                      f"inputs: {type(exc).__name__}: {exc}") from exc
                for name, arr in zip(node.outputs, outs):
                    if name:
                        self.weights[name] = readonly(arr)
                continue
            kept.append(step)
        self.steps = kept
