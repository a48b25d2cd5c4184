"""Planners: turn a Liveness into a Plan (byte offsets in one arena).

* `plan_arena`: offset planner, greedy by size with best fit (Pisarchyk & Lee
  2020; TFLite's arena planner). Reaches the liveness lower bound or close to
  it on CNN-like graphs.
* `plan_shared_buffers`: the fb-caffe-exts optimizeMemory baseline (linear
  scan into shared canonical buffers), laid out as one region per buffer.
* `plan_naive`: no sharing at all (fb-caffe-exts' Optimization::NONE).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import numpy as np

from .liveness import Liveness, buffer_sizes, peak_live_bytes
from .plan import Plan

MIN_BYTES_FOR_SHARING = 10_000
"""fb-caffe-exts' kMinimumCountForSharing: values of at most this many bytes never share."""

# Deterministic orderings tried first by plan_arena; each maps a buffer's
# (size, first, last, index) to a sort key. The first is Pisarchyk & Lee's.
_ORDERINGS = (
    lambda s, f, l, i: (-s, f, i),                      # greedy by size
    lambda s, f, l, i: (-s * (l - f + 1), -s, f, i),    # greedy by breadth
    lambda s, f, l, i: (f - l, -s, f, i),               # longest first
)
_NOISE_SIGMAS = (0.6, 1.0)  # spread of the random size weights of the later tries
_WORK_BUDGET = 60_000       # buffer + conflict visits over all tries (~20 ms)

