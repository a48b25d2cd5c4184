"""Einsum against onnxruntime (numpy.einsum where onnxruntime has no kernel for the dtype)."""

from __future__ import annotations

import numpy as np
import pytest

from pooled_predictor.errors import ShapeInferenceError
from tests.onnx_helpers import feeds_of, make_node_model, run_ours, type_outputs
from tests.ops.test_norm import check

rng = np.random.default_rng(11)
NEWEST = 28

# (equation, operand shapes)
CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),                               # implicit output: ik
    ("ij,j->i", [(3, 4), (4,)]),
    ("i,i", [(6,)] * 2),                                      # dot product, scalar output
    ("i,j->ij", [(3,), (4,)]),
    ("ij->ji", [(3, 4)]),
    ("ij", [(3, 4)]),                                          # implicit: identity
    ("ji", [(3, 4)]),                                          # implicit: transpose
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),                                          # trace
    ("ijk->", [(2, 3, 4)]),
    ("ijk->j", [(2, 3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),          # attention scores
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 5), (2, 3, 5, 8)]),
    ("...ij,...jk->...ik", [(2, 3, 3, 4), (3, 4, 5)]),          # broadcast batch
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),                    # implicit with ellipsis first
    ("i...,i...->...", [(5, 2, 3), (5, 3)]),
    ("...,...->...", [(2, 3), (3,)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]),            # three operands
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),             # bilinear
    (" ij , jk -> ik ", [(3, 4), (4, 5)]),                      # spaces
    ("Ab,bC->AC", [(3, 4), (4, 2)]),                            # upper case labels
    ("Ba,aA", [(3, 4), (4, 2)]),                                # implicit: "A" < "B"
    ("ij,ij->ij", [(3, 4), (3, 4)]),                            # element-wise product
    ("bij,bkj->bik", [(1, 3, 4), (2, 5, 4)]),                   # size-1 label broadcast (numpy)
    # the batched-matmul plan: operand views, transposes, copies, pre-sums, output permutes
    ("ji,jk->ik", [(4, 3), (4, 5)]),                            # A transposed (a free view)
    ("ij,kj->ik", [(3, 4), (5, 4)]),                            # B transposed (a free view)
    ("jbi,bjk->bik", [(4, 2, 3), (2, 4, 5)]),                   # A copied into batch-rows-cols order
    ("bij,bjk->bki", [(2, 3, 4), (2, 4, 5)]),                   # output permuted from scratch
    ("hbij,bhjk->bhik", [(3, 2, 4, 5), (2, 3, 5, 6)]),          # batch labels in another order
    ("ijk,jl->il", [(3, 4, 2), (4, 5)]),                        # k summed away from A first
    ("ij,jkl->i", [(3, 4), (4, 2, 5)]),                         # k, l summed away from B first
    ("...ij,jk->...ik", [(2, 3, 3, 4), (4, 5)]),                # ellipsis only in A: free rows
    ("bij,jk->bik", [(2, 3, 4), (4, 5)]),
    ("bi,bi->b", [(5, 7), (5, 7)]),                             # batched dot
    ("b...ij,b...jk->b...ik", [(2, 3, 4, 5), (2, 1, 5, 6)]),     # ellipsis inside, broadcast
    ("ik,kj->ji", [(3, 0), (0, 4)]),                            # empty contraction: zeros
    ("ij,jk->ik", [(0, 4), (4, 5)]),                            # empty output
]


def inputs_of(shapes, dtype=np.float32):
    if np.dtype(dtype).kind in "iu":
        return [rng.integers(0, 5, s).astype(dtype) for s in shapes]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def np_reference(equation):
    return lambda *xs: [np.asarray(np.einsum(equation, *xs))]


@pytest.mark.parametrize("equation,shapes", CASES, ids=[c[0].replace(" ", "_") for c in CASES])
@pytest.mark.parametrize("opset", [12, 13, NEWEST])
def test_einsum(equation, shapes, opset):
    check("Einsum", inputs_of(shapes), {"equation": equation}, opset=opset,
          reference=np_reference(equation))


@pytest.mark.parametrize("dtype,rtol", [(np.float16, 5e-3), (np.float64, 1e-9), (np.int32, 0),
                                        (np.int64, 0), (np.uint8, 0)])
@pytest.mark.parametrize("equation,shapes", [CASES[0], CASES[12], CASES[15], CASES[19], CASES[8]],
                         ids=["matmul", "batched", "ellipsis", "three", "diagonal"])
def test_einsum_dtypes(dtype, rtol, equation, shapes):
    check("Einsum", inputs_of(shapes, dtype), {"equation": equation}, opset=NEWEST, rtol=rtol,
          reference=np_reference(equation))


@pytest.mark.parametrize("equation,matmul", [("ij,jk->ik", True), ("bhqd,bhkd->bhqk", True),
                                             ("...ij,...jk", True), ("i,i", True), ("ij,ij->ij", False),
                                             ("i,j->ij", False), ("ii,ij->j", False), ("ij->ji", False),
                                             ("abc,cd,de->abe", False)])
def test_einsum_uses_batched_matmul_for_contractions(equation, matmul):
    """Two operands with a summed shared label run as one matmul; the rest through numpy.einsum."""
    from pooled_predictor.ir import Node
    from pooled_predictor.ops.context import OpContext
    from pooled_predictor.ops.cpu.einsum import Einsum

    shapes = {"ij,jk->ik": [(3, 4), (4, 5)], "bhqd,bhkd->bhqk": [(2, 3, 4, 8), (2, 3, 5, 8)],
              "...ij,...jk": [(2, 3, 4), (4, 5)], "i,i": [(6,), (6,)], "ij,ij->ij": [(3, 4), (3, 4)],
              "i,j->ij": [(3,), (4,)], "ii,ij->j": [(3, 3), (3, 4)], "ij->ji": [(3, 4)],
              "abc,cd,de->abe": [(2, 3, 4), (4, 5), (5, 6)]}[equation]
    node = Node("Einsum", [f"x{i}" for i in range(len(shapes))], ["y"], {"equation": equation}, name="e")
    ctx = OpContext(node, 12, shapes, [np.dtype(np.float32)] * len(shapes))
    assert (Einsum(ctx, equation=equation).plan is not None) == matmul


@pytest.mark.parametrize("static", [(0,), (1,), (0, 1)])
def test_einsum_with_weights(static):
    check("Einsum", inputs_of([(3, 4), (4, 5)]), {"equation": "ij,jk->ik"}, opset=13, static=static)


@pytest.mark.parametrize("equation,shapes,match", [
    ("ij,jk->ik", [(3, 4)], "1 input"),
    ("ij->ik", [(3, 4)], "'k' appears in no input"),
    ("ijk->ij", [(3, 4)], "rank 2"),
    ("ij,jk->ik", [(3, 4), (5, 6)], "label 'j' has size 4 and 5"),
    ("i1,1k->ik", [(3, 4), (4, 5)], "not a label"),
    ("...ij->ij", [(2, 3, 4)], "missing from the output"),
    ("ij->ii", [(3, 4)], "repeats a label"),
])
def test_einsum_rejects_bad_equation(equation, shapes, match):
    xs = inputs_of(shapes)
    model = make_node_model("Einsum", xs, {"equation": equation}, opset=13)
    type_outputs(model, [np.zeros(1, np.float32)])
    with pytest.raises(ShapeInferenceError, match=match) as info:
        run_ours(model, feeds_of(xs))
    assert "Einsum_0" in str(info.value)
