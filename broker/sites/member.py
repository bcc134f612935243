"""A broker of a replicated site: the process around a consensus ``Node`` and the site's state.

The brokers of a site keep one log (``broker.consensus``) and apply it to one router state
(``SiteState``), so that any of them can serve the site. One of them serves at a time: the
leader. It alone accepts clients and links to other sites; the others answer a hello with a
refusal that sends the peer on to the next broker of the site (``handshake.ELSEWHERE``). What the
leader's links read becomes an ``Input``, proposed to the log; each ``Ready`` is written and
fsync'd (through an ``Offload``: the loop goes on meanwhile, and what is proposed during the
write goes into the next one), then its messages are sent to the other members, then its
committed entries are applied, in order, on every member alike, and the leader sends its share of
their output. Nothing is said to a client or another site before it is committed.

A new leader serves once the no-op of its term is applied (it then holds everything the site
committed before it), and first proposes ``MemberDown`` for every member that still has hops
attached (the old leader's clients and site links: their sessions wait for them to come back,
now through this broker). A leader that stops leading closes every client and site link at once,
so their peers move to the new one. A frozen leader that wakes up steps down before it acts
(``Node`` checks its quorum first) and its old term fences every frame it still sends.

A hop's output goes only to the link whose ``LinkUp`` the site has applied (``bound``): a client
that reconnects to the same broker gets nothing on its new link meant for the old one.

Every ``COMPACT_EVERY`` applied entries a member snapshots its state (``SiteState.snapshot``) and
its log keeps only the entries after it (``Node.compact``, ``SiteLog.compact``), so a restart
restores the snapshot and replays a bounded tail. A leader compacts only once every other member
holds what it applied, unless its log has grown past ``COMPACT_FORCE`` entries: a member behind
the snapshot is sent the snapshot (``InstallSnapshot``), in ``Piece``s when it outgrows a frame,
written as the link drains (``broker.sites.pieces``): each member link puts the pieces it reads
back together, up to ``MAX_ASSEMBLED`` bytes.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from broker.clock import Clock
from broker.consensus import Config, ConsensusMessage, Entry, Node, NotLeader, SiteLog
from broker.durable.offload import Offload
from broker.errors import FrameTooLarge, ProtocolError
from broker.messages import (
    Append,
    AppendReply,
    Hello,
    InstallSnapshot,
    LinkDown,
    LinkUp,
    Message,
    Piece,
    Ping,
    Pong,
    Publish,
    Refuse,
    VoteReply,
    VoteRequest,
    WireMessage,
)
from broker.routing.router import unlogged
from broker.sites.inputs import Input, MemberDown, decode_input, encode_input
from broker.sites.pieces import Assembly, Outbox
from broker.sites.state import SiteState
from broker.transport.driver import RouterDriver
from broker.transport.handshake import ELSEWHERE, elsewhere
from broker.transport.link import Link
from broker.transport.uri import BrokerURI

__all__ = ["SiteConfig", "SiteDriver", "SiteMember"]

CONSENSUS = frozenset({VoteRequest, VoteReply, Append, AppendReply, InstallSnapshot})
COMPACT_EVERY = 10_000  # applied entries between two snapshots of a member's state
COMPACT_FORCE = 100_000  # entries a leader keeps for a member behind, at most
MAX_ASSEMBLED = 1 << 30  # bytes of pieces a member link puts back together into one message


@dataclass(frozen=True)
class SiteConfig:
    """A replicated site as one of its brokers sees it: the site's ``name`` (its brokers' router
    id, and how every peer knows them) and its ``members`` (every broker of the site, this one
    included). Times in seconds: a follower that hears no leader for ``election_timeout`` to
    twice it starts an election; a leader speaks at least every ``heartbeat``."""

    name: str
    members: tuple[BrokerURI, ...]
    election_timeout: float = 0.6
    heartbeat: float = 0.1
    batch: int = 64  # entries per Append: a frame must hold them

    def __post_init__(self) -> None:
        names = [m.id for m in self.members]
        if len(set(names)) != len(names):
            raise ValueError(f"site {self.name}: a broker is named twice in {names}")
        if self.name in names:
            raise ValueError(f"site {self.name} cannot be named as one of its brokers")

    def others(self, me: str) -> list[BrokerURI]:
        return [m for m in self.members if m.id != me]


class _Turns:
    """``Node``'s ``random`` for a member: where in ``[0, 1)`` its election timer falls (a follower
    that hears no leader waits the election timeout times one plus this). Each member has its own
    slot, by its turn after the leader it last heard in the order of the site's brokers' names
    (by its name's place while it knows none), and a draw in the slot's middle: the follower
    right after the leader starts an election at most a sixth of the timeout beyond it (for
    three) instead of up to a whole one, and two followers that last heard the leader at the same
    time start theirs at least a fifth apart, so they do not split the vote and both wait again.
    Only when elections start changes, never whether a vote is granted: the site is as safe."""

    def __init__(self, me: str, members: tuple[str, ...]) -> None:
        self.members = sorted(members)
        self.mine = self.members.index(me)
        self.leader: Callable[[], str | None] = lambda: None

    def __call__(self) -> float:
        leader = self.leader()
        first = self.members.index(leader) + 1 if leader in self.members else 0
        turn = (self.mine - first) % len(self.members)
        return (turn + 0.1 + 0.4 * random.random()) / len(self.members)


@dataclass
class _Binding:
    """The leader's links by hop, as the site's applied state has them (see the module)."""

    live: Mapping[str, Link]  # every link the process holds, by hop
    bound: dict[str, Link] = field(default_factory=dict)  # hop -> the link its applied LinkUp came by
    # (hop, channel) -> the links whose LinkUp we proposed and the site has not applied, oldest
    # first: a hop that links again before its first LinkUp is applied has one for each link
    pending: dict[tuple[str, str], deque[Link]] = field(default_factory=dict)


class SiteDriver(RouterDriver):
    """The router driver of a site's broker: an input is proposed to the site's log instead of
    handled at once (the member applies it once committed), and output goes to bound links."""

    member: SiteMember

    def feed(self, message: Message, hop: str) -> None:
        self.member.propose(message, hop)

    def applied(self) -> None:
        """An entry was applied: the router's index entries are merged once the site is quiet."""
        self._input_seen.set()


class SiteMember:
    def __init__(
        self,
        config: SiteConfig,
        me: str,
        driver: SiteDriver,
        live: Mapping[str, Link],
        directory: Path,
        counters: Counter[str],
        log: logging.LoggerAdapter[logging.Logger],
        clock: Clock,
        step_down: Callable[[str], None],
        serving: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.me = me
        self.driver = driver
        self.counters = counters
        self.log = log
        self.clock = clock
        self.step_down = step_down  # closes every client and site link, with a reason
        self.on_serving = serving  # this broker serves from now on: it may dial other sites at once
        self.links: dict[str, Link] = {}  # member -> its link
        self.directory = directory
        self.assembling: dict[Link, Assembly] = {}  # the pieces read so far of a large message
        self.outboxes: dict[Link, Outbox] = {}  # the large messages on their way, as pieces
        self.binding = _Binding(live)
        driver.links = self.binding.bound
        driver.member = self
        driver.name, driver.site = me, config.name
        self.state = SiteState(driver.router)
        self.disk = SiteLog(directory)
        recovered = self.disk.load()
        if recovered.snapshot is not None:
            self._restore(recovered.snapshot.data)
        members = tuple(m.id for m in config.members)
        # a snapshot sent while the member's link was down is sent again soon, not 5 s later
        resend = max(1.0, 4 * config.election_timeout)
        node_config = Config(me, members, config.election_timeout, config.heartbeat, config.batch, resend)
        turns = _Turns(me, members)
        self.node = Node(
            node_config,
            clock.monotonic(),
            turns,
            recovered.state,
            recovered.entries,
            snapshot=recovered.snapshot,
        )
        turns.leader = lambda: self.node.leader
        self.serving = False
        self.offload = Offload(clock=clock)
        self._wake = asyncio.Event()
        # non-persistent publications (not proposed), each after the last entry proposed before it
        self.unreplicated: deque[tuple[int, str, float, Publish]] = deque()

    # what the process asks --------------------------------------------------------------------

    def is_member(self, name: str) -> bool:
        return any(m.id == name for m in self.config.members)

    def answer(self, hello: Hello) -> Hello | str | None:
        """Our hello to a member (None if ``hello`` is not a member's), or why a client or another
        site may not connect here now: only the serving leader takes them."""
        if hello.kind == "broker" and self.is_member(hello.id):
            old = self.links.get(hello.id)
            if old is not None:  # it came back (a link to a dead host may linger): the new one wins
                old.close(f"member {hello.id} linked again")
            return Hello("broker", self.me, site=self.config.name)
        if self.serving:
            return None
        leader = self.node.leader  # named only while linked: one that died is still named until
        # its followers' election timers fire, and a peer sent there would find no one
        if leader != self.me and leader not in self.links:
            leader = None
        return elsewhere(self.me, self.config.name, leader)

    def status(self) -> dict[str, Any]:
        node = self.node
        return {
            "name": self.config.name,
            "member": self.me,
            "members": [m.id for m in self.config.members],
            "role": node.role.value,
            "serving": self.serving,
            "term": node.term,
            "leader": node.leader,
            "commit": node.commit,
            "applied": node.applied,
            "linked": sorted(self.links),
        }

    # inputs -------------------------------------------------------------------------------------

    def propose(self, message: Message, hop: str) -> None:
        """What a link of this broker read (or its LinkUp/LinkDown, or a Tick): proposed to the
        site's log if this broker serves, else dropped (its links are closing: their peers move
        to the leader, and say there what they took)."""
        if not self.serving:
            return
        if unlogged(message):
            self._unreplicated(message, hop, self.clock.time())
            return
        if type(message) is LinkUp:
            link = self.binding.live.get(hop)
            if link is not None:
                self.binding.pending.setdefault((hop, message.name), deque()).append(link)
        self._propose(Input(self.me, hop, self.clock.time(), message))

    def _unreplicated(self, message: Publish, hop: str, now: float) -> None:
        """A non-persistent publication is not proposed: the site's log, and so its state, must
        not have it (``router.unlogged``). This broker, the leader, routes it by the state it has
        applied, once it has applied every entry proposed before it, so that its output overtakes
        none of theirs; it is lost if the leader goes first."""
        after = self.node.log.last_index
        if self.node.applied >= after:
            self._route_unreplicated(message, hop, now)
        else:
            self.unreplicated.append((after, hop, now, message))

    def _route_unreplicated(self, message: Publish, hop: str, now: float) -> None:
        if not self.serving or self.state.attached.get(hop) != self.me:  # as ``SiteState.take``
            self.counters["dropped.nonpersistent"] += 1
            return
        output = self.state.router.handle(message, hop, now)
        if output and self.binding.bound:
            self.driver.send(self.state.mine(output, self.me), self.binding.bound)

    def _release_unreplicated(self, applied: int) -> None:
        """The non-persistent publications whose entries before them are applied up to ``applied``."""
        waiting = self.unreplicated
        while waiting and waiting[0][0] <= applied:
            _, hop, now, message = waiting.popleft()
            self._route_unreplicated(message, hop, now)

    def _propose(self, item: Input) -> None:
        try:
            self.node.propose(encode_input(item), self.clock.monotonic())
        except NotLeader:
            self.counters["site.not_leader"] += 1
        self._changed()

    # the member links ----------------------------------------------------------------------------

    async def serve_member(self, link: Link, name: str) -> None:
        """Carry consensus messages with member ``name`` until the link ends."""
        old = self.links.get(name)
        if old is not None:
            old.close(f"member {name} linked again")
            await old.wait_closed()
        link.name = name
        self.links[name] = link
        self.log.info("site %s: member %s linked", self.config.name, name)
        try:
            await link.read_all(lambda item: self._from_member(link, name, item))
        except ProtocolError as error:
            self.counters["bad_frames"] += 1
            self.log.warning("member %s broke framing: %s", name, error)
            await link.flush_and_close(str(error))
        except OSError as error:  # the file a large message is put together in: a full disk
            self.counters["site.pieces_unwritable"] += 1
            self.log.error("site %s: cannot keep pieces from %s: %s", self.config.name, name, error)
            await link.flush_and_close(f"cannot keep what you send: {error.strerror}")
        finally:
            await link.wait_closed()
            if (assembly := self.assembling.pop(link, None)) is not None:
                assembly.close()
                self.counters["site.pieces_dropped"] += assembly.dropped
            if (outbox := self.outboxes.pop(link, None)) is not None:
                outbox.close()
            if link.too_slow:
                self.counters["slow_consumers"] += 1
            if self.links.get(name) is link:
                del self.links[name]
                self.log.info("site %s: member %s unlinked: %s", self.config.name, name, link.closed)
                self._unlinked(name)

    def _unlinked(self, name: str) -> None:
        """Our link to member ``name`` ended (not replaced by a new one): a hint that it is gone
        (a broker killed -9 closes its links at once; ``Node.unlinked``). If it led us, our
        election comes forward, and the node is ticked when it is due; if we lead and no longer
        reach a majority, we step down at once."""
        now = self.clock.monotonic()
        due, followed = self.node.election_due, self.node.leader == name and not self.node.leads
        self.node.unlinked(name, self.node.term, now)
        self._changed()
        if self.node.election_due >= due:
            return
        soon = self.node.election_due - now
        asyncio.get_running_loop().call_later(soon, self._tick)
        if followed:
            self.counters["site.leader_unlinked"] += 1
            what = "site %s: leader %s unlinked: standing in %.0f ms"
            self.log.info(what, self.config.name, name, 1000 * soon)

    def _from_member(self, link: Link, name: str, item: object) -> None:
        if type(item) is Piece:
            if (assembly := self.assembling.get(link)) is None:
                assembly = self.assembling[link] = Assembly(self.directory, MAX_ASSEMBLED)
            item = assembly.take(item)  # ProtocolError for a piece out of place: the link closes
            if item is None:
                return
        if type(item) in CONSENSUS:
            try:
                self.node.handle(name, item, self.clock.monotonic())  # type: ignore[arg-type]
            except ValueError as error:
                self.counters["bad_messages"] += 1
                link.send(Refuse("", f"bad consensus message: {error}"))
            self._changed()
        elif type(item) is Ping:
            link.send(Pong())
        elif type(item) is not Pong:
            self.counters["bad_messages"] += 1
            link.send(Refuse("", f"a {type(item).__name__} is not for a member link"))

    # the log --------------------------------------------------------------------------------------

    async def ticks(self, dead_after: float) -> None:
        """Time for the node (heartbeats, elections, a leader that lost its quorum stepping down)
        and for the member links: pinged while quiet, closed when silent for ``dead_after`` (a
        member whose host vanished would otherwise hold its link, and its place, for ever)."""
        while True:
            step = self.config.heartbeat / 2
            if not self.node.leads:  # an election is due when it is, not up to a step later
                step = min(step, max(0.001, self.node.election_due - self.clock.monotonic()))
            await asyncio.sleep(step)
            now = self._tick()
            for link in list(self.links.values()):
                if now - link.last_received > dead_after:
                    self.counters["heartbeat_timeouts"] += 1
                    link.close(f"no traffic for {dead_after:g} s", abort=True)
                elif now - link.last_sent >= self.config.heartbeat:
                    link.send(Ping())

    def _tick(self) -> float:
        """Time for the node now (when that is)."""
        now = self.clock.monotonic()
        self.node.tick(now)
        self._changed()
        return now

    async def run(self) -> None:
        """Carry out each ``Ready`` in order: write and fsync, send, apply, advance."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.node.has_ready():
                ready = self.node.ready()
                if ready.hard_state is not None or ready.entries or ready.snapshot is not None:
                    write = partial(self.disk.write, ready.hard_state, ready.entries, ready.snapshot)
                    await self.offload.run(write)
                for member, message in ready.messages:
                    self._send(member, message)
                if ready.snapshot is not None:  # the leader's state: ours was behind it
                    self._restore(ready.snapshot.data)
                for entry in ready.committed:
                    self._apply(entry)
                    self._release_unreplicated(entry.index)
                self.node.advance(self.clock.monotonic())
                self._roles()
                await self._compact()

    def _send(self, member: str, message: ConsensusMessage) -> None:
        """``message`` to ``member``: at once if it fits a frame, else streamed in pieces. A
        snapshot always goes through the link's outbox, which keeps one on its way at a time
        (and is never encoded whole: see ``broker.sites.pieces``)."""
        link = self.links.get(member)
        if link is None:
            return
        if type(message) is not InstallSnapshot:
            try:
                link.send(message)
                return
            except FrameTooLarge:  # a batch of entries may outgrow a frame too: streamed as well
                pass
            except (ProtocolError, ValueError) as error:  # one that cannot be encoded
                self._unsendable(member, message, error)
                return
        if (outbox := self.outboxes.get(link)) is None:
            wanted = partial(self._wanted, member)
            outbox = self.outboxes[link] = Outbox(link, wanted, partial(self._unsendable, member))
        outbox.send(message)

    def _wanted(self, member: str, message: WireMessage) -> bool:
        """Whether the message streaming to ``member`` is still worth its next piece; a
        snapshot's resend waits from now (``Node.snapshot_sending``)."""
        if type(message) is not InstallSnapshot:
            return True
        now = self.clock.monotonic()
        wanted = self.node.snapshot_sending(member, message.term, message.last_index, now)
        self._changed()
        return wanted

    def _unsendable(self, member: str, message: WireMessage, error: Exception) -> None:
        self.counters["site.unsendable"] += 1
        self.log.error(
            "site %s: cannot send %s to %s: %s", self.config.name, type(message).__name__, member, error
        )

    def _restore(self, data: bytes) -> None:
        """The site's state from a snapshot (ours at start, or the leader's): the router is a new
        object, configured as this process was started, and is the driver's from now on."""
        before = self.state.router
        self.state.restore(data)
        self.state.router.configure_like(before, f"site {self.config.name}'s log")
        self.driver.router = self.state.router
        bound = self.binding.bound
        for hop in [h for h in bound if self.state.attached.get(h) != self.me]:
            del bound[hop]

    async def _compact(self) -> None:
        """A snapshot of the state for the log to stand for what was applied (see the module)."""
        node = self.node
        held = 0 if node.snapshot is None else node.snapshot.index
        if node.applied - held < COMPACT_EVERY:
            return
        behind = any(f.match < node.applied for f in node.followers.values())
        if node.leads and behind and node.log.last_index - held < COMPACT_FORCE:
            return  # a member still needs entries we would drop
        snapshot = node.compact(node.applied, self.state.snapshot())
        await self.offload.run(partial(self.disk.compact, snapshot))
        self.counters["site.compactions"] += 1

    def close(self) -> None:
        self.serving = False
        self.disk.close()

    def _changed(self) -> None:
        self._roles()
        if self.node.has_ready():
            self._wake.set()

    def _roles(self) -> None:
        if self.serving and not self.node.leads:
            self.serving = False
            self.counters["site.stepped_down"] += 1
            term = self.node.term
            self.log.warning("site %s: %s no longer leads (term %d)", self.config.name, self.me, term)
            self.binding.bound.clear()
            self.binding.pending.clear()
            self.counters["dropped.nonpersistent"] += len(self.unreplicated)
            self.unreplicated.clear()
            self.step_down(f"{ELSEWHERE}{self.me} no longer serves site {self.config.name}")

    def _apply(self, entry: Entry) -> None:
        if not entry.data:
            if self.node.leads and entry.term == self.node.term and not self.serving:
                self._serve()
            return
        try:
            item = decode_input(entry.data)
        except ValueError:
            self.counters["site.bad_entries"] += 1
            return
        output = self.state.take(item)
        self.driver.applied()
        kind = type(item.message)
        if item.member == self.me and kind is LinkUp:
            link = self._proposed(item.hop, item.message.name)  # type: ignore[union-attr]
            if link is not None and self.state.attached.get(item.hop) == self.me:
                self.binding.bound[item.hop] = link
        elif kind is LinkDown or kind is MemberDown or kind is LinkUp:
            bound = self.binding.bound
            for hop in [h for h in bound if self.state.attached.get(h) != self.me]:
                del bound[hop]
        if output and self.binding.bound:
            self.driver.send(self.state.mine(output, self.me), self.binding.bound)

    def _proposed(self, hop: str, channel: str) -> Link | None:
        """The link whose LinkUp (for ``hop`` on ``channel``) is the one applied now: our LinkUps
        are applied in the order we proposed them, each for its own link (a link that came and
        went before its LinkUp was applied must not take the place of the next one)."""
        links = self.binding.pending.get((hop, channel))
        if not links:
            return None
        link = links.popleft()
        if not links:
            del self.binding.pending[(hop, channel)]
        return link

    def _serve(self) -> None:
        """The no-op of our term is applied: we hold all the site committed. The hops attached to
        any member are gone (ours too: this process has no link yet); then we take links."""
        for member in sorted(set(self.state.attached.values())):
            self._propose(Input(self.me, "", self.clock.time(), MemberDown(member)))
        self.serving = True
        self.on_serving()
        self.counters["site.led"] += 1
        self.log.warning("site %s: %s leads (term %d)", self.config.name, self.me, self.node.term)
