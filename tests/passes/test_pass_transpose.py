"""compose_transposes: Transpose(Transpose(x, p), q) = Transpose(x, p[q])."""

import pytest
from onnx import helper

from tests.passes.pass_helpers import check_pass, make_model, ops, rand

SHAPE = (2, 3, 4, 5)
X = {"x": rand(*SHAPE, seed=1)}


def model(p, q, outputs=("y",), pre=True):
    nodes = [helper.make_node("Relu", ["x"], ["a"])] if pre else []
    src = "a" if pre else "x"
    nodes += [helper.make_node("Transpose", [src], ["t"], **({"perm": p} if p is not None else {})),
              helper.make_node("Transpose", ["t"], ["y"], **({"perm": q} if q is not None else {}))]
    return make_model(nodes, {"x": SHAPE}, list(outputs))


@pytest.mark.parametrize("p,q", [([0, 2, 3, 1], [0, 3, 1, 2]), ([1, 0, 2, 3], [1, 0, 2, 3]), (None, None)])
def test_inverse_pairs_vanish(p, q):
    after, _ = check_pass(model(p, q), X, "compose_transposes", fires=True)
    assert ops(after) == ["Relu"] and after.nodes[0].outputs == ["y"]


@pytest.mark.parametrize("p,q", [([0, 2, 3, 1], [0, 2, 3, 1]), ([3, 2, 1, 0], [1, 0, 3, 2]), (None, [0, 1, 3, 2])])
def test_pairs_compose(p, q):
    after, _ = check_pass(model(p, q), X, "compose_transposes", fires=True)
    assert ops(after) == ["Relu", "Transpose"]


def test_identity_pair_from_graph_input_to_graph_output_keeps_one_node():
    after, _ = check_pass(model([0, 2, 3, 1], [0, 3, 1, 2], pre=False), X, "compose_transposes", fires=True)
    assert ops(after) == ["Transpose"] and after.nodes[0].attrs["perm"] == [0, 1, 2, 3]


def test_inner_result_read_elsewhere():
    check_pass(model([0, 2, 3, 1], [0, 3, 1, 2], outputs=("y", "t")), X, "compose_transposes", fires=False)
