"""The pass manager: an ordered pipeline of passes, chosen by level and by name.

Levels mean what onnxruntime's graph_optimization_level means:

    none      no pass
    basic     semantics-preserving cleanups and folds that emit only ONNX ops:
              Identity/Dropout elimination, constant and shape folding,
              Conv+BatchNormalization/Add/Mul folding, dead-node elimination; the
              selected passes also run inside Loop/Scan bodies (optimize_bodies)
    extended  basic + fusions, most into our own domain's kernels
              (FusedConv, FusedGemm, FusedConvDepthwise, Gelu and HardSwish below their ONNX
              opsets, Lookup): QDQ groups -> integer nodes, element-wise chains on one 8-bit
              tensor -> Lookup, MatMul+Add -> Gemm / MatMulAdd, GELU, the attention pattern
              (ScaledDotProductAttention), HardSwish, Conv/Gemm + activation
    all       extended + layout-independent extras (Transpose pairs composed)

A pass runs when its level is at most the chosen one, or when it is named in
`enable`; a pass named in `disable` never runs (Paddle's delete_pass). The
order is always PASSES' order, whatever the level. Each pass logs one line
to the logger "pooled_predictor.passes" (INFO when it changed something,
DEBUG otherwise; per-rewrite details at DEBUG) and adds one PassResult to the
PassReport.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ..errors import ModelLoadError, PooledPredictorError
from ..importers import load_onnx
from ..ir import Graph
from .analysis import static_input_shapes
from .base import LEVELS, Pass, PassContext
from .attention import fuse_attention
from .cleanup import eliminate_dead_nodes, eliminate_identity
from .conv_bn import fold_conv_add, fold_conv_bn, fold_conv_mul
from .fc_fuse import fuse_matmul_add
from .fold import constant_folding, shape_folding
from .conv_sum import fuse_conv_sum
from .fuse_activation import fuse_conv_activation, fuse_gemm_activation
from .gelu import fuse_gelu
from .hard_swish import fuse_hard_swish
from .lookup import tabulate_8bit_chains
from .pointwise_depthwise import fuse_pointwise_depthwise
from .qdq import fuse_qdq
from .squeeze import sink_squeezes
from .subgraphs import optimize_bodies
from .transpose import compose_transposes

log = logging.getLogger("pooled_predictor.passes")

_PIPELINE = [
    Pass("eliminate_identity", "basic", eliminate_identity,
         "remove Identity and inference Dropout (readers read the input)"),
    Pass("fuse_qdq", "extended", fuse_qdq,
         "DequantizeLinear -> Conv/MatMul/MaxPool -> QuantizeLinear -> QLinearConv/QLinearMatMul/8-bit MaxPool"),
    Pass("constant_folding", "basic", constant_folding,
         "evaluate nodes whose inputs are all weights (our CPU kernels)"),
    Pass("shape_folding", "basic", shape_folding,
         "with static input shapes: Shape/Size and what is computed from them become weights"),
    Pass("tabulate_8bit_chains", "extended", tabulate_8bit_chains,
         "element-wise ops on one 8-bit tensor (QDQ islands, quantized GELU) -> one 256-entry Lookup"),
    Pass("compose_transposes", "all", compose_transposes,
         "Transpose(Transpose(x, p), q) -> Transpose(x, p[q]) or nothing"),
    Pass("sink_squeezes", "basic", sink_squeezes,
         "BatchNormalization / activation below the Squeeze it reads; Unsqueeze(Squeeze(x)) -> x"),
    Pass("fold_conv_add", "basic", fold_conv_add,
         "per-channel constant Add after Conv folded into b"),
    Pass("fold_conv_mul", "basic", fold_conv_mul,
         "per-channel constant Mul after Conv folded into W and b"),
    Pass("fold_conv_bn", "basic", fold_conv_bn,
         "BatchNormalization after Conv folded into W and b"),
    Pass("fuse_matmul_add", "extended", fuse_matmul_add,
         "MatMul + bias Add -> Gemm (2-D) or MatMulAdd (batched) (Paddle fc_fuse)"),
    Pass("fuse_gelu", "extended", fuse_gelu,
         "x * 0.5 * (1 + erf(x / sqrt 2)) -> Gelu"),
    Pass("fuse_attention", "extended", fuse_attention,
         "MatMul(Softmax(MatMul(Q, Kt) [/ or * c] [+ M]), V) -> ScaledDotProductAttention"),
    Pass("fuse_hard_swish", "extended", fuse_hard_swish,
         "x * HardSigmoid(x; 1/6, 1/2) -> HardSwish"),
    Pass("fuse_conv_sum", "extended", fuse_conv_sum,
         "Conv + Add (a same-shape tensor: a residual) + activation -> FusedConv with a sum input"),
    Pass("fuse_conv_activation", "extended", fuse_conv_activation,
         "Conv + Relu/Clip/Sigmoid/HardSigmoid/HardSwish/LeakyRelu -> FusedConv"),
    Pass("fuse_gemm_activation", "extended", fuse_gemm_activation,
         "Gemm + Relu/Clip/Sigmoid/HardSigmoid/HardSwish/LeakyRelu/Tanh -> FusedGemm"),
    Pass("fuse_pointwise_depthwise", "extended", fuse_pointwise_depthwise,
         "1x1 Conv + the depthwise Conv that alone reads it -> FusedConvDepthwise (MobileNetV2's expansion)"),
    Pass("optimize_bodies", "basic", lambda graph, ctx: optimize_bodies(graph, ctx, ctx.pipeline),
         "Loop/Scan bodies: captured weights become body weights, then these passes run inside"),
    Pass("eliminate_dead_nodes", "basic", eliminate_dead_nodes,
         "remove nodes that reach no graph output; drop unread weights"),
]

PASSES: dict[str, Pass] = {p.name: p for p in _PIPELINE}


def op_key(op_type: str, domain: str) -> str:
    """How an op is named in reports: 'Conv', or 'pooled_predictor.FusedConv' outside ONNX."""
    return op_type if domain in ("", "ai.onnx") else f"{domain}.{op_type}"


def op_counts(graph: Graph) -> Counter:
    """Node counts per op (op_key)."""
    return Counter(op_key(n.op_type, n.domain) for n in graph.nodes)


@dataclass
class PassResult:
    """What one pass did.

    Attributes:
        name, level: the pass's.
        before, after: node counts per op type around the pass.
        changes: description -> count (e.g. {"Identity removed": 147}).
        notes: other remarks (why it was skipped, inputs pinned, ...).
        seconds: wall time of the pass.
    """

    name: str
    level: str
    before: Counter
    after: Counter
    changes: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return any(self.changes.values())

    @property
    def nodes_before(self) -> int:
        return sum(self.before.values())

    @property
    def nodes_after(self) -> int:
        return sum(self.after.values())

    @property
    def summary(self) -> str:
        """A short text of what changed, e.g. 'Identity removed x147; nodes 464 -> 317'."""
        parts = [f"{k} x{v}" for k, v in self.changes.items() if v]
        text = "; ".join(parts) if parts else "no change"
        if self.nodes_before != self.nodes_after:
            text += f"; nodes {self.nodes_before} -> {self.nodes_after}"
        if self.notes:
            text += " (" + "; ".join(self.notes) + ")"
        return text

    def to_dict(self) -> dict:
        return {"name": self.name, "level": self.level, "changes": dict(self.changes), "notes": list(self.notes),
                "nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
                "before": dict(self.before), "after": dict(self.after), "seconds": self.seconds}


@dataclass
class PassReport:
    """Every pass that ran, in order, with node counts per op type before and after.

    Attributes:
        level: the level asked for.
        passes: one PassResult per pass that ran.
        before, after: node counts per op type of the whole optimization.
    """

    level: str
    passes: list[PassResult] = field(default_factory=list)
    before: Counter = field(default_factory=Counter)
    after: Counter = field(default_factory=Counter)

    @property
    def nodes_before(self) -> int:
        return sum(self.before.values())

    @property
    def nodes_after(self) -> int:
        return sum(self.after.values())

    def __getitem__(self, name: str) -> PassResult:
        for p in self.passes:
            if p.name == name:
                return p
        raise KeyError(f"pass {name!r} did not run; ran {[p.name for p in self.passes]}")

    def fired(self) -> list[str]:
        """Names of the passes that changed the graph."""
        return [p.name for p in self.passes if p.changed]

    def changes(self) -> Counter:
        """All passes' changes, summed by description."""
        total: Counter = Counter()
        for p in self.passes:
            total.update({k: v for k, v in p.changes.items() if v})
        return total

    def summary(self) -> str:
        """One line per pass: name, level, what changed."""
        width = max((len(p.name) for p in self.passes), default=4)
        lines = [f"level {self.level!r}: {self.nodes_before} -> {self.nodes_after} nodes"]
        lines += [f"  {p.name:<{width}}  {p.level:<8}  {p.summary}" for p in self.passes]
        return "\n".join(lines)

    def table(self) -> str:
        """Node counts per op type: before, after each pass that changed something, final."""
        return counts_table(self)

    def to_dict(self) -> dict:
        return {"level": self.level, "nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
                "before": dict(self.before), "after": dict(self.after),
                "passes": [p.to_dict() for p in self.passes]}

    def __str__(self) -> str:
        return self.summary()


