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

from broker.language.model import (
    And,
    Atom,
    Composite,
    Filter,
    Or,
    Predicate,
    Publication,
    Sequence,
    Times,
    composite_variables,
)
from broker.language.values import TimeRef, Var
from broker.matching import Matcher
from broker.routing.detection import Bindings, Detector
from broker.routing.filter_index import FilterIndex
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
from broker.routing.placement import HERE, NOWHERE, Placement, node_at, place
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


# The hop of what a detection asks of its own broker: the subscriptions of its atoms (their
# matches feed the detector instead of leaving the broker) and the remote parts it joins.
# No adapter names a hop with the empty string.
DETECTOR = ""


@dataclass(slots=True, eq=False)
class _Detection:
    """A composite (or a part of one) that this broker detects or sends on, for everyone who
    asked for it: equal requests share one detection, so it is done once and notified to each."""

    id: str  # this broker's name for it: ``<broker>~<n>``, the id it travels under
    composite: Composite
    clear: Filter | None
    ttl: int
    upstream: set[tuple[str, str]]  # (hop, id) to notify; hop DETECTOR: id is ``<parent>#<leaf>``
    placement: Placement | None = None
    detector: Detector | None = None
    subscriptions: tuple[str, ...] = ()  # of its atoms detected here


class Router:
    def __init__(
        self,
        broker_id: str,
        covering: str = "off",
        advertisement_covering: bool = False,
        composite_max_waiting: int = 10_000,
        composite_max_age: float | None = None,
    ) -> None:
        self.id = broker_id
        self.neighbors: set[str] = set()
        self.clients: set[str] = set()
        self.srt: dict[str, _Entry] = {}
        self.prt: dict[str, _Entry] = {}
        self.matcher = Matcher()
        self.srt_index = FilterIndex()  # which advertisements a subscription may overlap, and
        self.prt_index = FilterIndex()  # which subscriptions an advertisement may
        self.client_adverts: dict[str, FilterIndex] = {}  # client hop -> its advertisements
        self.pending = FilterIndex()  # atoms of detections placed before an advertisement of theirs
        self.pending_atoms: dict[str, Filter] = {}
        self.owned: dict[str, set[str]] = {}  # client hop -> ids of its advertisements and subscriptions
        # client hop -> when it connected (ms, hex): a publication id is <broker>/<client>/<ref>@<this>,
        # since a client that reconnects under the same name counts its refs from 1 again, and the
        # historians and the history/live seam tell publications apart by id
        self.sessions: dict[str, str] = {}
        self.subscriptions = Forwarding(covering, subscription_covers)
        self.advertisements = Forwarding("lazy" if advertisement_covering else "off", advertisement_covers)
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.detections: dict[str, _Detection] = {}
        self.shared: dict[tuple[str, str], _Detection] = {}  # (composite, clear) texts -> detection
        self.requests: dict[tuple[str, str], _Detection] = {}  # (hop, id) -> what it asked for
        self.parts: dict[str, tuple[_Detection, int]] = {}  # subscription of an atom -> (detection, leaf)
        self.clears: dict[str, tuple[str, set[_Detection]]] = {}  # clear text -> (subscription, users)
        self.clear_subscriptions: dict[str, Filter] = {}
        self.detector_limits = (composite_max_waiting, composite_max_age)
        self._next_detection = 0
        self.counters: Counter[str] = Counter()

    # the one entry point ------------------------------------------------------------------------

    def handle(self, message: Message, hop: str, now: float = 0.0) -> Output:
        """Feed one message that arrived from ``hop``; returns what to send where, in order."""
        self.counters[_COUNTER.get(type(message)) or _counter_name(message)] += 1
        if isinstance(message, LinkUp):
            return self._link_up(hop, message.broker, now)
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
        detectors = [d.detector for d in self.detections.values() if d.detector is not None]
        return {
            "id": self.id,
            "neighbors": sorted(self.neighbors),
            "clients": len(self.clients),
            "subscriptions": len(self.prt),
            "advertisements": len(self.srt),
            "covering": self.subscriptions.mode,
            "held_subscriptions": self.subscriptions.held_count(),
            "composite_subscriptions": len(self.detections),
            "composite_detected": len(detectors),
            "composite_waiting": sum(d.waiting for d in detectors),
            "composite_dropped": sum(d.dropped for d in detectors),
            "counters": dict(sorted(self.counters.items())),
        }

    # links --------------------------------------------------------------------------------------

    def _link_up(self, hop: str, broker: bool, now: float) -> Output:
        if hop in self.neighbors or hop in self.clients:
            return []
        if not broker:
            self.clients.add(hop)
            self.sessions[hop] = format(round(now * 1000), "x")
            self.owned[hop] = set()
            self.client_adverts[hop] = FilterIndex()
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
                out += self._withdraw_owned(hop, entry_id)
            self.clients.discard(hop)
            self.sessions.pop(hop, None)
            del self.client_adverts[hop]
        elif hop in self.neighbors:
            self.neighbors.discard(hop)
            self.subscriptions.forget(hop)
            self.advertisements.forget(hop)
            learned = [i for i, e in [*self.srt.items(), *self.prt.items()] if e.hop == hop]
            for entry_id in learned:
                out += self._withdraw(entry_id)
            for asked in [request for request in self.requests if request[0] == hop]:
                out += self._release(*asked)
            for detection in list(self.detections.values()):
                placement = detection.placement
                if self.detections.get(detection.id) is detection and placement and placement.forward == hop:
                    detection.placement = None  # the part there is gone with the link
                    out += self._place(detection)
        return out

    def _withdraw_owned(self, hop: str, entry_id: str) -> Output:
        if (hop, entry_id) in self.requests:
            return self._release(hop, entry_id)
        return self._withdraw(entry_id)

    # clients ------------------------------------------------------------------------------------

    def _from_client(self, message: Message, hop: str, now: float) -> Output:
        if isinstance(message, StatusRequest):
            return [(hop, StatusReply(message.ref, self.status()))]
        if isinstance(message, Unadvertise | Unsubscribe):
            if isinstance(message, Unadvertise):
                known = message.id in self.srt
            else:
                known = message.id in self.prt or (hop, message.id) in self.requests
            if message.id not in self.owned[hop] or not known:
                return self._refuse(
                    hop, message.id, f"no {_noun(message)} with id {message.id} of this client"
                )
            self.owned[hop].discard(message.id)
            return [(hop, Ack(message.id, message.id)), *self._withdraw_owned(hop, message.id)]
        if not isinstance(message, Advertise | Subscribe | CompositeSubscribe | Publish):
            return self._refuse(hop, "", f"a client cannot send {type(message).__name__}")
        global_id = f"{self.id}/{hop}/{message.id}"
        if isinstance(message, Publish):
            return self._publish_from_client(message, hop, f"{global_id}@{self.sessions[hop]}", now)
        if global_id in self.owned[hop]:
            return self._refuse(hop, message.id, f"id {message.id} is already in use by this client")
        self.owned[hop].add(global_id)
        if isinstance(message, Advertise):
            return [
                (hop, Ack(message.id, global_id)),
                *self._advertise(global_id, message.filter, hop, DEFAULT_TTL),
            ]
        if isinstance(message, CompositeSubscribe):
            composite = _fix_composite_time(message.composite, now)
            clear = None if message.clear is None else _fix_time(message.clear, now)
            return [
                (hop, Ack(message.id, global_id)),
                *self._request(hop, global_id, composite, clear, DEFAULT_TTL),
            ]
        return [
            (hop, Ack(message.id, global_id)),
            *self._subscribe(global_id, _fix_time(message.filter, now), hop, DEFAULT_TTL),
        ]

    def _publish_from_client(self, message: Publish, hop: str, global_id: str, now: float) -> Output:
        publication = message.publication
        possible = self.client_adverts[hop].lookup(publication.cls, publication.fields)
        if not any(fits(publication, self.srt[i].filter) for i in possible):
            self.counters["refused.nonconforming"] += 1
            return self._refuse(hop, message.id, "the publication fits no advertisement of this client")
        routed = self._route(global_id, publication, hop, DEFAULT_TTL, now, now)
        return [(hop, Ack(message.id, global_id)), *routed] if message.ack else routed

    def _refuse(self, hop: str, ref: str, reason: str) -> Output:
        self.counters["refused"] += 1
        return [(hop, Refuse(ref, reason))]

    # brokers ------------------------------------------------------------------------------------

    def _from_broker(self, message: Message, hop: str, now: float) -> Output:
        if isinstance(message, Advertise | Subscribe | CompositeSubscribe | Publish) and message.ttl <= 0:
            self.counters["dropped.ttl"] += 1
            return []
        if isinstance(message, Advertise | Subscribe):
            if message.id in self.srt or message.id in self.prt:
                self.counters["dropped.duplicate"] += 1  # only a cycle in the overlay brings one back
                return []
            if isinstance(message, Advertise):
                return self._advertise(message.id, message.filter, hop, message.ttl)
            return self._subscribe(message.id, message.filter, hop, message.ttl)
        if isinstance(message, CompositeSubscribe):
            if (hop, message.id) in self.requests:
                self.counters["dropped.duplicate"] += 1
                return []
            return self._request(hop, message.id, message.composite, message.clear, message.ttl)
        if isinstance(message, Notify):
            detection = self.detections.get(message.subscription)
            if detection is None or detection.placement is None or detection.placement.forward != hop:
                self.counters["dropped.unexpected"] += 1  # a part withdrawn while this was under way
                return []
            return self._fire(detection, message.publications, message.bindings, now)
        if isinstance(message, Unsubscribe) and (hop, message.id) in self.requests:
            return self._release(hop, message.id)
        if isinstance(message, Unadvertise | Unsubscribe):
            table = self.srt if isinstance(message, Unadvertise) else self.prt
            entry = table.get(message.id)
            return self._withdraw(message.id) if entry is not None and entry.hop == hop else []
        if isinstance(message, Publish):
            if message.id in self.seen:
                self.counters["dropped.duplicate"] += 1
                return []
            accepted = now if message.time is None else message.time
            return self._route(message.id, message.publication, hop, message.ttl, now, accepted)
        if isinstance(message, Refuse):
            log.warning("%s: neighbour %s refused %r: %s", self.id, hop, message.ref, message.reason)
        self.counters["dropped.unexpected"] += 1
        return []

    # the routing tables -------------------------------------------------------------------------

    def _advertise(self, adv_id: str, advertisement: Filter, hop: str, ttl: int) -> Output:
        self.srt[adv_id] = _Entry(advertisement, hop, ttl)
        self.srt_index.add(adv_id, advertisement)
        if hop in self.clients:
            self.client_adverts[hop].add(adv_id, advertisement)
        out: Output = []
        for neighbor in sorted(self.neighbors - {hop}):
            out += self._apply(neighbor, self.advertisements.want(neighbor, adv_id, advertisement), True)
        if hop in self.neighbors:  # subscriptions waiting for this direction can now go there
            for sub_id in sorted(self.prt_index.candidates(advertisement)):
                entry = self.prt[sub_id]
                if entry.hop != hop and overlaps(entry.filter, advertisement):
                    out += self._apply(hop, self.subscriptions.want(hop, sub_id, entry.filter), False)
        waiting = {
            atom.rsplit("#", 1)[0]
            for atom in self.pending.candidates(advertisement)
            if overlaps(self.pending_atoms[atom], advertisement)
        }
        for detection_id in sorted(waiting):  # detections that had no source for an atom of theirs
            detection = self.detections.get(detection_id)
            if detection is not None and detection.placement is not None and detection.placement.pending:
                out += self._place(detection)
        return out

    def _subscribe(self, sub_id: str, subscription: Filter, hop: str, ttl: int) -> Output:
        self.prt[sub_id] = _Entry(subscription, hop, ttl)
        self.prt_index.add(sub_id, subscription)
        self.matcher.add(sub_id, subscription)
        out: Output = []
        for neighbor in sorted(self.neighbors - {hop}):
            if self._routes_to(subscription, neighbor):
                out += self._apply(neighbor, self.subscriptions.want(neighbor, sub_id, subscription), False)
        return out

    def _withdraw(self, entry_id: str) -> Output:
        out: Output = []
        if entry_id in self.srt:
            entry = self.srt.pop(entry_id)
            self.srt_index.remove(entry_id)
            if entry.hop in self.clients:
                self.client_adverts[entry.hop].remove(entry_id)
            for neighbor in sorted(self.neighbors):
                out += self._apply(neighbor, self.advertisements.unwant(neighbor, entry_id), True)
            if entry.hop in self.neighbors:  # subscriptions that only this advertisement drew that way
                drawn = [
                    sub_id
                    for sub_id in sorted(self.prt_index.candidates(entry.filter))
                    if self.subscriptions.wants(entry.hop, sub_id)
                    and overlaps(self.prt[sub_id].filter, entry.filter)
                ]
                for sub_id in drawn:
                    if not self._routes_to(self.prt[sub_id].filter, entry.hop):
                        out += self._apply(entry.hop, self.subscriptions.unwant(entry.hop, sub_id), False)
        elif entry_id in self.prt:
            entry = self.prt.pop(entry_id)
            self.prt_index.remove(entry_id)
            self.matcher.remove(entry_id)
            for neighbor in sorted(self.neighbors):
                out += self._apply(neighbor, self.subscriptions.unwant(neighbor, entry_id), False)
        return out

    # composite subscriptions ------------------------------------------------------------------

    def _request(self, hop: str, ref: str, composite: Composite, clear: Filter | None, ttl: int) -> Output:
        """``hop`` asks for the firings of ``composite`` under ``ref``: share an equal detection or
        start one."""
        key = (str(composite), "" if clear is None else str(clear))
        detection = self.shared.get(key)
        out: Output = []
        if detection is None:
            self._next_detection += 1
            detection = _Detection(f"{self.id}~{self._next_detection}", composite, clear, ttl, set())
            self.detections[detection.id] = self.shared[key] = detection
            detection.upstream.add((hop, ref))
            out = self._place(detection)
        else:
            detection.upstream.add((hop, ref))
        self.requests[(hop, ref)] = detection
        return out

    def _release(self, hop: str, ref: str) -> Output:
        """``hop`` no longer wants ``ref``; a detection nobody wants is taken down everywhere."""
        detection = self.requests.pop((hop, ref))
        detection.upstream.discard((hop, ref))
        if detection.upstream:
            return []
        del self.detections[detection.id]
        del self.shared[(str(detection.composite), "" if detection.clear is None else str(detection.clear))]
        self._note_pending(detection, False)
        return self._unplace(detection)

    def _note_pending(self, detection: _Detection, pending: bool) -> None:
        """Index the atoms of a detection that waits for an advertisement, so that one arriving
        finds the detections it may move without testing them all."""
        atoms = [f"{detection.id}#{i}" for i, _ in enumerate(detection.composite.atoms())]
        if pending == (atoms[0] in self.pending_atoms):
            return
        for name, atom in zip(atoms, detection.composite.atoms(), strict=True):
            if pending:
                self.pending.add(name, atom.filter)
                self.pending_atoms[name] = atom.filter
            else:
                self.pending.remove(name)
                del self.pending_atoms[name]

    def _place(self, detection: _Detection) -> Output:
        """(Re)decide where the detection happens, and set it up there."""
        upstream = {hop for hop, _ in detection.upstream if hop in self.neighbors}
        placement = place(detection.composite, self._whence, upstream)
        self._note_pending(detection, placement.pending)
        current = detection.placement
        if current is not None and (current.forward, current.atoms, current.remote) == (
            placement.forward,
            placement.atoms,
            placement.remote,
        ):
            detection.placement = placement
            return []
        out = self._unplace(detection)
        detection.placement = placement
        if placement.forward is not None:
            message = CompositeSubscribe(
                detection.id, detection.composite, detection.clear, max(detection.ttl - 1, 0)
            )
            return [*out, (placement.forward, message)]
        max_waiting, max_age = self.detector_limits
        detector = Detector(detection.composite, max_waiting, max_age, [path for path, _ in placement.remote])
        detection.detector = detector
        subscriptions: list[str] = []
        for leaf, path in enumerate(detector.paths):
            node = node_at(detection.composite, path)
            if isinstance(node, Atom):
                subscriptions.append(f"{detection.id}#{leaf}")
                self.parts[subscriptions[-1]] = (detection, leaf)
                out += self._subscribe(subscriptions[-1], node.filter, DETECTOR, detection.ttl)
            else:
                clear = _clear_for(node, detection.clear)
                out += self._request(DETECTOR, f"{detection.id}#{leaf}", node, clear, detection.ttl)
        detection.subscriptions = tuple(subscriptions)
        if detection.clear is not None and detector.holds_state:
            out += self._watch_clear(detection, detection.clear)
        return out

    def _watch_clear(self, detection: _Detection, clear: Filter) -> Output:
        """One subscription per clear condition and broker, however many detections use it."""
        key = str(clear)
        if key in self.clears:
            self.clears[key][1].add(detection)
            return []
        self._next_detection += 1
        subscription = f"{self.id}~{self._next_detection}"
        self.clears[key] = (subscription, {detection})
        self.clear_subscriptions[subscription] = clear
        return self._subscribe(subscription, clear, DETECTOR, DEFAULT_TTL)

    def _unwatch_clear(self, detection: _Detection) -> Output:
        if detection.clear is None or str(detection.clear) not in self.clears:
            return []
        subscription, users = self.clears[str(detection.clear)]
        users.discard(detection)
        if users:
            return []
        del self.clears[str(detection.clear)], self.clear_subscriptions[subscription]
        return self._withdraw(subscription)

    def _unplace(self, detection: _Detection) -> Output:
        placement, detection.placement = detection.placement, None
        if placement is None:
            return []
        if placement.forward is not None:
            return (
                [(placement.forward, Unsubscribe(detection.id))]
                if placement.forward in self.neighbors
                else []
            )
        out = self._unwatch_clear(detection)
        for subscription in detection.subscriptions:
            del self.parts[subscription]
            out += self._withdraw(subscription)
        assert detection.detector is not None
        for leaf, path in enumerate(detection.detector.paths):
            if path in dict(placement.remote):
                out += self._release(DETECTOR, f"{detection.id}#{leaf}")
        detection.detector, detection.subscriptions = None, ()
        return out

    def _whence(self, atom: Filter) -> str:
        """Where publications matching an atom come from (see ``placement``)."""
        hops = {
            self.srt[i].hop for i in self.srt_index.candidates(atom) if overlaps(atom, self.srt[i].filter)
        }
        if not hops:
            return NOWHERE
        (hop,) = hops if len(hops) == 1 else (HERE,)
        return hop if hop in self.neighbors else HERE

    def _detect(self, subscription: str, publication: Publication, now: float) -> Output:
        clear = self.clear_subscriptions.get(subscription)
        if clear is not None:  # forget what waits under the bindings this publication ends
            bindings = {
                p.value.name: publication[p.attribute] for p in clear.predicates if isinstance(p.value, Var)
            }
            for user in self.clears[str(clear)][1]:
                assert user.detector is not None
                user.detector.clear(bindings)
            return []
        detection, leaf = self.parts[subscription]
        assert detection.detector is not None
        out: Output = []
        for match in detection.detector.feed(leaf, publication, now):
            out += self._fire(detection, match.publications, match.bindings, now)
        return out

    def _fire(
        self, detection: _Detection, publications: tuple[Publication, ...], bindings: Bindings, now: float
    ) -> Output:
        """Tell everyone who asked: a client gets a notification, a neighbour one with the bindings,
        and a detection here that joins this part is fed it."""
        out: Output = []
        for hop, ref in sorted(detection.upstream):
            if hop in self.clients:
                out.append((hop, Notify(ref, publications)))
            elif hop != DETECTOR:
                out.append((hop, Notify(ref, publications, bindings)))
            else:
                parent_id, leaf = ref.rsplit("#", 1)
                parent = self.detections[parent_id]
                assert parent.detector is not None
                for match in parent.detector.feed_match(int(leaf), publications, bindings, now):
                    out += self._fire(parent, match.publications, match.bindings, now)
        return out

    def _routes_to(self, subscription: Filter, neighbor: str) -> bool:
        """Is there an advertisement learned from ``neighbor`` that the subscription overlaps?"""
        return any(
            self.srt[i].hop == neighbor and overlaps(subscription, self.srt[i].filter)
            for i in self.srt_index.candidates(subscription)
        )

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

    def _route(
        self, pub_id: str, publication: Publication, hop: str, ttl: int, now: float, accepted: float
    ) -> Output:
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
                out.append((target, Deliver(tuple(sorted(by_hop[target])), publication, pub_id, accepted)))
            elif target != hop:
                out.append((target, Publish(pub_id, publication, ttl - 1, time=accepted)))
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


def _fix_composite_time(composite: Composite, now: float) -> Composite:
    if isinstance(composite, Atom):
        return Atom(_fix_time(composite.filter, now))
    if isinstance(composite, Times):
        return Times(_fix_composite_time(composite.operand, now), composite.count, composite.attribute,
                     composite.step)  # fmt: skip
    kind: type[And] | type[Or] | type[Sequence] = type(composite)
    return kind(tuple(_fix_composite_time(o, now) for o in composite.operands))


def _clear_for(part: Composite, clear: Filter | None) -> Filter | None:
    """A part keeps the clear condition when it binds all its variables: a clear of a variable the
    part does not bind would drop everything it holds."""
    if clear is None or not set(clear.variables) <= set(composite_variables(part)):
        return None
    return clear


def _noun(message: Message) -> str:
    return "advertisement" if isinstance(message, Unadvertise) else "subscription"
