"""The routing tables of one broker (PADRES): advertisements (SRT), subscriptions (PRT), its links.

Advertisements are flooded to every neighbour; a subscription goes only towards the last hops of
advertisements it overlaps, once per link, and is held until such an advertisement arrives;
withdrawals retrace the same paths, and covering (``forwarding``) holds back what a sent entry
already covers. A link that comes up is sent everything it needs, which is how a restarted
neighbour gets its routing state back; one that goes down takes everything learned through it.

Under the routing mode "flooding" (SESDAD's RoutingPolicy, ``forwarding.ROUTING_MODES``) the router
sends every publication to every neighbour, so no subscription is forwarded: a broker's
subscriptions are its clients' and its detectors', matched here for local delivery. What does
not route publications is kept: advertisements are still flooded (a neighbour's publications
are checked against them, and a composite is placed by them), a subscription a neighbour sends
is still learned, stand-ins are still made (kept here, as nothing is sent on). The whole overlay
must use one mode: a filter broker sends a flooding one only what its subscriptions draw, and
it has none.

The tables know hops, entry ids and filters, nothing more: the router makes the ids and answers
clients, and the composite detections (``composites``) subscribe here like anyone else, under
the hop ``DETECTOR``. Kept apart so that each of the three reads on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from broker.language.model import Filter, Publication
from broker.matching.matcher import CountingMatcher
from broker.messages import DETECTOR, Advertise, Hop, Message, Subscribe, Unadvertise, Unsubscribe
from broker.records import Slotted
from broker.routing.filter_index import FilterIndex
from broker.routing.forwarding import ROUTING_MODES, Action, Forwarding, Twins
from broker.routing.placement import HERE, Source
from broker.routing.relations import Fit, advertisement_covers, overlaps, subscription_covers
from broker.routing.snapshots import Stateful

__all__ = ["Output", "Tables"]

Output = list[tuple[str, Message]]  # what to send where, in order


@mypyc_attr(serializable=True)  # unpickled without its __init__, as in Python
@dataclass(slots=True)
class Entry(Slotted):  # not Generic in the hop's type: mypyc cannot make a generic dataclass with slots
    filter: Filter
    hop: Hop  # where it came from (a str for an advertisement)
    ttl: int
    forward: bool = True  # a subscription sent on towards advertisements (False: a stand-in kept here)
    # a stand-in (see ``stand_in``): what fits this advertisement matches it here, not ``filter``
    fit: Fit | None = None


class Tables(Stateful):
    STATE = (
        "neighbors",
        "clients",
        "srt",
        "prt",
        "matcher",
        "srt_index",
        "prt_index",
        "fit_index",
        "hop_adverts",
        "last_fit",
        "subscriptions",
        "advertisements",
    )

    def __init__(
        self,
        covering: str = "off",
        advertisement_covering: bool = False,
        routing: str = "filter",
        upward: str = "",
    ) -> None:
        if routing not in ROUTING_MODES:
            raise ValueError(f"routing must be one of {', '.join(ROUTING_MODES)}, not {routing!r}")
        self.routing = routing
        # under TOTAL ordering, the hop towards the root ("" otherwise, and at the root): every
        # publication comes down from it, wherever it was published (a subscriber's own leaf
        # too), so a subscription goes there if it overlaps any advertisement at all
        self.upward = upward
        self.neighbors: set[str] = set()
        self.clients: set[str] = set()
        self.srt: dict[str, Entry] = {}
        self.prt: dict[str, Entry] = {}
        self.matcher = CountingMatcher()
        self.srt_index: FilterIndex[str] = FilterIndex()  # advertisements a subscription may overlap
        self.prt_index: FilterIndex[str] = FilterIndex()  # subscriptions an advertisement may overlap
        # the stand-ins' advertisements, which publications are matched against by fit (``stand_in``)
        self.fit_index: FilterIndex[str] = FilterIndex()
        # client or neighbour hop -> the advertisements that came from it: what it may publish
        self.hop_adverts: dict[str, FilterIndex[str]] = {}
        # hop -> the advertisement from it that its last conforming publication fitted, compiled
        self.last_fit: dict[str, tuple[str, Fit]] = {}
        self.subscriptions = Twins() if covering == "off" else Forwarding(covering, subscription_covers)
        self.advertisements = Forwarding("lazy" if advertisement_covering else "off", advertisement_covers)

    # links --------------------------------------------------------------------------------------

    def add_client(self, hop: str) -> None:
        self.clients.add(hop)
        self.hop_adverts[hop] = FilterIndex()

    def remove_client(self, hop: str) -> None:
        """After its entries are withdrawn."""
        self.clients.discard(hop)
        del self.hop_adverts[hop]
        self.last_fit.pop(hop, None)

    def add_neighbor(self, hop: str) -> Output:
        """A neighbour is linked: send it every advertisement, and every subscription it should have."""
        self.neighbors.add(hop)
        self.hop_adverts.setdefault(hop, FilterIndex())
        out: Output = []
        for adv_id, entry in self.srt.items():
            if entry.hop != hop:
                out += self._apply(hop, self.advertisements.want(hop, adv_id, entry.filter), True)
        for sub_id, sub in self.prt.items():
            if sub.hop != hop and sub.forward and self._routes_to(sub.filter, hop):
                out += self._want(hop, sub_id, sub)
        return out

    def announced(self, hop: str) -> Output:
        """Every advertisement and subscription we told the neighbour ``hop`` of and did not
        withdraw, told again (it drops those it has as duplicates): for a neighbour whose
        tables may lack some (``Sessions.neighbor_up``)."""
        out: Output = [
            (hop, Advertise(wire, value, max(self.srt[entry].ttl - 1, 0)))
            for wire, value, entry in self.advertisements.sent_to(hop)
        ]
        return out + [
            (hop, Subscribe(wire, value, max(self.prt[entry].ttl - 1, 0)))
            for wire, value, entry in self.subscriptions.sent_to(hop)
        ]

    def remove_neighbor(self, hop: str) -> Output:
        """A neighbour's link is gone, and with it everything learned through it."""
        self.neighbors.discard(hop)
        self.subscriptions.forget(hop)
        self.advertisements.forget(hop)
        learned = [i for i, e in self.srt.items() if e.hop == hop]
        learned += [i for i, e in self.prt.items() if e.hop == hop]
        out: Output = []
        for entry_id in learned:
            out += self.withdraw(entry_id)
        del self.hop_adverts[hop]
        self.last_fit.pop(hop, None)
        return out

    # entries ------------------------------------------------------------------------------------

    def knows(self, entry_id: str) -> bool:
        return entry_id in self.srt or entry_id in self.prt

    def advertise(self, adv_id: str, advertisement: Filter, hop: str, ttl: int) -> Output:
        self.srt[adv_id] = Entry(advertisement, hop, ttl)
        self.srt_index.add(adv_id, advertisement)
        if hop in self.hop_adverts:
            self.hop_adverts[hop].add(adv_id, advertisement)
        out: Output = []
        for neighbor in sorted(self.neighbors - {hop}):
            out += self._apply(neighbor, self.advertisements.want(neighbor, adv_id, advertisement), True)
        # subscriptions waiting for this direction can now go there (and upward, under TOTAL)
        for towards in sorted({hop, self.upward} & self.neighbors):
            for sub_id in sorted(self.prt_index.candidates(advertisement)):
                entry = self.prt[sub_id]
                if entry.hop != towards and entry.forward and overlaps(entry.filter, advertisement):
                    out += self._want(towards, sub_id, entry)
        return out

    def subscribe(self, sub_id: str, subscription: Filter, hop: Hop, ttl: int) -> Output:
        """Into the tables, and towards the advertisements it overlaps."""
        self.prt[sub_id] = Entry(subscription, hop, ttl)
        self.prt_index.add(sub_id, subscription)
        self.matcher.add(sub_id, subscription)
        return self._send_on(sub_id)

    def stand_in(self, sub_id: str, advertisement: Filter, hop: str, ttl: int, forward: bool) -> Output:
        """A subscription under ``hop`` for every publication that fits ``advertisement`` (see
        ``standins``), towards the advertisements it overlaps if ``forward``. A publication may
        leave out any attribute its advertisement names, so the advertisement's own filter as a
        subscription misses it (its ``isPresent`` asks for the attribute): here the stand-in
        matches by fit, as the edge broker checks a publication against its advertisement; in
        the tables and on the wire it is the advertisement's class alone, the one predicate every
        fitting publication meets (a publication of the class alone fits every advertisement of
        the class, so that is what the stand-in overlaps): a broker upstream takes it for any
        subscription, errs towards sending more, never less."""
        relaxed = Filter(advertisement.cls)
        self.prt[sub_id] = Entry(relaxed, hop, ttl, forward, Fit.of(advertisement))
        self.prt_index.add(sub_id, relaxed)
        self.fit_index.add(sub_id, advertisement)
        return self._send_on(sub_id) if forward else []

    def _send_on(self, sub_id: str) -> Output:
        entry = self.prt[sub_id]
        out: Output = []
        for neighbor in sorted(self.neighbors):
            if neighbor != entry.hop and self._routes_to(entry.filter, neighbor):
                out += self._want(neighbor, sub_id, entry)
        return out

    def _want(self, neighbor: str, sub_id: str, entry: Entry) -> Output:
        """The subscription towards ``neighbor``, or held back (``forwarding``); flooding, neither."""
        if self.routing == "flooding":
            return []
        apart = entry.fit is not None  # a stand-in
        return self._apply(neighbor, self.subscriptions.want(neighbor, sub_id, entry.filter, apart), False)

    def withdraw(self, entry_id: str) -> Output:
        out: Output = []
        if entry_id in self.srt:
            entry = self.srt.pop(entry_id)
            self.srt_index.remove(entry_id)
            hop = entry.hop
            assert isinstance(hop, str)  # an advertisement comes from a client or a neighbour
            if hop in self.hop_adverts:
                self.hop_adverts[hop].remove(entry_id)
            if self.last_fit.get(hop, ("",))[0] == entry_id:
                del self.last_fit[hop]
            for neighbor in sorted(self.neighbors):
                out += self._apply(neighbor, self.advertisements.unwant(neighbor, entry_id), True)
            # subscriptions that only this advertisement drew that way (or upward, under TOTAL)
            for towards in sorted({hop, self.upward} & self.neighbors):
                drawn = [
                    sub_id
                    for sub_id in sorted(self.prt_index.candidates(entry.filter))
                    if self.subscriptions.wants(towards, sub_id)
                    and overlaps(self.prt[sub_id].filter, entry.filter)
                ]
                for sub_id in drawn:
                    if not self._routes_to(self.prt[sub_id].filter, towards):
                        out += self._apply(towards, self.subscriptions.unwant(towards, sub_id), False)
        elif entry_id in self.prt:
            removed = self.prt.pop(entry_id)
            self.prt_index.remove(entry_id)
            if removed.fit is None:
                self.matcher.remove(entry_id)
            else:
                self.fit_index.remove(entry_id)
            for neighbor in sorted(self.neighbors):
                out += self._apply(neighbor, self.subscriptions.unwant(neighbor, entry_id), False)
        return out

    # questions ----------------------------------------------------------------------------------

    def conforms(self, hop: str, publication: Publication) -> bool:
        """Does the publication fit an advertisement that came from ``hop``, the client that
        publishes it or the neighbour that forwards it?"""
        last = self.last_fit.get(hop)  # a client mostly publishes what it did last: tried first
        if last is not None and last[1](publication):
            return True
        for adv_id in self.hop_adverts[hop].lookup(publication.cls, publication.fields):
            fit = Fit.of(self.srt[adv_id].filter)
            if fit(publication):
                self.last_fit[hop] = (adv_id, fit)
                return True
        return False

    def advertised_to(self, hop: str, publication: Publication) -> bool:
        """Does the publication fit an advertisement that we tell the neighbour ``hop`` of (one
        that did not come from it)?"""
        for adv_id in self.srt_index.lookup(publication.cls, publication.fields):
            entry = self.srt[adv_id]
            if entry.hop != hop and Fit.of(entry.filter)(publication):
                return True
        return False

    def matching(self, publication: Publication, now: float) -> tuple[list[str], dict[str, list[str]]]:
        """The subscriptions a publication matches: those of this broker's detectors, sorted, and
        the others by the hop they came from."""
        local: list[str] = []
        by_hop: dict[str, list[str]] = {}
        for sub_id in self.matcher.match(publication, now):
            assert isinstance(sub_id, str)
            hop = self.prt[sub_id].hop
            if hop is DETECTOR:
                local.append(sub_id)
            else:
                by_hop.setdefault(hop, []).append(sub_id)
        for sub_id in self.fit_index.lookup(publication.cls, publication.fields):  # stand-ins
            entry = self.prt[sub_id]
            assert entry.fit is not None and isinstance(entry.hop, str)
            if entry.fit(publication):
                by_hop.setdefault(entry.hop, []).append(sub_id)
        return sorted(local), by_hop

    def whence(self, atom: Filter) -> str | Source:
        """Where publications matching an atom come from (see ``placement``)."""
        hops = {
            self.srt[i].hop for i in self.srt_index.candidates(atom) if overlaps(atom, self.srt[i].filter)
        }
        if len(hops) == 1 and (hop := hops.pop()) in self.neighbors:
            return hop
        return HERE  # local clients, more than one direction, or no advertisement yet

    def _routes_to(self, subscription: Filter, neighbor: str) -> bool:
        """Is there an advertisement learned from ``neighbor`` that the subscription overlaps?
        Upward under TOTAL, any advertisement: what it covers comes down from there."""
        anywhere = neighbor == self.upward
        return any(
            (anywhere or self.srt[i].hop == neighbor) and overlaps(subscription, self.srt[i].filter)
            for i in self.srt_index.candidates(subscription)
        )

    def _apply(self, hop: str, actions: list[Action], advertisement: bool) -> Output:
        out: Output = []
        for kind, entry_id, value in actions:
            if kind == "send":
                ttl = (self.srt[entry_id] if advertisement else self.prt[entry_id]).ttl
                message: Message = (Advertise if advertisement else Subscribe)(
                    entry_id, value, max(ttl - 1, 0)
                )
            else:
                message = (Unadvertise if advertisement else Unsubscribe)(entry_id)
            out.append((hop, message))
        return out