def select(level: str = "all", disable: Iterable[str] = (), enable: Iterable[str] = ()) -> list[Pass]:
    """The passes that run, in pipeline order.

    Raises:
        ValueError: an unknown level or pass name (the message lists the known ones).
    """
    if level not in LEVELS:
        raise ValueError(f"graph optimization level {level!r} is not one of {LEVELS}")
    disable, enable = set(disable), set(enable)
    unknown = sorted((disable | enable) - set(PASSES))
    if unknown:
        raise ValueError(f"unknown pass name(s) {unknown}; the passes are {list(PASSES)}")
    rank = LEVELS.index(level)
    return [p for p in _PIPELINE
            if p.name not in disable and (LEVELS.index(p.level) <= rank or p.name in enable)]


def optimize(graph: Graph, level: str = "all", disable: Sequence[str] = (), enable: Sequence[str] = (),
             input_shapes: Mapping[str, Sequence[int]] | None = None,
             memory_limit_bytes: int | None = None) -> tuple[Graph, PassReport]:
    """Rewrite a copy of `graph` with the passes of `level`.

    Args:
        graph: the imported Graph; never modified (weights are shared, read-only).
        level: "none", "basic", "extended" or "all" (onnxruntime's meanings, see
            the module docstring).
        disable: pass names never to run.
        enable: pass names to run although above `level`.
        input_shapes: name -> shape of every graph input; enables shape
            folding and pins the graph's inputs to these shapes when it folds.
        memory_limit_bytes: no value is folded whose outputs pass it (None:
            budget.default_memory_limit()); the compiled Program reports it.
    Returns:
        (new Graph, PassReport). The new graph imports the domain
        "pooled_predictor" (opset 1) when a pass emitted one of its ops.
    Raises:
        ValueError: unknown level or pass names, input_shapes not matching the inputs.
        ModelLoadError: a pass failed on this graph (naming the pass, and the
            node where a rule failed; the original error as __cause__), or the
            graph has a cycle or reads a value nobody defines.
    """
    passes = select(level, disable, enable)
    if input_shapes is not None:
        static_input_shapes(graph, input_shapes)  # validate names now, not inside a pass
    g = graph.copy()
    report = PassReport(level, before=op_counts(g))
    for p in passes:
        ctx = PassContext(input_shapes=input_shapes, memory_limit_bytes=memory_limit_bytes, pipeline=tuple(passes))
        before = op_counts(g)
        t0 = time.perf_counter()
        try:
            changes = p.run(g, ctx) or {}
        except Exception as exc:  # a model no pass foresaw: refuse it, typed, the original as __cause__
            if isinstance(exc, PooledPredictorError) and not isinstance(exc, ModelLoadError):
                raise
            rule_error = isinstance(exc, ModelLoadError) and exc.__cause__ is not None  # names the node
            why = str(exc) if rule_error else f"{type(exc).__name__}: {exc}"
            raise ModelLoadError(f"model {graph.source!r}: graph pass {p.name!r} failed: {why}") \
                from (exc.__cause__ if rule_error else exc)
        seconds = time.perf_counter() - t0
        result = PassResult(p.name, p.level, before, op_counts(g), {k: v for k, v in changes.items() if v},
                            list(ctx.notes), seconds)
        report.passes.append(result)
        log.log(logging.INFO if result.changed else logging.DEBUG, "%s (%s): %s [%.1f ms]",
                p.name, graph.source, result.summary, seconds * 1e3)
    try:
        g.toposort()
    except Exception as exc:
        raise ModelLoadError(f"model {graph.source!r}: {exc}") from exc
    report.after = op_counts(g)
    return g, report


