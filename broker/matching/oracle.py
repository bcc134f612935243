"""The brute-force matcher: the semantics of docs/language.md applied literally, one filter at a time.

It is the reference the fast matcher is tested against, and the "linear scan" of the benchmark.
"""

from __future__ import annotations

from collections.abc import Hashable

from broker.language.model import Filter, Publication
from broker.language.operators import TIME_ATTRIBUTE, holds

__all__ = ["LinearMatcher", "matches"]


def matches(subscription: Filter, publication: Publication, now: float, at: float | None = None) -> bool:
    """Same class, and every predicate's attribute present and satisfied.

    ``now`` (epoch seconds) is the instant that relative references such as ``now-1h`` are taken
    from, and ``at`` the publication's time, which ``time`` predicates compare: by default ``now``,
    as for a live publication; a stored one has its own.
    """
    if subscription.cls != publication.cls:
        return False
    for predicate in subscription.predicates:
        if predicate.attribute == TIME_ATTRIBUTE:
            if not holds(predicate.op, predicate.value, now if at is None else at, now):
                return False
        elif predicate.attribute not in publication or not holds(
            predicate.op, predicate.value, publication[predicate.attribute]
        ):
            return False
    return True


class LinearMatcher:
    """The Matcher interface as a plain list scan."""

    def __init__(self) -> None:
        self._filters: dict[Hashable, Filter] = {}

    def add(self, subscription_id: Hashable, subscription: Filter) -> None:
        if subscription_id in self._filters:
            raise ValueError(f"subscription id {subscription_id!r} is already in use")
        self._filters[subscription_id] = subscription

    def remove(self, subscription_id: Hashable) -> None:
        del self._filters[subscription_id]

    def match(self, publication: Publication, now: float) -> set[Hashable]:
        return {sid for sid, f in self._filters.items() if matches(f, publication, now)}

    def __len__(self) -> int:
        return len(self._filters)
