"""A site's brokers keeping their log in memory, under faults, on a virtual clock: deterministic.

What FoundationDB and TigerBeetle do for theirs, in miniature: one seed decides every latency,
loss, duplicate, crash, freeze and partition, so a run that breaks the log is replayed exactly.
A broker killed or cut off closes its links, and the brokers at the other end are told
(``Node.unlinked``, a hint that the leader, or a follower, is gone); so are the two ends of a
link that merely blipped (a spurious hint): safety must not depend on it.
Each broker's disk is a record that survives its crashes; its applied state does not (a
restarted broker restores its state machine from its snapshot, if its log was compacted, and
applies the committed entries after it again). With ``compact_every``, each broker compacts its
log now and then (on average every that many entries applied, at seeded random points), so a
broker that was down or cut off for long is caught up by the leader's snapshot. Every step is
checked against Raft's safety properties, and ``Violation`` names the first one broken:

- at most one leader per term;
- every broker applies the same entry at the same index, in index order, none skipped but
  those a snapshot stands for, and computes the same output of it;
- a snapshot installed is one a broker took at its index (a leader's own, or one it installed),
  and goes beyond what the installing broker applied;
- an entry acknowledged to its proposer (applied by it) is never lost: after the faults stop
  every broker applies it at its index.

``SiteSim.trace`` records every fault, message and entry applied, so two runs can be compared
(``digest``); ``campaign`` and ``play`` are one seed of the fault campaign the tests run by the
thousand, and ``python -m broker.sim.site --seed N [--members M] [--compact-every K] [--trace]``
replays one.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from broker.consensus import (
    Config,
    ConsensusMessage,
    Entry,
    HardState,
    InstallSnapshot,
    Node,
    NotLeader,
    Recovered,
    Role,
    Snapshot,
)

__all__ = [
    "Chain",
    "Disk",
    "Machine",
    "SiteSim",
    "Storage",
    "Violation",
    "campaign",
    "play",
    "replay_command",
]

TICK = 0.01  # seconds between two ticks of a broker


class Violation(AssertionError):
    """A safety property of the site's log does not hold; the message says which, and when."""


@dataclass
class Disk:
    """What a broker's crash leaves: its term, its vote, its snapshot, its entries after it
    (``SiteLog``'s interface: ``load`` gives them back after a restart)."""

    state: HardState = field(default_factory=HardState)
    entries: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None

    def write(self, state: HardState | None, entries: list[Entry], snapshot: Snapshot | None = None) -> None:
        if state is not None:
            self.state = state
        if snapshot is not None:
            self.snapshot, self.entries = snapshot, []
        if entries:
            del self.entries[entries[0].index - self._offset - 1 :]
            self.entries.extend(entries)

    def compact(self, snapshot: Snapshot) -> None:
        if snapshot.index > self._offset:
            self.entries = self.entries[snapshot.index - self._offset :]
            self.snapshot = snapshot

    def load(self) -> Recovered:
        return Recovered(self.state, self.snapshot, list(self.entries))

    def recover(self) -> tuple[HardState, list[Entry]]:
        """As ``SiteLog.recover``: for a log never compacted."""
        if self.snapshot is not None:
            raise ValueError("the log is compacted: load() gives its snapshot too")
        return self.state, list(self.entries)

    @property
    def _offset(self) -> int:
        return self.snapshot.index if self.snapshot is not None else 0


class Machine(Protocol):
    """What a site's members apply its committed entries to (``broker.sites.SiteState`` and its
    router's snapshot: ``tests/sites``' ``Replica``): the same entries in the same order must
    give the same output on every member. ``snapshot``: its whole state, as bytes; ``restore``:
    that state again, in a fresh machine."""

    def apply(self, entry: bytes) -> object: ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...


class Chain:
    """The state machine a site applies by default: a hash chain of the entries applied, so any
    entry applied out of place, or a snapshot restored wrong, shows in every output after it."""

    def __init__(self) -> None:
        self.digest = b""

    def apply(self, entry: bytes) -> object:
        self.digest = hashlib.sha256(self.digest + entry).digest()
        return self.digest

    def snapshot(self) -> bytes:
        return self.digest

    def restore(self, data: bytes) -> None:
        self.digest = data