def counts_table(report: PassReport, all_columns: bool = False) -> str:
    """The op-count table of a report: rows are op types, columns the graph after each pass."""
    shown = [p for p in report.passes if all_columns or p.changed]
    cols = ["input"] + [f"{i + 1}" for i in range(len(shown))]
    stages = [report.before] + [p.after for p in shown]
    ops = sorted(set().union(*stages), key=lambda op: (-report.before.get(op, 0), op))
    width = max([len(op) for op in ops] + [len("total")])
    cw = max(5, max(len(c) for c in cols))
    lines = [f"{'op':<{width}}  " + "  ".join(f"{c:>{cw}}" for c in cols)]
    lines.append("-" * len(lines[0]))
    for op in ops:
        cells = []
        prev = None
        for s in stages:
            v = s.get(op, 0)
            cells.append(f"{v:>{cw}}" if prev is None or v != prev else f"{'.':>{cw}}")
            prev = v
        lines.append(f"{op:<{width}}  " + "  ".join(cells))
    lines.append("-" * len(lines[0]))
    lines.append(f"{'total':<{width}}  " + "  ".join(f"{sum(s.values()):>{cw}}" for s in stages))
    legend = [f"  {i + 1}: {p.name} -- {p.summary}" for i, p in enumerate(shown)]
    quiet = [p.name for p in report.passes if not p.changed and p not in shown]
    if legend:
        lines.append("after pass ('.': unchanged from the column before):")
        lines.extend(legend)
    if quiet:
        lines.append("no change: " + ", ".join(quiet))
    for p in report.passes:
        if not p.changed and p.notes:
            lines.append(f"  {p.name}: " + "; ".join(p.notes))
    return "\n".join(lines)


