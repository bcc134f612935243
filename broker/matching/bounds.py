"""Sorted thresholds of one-sided predicates, answering "which keys are below/above v" by bisection.

Keys are a sorted Python list, searched with ``bisect`` (C speed, no per-call NumPy overhead, and
the same code for numbers and strings); the subscription slots beside them are a NumPy array, so
a query returns a slice of it: a view, no copy, ready for the matcher's vectorised counting.

``add`` only appends to a pending list. The next query merges the pending keys in one pass
(one ``bisect`` per new key and one ``np.insert``), so bulk loading costs one merge and an
interleaved add/match costs O(n) memory moves, never a rebuild of the index.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any

import numpy as np

__all__ = ["Bounds"]


class Bounds:
    __slots__ = ("keys", "pending", "slots")

    def __init__(self) -> None:
        self.keys: list[Any] = []
        self.slots: np.ndarray = np.empty(0, dtype=np.int64)
        self.pending: list[tuple[Any, int]] = []

    def add(self, key: Any, slot: int) -> None:
        self.pending.append((key, slot))

    def __len__(self) -> int:
        return len(self.keys) + len(self.pending)

    def _merge(self) -> None:
        # Stable sort, then insert each new key after the equal keys already present: the
        # positions agree with sorted(keys + new), which is stable too.
        new = sorted(self.pending, key=lambda entry: entry[0])
        keys = self.keys
        positions = [bisect_right(keys, key) for key, _ in new]
        self.slots = np.insert(self.slots, positions, [slot for _, slot in new])
        self.keys = sorted(keys + [key for key, _ in new])
        self.pending = []

    def below(self, value: Any, inclusive: bool, out: list[Any]) -> None:
        """Append the slots whose key is < value (<= when inclusive)."""
        if self.pending:
            self._merge()
        end = (bisect_right if inclusive else bisect_left)(self.keys, value)
        if end:
            out.append(self.slots[:end])

    def above(self, value: Any, inclusive: bool, out: list[Any]) -> None:
        """Append the slots whose key is > value (>= when inclusive)."""
        if self.pending:
            self._merge()
        start = (bisect_left if inclusive else bisect_right)(self.keys, value)
        if start < len(self.keys):
            out.append(self.slots[start:])
