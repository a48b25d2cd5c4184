"""LayoutCache: a Net's layouts by input shapes, least recently used first, within a byte budget.

A Net that sees alternating input shapes keeps the layout of each (its arena and bound
calls) instead of building it anew on every change: the current layout always stays,
the others are kept while their arenas add up to at most `budget_bytes`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

from .layout import Layout


class LayoutCache:
    """Layouts keyed by input shapes (tuple of (name, shape) pairs).

    Args:
        budget_bytes: bytes of arenas kept beside the current layout's.
    """

    def __init__(self, budget_bytes: int):
        self.budget_bytes = int(budget_bytes)
        self._layouts: "OrderedDict[tuple, Layout]" = OrderedDict()
        self.built = 0  # layouts built so far

    def __len__(self) -> int:
        return len(self._layouts)

    def nbytes(self) -> int:
        """Bytes of every cached layout's arena, the current one included."""
        return sum(l.nbytes for l in self._layouts.values())

    def get(self, key: tuple, build: Callable[[], Layout]) -> Layout:
        """The layout for `key`, built by `build()` when not cached; it becomes the most recent,
        and older ones past the budget are dropped."""
        layout = self._layouts.pop(key, None)
        if layout is None:
            layout = build()
            self.built += 1
        self._layouts[key] = layout  # most recently used last
        self.trim(key)
        return layout

    def replace(self, key: tuple, layout: Layout) -> None:
        """Put `layout` for `key` in place of the one cached (the most recent now)."""
        self._layouts.pop(key, None)
        self._layouts[key] = layout
        self.built += 1
        self.trim(key)

    def trim(self, current: tuple | None) -> None:
        """Drop the least recently used layouts other than `current` until the others fit the budget."""
        total = sum(l.nbytes for k, l in self._layouts.items() if k != current)
        for k in list(self._layouts):
            if total <= self.budget_bytes:
                break
            if k != current:
                total -= self._layouts.pop(k).nbytes

    def clear(self) -> None:
        self._layouts.clear()
