"""fuse_matmul_add: MatMul(A, W 2-D weight) + bias over the last dim -> Gemm (A 2-D) or MatMulAdd (A batched)."""

import pytest
from onnx import helper

from tests.passes.pass_helpers import check_pass, make_model, ops, rand

K, N = 8, 5


def mm_add(bias_shape, a_shape=(3, K), bias_first=False, extra_outputs=(), w_input=False, relu=False):
    weights = {"b": rand(*bias_shape, seed=2)}
    inputs = {"a": a_shape}
    if w_input:
        inputs["W"] = (K, N)
    else:
        weights["W"] = rand(K, N, seed=1)
    nodes = [helper.make_node("MatMul", ["a", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["b", "m"] if bias_first else ["m", "b"], ["s"], name="add")]
    out = "s"
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
        out = "y"
    return make_model(nodes, inputs, [out] + list(extra_outputs), weights)


def feeds(a_shape=(3, K), w_input=False):
    f = {"a": rand(*a_shape, seed=3)}
    if w_input:
        f["W"] = rand(K, N, seed=1)
    return f


@pytest.mark.parametrize("bias_shape", [(N,), (1, N), (1,), (1, 1), ()], ids=str)
@pytest.mark.parametrize("bias_first", [False, True])
def test_matmul_add_becomes_gemm(bias_shape, bias_first):
    after, report = check_pass(mm_add(bias_shape, bias_first=bias_first), feeds(), "fuse_matmul_add", fires=True)
    assert ops(after) == ["Gemm"]
    assert after.nodes[0].inputs[0] == "a"


def test_then_relu_becomes_fused_gemm():
    after, _ = check_pass(mm_add((N,), relu=True), feeds(), ["fuse_matmul_add", "fuse_gemm_activation"], fires=True)
    assert ops(after) == ["pooled_predictor.FusedGemm"]


@pytest.mark.parametrize("bias_shape", [(3, N), (3, 1)], ids=str)
def test_bias_that_is_not_over_the_last_dim(bias_shape):
    """(M, N) and (M, 1) depend on the row: Gemm's C could take them, but they are not a bias; and
    M is the batch, which a later input may change."""
    check_pass(mm_add(bias_shape), feeds(), "fuse_matmul_add", fires=False)


@pytest.mark.parametrize("bias_shape", [(N,), (1, N), ()], ids=str)
@pytest.mark.parametrize("a_shape", [(2, 3, K), (2, 1, 3, K)], ids=str)
def test_batched_matmul_add_becomes_matmul_add(a_shape, bias_shape):
    after, _ = check_pass(mm_add(bias_shape, a_shape=a_shape, bias_first=len(bias_shape) == 2), feeds(a_shape),
                          "fuse_matmul_add", fires=True)
    assert ops(after) == ["pooled_predictor.MatMulAdd"]
    assert after.nodes[0].inputs == ["a", "W", "b"]


def test_batched_bias_over_rows_is_left_alone():
    check_pass(mm_add((3, N), a_shape=(2, 3, K)), feeds((2, 3, K)), "fuse_matmul_add", fires=False)


@pytest.mark.parametrize("bias_shape", [(N,), (1,), ()], ids=str)
@pytest.mark.parametrize("a_shape", [(3, K), (2, 3, K), (K,)], ids=str)
def test_unknown_rank_with_a_bias_of_rank_1_becomes_matmul_add(a_shape, bias_shape):
    """c of rank <= 1 adds no dimension: MatMulAdd means MatMul + Add for A of any rank, 1-D included."""
    model = mm_add(bias_shape)
    model.graph.input[0].type.tensor_type.ClearField("shape")
    after, _ = check_pass(model, feeds(a_shape), "fuse_matmul_add", fires=True)
    assert ops(after) == ["pooled_predictor.MatMulAdd"]


@pytest.mark.parametrize("bias_shape", [(1, N), (1, 1)], ids=str)
def test_unknown_rank_with_a_2d_bias_is_left_alone(bias_shape):
    """(1, N) would make a 1-D A's (N,) product (1, N): only a known rank >= 2 may take it."""
    model = mm_add(bias_shape)
    model.graph.input[0].type.tensor_type.ClearField("shape")
    check_pass(model, feeds(), "fuse_matmul_add", fires=False)


def test_weight_fed_at_run_time_is_left_alone():
    check_pass(mm_add((N,), w_input=True), feeds(w_input=True), "fuse_matmul_add", fires=False)


def test_matmul_output_read_elsewhere_is_left_alone():
    check_pass(mm_add((N,), extra_outputs=["m"]), feeds(), "fuse_matmul_add", fires=False)


@pytest.mark.parametrize("n", [1, 3])
def test_rank_through_squeeze_without_axes_is_unknown(n):
    """Squeeze() of ("N", 1, K): the rank depends on whether N is 1, which a probe cannot know. A (1, N)
    bias waits for the shapes; an (N,) one fuses, A 1-D (N = 1) or 2-D alike."""
    nodes = [helper.make_node("Squeeze", ["x"], ["a"]),
             helper.make_node("MatMul", ["a", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    f = {"x": rand(n, 1, K, seed=3)}
    model = make_model(nodes, {"x": ("N", 1, K)}, ["y"], {"W": rand(K, N, seed=1), "b": rand(1, N, seed=2)},
                       opset=11)
    check_pass(model, f, "fuse_matmul_add", fires=False)
    check_pass(model, f, "fuse_matmul_add", fires=n > 1, input_shapes={"x": (n, 1, K)})  # A 2-D: Gemm
    model = make_model(nodes, {"x": ("N", 1, K)}, ["y"], {"W": rand(K, N, seed=1), "b": rand(N, seed=2)}, opset=11)
    after, _ = check_pass(model, f, "fuse_matmul_add", fires=True)
    assert ops(after) == ["Squeeze", "pooled_predictor.MatMulAdd"]
