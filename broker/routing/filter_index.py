"""Which stored filters could overlap a given one, without testing them all.

The router asks "which advertisements does this subscription overlap?" (and the reverse) for every
subscription and advertisement it handles; tested one by one that is quadratic in a deployment,
where a thousand jobs each advertise and subscribe their own job name. Two filters can only
overlap if their classes are equal and, for an attribute both constrain with equality, the values
are equal. So filters are indexed by class, and within a class by each equality predicate's
attribute and value; a query takes its most selective equality and gets the filters with that
value plus those without an equality on that attribute. The caller still tests each candidate.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from broker.language.model import Filter
from broker.language.values import TimeRef, Var

__all__ = ["FilterIndex"]

K = TypeVar("K", bound=Hashable)  # what names a stored filter: an entry's id, a detection's part

EQUALITY = ("eq", "=")


def _equalities(filter_: Filter) -> dict[str, object]:
    return {
        p.attribute: p.value
        for p in filter_.predicates
        if p.op in EQUALITY and not isinstance(p.value, Var | TimeRef)
    }


@dataclass(slots=True)
class _Class(Generic[K]):
    all: set[K] = field(default_factory=set)
    equal: dict[str, dict[object, set[K]]] = field(default_factory=dict)  # attribute -> value -> ids
    unequal: dict[str, set[K]] = field(default_factory=dict)  # attribute -> ids with no equality on it


class FilterIndex(Generic[K]):
    def __init__(self) -> None:
        self._classes: dict[str, _Class[K]] = {}
        self._keys: dict[K, tuple[str, dict[str, object]]] = {}  # id -> (class, its equalities)

    def add(self, entry: K, filter_: Filter) -> None:
        index = self._classes.setdefault(filter_.cls, _Class())
        equalities = _equalities(filter_)
        self._keys[entry] = (filter_.cls, equalities)
        for attribute, value in equalities.items():
            if attribute not in index.equal:
                index.equal[attribute] = {}
                index.unequal[attribute] = set(index.all)
            index.equal[attribute].setdefault(value, set()).add(entry)
        for attribute, ids in index.unequal.items():
            if attribute not in equalities:
                ids.add(entry)
        index.all.add(entry)

    def remove(self, entry: K) -> None:
        cls, equalities = self._keys.pop(entry)
        index = self._classes[cls]
        index.all.discard(entry)
        for attribute, value in equalities.items():
            ids = index.equal[attribute][value]
            ids.discard(entry)
            if not ids:
                del index.equal[attribute][value]
        for ids in index.unequal.values():
            ids.discard(entry)
        if not index.all:
            del self._classes[cls]

    def candidates(self, query: Filter) -> Iterable[K]:
        """Every stored filter that may overlap ``query`` (a superset: test each)."""
        return self.lookup(query.cls, _equalities(query))

    def lookup(self, cls: str, equalities: Mapping[str, object]) -> Iterable[K]:
        """Every stored filter of class ``cls`` that allows these attribute values (a superset);
        a publication's attributes ask which advertisements it may fit."""
        index = self._classes.get(cls)
        if index is None:
            return ()
        best: str | None = None
        best_size = len(index.all)
        equal = index.equal
        for attribute, value in equalities.items():
            values = equal.get(attribute)
            if values is not None:
                same = values.get(value)
                size = (0 if same is None else len(same)) + len(index.unequal[attribute])
                if size < best_size:
                    best, best_size = attribute, size
        if best is None:
            return index.all.copy()
        # only the smallest is built: a publication asks this for each attribute it carries, and
        # an attribute every filter holds equal (a workflow's name) would copy them all each time
        return equal[best].get(equalities[best], set()) | index.unequal[best]
