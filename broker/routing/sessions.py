"""Durable client sessions: a client whose link goes down keeps its place for a grace period.

Withdrawing everything a client owned the moment its link drops throws away the join state of
its composite subscriptions: a detector waiting for the second atom of a generation forgets the
first, and an agent that reconnects a second later has lost that generation's jobs. So the router
keeps a departed client's advertisements and (composite) subscriptions in place, with their ids
and their detectors, and what they match meanwhile is queued here, bounded and in order. If the
client (the same hop name) comes back within the grace period it gets the queue first, then live
traffic; if not, the router withdraws its entries as it did at once before. The router has no
clock: ``expired(now)`` is asked on every message it handles, and the adapter sends ``Tick`` so
that a quiet broker expires sessions too.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from broker.routing.messages import Advertise, CompositeSubscribe, Deliver, Message, Notify, Subscribe

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
    """The clients whose link is down and whose grace period is not over, with what waits for
    them. ``grace`` 0 means none: a client's entries are withdrawn as soon as its link goes."""

    def __init__(self, counters: Counter[str], grace: float, max_queued: int, max_bytes: int) -> None:
        self.counters = counters
        self.grace = grace
        self.max_queued = max_queued
        self.max_bytes = max_bytes
        self.away: dict[str, _Away] = {}

    def leave(self, hop: str, now: float) -> bool:
        """The client's link went down: keep its session? (False: withdraw it now.)"""
        if self.grace <= 0:
            return False
        self.away[hop] = _Away(now + self.grace)
        log.info("client %s left: its session is kept for %g s", hop, self.grace)
        return True

    def resume(self, hop: str) -> list[tuple[str, Message]] | None:
        """The client came back: what was queued for it, in order (None: it had no session)."""
        away = self.away.pop(hop, None)
        if away is None:
            return None
        log.info("client %s came back: %d queued messages", hop, len(away.queue))
        return [(hop, message) for message, _ in away.queue]

    def expired(self, now: float) -> list[str]:
        """The clients whose grace period is over, forgotten here: the router withdraws them."""
        gone = [hop for hop, away in self.away.items() if away.deadline <= now]
        for hop in gone:
            dropped = len(self.away.pop(hop).queue)
            self.counters["sessions_expired"] += 1
            log.warning("client %s did not come back in %g s: withdrawn, %d queued messages dropped", hop, self.grace, dropped)
        return gone

    def hold(self, out: list[tuple[str, Message]]) -> list[tuple[str, Message]]:
        """The router's output, less what is for a client away, which is queued for it."""
        if not self.away:
            return out
        sent = []
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
