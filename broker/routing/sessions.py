"""Durable client sessions: a client whose link goes down keeps its place for a grace period.

Withdrawing everything a client owned the moment its link drops throws away the join state of
its composite subscriptions: a detector waiting for the second atom of a generation forgets the
first, and an agent that reconnects a second later has lost that generation's jobs. So the router
keeps a departed client's advertisements and (composite) subscriptions in place, with their ids
and their detectors, and what they match meanwhile is queued here, bounded and in order. If the
client (the same hop name) comes back within the grace period it gets the queue first, then live
traffic; if not, the router withdraws its entries as it did at once before. The router has no
clock: ``expire(now)`` runs on every message it handles, and the adapter sends ``Tick`` so
that a quiet broker expires sessions too.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from broker.routing.composites import Composites
from broker.routing.messages import Advertise, CompositeSubscribe, Deliver, Message, Notify, Subscribe
from broker.routing.tables import Output, Tables

__all__ = ["RequestKey", "Sessions", "request_key"]

log = logging.getLogger(__name__)

RequestKey = tuple[object, ...]


def request_key(message: Advertise | Subscribe | CompositeSubscribe) -> RequestKey:
    """What makes a re-sent request the same one: everything but its ref. A client re-sends its
    live requests after a reconnection with their refs; one that matches is acknowledged again."""
    if isinstance(message, CompositeSubscribe):
        return (CompositeSubscribe, message.composite, message.clear)
    return (type(message), message.filter)


@dataclass(slots=True)
class _Away:
    deadline: float
    queue: deque[tuple[Message, int]] = field(default_factory=deque)  # with its size
    size: int = 0


def _size(message: Message) -> int:
    """Roughly what a held message costs: the canonical text of its publications."""
    if isinstance(message, Deliver):
        return len(str(message.publication))
    if isinstance(message, Notify):
        return sum(len(str(p)) for p in message.publications)
    return 0


class Sessions:
    """The router's clients: what each owns and asked for, and those whose link is down and whose
    grace period is not over, with what waits for them. ``grace`` 0 means none: a client's entries
    are withdrawn as soon as its link goes."""

    def __init__(self, tables: Tables, composites: Composites, counters: Counter[str], grace: float) -> None:
        self.tables = tables
        self.composites = composites
        self.counters = counters
        self.grace = grace
        self.max_queued = 10_000  # messages held for one client
        self.max_bytes = 64 << 20  # their publications' text, for one client
        self.owned: dict[str, set[str]] = {}  # client hop -> ids of its advertisements and subscriptions
        self.requests: dict[str, RequestKey] = {}  # id of a client's entry -> what it asked for
        self.started: dict[str, str] = {}  # client hop -> when it connected (ms, hex): see PublicationId
        self.away: dict[str, _Away] = {}

    def connect(self, hop: str, now: float) -> Output:
        """A client's link is up: a new session, or one kept for it, with what was queued, in order."""
        away = self.away.pop(hop, None)
        if away is not None:
            log.info("client %s came back: %d queued messages", hop, len(away.queue))
            return [(hop, message) for message, _ in away.queue]
        if hop not in self.tables.neighbors and hop not in self.tables.clients:
            self.tables.add_client(hop)
            self.started[hop] = format(round(now * 1000), "x")
            self.owned[hop] = set()
        return []

    def disconnect(self, hop: str, now: float) -> Output:
        """A client's link went down: its session is kept for the grace period, or withdrawn now."""
        if hop not in self.tables.clients or hop in self.away:
            return []
        if self.grace <= 0 or not self.owned[hop]:  # nothing to keep (``wfm status``, say)
            return self._withdraw_client(hop)
        self.away[hop] = _Away(now + self.grace)
        log.info("client %s left: its session is kept for %g s", hop, self.grace)
        return []

    def leave(self, hop: str) -> Output:
        """A client said it leaves for good: withdrawn now, the link's going down then changes
        nothing."""
        if hop not in self.tables.clients or hop in self.away:
            return []
        log.info("client %s left for good", hop)
        return self._withdraw_client(hop)

    def expire(self, now: float) -> Output:
        """Withdraw the clients whose grace period is over. Runs on every message, so it looks
        at the oldest session only: they left in order, with the same grace."""
        out: Output = []
        while self.away:
            hop, away = next(iter(self.away.items()))
            if away.deadline > now:
                break
            del self.away[hop]
            dropped = len(away.queue)
            self.counters["sessions_expired"] += 1
            log.warning(
                "client %s did not come back in %g s: withdrawn, %d queued dropped", hop, self.grace, dropped
            )
            out += self._withdraw_client(hop)
        return out

    def own(self, hop: str, entry_id: str, request: RequestKey) -> None:
        self.requests[entry_id] = request
        self.owned[hop].add(entry_id)

    def withdraw(self, hop: str, entry_id: str) -> Output:
        """One of a client's entries, which it withdrew or which goes with its session."""
        self.owned.get(hop, set()).discard(entry_id)
        del self.requests[entry_id]
        if self.composites.asked((hop, entry_id)):
            return self.composites.release((hop, entry_id))
        return self.tables.withdraw(entry_id)

    def _withdraw_client(self, hop: str) -> Output:
        out = [sent for entry_id in sorted(self.owned.pop(hop)) for sent in self.withdraw(hop, entry_id)]
        self.tables.remove_client(hop)
        del self.started[hop]
        return out

    def hold(self, out: Output) -> Output:
        """The router's output, less what is for a client away, which is queued for it."""
        if not self.away:
            return out
        sent: Output = []
        for hop, message in out:
            away = self.away.get(hop)
            if away is None:
                sent.append((hop, message))
                continue
            size = _size(message)
            if len(away.queue) >= self.max_queued or away.size + size > self.max_bytes:
                self.counters["dropped.session_full"] += 1
                continue
            away.queue.append((message, size))
            away.size += size
            self.counters["session_queued"] += 1
        return sent

    def status(self) -> dict[str, Any]:
        return {
            "session_grace": self.grace,
            "sessions_waiting": len(self.away),
            "session_queue": sum(len(away.queue) for away in self.away.values()),
        }
