"""Net under Optimization.MEMORY: one arena, bit-identical outputs, kept blobs, layout cache."""

import numpy as np
import pytest

from pooled_predictor import Config, Net, Optimization, PooledPredictor, Predictor, Program, UnknownBlobError
from pooled_predictor.importers import load_onnx
from tests.conftest import make_mlp

X = np.random.default_rng(5).standard_normal((8, 16)).astype(np.float32)


def nets(**kw):
    program = Program(load_onnx(make_mlp(hidden=64)))
    return Net(program), Net(program, optimization=Optimization.MEMORY, **kw)


@pytest.mark.parametrize("planner", ["arena", "shared"])
def test_memory_outputs_are_bit_identical_and_the_plan_is_valid(planner):
    none, mem = nets(planner=planner)
    none.forward([X]), mem.forward([X])
    np.testing.assert_array_equal(none.blob_by_name("y"), mem.blob_by_name("y"))
    plan = mem.memory_plan
    plan.validate()
    assert plan.arena_bytes >= plan.lower_bound_bytes
    if planner == "arena":  # the arena holds exactly the plan (rounded up to 64 bytes)
        assert mem.arena_bytes == -(-plan.arena_bytes // 64) * 64
    else:  # the fb baseline shares activations; kernel scratch gets one workspace after them
        assert mem.arena_bytes >= plan.arena_bytes
    assert none.memory_plan is None


def test_memory_uses_less_than_none_and_reaches_the_bound():
    none, mem = nets()
    none.reshape({"x": (256, 16)}), mem.reshape({"x": (256, 16)})
    assert mem.arena_bytes < none.arena_bytes
    assert mem.memory_plan.arena_bytes <= 1.01 * mem.memory_plan.lower_bound_bytes + 64


def test_intermediates_are_not_readable_unless_kept():
    _, mem = nets()
    mem.forward([X])
    with pytest.raises(UnknownBlobError, match="keep=\\['h1'\\]"):
        mem.blob_by_name("h1")
    assert "h1" not in mem.blob_names and "y" in mem.blob_names
    _, kept = nets(keep=["h1"])
    none, _ = nets()
    kept.forward([X]), none.forward([X])
    np.testing.assert_array_equal(kept.blob_by_name("h1"), none.blob_by_name("h1"))


def test_predictor_all_blobs_form_under_memory_returns_inputs_outputs_and_kept():
    p = Predictor(make_mlp(), optimization=Optimization.MEMORY, keep=["h2"])
    blobs = p.forward([X])
    assert set(blobs) == {"x", "h2", "y"}


def test_alternating_shapes_do_not_replan():
    _, mem = nets()
    for _ in range(5):
        for n in (1, 4, 9):
            mem.forward([np.ones((n, 16), np.float32)])
    assert mem.layouts_built == 3 and mem.cached_layouts == 3


def test_layout_cache_respects_its_byte_budget():
    program = Program(load_onnx(make_mlp()))
    net = Net(program, optimization=Optimization.MEMORY, cache_bytes=0)
    for n in (1, 4, 9, 1):
        net.forward([np.ones((n, 16), np.float32)])
    assert net.cached_layouts == 1 and net.layouts_built == 4


def test_restore_goes_back_to_default_shapes():
    _, mem = nets()
    mem.forward([np.ones((500, 16), np.float32)])
    big = mem.arena_bytes
    mem.cache_bytes = 0
    mem.restore()
    assert mem.input_shapes == {"x": (1, 16)} and mem.arena_bytes < big and mem.cached_layouts == 1


def test_restore_keeps_a_layout_that_fits_the_cache_budget():
    """Within cache_bytes going back would free nothing (the layout stays cached): the Net keeps it."""
    _, mem = nets()
    mem.forward([np.ones((500, 16), np.float32)])
    built, big = mem.layouts_built, mem.arena_bytes
    mem.restore()
    assert mem.input_shapes == {"x": (500, 16)} and mem.arena_bytes == big and mem.restored
    mem.forward([np.ones((500, 16), np.float32)])
    assert mem.layouts_built == built and mem.restored  # no reshape, so nothing more to restore
    mem.forward([np.ones((3, 16), np.float32)])
    assert not mem.restored


def _conv_with_free_spatial_dims():
    """A 3x3 Conv on x[N, 2, H, W] with no pads: its default shapes (symbolic dims as 1) are invalid."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 2, 3, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("cache_bytes", [0, 256 << 20])
def test_restore_with_invalid_default_shapes(cache_bytes):
    """No default layout to go back to: past the budget the layout is dropped, within it kept."""
    net = Net(Program(load_onnx(_conv_with_free_spatial_dims())), optimization=Optimization.MEMORY,
              cache_bytes=cache_bytes)
    x = np.ones((1, 2, 9, 9), np.float32)
    net.forward([x])
    net.restore()
    assert net.restored and net.layouts_built == 1
    assert net.input_shapes == (None if cache_bytes == 0 else {"x": (1, 2, 9, 9)})
    assert net.cached_layouts == (0 if cache_bytes == 0 else 1)
    net.forward([x])
    np.testing.assert_array_equal(net.blob_by_name("y"), np.full((1, 4, 7, 7), 18, np.float32))
    assert net.layouts_built == (2 if cache_bytes == 0 else 1)


@pytest.mark.parametrize("policy", ["restore", "keep"])
def test_pool_shape_policy(policy):
    """After a large job, 'restore' returns the worker's Net to the default shapes; 'keep' keeps it."""
    cfg = Config(model_bytes=[make_mlp().SerializeToString()], optimization=Optimization.MEMORY,
                 shape_policy=policy, layout_cache_bytes=0)
    with PooledPredictor(cfg) as pool:
        # then() runs on the worker that completed the job: its Net is pool.predictor(0).net() there
        state = pool.forward([np.ones((300, 16), np.float32)]).then(
            lambda out: (out["y"].shape, pool.predictor(0).net().input_shapes,
                         pool.predictor(0).net().cached_layouts)).result(timeout=30)
    shape, net_shapes, cached = state
    assert shape == (300, 10)
    if policy == "restore":
        assert net_shapes == {"x": (1, 16)} and cached == 1
    else:
        assert net_shapes == {"x": (300, 16)}
