"""Publisher deduplication: one number per publisher, not a window of recent ids; and the
publisher's own ids for its messages (``Qos.mid``), for idempotent publishing.

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

A number does not help a publisher that lost its session: an application restarted without its
outbox, or a second process of the same publisher, publishes the same message again as a new
one. A message id it chose itself (``id=`` in ``wfm client``) does: the edge broker remembers,
per publisher identity (``retained.identity``: the certificate's name, or the client's name up
to its first ``:``), the id of the publication routed under each message id, and answers a
repeat with it, routing it no further (NATS JetStream's ``Nats-Msg-Id``). What it remembers is
bounded: each for ``MID_KEPT`` (a day) or until its publication expires, whichever is sooner,
and at most ``MAX_MIDS`` in all, the oldest forgotten first (counted ``mids.forgotten`` when
one goes before its time).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.routing.snapshots import Stateful

__all__ = ["KEPT", "MAX_MIDS", "MID_KEPT", "Publishers"]

KEPT = 7 * 24 * 3600.0  # seconds a publisher's mark outlives its last publication
MID_KEPT = 24 * 3600.0  # seconds a publisher's message id is remembered at most
MAX_MIDS = 100_000  # message ids one broker remembers


class Publishers(Stateful):
    """The highest number routed per (client hop, client session), in the order of their last
    publication, so that the marks of the publishers gone longest are at the front; and the
    publication routed per (publisher identity, message id), in the order they were routed."""

    STATE = ("marks", "mids")

    def __init__(self, counters: Counter[str] | None = None) -> None:
        # the router's counters; a default, because a compiled (mypyc) class is unpickled by
        # calling it without arguments (a router pickled whole: the logs of format 10 and before)
        self.counters: Counter[str] = Counter() if counters is None else counters
        self.marks: dict[tuple[str, str], tuple[int, float]] = {}  # -> (highest number, when)
        self.mids: dict[tuple[str, str], tuple[str, float]] = {}  # -> (publication id, until when)
        # whether a repeated message id is dropped: not while a log of a format before message
        # ids replays (``broker.transport.persistence``), whose broker routed every repeat
        self.by_mid = True

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

    def first(self, who: str, mid: str, now: float) -> str | None:
        """The id of the publication ``who`` routed under message id ``mid``, if remembered at
        ``now``."""
        kept = self.mids.get((who, mid))
        return kept[0] if kept is not None and now < kept[1] else None

    def named(self, who: str, mid: str, pub_id: str, now: float, expires: float | None) -> None:
        """``pub_id`` was routed at ``now`` under ``who``'s message id ``mid``: remembered until
        ``MID_KEPT`` later or ``expires``, whichever is sooner. Those routed longest ago go
        first: once their time is over, or beyond ``MAX_MIDS``."""
        until = now + MID_KEPT if expires is None else min(now + MID_KEPT, expires)
        key = (who, mid)
        self.mids.pop(key, None)  # one whose time was over: put back at the end, the latest
        self.mids[key] = (pub_id, until)
        mids = self.mids
        while True:
            oldest = next(iter(mids))
            if len(mids) > MAX_MIDS:
                if mids[oldest][1] > now:
                    self.counters["mids.forgotten"] += 1
            elif oldest == key or mids[oldest][1] > now:
                return
            del mids[oldest]

    def status(self) -> dict[str, Any]:
        return {"publishers": len(self.marks), "mids": len(self.mids)}
