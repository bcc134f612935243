"""Every predicate on one attribute of one class, indexed by operator family.

``collect(value, found)`` reports the slots of the predicates that ``value`` satisfies. Predicates
kept in sorted indexes (every operator but ``isPresent``, ``str-regex`` and variables: equality,
order, affixes, ``str-contains``) are reported on both sides, satisfied in ``found.sat`` and failed
in ``found.fail``, as slices of their index: the matcher counts whichever side is smaller. The
others are reported in ``found.pos`` when satisfied. Each predicate is reported at most once per
value, which is what makes counting exact.

Number and string predicates are kept apart so that a string value never reaches a numeric
index and vice versa: that is the language's rule, and it also halves the work per value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from broker.language.model import Predicate
from broker.language.operators import PRESENT
from broker.language.regex import REGEX, Search, encoded, searcher
from broker.language.values import Value, Var
from broker.matching.bounds import Bounds

__all__ = ["AttributeIndex", "Found"]

Parts = list[Any]  # NumPy arrays of slots (views, never copies)


class Found:
    """What one publication's values select in a class's indexes, before counting."""

    __slots__ = ("fail", "pos", "sat")

    def __init__(self) -> None:
        self.pos: Parts = []  # other predicates satisfied
        self.sat: Parts = []  # sorted predicates satisfied
        self.fail: Parts = []  # sorted predicates not satisfied


class Slots:
    """A growable int64 array: O(1) amortised append, and a view of the live part for counting.

    Buckets are NumPy arrays rather than lists because the matcher concatenates them, and
    converting a Python list costs as much per element as the whole NumPy count does.
    """

    __slots__ = ("array", "size")

    def __init__(self) -> None:
        self.array = np.empty(4, dtype=np.int64)
        self.size = 0

    def append(self, slot: int) -> None:
        if self.size == len(self.array):
            self.array = np.concatenate((self.array, np.empty(self.size, dtype=np.int64)))
        self.array[self.size] = slot
        self.size += 1

    def view(self) -> np.ndarray:
        return self.array[: self.size]

    def __len__(self) -> int:
        return self.size


class _Texts:
    """``str-prefix``, ``str-postfix`` or ``str-contains``: a sorted index of the texts, their
    distinct values and lengths.

    The texts a value satisfies are a few distinct keys (its affix of each known length; for
    ``contains``, the needles it contains, found by testing each needle or each substring of a
    known length, whichever is less), each a run of equal keys: both sides of the split are
    slices, as for equality.
    """

    __slots__ = ("bounds", "distinct", "kind", "lengths")

    def __init__(self, bounds: Bounds, kind: str) -> None:
        self.bounds = bounds
        self.kind = kind
        self.distinct: dict[str, None] = {}
        self.lengths: list[int] = []

    def add(self, text: str, slot: int) -> None:
        self.bounds.add(text, slot)
        self.distinct[text] = None
        if len(text) not in self.lengths:
            self.lengths = sorted([*self.lengths, len(text)])

    def collect(self, value: str, found: Found) -> None:
        self.bounds.split_among(self._satisfied(value), found.sat, found.fail)

    def _satisfied(self, value: str) -> set[str]:
        size, lengths = len(value), self.lengths
        if self.kind == "str-prefix":
            texts = {value[:length] for length in lengths if length <= size}
        elif self.kind == "str-postfix":
            texts = {value[size - length :] for length in lengths if length <= size}
        elif len(self.distinct) <= size * len(lengths):
            return {needle for needle in self.distinct if needle in value}
        else:
            texts = {
                value[start : start + length] for length in lengths for start in range(size - length + 1)
            }
        return texts & self.distinct.keys()


class _Regexes:
    """``str-regex``: the slots of each distinct pattern. A string value is encoded once and searched
    with each pattern (RE2, linear in the value); the slots of those that match are satisfied.

    Not a sorted index: a pattern's failed side is not a slice, so these predicates are counted like
    ``isPresent``, satisfied only (``found.pos``). The cost per value grows with the distinct
    patterns of the attribute (about 1 us each), not with the subscriptions that share them.
    """

    __slots__ = ("patterns",)

    def __init__(self) -> None:
        self.patterns: dict[str, tuple[Search, Slots]] = {}

    def add(self, pattern: str, slot: int) -> None:
        entry = self.patterns.get(pattern)
        if entry is None:
            entry = self.patterns[pattern] = (searcher(pattern), Slots())
        entry[1].append(slot)

    def collect(self, value: str, found: Found) -> None:
        data = encoded(value)
        pos = found.pos
        for search, slots in self.patterns.values():
            if search(data):
                pos.append(slots.view())


class _Family:
    """The predicates of one value type: sorted keys for equality and order, a list for presence.

    Equality is a sorted index too (a bucket is a run of equal keys, found by two bisections) rather
    than a hash, so that its failed side is two slices: a value that most ``eq`` predicates accept
    is then as cheap to count as one that few accept. ``neq`` is the same index with the sides
    swapped.
    """

    __slots__ = ("eq", "lower", "neq", "present", "upper", "upper_strict")

    def __init__(self) -> None:
        self.present = Slots()
        self.eq: Bounds | None = None  # value == key
        self.neq: Bounds | None = None  # value != key
        self.lower: Bounds | None = None  # value >= key
        self.upper: Bounds | None = None  # value <= key
        self.upper_strict: Bounds | None = None  # value < key (strings only)

    def collect(self, value: Value, found: Found) -> None:
        if self.present:
            found.pos.append(self.present.view())
        if self.eq is not None:
            self.eq.split_equal(value, found.sat, found.fail)
        if self.neq is not None:
            self.neq.split_equal(value, found.fail, found.sat)
        if self.lower is not None:
            self.lower.split_below(value, True, found.sat, found.fail)
        if self.upper is not None:
            self.upper.split_above(value, True, found.sat, found.fail)
        if self.upper_strict is not None:
            self.upper_strict.split_above(value, False, found.sat, found.fail)


class AttributeIndex:
    __slots__ = ("bounds", "by_type", "integers", "numbers", "strings", "texts")

    def __init__(self) -> None:
        self.numbers = _Family()
        self.strings = _Family()
        self.integers = Slots()  # $I$ variables: present and integral
        # by operator: str-prefix, str-postfix, str-contains (sorted), str-regex (not sorted)
        self.texts: dict[str, _Texts | _Regexes] = {}
        self.bounds: list[Bounds] = []  # the sorted indexes of both types
        self.by_type: dict[bool, list[Bounds]] = {True: [], False: []}  # numeric? -> its sorted indexes

    def add(self, predicate: Predicate, slot: int) -> bool:
        """Index the predicate; True when it went to a sorted index (it is counted on both sides)."""
        op, value = predicate.op, predicate.value
        if isinstance(value, Var):
            if value.kind == "S":
                self.strings.present.append(slot)
            elif value.kind == "F":
                self.numbers.present.append(slot)
            else:
                self.integers.append(slot)
            return False
        numeric = not isinstance(value, str)
        family = self.numbers if numeric else self.strings
        if op == PRESENT:
            family.present.append(slot)
        elif op in ("eq", "="):
            family.eq = self._sorted(family.eq, numeric)
            family.eq.add(value, slot)
        elif op in ("neq", "<>"):
            family.neq = self._sorted(family.neq, numeric)
            family.neq.add(value, slot)
        elif isinstance(value, str):
            self._add_string(op, value, slot)
        else:
            self._add_number(op, value, slot)  # type: ignore[arg-type]
        return op != PRESENT and op != REGEX

    def settle(self, budget: int) -> int:
        """Merge pending entries into the sorted indexes within ``budget``; return the budget used."""
        used = 0
        for bounds in self.bounds:
            if used < budget and bounds.pending_keys:
                used += bounds.settle(budget - used)
        return used

    def everything(self, out: Parts) -> None:
        """The slots of every sorted predicate: all fail when the publication lacks the attribute."""
        for bounds in self.bounds:
            bounds.everything(out)

    def _add_number(self, op: str, value: float, slot: int) -> None:
        family = self.numbers
        if op in (">", ">="):
            # x > t is x >= nextafter(t): exact, since every accepted number is a float64.
            key = math.nextafter(value, math.inf) if op == ">" else value
            family.lower = self._sorted(family.lower, numeric=True)
            family.lower.add(key, slot)
        else:
            key = math.nextafter(value, -math.inf) if op == "<" else value
            family.upper = self._sorted(family.upper, numeric=True)
            family.upper.add(key, slot)

    def _sorted(self, bounds: Bounds | None, numeric: bool) -> Bounds:
        """The given sorted index, or a new one."""
        if bounds is None:
            bounds = Bounds(numeric)
            self.bounds.append(bounds)
            self.by_type[numeric].append(bounds)
        return bounds

    def _add_string(self, op: str, value: str, slot: int) -> None:
        family = self.strings
        if op in ("str-gt", "str-ge"):
            # x > t is x >= t + "\0": the smallest string greater than t.
            family.lower = self._sorted(family.lower, numeric=False)
            family.lower.add(value + "\0" if op == "str-gt" else value, slot)
        elif op == "str-le":
            family.upper = self._sorted(family.upper, numeric=False)
            family.upper.add(value, slot)
        elif op == "str-lt":
            family.upper_strict = self._sorted(family.upper_strict, numeric=False)
            family.upper_strict.add(value, slot)
        elif op == REGEX:
            regexes = self.texts.get(op)
            if regexes is None:
                regexes = self.texts[op] = _Regexes()
            regexes.add(value, slot)
        else:
            texts = self.texts.get(op)
            if texts is None:
                texts = self.texts[op] = _Texts(self._sorted(None, numeric=False), op)
            texts.add(value, slot)

    def collect(self, value: Value, found: Found) -> None:
        for bounds in self.by_type[isinstance(value, str)]:
            bounds.everything(found.fail)  # a value of one type fails every predicate of the other
        if isinstance(value, str):
            self.strings.collect(value, found)
            for texts in self.texts.values():
                texts.collect(value, found)
        else:
            # The keys are floats, and bisect compares a float with a float faster than an int
            # with a float; exact, since every accepted number is a float64.
            self.numbers.collect(float(value), found)
            if self.integers and isinstance(value, int):
                found.pos.append(self.integers.view())
