"""A site's nodes driven by hand: each message is delivered only when the test says so."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.consensus import Config, ConsensusMessage, Entry, Node, Snapshot
from broker.sim.site import Disk

E = 1.0  # election timeout
H = 0.1  # heartbeat


@dataclass
class Cluster:
    names: tuple[str, ...] = ("a", "b", "c")
    now: float = 0.0
    disks: dict[str, Disk] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    applied: dict[str, list[Entry]] = field(default_factory=dict)
    installed: dict[str, list[Snapshot]] = field(default_factory=dict)  # leaders' snapshots restored
    # (sender, target, message), in the order said and not yet delivered
    wire: list[tuple[str, str, ConsensusMessage]] = field(default_factory=list)
    cut: set[str] = field(default_factory=set)  # brokers whose messages, both ways, are lost
    said: list[tuple[str, str, ConsensusMessage]] = field(default_factory=list)  # all, ever

    def __post_init__(self) -> None:
        for name in self.names:
            self.disks[name] = Disk()
            self.start(name)

    def start(self, name: str) -> None:
        """(Re)start ``name`` from its disk; what it applied before is forgotten."""
        disk = self.disks[name]
        config = Config(name, self.names, E, H)
        self.nodes[name] = Node(
            config, self.now, lambda: 0.0, disk.state, disk.entries, snapshot=disk.snapshot
        )
        self.applied[name] = []
        self.installed[name] = []
        self.wire = [m for m in self.wire if m[0] != name]  # what it had not said is lost

    def carry_out(self, name: str) -> None:
        node = self.nodes[name]
        while node.has_ready():
            ready = node.ready()
            self.disks[name].write(ready.hard_state, ready.entries, ready.snapshot)
            self.wire += [(name, target, message) for target, message in ready.messages]
            self.said += [(name, target, message) for target, message in ready.messages]
            if ready.snapshot is not None:
                self.installed[name].append(ready.snapshot)
            self.applied[name] += ready.committed
            node.advance(self.now)

    def compact(self, name: str) -> Snapshot:
        """``name`` compacts its log up to what it applied; its state machine's bytes name the
        index."""
        node = self.nodes[name]
        snapshot = node.compact(node.applied, b"state@%d" % node.applied)
        self.disks[name].compact(snapshot)
        return snapshot

    def elect(self, name: str) -> None:
        """``name`` times out first and wins, everything delivered."""
        self.now += 2 * E + 0.01
        self.nodes[name].tick(self.now)
        self.carry_out(name)
        self.deliver_all()

    def deliver(self, target: str | None = None, sender: str | None = None, drop_rest: bool = False) -> int:
        """Deliver what is on the wire (only to ``target``, only from ``sender``), in order;
        the rest stays unless ``drop_rest``. How many were delivered."""
        self.wire = [m for m in self.wire if not {m[0], m[1]} & self.cut]
        chosen = [m for m in self.wire if target in (None, m[1]) and sender in (None, m[0])]
        self.wire = [] if drop_rest else [m for m in self.wire if m not in chosen]
        for source, to, message in chosen:
            self.nodes[to].handle(source, message, self.now)
            self.carry_out(to)
        return len(chosen)

    def deliver_all(self, rounds: int = 50) -> None:
        for _ in range(rounds):
            if not self.deliver():
                return

    def propose(self, name: str, data: bytes) -> Entry:
        entry = self.nodes[name].propose(data, self.now)
        self.carry_out(name)
        return entry

    def heartbeat_without(self, silent: str) -> None:
        """Time for one heartbeat, everything delivered but to and from ``silent``."""
        self.now += H
        for name in self.names:
            if name != silent:
                self.nodes[name].tick(self.now)
                self.carry_out(name)
        for _ in range(50):
            if not self.deliver_target_not(silent):
                return

    def deliver_target_not(self, silent: str) -> int:
        chosen = [m for m in self.wire if silent not in (m[0], m[1])]
        self.wire = [m for m in self.wire if m not in chosen]
        for source, to, message in chosen:
            self.nodes[to].handle(source, message, self.now)
            self.carry_out(to)
        return len(chosen)

    def heartbeat(self) -> None:
        """Time for one heartbeat: everyone ticks, everything delivered."""
        self.now += H
        for name in self.names:
            self.nodes[name].tick(self.now)
            self.carry_out(name)
        self.deliver_all()
