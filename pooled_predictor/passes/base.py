"""Pass and PassContext: what every pass module builds on.

A pass is a function ``run(graph, ctx) -> changes`` that rewrites `graph`
in place (the manager hands it a copy) and returns what it changed as a dict
``description -> count`` (e.g. {"Identity removed": 147}); zero counts may be
left out. The manager turns these into the PassReport.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ..ir import Graph
from .analysis import ShapeInfo, infer_shapes
from .pattern import Rule, apply_rules

LEVELS = ("none", "basic", "extended", "all")


@dataclass
class PassContext:
    """What a pass may ask besides the graph.

    Attributes:
        input_shapes: name -> shape given to optimize() (None: the declared ones).
        notes: lines a pass adds to its report entry (why it did not fire, ...).
        memory_limit_bytes: no folded value may pass it (None: budget.default_memory_limit()).
        pipeline: the passes optimize() runs, in order (optimize_bodies runs them inside bodies).
    """

    input_shapes: Mapping[str, Sequence[int]] | None = None
    memory_limit_bytes: int | None = None
    notes: list[str] = field(default_factory=list)
    pipeline: tuple = ()
    _shapes: ShapeInfo | None = None

    def shapes(self, graph: Graph) -> ShapeInfo:
        """Shape analysis of `graph` as it is when first asked in this pass (cached for the pass)."""
        if self._shapes is None:
            self._shapes = infer_shapes(graph, self.input_shapes, self.memory_limit_bytes)
        return self._shapes


@dataclass(frozen=True)
class Pass:
    """One named graph rewrite.

    Attributes:
        name: the name used by optimize(enable=..., disable=...).
        level: the lowest of LEVELS at which it runs ("basic", "extended", "all").
        run: run(graph, ctx) -> {description: count}.
        doc: one line on what it does.
    """

    name: str
    level: str
    run: Callable[[Graph, PassContext], dict]
    doc: str = ""


def rules_pass(rules: Sequence[Rule], *, shapes: bool = False):
    """A pass function applying `rules` to a fixed point; changes are counted per rule name."""

    def run(graph: Graph, ctx: PassContext) -> dict:
        info = ctx.shapes(graph) if shapes else None
        fired: Counter = apply_rules(graph, rules, info)
        return dict(fired)

    return run
