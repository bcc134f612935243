"""Composite subscriptions at one broker: who asked for which, where each is detected, firing.

A request for a composite (from a client, from a neighbour, or from a detection here that joins a
part of it) shares an equal detection if there is one, so each is detected once and notified to
everyone who asked. ``placement`` decides where: the whole detection goes on to the neighbour its
sources all lie behind, or a ``Detector`` here joins it; its atoms are then subscribed through the
routing tables under the hop ``DETECTOR``, and the parts it leaves to neighbours are requested
from here like any other composite. A detection is placed once, where its sources are when it is
requested; one made before an advertisement of one of its atoms stays where it is when the
advertisement comes, and that atom's subscription is routed to the new source like any other.
Moving it then would lose publications: those the new source had already sent this way would
reach a broker that no longer detects it, and pass the new place before it is set up (a Trigger
carried on by a stand-in, see ``standins``, behind its advertisement after a restart). It is
placed again only when the neighbour that held it goes for good. The waiting state under a
binding is dropped when a publication matches the detection's clear condition: one subscription
per condition and broker, however many detections share it.

A firing goes with its composite subscription's priority (``CompositeSubscribe.priority``), its
lane in custody's backlogs: every ``Notify`` to a client or a neighbour that asked carries the
priority that requester asked with. Requests of different priorities share a detection all the
same, so a part sent on to a neighbour (and each ``Notify`` it sends back) carries the highest
of them: a part here that serves an urgent composite and a routine one is urgent between
brokers, and each requester's own firing takes its own priority again here. When that highest
changes (an urgent requester comes or goes) the part is asked for again with the new one, which
the neighbour takes as a change of priority (``reprioritise``), not a new request.

Apart from the router because this is the one part of routing with state of its own beside the
tables: the router hands it requests, notifications and the publications its atoms matched, and
sends on what it returns.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from broker.errors import ParseError
from broker.language.model import Atom, Composite, Filter, Policy, Publication, composite_variables
from broker.language.values import Var
from broker.messages import (
    DEFAULT_QOS,
    DEFAULT_TTL,
    DETECTOR,
    CompositeSubscribe,
    LocalId,
    Notify,
    PartId,
    Unsubscribe,
)
from broker.routing.detection import Bindings, Detector
from broker.routing.placement import Placement, node_at, place
from broker.routing.snapshots import Stateful, restore_slots
from broker.routing.tables import Output, Tables

__all__ = ["Composites", "Detection", "Requester"]

Requester = tuple[str, str] | PartId  # (hop, ref) of a client or a neighbour, or a part of a detection here
DEFAULT_PRIORITY = DEFAULT_QOS.priority


@dataclass(slots=True, eq=False)
class Detection:
    """A composite (or a part of one) that this broker detects or sends on, for all who asked."""

    id: LocalId  # the id it travels under
    composite: Composite
    clear: Filter | None
    ttl: int
    policy: Policy
    requesters: set[Requester]
    placement: Placement | None = None
    detector: Detector | None = None
    subscriptions: tuple[str, ...] = ()  # of its atoms detected here
    # the priority each client or neighbour that asked for it asked with (a part of a detection
    # here has its detection's ``priority``), and the highest of all its requesters': what the
    # part sent on carries, and what a part it leaves to a neighbour gets from it
    priorities: dict[Requester, int] = field(default_factory=dict)
    priority: int = DEFAULT_PRIORITY

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        """A detection pickled before priorities has the default for every requester."""
        restore_slots(self, state)


class Composites(Stateful):
    STATE = ("detections", "shared", "requests", "parts", "clears", "clear_subscriptions", "_numbers")

    def __init__(
        self, broker_id: str, tables: Tables, max_waiting: int = 10_000, max_age: float | None = None
    ) -> None:
        self.broker_id = broker_id
        self.tables = tables
        self.detections: dict[LocalId, Detection] = {}
        self.shared: dict[tuple[str, str, Policy], Detection] = {}  # see _key
        self.requests: dict[Requester, Detection] = {}  # what each requester asked for
        self.parts: dict[str, tuple[Detection, int]] = {}  # subscription of an atom -> (detection, leaf)
        self.clears: dict[str, tuple[str, set[Detection]]] = {}  # clear text -> (subscription, users)
        self.clear_subscriptions: dict[str, Filter] = {}
        self.detector_limits = (max_waiting, max_age)
        self._numbers = itertools.count(1)  # of this broker's LocalIds

    def status(self) -> dict[str, Any]:
        detectors = [d.detector for d in self.detections.values() if d.detector is not None]
        return {
            "composite_subscriptions": len(self.detections),
            "composite_detected": len(detectors),
            "composite_waiting": sum(d.waiting for d in detectors),
            "composite_dropped": sum(d.dropped for d in detectors),
            "composite_truncated": sum(d.truncated for d in detectors),
        }

    # requests -----------------------------------------------------------------------------------

    def asked(self, requester: Requester) -> bool:
        return requester in self.requests

    def request(
        self,
        requester: Requester,
        composite: Composite,
        clear: Filter | None,
        ttl: int,
        policy: Policy,
        priority: int = DEFAULT_PRIORITY,
    ) -> Output:
        """``requester`` asks for the firings of ``composite``, with ``priority`` (a part of a
        detection here: its detection's): share an equal detection or start one."""
        key = _key(composite, clear, policy)
        detection = self.shared.get(key)
        new = detection is None
        if detection is None:
            detection = Detection(
                LocalId(self.broker_id, next(self._numbers)), composite, clear, ttl, policy, set()
            )
            self.detections[detection.id] = self.shared[key] = detection
        detection.requesters.add(requester)
        self.requests[requester] = detection
        if not isinstance(requester, PartId):
            detection.priorities[requester] = priority
        if new:
            detection.priority = self._highest(detection)
            return self._place(detection)
        return self._refresh(detection)

    def reprioritise(self, requester: Requester, priority: int) -> Output | None:
        """A neighbour asks again for a part it asked for, with another priority (the highest of
        its requesters changed); None if the priority is the one it had (a duplicate)."""
        detection = self.requests[requester]
        if detection.priorities.get(requester, DEFAULT_PRIORITY) == priority:
            return None
        detection.priorities[requester] = priority
        return self._refresh(detection)

    def _highest(self, detection: Detection) -> int:
        """The highest priority of those who want ``detection`` now."""
        levels = [
            detection.priorities.get(r, DEFAULT_PRIORITY)
            if not isinstance(r, PartId)
            else (parent.priority if (parent := self.detections.get(r.detection)) else DEFAULT_PRIORITY)
            for r in detection.requesters
        ]
        return max(levels, default=DEFAULT_PRIORITY)

    def _refresh(self, detection: Detection) -> Output:
        """Its highest priority again, after a requester came or went: a part sent on is asked
        for again with the new one, and the parts it left to neighbours follow."""
        level = self._highest(detection)
        if level == detection.priority:
            return []
        detection.priority = level
        placement = detection.placement
        if placement is None:
            return []
        if placement.forward is not None:
            if placement.forward not in self.tables.neighbors:
                return []
            return [(placement.forward, self._part(detection))]
        out: Output = []
        for leaf in range(len(detection.detector.paths) if detection.detector is not None else 0):
            part = self.requests.get(PartId(detection.id, leaf))
            if part is not None:
                out += self._refresh(part)
        return out

    def release(self, requester: Requester) -> Output:
        """``requester`` no longer wants what it asked for; a detection nobody wants is taken down
        everywhere."""
        detection = self.requests.pop(requester)
        detection.requesters.discard(requester)
        detection.priorities.pop(requester, None)
        if detection.requesters:
            return self._refresh(detection)
        key = _key(detection.composite, detection.clear, detection.policy)
        del self.detections[detection.id], self.shared[key]
        return self._unplace(detection)

    def announced(self, hop: str) -> Output:
        """The part of each detection placed at the neighbour ``hop``, asked for again (it takes
        one it has for a change of priority that changes nothing): see ``Tables.announced``."""
        return [
            (hop, self._part(detection))
            for detection in self.detections.values()
            if detection.placement is not None and detection.placement.forward == hop
        ]

    def link_down(self, hop: str) -> Output:
        """A neighbour is gone: drop what it asked for, and place again what was sent to it."""
        out: Output = []
        for requester in [r for r in self.requests if not isinstance(r, PartId) and r[0] == hop]:
            out += self.release(requester)
        for detection in list(self.detections.values()):
            placement = detection.placement
            if self.detections.get(detection.id) is detection and placement and placement.forward == hop:
                detection.placement = None  # the part there is gone with the link
                out += self._place(detection)
        return out

    # placement ----------------------------------------------------------------------------------

    def _place(self, detection: Detection) -> Output:
        """(Re)decide where the detection happens, and set it up there."""
        upstream = {r[0] for r in detection.requesters if not isinstance(r, PartId)} & self.tables.neighbors
        placement = place(detection.composite, self.tables.whence, upstream)
        out = self._unplace(detection)
        detection.placement = placement
        if placement.forward is not None:
            return [*out, (placement.forward, self._part(detection))]
        max_waiting, max_age = self.detector_limits
        remote = [path for path, _ in placement.remote]
        detector = Detector(detection.composite, max_waiting, max_age, remote, detection.policy)
        detection.detector = detector
        subscriptions: list[str] = []
        for leaf, path in enumerate(detector.paths):
            node = node_at(detection.composite, path)
            part = PartId(detection.id, leaf)
            if isinstance(node, Atom):
                subscriptions.append(str(part))
                self.parts[subscriptions[-1]] = (detection, leaf)
                out += self.tables.subscribe(subscriptions[-1], node.filter, DETECTOR, detection.ttl)
            else:
                clear = _clear_for(node, detection.clear)
                out += self.request(part, node, clear, detection.ttl, detection.policy)
        detection.subscriptions = tuple(subscriptions)
        if detection.clear is not None and detector.holds_state:
            out += self._watch_clear(detection, detection.clear)
        return out

    def _part(self, detection: Detection) -> CompositeSubscribe:
        """The request of the neighbour that detects ``detection`` for us."""
        return CompositeSubscribe(
            str(detection.id),
            detection.composite,
            detection.clear,
            max(detection.ttl - 1, 0),
            detection.policy,
            detection.priority,
        )

    def _unplace(self, detection: Detection) -> Output:
        placement, detection.placement = detection.placement, None
        if placement is None:
            return []
        if placement.forward is not None:
            return (
                [(placement.forward, Unsubscribe(str(detection.id)))]
                if placement.forward in self.tables.neighbors
                else []
            )
        out = self._unwatch_clear(detection)
        for subscription in detection.subscriptions:
            del self.parts[subscription]
            out += self.tables.withdraw(subscription)
        assert detection.detector is not None
        for leaf, path in enumerate(detection.detector.paths):
            if path in dict(placement.remote):
                out += self.release(PartId(detection.id, leaf))
        detection.detector, detection.subscriptions = None, ()
        return out

    def _watch_clear(self, detection: Detection, clear: Filter) -> Output:
        """One subscription per clear condition and broker, however many detections use it."""
        key = str(clear)
        if key in self.clears:
            self.clears[key][1].add(detection)
            return []
        subscription = str(LocalId(self.broker_id, next(self._numbers)))
        self.clears[key] = (subscription, {detection})
        self.clear_subscriptions[subscription] = clear
        return self.tables.subscribe(subscription, clear, DETECTOR, DEFAULT_TTL)

    def _unwatch_clear(self, detection: Detection) -> Output:
        if detection.clear is None or str(detection.clear) not in self.clears:
            return []
        subscription, users = self.clears[str(detection.clear)]
        users.discard(detection)
        if users:
            return []
        del self.clears[str(detection.clear)], self.clear_subscriptions[subscription]
        return self.tables.withdraw(subscription)

    # firing -------------------------------------------------------------------------------------

    def detect(self, subscription: str, publication: Publication, now: float) -> Output:
        """A publication matched the subscription of an atom or of a clear condition here."""
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

    def notified(self, message: Notify, hop: str, now: float) -> Output | None:
        """A neighbour detected a part sent to it; None if no such part is there any more."""
        try:
            detection = self.detections.get(LocalId.parse(message.subscription))
        except ParseError:
            return None
        if detection is None or detection.placement is None or detection.placement.forward != hop:
            return None
        return self._fire(detection, message.publications, message.bindings, now)

    def _fire(
        self, detection: Detection, publications: tuple[Publication, ...], bindings: Bindings, now: float
    ) -> Output:
        """Tell everyone who asked: a detection here that joins this part is fed it, a client gets
        a notification, a neighbour one with the bindings."""
        out: Output = []
        for part in sorted((r for r in detection.requesters if isinstance(r, PartId)), key=str):
            parent = self.detections[part.detection]
            assert parent.detector is not None
            for match in parent.detector.feed_match(part.leaf, publications, bindings, now):
                out += self._fire(parent, match.publications, match.bindings, now)
        for hop, ref in sorted(r for r in detection.requesters if not isinstance(r, PartId)):
            level = detection.priorities.get((hop, ref), DEFAULT_PRIORITY)
            to_client = hop in self.tables.clients
            out.append((hop, Notify(ref, publications, () if to_client else bindings, level)))
        return out


def _key(composite: Composite, clear: Filter | None, policy: Policy) -> tuple[str, str, Policy]:
    """Equal requests share a detection: the texts of the composite and of its clear condition,
    and the policy (one join state cannot consume for one requester and keep for another)."""
    return str(composite), "" if clear is None else str(clear), policy


def _clear_for(part: Composite, clear: Filter | None) -> Filter | None:
    """A part keeps the clear condition when it binds all its variables: a clear of a variable the
    part does not bind would drop everything it holds."""
    if clear is None or not set(clear.variables) <= set(composite_variables(part)):
        return None
    return clear
