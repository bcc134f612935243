"""Custody transfer on links: a message stays with the sender until the receiver has taken it.

Every link to a neighbour broker, and every client's stream of deliveries, is a ``Channel``: what
the router sends on it that carries state or data (``messages.CARRIED``) gets the link's next
sequence number, goes out as ``Carry(seq, message)`` and is *held* until the receiver answers
``Took(n)``, which covers every seq up to n. A broker says ``Took`` only once what it took is in
its write-ahead log (the adapter holds the router's output until the log commit that covers its
input), a client once its consumer asks for the next delivery of that stream (or a lossy queue
dropped it). When the link goes down the channel stays, and what the router sends meanwhile is
held for the peer. When the peer is back, its hello says which of our seqs it took last
(``LinkUp.resume``): everything after that goes again, in order, and the receiver drops a seq it
has already taken, so a resend can never be taken twice. A non-persistent publication or
delivery (``Qos.persistent`` false) is not in the log, so it gets no seq: it goes bare on a link
that is up, and is dropped (``dropped.nonpersistent``) for a peer away.

A channel carries at most ``backlog.WINDOW`` messages its peer has not taken yet; what the router
sends it beyond that waits in its ``backlog`` (held in custody all the same), data by priority,
and goes as the peer's ``Took`` makes room: that is how an urgent message overtakes a backlog at
every hop, including to a peer that was away while the backlog built (see ``backlog``). A
client that pulls (``Pull``) gets data only as far as it asked for, however much room there is.

A publication or delivery whose quality of service has expired (``Qos.expires``) is taken out
of what is held or waits the moment the router's clock passes its expiry (``expire``, run before
every input the router handles), wherever it is in the queue, and counted (``expired.held``): it is
never sent again, and the receiver takes the gap like one left by a full channel.

Each channel has a name, which our hello gave it: the adapter's choice (``LinkUp.name``, so the
log has it), or ``EPOCH:N`` here. A broker that restarts from its log keeps its epoch and its
channels; one that restarts empty has a new epoch, and one that forgot a peer (its grace period
ended) opens a new channel. Either way the peer's hello names a channel that is not the one we
know, so both sides know that what they held for each other and learned from each other is void
(see ``sessions``), and seqs start again at 1.

Pure state, no I/O, part of the router: the write-ahead log replays the router's inputs, and the
channels come back exactly as they were.
"""

from __future__ import annotations

import heapq
import logging
import sys
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mypy_extensions import mypyc_attr

from broker.language.model import Publication
from broker.messages import (
    CARRIED,
    DEFAULT_QOS,
    Advertise,
    Carry,
    Deliver,
    Message,
    Notify,
    Publish,
    Retained,
    Took,
)
from broker.records import Slotted
from broker.routing.backlog import FAIR_EVERY, WINDOW, WINDOW_BYTES, Lanes
from broker.routing.snapshots import Stateful, restore_slots
from broker.routing.tables import Output
from broker.throttle import LogThrottle

__all__ = ["Channel", "Custody"]

log = logging.getLogger(__name__)

DATA = (Publish, Deliver, Notify, Retained)  # what a full channel may drop: the rest is routing state
_WITH_QOS = (Publish, Deliver, Retained)
WAITING = sys.maxsize  # the seq of an advertisement that waits in the backlog: after every seq given

MAX_HELD = 100_000  # messages held for one peer
MAX_HELD_BYTES = 64 << 20  # roughly, their publications' size, for one peer
CHECK_FIT_ABOVE = 1 << 18  # the weight of a message that may not fit in a frame: ``fits`` looks
REINDEX_AT = 1024  # entries of expiring messages kept before the first look for those taken


