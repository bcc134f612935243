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
from mypy_extensions import mypyc_attr

from broker.language.model import Predicate
from broker.language.operators import PRESENT
from broker.language.regex import REGEX, PatternSet, Search, encoded, literal_prefix, searcher
from broker.language.values import Value, Var
from broker.matching.bounds import Bounds
from broker.records import Slotted

__all__ = ["AttributeIndex", "Found"]

Parts = list[Any]  # NumPy arrays of slots (views, never copies)


class Found:
    """What one publication's values select in a class's indexes, before counting."""

    __slots__ = ("fail", "pos", "sat")

    def __init__(self) -> None:
        self.pos: Parts = []  # other predicates satisfied
        self.sat: Parts = []  # sorted predicates satisfied
        self.fail: Parts = []  # sorted predicates not satisfied


class Slots(Slotted):
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


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # see broker.records
class _Texts(Slotted):
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


# Unanchored patterns of one attribute are searched together in blocks (PatternSet) of at least this
# many: those added since the last block are searched one by one until they make a new one.
SET_MIN = 16


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # see broker.records
class _Level(Slotted):
    """Consecutive unanchored patterns of ``_Regexes``, ``start`` to ``end``, in one PatternSet (or
    searched one by one when RE2 could not build it: ``merges`` is then false)."""

    __slots__ = ("end", "merges", "set", "start")

    def __init__(self, patterns: list[str], start: int, end: int) -> None:
        self.set = PatternSet.of(patterns[start:end])
        self.start, self.end = start, end
        self.merges = self.set is not None


class _Regexes(Slotted):
    """``str-regex``: the slots of each distinct pattern. A string value is encoded once and searched
    with the patterns it may match (RE2, linear in the value); the slots of those that match are
    satisfied.

    A pattern with a literal prefix (``^JOB_[0-9]+``: ``JOB_``, see ``literal_prefix``) is only
    searched when the value starts with it, found by one dict look-up per distinct prefix length as
    for ``str-prefix``. The others are searched together, a few RE2 sets each searched in one pass
    over the value: Bentley and Saxe's logarithmic method, where each block of ``SET_MIN`` new
    patterns becomes a set, merged with the last one while that is not twice as large, so there are
    at most log2(patterns / SET_MIN) + 1 sets and each pattern is compiled into a set a logarithmic
    number of times.
    A set RE2 cannot build (too large together) or that runs out of memory for a value is searched
    one pattern at a time: slower, never wrong.

    Not a sorted index: a pattern's failed side is not a slice, so these predicates are counted like
    ``isPresent``, satisfied only (``found.pos``).
    """

    __slots__ = ("by_prefix", "entries", "lengths", "levels", "unanchored", "unanchored_patterns")

    def __init__(self) -> None:
        self.entries: dict[str, tuple[Search, Slots]] = {}  # pattern -> (search, slots)
        self.by_prefix: dict[str, dict[str, tuple[Search, Slots]]] = {}  # prefix -> pattern -> entry
        self.lengths: list[int] = []  # of the prefixes, ascending
        self.unanchored: list[tuple[Search, Slots]] = []  # the others, in the order they came
        self.unanchored_patterns: list[str] = []
        self.levels: list[_Level] = []  # cover unanchored[:levels[-1].end], larger first

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (the matcher is in a broker's snapshot) as its patterns and their slots, in the
        order they came: the compiled searches and sets are made again when it is read."""
        return _Regexes._rebuilt, ([(pattern, slots) for pattern, (_, slots) in self.entries.items()],)

    @staticmethod
    def _rebuilt(entries: list[tuple[str, Slots]]) -> _Regexes:
        regexes = _Regexes()
        for pattern, slots in entries:
            regexes._insert(pattern, slots)
        return regexes

    def add(self, pattern: str, slot: int) -> None:
        entry = self.entries.get(pattern)
        if entry is None:
            entry = self._insert(pattern, Slots())
        entry[1].append(slot)

    def _insert(self, pattern: str, slots: Slots) -> tuple[Search, Slots]:
        entry = self.entries[pattern] = (searcher(pattern), slots)
        prefix = literal_prefix(pattern)
        if prefix:
            self.by_prefix.setdefault(prefix, {})[pattern] = entry
            if len(prefix) not in self.lengths:
                self.lengths = sorted([*self.lengths, len(prefix)])
        else:
            self.unanchored.append(entry)
            self.unanchored_patterns.append(pattern)
            self._grow()
        return entry

    def _grow(self) -> None:
        levels, patterns = self.levels, self.unanchored_patterns
        covered = levels[-1].end if levels else 0
        if len(patterns) - covered < SET_MIN:
            return
        levels.append(_Level(patterns, covered, len(patterns)))
        while len(levels) > 1 and levels[-2].merges and levels[-1].merges:
            last, before = levels[-1], levels[-2]
            if before.end - before.start > 2 * (last.end - last.start):
                break
            merged = _Level(patterns, before.start, last.end)
            if not merged.merges:  # RE2 cannot hold them together: both stay as they are
                before.merges = False
                break
            levels[-2:] = [merged]

    def collect(self, value: str, found: Found) -> None:
        data = encoded(value)
        pos = found.pos
        unanchored = self.unanchored
        for level in self.levels:
            hits = None if level.set is None else level.set.matches(data)
            if hits is None:
                for search, slots in unanchored[level.start : level.end]:
                    if search(data):
                        pos.append(slots.view())
            else:
                start = level.start
                for number in hits:
                    pos.append(unanchored[start + number][1].view())
        for number in range(self.levels[-1].end if self.levels else 0, len(unanchored)):
            search, slots = unanchored[number]
            if search(data):
                pos.append(slots.view())
        by_prefix, size = self.by_prefix, len(value)
        for length in self.lengths:
            if length > size:
                break
            group = by_prefix.get(value[:length])
            if group is not None:
                for search, slots in group.values():
                    if search(data):
                        pos.append(slots.view())


class _Family(Slotted):
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


class AttributeIndex(Slotted):
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
