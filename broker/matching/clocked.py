"""``Matcher``: the counting matcher with the one-argument ``match(p)`` outside users are promised.

Apart from ``matcher`` because that module is compiled (``setup.py``) and a compiled class cannot
override a method with another signature (``now`` may be None here, never there).
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from broker.language.model import Publication
from broker.matching.matcher import CountingMatcher

__all__ = ["Matcher"]


class Matcher(CountingMatcher):
    """The matcher of docs/matching.md, whose ``m.match(p)`` outside users call: a publication matched without
    ``now`` is one published now, by the system clock."""

    def match(self, publication: Publication, now: float | None = None) -> set[Hashable]:
        return set(super().match(publication, time.time() if now is None else now))
