"""A site's brokers keeping their log in memory, under faults, on a virtual clock: deterministic.

What FoundationDB and TigerBeetle do for theirs, in miniature: one seed decides every latency,
loss, duplicate, crash, freeze and partition, so a run that breaks the log is replayed exactly.
Each broker's disk is a record that survives its crashes; its applied state does not (a
restarted broker applies the committed log again, as a broker restored from a snapshot replays
the entries after it). Every step is checked against Raft's safety properties, and ``Violation``
names the first one broken:

- at most one leader per term;
- every broker applies the same entry at the same index, in index order, none skipped;
- an entry acknowledged to its proposer (applied by it) is never lost: after the faults stop
  every broker applies it at its index.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from broker.consensus import Config, ConsensusMessage, Entry, HardState, Node, NotLeader

__all__ = ["Disk", "SiteSim", "Storage", "Violation"]

TICK = 0.01  # seconds between two ticks of a broker


class Violation(AssertionError):
    """A safety property of the site's log does not hold; the message says which, and when."""


@dataclass
class Disk:
    """What a broker's crash leaves: its term, its vote, its entries (``SiteLog``'s interface:
    ``recover`` gives them back after a restart)."""

    state: HardState = field(default_factory=HardState)
    entries: list[Entry] = field(default_factory=list)

    def write(self, state: HardState | None, entries: list[Entry]) -> None:
        if state is not None:
            self.state = state
        if entries:
            del self.entries[entries[0].index - 1 :]
            self.entries.extend(entries)

    def recover(self) -> tuple[HardState, list[Entry]]:
        return self.state, list(self.entries)


class Machine(Protocol):
    """What a site's members apply its committed entries to (``broker.sites.SiteState``): the
    same entries in the same order must give the same output on every member."""

    def apply(self, entry: bytes) -> object: ...


class Storage(Protocol):
    """A broker's disk as the site uses it: ``Disk``, or ``broker.consensus.SiteLog``."""

    def write(self, state: HardState | None, entries: list[Entry]) -> None: ...

    def recover(self) -> tuple[HardState, list[Entry]]: ...


@dataclass
class _Broker:
    name: str
    disk: Storage
    node: Node | None = None  # None while crashed
    frozen_until: float = 0.0
    applied: int = 0  # in this incarnation
    machine: Machine | None = None  # what it applies the entries to, in this incarnation
    inbox: list[tuple[str, ConsensusMessage]] = field(default_factory=list)  # held while frozen