def parse_input_shapes(text: str) -> dict[str, tuple[int, ...]]:
    """'x:1x3x224x224,y:1x10' -> {'x': (1, 3, 224, 224), 'y': (1, 10)} (for a CLI's --input-shapes).

    Raises:
        ValueError: a part is not NAME:DxDx... with integer dims.
    """
    shapes = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, dims = part.rpartition(":")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.lower().split("x")) if dims else ()
        except ValueError:
            raise ValueError(f"input shape {part!r} is not NAME:DxDx... (e.g. x:1x3x224x224)") from None
    return shapes


def inspect(graph, level: str = "all", input_shapes: Mapping[str, Sequence[int]] | None = None,
            disable: Sequence[str] = (), enable: Sequence[str] = ()) -> str:
    """A table of node counts per op type before and after each pass (for `pooled-predictor inspect`).

    Args:
        graph: a Graph, or a model (path, bytes, onnx.ModelProto) to import first.
        level, disable, enable, input_shapes: as optimize().
    Returns:
        The table, then one legend line per pass that changed the graph.
    """
    if not isinstance(graph, Graph):
        graph = load_onnx(graph, device=None)
    _, report = optimize(graph, level, disable, enable, input_shapes)
    name = os.path.basename(graph.source) if graph.source else graph.name
    head = f"{name}: level {level!r}, {report.nodes_before} -> {report.nodes_after} nodes"
    return head + "\n" + counts_table(report)
