"""Stand-in subscriptions: what a broker subscribes on behalf of a neighbour that has not answered.

A publication goes only where subscriptions were learned, and a neighbour sends us its
subscriptions for an advertisement only once it has *taken* the advertisement. While it is away
(kept for its grace period, its messages held in custody), an advertisement that reaches us
waits in its channel, and every publication under that advertisement would be dropped here as
matching no one, though the neighbour may well have subscribers for it: a trigger publisher that
fails over from a dead broker to its neighbour is exactly that case, and its triggers were lost.

So for every advertisement held for a neighbour whose link is down (sent while it was away, or
sent before and not taken when the link went), the broker subscribes, under the neighbour's hop,
the advertisement's own filter: its publications are held for the neighbour, which filters them
by its own tables when it is back, and the subscription travels upstream like any other, so a
publisher two hops away is covered too. The neighbour's ``Took`` of the advertisement comes after
the subscriptions it sent in answer (``Router._carried``), on the same ordered link, so the stand-in
is withdrawn only once the real ones are in place. Its session ending takes it with the rest.

An advertisement sent to a neighbour that is up gets a stand-in as well, kept here (it costs no
message): publications that reach this broker before the neighbour answered go on to it. That
covers a middle broker's restart too: the neighbour beyond resends what it held for it,
publications included, and the middle broker, which had no subscription for them yet, now stands
in for its other side.

For an advertisement that came from a neighbour, the neighbour it came from stands in for us
until our ``Took`` of it; the subscribers beyond us answer a round trip later, through us. So a
stand-in kept here for an advertisement we passed on *holds back* our ``Took`` of it: we say we
took it once every neighbour we passed it to took it (their answers are then in our tables and
on their way upstream, ahead of the ``Took``), went away (the stand-in is then sent upstream
instead, ahead of the ``Took``), or did not answer in ``ANSWER_WAIT`` seconds (the same: a full
disk there, say). Without the hold, what the upstream broker routed between our ``Took`` and the
subscriptions beyond us matched no one and was lost: the first 1,200 of 10,000 acknowledged
publications, B1 to a subscriber on B3, with fsyncs of a few ms. Sending every such stand-in
upstream did the same job at two messages per advertisement and neighbour link (a ``Subscribe``
and its ``Unsubscribe``): a quarter of a deployment's traffic in the five-broker star. It is still
how a stand-in for a neighbour's advertisement that we send for another reason works: our tables
sent to a neighbour newly linked, or back new, or back after we forgot it, answer no carry whose
``Took`` could wait, and the upstream broker's stand-in for us ended long ago.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from broker.messages import DEFAULT_TTL, Advertise, Carry, LinkDown, LinkUp, Message, Unadvertise
from broker.routing.custody import Channel, Custody
from broker.routing.snapshots import Stateful
from broker.routing.tables import Output, Tables

__all__ = ["ANSWER_WAIT", "StandIns"]

ANSWER_WAIT = 10.0  # seconds a neighbour that is up may take to take an advertisement before the
# stand-in for it goes upstream: longer than a frozen neighbour takes to be found dead (4 s)

Hold = tuple[str, int]  # the upstream neighbour and the seq of its carry whose Took waits


class StandIn(NamedTuple):
    sub_id: str
    sent_on: bool  # sent upstream like any subscription (False: kept here)
    hold: Hold | None  # the Took it holds back (only one kept here does)


class StandIns(Stateful):
    STATE = ("made", "holding", "released")

    def __init__(self, broker_id: str, tables: Tables, custody: Custody, counters: Counter[str]) -> None:
        self.broker_id = broker_id
        self.tables, self.custody, self.counters = tables, custody, counters
        # neighbour -> (its channel then, advertisement id -> its stand-in)
        self.made: dict[str, tuple[Channel, dict[str, StandIn]]] = {}
        # upstream neighbour -> (its channel then, seq of a carried advertisement -> (since when,
        # the stand-ins (neighbour, advertisement id) that hold back our Took of it)), in seq order
        self.holding: dict[str, tuple[Channel, dict[int, tuple[float, set[tuple[str, str]]]]]] = {}
        self.released: set[str] = set()  # upstream neighbours whose Took may say more now

    def update(self, message: Message, hop: str, out: Output, now: float) -> Output:
        """What the router's output ``out`` for ``message`` from ``hop`` changes: stand-ins for
        the advertisements it sends a neighbour, an end to those taken or withdrawn, and those
        of a neighbour gone, away or late sent upstream."""
        if self.made:
            channels = self.custody.channels
            for neighbour in [n for n, (then, _) in self.made.items() if channels.get(n) is not then]:
                for adv_id, stand_in in self.made.pop(neighbour)[1].items():  # its session ended,
                    self._release(neighbour, adv_id, stand_in)  # or it came back new: they went
            for upstream in [u for u, (then, _) in self.holding.items() if channels.get(u) is not then]:
                del self.holding[upstream]  # it went or came back new: nothing to hold back (a
                # hold lives only beside its stand-in, so ``made`` is not empty while one does)
        answering = _advertisement_carried(message, hop, self.tables.neighbors)
        linked = type(message) is LinkUp  # our tables, to a neighbour new to us (not a covering
        # advertisement's withdrawal releasing one it covered: what it drew is upstream already)
        more: Output = []
        for target, sent in out:
            kind = type(sent)
            if kind is Advertise:
                hold = (hop, message.seq) if sent.id == answering else None  # type: ignore[union-attr]
                more += self._make(target, sent.id, now, hold, send_on=linked)  # type: ignore[union-attr]
            elif kind is Unadvertise and sent.id in self._made(target):  # type: ignore[union-attr]
                more += self._end(target, sent.id)  # type: ignore[union-attr]
        if not (self.made or self.custody.taken_adverts):
            return more  # the usual case, and the hot path: nothing stood in for
        if isinstance(message, LinkDown) and (channel := self._away(hop)) is not None:
            for adv_id in list(channel.adverts):  # sent, not yet taken: it may never have been
                more += self._send_on(hop, adv_id, now)
        for target, adv_id in self.custody.advertisements_taken():
            if adv_id in self._made(target):
                more += self._end(target, adv_id)
        for upstream in list(self.holding):
            more += self._overdue(upstream, now)
        return more

    def held_back(self, upstream: str) -> int | None:
        """The first seq of ``upstream``'s carries whose ``Took`` a stand-in holds back."""
        entry = self.holding.get(upstream)
        return None if entry is None else next(iter(entry[1]))

    def take_released(self) -> list[str]:
        """The upstream neighbours whose stand-ins for us ended since the last call, sorted."""
        released, self.released = sorted(self.released), set()
        return released

    def _made(self, hop: str) -> dict[str, StandIn]:
        return self.made[hop][1] if hop in self.made else {}

    def _away(self, hop: str) -> Channel | None:
        """The channel of a neighbour whose link is down, kept for its grace period."""
        channel = self.custody.channels.get(hop)
        if channel is None or channel.up or channel.client or hop not in self.tables.neighbors:
            return None
        return channel

    def _make(
        self, hop: str, adv_id: str, now: float, hold: Hold | None = None, send_on: bool = False
    ) -> Output:
        """A stand-in for ``adv_id`` under ``hop``. For a neighbour away it is sent on like any
        subscription (a publisher further away must send its publications this way). For one
        that is up it stays here, and carries on to the neighbour what reaches this broker
        before its answer, at no cost in messages when nothing does; for an advertisement whose
        carry to us it answers (``hold``), it holds back our ``Took`` of it until it ends. One
        for a neighbour's advertisement goes upstream too when ``send_on``: the neighbour is
        late, or new to us (our tables, sent as it linked, answer no carry whose Took could
        wait, and the upstream broker's stand-in for us ended long ago)."""
        channel = self.custody.channels.get(hop)
        entry = self.tables.srt.get(adv_id)
        if channel is None or channel.client or hop not in self.tables.neighbors or entry is None:
            return []
        if adv_id in self._made(hop):
            return []  # (no empty entry left behind: it would keep ``update`` off its fast path)
        _, made = self.made.setdefault(hop, (channel, {}))
        # "~" is in no peer id, so this id is no client's ("<broker>/<client>/<ref>") nor another's
        sub_id = f"{self.broker_id}~stand-in~{hop}~{adv_id}"
        upstream = None if hold is None else self.custody.channels.get(hold[0])
        from_neighbour = entry.hop in self.tables.neighbors
        late = send_on or (hold is not None and upstream is None)
        sent_on = not channel.up or (from_neighbour and late)
        if sent_on or hold is None or upstream is None:
            hold = None
        else:  # (``update`` dropped what an old channel of ``upstream`` held)
            _, seqs = self.holding.setdefault(hold[0], (upstream, {}))
            seqs.setdefault(hold[1], (now, set()))[1].add((hop, adv_id))
        made[adv_id] = StandIn(sub_id, sent_on, hold)
        self.counters["stand_ins.made"] += 1
        self.counters["stand_ins.sent_on"] += sent_on
        return self.tables.stand_in(sub_id, entry.filter, hop, DEFAULT_TTL, forward=sent_on)

    def _send_on(self, hop: str, adv_id: str, now: float) -> Output:
        """The stand-in for a neighbour away or late, sent upstream (one kept here ends first)."""
        stand_in = self._made(hop).get(adv_id)
        more = self._end(hop, adv_id) if stand_in is not None and not stand_in.sent_on else []
        return more + self._make(hop, adv_id, now, send_on=True)

    def _overdue(self, upstream: str, now: float) -> Output:
        """The stand-ins that have held back a Took of ``upstream``'s for ``ANSWER_WAIT``, sent on."""
        more: Output = []
        while (entry := self.holding.get(upstream)) is not None:
            seq, (since, waiting) = next(iter(entry[1].items()))
            if now - since < ANSWER_WAIT:
                break
            del entry[1][seq]
            if not entry[1]:
                del self.holding[upstream]
            self.released.add(upstream)
            self.counters["stand_ins.overdue"] += len(waiting)
            for neighbour, adv_id in sorted(waiting):
                stand_in = self._made(neighbour).get(adv_id)
                if stand_in is not None and stand_in.hold == (upstream, seq):
                    more += self._send_on(neighbour, adv_id, now)
        return more

    def _end(self, hop: str, adv_id: str) -> Output:
        made = self.made[hop][1]
        stand_in = made.pop(adv_id)
        if not made:
            del self.made[hop]
        self._release(hop, adv_id, stand_in)
        entry = self.tables.prt.get(stand_in.sub_id)
        if entry is None or entry.hop != hop:
            return []
        self.counters["stand_ins.ended"] += 1
        return self.tables.withdraw(stand_in.sub_id)

    def _release(self, hop: str, adv_id: str, stand_in: StandIn) -> None:
        """The stand-in no longer holds back the Took it held (if any): the router says it, last."""
        if stand_in.hold is None or (entry := self.holding.get(stand_in.hold[0])) is None:
            return
        upstream, seq = stand_in.hold
        seqs = entry[1]
        if seq in seqs:
            waiting = seqs[seq][1]
            waiting.discard((hop, adv_id))
            if not waiting:
                del seqs[seq]
        if not seqs:
            del self.holding[upstream]
        self.released.add(upstream)

    def status(self) -> dict[str, int]:
        return {
            "stand_ins": sum(len(made) for _, made in self.made.values()),
            "tooks_held_back": sum(len(seqs) for _, seqs in self.holding.values()),
        }


def _advertisement_carried(message: Message, hop: str, neighbors: set[str]) -> str | None:
    """The id of the advertisement a neighbour carried to us in ``message``, if it is one."""
    if type(message) is Carry and type(message.message) is Advertise and hop in neighbors:
        return message.message.id
    return None
