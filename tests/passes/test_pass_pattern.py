"""The pattern matcher: chains, DAG patterns with shared inputs, predicates, escaping values, rules."""

import numpy as np
import pytest
from onnx import helper

from pooled_predictor.importers import load_onnx
from pooled_predictor.ir import Node
from pooled_predictor.passes import Const, Opt, Pat, Replacement, Rule, Var, apply_rules
from pooled_predictor.passes.pattern import GraphIndex, match
from tests.passes.pass_helpers import make_model, rand


def graph(nodes, inputs=None, outputs=("y",), weights=None):
    return load_onnx(make_model(nodes, inputs or {"x": (2, 3)}, list(outputs), weights), device=None)


def matches(pattern, g, root_op=None):
    idx = GraphIndex(g)
    return [m for n in g.nodes if root_op in (None, n.op_type) for m in match(pattern, n, idx)]


def test_chain_binds_nodes_and_values():
    g = graph([helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("Sigmoid", ["a"], ["y"], name="s")])
    (m,) = matches(Pat("Sigmoid", (Pat("Relu", (Var("in"),), name="relu"),), name="sig"), g)
    assert m.node("relu").name == "r" and m.node("sig").name == "s" and m.value("in") == "x"
    assert [n.name for n in m.all_nodes] == ["r", "s"]


def test_shared_var_must_bind_the_same_value():
    p = Pat("Mul", (Var("x"), Pat("Sigmoid", (Var("x"),))), commutative=True)
    same = graph([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["s", "x"], ["y"])])
    other = graph([helper.make_node("Sigmoid", ["z"], ["s"]), helper.make_node("Mul", ["s", "x"], ["y"])],
                  inputs={"x": (2, 3), "z": (2, 3)})
    assert len(matches(p, same)) == 1
    assert matches(p, other) == []


def test_commutative_tries_both_orders_and_plain_does_not():
    g = graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["w", "r"], ["y"])],
              weights={"w": rand(3)})
    plain = Pat("Add", (Pat("Relu", (Var("x"),)), Const("c")))
    assert matches(plain, g) == []
    assert len(matches(Pat("Add", (Pat("Relu", (Var("x"),)), Const("c")), commutative=True), g)) == 1


def test_const_predicate_and_opt():
    g = graph([helper.make_node("Clip", ["x", "lo"], ["y"])], weights={"lo": np.float32(0)})
    p = Pat("Clip", (Var("x"), Opt(Const("lo", lambda a: a == 0)), Opt(Const("hi"))))
    (m,) = matches(p, g)
    assert m.value("lo") == "lo" and m.value("hi") is None
    assert matches(Pat("Clip", (Var("x"), Opt(Const("lo", lambda a: a == 1)), Opt(Const("hi")))), g) == []


def test_pattern_must_describe_every_present_input():
    g = graph([helper.make_node("Clip", ["x", "lo"], ["y"])], weights={"lo": np.float32(0)})
    assert matches(Pat("Clip", (Var("x"),)), g) == []


def test_intermediate_read_outside_the_match_is_rejected():
    g = graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["y"]),
               helper.make_node("Neg", ["a"], ["z"])], outputs=("y", "z"))
    assert matches(Pat("Sigmoid", (Pat("Relu", (Var("x"),)),)), g) == []


def test_intermediate_graph_output_is_rejected():
    g = graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["y"])],
              outputs=("y", "a"))
    assert matches(Pat("Sigmoid", (Pat("Relu", (Var("x"),)),)), g) == []


def test_intermediate_read_twice_inside_the_match_is_accepted():
    """a = Relu(x); y = a * a: the Relu's output stays inside the match."""
    g = graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Mul", ["a", "a"], ["y"])])
    p = Pat("Mul", (Pat("Relu", (Var("x"),), name="r"), Pat("Relu", (Var("x"),), name="r")))
    (m,) = matches(p, g)
    assert len(m.all_nodes) == 2


def test_where_on_node_attributes():
    g = graph([helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.3)])
    assert len(matches(Pat("LeakyRelu", (Var("x"),), where=lambda n: n.attrs["alpha"] > 0.2), g)) == 1
    assert matches(Pat("LeakyRelu", (Var("x"),), where=lambda n: n.attrs["alpha"] > 0.5), g) == []


def test_apply_rules_to_a_fixed_point():
    """Neg(Neg(x)) = x, applied until no pair is left (four Negs -> none)."""
    nodes = [helper.make_node("Neg", [i], [o]) for i, o in [("x", "a"), ("a", "b"), ("b", "c"), ("c", "d")]]
    nodes.append(helper.make_node("Relu", ["d"], ["y"]))
    g = graph(nodes)
    rule = Rule("double negation", Pat("Neg", (Pat("Neg", (Var("x"),)),)),
                lambda m, rw: Replacement(substitute={m.root.outputs[0]: m.value("x")}), doc="-(-x) = x")
    fired = apply_rules(g, [rule])
    assert fired == {"double negation": 2}
    assert [n.op_type for n in g.nodes] == ["Relu"] and g.nodes[0].inputs == ["x"]


def test_replacement_nodes_take_the_root_position():
    g = graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
               helper.make_node("Neg", ["b"], ["y"])])
    rule = Rule("relu-sigmoid", Pat("Sigmoid", (Pat("Relu", (Var("x"),)),)),
                lambda m, rw: [Node("Tanh", [m.value("x")], [m.root.outputs[0]], name=rw.node_name("t"))])
    apply_rules(g, [rule])
    assert [n.op_type for n in g.nodes] == ["Tanh", "Neg"]


def test_declining_replacement_leaves_the_graph():
    g = graph([helper.make_node("Relu", ["x"], ["y"])])
    assert apply_rules(g, [Rule("never", Pat("Relu", (Var("x"),)), lambda m, rw: None)]) == {}
    assert [n.op_type for n in g.nodes] == ["Relu"]


def test_rules_that_undo_each_other_are_stopped():
    g = graph([helper.make_node("Relu", ["x"], ["y"])])
    flip = [Rule("a", Pat("Relu", (Var("x"),)), lambda m, rw: [Node("Abs", [m.value("x")], ["y"], name="a")]),
            Rule("b", Pat("Abs", (Var("x"),)), lambda m, rw: [Node("Relu", [m.value("x")], ["y"], name="r")])]
    with pytest.raises(RuntimeError, match="still fire"):
        apply_rules(g, flip, max_rounds=5)
