"""The memory budget (issue 14): requests and models over it fail typed, before any allocation."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import (Config, InputError, Net, Optimization, PooledPredictor, Predictor,
                              ResourceExhaustedError)
from pooled_predictor import budget
from tests.conftest import make_mlp

F = TensorProto.FLOAT
MB = 1 << 20


def conv_model(pads=(1, 1, 1, 1), channels=4, kernel=3, batch="N"):
    x = helper.make_tensor_value_info("x", F, [batch, channels, "H", "W"])
    w = numpy_helper.from_array(np.ones((channels, channels, kernel, kernel), np.float32) / 9, "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"], name="conv", pads=list(pads)),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [helper.make_empty_tensor_value_info("y")], [w]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def test_default_limit_is_a_fraction_of_available_memory():
    assert budget.default_memory_limit() == int(budget.available_memory_bytes() * budget.DEFAULT_FRACTION)
    assert 0 < budget.default_memory_limit() < budget.available_memory_bytes()
    assert Predictor(make_mlp()).memory_limit_bytes == budget.default_memory_limit()
    with pytest.raises(TypeError):
        budget.resolve_limit("1GB")
    with pytest.raises(ValueError):
        Predictor(make_mlp(), memory_limit_bytes=0)
    with pytest.raises(ValueError, match="memory_limit_bytes"):
        Config(model_bytes=[b""], memory_limit_bytes=-5).validate()


def test_resource_exhausted_is_ours_and_a_memory_error():
    err = ResourceExhaustedError("x", 10, 5)
    assert isinstance(err, MemoryError) and (err.needed, err.limit) == (10, 5)


def test_conv_pads_2_31_minus_1_do_not_hang():
    """Found: a Conv with pads of 2^31-1 never returned (its kernel set up 2^32 row bands)."""
    big = 2 ** 31 - 1
    p = Predictor(conv_model(pads=(big,) * 4))
    with pytest.raises(ResourceExhaustedError, match="node 'conv' \\((Fused)?Conv\\) outputs") as info:
        p.forward([np.ones((1, 4, 4, 4), np.float32)], ["y"])
    assert info.value.needed > 2 ** 64 and info.value.limit == p.memory_limit_bytes


def test_batch_of_2_31_refused_and_the_net_stays_usable():
    """Found: a batch of 2^31 raised MemoryError (net.py); the Net keeps its previous shapes."""
    p = Predictor(make_mlp(), memory_limit_bytes=64 * MB)
    x = np.ones((2, 16), np.float32)
    (y,) = p.forward([x], ["y"])
    huge = np.broadcast_to(np.float32(1), (2 ** 31, 16))  # 128 GiB if it were real; a view of 4 bytes
    with pytest.raises(ResourceExhaustedError) as info:
        p.forward([huge], ["y"])
    assert info.value.needed > info.value.limit == 64 * MB
    net = p.net()
    assert net.input_shapes == {"x": (2, 16)}
    np.testing.assert_array_equal(p.forward([x], ["y"])[0], y)


def test_activations_of_21_gb_refused_before_allocation():
    """Found: inputs whose activations need 21-24 GB raised MemoryError (net.py: the arena)."""
    p = Predictor(conv_model(), memory_limit_bytes=256 * MB)
    x = np.ones((1, 4, 8, 8), np.float32)
    expect = p.forward([x], ["y"])[0]
    net = p.net()
    with pytest.raises(ResourceExhaustedError, match="over the memory limit of 268,435,456 bytes"):
        net.reshape({"x": (80, 4, 4096, 4096)})  # 21.5 GB of activations
    assert net.input_shapes == {"x": (1, 4, 8, 8)}
    np.testing.assert_array_equal(p.forward([x], ["y"])[0], expect)


def test_huge_convolution_scratch_refused():
    """Found: huge convolution scratch (ops/cpu/conv.py) raised MemoryError: the arena check sees it."""
    p = Predictor(conv_model(channels=64, kernel=7, pads=(3, 3, 3, 3)), optimization=Optimization.MEMORY,
                  graph_optimization_level="none")
    net = p.new_net()
    net.reshape({"x": (1, 64, 64, 64)})
    needed = net.arena_bytes
    outputs = 2 * 64 * 64 * 64 * 4 + 64 * 64 * 64 * 4  # x, h, y
    assert needed > outputs  # the arena holds scratch too
    tight = Net(p.program, memory_limit_bytes=outputs + 1024, optimization=Optimization.NONE)
    with pytest.raises(ResourceExhaustedError, match="arena"):
        tight.reshape({"x": (1, 64, 64, 64)})


def test_constant_folding_over_the_budget():
    shape = numpy_helper.from_array(np.array([1 << 20, 1 << 12], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"], name="big"),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1])],
                                            [helper.make_empty_tensor_value_info("y")], [shape]),
                          opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ResourceExhaustedError, match="node 'big'"):
        Predictor(m, memory_limit_bytes=64 * MB)  # 4 GiB of constant: refused, not folded


def test_pool_job_over_the_budget_fails_its_future_and_the_worker_goes_on():
    config = Config(model_bytes=[make_mlp().SerializeToString()], memory_limit_bytes=16 * MB)
    with PooledPredictor(config) as pool:
        x = np.ones((3, 16), np.float32)
        big = np.zeros((1 << 20, 16), np.float32)  # 64 MiB input: the arena needs more than 16 MiB
        fut = pool.forward([big])
        with pytest.raises(ResourceExhaustedError):
            fut.result(timeout=60)
        assert pool.forward([x]).result(timeout=60)["y"].shape == (3, 10)
    with pytest.raises(InputError):
        Predictor(make_mlp()).forward([np.ones((2, 15), np.float32)])


@pytest.mark.parametrize("quota,period,cpus", [("200000 100000", None, 2), ("150000 100000", None, 2),
                                               ("50000 100000", None, 1), ("max 100000", None, None),
                                               ("-1", "100000", None), ("400000", "100000", 4),
                                               ("garbage", None, None)])
def test_cgroup_cpu_quota(tmp_path, quota, period, cpus):
    """cgroup v2's cpu.max ("QUOTA PERIOD", "max PERIOD") and v1's cfs_quota_us / cfs_period_us,
    in whole CPUs rounded up; None without a quota."""
    q = tmp_path / "quota"
    q.write_text(quota + "\n")
    p = None
    if period is not None:
        p = tmp_path / "period"
        p.write_text(period + "\n")
    assert budget.cgroup_cpu_quota(((str(tmp_path / "absent"), None), (str(q), None if p is None else str(p)))) == cpus


def test_available_cpus_is_at_most_the_affinity_mask():
    import os

    n = budget.available_cpus()
    assert 1 <= n <= len(os.sched_getaffinity(0))
