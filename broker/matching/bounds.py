"""Sorted keys of predicates, answering "which keys are below/above/equal to v" by bisection.

Keys are a sorted Python list, searched with ``bisect`` (C speed, no per-call NumPy overhead, and
the same code for numbers and strings); the subscription slots beside them are a NumPy array, so
a query returns slices of it: views, no copies, ready for the matcher's vectorised counting. A query
returns both sides of the split, the satisfied slots and the others, because the matcher counts
whichever side is smaller (see ``matcher``). Equality uses the same index: equal keys are a run.

``add`` only appends to a pending list, and ``settle`` merges at most a given number of pending
entries into the sorted part (numbers: one ``np.searchsorted`` and one ``np.insert``; strings: one
``bisect`` per new key and one ``np.insert``). The matcher calls
it with a budget per publication, so a bulk add is merged over the next publications and none of
them waits for the whole build; entries still pending are answered by a scan: vectorised over an
``array`` of floats for numbers, over an object array for strings.
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any

import numpy as np
from mypy_extensions import mypyc_attr

from broker.records import Slotted

__all__ = ["Bounds"]

_NO_SLOTS = np.empty(0, dtype=np.int64)
STRING_COST = 16  # a string entry's merge costs about as much as this many numbers' (docs/matching.md)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # see broker.records
class Bounds(Slotted):
    __slots__ = ("keys", "numeric", "pending_keys", "pending_slots", "slots")

    def __init__(self, numeric: bool) -> None:
        self.numeric = numeric
        self.keys: list[Any] = []
        self.slots: np.ndarray = _NO_SLOTS
        # Numbers: array("d") so that a scan is one vectorised comparison (every accepted number is
        # a float64, so the conversion is exact). Strings: a plain list.
        self.pending_keys: Any = array("d") if numeric else []
        self.pending_slots = array("q")

    def add(self, key: Any, slot: int) -> None:
        self.pending_keys.append(key)
        self.pending_slots.append(slot)

    def __len__(self) -> int:
        return len(self.keys) + len(self.pending_keys)

    def settle(self, budget: int) -> int:
        """Merge pending entries (oldest first) into the sorted part within ``budget``; return the
        budget used: an entry costs one for numbers, whose merge is vectorised, and
        ``STRING_COST`` for strings, merged one ``bisect`` at a time."""
        cost = 1 if self.numeric else STRING_COST
        taken = min(budget // cost, len(self.pending_keys))
        if not taken:
            return 0
        if self.numeric:
            self._settle_numbers(taken)
        else:
            self._settle_strings(taken)
        del self.pending_keys[:taken]
        del self.pending_slots[:taken]
        return taken * cost

    # Both merges insert each new key after the equal keys already present, in a stable order: the
    # result is the sorted order of all keys, whatever the batches they were merged in.

    def _settle_numbers(self, taken: int) -> None:
        new_keys = np.frombuffer(self.pending_keys)[:taken]
        order = np.argsort(new_keys, kind="stable")
        new_keys = new_keys[order]
        keys = np.array(self.keys, dtype=np.float64)
        positions = np.searchsorted(keys, new_keys, side="right")
        new_slots = np.frombuffer(self.pending_slots, np.int64)[:taken][order]
        self.slots = np.insert(self.slots, positions, new_slots)
        self.keys = np.insert(keys, positions, new_keys).tolist()

    def _settle_strings(self, taken: int) -> None:
        entries = zip(self.pending_keys[:taken], self.pending_slots[:taken], strict=True)
        batch = sorted(entries, key=lambda entry: entry[0])
        keys = self.keys
        positions = [bisect_right(keys, key) for key, _ in batch]
        self.slots = np.insert(self.slots, positions, [slot for _, slot in batch])
        merged: list[Any] = []
        start = 0
        for position, (key, _) in zip(positions, batch, strict=True):
            merged += keys[start:position]
            merged.append(key)
            start = position
        merged += keys[start:]
        self.keys = merged

    def split_equal(self, value: Any, sat: list[Any], fail: list[Any]) -> None:
        """Slots whose key equals value to ``sat``, the others to ``fail``."""
        keys, slots = self.keys, self.slots
        start = bisect_left(keys, value)
        end = bisect_right(keys, value, start)
        sat.append(slots[start:end])
        fail.append(slots[:start])
        fail.append(slots[end:])
        if self.pending_keys:
            self._scan(operator.eq, value, sat, fail)

    def split_among(self, values: set[Any], sat: list[Any], fail: list[Any]) -> None:
        """Slots whose key is one of ``values`` to ``sat``, the others to ``fail``."""
        keys, slots = self.keys, self.slots
        start = 0
        for low, high in sorted((bisect_left(keys, v), bisect_right(keys, v)) for v in values):
            fail.append(slots[start:low])
            sat.append(slots[low:high])
            start = high
        fail.append(slots[start:])
        if self.pending_keys:
            self._scan(_is_in, values, sat, fail)

    def split_below(self, value: Any, inclusive: bool, sat: list[Any], fail: list[Any]) -> None:
        """Slots whose key is < value (<= when inclusive) to ``sat``, the others to ``fail``."""
        end = (bisect_right if inclusive else bisect_left)(self.keys, value)
        sat.append(self.slots[:end])
        fail.append(self.slots[end:])
        if self.pending_keys:
            self._scan(operator.le if inclusive else operator.lt, value, sat, fail)

    def split_above(self, value: Any, inclusive: bool, sat: list[Any], fail: list[Any]) -> None:
        """Slots whose key is > value (>= when inclusive) to ``sat``, the others to ``fail``."""
        start = (bisect_left if inclusive else bisect_right)(self.keys, value)
        sat.append(self.slots[start:])
        fail.append(self.slots[:start])
        if self.pending_keys:
            self._scan(operator.ge if inclusive else operator.gt, value, sat, fail)

    def everything(self, out: list[Any]) -> None:
        """Every slot: what fails when the publication lacks the attribute."""
        out.append(self.slots)
        if self.pending_slots:
            out.append(np.array(self.pending_slots, dtype=np.int64))

    def _scan(self, test: Callable[[Any, Any], Any], value: Any, sat: list[Any], fail: list[Any]) -> None:
        """Split the pending entries by ``test(key, value)``, applied to an array of them."""
        slots = np.array(self.pending_slots, dtype=np.int64)
        if self.numeric:
            hit = test(np.frombuffer(self.pending_keys), value)
        elif test is _is_in:
            hit = np.array([key in value for key in self.pending_keys], dtype=bool)
        else:  # NumPy's loop over objects: faster than a comprehension. The value goes in
            # as an object too: as a NumPy string it would lose trailing NULs ("a\0" == "a")
            hit = test(np.array(self.pending_keys, dtype=object), np.array(value, dtype=object))
        sat.append(slots[hit])
        fail.append(slots[~hit])


def _is_in(key: Any, values: set[Any]) -> bool:
    return key in values
