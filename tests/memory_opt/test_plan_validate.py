"""Plan.validate() can fail, and says why; metrics."""

import dataclasses

import pytest

from memory_opt import Plan, PlanError, Step, analyze, plan_arena, plan_naive


@pytest.fixture
def plan():
    # x -> a -> b (in place on a) -> c -> y, with a long-lived skip from a to y
    steps = [Step(("x",), ("a",)), Step(("a",), ("s",)), Step(("s",), ("b",), {"b": "s"}),
             Step(("b",), ("c",)), Step(("c", "a"), ("y",))]
    sizes = {"x": 640, "a": 1280, "s": 2560, "b": 2560, "c": 640, "y": 64}
    plan = plan_arena(analyze(steps, sizes, inputs=["x"], outputs=["y"]))
    plan.validate()
    return plan


def with_offsets(plan, **offsets):
    return dataclasses.replace(plan, offsets=plan.offsets | offsets)


def test_overlap_of_two_live_buffers_is_caught(plan):
    good = with_offsets(plan, x=0, a=640, s=1920, b=1920, c=4480, y=1920)
    good.validate()
    # a (steps 0..4) and the buffer of s and b (steps 1..3) are live together
    bad = with_offsets(good, s=1280, b=1280)
    with pytest.raises(PlanError) as error:
        bad.validate()
    assert str(error.value) == (
        "values 'a' (steps 0..4, bytes [640, 1920)) and 's' (steps 1..3, bytes [1280, 3840)) "
        "are both live at step 1 and overlap in bytes [1280, 1920)")
    assert isinstance(error.value, ValueError)


def test_buffers_live_at_different_steps_may_overlap(plan):
    # y (step 4) and the buffer of s and b (steps 1..3) never share a step
    with_offsets(plan, y=plan.offsets["s"]).validate()


def test_buffer_outside_the_arena_is_caught(plan):
    with pytest.raises(PlanError, match="'y' at bytes .* does not fit an arena"):
        with_offsets(plan, y=plan.arena_bytes).validate()
    with pytest.raises(PlanError, match="does not fit"):
        with_offsets(plan, y=-64).validate()


def test_misaligned_offset_is_caught(plan):
    with pytest.raises(PlanError, match="64-byte aligned"):
        with_offsets(plan, y=plan.offsets["y"] + 8).validate()


def test_alias_away_from_its_buffer_is_caught(plan):
    assert plan.buffer_of["b"] == "s"
    with pytest.raises(PlanError, match="in-place alias 'b' is at offset"):
        with_offsets(plan, b=plan.offsets["b"] + 64).validate()


def test_missing_offset_is_caught(plan):
    offsets = dict(plan.offsets)
    del offsets["c"]
    with pytest.raises(PlanError, match="'c'.*has no offset"):
        dataclasses.replace(plan, offsets=offsets).validate()


def test_zero_sized_buffers_never_clash(plan):
    sizes = dict(plan.sizes, y=0)
    dataclasses.replace(plan, sizes=sizes, offsets=plan.offsets | {"y": 0}).validate()


def test_metrics(plan):
    assert plan.planner == "arena" and plan.alignment == 64
    assert plan.naive_bytes == 640 + 1280 + 2560 + 2560 + 640 + 64
    # peak at step 3: x + a + (s, b) + c; without in-place, at step 2: x + a + s + b
    assert plan.lower_bound_bytes == 640 + 1280 + 2560 + 640
    assert plan.lower_bound_no_inplace_bytes == 640 + 1280 + 2 * 2560
    assert plan.arena_bytes == 5120 and plan.efficiency == 1.0
    assert plan.reduction_vs_naive == pytest.approx(1 - 5120 / plan.naive_bytes)
    summary = plan.summary()
    assert summary["arena_bytes"] == 5120 and summary["buffers"] == 5 and summary["values"] == 6


def test_empty_plan_metrics():
    plan = plan_naive(analyze([], {}))
    plan.validate()
    assert isinstance(plan, Plan)
    assert plan.arena_bytes == plan.lower_bound_bytes == plan.naive_bytes == 0
    assert plan.efficiency == 1.0 and plan.reduction_vs_naive == 0.0
