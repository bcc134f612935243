"""What a client has asked of its broker: the bookkeeping of its requests, with no I/O.

Two kinds of request outlive their answer. A *pending* request waits for its answer (an Ack, a
status or a Refuse), publications included; it is sent again after a reconnection. A *live*
request (an advertisement or a subscription) holds until withdrawn; it is made again at every
reconnection, under its ref, and each broker gives it an id of its own: the caller keeps the first
id it got, and deliveries name the current one, so both are kept here and translated.

Everything that affects this bookkeeping lives here, as in h11's state machine: the client tells
it what it sent and what came back, and it answers with what the client must do (whose wait ends,
what to send again). It holds no asyncio object and never reads the clock: whoever waits for an
answer is an opaque ``waiter`` to it, and a subscription any object with an ``id``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from broker.messages import (
    Advertise,
    ClientRef,
    CompositeSubscribe,
    Publish,
    Subscribe,
    Unadvertise,
    Unsubscribe,
    WireMessage,
)

__all__ = ["Live", "Pending", "Refs", "Requests", "Standing"]

Standing = Advertise | Subscribe | CompositeSubscribe  # the requests that stay live until withdrawn


class Refs:
    """The refs a client gives its requests: its own numbers, counted from ``first``, or the
    caller's names; a publication's adds a session the client named itself (see ``ClientRef``):
    ``stamp``, or for one not kept in the outbox ``volatile``, whose numbers the outbox does not
    count (a later run, which counts on from the outbox, must not give them again)."""

    def __init__(self, first: int, stamp: str, volatile: str) -> None:
        self.stamp, self.volatile = stamp, volatile
        self._numbers = itertools.count(first)

    def next(self, name: str | None = None) -> str:
        """The next number, or the caller's ``name`` for a request it will make again after a
        restart of its process: a broker that kept this client's session (durable sessions) then
        recognises it as the one it holds, where a counted ref could name another request."""
        if name is None:
            return str(next(self._numbers))
        if not name or name.isdigit() or any(c in name for c in "/@ "):
            raise ValueError(f"a request name has no /, @ or space and is not a number: {name!r}")
        return name

    def publication(self, durable: bool = True) -> str:
        return str(ClientRef(self.next(), self.stamp if durable else self.volatile))


class Named(Protocol):
    """A subscription as the bookkeeping sees it: the id its caller knows, set at its first Ack."""

    id: str


W = TypeVar("W")  # whoever waits for an answer
S = TypeVar("S", bound=Named)  # a subscription


@dataclass(slots=True)
class Live(Generic[S]):
    """An advertisement or subscription to make again after a reconnection: the request (under its
    ref), the id the caller knows (the first it got) and the id it has at the current broker."""

    message: Standing
    first: str = ""
    current: str = ""
    subscription: S | None = None


@dataclass(slots=True)
class Pending(Generic[W]):
    """A request sent and not answered; ``waiter`` None: nobody waits (``publish_nowait``)."""

    message: WireMessage
    waiter: W | None


class Requests(Generic[W, S]):
    """The requests of one client, across its links."""

    def __init__(self) -> None:
        self.live: dict[str, Live[S]] = {}  # by ref, in the order made
        self.pending: dict[str, Pending[W]] = {}  # by ref, in the order sent
        self.subscriptions: dict[str, S] = {}  # by the id the caller knows
        self.unacked = 0  # publications among the pending
        self._refs_by_id: dict[str, str] = {}  # id the caller knows -> ref
        self._by_current: dict[str, S] = {}  # id at the current broker -> subscription

    # what the client does -------------------------------------------------------------------------

    def make(self, ref: str, message: Standing, subscription: S | None = None) -> None:
        """A live request under ``ref``. A subscription is found by its id from its Ack on, not
        from when its caller resumes: deliveries read with the Ack must find it."""
        self.live[ref] = Live(message, subscription=subscription)

    def sent(self, ref: str, message: WireMessage, waiter: W | None) -> None:
        """``message`` went to the broker (or waits for the next link); ``waiter`` wants its answer."""
        self.pending[ref] = Pending(message, waiter)
        if isinstance(message, Publish):
            self.unacked += 1

    def forget(self, ref: str) -> None:
        """The caller stopped waiting for ``ref``: not made again, and a late Ack registers nothing."""
        self.live.pop(ref, None)

    def withdraw(self, known_id: str) -> Live[S] | None:
        """The live request the caller knows as ``known_id``, no longer made again; None if unknown."""
        ref = self._refs_by_id.pop(known_id, None)
        return None if ref is None else self.live.pop(ref, None)

    def withdrawn(self, current: str, known_id: str) -> None:
        """A subscription's withdrawal ended: what comes for it now goes to the merged stream."""
        self._by_current.pop(current, None)
        self.subscriptions.pop(known_id, None)

    # what the broker says -------------------------------------------------------------------------

    def acknowledged(self, ref: str, broker_id: str) -> str:
        """The id to answer an Ack with: for a live request, the first it got."""
        live = self.live.get(ref)
        if live is None:
            return broker_id
        if live.current != broker_id:  # ids at another broker come with its acks
            self._by_current.pop(live.current, None)
        live.current = broker_id
        if not live.first:
            live.first = broker_id
            self._refs_by_id[broker_id] = ref
            if live.subscription is not None:
                live.subscription.id = broker_id
                self.subscriptions[broker_id] = live.subscription
        if live.subscription is not None:
            self._by_current[broker_id] = live.subscription
        return live.first

    def answered(self, ref: str) -> Pending[W] | None:
        """The pending request ``ref`` has its answer (or is given up); None if none waits."""
        pending = self.pending.pop(ref, None)
        if pending is not None and isinstance(pending.message, Publish):
            self.unacked -= 1
        return pending

    def refused(self, ref: str) -> None:
        """The live request ``ref`` was refused: no longer live. One with ``first`` set was made
        again after a reconnection, and whoever made it must hear so (before this forgets it)."""
        live = self.live.pop(ref, None)
        if live is not None:
            self._refs_by_id.pop(live.first, None)

    def subscription(self, current: str) -> S | None:
        """The subscription that has the id ``current`` at the broker (or had, at the last)."""
        return self._by_current.get(current)

    def name_of(self, known_id: str) -> str | None:
        """The ref of the live request the caller knows as ``known_id``."""
        return self._refs_by_id.get(known_id)

    # the link -------------------------------------------------------------------------------------

    def to_send(self) -> tuple[list[Standing], list[WireMessage]]:
        """On a fresh link, in order: the live requests made in an earlier session (the others are
        pending), then every pending request."""
        again = [live.message for live in self.live.values() if live.current]
        return again, [pending.message for pending in self.pending.values()]

    def lost(self) -> list[W]:
        """The link ended: withdrawals in flight are done (the next session never hears of what
        they withdraw); their waiters are returned. Current ids are kept: a broker that kept the
        session delivers what it queued under them before it acknowledges the requests again."""
        done = [ref for ref, p in self.pending.items() if isinstance(p.message, Unadvertise | Unsubscribe)]
        waiters = [self.pending.pop(ref).waiter for ref in done]
        return [waiter for waiter in waiters if waiter is not None]

    def end(self) -> tuple[list[W], int]:
        """The client ends: every waiter (to fail) and how many publications were never acknowledged."""
        waiters = [p.waiter for p in self.pending.values() if p.waiter is not None]
        unacked = self.unacked
        self.pending.clear()
        self.unacked = 0
        return waiters, unacked
