"""Live ranges of values over an ordered list of steps, with in-place merging.

A program is a list of `Step`s run in order; step ``i`` reads some values and
writes others. Values are named by strings and are SSA: each is written by at
most one step, or is a graph input (written by the caller before step 0).

Conventions (all step indices are inclusive):

* A value written at step ``i`` and last read at step ``j`` has
  ``LiveRange(i, j)``. A value written but never read (and not a graph output)
  lives only at its writing step: ``LiveRange(i, i)``.
* A graph output lives to the last step: ``last = num_steps - 1``.
* A graph input is always live: ``LiveRange(BEFORE_FIRST_STEP, num_steps)``,
  i.e. from the virtual step -1 (the caller fills it) to the virtual step
  ``num_steps`` (after the run). These two virtual steps are ordinary integers,
  so intervals compare and overlap the usual way; "not written yet" and
  "not read" are never encoded as step numbers (fb-caffe-exts' kNotDefined = 0
  collides with step 0; we do not repeat that).

In-place merging (the Net's element-wise kernels, declared per step through
`Step.inplace`): a written value ``w`` joins the buffer of a read value ``r``
when that buffer dies at this step (no member is read later), ``w`` and ``r``
have exactly the same size in bytes, neither is a graph input or output, and
no other write of this step already took that buffer. The buffer's live range
is then the union of its members' ranges.

Source: the liveness analysis of fb-caffe-exts' optimizeMemory
(predictor/Optimize.cpp), made SSA and extended with in-place merges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

BEFORE_FIRST_STEP = -1
"""The virtual step at which graph inputs are defined (before step 0)."""


@dataclass(frozen=True)
class Step:
    """One step of a program: the values it reads and writes.

    Args:
        reads: names of the values read (a tuple of str; lists are converted).
        writes: names of the values written (a tuple of str), each new (SSA).
        inplace: optional mapping written value -> read value whose storage the
            kernel may reuse (element-wise ops: Relu, Add, BatchNormalization).
            It is a permission, not a decision: `analyze` grants it only when
            the read value dies at this step, has the same size in bytes, and is
            not a graph input or output.
    Raises:
        ValueError: reads or writes is a bare str, a name is not a str, a value
            is written twice by the step, or `inplace` names a value the step
            does not write / read.
    """

    reads: tuple[str, ...]
    writes: tuple[str, ...]
    inplace: Mapping[str, str] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if isinstance(self.reads, str) or isinstance(self.writes, str):
            raise ValueError(f"reads and writes are tuples of names, not a str: "
                             f"Step(reads={self.reads!r}, writes={self.writes!r})")
        reads, writes = tuple(self.reads), tuple(self.writes)
        for name in reads + writes:
            if not isinstance(name, str):
                raise ValueError(f"step value names must be str, got {name!r}")
        if len(set(writes)) != len(writes):
            raise ValueError(f"step writes a value twice: {writes}")
        object.__setattr__(self, "reads", reads)
        object.__setattr__(self, "writes", writes)
        if self.inplace is not None:
            inplace = dict(self.inplace)
            for w, r in inplace.items():
                if w not in writes or r not in reads:
                    raise ValueError(
                        f"inplace {w!r} -> {r!r}: {w!r} must be one of the writes "
                        f"{writes} and {r!r} one of the reads {reads}")
            object.__setattr__(self, "inplace", MappingProxyType(inplace))


@dataclass(frozen=True, slots=True)
class LiveRange:
    """Inclusive interval of steps ``[first, last]`` during which a value is live.

    Graph inputs have ``first == BEFORE_FIRST_STEP`` (-1) and
    ``last == num_steps``; see the module docstring.
    """

    first: int
    last: int

    def overlaps(self, other: LiveRange) -> bool:
        """True when both ranges contain a common step."""
        return self.first <= other.last and other.first <= self.last

    def __contains__(self, step: int) -> bool:
        return self.first <= step <= self.last

    def union(self, other: LiveRange) -> LiveRange:
        """Smallest range covering both (they are contiguous for in-place buffers)."""
        return LiveRange(min(self.first, other.first), max(self.last, other.last))


@dataclass(frozen=True)
class Liveness:
    """Result of `analyze`: live ranges of buffers and values.

    A *buffer* is a group of values sharing storage through in-place merges; it
    is named by its *root*, the first value of the group. Without in-place
    merging every value is its own root.

    Attributes:
        steps: the analysed steps.
        num_steps: ``len(steps)``.
        inputs: graph inputs, in the order given.
        outputs: graph outputs, in the order given.
        value_ranges: value -> its own LiveRange (before any in-place merge),
            in definition order (inputs first, then by writing step).
        ranges: root -> LiveRange of the buffer (union of its members).
        alias_of: value -> root of its buffer (roots map to themselves).
        members: root -> values of the buffer, in definition order.
        sizes: root -> size of the buffer in bytes.
    """

    steps: tuple[Step, ...]
    num_steps: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    value_ranges: dict[str, LiveRange]
    ranges: dict[str, LiveRange]
    alias_of: dict[str, str]
    members: dict[str, list[str]]
    sizes: dict[str, int]

    @property
    def values(self) -> list[str]:
        """All values, in definition order."""
        return list(self.value_ranges)


def _check_sizes(names: Iterable[str], sizes: Mapping[str, int]) -> dict[str, int]:
    out = {}
    for name in names:
        if name not in sizes:
            raise ValueError(f"value {name!r} has no size in `sizes` (bytes)")
        size = sizes[name]
        if isinstance(size, (bool, float)) or int(size) != size or size < 0:
            raise ValueError(f"value {name!r}: size must be a non-negative int of bytes, got {size!r}")
        out[name] = int(size)
    return out


def analyze(steps: Sequence[Step], sizes: Mapping[str, int], inputs: Iterable[str] = (),
            outputs: Iterable[str] = (), inplace: bool = True) -> Liveness:
    """Compute the live range of every value and buffer of a step list.

    Args:
        steps: the program, in execution order.
        sizes: value -> size in bytes (int >= 0; 0 is fine, e.g. for values kept
            outside the arena). Extra keys are ignored.
        inputs: graph inputs: always live, never shared, never reused in place.
        outputs: graph outputs: live until the last step, never reused in place.
        inplace: apply the in-place merges declared by `Step.inplace`.
    Returns:
        Liveness; see its attributes and the module docstring for conventions.
    Raises:
        ValueError: a value is read before being written and is not an input;
            a value is written twice (or an input is written); an output is
            never written; a value has no size or a bad one.
    Source: fb-caffe-exts optimizeMemory (analyze), SSA form.
    """
    steps = tuple(steps)
    inputs, outputs = tuple(dict.fromkeys(inputs)), tuple(dict.fromkeys(outputs))
    n = len(steps)
    input_set, output_set = set(inputs), set(outputs)
    first: dict[str, int] = {name: BEFORE_FIRST_STEP for name in inputs}
    last: dict[str, int] = {name: n for name in inputs}
    writers = {}
    for i, step in enumerate(steps):
        if not isinstance(step, Step):
            raise ValueError(f"step {i} is a {type(step).__name__}, expected memory_opt.Step")
        for w in step.writes:
            writers.setdefault(w, i)
    for i, step in enumerate(steps):
        for r in step.reads:
            if r not in first:
                where = (f"it is written at step {writers[r]}" if r in writers
                         else "it is never written and is not a graph input")
                raise ValueError(f"value {r!r} is read at step {i} before being written: {where}")
            if r not in input_set:
                last[r] = max(last[r], i)
        for w in step.writes:
            if w in first:
                origin = "a graph input" if w in input_set else f"written at step {first[w]}"
                raise ValueError(f"value {w!r} is written at step {i} but is already {origin}; "
                                 f"values must be written once (SSA)")
            first[w] = last[w] = i
    for name in outputs:
        if name not in first:
            raise ValueError(f"graph output {name!r} is never written and is not a graph input")
        if name not in input_set:
            last[name] = max(last[name], n - 1)
    value_sizes = _check_sizes(first, sizes)
    value_ranges = {name: LiveRange(first[name], last[name]) for name in first}

    alias_of = {name: name for name in first}
    members = {name: [name] for name in first}
    buffer_last = dict(last)  # root -> last step of the whole buffer
    if inplace:
        pinned = input_set | output_set
        for i, step in enumerate(steps):
            if not step.inplace:
                continue
            taken = set()
            for w in step.writes:
                r = step.inplace.get(w)
                if r is None or w in pinned or r in pinned:
                    continue
                root = alias_of[r]
                if root in taken or buffer_last[root] != i or value_sizes[w] != value_sizes[r]:
                    continue
                taken.add(root)
                alias_of[w] = root
                members[root].append(w)
                del members[w]
                buffer_last[root] = max(buffer_last[root], buffer_last.pop(w))
    ranges = {root: LiveRange(first[root], buffer_last[root]) for root in members}
    return Liveness(
        steps=steps, num_steps=n, inputs=inputs, outputs=outputs,
        value_ranges=value_ranges, ranges=ranges, alias_of=alias_of, members=members,
        sizes={root: value_sizes[root] for root in members})


def buffer_sizes(liveness: Liveness, sizes: Mapping[str, int] | None = None) -> dict[str, int]:
    """Size in bytes of every buffer (root -> bytes).

    Args:
        liveness: result of `analyze`.
        sizes: value -> bytes; None uses the sizes given to `analyze`.
    Raises:
        ValueError: a value has no size, or two members of an in-place buffer
            differ in size (re-run `analyze` with the new sizes).
    """
    if sizes is None:
        return dict(liveness.sizes)
    values = _check_sizes(liveness.alias_of, sizes)
    out = {}
    for root, group in liveness.members.items():
        out[root] = values[root]
        for name in group:
            if values[name] != values[root]:
                raise ValueError(
                    f"in-place alias {name!r} has {values[name]} bytes but its buffer "
                    f"{root!r} has {values[root]}; re-run analyze() with these sizes")
    return out


def peak_live_bytes(ranges: Mapping[str, LiveRange], sizes: Mapping[str, int]) -> int:
    """Max over steps of the total bytes of the intervals live at that step.

    Args:
        ranges: name -> LiveRange (steps may run from -1 to num_steps).
        sizes: name -> bytes, for every name in `ranges`.
    Returns:
        The peak, in bytes (0 for no ranges).
    """
    if not ranges:
        return 0
    names = list(ranges)
    firsts = np.fromiter((ranges[k].first for k in names), np.int64, len(names))
    lasts = np.fromiter((ranges[k].last for k in names), np.int64, len(names))
    nbytes = np.fromiter((sizes[k] for k in names), np.int64, len(names))
    lo = int(firsts.min())
    delta = np.zeros(int(lasts.max()) - lo + 2, np.int64)
    np.add.at(delta, firsts - lo, nbytes)
    np.add.at(delta, lasts - lo + 1, -nbytes)
    return int(np.cumsum(delta).max())


def lower_bound(liveness: Liveness, sizes: Mapping[str, int] | None = None) -> int:
    """Liveness lower bound: no plan of these live ranges uses fewer bytes.

    It is the max over steps of the total size of the buffers live at that
    step. For the bound without in-place reuse, pass a liveness from
    ``analyze(..., inplace=False)`` (or use `Plan.lower_bound_no_inplace_bytes`).

    Args:
        liveness: result of `analyze`.
        sizes: value -> bytes; None uses the sizes given to `analyze`.
    Returns:
        The bound in bytes.
    Raises:
        ValueError: as `buffer_sizes`.
    """
    return peak_live_bytes(liveness.ranges, buffer_sizes(liveness, sizes))
