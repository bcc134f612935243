"""The sans-IO router: ``handle(message, hop, now) -> [(hop, message), ...]``.

Everything that decides where a message goes lives here, and nothing else does: no sockets, no
clocks (``now`` comes in as a value), no threads. The asyncio broker and the in-process simulator
are two adapters around the same state machine.

Routing (PADRES): advertisements are flooded to every neighbour broker (SRT); a subscription goes
only towards the last hops of advertisements it overlaps (PRT), once per link, and is held until
such an advertisement arrives; a publication follows the reverse paths of the subscriptions it
matches, one copy per link, never back to where it came from. Withdrawals retrace the same paths.

Hops are opaque strings given by the adapter (a neighbour's broker id, a client's id); ``LinkUp``
says which kind a hop is. Ids that clients give (``ref``) become overlay-wide ids
``<broker>/<client>/<ref>`` at the edge, so clients cannot collide. A link that goes down takes
everything learned through it along; a link that comes up is sent everything it needs, which is
how a restarted neighbour gets its routing state back.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

from broker.language.model import Filter, Predicate, Publication
from broker.language.values import TimeRef, Var
from broker.matching import Matcher
from broker.routing.detection import Detector
from broker.routing.forwarding import Action, Forwarding
from broker.routing.messages import (
    DEFAULT_TTL,
    Ack,
    Advertise,
    CompositeSubscribe,
    Deliver,
    LinkDown,
    LinkUp,
    Message,
    Notify,
    Publish,
    Refuse,
    StatusReply,
    StatusRequest,
    Subscribe,
    Unadvertise,
    Unsubscribe,
)
from broker.routing.relations import advertisement_covers, fits, overlaps, subscription_covers

__all__ = ["Output", "Router"]

log = logging.getLogger(__name__)

Output = list[tuple[str, Message]]
SEEN_PUBLICATIONS = 65536  # ids remembered to drop a publication that comes round a cycle


@dataclass(slots=True)
class _Entry:
    filter: Filter
    hop: str
    ttl: int


# The hop of the subscriptions a composite's detector makes for its atoms: matches of these go to
# the detector, not out of the broker. No adapter names a hop with the empty string.
DETECTOR = ""


@dataclass(slots=True)
class _Composite:
    detector: Detector
    hop: str  # the subscriber
    parts: list[str]  # ids of its atom subscriptions, then of its clear subscription if any
    clear: Filter | None


class Router:
    def __init__(self, broker_id: str, covering: str = "off", advertisement_covering: bool = False) -> None:
        self.id = broker_id
        self.neighbors: set[str] = set()
        self.clients: set[str] = set()
        self.srt: dict[str, _Entry] = {}
        self.prt: dict[str, _Entry] = {}
        self.matcher = Matcher()
        self.owned: dict[str, set[str]] = {}  # client hop -> ids of its advertisements and subscriptions
        self.subscriptions = Forwarding(covering, subscription_covers)
        self.advertisements = Forwarding("lazy" if advertisement_covering else "off", advertisement_covers)
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.composites: dict[str, _Composite] = {}
        self.parts: dict[str, tuple[str, int | None]] = {}  # part id -> (composite, atom; None: clear)
        self.counters: Counter[str] = Counter()

    # the one entry point ------------------------------------------------------------------------

    def handle(self, message: Message, hop: str, now: float = 0.0) -> Output:
        """Feed one message that arrived from ``hop``; returns what to send where, in order."""
        self.counters[_COUNTER.get(type(message)) or _counter_name(message)] += 1
        if isinstance(message, LinkUp):
            return self._link_up(hop, message.broker)
        if isinstance(message, LinkDown):
            return self._link_down(hop)
        if hop in self.clients:
            return self._from_client(message, hop, now)
        if hop in self.neighbors:
            return self._from_broker(message, hop, now)
        self.counters["unknown_hop"] += 1
        log.warning("%s: message from unknown hop %r dropped", self.id, hop)
        return []

    def status(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "neighbors": sorted(self.neighbors),
            "clients": len(self.clients),
            "subscriptions": len(self.prt),
            "advertisements": len(self.srt),
            "covering": self.subscriptions.mode,
            "held_subscriptions": self.subscriptions.held_count(),
            "composite_subscriptions": len(self.composites),
            "composite_waiting": sum(c.detector.waiting for c in self.composites.values()),
            "composite_dropped": sum(c.detector.dropped for c in self.composites.values()),
            "counters": dict(sorted(self.counters.items())),
        }

    # links --------------------------------------------------------------------------------------

    def _link_up(self, hop: str, broker: bool) -> Output:
        if hop in self.neighbors or hop in self.clients:
            return []
        if not broker:
            self.clients.add(hop)
            self.owned[hop] = set()
            return []
        self.neighbors.add(hop)
        out: Output = []
        for adv_id, entry in self.srt.items():
            if entry.hop != hop:
                out += self._apply(hop, self.advertisements.want(hop, adv_id, entry.filter), True)
        for sub_id, entry in self.prt.items():
            if entry.hop != hop and self._routes_to(entry.filter, hop):
                out += self._apply(hop, self.subscriptions.want(hop, sub_id, entry.filter), False)
        return out

    def _link_down(self, hop: str) -> Output:
        out: Output = []
        if hop in self.clients:
            for entry_id in sorted(self.owned.pop(hop)):
                out += self._withdraw(entry_id)
            self.clients.discard(hop)
        elif hop in self.neighbors:
            self.neighbors.discard(hop)
            self.subscriptions.forget(hop)
            self.advertisements.forget(hop)
            learned = [i for i, e in [*self.srt.items(), *self.prt.items()] if e.hop == hop]
            for entry_id in learned:
                out += self._withdraw(entry_id)
        return out

    # clients ------------------------------------------------------------------------------------

    def _from_client(self, message: Message, hop: str, now: float) -> Output:
        if isinstance(message, StatusRequest):
            return [(hop, StatusReply(message.ref, self.status()))]
        if isinstance(message, Unadvertise | Unsubscribe):
            if isinstance(message, Unadvertise):
                known = message.id in self.srt
            else:
                known = message.id in self.prt or message.id in self.composites
            if message.id not in self.owned[hop] or not known:
                return self._refuse(
                    hop, message.id, f"no {_noun(message)} with id {message.id} of this client"
                )
            self.owned[hop].discard(message.id)
            return [(hop, Ack(message.id, message.id)), *self._withdraw(message.id)]
        if not isinstance(message, Advertise | Subscribe | CompositeSubscribe | Publish):
            return self._refuse(hop, "", f"a client cannot send {type(message).__name__}")
        global_id = f"{self.id}/{hop}/{message.id}"
        if isinstance(message, Publish):
            return self._publish_from_client(message, hop, global_id, now)
        if global_id in self.srt or global_id in self.prt or global_id in self.composites:
            return self._refuse(hop, message.id, f"id {message.id} is already in use by this client")
        self.owned[hop].add(global_id)
        if isinstance(message, Advertise):
            return [
                (hop, Ack(message.id, global_id)),
                *self._advertise(global_id, message.filter, hop, DEFAULT_TTL),
            ]
        if isinstance(message, CompositeSubscribe):
            return [(hop, Ack(message.id, global_id)), *self._composite(global_id, message, hop, now)]
        return [
            (hop, Ack(message.id, global_id)),
            *self._subscribe(global_id, _fix_time(message.filter, now), hop, DEFAULT_TTL),
        ]

    def _publish_from_client(self, message: Publish, hop: str, global_id: str, now: float) -> Output:
        publication = message.publication
        if not any(fits(publication, self.srt[i].filter) for i in self.owned[hop] if i in self.srt):
            self.counters["refused.nonconforming"] += 1
            return self._refuse(hop, message.id, "the publication fits no advertisement of this client")
        routed = self._route(global_id, publication, hop, DEFAULT_TTL, now)
        return [(hop, Ack(message.id, global_id)), *routed] if message.ack else routed

    def _refuse(self, hop: str, ref: str, reason: str) -> Output:
        self.counters["refused"] += 1
        return [(hop, Refuse(ref, reason))]

    # brokers ------------------------------------------------------------------------------------

    def _from_broker(self, message: Message, hop: str, now: float) -> Output:
        if isinstance(message, Advertise | Subscribe | Publish) and message.ttl <= 0:
            self.counters["dropped.ttl"] += 1
            return []
        if isinstance(message, Advertise | Subscribe):
            if message.id in self.srt or message.id in self.prt:
                self.counters["dropped.duplicate"] += 1  # only a cycle in the overlay brings one back
                return []
            if isinstance(message, Advertise):
                return self._advertise(message.id, message.filter, hop, message.ttl)
            return self._subscribe(message.id, message.filter, hop, message.ttl)
        if isinstance(message, Unadvertise | Unsubscribe):
            table = self.srt if isinstance(message, Unadvertise) else self.prt
            entry = table.get(message.id)
            return self._withdraw(message.id) if entry is not None and entry.hop == hop else []
        if isinstance(message, Publish):
            if message.id in self.seen:
                self.counters["dropped.duplicate"] += 1
                return []
            return self._route(message.id, message.publication, hop, message.ttl, now)
        if isinstance(message, Refuse):
            log.warning("%s: neighbour %s refused %r: %s", self.id, hop, message.ref, message.reason)
        self.counters["dropped.unexpected"] += 1
        return []

    # the routing tables -------------------------------------------------------------------------

    def _advertise(self, adv_id: str, advertisement: Filter, hop: str, ttl: int) -> Output:
        self.srt[adv_id] = _Entry(advertisement, hop, ttl)
        out: Output = []
        for neighbor in sorted(self.neighbors - {hop}):
            out += self._apply(neighbor, self.advertisements.want(neighbor, adv_id, advertisement), True)
        if hop in self.neighbors:  # subscriptions waiting for this direction can now go there
            for sub_id, entry in self.prt.items():
                if entry.hop != hop and overlaps(entry.filter, advertisement):
                    out += self._apply(hop, self.subscriptions.want(hop, sub_id, entry.filter), False)
        return out

    def _subscribe(self, sub_id: str, subscription: Filter, hop: str, ttl: int) -> Output:
        self.prt[sub_id] = _Entry(subscription, hop, ttl)
        self.matcher.add(sub_id, subscription)
        out: Output = []
        for neighbor in sorted(self.neighbors - {hop}):
            if self._routes_to(subscription, neighbor):
                out += self._apply(neighbor, self.subscriptions.want(neighbor, sub_id, subscription), False)
        return out

    def _withdraw(self, entry_id: str) -> Output:
        out: Output = []
        if entry_id in self.composites:
            for part in self.composites.pop(entry_id).parts:
                del self.parts[part]
                out += self._withdraw(part)
        elif entry_id in self.srt:
            entry = self.srt.pop(entry_id)
            for neighbor in sorted(self.neighbors):
                out += self._apply(neighbor, self.advertisements.unwant(neighbor, entry_id), True)
            if entry.hop in self.neighbors:  # subscriptions that only this advertisement drew that way
                for sub_id in self.subscriptions.entries(entry.hop):
                    if not self._routes_to(self.prt[sub_id].filter, entry.hop):
                        out += self._apply(entry.hop, self.subscriptions.unwant(entry.hop, sub_id), False)
        elif entry_id in self.prt:
            entry = self.prt.pop(entry_id)
            self.matcher.remove(entry_id)
            for neighbor in sorted(self.neighbors):
                out += self._apply(neighbor, self.subscriptions.unwant(neighbor, entry_id), False)
        return out

    def _composite(self, composite_id: str, message: CompositeSubscribe, hop: str, now: float) -> Output:
        """Detection at this (the subscriber's) broker: each atom becomes a subscription routed
        like any other, and what matches it feeds the composite's detector."""
        atoms = [atom.filter for atom in message.composite.atoms()]
        parts: list[tuple[str, int | None, Filter]] = [
            (f"{composite_id}#{i}", i, a) for i, a in enumerate(atoms)
        ]
        if message.clear is not None:
            parts.append((f"{composite_id}#clear", None, message.clear))
        detector = Detector(message.composite)
        self.composites[composite_id] = _Composite(detector, hop, [p for p, _, _ in parts], message.clear)
        out: Output = []
        for part, atom, condition in parts:
            self.parts[part] = (composite_id, atom)
            out += self._subscribe(part, _fix_time(condition, now), DETECTOR, DEFAULT_TTL)
        return out

    def _detect(self, part: str, publication: Publication, now: float) -> Output:
        composite_id, atom = self.parts[part]
        entry = self.composites[composite_id]
        if atom is None:  # the clear condition: forget what waits under its bindings
            assert entry.clear is not None
            names = {p.attribute: p.value.name for p in entry.clear.predicates if isinstance(p.value, Var)}
            entry.detector.clear({name: publication[attribute] for attribute, name in names.items()})
            return []
        firings = entry.detector.feed(atom, publication, now)
        return [(entry.hop, Notify(composite_id, firing)) for firing in firings]

    def _routes_to(self, subscription: Filter, neighbor: str) -> bool:
        """Is there an advertisement learned from ``neighbor`` that the subscription overlaps?"""
        return any(e.hop == neighbor and overlaps(subscription, e.filter) for e in self.srt.values())

    def _apply(self, hop: str, actions: list[Action], advertisement: bool) -> Output:
        out: Output = []
        for kind, entry_id, value in actions:
            if kind == "send":
                ttl = (self.srt if advertisement else self.prt)[entry_id].ttl
                message: Message = (Advertise if advertisement else Subscribe)(
                    entry_id, value, max(ttl - 1, 0)
                )
            else:
                message = (Unadvertise if advertisement else Unsubscribe)(entry_id)
            out.append((hop, message))
        return out

    # publications -------------------------------------------------------------------------------

    def _route(self, pub_id: str, publication: Publication, hop: str, ttl: int, now: float) -> Output:
        self.seen[pub_id] = None
        if len(self.seen) > SEEN_PUBLICATIONS:
            self.seen.popitem(last=False)
        by_hop: dict[str, list[str]] = {}
        for sub_id in self.matcher.match(publication, now):
            assert isinstance(sub_id, str)
            by_hop.setdefault(self.prt[sub_id].hop, []).append(sub_id)
        out: Output = []
        for part in sorted(by_hop.pop(DETECTOR, [])):
            out += self._detect(part, publication, now)
        for target in sorted(by_hop):
            if target in self.clients:
                out.append((target, Deliver(tuple(sorted(by_hop[target])), publication)))
            elif target != hop:
                out.append((target, Publish(pub_id, publication, ttl - 1)))
        return out


_COUNTER: dict[type, str] = {}


def _counter_name(message: Message) -> str:
    name = _COUNTER[type(message)] = f"in.{type(message).__name__}"
    return name


def _fix_time(subscription: Filter, now: float) -> Filter:
    """Relative times (``now-1h``) become absolute when the edge broker accepts a subscription,
    so every broker on its path agrees on what it means."""
    if not any(isinstance(p.value, TimeRef) and p.value.offset is not None for p in subscription.predicates):
        return subscription
    predicates = tuple(
        Predicate(p.attribute, p.op, p.value.absolute(now)) if isinstance(p.value, TimeRef) else p
        for p in subscription.predicates
    )
    return Filter(subscription.cls, predicates)


def _noun(message: Message) -> str:
    return "advertisement" if isinstance(message, Unadvertise) else "subscription"