@mypyc_attr(serializable=True)  # unpickled without its __init__, as in Python
@dataclass(slots=True)
class Channel(Slotted):
    """One peer's link: what we hold for it and how far we took what it sent us."""

    name: str  # ours: the peer names it in its hello to resume this channel
    peer_epoch: str  # the peer's channel we are in step with ("" for a client)
    client: bool
    up: bool = True
    next_seq: int = 1
    held: OrderedDict[int, tuple[Message, int]] = field(default_factory=OrderedDict)  # seq -> message, weight
    weight: int = 0
    received: int = 0  # the last seq we took from the peer
    # the advertisements among ``held``, by id, in seq order: until the peer takes one, it may
    # have subscribers for it that we do not know of (see ``standins``)
    adverts: dict[str, int] = field(default_factory=dict)
    # advertisements the peer's hello said it took when it came back: its answers to them may be
    # among what it resends, so they count as taken at its next Took, which comes after those
    confirming: list[str] = field(default_factory=list)
    # the last seq we said we took from the peer (our Took, and our hello): ``received``, but for
    # what a stand-in holds back (``standins``)
    acked: int = 0
    # what waits for room in the window (``backlog``): Lanes of data, and routing state between
    # them as (message, weight); how many data messages and how much weight wait in all
    backlog: deque[Lanes | tuple[Message, int]] = field(default_factory=deque)
    waiting: int = 0
    waiting_weight: int = 0
    tickets: int = 0  # arrivals into the backlog, counted: a message's ticket says how old it is
    turns: int = 0  # messages taken from the backlog: every FAIR_EVERY-th goes by age
    credits: int | None = None  # a client that pulls: how many more data messages it asked for
    # a neighbour's: at its next resume, tell it again everything we told it (``sessions``)
    reannounce: bool = False

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        """A channel pickled before it had a backlog gets an empty one."""
        restore_slots(self, state)


def _fits_anything(message: Message) -> bool:
    return True


def priority(message: Message) -> int:
    """Its lane in a backlog: its quality of service's priority, a firing's its composite
    subscription's (``Notify.priority``)."""
    if isinstance(message, _WITH_QOS):
        return message.qos.priority
    return message.priority if isinstance(message, Notify) else DEFAULT_QOS.priority


