"""The counting matcher: which subscriptions does a publication match?

Subscriptions are first split by class (every filter has ``[class,eq,C]``, the most selective
access there is, one hash look-up). Inside a class each subscription gets a dense slot number and
each predicate goes into the index of its attribute (see ``attribute_index``). A publication asks
only the indexes of the attributes it carries; every satisfied predicate adds one to its slot's
count, and a subscription matches when its count equals its number of predicates. This is the
counting algorithm of Fabret et al. and of SIENA's forwarding table, with the per-attribute work
done by bisection and the counting vectorised with NumPy (``bincount``) once enough predicates
are satisfied for that to pay.

When most predicates hold (thousands of matches per publication), counting the satisfied ones
costs more than counting the others: every sorted index answers with both sides of its split, and
the matcher counts the smaller total (``_count``). Either way the cost follows the smaller side.

Indexes are built incrementally: ``add`` leaves its entries pending, and each publication merges at
most ``SETTLE_BUDGET`` of them, scanning the rest (see ``bounds``): after a bulk add no single
publication waits for the whole build, and the sorted indexes are complete after a few dozen.

Removal is O(1): the slot is marked dead (its needed count becomes one no count reaches) and
its index entries are left behind. When dead slots outnumber live ones the class's indexes are
rebuilt from the live filters, so memory and time stay proportional to what is live.

The counting matcher does no I/O and reads no clock: ``now`` is an argument. Only ``Matcher``
(``clocked``), the name outside users are promised (``m.match(p)``, docs/matching.md), reads the
system clock when it is not given the time; the router uses ``CountingMatcher``, so it cannot
forget its clock.

``CountingMatcher.match`` answers a list of ids (each once), not a set: at thousands of matches,
hashing the ids into a set costs more than the whole match before it, and the router only iterates
the answer. ``Matcher.match`` returns the set docs/matching.md promises.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterator, Mapping
from typing import Any

import numpy as np
from mypy_extensions import mypyc_attr

from broker.language.model import Filter, Predicate, Publication
from broker.language.operators import TIME_ATTRIBUTE, holds
from broker.language.values import Value
from broker.matching.attribute_index import AttributeIndex, Found

__all__ = ["CountingMatcher"]

_DEAD = -1  # a needed count no count reaches (counts are never negative)
_SMALL = 128  # fewer satisfied predicates than this: count in a dict, NumPy's fixed cost is higher
_MIN_COMPACT = 64
# Pending index entries merged per publication (a few milliseconds): after a bulk add, the indexes
# are sorted over the next publications and the entries still pending are scanned meanwhile.
SETTLE_BUDGET = 32768


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    if size < len(array):
        return array
    return np.concatenate((array, np.empty(len(array), dtype=array.dtype)))


class _ClassIndex:
    """All subscriptions of one class."""

    def __init__(self) -> None:
        self.ids: list[Hashable] = []
        self.id_array = np.empty(16, dtype=object)  # ids by slot, to pick thousands at once
        self.filters: list[Filter | None] = []
        self.slot_of: dict[Hashable, int] = {}
        self.need_list: list[int] = []
        # predicates per slot: all of them, and those outside the sorted indexes
        self.need = np.empty(16, dtype=np.int64)
        self.need_unsorted = np.empty(16, dtype=np.int64)
        self.attributes: dict[str, AttributeIndex] = {}
        self.always: dict[int, None] = {}  # no indexed predicate: every publication counts
        self.timed: dict[int, list[Predicate]] = {}  # checked after counting
        self.dead = 0

    def add(self, subscription_id: Hashable, subscription: Filter) -> None:
        slot = len(self.ids)
        self.ids.append(subscription_id)
        self.filters.append(subscription)
        self.slot_of[subscription_id] = slot
        counted = in_sorted = 0
        for predicate in subscription.predicates:
            if predicate.attribute == TIME_ATTRIBUTE:
                self.timed.setdefault(slot, []).append(predicate)
                continue
            index = self.attributes.get(predicate.attribute)
            if index is None:
                index = self.attributes[predicate.attribute] = AttributeIndex()
            in_sorted += index.add(predicate, slot)
            counted += 1
        self.need = _grown(self.need, slot)
        self.need_unsorted = _grown(self.need_unsorted, slot)
        self.id_array = _grown(self.id_array, slot)
        if counted:
            self.need[slot] = counted
            self.need_unsorted[slot] = counted - in_sorted
        else:  # answered from ``always``: never by counting too, or the answer would have it twice
            self.need[slot] = self.need_unsorted[slot] = _DEAD
            self.always[slot] = None
        self.id_array[slot] = subscription_id
        self.need_list.append(counted or _DEAD)

    def remove(self, subscription_id: Hashable) -> None:
        slot = self.slot_of.pop(subscription_id)
        self.filters[slot] = None
        self.need[slot] = self.need_unsorted[slot] = self.need_list[slot] = _DEAD
        self.id_array[slot] = None
        self.always.pop(slot, None)
        self.timed.pop(slot, None)
        self.dead += 1

    def __len__(self) -> int:
        return len(self.slot_of)

    def wants_compaction(self) -> bool:
        return self.dead >= _MIN_COMPACT and self.dead > len(self.slot_of)

    def compacted(self) -> _ClassIndex:
        fresh = _ClassIndex()
        for subscription_id, slot in self.slot_of.items():
            subscription = self.filters[slot]
            assert subscription is not None
            fresh.add(subscription_id, subscription)
        return fresh

    def match(self, fields: Mapping[str, Value], now: float) -> list[Hashable]:
        found = Found()
        attributes = self.attributes
        budget = SETTLE_BUDGET
        for name, value in fields.items():
            index = attributes.get(name)
            if index is not None:
                if budget > 0 and index.bounds:
                    budget -= index.settle(budget)
                index.collect(value, found)
        hits = self._count(found, fields) if found.pos or found.sat else []
        if self.always:
            hits = [*hits, *self.always]
        if self.timed:
            hits = [s for s in hits if s not in self.timed or self._in_time(int(s), now)]  # NumPy's ints
        if len(hits) < _SMALL:
            ids = self.ids
            return [ids[s] for s in hits]
        return self.id_array[hits].tolist()  # type: ignore[no-any-return]

    def _count(self, found: Found, fields: Mapping[str, Value]) -> Any:
        """The slots whose every predicate holds, as a list or an array.

        Sorted predicates are counted on their smaller side. Satisfied: a slot matches when its
        count reaches ``need``. Failed: a slot matches when its other predicates reach
        ``need_unsorted`` and none of its sorted predicates failed, counting as failed those on
        attributes the publication lacks.
        """
        satisfied = sum(map(len, found.sat))
        failed = sum(map(len, found.fail))
        if failed < satisfied:
            attributes = self.attributes.items()
            missing = [index for name, index in attributes if index.bounds and name not in fields]
            failed += sum(len(bounds) for index in missing for bounds in index.bounds)
        if failed < satisfied:
            for index in missing:
                index.everything(found.fail)
            pos, neg, need = found.pos, found.fail, self.need_unsorted
        else:
            pos, neg, need = found.pos + found.sat, [], self.need
            if satisfied + sum(map(len, found.pos)) < _SMALL:
                return self._count_few(pos)
        size = len(self.ids)
        counts = np.bincount(np.concatenate(pos), minlength=size) if pos else 0
        held = need[:size] == counts
        if neg:
            held[np.concatenate(neg)] = False  # one failed predicate is enough: no need to count them
        return np.flatnonzero(held)

    def _count_few(self, pos: list[Any]) -> list[int]:
        counts: dict[int, int] = {}
        for part in pos:
            for slot in part.tolist():
                counts[slot] = counts.get(slot, 0) + 1
        need = self.need_list
        return [slot for slot, count in counts.items() if count == need[slot]]

    def _in_time(self, slot: int, now: float) -> bool:
        return all(holds(p.op, p.value, now, now) for p in self.timed[slot])


@mypyc_attr(allow_interpreted_subclasses=True)  # ``clocked.Matcher``, which is not compiled
class CountingMatcher:
    """Subscriptions by id; ``match`` returns the ids whose filter a publication satisfies, each
    once, as a list (see the module's docstring for why not a set).

    ``now`` (epoch seconds) is the publication's time for ``time`` predicates; a broker passes its
    own clock's value.
    """

    def __init__(self) -> None:
        self._classes: dict[str, _ClassIndex] = {}
        self._class_of: dict[Hashable, str] = {}

    def add(self, subscription_id: Hashable, subscription: Filter) -> None:
        if not isinstance(subscription, Filter):
            raise TypeError(f"expected a Filter, not {type(subscription).__name__}")
        if subscription_id in self._class_of:
            raise ValueError(f"subscription id {subscription_id!r} is already in use")
        index = self._classes.get(subscription.cls)
        if index is None:
            index = self._classes[subscription.cls] = _ClassIndex()
        index.add(subscription_id, subscription)
        self._class_of[subscription_id] = subscription.cls

    def remove(self, subscription_id: Hashable) -> None:
        """Forget a subscription; ``KeyError`` if the id is unknown."""
        cls = self._class_of.pop(subscription_id)
        index = self._classes[cls]
        index.remove(subscription_id)
        if not index:
            del self._classes[cls]
        elif index.wants_compaction():
            self._classes[cls] = index.compacted()

    def settle(self, budget: int) -> int:
        """Merge at most ``budget`` of the pending index entries (as a publication does); the
        budget used, 0 once every index is sorted. A broker calls it while no input arrives, so the
        publications after a bulk add find the indexes built."""
        used = 0
        for index in self._classes.values():
            for attribute in index.attributes.values():
                if used >= budget:
                    return used
                if attribute.bounds:
                    used += attribute.settle(budget - used)
        return used

    def match(self, publication: Publication, now: float) -> Collection[Hashable]:
        index = self._classes.get(publication.cls)
        return [] if index is None else index.match(publication.fields, now)

    def get(self, subscription_id: Hashable) -> Filter:
        """The filter added under this id; ``KeyError`` if unknown."""
        index = self._classes[self._class_of[subscription_id]]
        subscription = index.filters[index.slot_of[subscription_id]]
        assert subscription is not None
        return subscription

    def __contains__(self, subscription_id: object) -> bool:
        return subscription_id in self._class_of

    def __len__(self) -> int:
        return len(self._class_of)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._class_of)
