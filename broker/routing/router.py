"""The sans-IO router: ``handle(message, hop, now) -> [(hop, message), ...]``.

Everything that decides where a message goes is behind this entry point, and nothing else is: no
sockets, no clocks (``now`` comes in as a value), no threads. The asyncio ``RouterService`` and the
in-process simulator are two adapters around the same state machine.

``handle`` looks up the message's handler in one of three tables, by where it came from: the
adapter (a link came up or went down, time passed), a client, or a neighbour broker; the same message type
means different things from a client and from a broker. This module is the edge of the broker: it
turns a client's refs into overlay-wide ids, fixes relative times, checks publications against
the client's advertisements, and answers. The routing itself is in ``tables`` (advertisements and
subscriptions) and ``composites`` (composite subscriptions); a publication is routed here: towards
the subscriptions it matches (routing "filter"), or to every neighbour but the one it came from
("flooding", SESDAD's baseline: the overlay is a tree), delivered either way to the clients here
it matches.
What leaves is carried in custody (``custody``), and held for a peer away (``sessions``).

Hops are opaque strings given by the adapter (a neighbour's broker id, a client's id); ``LinkUp``
says which kind a hop is.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any, TypeGuard

from mypy_extensions import mypyc_attr

from broker.errors import LocalError
from broker.language.model import Publication
from broker.matching import matcher
from broker.messages import (
    DEFAULT_TTL,
    Ack,
    Advertise,
    Bye,
    Cancel,
    Carry,
    ClientRef,
    CompositeSubscribe,
    Deliver,
    LinkDown,
    LinkUp,
    Message,
    Notify,
    OverlayId,
    PublicationId,
    Publish,
    Pull,
    Qos,
    Refuse,
    Renew,
    Retained,
    Standby,
    StatusReply,
    StatusRequest,
    Subscribe,
    TakeOver,
    Tick,
    Took,
    Unadvertise,
    Unsubscribe,
    request_ref,
)
from broker.routing.acl import AccessPolicy, refusal
from broker.routing.composites import Composites
from broker.routing.custody import Custody
from broker.routing.leases import Leases
from broker.routing.publishers import Publishers
from broker.routing.retained import MAX_RETAINED, Retention, identity
from broker.routing.sessions import Sessions, request_key
from broker.routing.standins import StandIns
from broker.routing.tables import Output, Tables
from broker.routing.times import fix_composite_time, fix_time
from broker.throttle import LogThrottle

__all__ = ["Output", "Router", "unlogged"]

log = logging.getLogger(__name__)

ORDERINGS = ("NO", "FIFO", "TOTAL")  # SESDAD's: one for the whole overlay
SEEN_PUBLICATIONS = 65536  # ids remembered to drop a publication that comes round a cycle
DETAIL_LIMIT = 300  # entries per table in a detailed status: the reply must fit in one frame
# The roles that see a broker's detail (its tables, who is away, where its neighbours are); a
# client of any other role gets the counts and counters only. A client with no certificate (a
# plain developer link) sees all.
STATUS_DETAIL_ROLES = ("deployer", "operator")
WITHHELD = "tables, sessions and neighbour addresses are shown to roles deployer and operator only"
_DETAIL = ("away", "epoch")  # what a summary leaves out: who is away, the custody epoch


def _nothing_more(full: bool) -> dict[str, Any]:
    return {}


# serializable: logs of formats before 11 pickled the router itself (they are refused, naming their
# format, which takes unpickling them); interpreted subclasses: so that Router(...) from Python
# runs __init__ (broker.records)
@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Router:
    def __init__(
        self,
        broker_id: str,
        covering: str = "off",
        advertisement_covering: bool = False,
        composite_max_waiting: int = 10_000,
        composite_max_age: float | None = None,
        session_grace: float = 0.0,
        epoch: str = "",
        policy: AccessPolicy | None = None,
        routing: str = "filter",
        ordering: str = "FIFO",
        parent: str = "",
    ) -> None:
        if ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {', '.join(ORDERINGS)}, not {ordering!r}")
        self.id = broker_id
        # TOTAL: every publication climbs to the root (the router with no ``parent``), which
        # routes it; on FIFO links down a tree every subscriber then gets the root's order
        self.ordering = ordering
        self.parent = parent  # the hop towards the root; "" at the root
        self.policy = policy  # who may do what (``acl``); None: everyone everything
        self.refusal_log = LogThrottle(burst=1)
        upward = parent if ordering == "TOTAL" else ""
        self.tables = Tables(covering, advertisement_covering, routing, upward)  # "filter" or "flooding"
        self.composites = Composites(broker_id, self.tables, composite_max_waiting, composite_max_age)
        self.seen: OrderedDict[str, None] = OrderedDict()  # publications routed lately
        self.counters: Counter[str] = Counter()
        self.publishers = Publishers(self.counters)  # copies and repeats are not routed again
        self.custody = Custody(epoch or broker_id, self.counters)  # the adapter names a fresh epoch
        self.custody.prioritised = ordering != "TOTAL"  # a reordered link would break TOTAL
        self.leases = Leases()  # subscriptions that end unless renewed
        self.sessions = Sessions(
            self.tables, self.composites, self.custody, self.counters, session_grace, self.leases
        )
        self.owned = self.sessions.owned  # client hop -> ids of its advertisements and subscriptions
        self.stand_ins = StandIns(broker_id, self.tables, self.custody, self.counters)
        self.retention = Retention(self.tables, self.counters)  # retained publications kept here
        # what the process around the router adds to each status it answers (its address, its
        # links' counters), given whether the asker may see detail; not part of the state
        self.process_status: Callable[[bool], dict[str, Any]] = _nothing_more
        # the entry point, an attribute: one router's may be replaced (a test's deaf broker), which
        # a method of a compiled class cannot be
        self.handle: Callable[[Message, str, float], Output] = self._handle

    # the one entry point ------------------------------------------------------------------------

    def _handle(self, message: Message, hop: str, now: float) -> Output:
        """Feed one message that arrived from ``hop`` at ``now`` (epoch seconds); returns what to
        send where, in order. Sessions whose grace period is over go first; what needs custody
        is carried, and held for a peer that is away."""
        if unlogged(message):
            return self._unlogged(message, hop, now)
        out = self._expire(now) if self._due(now) else []
        out += self._dispatch(message, hop, now)
        out += self.stand_ins.update(message, hop, out, now)
        return self.custody.carry(out + self._tooks(message, hop), now)

    def _due(self, now: float) -> bool:
        """Whether anything may be due by ``now``: a session away, or an expiry passed. Mostly
        nothing is, and this costs less than asking each part (``_expire``)."""
        expiry = self.next_expiry()
        return bool(self.sessions.away) or (expiry is not None and expiry <= now)

    def _expire(self, now: float) -> Output:
        """What time made due by ``now``: messages held or retained that expired, sessions whose
        grace period is over, leases that ran out."""
        self.custody.expire(now)
        return self.sessions.expire(now) + self.retention.expire(now) + self._lapsed(now)

    def _unlogged(self, message: Publish, hop: str, now: float) -> Output:
        """A non-persistent publication (``unlogged``): routed by the state as it is, and
        changing none of it but counters, so that a log without it replays to the same router.
        Nothing that time makes due goes here (the next logged input does it, as a replay
        would); no mark of it is kept (``seen``, ``publishers``), no join state (it feeds no
        composite subscription), no retained copy; custody sends it bare, only on links that
        are up (``Custody.carry``)."""
        return self.custody.carry(self._dispatch(message, hop, now), now, move=False)

    def _tooks(self, message: Message, hop: str) -> Output:
        """Our ``Took``s, last of all (see ``_carried``): of the carry just handled, and to the
        neighbours whose Took a stand-in no longer holds back (``standins``)."""
        carried = message.seq if type(message) is Carry and hop in self.tables.neighbors else None
        held_back = self.stand_ins.held_back
        out: Output = []
        if self.stand_ins.released:
            for upstream in self.stand_ins.take_released():
                if upstream != hop or carried is None:
                    out += self.custody.acknowledge(upstream, held_back(upstream))
        if carried is not None:
            out += self.custody.acknowledge(hop, held_back(hop), carried)
        return out

    def _dispatch(self, message: Message, hop: str, now: float) -> Output:
        kind = type(message)
        self.counters[_COUNTED.get(kind) or _counted(kind)] += 1
        if kind in _LINK_EVENTS:
            return _LINK_EVENTS[kind](self, message, hop, now)
        if hop in self.tables.clients:
            try:
                return _FROM_CLIENT.get(kind, Router._client_cannot)(self, message, hop, now)
            except Exception as error:  # a bug here must not leave the client waiting for an answer
                self.counters["router_errors"] += 1
                log.exception("%s: failed on %s from client %s", self.id, kind.__name__, hop)
                return self._refuse(hop, request_ref(message), f"the broker failed on this request: {error}")
        if hop in self.tables.neighbors:
            return _FROM_BROKER.get(kind, Router._unexpected)(self, message, hop, now)
        self.counters["unknown_hop"] += 1
        log.warning("%s: message from unknown hop %r dropped", self.id, hop)
        return []

    def snapshot(self) -> dict[str, Any]:
        """The router's state: what it was made with, its own state and each stateful part's
        (:class:`broker.routing.snapshots.Stateful`), by name; :meth:`restore` makes the same
        router of it. ``broker.transport.persistence`` keeps it, under a format number."""
        max_waiting, max_age = self.composites.detector_limits
        return {
            "id": self.id,
            "settings": {
                "covering": self.tables.subscriptions.mode,
                "advertisement_covering": self.tables.advertisements.mode != "off",
                "composite_max_waiting": max_waiting,
                "composite_max_age": max_age,
                "session_grace": self.sessions.grace,
                "epoch": self.custody.epoch,
                "policy": self.policy,
                "routing": self.tables.routing,  # one of format 11 may lack these three: the
                "ordering": self.ordering,  # defaults (filter, FIFO, a root) are what it routed by
                "parent": self.parent,
            },
            "seen": list(self.seen),
            "counters": dict(self.counters),
            **{part: getattr(self, part).snapshot() for part in _PARTS},
        }

    @classmethod
    def restore(cls, state: dict[str, Any]) -> Router:
        """The router whose :meth:`snapshot` ``state`` is."""
        router = cls(state["id"], **state["settings"])
        router.seen = OrderedDict.fromkeys(state["seen"])
        router.counters.update(state["counters"])  # the parts count into this one
        for part in _PARTS:
            getattr(router, part).restore(state[part])
        router.owned = router.sessions.owned
        return router

    def configure_like(self, fresh: Router, where: str) -> None:
        """Take ``fresh``'s settings (what the process was started with now, not what it was
        started with when its log began): access rules, grace, composite limits. A covering
        mode shapes the tables themselves, and so does a routing mode (flooding forwards no
        subscription): a different one is refused."""
        for name, ours, theirs in (
            ("covering", self.tables.subscriptions.mode, fresh.tables.subscriptions.mode),
            ("advertisement covering", self.tables.advertisements.mode, fresh.tables.advertisements.mode),
            ("routing", self.tables.routing, fresh.tables.routing),
        ):
            if ours != theirs:
                raise LocalError(f"{where} was written with {name} {ours!r}, not {theirs!r}: start it so")
        self.policy = fresh.policy
        self.ordering, self.parent = fresh.ordering, fresh.parent  # the overlay's, as told now
        self.custody.prioritised, self.custody.fits = fresh.custody.prioritised, fresh.custody.fits
        self.process_status = fresh.process_status
        self.sessions.grace = fresh.sessions.grace
        self.composites.detector_limits = fresh.composites.detector_limits  # for detectors placed from now

    def next_expiry(self) -> float | None:
        """When the soonest message held or retained here expires, or a lease runs out (epoch
        seconds), if any: the adapter ticks then, so it goes on time on a quiet broker too."""
        heaps = (self.custody.expiring, self.retention.expiring, self.leases.expiring)
        if not any(heaps):  # the common case, on every input the adapter feeds: nothing expires
            return None
        return min(heap[0][0] for heap in heaps if heap)

    def settle(self) -> bool:
        """Build some of the subscription index that adds left pending, as much as a publication
        merges (``matcher.SETTLE_BUDGET``); whether any is left. No effect on what matches: only
        on what a later match costs."""
        return self.tables.matcher.settle(matcher.SETTLE_BUDGET) > 0

    def status(self, detail: bool = False) -> dict[str, Any]:
        """Counts and counters; with ``detail``, also the first DETAIL_LIMIT entries of the SRT,
        the PRT and the composite detections, each as ``{"entries": [...], "total": N}``; and
        what the process adds (``process_status``)."""
        return self._with_process(self._own_status(detail), full=True)

    def summary(self) -> dict[str, Any]:
        """What any client may see: the status without its detail (``_DETAIL``, the tables), and
        ``withheld`` saying so."""
        status = self._own_status(detail=False)
        summary = {key: value for key, value in status.items() if key not in _DETAIL}
        return self._with_process(summary | {"withheld": WITHHELD}, full=False)

    def _with_process(self, status: dict[str, Any], full: bool) -> dict[str, Any]:
        added = dict(self.process_status(full))
        counters = added.pop("counters", {})
        return {**status, **added, "counters": {**status["counters"], **counters}}

    def _own_status(self, detail: bool) -> dict[str, Any]:
        return {
            "id": self.id,
            "neighbors": sorted(self.tables.neighbors - self.sessions.away.keys()),  # linked now
            "away": sorted(self.sessions.away),  # neighbours and clients kept for their grace period
            "clients": len(self.tables.clients),
            "subscriptions": len(self.tables.prt),
            "advertisements": len(self.tables.srt),
            "covering": self.tables.subscriptions.mode,
            "routing": self.tables.routing,
            "ordering": self.ordering,
            "held_subscriptions": self.tables.subscriptions.held_count(),
            **self.composites.status(),
            **self.sessions.status(),
            **self.stand_ins.status(),
            **self.publishers.status(),
            **self.retention.status(),
            **self.leases.status(),
            "counters": dict(sorted(self.counters.items())),
            **(self._tables() if detail else {}),
        }

    def _tables(self) -> dict[str, Any]:
        def bounded(entries: list[dict[str, Any]], total: int) -> dict[str, Any]:
            return {"entries": entries, "total": total}

        def table(entries: dict[str, Any]) -> dict[str, Any]:
            first = list(entries.items())[:DETAIL_LIMIT]
            return bounded(
                [{"id": i, "filter": str(e.filter), "hop": str(e.hop)} for i, e in first], len(entries)
            )

        detections = list(self.composites.detections.values())[:DETAIL_LIMIT]
        return {
            "srt": table(self.tables.srt),
            "prt": table(self.tables.prt),
            "composites": bounded(
                [
                    {
                        "id": str(d.id),
                        "composite": str(d.composite),
                        "detected_here": d.detector is not None,
                        "waiting": d.detector.waiting if d.detector is not None else 0,
                        "requesters": len(d.requesters),
                    }
                    for d in detections
                ],
                len(self.composites.detections),
            ),
        }

    # links --------------------------------------------------------------------------------------

    def _link_up(self, message: LinkUp, hop: str, now: float) -> Output:
        if not message.broker:
            return self.sessions.connect(hop, now, message, (message.identity, message.role))
        if hop in self.tables.clients:
            return []
        return self.sessions.neighbor_up(hop, message)

    # from a client ------------------------------------------------------------------------------

    def _status(self, message: StatusRequest, hop: str, now: float) -> Output:
        identity, role = self.sessions.peers.get(hop, ("", ""))
        if identity and role not in STATUS_DETAIL_ROLES:
            return [(hop, StatusReply(message.ref, self.summary()))]
        return [(hop, StatusReply(message.ref, self.status(message.detail)))]

    def _client_withdraws(self, message: Unadvertise | Unsubscribe, hop: str, now: float) -> Output:
        if isinstance(message, Unadvertise):
            noun, known = "advertisement", message.id in self.tables.srt
        else:
            noun = "subscription"
            known = message.id in self.tables.prt or self.composites.asked((hop, message.id))
        if message.id not in self.owned[hop] or not known:
            return self._refuse(hop, message.id, f"no {noun} with id {message.id} of this client")
        self.leases.end(message.id)
        return [(hop, Ack(message.id, message.id)), *self.sessions.withdraw(hop, message.id)]

    def _client_renews(self, message: Renew, hop: str, now: float) -> Output:
        if self.leases.renew(hop, message.ids, now) < len(message.ids):
            self.counters["leases.unknown"] += 1  # ended meanwhile, or never leased: said at expiry
        return []

    def _client_pulls(self, message: Pull, hop: str, now: float) -> Output:
        self.custody.pull(hop, message.more)
        return []

    def _lapsed(self, now: float) -> Output:
        """The subscriptions whose lease ran out: withdrawn, and their clients told."""
        out: Output = []
        for hop, sub_id in self.leases.expired(now):
            if sub_id in self.owned.get(hop, ()):
                self.counters["leases.expired"] += 1
                out += [*self.sessions.withdraw(hop, sub_id), (hop, Refuse(sub_id, "lease expired"))]
        return out

    def _client_asks(
        self, message: Advertise | Subscribe | CompositeSubscribe, hop: str, now: float
    ) -> Output:
        """A new advertisement or (composite) subscription: acknowledged with its overlay-wide id."""
        entry_id = str(OverlayId(self.id, hop, message.id))
        if denied := self._denied(hop, message, now):
            return denied
        if entry_id in self.owned[hop]:  # a request re-sent after a reconnection is answered again
            if self.sessions.requests[entry_id] == request_key(message):
                return [(hop, Ack(message.id, entry_id))]
            return self._refuse(hop, message.id, f"id {message.id} is already in use by this client")
        out: Output = [(hop, Ack(message.id, entry_id))]
        try:
            if isinstance(message, Advertise):
                out += self.tables.advertise(entry_id, message.filter, hop, DEFAULT_TTL)
            elif isinstance(message, Subscribe):
                fixed = fix_time(message.filter, now)
                sent = self.tables.subscribe(entry_id, fixed, hop, DEFAULT_TTL)
                out += sent + self.retention.subscribed(entry_id, fixed, hop, now, _sent_to(entry_id, sent))
                if message.lease:
                    self.leases.grant(hop, entry_id, message.lease, now)
                else:  # a lease of an earlier session's subscription under this id ends here
                    self.leases.end(entry_id)
            else:
                clear = None if message.clear is None else fix_time(message.clear, now)
                composite = fix_composite_time(message.composite, now)
                out += self.composites.request(
                    (hop, entry_id), composite, clear, DEFAULT_TTL, message.policy, message.priority
                )
        except Exception:
            self.sessions.undo(hop, entry_id)  # a request that failed half-way leaves nothing
            raise
        self.sessions.own(hop, entry_id, request_key(message))
        return out

    def _client_publishes(self, message: Publish, hop: str, now: float) -> Output:
        publication, qos = message.publication, message.qos
        if qos.expires is not None:
            return self._refuse(hop, message.id, "a client gives a ttl: the broker sets when it expires")
        if qos.retain and not qos.persistent:
            self.counters["refused.retain_nonpersistent"] += 1
            return self._refuse(hop, message.id, "a retained publication must be persistent")
        if not self.tables.conforms(hop, publication):
            self.counters["refused.nonconforming"] += 1
            return self._refuse(hop, message.id, "the publication fits no advertisement of this client")
        if denied := self._denied(hop, message, now):
            return denied
        # a ref "<n>@<session>" names the client's own session, which outlives a reconnection:
        # a re-sent publication keeps its id, and a copy that got through already is not routed
        # again (``publishers``: a client counts its publications in the order it sends them)
        name, session = ClientRef.split(message.id)
        pub_id = PublicationId.text(self.id, hop, name, session or self.sessions.started[hop])
        number = int(name) if session and name.isdigit() else None
        # a message id the publisher chose (``publishers``): a repeat, even from another session
        # or process of the same identity, is answered with the first's id and routed no further
        # (a non-persistent publication leaves no state, so no id of its is remembered)
        mid = qos.mid if qos.persistent else ""
        who = self._identity(hop) if mid else ""  # asked only of a publication that names an id
        first = self.publishers.first(who, mid, now) if mid else None
        if first is not None and self.publishers.by_mid:
            self.counters["dropped.duplicate" if first == pub_id else "dropped.duplicate_mid"] += 1
            if number is not None:  # handled: a resend of it is a copy whatever is remembered
                self.publishers.routed(hop, session, number, now)
            return [(hop, Ack(message.id, first))] if message.ack else []
        if (
            self.publishers.routed_before(hop, session, number)
            if number is not None
            else pub_id in self.seen  # a ref the client did not count: the recent ones
        ):
            self.counters["dropped.duplicate"] += 1
            return [(hop, Ack(message.id, pub_id))] if message.ack else []
        if qos.retain and self.retention.full():
            return self._refuse(
                hop, message.id, f"this broker keeps at most {MAX_RETAINED} retained publications"
            )
        qos = qos.fixed(now)  # its expiry, on this broker's clock, for the whole overlay
        if self.ordering == "TOTAL" and self.parent:
            routed = self._climb(pub_id, publication, DEFAULT_TTL, now, qos)
        else:
            routed = self._route(pub_id, publication, hop, DEFAULT_TTL, now, now, qos)
        if number is not None and qos.persistent:  # a non-persistent one is never sent again
            self.publishers.routed(hop, session, number, now)
        if mid and first is None:
            self.publishers.named(who, mid, pub_id, now, qos.expires)
        if qos.retain:  # kept here for subscriptions made later
            routed += self.retention.keep(pub_id, publication, now, qos)
        return [(hop, Ack(message.id, pub_id)), *routed] if message.ack else routed

    def _denied(
        self, hop: str, message: Advertise | Subscribe | CompositeSubscribe | Publish, now: float
    ) -> Output:
        """The refusal of what the client's role may not do (counted, and logged: the first of
        each client, then once a minute), or nothing."""
        reason = refusal(self.policy, self.sessions.peers[hop], message, now)
        if reason is None:
            return []
        self.counters["refused.acl"] += 1
        if (unlogged := self.refusal_log.admit(hop, now)) is not None:
            more = f" ({unlogged} more since the last)" if unlogged else ""
            log.warning("%s: refused %s from %s: %s%s", self.id, type(message).__name__, hop, reason, more)
        return self._refuse(hop, message.id, reason)

    def _client_cancels(self, message: Cancel, hop: str, now: float) -> Output:
        """A client cancels a retained publication: everywhere, as the identity its certificate
        gives (its name without one), whatever it claims; its signature, if any (which the
        adapter checked, ``broker.transport.cancels``), goes with it for the other brokers."""
        cancel_id = str(OverlayId(self.id, hop, message.id))
        overlay = Cancel(
            cancel_id,
            message.mid,
            self._identity(hop),
            DEFAULT_TTL,
            message.at,
            message.signer,
            message.signature,
        )
        return [(hop, Ack(message.id, cancel_id)), *self._cancel(overlay, "")]

    def _identity(self, hop: str) -> str:
        """Who the client ``hop`` is: its certificate's name, or without one its own name up to
        its first ``:`` (``retained.identity``); never a name it claims in a message."""
        return self.sessions.peers[hop][0] or identity(hop)

    def _cancelled(self, message: Cancel, hop: str, now: float) -> Output:
        if message.id in self.seen:
            return self._drop("duplicate")
        return self._cancel(message, hop)

    def _cancel(self, message: Cancel, hop: str) -> Output:
        """Here, and on to every other neighbour (the keeper may be anywhere)."""
        self.seen[message.id] = None
        if len(self.seen) > SEEN_PUBLICATIONS:  # bounded like the publications' ids
            self.seen.popitem(last=False)
        onward = Cancel(
            message.id,
            message.mid,
            message.by,
            message.ttl - 1,
            message.at,
            message.signer,
            message.signature,
        )
        return self.retention.cancel(message) + [(n, onward) for n in sorted(self.tables.neighbors - {hop})]

    def _client_declares(self, message: Standby, hop: str, now: float) -> Output:
        """What of the client's session its standbys may take over (``Sessions.declare``)."""
        self.sessions.declare(hop, message.keys)
        return [(hop, Ack(message.ref, f"{len(message.keys)} standby keys"))]

    def _client_takes_over(self, message: TakeOver, hop: str, now: float) -> Output:
        """A standby asks for a session's key (``Sessions.take_over``): granted, the primary's
        session ends and what it had is withdrawn, as at the end of its grace."""
        why, out = self.sessions.take_over(hop, message.primary, message.key, now)
        if why is not None:
            self.counters["refused.takeover"] += 1
            return [(hop, Refuse(message.ref, why))]
        return [(hop, Ack(message.ref, f"{message.key} of {message.primary} at {now!r}")), *out]

    def _client_cannot(self, message: Message, hop: str, now: float) -> Output:
        return self._refuse(hop, "", f"a client cannot send {type(message).__name__}")

    def _refuse(self, hop: str, ref: str, reason: str) -> Output:
        self.counters["refused"] += 1
        return [(hop, Refuse(ref, reason))]

    # from a neighbour broker --------------------------------------------------------------------

    def _carried(self, message: Carry, hop: str, now: float) -> Output:
        """Handled, unless taken before; then taken: ``handle`` adds the ``Took`` (the adapter
        sends it once it is in the log) after everything else handling sent, stand-ins included:
        the peer knows our answer to an advertisement (our subscriptions for it, real or standing
        in for our neighbours) is in when it knows we took it, and ends its stand-in for us then
        (see ``standins``)."""
        if not self.custody.receive(hop, message):
            return []
        inner = message.message
        return _FROM_BROKER.get(type(inner), Router._unexpected)(self, inner, hop, now)

    def _learn(self, message: Advertise | Subscribe, hop: str, now: float) -> Output:
        if self.tables.knows(message.id):
            return self._drop("duplicate")  # only a cycle in the overlay brings one back
        if isinstance(message, Subscribe):
            out = self.tables.subscribe(message.id, message.filter, hop, message.ttl)
            return out + self.retention.subscribed(
                message.id, message.filter, hop, now, _sent_to(message.id, out)
            )
        return self.tables.advertise(message.id, message.filter, hop, message.ttl)

    def _asked(self, message: CompositeSubscribe, hop: str, now: float) -> Output:
        if self.composites.asked((hop, message.id)):  # the same part again: its priority changed?
            changed = self.composites.reprioritise((hop, message.id), message.priority)
            return self._drop("duplicate") if changed is None else changed
        return self.composites.request(
            (hop, message.id), message.composite, message.clear, message.ttl, message.policy, message.priority
        )

    def _notified(self, message: Notify, hop: str, now: float) -> Output:
        out = self.composites.notified(message, hop, now)
        return self._drop("unexpected") if out is None else out  # a part withdrawn while under way

    def _withdrawn(self, message: Unadvertise | Unsubscribe, hop: str, now: float) -> Output:
        if isinstance(message, Unsubscribe) and self.composites.asked((hop, message.id)):
            return self.composites.release((hop, message.id))
        table = self.tables.srt if isinstance(message, Unadvertise) else self.tables.prt
        entry = table.get(message.id)
        return self.tables.withdraw(message.id) if entry is not None and entry.hop == hop else []

    def _forwarded(self, message: Publish, hop: str, now: float) -> Output:
        if message.id in self.seen:
            return self._drop("duplicate")
        if message.qos.expired(now):
            return self._drop("expired")
        if not self._conforms(hop, message.publication):  # a neighbour forwards what was advertised
            if self.counters["dropped.nonconforming"] % 1000 == 0:  # the first, then one in 1000
                log.warning("%s: %s forwarded a publication no advertisement from it covers", self.id, hop)
            return self._drop("nonconforming")
        accepted = now if message.time is None else message.time
        qos = message.qos
        if self.ordering == "TOTAL" and hop != self.parent:  # climbing: on to the root, or it is here
            if self.parent:
                return self._climb(message.id, message.publication, message.ttl, accepted, qos)
            return self._route(message.id, message.publication, "", message.ttl, now, accepted, qos)
        return self._route(message.id, message.publication, hop, message.ttl, now, accepted, qos)

    def _handed_on(self, message: Retained, hop: str, now: float) -> Output:
        """A retained publication on its way to a subscription made after it: like a publication
        a neighbour forwards, it fits an advertisement from the neighbour's side (its keeper's,
        at least), or it is dropped and kept nowhere."""
        if not self._conforms(hop, message.publication):
            return self._drop("nonconforming")
        return self.retention.handed_on(message, now)

    def _refused(self, message: Refuse, hop: str, now: float) -> Output:
        log.warning("%s: neighbour %s refused %r: %s", self.id, hop, message.ref, message.reason)
        return self._drop("unexpected")

    def _unexpected(self, message: Message, hop: str, now: float) -> Output:
        return self._drop("unexpected")

    def _drop(self, reason: str) -> Output:
        self.counters[f"dropped.{reason}"] += 1
        return []

    # routing ------------------------------------------------------------------------------------

    def _conforms(self, hop: str, publication: Publication) -> bool:
        """Whether a publication forwarded by ``hop`` fits an advertisement from its side; under
        TOTAL one coming down from the root may be from our side (it climbed from here)."""
        if self.tables.conforms(hop, publication):
            return True
        return self.ordering == "TOTAL" and hop == self.parent and self.tables.advertised_to(hop, publication)

    def _climb(self, pub_id: str, publication: Publication, ttl: int, accepted: float, qos: Qos) -> Output:
        """TOTAL: a publication goes to the parent only, and is routed (here too) when it comes
        back down from the root in the root's order. Not in ``seen``: it must be taken then."""
        self.counters["climbed"] += 1
        return [(self.parent, Publish(pub_id, publication, ttl - 1, time=accepted, qos=qos))]

    def _route(
        self, pub_id: str, publication: Publication, hop: str, ttl: int, now: float, accepted: float, qos: Qos
    ) -> Output:
        """To the detectors here whose atoms it matches, the clients here it matches (one delivery
        naming all their subscriptions), and one copy per neighbour, not back whence it came:
        each neighbour with a subscription it matches, or, flooding, every neighbour."""
        local, by_hop = self.tables.matching(publication, now)
        flooding = self.tables.routing == "flooding"
        out: Output = []
        persistent = qos.persistent  # not: nothing of it is kept here (see ``_unlogged``)
        if local and not persistent:  # join state is the log's: it feeds no composite subscription
            self.counters["unjoined.nonpersistent"] += 1
        for part in local if persistent else ():
            out += self.composites.detect(part, publication, now)
        for target in sorted(by_hop):
            if target in self.tables.clients:
                self.counters["delivered"] += 1  # to a client here: what a dashboard shows beside in.Publish
                out.append(
                    (target, Deliver(tuple(sorted(by_hop[target])), publication, pub_id, accepted, qos))
                )
            elif target != hop and not flooding:
                out.append((target, Publish(pub_id, publication, ttl - 1, time=accepted, qos=qos)))
        if flooding:
            for target in sorted(self.tables.neighbors - {hop}):
                out.append((target, Publish(pub_id, publication, ttl - 1, time=accepted, qos=qos)))
        if not persistent:  # never sent again, so no mark to tell a copy; no retained copy (its
            if qos.retain:  # edge broker refuses one: this came from a broker that did not)
                self.counters["unretained.nonpersistent"] += 1
            return out
        if qos.retain:
            self.retention.copy(pub_id, publication, accepted, qos)
        self.seen[pub_id] = None  # last: a publication that failed here is routed if it comes again
        if len(self.seen) > SEEN_PUBLICATIONS:
            self.seen.popitem(last=False)
        return out


