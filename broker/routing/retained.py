"""Retained publications: kept by the overlay and sent to every subscription made later that
matches, wherever it is, until they expire or are cancelled.

The broker a retained publication entered is its *keeper*: it keeps it (in its router's state,
so in its log, its snapshots and, for a site, its replicated log) and advertises it under a hop
of its own (``KEEPER``) as long as it keeps it, so every overlapping subscription made later is
drawn to it, as to any advertisement, even after the publisher has left. Every other broker
that routes the publication, or hands it on to a subscription, keeps a copy. A subscription that
arrives at a broker (from a client there, or from a neighbour) is sent each matching publication
kept there, unless the broker sent the subscription on towards the keeper (a broker nearer the
keeper will answer it): so a subscription that a broker holds back (an equal or covering one
went that way before, which drew the publication through this broker) is answered from the copy.
The answer is a ``Retained`` naming the subscription, which each broker on the way hands on along
the path the subscription came (its PRT entry's hop), and the last one delivers. A subscriber's
client drops by id a copy of what it already has.

Expiry (``Qos.expires``) ends a retained publication, and every copy, the moment the router's
clock passes it. A ``Cancel`` (naming the publisher's id for it, ``Qos.mid``, or its overlay-wide
id) is flooded to every broker, and each drops what it keeps of the publication if its cancel
policy allows the canceller (``Cancel.by``): ``any``, or ``originator`` and the publisher's own
identity. An identity is a client's name up to its first ``:`` (a certificate's name holds
none, and a client with a certificate is named for it, or ``NAME:SUFFIX``). With TLS the
canceller is whoever signed the cancel, checked by each broker's adapter before the cancel gets
here (``broker.transport.cancels``); without, the name its edge broker gave it.

Under flooding no subscription travels, so a subscriber gets retained publications only from its
own broker's copies: those of publications flooded after the retained store existed.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from typing import Any

from broker.language.model import Filter, Predicate, Publication
from broker.matching.oracle import matches
from broker.messages import CANCEL_SKEW, DEFAULT_TTL, Cancel, Deliver, Qos, Retained, publisher_of
from broker.routing.snapshots import Stateful
from broker.routing.tables import Output, Tables

__all__ = ["KEEPER", "MAX_RETAINED", "Kept", "Retention", "identity"]

KEEPER = "@retained"  # the hop of the advertisements that keep retained publications reachable
MAX_RETAINED = 100_000  # retained publications one broker keeps
REINDEX_AT = 1024  # expiries kept before the first look for those of publications gone since


@dataclass(frozen=True, slots=True)
class Kept:
    """A retained publication: what it is, when its edge broker accepted it, its quality of
    service, and whether this broker is its keeper (or keeps a copy)."""

    publication: Publication
    time: float
    qos: Qos
    keeper: bool


def identity(client: str) -> str:
    """Who a client is for a cancel policy: its name up to its first ``:``."""
    return client.partition(":")[0]


class Retention(Stateful):
    STATE = ("kept",)

    def __init__(self, tables: Tables, counters: Counter[str]) -> None:
        self.tables = tables
        self.counters = counters
        self.kept: dict[str, Kept] = {}  # publication id -> it
        self.expiring: list[tuple[float, str]] = []  # (expires, publication id), the soonest first
        self._reindex_at = REINDEX_AT  # entries in ``expiring`` past which it is made afresh

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self._index()

    def _index(self) -> None:
        """``expiring`` made afresh from what is kept: at a restore, and when it has doubled
        since (a cancelled publication leaves its entry until it would have expired, so a
        client that publishes and cancels in a loop would grow it for as long as its ttl)."""
        self.expiring = [
            (k.qos.expires, pub_id) for pub_id, k in self.kept.items() if k.qos.expires is not None
        ]
        heapq.heapify(self.expiring)
        self._reindex_at = max(REINDEX_AT, 2 * len(self.expiring))

    def full(self) -> bool:
        return len(self.kept) >= MAX_RETAINED

    def keep(self, pub_id: str, publication: Publication, time: float, qos: Qos) -> Output:
        """Keep a retained publication that entered here, and advertise it so that subscriptions
        made later come here."""
        self._put(pub_id, Kept(publication, time, qos, keeper=True))
        self.counters["retained.kept"] += 1
        drawn = Filter(
            publication.cls,
            tuple(
                Predicate(name, "isPresent", "" if isinstance(value, str) else 0)
                for name, value in publication.fields.items()
            ),
        )
        return self.tables.advertise(_advertisement(pub_id), drawn, KEEPER, DEFAULT_TTL)

    def copy(self, pub_id: str, publication: Publication, time: float, qos: Qos) -> None:
        """Keep a copy of a retained publication routed or handed on here (not if full)."""
        if pub_id in self.kept:
            return
        if self.full():
            self.counters["retained.not_copied"] += 1
            return
        self._put(pub_id, Kept(publication, time, qos, keeper=False))

    def _put(self, pub_id: str, kept: Kept) -> None:
        self.kept[pub_id] = kept
        if kept.qos.expires is not None:
            heapq.heappush(self.expiring, (kept.qos.expires, pub_id))
            if len(self.expiring) > self._reindex_at:
                self._index()

    def subscribed(
        self, sub_id: str, subscription: Filter, hop: str, now: float, sent_to: set[str]
    ) -> Output:
        """What is kept here for a subscription that just arrived from ``hop`` and was sent on
        to the neighbours ``sent_to``."""
        if not self.kept:
            return []
        client = hop in self.tables.clients
        out: Output = []
        for pub_id, kept in self.kept.items():
            if kept.qos.expired(now) or not matches(subscription, kept.publication, now):
                continue
            if not kept.keeper:
                towards = self.tables.srt.get(_advertisement(pub_id))
                if towards is not None and str(towards.hop) in sent_to:
                    continue  # a broker nearer the keeper answers it
            self.counters["retained.sent"] += 1
            if client:
                out.append((hop, Deliver((sub_id,), kept.publication, pub_id, kept.time, kept.qos)))
            else:
                out.append((hop, Retained(sub_id, kept.publication, pub_id, kept.time, kept.qos)))
        return out

    def handed_on(self, message: Retained, now: float) -> Output:
        """A retained publication on its way to a subscription: one hop nearer."""
        entry = self.tables.prt.get(message.subscription)
        if entry is None or message.qos.expired(now):
            self.counters["dropped.retained"] += 1
            return []
        self.copy(message.id, message.publication, message.time, message.qos)
        hop = str(entry.hop)
        if hop in self.tables.clients:
            delivery = Deliver(
                (message.subscription,), message.publication, message.id, message.time, message.qos
            )
            return [(hop, delivery)]
        return [(hop, message)]

    def cancel(self, message: Cancel) -> Output:
        """Drop what ``message`` names, if its cancel policy lets ``message.by`` cancel it: any
        cancel, or one by its publisher's identity; a signed one only if the publication was
        accepted before it was signed (within ``CANCEL_SKEW``: see ``broker.transport.cancels``),
        so a signed cancel replayed later misses a publication published again under its id."""
        out: Output = []
        for pub_id, kept in list(self.kept.items()):
            if message.mid not in (pub_id, kept.qos.mid):
                continue
            if kept.qos.cancel == "any" or (
                identity(publisher_of(pub_id)) == message.by
                and (message.at is None or kept.time <= message.at + CANCEL_SKEW)
            ):
                self.counters["retained.cancelled"] += 1
                out += self._drop(pub_id)
            else:
                self.counters["retained.cancel_refused"] += 1
        return out

    def expire(self, now: float) -> Output:
        """Drop what expired by ``now``."""
        out: Output = []
        while self.expiring and self.expiring[0][0] <= now:
            _, pub_id = heapq.heappop(self.expiring)
            if pub_id in self.kept:
                self.counters["retained.expired"] += 1
                out += self._drop(pub_id)
        return out

    def _drop(self, pub_id: str) -> Output:
        if self.kept.pop(pub_id).keeper:
            return self.tables.withdraw(_advertisement(pub_id))
        return []

    def status(self) -> dict[str, Any]:
        return {"retained": len(self.kept)}


def _advertisement(pub_id: str) -> str:
    return f"{pub_id}#retained"
