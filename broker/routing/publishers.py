"""Publisher deduplication: one number per publisher, not a window of recent ids.

A client numbers its publications in a session it names itself (``<n>@<session>``, a
``ClientRef``) and sends them in that order; after a reconnection, or from its outbox after a
restart, it sends again what was not acknowledged, in the same order. So one number per
(client, session), the highest the router routed, tells a copy from a new publication: one
numbered at or below it was routed before. Kafka's idempotent producer keeps the same, a
sequence per producer. Unlike a window of the last N ids, a mark is not forgotten because
traffic was heavy, however long a client stays away; a site replicates it with the rest of the
router's state, so a client that moves to the site's next broker is recognised there too.

A mark goes only when its publisher has published nothing for ``KEPT`` (a week, as Kafka's
producer ids expire), long after any copy of its publications could still be on its way.
"""

from __future__ import annotations

from typing import Any

from broker.routing.snapshots import Stateful

__all__ = ["KEPT", "Publishers"]

KEPT = 7 * 24 * 3600.0  # seconds a publisher's mark outlives its last publication


class Publishers(Stateful):
    """The highest number routed per (client hop, client session), in the order of their last
    publication, so that the marks of the publishers gone longest are at the front."""

    STATE = ("marks",)

    def __init__(self) -> None:
        self.marks: dict[tuple[str, str], tuple[int, float]] = {}  # -> (highest number, when)

    def routed_before(self, hop: str, session: str, number: int) -> bool:
        """Whether the publication numbered ``number`` in ``session`` was routed already."""
        mark = self.marks.get((hop, session))
        return mark is not None and number <= mark[0]

    def routed(self, hop: str, session: str, number: int, now: float) -> None:
        """Raise the mark: ``number`` was routed at ``now``; forget the publishers silent since
        before ``now - KEPT``."""
        key = (hop, session)
        before = self.marks.pop(key, None)  # popped: put back at the end, the latest
        self.marks[key] = (number if before is None else max(number, before[0]), now)
        while (first := next(iter(self.marks))) != key and self.marks[first][1] < now - KEPT:
            del self.marks[first]

    def status(self) -> dict[str, Any]:
        return {"publishers": len(self.marks)}