def unlogged(message: Message) -> TypeGuard[Publish]:
    """Whether an input changes nothing in the router that its log must replay (a
    non-persistent publication, see ``Router._unlogged``): the adapters do not log it, and what
    the router answers to it waits for no commit."""
    return type(message) is Publish and not message.qos.persistent


Handler = Callable[[Router, Any, str, float], Output]
_PARTS = (
    "tables",
    "composites",
    "custody",
    "sessions",
    "stand_ins",
    "publishers",
    "retention",
    "leases",
)  # the stateful ones
_COUNTED: dict[type, str] = {}  # message type -> the name of its counter, made once


def _counted(kind: type) -> str:
    name = _COUNTED[kind] = f"in.{kind.__name__}"
    return name


def _live(handler: Handler) -> Handler:
    """Between brokers, a message whose hops are used up is dropped: only a cycle keeps one going."""

    def checked(router: Router, message: Any, hop: str, now: float) -> Output:
        return router._drop("ttl") if message.ttl <= 0 else handler(router, message, hop, now)

    return checked


def _sent_to(sub_id: str, out: Output) -> set[str]:
    """The neighbours a new subscription went on to, in what the tables answered."""
    return {target for target, message in out if type(message) is Subscribe and message.id == sub_id}


def _took(router: Router, message: Took, hop: str, now: float) -> Output:
    router.custody.took(hop, message.seq)
    return []