class SiteSim:
    """``members`` brokers of one site. ``loss``, ``duplicates``: the chance a message is lost or
    delivered twice; ``latency``: the longest a message takes (each takes a random time up to
    it, so messages between two brokers overtake one another, as they cannot on one TCP link:
    the harder case). ``sudden``: the chance a broker is killed right after it has written and
    said something, and restarted a moment later (FoundationDB's "buggify": the crash lands
    where the protocol is most fragile, between a promise and what follows it). ``disks``: each
    broker's disk by name (in memory by default; a test gives files, read again at each
    restart). ``machines``: a fresh state machine for each member at each (re)start, to which it
    applies the committed entries (a restarted member applies the log again from its start);
    every member's output for an index must be the output the first one gave."""

    def __init__(
        self,
        members: int = 3,
        seed: int = 0,
        loss: float = 0.0,
        duplicates: float = 0.0,
        latency: float = 0.005,
        election_timeout: float = 0.3,
        heartbeat: float = 0.05,
        sudden: float = 0.0,
        disks: Callable[[str], Storage] = lambda _: Disk(),
        machines: Callable[[], Machine] | None = None,
    ) -> None:
        self.random = random.Random(seed)
        self.now = 0.0
        self.loss, self.duplicates, self.latency, self.sudden = loss, duplicates, latency, sudden
        self.machines = machines
        self.outputs: dict[int, object] = {}  # index -> what applying it gave (with ``machines``)
        names = tuple(f"b{i}" for i in range(1, members + 1))
        self.configs = {n: Config(n, names, election_timeout, heartbeat) for n in names}
        self.brokers = {n: _Broker(n, disks(n)) for n in names}
        self.cut: set[frozenset[str]] = set()  # pairs that cannot reach one another
        self.events: list[tuple[float, int, str, Any]] = []
        self._order = 0
        self.leaders: dict[int, str] = {}  # term -> its leader, once seen
        self.applied: dict[int, Entry] = {}  # index -> the entry every broker applies there
        self.acknowledged: dict[int, bytes] = {}  # index -> what its proposer was told is in
        self.proposed: dict[tuple[str, int], bytes] = {}  # (leader, index) -> data, until applied there
        for name in names:
            self.restart(name)
            self._at(self.now + self.random.random() * TICK, "tick", name)

    # -- faults ---------------------------------------------------------------------------------

    def crash(self, name: str) -> None:
        """Killed -9: what it had not written is gone, its disk stays."""
        broker = self.brokers[name]
        broker.node, broker.inbox, broker.frozen_until = None, [], 0.0

    def restart(self, name: str) -> None:
        broker = self.brokers[name]
        state, entries = broker.disk.recover()
        broker.node = Node(self.configs[name], self.now, self.random.random, state, entries)
        broker.applied = 0
        broker.machine = self.machines() if self.machines is not None else None

    def freeze(self, name: str, seconds: float) -> None:
        """Stopped (SIGSTOP, a long GC pause): it hears and says nothing until it wakes, then
        takes what arrived meanwhile."""
        self.brokers[name].frozen_until = self.now + seconds

    def partition(self, *groups: set[str]) -> None:
        """Brokers reach only those of their own group."""
        self.cut = {
            frozenset((a, b))
            for a in self.brokers
            for b in self.brokers
            if a < b and not any(a in g and b in g for g in groups)
        }

    def heal(self) -> None:
        self.cut = set()

    # -- running --------------------------------------------------------------------------------

    def leader(self) -> str | None:
        """The broker that leads in the highest term, if it is up and believes it."""
        live = [b for b in self.brokers.values() if b.node is not None and b.node.leads]
        return max(live, key=lambda b: b.node.term if b.node else 0).name if live else None

    def propose(self, data: bytes, at: str | None = None) -> int | None:
        """``data`` proposed at ``at`` (the leader by default): its index, None if refused."""
        name = at or self.leader()
        broker = self.brokers.get(name or "")
        if broker is None or broker.node is None or self.now < broker.frozen_until:
            return None
        try:
            entry = broker.node.propose(data, self.now)
        except NotLeader:
            self._carry_out(broker)
            return None
        self.proposed[broker.name, entry.index] = data
        self._carry_out(broker)
        return entry.index

    def run(self, seconds: float) -> None:
        end = self.now + seconds
        while self.events and self.events[0][0] <= end:
            when, _, kind, payload = heapq.heappop(self.events)
            self.now = when
            if kind == "tick":
                self._tick(payload)
            elif kind == "restart":
                if self.brokers[payload].node is None:
                    self.restart(payload)
            else:
                self._deliver(*payload)
        self.now = end

    def chaos(
        self, seconds: float, proposals_per_second: float = 50.0, make: Callable[[int], bytes] | None = None
    ) -> None:
        """Random faults and proposals for ``seconds``: each step crashes, restarts, freezes or
        partitions someone now and then, and proposes at whoever leads (``make(n)``: the entry
        of the n-th proposal the site takes; one refused is offered again; by default a random
        text)."""
        step, count, pending = 0.05, 0, b""
        for _ in range(int(seconds / step)):
            roll = self.random.random()
            names = sorted(self.brokers)
            victim = self.random.choice(names)
            if roll < 0.02:
                self.crash(victim)
            elif roll < 0.06 and self.brokers[victim].node is None:
                self.restart(victim)
            elif roll < 0.08:
                self.freeze(victim, self.random.uniform(0.1, 1.5))
            elif roll < 0.10:
                self.partition({victim}, set(names) - {victim})
            elif roll < 0.13:
                self.heal()
            for _ in range(self.random.randrange(int(proposals_per_second * step * 2) + 1)):
                data = pending or (
                    make(count + 1) if make else f"{self.random.random():.6f}-{count + 1}".encode()
                )
                taken = self.propose(data) is not None
                count, pending = (count + 1, b"") if taken else (count, data)  # refused: offered again
            self.run(step)

    def settle(self, seconds: float = 5.0) -> None:
        """Faults over: everyone restarted and reachable, time enough to agree."""
        self.heal()
        self.sudden = 0.0
        for name, broker in self.brokers.items():
            broker.frozen_until = 0.0
            if broker.node is None:
                self.restart(name)
        self.run(seconds)
        self.propose(b"settled")  # a new leader commits its no-op; this shows the log moves
        self.run(seconds)

    def check_converged(self) -> None:
        """After ``settle``: one leader, every broker applied the same log, every acknowledged
        entry in it."""
        last = max(self.applied, default=0)
        for broker in self.brokers.values():
            if broker.applied != last:
                raise Violation(f"{broker.name} applied up to {broker.applied}, the site up to {last}")
        for index, data in self.acknowledged.items():
            if self.applied[index].data != data:
                raise Violation(f"acknowledged entry {index} was lost")
        if self.leader() is None:
            raise Violation("no leader after the faults stopped")

    # -- inside ---------------------------------------------------------------------------------

    def _at(self, when: float, kind: str, payload: object) -> None:
        self._order += 1
        heapq.heappush(self.events, (when, self._order, kind, payload))

    def _tick(self, name: str) -> None:
        self._at(self.now + TICK, "tick", name)
        broker = self.brokers[name]
        if broker.node is None or self.now < broker.frozen_until:
            return
        for sender, message in broker.inbox:  # what arrived while it was frozen, in order
            broker.node.handle(sender, message, self.now)
        broker.inbox = []
        broker.node.tick(self.now)
        self._carry_out(broker)

    def _deliver(self, sender: str, target: str, message: ConsensusMessage) -> None:
        broker = self.brokers[target]
        if broker.node is None:
            return
        if self.now < broker.frozen_until:
            broker.inbox.append((sender, message))
            return
        broker.node.handle(sender, message, self.now)
        self._carry_out(broker)

    def _carry_out(self, broker: _Broker) -> None:
        """``Ready`` as the adapter carries it out: write, send, apply, advance; again while the
        advance decided more (a leader's commit, told to the followers at once)."""
        node = broker.node
        assert node is not None
        while broker.node is node and node.has_ready():
            self._carry_out_once(broker, node)

    def _carry_out_once(self, broker: _Broker, node: Node) -> None:
        ready = node.ready()
        broker.disk.write(ready.hard_state, ready.entries)
        if node.leads:
            known = self.leaders.setdefault(node.term, broker.name)
            if known != broker.name:
                raise Violation(
                    f"two leaders in term {node.term}: {known} and {broker.name} at {self.now:.3f}"
                )
        for target, message in ready.messages:
            self._send(broker.name, target, message)
        for entry in ready.committed:
            self._apply(broker, entry)
        node.advance(self.now)
        if ready.messages and self.random.random() < self.sudden:
            self.crash(broker.name)
            self._at(self.now + self.random.random() * self.latency * 2, "restart", broker.name)

    def _send(self, sender: str, target: str, message: ConsensusMessage) -> None:
        if frozenset((sender, target)) in self.cut or self.random.random() < self.loss:
            return
        copies = 2 if self.random.random() < self.duplicates else 1
        for _ in range(copies):
            self._at(self.now + self.random.random() * self.latency, "deliver", (sender, target, message))

    def _apply(self, broker: _Broker, entry: Entry) -> None:
        if entry.index != broker.applied + 1:
            raise Violation(f"{broker.name} applied entry {entry.index} after {broker.applied}")
        broker.applied = entry.index
        known = self.applied.setdefault(entry.index, entry)
        if known != entry:
            raise Violation(f"{broker.name} applied {entry} where another applied {known}")
        if broker.machine is not None:
            output = broker.machine.apply(entry.data)
            if self.outputs.setdefault(entry.index, output) != output:
                raise Violation(f"{broker.name} computed another output for entry {entry.index}")
        data = self.proposed.pop((broker.name, entry.index), None)
        if data is not None and data == entry.data:
            self.acknowledged[entry.index] = data
