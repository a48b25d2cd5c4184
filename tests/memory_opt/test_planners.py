"""The three planners on hand-computed cases and on the classic CNNs."""


import pytest

from memory_opt import (LiveRange, Step, analyze, lower_bound, plan_arena, plan_naive,
                        plan_shared_buffers)
from memory_opt import synthetic


def chain(sizes, inputs=("x",), outputs=("y",)):
    """x -> v0 -> v1 -> ... -> y, one step per arrow."""
    names = list(inputs) + [f"v{i}" for i in range(len(sizes) - 2)] + list(outputs)
    steps = [Step((names[i],), (names[i + 1],)) for i in range(len(names) - 1)]
    return steps, dict(zip(names, sizes)), inputs, outputs


class TestSharedBuffers:
    """fb-caffe-exts optimizeMemory, reproduced on a 5-step chain x->a->b->c->d->y.

    analysis (defined, used): x(-inf, +inf) a(0, 1) b(1, 2) c(2, 3) d(3, 4) y(4, not used)
    sorted by used:           y, a, b, c, d, x
    first fit:                [y] [a] [b] (1 > 1 is false) -> [a, c] -> [b, d] -> [x]
    """

    names = ["x", "a", "b", "c", "d", "y"]

    def plan(self, **sizes):
        steps = [Step((u,), (v,)) for u, v in zip(self.names, self.names[1:])]
        all_sizes = dict.fromkeys(self.names, 20_000) | sizes
        lv = analyze(steps, all_sizes, inputs=["x"], outputs=["y"])
        plan = plan_shared_buffers(lv, alignment=1)
        plan.validate()
        return plan

    def test_hand_computed_grouping(self):
        plan = self.plan()
        assert plan.groups == (("y",), ("a", "c"), ("b", "d"), ("x",))
        assert plan.offsets == {"y": 0, "a": 20_000, "c": 20_000, "b": 40_000, "d": 40_000,
                                "x": 60_000}
        assert plan.arena_bytes == 80_000 and plan.naive_bytes == 120_000

    def test_values_of_10000_bytes_never_share(self):
        plan = self.plan(c=10_000)
        assert plan.groups == (("y",), ("a", "d"), ("b",), ("c",), ("x",))
        assert plan.arena_bytes == 4 * 20_000 + 10_000

    def test_values_of_10001_bytes_can_share(self):
        plan = self.plan(c=10_001)
        assert plan.groups == (("y",), ("a", "c"), ("b", "d"), ("x",))
        assert plan.arena_bytes == 80_000  # the group costs its largest member

    def test_threshold_applies_to_the_candidate_only(self):
        # as in fb: a small value opens a group that a large one may join
        plan = self.plan(a=5_000)
        assert ("a", "c") in plan.groups

    def test_threshold_is_a_parameter(self):
        plan = plan_shared_buffers(analyze(*chain([8] * 6)), min_bytes_for_sharing=0,
                                   alignment=1)
        assert plan.groups == (("y",), ("v0", "v2"), ("v1", "v3"), ("x",))

    def test_ignores_in_place_merges(self):
        steps = [Step(("x",), ("a",)), Step(("a",), ("b",), {"b": "a"}), Step(("b",), ("y",))]
        lv = analyze(steps, dict.fromkeys("xaby", 40_000), inputs=["x"], outputs=["y"])
        assert lv.alias_of["b"] == "a"
        plan = plan_shared_buffers(lv)
        plan.validate()
        assert plan.buffer_of["b"] == "b" and plan.offsets["a"] != plan.offsets["b"]
        assert plan.lower_bound_bytes == plan.lower_bound_no_inplace_bytes == 120_000

    def test_aligned_regions(self):
        plan = self.plan(a=20_001)
        assert all(offset % 64 == 0 for offset in plan_shared_buffers(
            analyze(*chain([20_001] * 6))).offsets.values())
        assert plan.offsets["b"] == 40_001  # alignment=1 packs regions back to back