def weight(message: Message) -> int:
    kind = type(message)
    if kind is Deliver or kind is Publish or kind is Retained:
        return message.publication.weight()  # type: ignore[union-attr]
    if isinstance(message, Notify):
        return sum(p.weight() for p in message.publications)
    return 256  # routing state: a filter or a composite


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # as Router, which holds it
class Custody(Stateful):
    STATE = ("channels", "taken_adverts", "opened")

    def __init__(self, epoch: str, counters: Counter[str]) -> None:
        self.epoch = epoch
        self.counters = counters
        self.channels: dict[str, Channel] = {}
        self.taken_adverts: list[tuple[str, str]] = []  # (hop, advertisement id) taken since asked
        self.opened = 0
        self.max_held = MAX_HELD
        self.max_bytes = MAX_HELD_BYTES
        self.window, self.window_bytes = WINDOW, WINDOW_BYTES
        self.prioritised = True  # urgent data overtakes in a backlog (not under Ordering TOTAL)
        self.full_log = LogThrottle(burst=1)  # what a full channel could not hold, by peer
        # (expires, hop, channel name, seq, priority) of each message held (a seq) or waiting (its
        # ticket, negated) that expires: the soonest first
        self.expiring: list[tuple[float, str, str, int, int]] = []
        self._reindex_at = REINDEX_AT  # entries in ``expiring`` past which it is made afresh
        # channels given room since the last ``carry`` that moved backlogs (a Took, an expiry, a
        # resume, a pull; the adapter's ``unsendable``): their backlog moves at its end
        self._roomy: set[str] = set()
        # whether a message fits in a frame once carried: the adapter knows its codec. A router
        # decision, so what the log replays drops what was dropped (and gives it no seq)
        self.fits: Callable[[Message], bool] = _fits_anything

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self._index_expiring()

    def _index_expiring(self) -> None:
        """``expiring`` made afresh from what is held and waits: at a restore, and when it has
        doubled since (a peer's Took does not look for the entries of what it took, so they stay
        until then)."""
        self.expiring = [
            (message.qos.expires, hop, channel.name, seq, priority(message))  # type: ignore[union-attr]
            for hop, channel in self.channels.items()
            for seq, (message, _) in channel.held.items()
            if type(message) in _WITH_QOS and message.qos.expires is not None  # type: ignore[union-attr]
        ]
        self.expiring += [
            (message.qos.expires, hop, channel.name, -ticket, level)  # type: ignore[union-attr]
            for hop, channel in self.channels.items()
            for lanes in channel.backlog
            if type(lanes) is Lanes
            for level, lane in lanes.lanes.items()
            for ticket, (message, _) in lane.items()
            if type(message) in _WITH_QOS and message.qos.expires is not None  # type: ignore[union-attr]
        ]
        heapq.heapify(self.expiring)
        self._reindex_at = max(REINDEX_AT, 2 * len(self.expiring))

    def expire(self, now: float) -> None:
        """Take out of every channel what expired by ``now`` (see the module's docstring)."""
        expiring = self.expiring
        while expiring and expiring[0][0] <= now:
            _, hop, name, key, level = heapq.heappop(expiring)
            channel = self.channels.get(hop)
            if channel is None or channel.name != name:
                continue
            if key > 0:
                if held := channel.held.pop(key, None):
                    channel.weight -= held[1]
                    self.counters["expired.held"] += 1
                    if channel.backlog:
                        self._roomy.add(hop)
                continue
            for lanes in channel.backlog:
                if type(lanes) is Lanes and (waited := lanes.remove(level, -key)) is not None:
                    channel.waiting -= 1
                    channel.waiting_weight -= waited[1]
                    self.counters["expired.held"] += 1
                    break

    def open(self, hop: str, peer_epoch: str = "", client: bool = False, name: str = "") -> None:
        """A new channel, under the ``name`` our hello gave it (the adapter's choice, which comes
        in ``LinkUp`` and so is in the log), or one of our own."""
        self.channels[hop] = Channel(name or self._name(), peer_epoch, client)

    def _name(self) -> str:
        self.opened += 1
        return f"{self.epoch}:{self.opened}"

    def close(self, hop: str) -> None:
        """The peer is gone for good: what was held for it is dropped (and counted)."""
        channel = self.channels.pop(hop, None)
        if channel is not None and (channel.held or channel.backlog):  # to a client: maybe delivered
            noun = "unconfirmed.session_closed" if channel.client else "dropped.link_closed"
            self.counters[noun] += (
                len(channel.held) + channel.waiting + sum(type(item) is not Lanes for item in channel.backlog)
            )

    def stranded(self, hop: str, advertised: Callable[[Publication], bool]) -> Output:
        """The publications held for a neighbour that is back with a channel we do not know,
        taken out of the old channel to go again on the new one, after the tables we send it
        there: it routes them by what it knows then, and drops one it routed before (``seen``).
        Dropped with the old channel, they were lost though acknowledged to their publisher: a
        broker back from its log after its neighbours forgot it routes what its clients publish
        into the old channels until the neighbours' hellos arrive. One that no advertisement
        ``advertised`` to it any longer (withdrawn meanwhile) would be refused there: it stays,
        to be dropped with the channel. Those still waiting go too, oldest first."""
        channel = self.channels.get(hop)
        if channel is None or channel.client:
            return []
        out: Output = []
        for seq, (message, cost) in list(channel.held.items()):
            if type(message) is Publish and advertised(message.publication):
                del channel.held[seq]
                channel.weight -= cost
                out.append((hop, message))
        for lanes in channel.backlog:
            if type(lanes) is not Lanes:
                continue
            for level, lane in list(lanes.lanes.items()):
                for ticket, (message, cost) in list(lane.items()):
                    if type(message) is Publish and advertised(message.publication):
                        lanes.remove(level, ticket)
                        channel.waiting -= 1
                        channel.waiting_weight -= cost
                        out.append((hop, message))
        self.counters["resent.new_channel"] += len(out)
        return out

    def reannounce_all(self) -> None:
        """Every neighbour's channel is to be told again what we told it, at its next resume:
        a state written by an older version may not be what the neighbours have of it
        (``broker.transport.persistence``)."""
        for channel in self.channels.values():
            channel.reannounce = not channel.client

    def reannouncing(self, hop: str) -> bool:
        """Whether the neighbour ``hop``, resuming, is to be told again what we told it (once)."""
        channel = self.channels[hop]
        due, channel.reannounce = channel.reannounce, False
        return due

    def peer_epoch(self, hop: str) -> str | None:
        channel = self.channels.get(hop)
        return None if channel is None else channel.peer_epoch

    def down(self, hop: str) -> None:
        if (channel := self.channels.get(hop)) is not None:
            channel.up = False

    def greeting(self, hop: str) -> tuple[str, str, int]:
        """What our hello to ``hop`` says: our channel's name ("" if there is none: the caller
        names the new one), the peer's we know, and the last seq we said we took from it."""
        channel = self.channels.get(hop)
        return ("", "", 0) if channel is None else (channel.name, channel.peer_epoch, channel.acked)

    def resume(self, hop: str, took: int | None) -> Output:
        """The peer is back and took our seqs up to ``took`` (None: it knows nothing of ours):
        everything after goes again, in order, then what waits as room is made."""
        channel = self.channels[hop]
        channel.up = True
        if took is not None:
            before = len(self.taken_adverts)
            self._forget(hop, channel, took)
            channel.confirming += [adv_id for _, adv_id in self.taken_adverts[before:]]
            del self.taken_adverts[before:]
        self.counters["resent.custody"] += len(channel.held)
        if channel.backlog:
            self._roomy.add(hop)
        return [(hop, Carry(seq, message)) for seq, (message, _) in channel.held.items()]  # type: ignore[arg-type]

    def took(self, hop: str, seq: int) -> None:
        if (channel := self.channels.get(hop)) is not None:
            self.taken_adverts += [(hop, adv_id) for adv_id in channel.confirming]
            channel.confirming.clear()
            self._forget(hop, channel, seq)
            if channel.backlog:
                self._roomy.add(hop)

    def pull(self, hop: str, more: int | None) -> None:
        """A client asks for ``more`` data messages (None: as many as come, pushed)."""
        if (channel := self.channels.get(hop)) is not None:
            channel.credits = None if more is None else (channel.credits or 0) + more
            if channel.backlog:
                self._roomy.add(hop)

    def acknowledge(self, hop: str, held_back: int | None, carried: int | None = None) -> Output:
        """Our ``Took`` to the neighbour ``hop``: of all it carried to us, but what a stand-in
        holds back (from seq ``held_back`` on). Said when it says more than the last one did, or
        in answer to a carry it covers (``carried``: a resend the peer holds until told)."""
        channel = self.channels.get(hop)
        if channel is None:
            return [] if carried is None else [(hop, Took(carried))]
        point = channel.received if held_back is None else min(channel.received, held_back - 1)
        if point > channel.acked or (carried is not None and carried <= point):
            channel.acked = point
            return [(hop, Took(point))]
        return []

    def unsendable(self, hop: str, seq: int) -> None:
        """The adapter could not send ``seq`` though ``fits`` let it through: held, it would fail
        again at every resume, so it goes. The peer takes the gap like one left by a full
        channel. Not a router input, so not in the log: a broker restored from it holds the
        message again, and drops it again at its first send."""
        channel = self.channels.get(hop)
        if channel is not None and seq in channel.held:
            channel.weight -= channel.held.pop(seq)[1]
            if channel.backlog:
                self._roomy.add(hop)  # (moved at the next input's carry)

    def _forget(self, hop: str, channel: Channel, seq: int) -> None:
        held = channel.held
        while held:
            first = next(iter(held))
            if first > seq:
                break
            channel.weight -= held.pop(first)[1]
        adverts = channel.adverts
        while adverts:
            adv_id, at = next(iter(adverts.items()))
            if at > seq:
                break
            del adverts[adv_id]
            self.taken_adverts.append((hop, adv_id))

    def advertisements_taken(self) -> list[tuple[str, str]]:
        """The (hop, advertisement id) pairs whose carry a peer took since the last call."""
        taken, self.taken_adverts = self.taken_adverts, []
        return taken

    def receive(self, hop: str, carry: Carry) -> bool:
        """Whether a carried message is new: a seq we took already (a resend) is not."""
        channel = self.channels.get(hop)
        if channel is None:
            return True
        if carry.seq <= channel.received:
            self.counters["dropped.resent"] += 1
            return False
        channel.received = carry.seq  # a gap is what the sender dropped (and counted) for want of room
        return True

    def carry(self, out: Output, now: float, move: bool = True) -> Output:
        """The router's output as it goes on the links: what needs custody carried and held
        (while the window has room and nothing waits, else it waits), and for a peer whose
        link is down, held only; the rest (answers) only while the link is up. Then, if it may
        ``move`` (not for an input the log does not replay), what waits on channels given room.
        ``now`` (epoch seconds) paces the log lines of a full channel."""
        sent: Output = []
        for hop, message in out:
            channel = self.channels.get(hop)
            if channel is None:
                sent.append((hop, message))
            elif (type(message) is Publish or type(message) is Deliver) and not message.qos.persistent:  # type: ignore[union-attr]
                if channel.up:  # non-persistent: not in the log, so sent bare (never held, nor again)
                    sent.append((hop, message))
                else:
                    self.counters["dropped.nonpersistent"] += 1
            elif not isinstance(message, CARRIED):
                if channel.up:
                    sent.append((hop, message))
                else:
                    self.counters["dropped.link_down"] += 1
            else:
                cost = weight(message)
                if cost > CHECK_FIT_ABOVE and not self.fits(message):
                    self._overflowed(hop, channel, "dropped.unsendable", message, now, "it fits in no frame")
                    continue
                data = isinstance(message, DATA)
                if data and self._full(channel, cost):  # routing state is never dropped: it is
                    # bounded by the tables, and a neighbour that missed some would stay wrong
                    noun = "session" if channel.client else "link"
                    if channel.up:  # it still goes, but it will not be sent again
                        self._overflowed(hop, channel, f"unheld.{noun}_full", message, now)
                        sent.append((hop, message))
                    else:
                        self._overflowed(hop, channel, f"dropped.{noun}_full", message, now)
                    continue
                if not channel.up:
                    self.counters["session_queued" if channel.client else "link_queued"] += 1
                if type(message) is Advertise:
                    channel.adverts.pop(message.id, None)  # in seq order: a re-sent one goes last
                    channel.adverts[message.id] = WAITING
                if channel.backlog or (data and not self._room(channel)):
                    self._wait(hop, channel, message, cost, data)
                else:
                    self._hold(hop, channel, message, cost, data, sent)
        if self._roomy and move:
            for hop in sorted(self._roomy):
                if (channel := self.channels.get(hop)) is not None:
                    self._move(hop, channel, sent)
            self._roomy.clear()
        return sent

    def _full(self, channel: Channel, cost: int) -> bool:
        held = len(channel.held) + channel.waiting
        return held >= self.max_held or channel.weight + channel.waiting_weight + cost > self.max_bytes

    def _room(self, channel: Channel) -> bool:
        """Whether the window has room for one more data message (and a pulling client asked)."""
        return (
            len(channel.held) < self.window
            and channel.weight < self.window_bytes
            and (channel.credits is None or channel.credits > 0)
        )

    def _hold(
        self, hop: str, channel: Channel, message: Message, cost: int, data: bool, sent: Output
    ) -> None:
        """Its seq, held until taken, and carried if the peer is linked."""
        seq = channel.next_seq
        channel.next_seq += 1
        channel.held[seq] = (message, cost)
        channel.weight += cost
        if data:
            if channel.credits is not None:
                channel.credits -= 1
            if type(message) in _WITH_QOS and (expires := message.qos.expires) is not None:  # type: ignore[union-attr]
                self._expiring(expires, hop, channel.name, seq, priority(message))
        elif type(message) is Advertise and channel.adverts.get(message.id) == WAITING:
            channel.adverts[message.id] = seq
        if channel.up:
            sent.append((hop, Carry(seq, message)))  # type: ignore[arg-type]

    def _wait(self, hop: str, channel: Channel, message: Message, cost: int, data: bool) -> None:
        """Into the backlog: data into its lane (after the last barrier), routing state last."""
        backlog = channel.backlog
        channel.waiting_weight += cost
        if not data:
            backlog.append((message, cost))
            return
        if not backlog or type(lanes := backlog[-1]) is not Lanes:
            lanes = Lanes()
            backlog.append(lanes)
        channel.tickets += 1
        level = priority(message)
        lanes.add(level, channel.tickets, message, cost)
        channel.waiting += 1
        if type(message) in _WITH_QOS and (expires := message.qos.expires) is not None:  # type: ignore[union-attr]
            self._expiring(expires, hop, channel.name, -channel.tickets, level)

    def _move(self, hop: str, channel: Channel, sent: Output) -> None:
        """What waits, as far as the window has room: the next of each lanes in turn (the
        highest, or one turn in FAIR_EVERY the oldest), each barrier when its turn comes."""
        backlog = channel.backlog
        while backlog:
            head = backlog[0]
            if isinstance(head, Lanes):
                if not head.lanes:  # (only lanes with something in them are kept)
                    backlog.popleft()
                    continue
                if not self._room(channel):
                    return
                oldest = not self.prioritised or channel.turns % FAIR_EVERY == FAIR_EVERY - 1
                channel.turns += 1
                message, cost = head.take(oldest)
                channel.waiting -= 1
                channel.waiting_weight -= cost
                self._hold(hop, channel, message, cost, True, sent)
            else:
                backlog.popleft()
                message, cost = head
                channel.waiting_weight -= cost
                self._hold(hop, channel, message, cost, False, sent)

    def _expiring(self, expires: float, hop: str, name: str, key: int, level: int) -> None:
        heapq.heappush(self.expiring, (expires, hop, name, key, level))
        if len(self.expiring) > self._reindex_at:
            self._index_expiring()

    def _overflowed(
        self, hop: str, channel: Channel, counter: str, message: Message, now: float, why: str = ""
    ) -> None:
        """What a channel could not hold (full, or ``why`` not): counted, and logged (the first for
        each peer, then once a minute with how many more)."""
        self.counters[counter] += 1
        unlogged = self.full_log.admit(hop, now)
        if unlogged is None:
            return
        more = f" ({unlogged} more not logged since the last)" if unlogged else ""
        kind = type(message).__name__
        if why:
            log.warning("a %s for %s is dropped: %s (%s)%s", kind, hop, why, counter, more)
            return
        done = "goes unheld (not sent again if lost)" if channel.up else "is dropped"
        log.warning(
            "the channel to %s is full (%d messages, about %d bytes held): a %s %s (%s)%s",
            hop,
            len(channel.held) + channel.waiting,
            channel.weight + channel.waiting_weight,
            kind,
            done,
            counter,
            more,
        )

    def status(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "held": sum(len(c.held) + c.waiting for c in self.channels.values()),
            "held_for_away": sum(len(c.held) + c.waiting for c in self.channels.values() if not c.up),
            "waiting": sum(c.waiting for c in self.channels.values()),
        }