class Storage(Protocol):
    """A broker's disk as the site uses it: ``Disk``, or ``broker.consensus.SiteLog``."""

    def write(
        self, state: HardState | None, entries: list[Entry], snapshot: Snapshot | None = None
    ) -> None: ...

    def compact(self, snapshot: Snapshot) -> None: ...

    def load(self) -> Recovered: ...


@dataclass(frozen=True, slots=True)
class _Unlinked:
    """What a broker's adapter tells its node when its link to a member closes: the term it
    was in then (``Node.unlinked``)."""

    term: int


@dataclass
class _Broker:
    name: str
    disk: Storage
    node: Node | None = None  # None while crashed
    frozen_until: float = 0.0
    applied: int = 0  # in this incarnation
    machine: Machine | None = None  # what it applies the entries to, in this incarnation
    compact_at: int = 0  # it compacts its log once it applied this far (with ``compact_every``)
    installed: int = 0  # leaders' snapshots it installed, over its incarnations
    inbox: list[tuple[str, ConsensusMessage | _Unlinked]] = field(default_factory=list)  # held while frozen


class SiteSim:
    """``members`` brokers of one site. ``loss``, ``duplicates``: the chance a message is lost or
    delivered twice; ``latency``: the longest a message takes (each takes a random time up to
    it, so messages between two brokers overtake one another, as they cannot on one TCP link:
    the harder case). ``sudden``: the chance a broker is killed right after it has written and
    said something, and restarted a moment later (FoundationDB's "buggify": the crash lands
    where the protocol is most fragile, between a promise and what follows it). ``disks``: each
    broker's disk by name (in memory by default; a test gives files, read again at each
    restart). ``machines``: a fresh state machine for each member at each (re)start, to which it
    applies the committed entries (a restarted member restores its snapshot and applies the log
    after it again); every member's output for an index must be the output the first one gave
    (by default a ``Chain``). ``compact_every``: each member compacts its log after applying,
    on average, that many entries (0: never)."""

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
        compact_every: int = 0,
    ) -> None:
        self.random = random.Random(seed)
        self.now = 0.0
        self.loss, self.duplicates, self.latency, self.sudden = loss, duplicates, latency, sudden
        self.machines = machines or Chain
        self.compact_every = compact_every
        self.outputs: dict[int, object] = {}  # index -> what applying it gave
        self.snapshots: dict[int, set[bytes]] = {}  # index -> the state machine's snapshots taken there
        self.compactions = 0
        self.snapshots_sent = 0  # InstallSnapshot messages said
        names = tuple(f"b{i}" for i in range(1, members + 1))
        # a snapshot lost (or its answer) is sent again after a few election timeouts, not 5 s
        self.configs = {
            n: Config(n, names, election_timeout, heartbeat, snapshot_timeout=4 * election_timeout)
            for n in names
        }
        self.brokers = {n: _Broker(n, disks(n)) for n in names}
        self.cut: set[frozenset[str]] = set()  # pairs that cannot reach one another
        self.events: list[tuple[float, int, str, Any]] = []
        self._order = 0
        self.leaders: dict[int, str] = {}  # term -> its leader, once seen
        self.applied: dict[int, Entry] = {}  # index -> the entry every broker applies there
        self.acknowledged: dict[int, bytes] = {}  # index -> what its proposer was told is in
        self.proposed: dict[tuple[str, int], bytes] = {}  # (leader, index) -> data, until applied there
        # what happened, in order: every fault, proposal taken, message sent, lost or delivered,
        # entry applied, log compacted and snapshot installed (ticks are not: what they decide
        # shows in what is sent); the seed decides it all, so a seed replays exactly when this
        # does (``digest``)
        self.trace: list[tuple[float, str, tuple[object, ...]]] = []
        for name in names:
            self.restart(name)
            self._at(self.now + self.random.random() * TICK, "tick", name)

    # -- faults ---------------------------------------------------------------------------------

    def crash(self, name: str) -> None:
        """Killed -9: what it had not written is gone, its disk stays; its links close."""
        broker = self.brokers[name]
        broker.node, broker.inbox, broker.frozen_until = None, [], 0.0
        self._note("crash", name)
        for other in sorted(self.brokers):
            if other != name:
                self._unlink(other, name)

    def restart(self, name: str) -> None:
        broker = self.brokers[name]
        self._note("restart", name)
        found = broker.disk.load()
        config = self.configs[name]
        broker.node = Node(
            config, self.now, self.random.random, found.state, found.entries, snapshot=found.snapshot
        )
        broker.machine = self.machines()
        broker.applied = 0
        if found.snapshot is not None:
            broker.machine.restore(found.snapshot.data)
            broker.applied = found.snapshot.index
        self._schedule_compaction(broker)

    def freeze(self, name: str, seconds: float) -> None:
        """Stopped (SIGSTOP, a long GC pause): it hears and says nothing until it wakes, then
        takes what arrived meanwhile."""
        self.brokers[name].frozen_until = self.now + seconds
        self._note("freeze", name, seconds)

    def partition(self, *groups: set[str]) -> None:
        """Brokers reach only those of their own group; the links cut close (as a silent link
        is closed)."""
        cut = {
            frozenset((a, b))
            for a in self.brokers
            for b in self.brokers
            if a < b and not any(a in g and b in g for g in groups)
        }
        fresh, self.cut = sorted(tuple(sorted(pair)) for pair in cut - self.cut), cut
        self._note("partition", *(tuple(sorted(g)) for g in groups))
        for a, b in fresh:
            self._unlink(a, b)
            self._unlink(b, a)

    def blip(self, name: str) -> None:
        """``name``'s link to the leader it follows closes and comes back at once: a spurious
        hint at both ends (nothing is lost that the network would not lose anyway)."""
        node = self.brokers[name].node
        if node is not None and node.leader is not None and node.leader != name:
            self._note("blip", name, node.leader)
            self._unlink(name, node.leader)
            self._unlink(node.leader, name)

    def heal(self) -> None:
        self.cut = set()
        self._note("heal")

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
        self._note("propose", broker.name, entry.index, data)
        self._carry_out(broker)
        return entry.index

    def run(self, seconds: float) -> None:
        end, events, pop = self.now + seconds, self.events, heapq.heappop
        while events and events[0][0] <= end:
            when, _, kind, payload = pop(events)
            self.now = when
            if kind == "tick":
                self._tick(payload)
            elif kind == "restart":
                if self.brokers[payload].node is None:
                    self.restart(payload)
            elif kind == "unlinked":
                self._unlinked(*payload)
            else:
                self._deliver(*payload)
        self.now = end

    def chaos(
        self, seconds: float, proposals_per_second: float = 50.0, make: Callable[[int], bytes] | None = None
    ) -> None:
        """Random faults and proposals for ``seconds``: each step crashes, restarts, freezes,
        partitions someone or blips its link to the leader now and then, and proposes at
        whoever leads (``make(n)``: the entry of the n-th proposal the site takes; one refused
        is offered again; by default a random text)."""
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
            elif roll < 0.16:
                self.blip(victim)
            for _ in range(self.random.randrange(int(proposals_per_second * step * 2) + 1)):
                data = pending or (
                    make(count + 1) if make else f"{self.random.random():.6f}-{count + 1}".encode()
                )
                taken = self.propose(data) is not None
                count, pending = (count + 1, b"") if taken else (count, data)  # refused: offered again
            self.run(step)

    def settle(self, seconds: float = 5.0) -> None:
        """Faults over: everyone restarted and reachable, no message lost or duplicated any more
        (only reordered, as ever), time enough to agree; so ``check_converged`` may be strict:
        a site still losing messages could be without a leader at the instant of the check,
        and elect one a second later."""
        self.heal()
        self.sudden = self.loss = self.duplicates = 0.0
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

    def digest(self) -> str:
        """A hash of the whole ``trace``: the same for two runs of one seed (in any process),
        another for another seed."""
        hasher = hashlib.sha256()
        for when, kind, what in self.trace:
            hasher.update(f"{when!r} {kind} {what!r}\n".encode())
        return hasher.hexdigest()

    # -- inside ---------------------------------------------------------------------------------

    def _note(self, kind: str, *what: object) -> None:
        self.trace.append((self.now, kind, what))

    def _at(self, when: float, kind: str, payload: object) -> None:
        self._order += 1
        heapq.heappush(self.events, (when, self._order, kind, payload))

    def _tick(self, name: str) -> None:
        self._order += 1  # ``_at``, inline: most events are ticks
        heapq.heappush(self.events, (self.now + TICK, self._order, "tick", name))
        broker = self.brokers[name]
        node = broker.node
        if node is None or self.now < broker.frozen_until:
            return
        if not broker.inbox and node.role is not Role.LEADER and self.now < node.election_due:
            # ``Node.tick`` does nothing here (a follower or candidate only stands once its
            # election is due, only a leader beats or steps down), and nothing was left ready
            # (every entry point is carried out at once): most ticks, spared, the run unchanged
            return
        for sender, item in broker.inbox:  # what arrived while it was frozen, in order
            if type(item) is _Unlinked:
                node.unlinked(sender, item.term, self.now)
            else:
                node.handle(sender, item, self.now)  # type: ignore[arg-type]
        broker.inbox = []
        node.tick(self.now)
        self._carry_out(broker)

    def _deliver(self, sender: str, target: str, message: ConsensusMessage) -> None:
        self._note("deliver", sender, target, message)
        broker = self.brokers[target]
        if broker.node is None:
            return
        if self.now < broker.frozen_until:
            broker.inbox.append((sender, message))
            return
        broker.node.handle(sender, message, self.now)
        self._carry_out(broker)

    def _unlink(self, target: str, peer: str) -> None:
        """``target``'s link to ``peer`` closed: its node hears of it a moment later, with the
        term it was in now."""
        node = self.brokers[target].node
        if node is not None:
            self._at(self.now + self.random.random() * self.latency, "unlinked", (target, peer, node.term))

    def _unlinked(self, target: str, peer: str, term: int) -> None:
        self._note("unlinked", target, peer, term)
        broker = self.brokers[target]
        if broker.node is None:
            return
        if self.now < broker.frozen_until:
            broker.inbox.append((peer, _Unlinked(term)))
            return
        broker.node.unlinked(peer, term, self.now)
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
        broker.disk.write(ready.hard_state, ready.entries, ready.snapshot)
        if node.leads:
            known = self.leaders.setdefault(node.term, broker.name)
            if known != broker.name:
                raise Violation(
                    f"two leaders in term {node.term}: {known} and {broker.name} at {self.now:.3f}"
                )
        for target, message in ready.messages:
            self._send(broker.name, target, message)
        if ready.snapshot is not None:
            self._install(broker, ready.snapshot)
        for entry in ready.committed:
            self._apply(broker, entry)
        node.advance(self.now)
        if self.compact_every and broker.applied >= broker.compact_at:
            self._compact(broker, node)
        if ready.messages and self.random.random() < self.sudden:
            self.crash(broker.name)
            self._at(self.now + self.random.random() * self.latency * 2, "restart", broker.name)

    def _schedule_compaction(self, broker: _Broker) -> None:
        if self.compact_every:
            broker.compact_at = broker.applied + self.random.randint(1, 2 * self.compact_every)

    def _compact(self, broker: _Broker, node: Node) -> None:
        """The broker's state machine, applied up to where it is, becomes its log's snapshot."""
        assert broker.machine is not None
        data = broker.machine.snapshot()
        self.snapshots.setdefault(broker.applied, set()).add(data)
        snapshot = node.compact(broker.applied, data)
        self._note("compact", broker.name, broker.applied)
        broker.disk.compact(snapshot)
        self.compactions += 1
        self._schedule_compaction(broker)

    def _install(self, broker: _Broker, snapshot: Snapshot) -> None:
        """A leader's snapshot, on disk: the broker's state machine is restored from it."""
        if snapshot.index <= broker.applied:
            raise Violation(
                f"{broker.name} installed snapshot {snapshot.index} after applying {broker.applied}"
            )
        if snapshot.data not in self.snapshots.get(snapshot.index, ()):
            raise Violation(
                f"{broker.name} installed a snapshot of entry {snapshot.index} that no one took there"
            )
        broker.machine = self.machines()
        broker.machine.restore(snapshot.data)
        broker.applied = snapshot.index
        broker.installed += 1
        self._note("install", broker.name, snapshot.index)
        self._schedule_compaction(broker)

    def _send(self, sender: str, target: str, message: ConsensusMessage) -> None:
        if type(message) is InstallSnapshot:
            self.snapshots_sent += 1
        cut = bool(self.cut) and frozenset((sender, target)) in self.cut  # mostly none is
        if cut or self.random.random() < self.loss:
            self._note("lost", sender, target, message)
            return
        copies = 2 if self.random.random() < self.duplicates else 1
        self._note("send", sender, target, message, copies)
        for _ in range(copies):
            self._at(self.now + self.random.random() * self.latency, "deliver", (sender, target, message))

    def _apply(self, broker: _Broker, entry: Entry) -> None:
        if entry.index != broker.applied + 1:
            raise Violation(f"{broker.name} applied entry {entry.index} after {broker.applied}")
        broker.applied = entry.index
        self._note("apply", broker.name, entry.index)
        known = self.applied.setdefault(entry.index, entry)
        if known != entry:
            raise Violation(f"{broker.name} applied {entry} where another applied {known}")
        assert broker.machine is not None
        output = broker.machine.apply(entry.data)
        if self.outputs.setdefault(entry.index, output) != output:
            raise Violation(f"{broker.name} computed another output for entry {entry.index}")
        data = self.proposed.pop((broker.name, entry.index), None)
        if data is not None and data == entry.data:
            self.acknowledged[entry.index] = data


