"""Plan: where every value lives in one arena, with its proof and metrics.

A plan places *buffers* (a value, or a group of values merged in place; see
`memory_opt.liveness`) at byte offsets in a single arena. `Plan.validate`
checks the only property that matters for correctness: two buffers live at a
common step never share a byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .liveness import LiveRange


class PlanError(ValueError):
    """A plan is unsafe: two live buffers overlap, or a buffer is misplaced."""


@dataclass(frozen=True)
class Plan:
    """Offsets of every value in one arena.

    Attributes:
        planner: name of the planner that made it ("arena", "shared_buffers", "naive").
        offsets: value -> byte offset in the arena, for EVERY value of the
            liveness (graph inputs and outputs included). In-place aliases have
            their buffer root's offset. Values of size 0 sit at offset 0.
        arena_bytes: size of the arena in bytes: the highest end of a buffer.
        lower_bound_bytes: liveness lower bound (bytes) for the live ranges this
            plan used: with in-place merges when the planner applied them.
        lower_bound_no_inplace_bytes: the same bound without in-place merges.
        naive_bytes: sum of the sizes of all values (no sharing at all).
        alignment: every offset is a multiple of this many bytes.
        buffer_of: value -> buffer (root) it lives in.
        ranges: buffer -> LiveRange used for planning.
        sizes: buffer -> bytes.
        groups: for the shared-buffer planner, the values of each shared
            region in layout order; empty for the other planners.
    """

    planner: str
    offsets: dict[str, int]
    arena_bytes: int
    lower_bound_bytes: int
    lower_bound_no_inplace_bytes: int
    naive_bytes: int
    alignment: int
    buffer_of: dict[str, str]
    ranges: dict[str, LiveRange]
    sizes: dict[str, int]
    groups: tuple[tuple[str, ...], ...] = field(default=())

    @property
    def efficiency(self) -> float:
        """arena_bytes / lower_bound_bytes (1.0 is optimal; 1.0 when both are 0)."""
        if self.lower_bound_bytes == 0:
            return 1.0 if self.arena_bytes == 0 else float("inf")
        return self.arena_bytes / self.lower_bound_bytes

    @property
    def reduction_vs_naive(self) -> float:
        """Fraction of the naive total saved: 1 - arena_bytes / naive_bytes
        (fb-caffe-exts' "Compression"; 0.0 when naive_bytes is 0)."""
        if self.naive_bytes == 0:
            return 0.0
        return 1.0 - self.arena_bytes / self.naive_bytes

    def summary(self) -> dict:
        """JSON-ready metrics (bytes as ints, ratios as floats)."""
        return {
            "planner": self.planner,
            "values": len(self.offsets),
            "buffers": len(self.sizes),
            "naive_bytes": self.naive_bytes,
            "arena_bytes": self.arena_bytes,
            "lower_bound_bytes": self.lower_bound_bytes,
            "lower_bound_no_inplace_bytes": self.lower_bound_no_inplace_bytes,
            "efficiency": self.efficiency,
            "reduction_vs_naive": self.reduction_vs_naive,
            "alignment": self.alignment,
        }

    def validate(self) -> None:
        """Prove the plan safe.

        Checks that every value has an offset equal to its buffer's, that every
        buffer is aligned and lies inside ``[0, arena_bytes)``, and that no two
        buffers live at a common step overlap in bytes. O(B^2) time in the
        number of buffers B, in blocks of numpy comparisons.

        Raises:
            PlanError: naming the values, their live ranges and byte intervals.
        """
        for value, buffer in self.buffer_of.items():
            if value not in self.offsets or buffer not in self.offsets:
                raise PlanError(f"value {value!r} (buffer {buffer!r}) has no offset")
            if self.offsets[value] != self.offsets[buffer]:
                raise PlanError(
                    f"in-place alias {value!r} is at offset {self.offsets[value]} but its "
                    f"buffer {buffer!r} is at {self.offsets[buffer]}")
        names = list(self.sizes)
        for name in names:
            off, size = self.offsets[name], self.sizes[name]
            if off < 0 or off + size > self.arena_bytes or off % self.alignment:
                raise PlanError(
                    f"buffer {name!r} at bytes [{off}, {off + size}) does not fit an arena of "
                    f"{self.arena_bytes} bytes with {self.alignment}-byte aligned offsets")
        names = [k for k in names if self.sizes[k] > 0]
        count = len(names)
        first = np.array([self.ranges[k].first for k in names], np.int64)
        last = np.array([self.ranges[k].last for k in names], np.int64)
        start = np.array([self.offsets[k] for k in names], np.int64)
        end = start + np.array([self.sizes[k] for k in names], np.int64)
        block = 512
        for lo in range(0, count, block):
            rows = slice(lo, min(lo + block, count))
            clash = ((first[rows, None] <= last[None, :]) & (first[None, :] <= last[rows, None])
                     & (start[rows, None] < end[None, :]) & (start[None, :] < end[rows, None]))
            clash &= np.arange(lo, rows.stop)[:, None] < np.arange(count)[None, :]
            if clash.any():
                i, j = np.argwhere(clash)[0]
                self._raise_clash(names[lo + i], names[j])

    def _raise_clash(self, a: str, b: str) -> None:
        ra, rb = self.ranges[a], self.ranges[b]
        oa, ob = self.offsets[a], self.offsets[b]
        ea, eb = oa + self.sizes[a], ob + self.sizes[b]
        raise PlanError(
            f"values {a!r} (steps {ra.first}..{ra.last}, bytes [{oa}, {ea})) and "
            f"{b!r} (steps {rb.first}..{rb.last}, bytes [{ob}, {eb})) are both live at step "
            f"{max(ra.first, rb.first)} and overlap in bytes [{max(oa, ob)}, {min(ea, eb)})")
