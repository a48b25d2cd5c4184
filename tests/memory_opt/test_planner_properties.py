"""Properties of liveness and of the three planners on random programs (hypothesis).

Two generators: random step lists (any reads of already-defined values, one or
two writes, random in-place declarations) and random DAGs run in a random
topological order (random fan-out, skewed sizes). Every plan must validate and
be at least the lower bound; the shared-buffer baseline is NOT asserted to be
worse than the arena (not guaranteed in theory).
"""

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_opt import (PlanError, Step, analyze, lower_bound, plan_arena, plan_naive,
                        plan_shared_buffers)

PLANNERS = (plan_arena, plan_shared_buffers, plan_naive)
SETTINGS = settings(max_examples=120, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

SIZES = st.one_of(
    st.sampled_from([0, 1, 64, 4096, 9_999, 10_000, 10_001, 1 << 20]),
    st.integers(0, 300),
    st.integers(0, 60_000),
    # skewed: a few huge values among many small ones
    st.builds(lambda exponent, mantissa: mantissa << exponent, st.integers(0, 24), st.integers(1, 7)),
)


@st.composite
def step_lists(draw):
    """(steps, sizes, inputs, outputs, inplace) from arbitrary reads and writes."""
    inputs = [f"in{i}" for i in range(draw(st.integers(0, 3)))]
    sizes = {name: draw(SIZES) for name in inputs}
    defined, steps = list(inputs), []
    for i in range(draw(st.integers(0, 20))):
        reads = draw(st.lists(st.sampled_from(defined), max_size=3)) if defined else []
        writes = [f"s{i}_{k}" for k in range(draw(st.integers(0, 2)))]
        inplace = {}
        for w in writes:
            if reads and draw(st.booleans()):
                inplace[w] = draw(st.sampled_from(reads))
                sizes[w] = sizes[inplace[w]] if draw(st.integers(0, 3)) else draw(SIZES)
            else:
                sizes[w] = draw(SIZES)
        steps.append(Step(tuple(reads), tuple(writes), inplace or None))
        defined += writes
    outputs = draw(st.lists(st.sampled_from(defined), unique=True, max_size=3)) if defined else []
    return steps, sizes, inputs, outputs, draw(st.booleans())


@st.composite
def dags(draw):
    """A random DAG (node i reads 1-3 earlier nodes or inputs) in a random topological order."""
    n_inputs, n = draw(st.integers(1, 3)), draw(st.integers(1, 30))
    inputs = [f"in{i}" for i in range(n_inputs)]
    names = inputs + [f"v{i}" for i in range(n)]
    preds = [draw(st.lists(st.integers(0, n_inputs + i - 1), min_size=1, max_size=3, unique=True))
             for i in range(n)]
    sizes = {name: draw(SIZES) for name in inputs}
    priority = draw(st.permutations(range(n)))
    waiting = [sum(p >= n_inputs for p in ps) for ps in preds]
    users = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            if p >= n_inputs:
                users[p - n_inputs].append(i)
    ready, steps, consumed = [i for i in range(n) if waiting[i] == 0], [], set()
    while ready:  # Kahn's algorithm, the ready node of lowest drawn priority first
        i = min(ready, key=priority.__getitem__)
        ready.remove(i)
        reads = tuple(names[p] for p in preds[i])
        out = names[n_inputs + i]
        inplace = {out: reads[0]} if draw(st.booleans()) else None
        sizes[out] = sizes[reads[0]] if inplace and draw(st.integers(0, 3)) else draw(SIZES)
        steps.append(Step(reads, (out,), inplace))
        consumed.update(reads)
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    sinks = [v for v in names[n_inputs:] if v not in consumed]
    extra = draw(st.lists(st.sampled_from(names[n_inputs:]), max_size=2))
    return steps, sizes, inputs, list(dict.fromkeys(sinks + extra)), draw(st.booleans())


def overlaps_by_brute_force(plan):
    """True when, at some step, two live buffers of the plan share a byte."""
    steps = {t for r in plan.ranges.values() for t in range(r.first, r.last + 1)}
    for t in steps:
        live = sorted((plan.offsets[b], plan.offsets[b] + plan.sizes[b])
                      for b, r in plan.ranges.items() if t in r and plan.sizes[b] > 0)
        if any(end > start for (_, end), (start, _) in zip(live, live[1:])):
            return True
    return False


def check_liveness(lv, sizes):
    # the bound is the max over steps of the bytes live there, counted step by step
    brute = max([sum(lv.sizes[b] for b, r in lv.ranges.items() if t in r)
                 for t in range(-1, lv.num_steps + 1)], default=0)
    assert lower_bound(lv) == brute
    # in-place members: same size, never inputs or outputs, handed over at one step
    pinned = set(lv.inputs) | set(lv.outputs)
    for root, members in lv.members.items():
        assert all(lv.alias_of[m] == root and sizes[m] == sizes[root] for m in members)
        if len(members) > 1:
            assert not pinned & set(members)
            spans = [lv.value_ranges[m] for m in members]
            assert all(a.last == b.first for a, b in zip(spans, spans[1:]))
            assert lv.ranges[root].first == spans[0].first
            assert lv.ranges[root].last == max(s.last for s in spans)


def check_plans(program):
    steps, sizes, inputs, outputs, inplace = program
    lv = analyze(steps, sizes, inputs, outputs, inplace=inplace)
    check_liveness(lv, sizes)
    no_inplace = lower_bound(analyze(steps, sizes, inputs, outputs, inplace=False))
    assert lower_bound(lv) <= no_inplace
    for planner in PLANNERS:
        plan = planner(lv)
        plan.validate()
        assert not overlaps_by_brute_force(plan)
        assert set(plan.offsets) == set(lv.alias_of)
        assert all(plan.offsets[v] == plan.offsets[b] for v, b in plan.buffer_of.items())
        assert plan.arena_bytes >= plan.lower_bound_bytes
        assert plan.lower_bound_no_inplace_bytes == no_inplace
        assert plan.naive_bytes == sum(sizes[v] for v in lv.alias_of)
    assert plan_arena(lv).lower_bound_bytes == lower_bound(lv)
    assert plan_naive(lv).arena_bytes >= plan_naive(lv).naive_bytes


@SETTINGS
@given(step_lists())
def test_planners_on_random_step_lists(program):
    check_plans(program)


@SETTINGS
@given(dags())
def test_planners_on_random_dags(program):
    check_plans(program)


@SETTINGS
@given(dags(), st.data())
def test_validate_agrees_with_brute_force(program, data):
    steps, sizes, inputs, outputs, inplace = program
    plan = plan_arena(analyze(steps, sizes, inputs, outputs, inplace=inplace), alignment=1)
    # scramble some buffer offsets; validate must fail exactly when live bytes collide
    moved = {}
    for buffer in data.draw(st.lists(st.sampled_from(sorted(plan.sizes)), max_size=4)):
        moved[buffer] = data.draw(st.integers(0, max(plan.arena_bytes - plan.sizes[buffer], 0)))
    offsets = {v: moved.get(b, plan.offsets[v]) for v, b in plan.buffer_of.items()}
    scrambled = dataclasses.replace(plan, offsets=offsets)
    try:
        scrambled.validate()
        valid = True
    except PlanError:
        valid = False
    assert valid == (not overlaps_by_brute_force(scrambled))