def campaign(seed: int, members: int = 3, compact_every: int = 0) -> SiteSim:
    """The site of one seed of the campaign the tests and ``benchmarks/sites.py`` run (``play``
    it): while the faults last, 5 % of the messages lost, 5 % duplicated, 2 % sudden crashes;
    all reordered."""
    return SiteSim(members, seed, loss=0.05, duplicates=0.05, sudden=0.02, compact_every=compact_every)


def play(site: SiteSim, seconds: float = 8.0) -> None:
    """The campaign's run: ``seconds`` of chaos, then the faults stop and the site must agree
    (``Violation`` otherwise)."""
    site.chaos(seconds)
    site.settle()
    site.check_converged()


def replay_command(seed: int, members: int = 3, compact_every: int = 0) -> str:
    """The command that replays ``play(campaign(seed, members, compact_every))`` exactly, to
    paste in a shell at the project's root."""
    tail = f" --compact-every {compact_every}" if compact_every else ""
    return f"python -m broker.sim.site --seed {seed} --members {members}{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m broker.sim.site --seed N``: one seed of the campaign, replayed exactly (the
    digest of its trace is the same on every run), its figures or the violation it finds;
    ``--trace`` prints every event first."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--compact-every", type=int, default=0, help="0: the logs are never compacted")
    parser.add_argument("--trace", action="store_true", help="print every event, one a line")
    arguments = parser.parse_args(argv)
    site = campaign(arguments.seed, arguments.members, arguments.compact_every)
    try:
        play(site)
    except Violation as error:
        failure: Violation | None = error
    else:
        failure = None
    if arguments.trace:
        for when, kind, what in site.trace:
            print(f"{when:.6f} {kind} {' '.join(map(repr, what))}")
    print(
        f"seed {arguments.seed}: {len(site.acknowledged)} entries acknowledged, {site.compactions} "
        f"compactions, {sum(b.installed for b in site.brokers.values())} snapshots installed, "
        f"trace {len(site.trace)} events, digest {site.digest()}"
    )
    if failure is not None:
        print(f"VIOLATION at {site.now:.3f} s: {failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