_LINK_EVENTS: dict[type, Handler] = {  # on a Tick, handle() has expired what was due: nothing else
    LinkUp: Router._link_up,
    LinkDown: lambda router, message, hop, now: router.sessions.disconnect(hop, now),
    Tick: lambda router, message, hop, now: [],
}
_FROM_CLIENT: dict[type, Handler] = {
    Advertise: Router._client_asks,
    Subscribe: Router._client_asks,
    CompositeSubscribe: Router._client_asks,
    Unadvertise: Router._client_withdraws,
    Unsubscribe: Router._client_withdraws,
    Publish: Router._client_publishes,
    Cancel: Router._client_cancels,
    Renew: Router._client_renews,
    Pull: Router._client_pulls,
    StatusRequest: Router._status,
    Bye: lambda router, message, hop, now: router.sessions.leave(hop),  # gone for good: no grace
    Took: _took,
    Standby: Router._client_declares,
    TakeOver: Router._client_takes_over,
}
_FROM_BROKER: dict[type, Handler] = {
    Advertise: _live(Router._learn),
    Subscribe: _live(Router._learn),
    CompositeSubscribe: _live(Router._asked),
    Publish: _live(Router._forwarded),
    Notify: Router._notified,
    Retained: Router._handed_on,
    Cancel: _live(Router._cancelled),
    Unadvertise: Router._withdrawn,
    Unsubscribe: Router._withdrawn,
    Refuse: Router._refused,
    Took: _took,
}
_FROM_BROKER[Carry] = Router._carried  # after the table: it hands on what it carries through it