class TestArena:
    def test_chain_reaches_the_bound_exactly(self):
        sizes = [64 * k for k in (3, 50, 7, 120, 64, 64, 9, 200, 1, 31)]
        lv = analyze(*chain(sizes))
        plan = plan_arena(lv)
        plan.validate()
        assert plan.arena_bytes == plan.lower_bound_bytes == lower_bound(lv)

    def test_aliases_share_their_root_offset(self):
        steps = [Step(("x",), ("a",)), Step(("a",), ("b",), {"b": "a"}), Step(("b",), ("y",))]
        lv = analyze(steps, {"x": 64, "a": 4096, "b": 4096, "y": 64}, inputs=["x"], outputs=["y"])
        plan = plan_arena(lv)
        plan.validate()
        assert plan.offsets["a"] == plan.offsets["b"]
        assert plan.buffer_of == {"x": "x", "a": "a", "b": "a", "y": "y"}
        assert plan.arena_bytes == plan.lower_bound_bytes == 64 + 4096 + 64
        assert plan.lower_bound_no_inplace_bytes == 64 + 2 * 4096

    def test_offsets_are_aligned(self):
        lv = analyze(*chain([1000, 3, 77, 5000, 12]))
        for alignment in (1, 8, 64, 256):
            plan = plan_arena(lv, alignment=alignment)
            plan.validate()
            assert all(o % alignment == 0 for o in plan.offsets.values())

    def test_zero_sized_values_sit_at_offset_zero(self):
        plan = plan_arena(analyze(*chain([64, 0, 128, 0])))
        plan.validate()
        assert plan.offsets["v0"] == 0 and plan.offsets["y"] == 0

    def test_sizes_argument_overrides_and_checks_aliases(self):
        steps = [Step(("x",), ("a",)), Step(("a",), ("b",), {"b": "a"}), Step(("b",), ("y",))]
        lv = analyze(steps, dict.fromkeys("xaby", 64), inputs=["x"], outputs=["y"])
        assert plan_arena(lv, dict.fromkeys("xaby", 128)).arena_bytes == 3 * 128
        with pytest.raises(ValueError, match="in-place alias 'b' has 64 bytes.*'a' has 128"):
            plan_arena(lv, {"x": 1, "a": 128, "b": 64, "y": 1})

    def test_bad_alignment(self):
        with pytest.raises(ValueError, match="alignment"):
            plan_arena(analyze(*chain([1, 2, 3])), alignment=0)

    def test_deterministic(self):
        lv = analyze(*synthetic.googlenet())
        assert plan_arena(lv).offsets == plan_arena(lv).offsets


class TestNaive:
    def test_every_value_its_own_region(self):
        lv = analyze(*chain([64, 128, 64, 192]))
        plan = plan_naive(lv)
        plan.validate()
        assert plan.offsets == {"x": 0, "v0": 64, "v1": 192, "y": 256}
        assert plan.arena_bytes == plan.naive_bytes == 448
        assert plan.reduction_vs_naive == 0.0


@pytest.mark.parametrize("name", ["alexnet", "googlenet", "resnet50", "resnet152"])
@pytest.mark.parametrize("inplace", [False, True])
def test_classic_nets_reach_the_bound(name, inplace):
    lv = analyze(*getattr(synthetic, name)(), inplace=inplace)
    plans = [plan_arena(lv), plan_shared_buffers(lv), plan_naive(lv)]
    for plan in plans:
        plan.validate()
        assert plan.arena_bytes >= plan.lower_bound_bytes
    assert plans[0].efficiency <= 1.01
    assert plans[0].arena_bytes <= plans[1].arena_bytes <= plans[2].arena_bytes


def test_shared_buffers_match_fb_reported_savings():
    """fb-caffe-exts README: ~50% saved on AlexNet-style nets, ~75% on GoogLeNet."""
    saved = {name: plan_shared_buffers(analyze(*getattr(synthetic, name)(), inplace=False))
             .reduction_vs_naive for name in ("alexnet", "googlenet")}
    assert saved["alexnet"] >= 0.5 and saved["googlenet"] >= 0.7


def test_a_500_value_graph_is_planned_to_the_bound():
    """ResNet-152's step list (500+ buffers). Its planning time is measured by benchmarks/memory.py."""
    net = synthetic.resnet152()
    lv = analyze(*net, inplace=False)
    plan = plan_arena(lv)
    plan.validate()
    assert len(lv.ranges) >= 500
    assert plan.efficiency <= 1.01
    assert plan.ranges["input_0"] == LiveRange(-1, lv.num_steps)