def _align_up(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


def _check_alignment(alignment: int) -> None:
    if not isinstance(alignment, int) or alignment < 1:
        raise ValueError(f"alignment must be a positive int of bytes, got {alignment!r}")


def _value_sizes(liveness: Liveness, sizes: Mapping[str, int] | None) -> dict[str, int]:
    """value -> bytes, for every value (aliases take their root's size)."""
    roots = buffer_sizes(liveness, sizes)
    return {v: roots[root] for v, root in liveness.alias_of.items()}


def _make_plan(planner: str, liveness: Liveness, values: dict[str, int], inplace: bool,
               offsets: dict[str, int], alignment: int, groups=()) -> Plan:
    """Assemble a Plan; buffers are the in-place roots if `inplace`, else every value."""
    if inplace:
        buffer_of = dict(liveness.alias_of)
        ranges = dict(liveness.ranges)
    else:
        buffer_of = {v: v for v in liveness.alias_of}
        ranges = dict(liveness.value_ranges)
    sizes = {b: values[b] for b in ranges}
    no_inplace = peak_live_bytes(liveness.value_ranges, values)
    return Plan(
        planner=planner,
        offsets={v: offsets[b] for v, b in buffer_of.items()},
        arena_bytes=max((offsets[b] + sizes[b] for b in sizes), default=0),
        lower_bound_bytes=peak_live_bytes(ranges, sizes) if inplace else no_inplace,
        lower_bound_no_inplace_bytes=no_inplace,
        naive_bytes=sum(values.values()),
        alignment=alignment, buffer_of=buffer_of, ranges=ranges, sizes=sizes,
        groups=tuple(tuple(g) for g in groups))


def _conflicts(first: np.ndarray, last: np.ndarray) -> list[list[int]]:
    """For each interval, the indices of the other intervals sharing a step."""
    count, block = len(first), 1024
    out: list[list[int]] = []
    for lo in range(0, count, block):
        hi = min(lo + block, count)
        clash = (first[lo:hi, None] <= last[None, :]) & (first[None, :] <= last[lo:hi, None])
        clash[np.arange(hi - lo), np.arange(lo, hi)] = False
        rows, cols = np.nonzero(clash)
        cuts = np.cumsum(np.bincount(rows, minlength=hi - lo))[:-1]
        out.extend(part.tolist() for part in np.split(cols, cuts))
    return out


def _greedy_by_size(order: list[int], nbytes: list[int], conflicts: list[list[int]],
                    alignment: int) -> tuple[list[int], int]:
    """Place buffers in `order`: best-fit gap among time-overlapping placed buffers.

    Returns (offsets, arena bytes). Pisarchyk & Lee 2020, "Greedy by Size for
    Offset Calculation"; the gap search mirrors TFLite's simple_memory_arena.
    """
    offsets = [-1] * len(nbytes)
    ends = [0] * len(nbytes)
    arena = 0
    for b in order:
        size = nbytes[b]
        placed = sorted((offsets[x], ends[x]) for x in conflicts[b] if offsets[x] >= 0)
        best, best_gap, prev_end = -1, math.inf, 0
        for start, end in placed:
            candidate = _align_up(prev_end, alignment)
            gap = start - candidate
            if size <= gap < best_gap:
                best, best_gap = candidate, gap
            if end > prev_end:
                prev_end = end
        if best < 0:
            best = _align_up(prev_end, alignment)
        offsets[b], ends[b] = best, best + size
        arena = max(arena, best + size)
    return offsets, arena


def plan_arena(liveness: Liveness, sizes: Mapping[str, int] | None = None,
               alignment: int = 64, *, tries: int = 128) -> Plan:
    """Place every buffer at an offset in one arena, near the liveness lower bound.

    Buffers (in-place groups from `analyze`) are placed greedily, largest
    first, each into the smallest gap left between the already-placed buffers
    it overlaps in time (best fit), else above the highest of them (Pisarchyk &
    Lee's greedy by size). Greedy by size alone misses the bound on some DAGs
    (a large buffer placed low fragments the arena), so the same placement is
    also run with other orderings: by breadth (size x duration), longest first,
    then up to `tries` orderings by size times a random weight (lognormal,
    from a fixed seed). The smallest arena wins; the search stops as soon as
    an ordering reaches the bound (with every size rounded up to `alignment`),
    or after about 60,000 buffer and conflict visits (~20 ms). Ties in an
    ordering are broken by first step, then definition order, so the result is
    deterministic.

    Args:
        liveness: result of `analyze` (with or without in-place merges).
        sizes: value -> bytes; None uses the sizes given to `analyze`.
        alignment: every offset is a multiple of this many bytes.
        tries: most randomized orderings tried after the deterministic ones
            (0: greedy by size, breadth and duration only).
    Returns:
        Plan with planner "arena"; aliases share their root's offset; values of
        size 0 are at offset 0.
    Raises:
        ValueError: bad alignment, a missing size, or in-place members of
            different sizes.
    Source: Pisarchyk & Lee 2020, "Efficient Memory Management for Deep
    Neural Net Inference", Greedy by Size for Offset Calculation; TFLite
    arena planner (simple_memory_arena).
    """
    _check_alignment(alignment)
    values = _value_sizes(liveness, sizes)
    roots = [r for r in liveness.ranges if values[r] > 0]
    nbytes = [values[r] for r in roots]
    first = np.array([liveness.ranges[r].first for r in roots], np.int64)
    last = np.array([liveness.ranges[r].last for r in roots], np.int64)
    target = peak_live_bytes(liveness.ranges,
                             {r: _align_up(values[r], alignment) for r in liveness.ranges})
    conflicts = _conflicts(first, last)
    work_per_try = len(roots) + sum(map(len, conflicts))
    keys = [(nbytes[i], int(first[i]), int(last[i]), i) for i in range(len(roots))]
    orders = (sorted(range(len(roots)), key=lambda i: key(*keys[i])) for key in _ORDERINGS)
    best_offsets, best_arena, work = [], math.inf, 0
    for order in itertools.chain(orders, _random_orders(0, nbytes, tries)):
        placed, arena = _greedy_by_size(order, nbytes, conflicts, alignment)
        if arena < best_arena:
            best_offsets, best_arena = placed, arena
        work += work_per_try
        if best_arena <= target or work > _WORK_BUDGET:
            break
    offsets = dict.fromkeys(liveness.ranges, 0)
    offsets.update(zip(roots, best_offsets))
    return _make_plan("arena", liveness, values, True, offsets, alignment)


def _random_orders(seed: int, nbytes: list[int], tries: int):
    """Orderings by size x a lognormal weight: greedy by size, perturbed (the generator, and numpy.random
    with it, is made only when an ordering is asked for: most plans reach the bound before, and importing
    numpy.random took 30-40 ms of a process's first forward)."""
    rng = np.random.default_rng(seed)
    sizes = np.asarray(nbytes, np.float64)
    for k in range(tries):
        weights = sizes * rng.lognormal(0.0, _NOISE_SIGMAS[k % len(_NOISE_SIGMAS)], len(sizes))
        yield np.argsort(-weights, kind="stable").tolist()


def plan_shared_buffers(liveness: Liveness, sizes: Mapping[str, int] | None = None,
                        min_bytes_for_sharing: int = MIN_BYTES_FOR_SHARING,
                        alignment: int = 64) -> Plan:
    """The fb-caffe-exts optimizeMemory baseline: values share canonical buffers.

    Reproduces fb-caffe-exts' analyze/assign exactly, on the values (in-place
    merges are ignored: fb had none, so the liveness is read per value, as
    ``analyze(..., inplace=False)`` gives it):

    1. analysis: every value with (defined, used), in first-seen order (first
       read over all steps, then never-read values by writing step, then
       never-read inputs). defined = writing step; used = last reading step, or
       "not used" for a value no step reads. Inputs: defined = -inf, used = +inf.
       Outputs that are read are used until the last step (fb had no notion of
       outputs; this keeps a read output from being overwritten).
    2. stable sort by used ("not used" first, as fb's kNotUsed = -1).
    3. first fit: a candidate joins the first group whose last member B gives:
       both used, candidate bytes > min_bytes_for_sharing, and
       candidate.defined > B.used (strictly); otherwise it opens a new group.

    Each group is one region, as large as its largest member; regions are laid
    one after another (aligned) in creation order, and every member sits at
    its region's offset. With alignment=1, arena_bytes is fb's "After" total.

    Args:
        liveness: result of `analyze`; only its per-value ranges are used.
        sizes: value -> bytes; None uses the sizes given to `analyze`.
        min_bytes_for_sharing: fb's kMinimumCountForSharing (bytes).
        alignment: region offsets are multiples of this many bytes.
    Returns:
        Plan with planner "shared_buffers", one buffer per value, and `groups`.
    Raises:
        ValueError: bad alignment or a missing size.
    Source: fb-caffe-exts predictor/Optimize.cpp (analyze, isCompatible, assign).
    """
    _check_alignment(alignment)
    values = _value_sizes(liveness, sizes)
    inputs = set(liveness.inputs)
    seen = {}
    for step in liveness.steps:
        seen.update(dict.fromkeys(v for v in step.reads if v not in seen))
    for step in liveness.steps:
        seen.update(dict.fromkeys(v for v in step.writes if v not in seen))
    seen.update(dict.fromkeys(v for v in liveness.inputs if v not in seen))
    read = {v for step in liveness.steps for v in step.reads}
    analysis = []  # (value, defined, used); used None = "not used"
    for v in seen:
        if v in inputs:
            analysis.append((v, -math.inf, math.inf))
        else:
            analysis.append((v, liveness.value_ranges[v].first,
                             liveness.value_ranges[v].last if v in read else None))
    analysis.sort(key=lambda a: -math.inf if a[2] is None else a[2])

    groups: list[list[tuple]] = []
    for candidate in analysis:
        for group in groups:
            back = group[-1]
            if (candidate[2] is not None and back[2] is not None
                    and values[candidate[0]] > min_bytes_for_sharing
                    and candidate[1] > back[2]):
                group.append(candidate)
                break
        else:
            groups.append([candidate])

    offsets, end = {}, 0
    for group in groups:
        start = _align_up(end, alignment)
        offsets.update((member[0], start) for member in group)
        end = start + max(values[member[0]] for member in group)
    names = [[member[0] for member in group] for group in groups]
    return _make_plan("shared_buffers", liveness, values, False, offsets, alignment, names)


def plan_naive(liveness: Liveness, sizes: Mapping[str, int] | None = None,
               alignment: int = 64) -> Plan:
    """Every value its own region, in definition order (no sharing, no in-place).

    Args:
        liveness: result of `analyze`; in-place merges are ignored.
        sizes: value -> bytes; None uses the sizes given to `analyze`.
        alignment: offsets are multiples of this many bytes.
    Returns:
        Plan with planner "naive"; arena_bytes == naive_bytes when alignment
        divides every size.
    Raises:
        ValueError: bad alignment or a missing size.
    Source: fb-caffe-exts Predictor::Optimization::NONE.
    """
    _check_alignment(alignment)
    values = _value_sizes(liveness, sizes)
    offsets, end = {}, 0
    for v in liveness.value_ranges:
        offsets[v] = _align_up(end, alignment)
        end = offsets[v] + values[v]
    return _make_plan("naive", liveness, values, False, offsets, alignment)
