"""Program: a Graph compiled for one device.

Compiling resolves every node to a kernel (by op_type, schema version and
device) and a shape rule, rejects what we cannot run (all of it at once), and
folds nodes whose inputs are all weights into new weights (evaluated once here,
shared by every Net of the model, read-only). A Program holds no activations;
a Net binds it to blobs.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np

from ..errors import KernelError, ModelLoadError, PooledPredictorError, UnsupportedOpError
from ..ir import Graph, Subgraph, Value, readonly
from ..ops.context import NotStatic
from ..ops.cpu import compiled
from ..ops.registry import candidates, find, schema_version
from ..ops.shapes import get_rule
from ..ops.step import NONDETERMINISTIC_OPS, SHAPE_ONLY_OPS, Step

HOST = "cpu"  # the registry's key of the kernels a Program's steps hold (control-flow bodies run there too)

__all__ = ["NONDETERMINISTIC_OPS", "SHAPE_ONLY_OPS", "Program", "Step", "program_of"]


class Program:
    """A Graph compiled for a device: steps in order and the shared weights.

    Args:
        graph: the (optimized) Graph.
        device: "cpu", "cuda" or an engine.device.Device: where its Nets lay out. Steps hold the
            host's (CPU) kernels: a device with a host places each node at reshape, when shapes are
            known (engine/placement.py), and runs there what it has no kernel for.
        fold_constants: evaluate nodes whose inputs are all weights now.
    Raises:
        UnsupportedOpError: nodes without a kernel or shape rule, attributes a
            kernel does not implement; every problem listed at once.
        ModelLoadError: the graph reads a value nobody defines.
    """

    def __init__(self, graph: Graph, device: str = "cpu", fold_constants: bool = True,
                 memory_limit_bytes: int | None = None):
        self.graph = graph
        self.device = device
        self.memory_limit_bytes = memory_limit_bytes  # for folding constants (None: the default)
        self.inputs: list[Value] = list(graph.inputs)
        self.outputs: list[Value] = list(graph.outputs)
        self.input_names: list[str] = [v.name for v in self.inputs]
        self.output_names: list[str] = [v.name for v in self.outputs]
        self.weights: dict[str, np.ndarray] = dict(graph.weights)
        # kernel-type plans (passes/assign.py) by (candidates, outputs, sizes), shared by this Program's Nets
        self.assignments: dict = {}
        # a Net built a compiled layout of this Program in this process (engine/tiering.py): its kernels load
        self.tiers_loaded = False
        self.token = next(_TOKENS)  # this Program among every one of the process (background compile keys)
        try:
            graph.toposort()
        except Exception as exc:  # a cycle, undefined values, names of mixed types
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
            k = find(node.op_type, node.domain, opset, HOST)
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
            others = tuple(c for c in candidates(node.op_type, node.domain, opset, HOST) if c is not k
                           and (c.check is None or not c.check(node.attrs, version))
                           and not c.unknown_attrs(node.attrs))
            steps.append(Step(node, k, version, rule, others))
            try:  # nested Programs of If/Loop/Scan bodies, compiled now
                for value in node.attrs.values():
                    if isinstance(value, Graph):
                        program_of(value, HOST)
            except UnsupportedOpError as exc:
                problems.append(f"node {node.name!r} ({node.op_type}) body: {exc}")
        if missing or problems:
            uniq = list(dict.fromkeys(missing))
            parts = []
            if uniq:
                parts.append(f"{len(uniq)} op(s) with no {HOST} kernel: " + ", ".join(
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
                cpu_step = step  # host kernels: folded once, shared by every device
                arrays = [self.weights[i] if i else None for i in node.inputs]
                try:
                    with compiled.reference_kernels():  # constants: the reference kernels, compiling nothing
                        outs = cpu_step.evaluate(arrays, "cpu", self.memory_limit_bytes)
                except PooledPredictorError:
                    raise
                except NotStatic:  # an If/Loop/Scan body runs only inside a Net: it runs there
                    kept.append(step)
                    continue
                except Exception as exc:
                    raise KernelError(f"node {node.name!r} ({node.op_type}) failed on constant "
                                      f"inputs: {type(exc).__name__}: {exc}") from exc
                for name, arr in zip(node.outputs, outs):
                    if name:
                        self.weights[name] = readonly(arr)
                continue
            kept.append(step)
        self.steps = kept


_compile_lock = threading.RLock()  # a body compiles the bodies nested in it
_TOKENS = itertools.count()  # Program.token


def program_of(sub: Subgraph, device: str = "cpu") -> Program:
    """The compiled Program of a control-flow body on a device (compiled on first use, cached on
    the Subgraph, shared read-only by all threads).

    Raises:
        UnsupportedOpError: the body uses an op with no kernel.
    """
    programs = sub.__dict__.get("_programs")
    if programs is not None and device in programs:
        return programs[device]
    with _compile_lock:
        programs = sub.__dict__.setdefault("_programs", {})
        if device not in programs:
            programs[device] = Program(sub, device)
        return programs[device]
