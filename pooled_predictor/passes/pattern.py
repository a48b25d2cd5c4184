"""A pattern matcher over the Graph, and rewrites written as data.

A pattern is a small tree of op patterns whose leaves are values:

    Pat(op, inputs, name=..., where=..., commutative=...)   a node producing the value
    Var(name)                                                any value (input, weight, activation)
    Const(name, where=...)                                   a weight, optionally tested
    Opt(p)                                                   an optional input: absent, or matching p

Using one name twice makes a DAG pattern: the same Var must bind the same
value (x in x * HardSigmoid(x)), the same Pat name the same node. Matching
starts at a root node and walks producers (Paddle's PatternMatcher and
onnxruntime's graph_utils do the same, bottom-up from the last node).

A match is only reported when it can be replaced safely: every matched node
other than the root must have all its outputs consumed inside the match and
none of them may be a graph output (otherwise removing it would change what
someone else reads). The root's outputs keep their names: a replacement
writes them, so consumers of the root need no rewiring.

A Rule pairs a pattern with a replacement function,

    Rule("fold_conv_add", Pat("Add", (Pat("Conv", ...), Const("c")), commutative=True),
         replace=..., doc="Conv(x, W, b) + c = Conv(x, W, b + c)")

and `apply_rules(graph, rules)` rewrites the graph to a fixed point. The
algebra of each rule lives in its `doc` (STYLE habit 3).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..errors import ModelLoadError, PooledPredictorError
from ..ir import Graph, Node, readonly
from ..ops.shapes.fused import DOMAIN, DOMAIN_VERSION

log = logging.getLogger("pooled_predictor.passes")


# ---- patterns ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Var:
    """Any value; binds its name (a second use of the name must see the same value)."""

    name: str


@dataclass(frozen=True)
class Const:
    """A weight (initializer or folded constant); `where(array)` may reject it."""

    name: str
    where: Callable[[np.ndarray], bool] | None = None


@dataclass(frozen=True)
class Opt:
    """An optional input: absent ('' or past the node's last input) binds None, else `pattern` must match."""

    pattern: Any


@dataclass(frozen=True)
class Pat:
    """A node of type `op` (or one of several) producing the value at output 0.

    Attributes:
        op: op_type, or a tuple of accepted op_types.
        inputs: one pattern per input position (Var, Const, Opt, Pat); the node
            may not have further present inputs.
        name: binds the node (match.node(name)).
        where: where(node) -> bool, a test on the node alone (attributes, domain).
        commutative: for two-input ops, also try the inputs swapped.
        domain: the node's domain ('' for ONNX).
    """

    op: str | tuple
    inputs: tuple = ()
    name: str | None = None
    where: Callable[[Node], bool] | None = None
    commutative: bool = False
    domain: str = ""

    def ops(self) -> tuple:
        return self.op if isinstance(self.op, tuple) else (self.op,)


# ---- the graph as the matcher sees it -------------------------------------------------------
class GraphIndex:
    """Producers and consumers of every value, kept current while rules rewrite the graph."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producers: dict[str, Node] = {}
        self.consumers: dict[str, list[Node]] = {}
        self.outputs = set(graph.output_names)
        self.inputs = set(graph.input_names)
        for n in graph.nodes:
            self.add(n)

    def add(self, node: Node) -> None:
        for o in node.present_outputs():
            self.producers[o] = node
        for i in dict.fromkeys(node.present_inputs()):
            self.consumers.setdefault(i, []).append(node)

    def remove(self, node: Node) -> None:
        for o in node.present_outputs():
            if self.producers.get(o) is node:
                del self.producers[o]
        for i in dict.fromkeys(node.present_inputs()):
            users = self.consumers.get(i, [])
            self.consumers[i] = [u for u in users if u is not node]

    def users(self, value: str) -> list[Node]:
        return self.consumers.get(value, [])

    def escapes(self, value: str, inside: set[int]) -> bool:
        """Whether `value` is a graph output or read by a node outside `inside` (node ids)."""
        return value in self.outputs or any(id(u) not in inside for u in self.users(value))

    def is_weight(self, value: str) -> bool:
        return value in self.graph.weights


@dataclass
class Match:
    """What a pattern bound: nodes by Pat name, values by Var/Const name."""

    root: Node
    nodes: dict[str, Node]
    values: dict[str, str | None]
    graph: Graph
    index: GraphIndex
    all_nodes: list[Node] = field(default_factory=list)  # every matched node, root last
    shapes: Any = None  # analysis.ShapeInfo of the graph before this pass, or None

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def value(self, name: str) -> str | None:
        return self.values[name]

    def weight(self, name: str) -> np.ndarray | None:
        v = self.values.get(name)
        return None if not v else self.graph.weights[v]

    def rank(self, value_name: str) -> int | None:
        """Rank of a value if known (weights, declared types, shape analysis), else None."""
        if value_name in self.graph.weights:
            return self.graph.weights[value_name].ndim
        if self.shapes is not None:
            r = self.shapes.rank(value_name)
            if r is not None:
                return r
        for v in self.graph.inputs:
            if v.name == value_name and v.shape is not None:
                return len(v.shape)
        vi = self.graph.value_info.get(value_name)
        return None if vi is None or vi.shape is None else len(vi.shape)


def _bind(b: tuple, key: str, val) -> tuple | None:
    """Bindings are an immutable tuple of (key, value) pairs; None when `key` is bound otherwise."""
    for k, v in b:
        if k == key:
            if v is val or (isinstance(v, str) and v == val):
                return b
            return None
    return b + ((key, val),)


def _lookup(b: tuple, key: str):
    for k, v in b:
        if k == key:
            return True, v
    return False, None


def _match_value(p, value: str, b: tuple, idx: GraphIndex) -> Iterator[tuple]:
    """All bindings under which `value` (a value name, '' when absent) matches pattern `p`."""
    if isinstance(p, Opt):
        if not value:
            nb = _bind(b, "v:" + _leaf_name(p.pattern), None) if _leaf_name(p.pattern) else b
            if nb is not None:
                yield nb
            return
        yield from _match_value(p.pattern, value, b, idx)
        return
    if not value:
        return
    if isinstance(p, Var):
        nb = _bind(b, "v:" + p.name, value)
        if nb is not None:
            yield nb
    elif isinstance(p, Const):
        if idx.is_weight(value) and (p.where is None or _safe(p.where, idx.graph.weights[value])):
            nb = _bind(b, "v:" + p.name, value)
            if nb is not None:
                yield nb
    elif isinstance(p, Pat):
        node = idx.producers.get(value)
        if node is None or node.outputs[0] != value:
            return
        yield from _match_node(p, node, b, idx)
    else:
        raise TypeError(f"not a pattern: {p!r}")


def _leaf_name(p) -> str | None:
    return p.name if isinstance(p, (Var, Const)) else None


def _safe(pred, arg) -> bool:
    try:
        return bool(pred(arg))
    except Exception:  # a predicate that cannot decide rejects
        return False


def _match_node(p: Pat, node: Node, b: tuple, idx: GraphIndex) -> Iterator[tuple]:
    if node.op_type not in p.ops() or node.domain != p.domain:
        return
    if p.name is not None:
        found, prev = _lookup(b, "n:" + p.name)
        if found:
            if prev is node:
                yield b
            return
    if p.where is not None and not _safe(p.where, node):
        return
    present = [i for i, v in enumerate(node.inputs) if v]
    if present and present[-1] >= len(p.inputs):
        return  # the node has inputs the pattern does not describe
    nb = b if p.name is None else b + (("n:" + p.name, node),)
    nb = nb + (("node", node),)
    orders = [p.inputs]
    if p.commutative and len(p.inputs) == 2:
        orders.append(p.inputs[::-1])
    for order in orders:
        yield from _match_inputs(order, node, 0, nb, idx)


def _match_inputs(pats: Sequence, node: Node, i: int, b: tuple, idx: GraphIndex) -> Iterator[tuple]:
    if i == len(pats):
        yield b
        return
    value = node.inputs[i] if i < len(node.inputs) else ""
    for nb in _match_value(pats[i], value, b, idx):
        yield from _match_inputs(pats, node, i + 1, nb, idx)


def match(pattern: Pat, node: Node, index: GraphIndex, shapes=None) -> Iterator[Match]:
    """Every safe match of `pattern` rooted at `node` (see the module docstring)."""
    for b in _match_node(pattern, node, (), index):
        matched = list(dict.fromkeys(id(v) for k, v in b if k == "node"))
        by_id = {id(v): v for k, v in b if k == "node"}
        inside = set(matched)
        safe = all(not index.escapes(o, inside)
                   for nid in matched if nid != id(node) for o in by_id[nid].present_outputs())
        if not safe:
            continue
        nodes = {k[2:]: v for k, v in b if k.startswith("n:")}
        values = {k[2:]: v for k, v in b if k.startswith("v:")}
        ordered = [by_id[n] for n in matched if n != id(node)] + [node]
        yield Match(node, nodes, values, index.graph, index, ordered, shapes)


# ---- rules ---------------------------------------------------------------------------------
@dataclass
class Replacement:
    """What a rule puts in place of the matched nodes.

    Attributes:
        nodes: new nodes, inserted where the root was, in order. Together they
            must write every root output that someone reads.
        substitute: old value -> new value: every reader (and the writer) of
            the old name uses the new one; the old name disappears. Used by
            eliminations (Identity: y -> x).
    """

    nodes: list[Node] = field(default_factory=list)
    substitute: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    """A rewrite as data: pattern -> replacement, with its algebra in `doc`.

    Attributes:
        name: for the report (how often it fired).
        pattern: the Pat rooted at the last node of the subgraph.
        replace: replace(match, rewriter) -> Replacement | list[Node] | None
            (None declines: the rule does not fire on this match).
        where: where(match) -> bool, a test across bindings (shapes, weights).
        doc: the algebra: what the replacement computes and why it is equal.
    """

    name: str
    pattern: Pat
    replace: Callable[["Match", "Rewriter"], Any]
    where: Callable[[Match], bool] | None = None
    doc: str = ""


class Rewriter:
    """Helpers for replacement functions: fresh names, new weights, domains."""

    def __init__(self, graph: Graph, index: GraphIndex):
        self.graph = graph
        self.index = index
        self._names = {n.name for n in graph.nodes}
        self._values = set(graph.weights) | set(graph.input_names) | {
            o for n in graph.nodes for o in n.outputs if o}

    def node_name(self, base: str) -> str:
        name, k = base, 1
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name

    def value_name(self, base: str) -> str:
        name, k = base, 1
        while name in self._values:
            k += 1
            name = f"{base}_{k}"
        self._values.add(name)
        return name

    def weight(self, base: str, array: np.ndarray) -> str:
        """Add a new read-only weight under a fresh name derived from `base`."""
        name = self.value_name(base)
        self.graph.weights[name] = readonly(np.ascontiguousarray(array))
        return name

    def opset(self, domain: str = "") -> int:
        return self.graph.opset.get(domain, 0)

    def use_domain(self, domain: str, version: int) -> None:
        """Make the graph import `domain` (needed before a node of that domain can compile)."""
        if self.graph.opset.get(domain, 0) < version:
            self.graph.opset[domain] = version

    def domain_for(self, onnx_since: int) -> str:
        """'' when the model's ONNX opset has an op (since `onnx_since`), else our own domain.

        A pass never raises the model's opset: that would change the meaning of
        its other nodes (Squeeze-13, ReduceMean-18, ...); the op comes from our
        domain instead (same function, same kernel), which the graph then imports.
        """
        if self.opset("") >= onnx_since:
            return ""
        self.use_domain(DOMAIN, DOMAIN_VERSION)
        return DOMAIN


def apply_rules(graph: Graph, rules: Sequence[Rule], shapes=None, max_rounds: int = 50) -> Counter:
    """Rewrite `graph` in place with `rules` until none fires.

    Each round walks the nodes in order and tries, at each node, the rules
    whose root op it has (first rule, first match wins). Replacements take the
    root's place; matched nodes leave the graph.

    Args:
        graph: rewritten in place (the pass manager hands it a copy).
        rules: in priority order.
        shapes: optional analysis.ShapeInfo given to matches (ranks).
        max_rounds: a guard against rules that undo each other.
    Returns:
        Counter rule name -> times it fired.
    Raises:
        RuntimeError: still firing after max_rounds (two rules undo each other).
    """
    fired: Counter = Counter()
    by_op: dict[str, list[Rule]] = {}
    for r in rules:
        for op in r.pattern.ops():
            by_op.setdefault(op, []).append(r)
    for _ in range(max_rounds):
        index = GraphIndex(graph)
        rw = Rewriter(graph, index)
        removed: set[int] = set()
        placed: dict[int, list[Node]] = {}
        changed = 0
        for node in list(graph.nodes):
            if id(node) in removed:
                continue
            for rule in by_op.get(node.op_type, ()):
                done = False
                for m in match(rule.pattern, node, index, shapes):
                    if rule.where is not None and not _safe(rule.where, m):
                        continue
                    try:
                        rep = rule.replace(m, rw)
                    except PooledPredictorError:
                        raise
                    except Exception as exc:  # the manager reports it as the pass's ModelLoadError
                        raise ModelLoadError(f"rule {rule.name!r} failed at node {node.name!r} ({node.op_type}): "
                                             f"{type(exc).__name__}: {exc}") from exc
                    if rep is None:
                        continue
                    if isinstance(rep, list):
                        rep = Replacement(rep)
                    _splice(graph, index, m, rep, removed, placed)
                    fired[rule.name] += 1
                    changed += 1
                    log.debug("%s: %s -> %s", rule.name, [n.name for n in m.all_nodes],
                              [n.name for n in rep.nodes] or rep.substitute)
                    done = True
                    break
                if done:
                    break
        if not changed:
            return fired
        new_nodes = []
        for n in graph.nodes:
            if id(n) in placed:
                new_nodes.extend(x for x in placed[id(n)] if id(x) not in removed)
            if id(n) not in removed:
                new_nodes.append(n)
        graph.nodes = new_nodes
    raise RuntimeError(f"rules {sorted(fired)} still fire after {max_rounds} rounds")


def _splice(graph: Graph, index: GraphIndex, m: Match, rep: Replacement, removed: set, placed: dict) -> None:
    for n in m.all_nodes:
        index.remove(n)
        removed.add(id(n))
    # New nodes go where the root was (its position holds them; the root is removed).
    placed.setdefault(id(m.root), []).extend(rep.nodes)
    for n in rep.nodes:
        index.add(n)
    for old, new in rep.substitute.items():
        substitute(graph, index, old, new)


def substitute(graph: Graph, index: GraphIndex, old: str, new: str) -> None:
    """Every node reading or writing `old` uses `new` instead (graph outputs too)."""
    writer = index.producers.get(old)
    readers = list(index.users(old))
    for n in ([writer] if writer is not None else []) + readers:
        index.remove(n)
        n.inputs = [new if i == old else i for i in n.inputs]
        n.outputs = [new if o == old else o for o in n.outputs]
        index.add(n)
    if old in index.outputs:
        graph.outputs = [_renamed(v, new) if v.name == old else v for v in graph.outputs]
        index.outputs.discard(old)
        index.outputs.add(new)
    if old in graph.value_info and new not in graph.value_info:
        vi = graph.value_info.pop(old)
        graph.value_info[new] = _renamed(vi, new)


def _renamed(v, name):
    from dataclasses import replace as _replace

    return _replace(v, name=name)
