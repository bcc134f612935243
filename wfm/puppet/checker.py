"""Did every subscriber get what it should have, once, and in the order the topology promises?
A pure checker in the manner of Jepsen's queue and Kafka checkers: publishers put a sequence
number in each payload, subscribers record what they deliver, and the checker compares.

What a subscriber should receive: every publication whose publisher had it acknowledged (its
edge broker took it) while one of the subscriber's subscriptions matching its topic was active,
that is, from ``settle`` seconds after the subscription was acknowledged (SESDAD allows "an
arbitrary delay" before a subscription takes effect; this is ours), or from the first
publication of that publisher it brought if sooner (SESDAD: once delivery has started, nothing may
be lost), until it was withdrawn. A subscriber that crashed keeps its subscriptions: its broker
holds its session, and a restart must bring what it missed.

The anomalies, and which ``Ordering`` (SESDAD's configuration line) asks for which:

=============  ==========================================================  ==================
anomaly        what it is                                                  checked under
=============  ==========================================================  ==================
lost           owed (above), never delivered by the end of the run          NO, FIFO, TOTAL
duplicated     delivered twice or more to one subscriber                    NO, FIFO, TOTAL
unexpected     delivered to a subscriber none of whose subscriptions        NO, FIFO, TOTAL
               ever matched its topic
out of order   delivered after a later publication of the same publisher    FIFO, TOTAL
               (FIFO per publisher and subscriber)
order cycle    the subscribers' delivery orders cannot all be one order     TOTAL
=============  ==========================================================  ==================

A publication delivered but never acknowledged to its publisher (it crashed, or gave up waiting)
is only counted (**unconfirmed**): it may or may not have got through, as a Jepsen ``:info``
operation. Publications delivered while the subscriber was subscribed only during the settling
delay count as received, never as lost.

Total order is checked as Jepsen's Kafka checker and Elle check it: each subscriber's first
deliveries, in the order it delivered them, are the edges ``a -> b`` of one directed graph over
all publications; a cycle in it means no single order agrees with every subscriber (with two
subscribers: two publications delivered in opposite orders). Each strongly connected component
of more than one publication is reported with one shortest cycle through it, each edge naming a
subscriber that delivered it. The search is iterative (Tarjan's algorithm on an explicit stack),
so a history of any length cannot overflow Python's recursion limit.

``check`` reads nothing but its arguments and is linear in the history (plus the windows times
the publications for what is owed), so a 100,000-delivery history is checked in a fraction of a
second.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from wfm.puppet.topics import matches

__all__ = ["CHECKS", "Cycle", "PairReport", "Published", "Received", "Report", "Window", "check"]

# which checks each Ordering asks for (SESDAD section 3.1; FIFO is its default)
CHECKS: dict[str, tuple[str, ...]] = {
    "NO": ("lost", "duplicated", "unexpected"),
    "FIFO": ("lost", "duplicated", "unexpected", "fifo"),
    "TOTAL": ("lost", "duplicated", "unexpected", "fifo", "total"),
}


@dataclass(frozen=True, slots=True)
class Published:
    """``publisher`` had publication ``seq`` on ``topic`` acknowledged at time ``at``."""

    publisher: str
    seq: int
    topic: str
    at: float


@dataclass(frozen=True, slots=True)
class Received:
    """``subscriber`` delivered ``publisher``'s publication ``seq`` at ``at``. A history lists
    each subscriber's deliveries in the order it delivered them."""

    subscriber: str
    publisher: str
    seq: int
    topic: str
    at: float


@dataclass(frozen=True, slots=True)
class Window:
    """``subscriber`` was subscribed to ``pattern`` from ``start`` (acknowledged) to ``end``
    (the unsubscription was asked for; None: to the end of the run)."""

    subscriber: str
    pattern: str
    start: float
    end: float | None = None

    def wants(self, topic: str, at: float, since: float) -> bool:
        """Whether a publication on ``topic`` at ``at`` belongs to this window, which took
        effect at ``since``."""
        return matches(self.pattern, topic) and since <= at and (self.end is None or at < self.end)


@dataclass(frozen=True, slots=True)
class PairReport:
    """What one subscriber got of one publisher's publications (sequence numbers)."""

    publisher: str
    subscriber: str
    expected: int
    received: int  # distinct publications of this publisher received
    lost: tuple[int, ...] = ()
    duplicated: tuple[int, ...] = ()  # each sequence number once, however many copies came
    out_of_order: tuple[int, ...] = ()
    unexpected: tuple[int, ...] = ()
    unconfirmed: int = 0

    def __str__(self) -> str:
        text = (
            f"{self.publisher} -> {self.subscriber}: expected {self.expected}, received {self.received}, "
            f"lost {len(self.lost)}, duplicated {len(self.duplicated)}, out of order {len(self.out_of_order)}"
        )
        if self.unexpected:
            text += f", unexpected {len(self.unexpected)}"
        if self.unconfirmed:
            text += f", unconfirmed {self.unconfirmed}"
        for what, seqs in (
            ("lost", self.lost),
            ("duplicated", self.duplicated),
            ("late", self.out_of_order),
            ("unexpected", self.unexpected),
        ):
            if seqs:
                text += f"\n  {what}: {_ranges(seqs)}"
        return text


@dataclass(frozen=True, slots=True)
class Cycle:
    """Publications ``(publisher, seq)`` that the subscribers delivered in a loop:
    ``subscribers[i]`` delivered ``publications[i]`` before ``publications[i + 1]`` (the last
    one before the first)."""

    publications: tuple[tuple[str, int], ...]
    subscribers: tuple[str, ...]
    size: int  # publications in the strongly connected component the cycle was found in

    def __str__(self) -> str:
        names = [f"{p}:{seq}" for p, seq in self.publications]
        steps = [
            f"{s} delivered {names[i]} before {names[(i + 1) % len(names)]}"
            for i, s in enumerate(self.subscribers)
        ]
        extra = f" ({self.size} publications entangled)" if self.size > len(names) else ""
        return f"order cycle {' -> '.join([*names, names[0]])}{extra}: {'; '.join(steps)}"


@dataclass(frozen=True, slots=True)
class Report:
    """Every pair that expected or received anything, the order cycles, and which checks the
    ``ordering`` asked for; ``ok`` is false if any of those found something."""

    pairs: tuple[PairReport, ...] = field(default_factory=tuple)
    cycles: tuple[Cycle, ...] = ()
    ordering: str = "FIFO"

    @property
    def checks(self) -> tuple[str, ...]:
        return CHECKS[self.ordering]

    @property
    def lost(self) -> int:
        return sum(len(p.lost) for p in self.pairs)

    @property
    def duplicated(self) -> int:
        return sum(len(p.duplicated) for p in self.pairs)

    @property
    def out_of_order(self) -> int:
        return sum(len(p.out_of_order) for p in self.pairs)

    @property
    def unexpected(self) -> int:
        return sum(len(p.unexpected) for p in self.pairs)

    @property
    def ok(self) -> bool:
        """Nothing that the ordering's checks look for was found (the checks that do not apply
        found nothing: they did not run)."""
        return not (self.lost or self.duplicated or self.unexpected or self.out_of_order or self.cycles)

    def summary(self) -> list[str]:
        lines = [str(pair) for pair in self.pairs]
        lines += [str(cycle) for cycle in self.cycles]
        totals = f"total: lost {self.lost}, duplicated {self.duplicated}"
        if "fifo" in self.checks:
            totals += f", out of order {self.out_of_order}"
        if "total" in self.checks:
            totals += f", order cycles {len(self.cycles)}"
        if self.unexpected:
            totals += f", unexpected {self.unexpected}"
        lines.append(
            f"{totals} over {len(self.pairs)} publisher/subscriber pairs"
            f" (Ordering {self.ordering}: checked {', '.join(self.checks)})"
        )
        return lines

    def as_dict(self) -> dict[str, object]:
        return {
            "ordering": self.ordering,
            "checks": list(self.checks),
            "ok": self.ok,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "out_of_order": self.out_of_order,
            "unexpected": self.unexpected,
            "cycles": [
                {
                    "publications": [[p, seq] for p, seq in c.publications],
                    "subscribers": list(c.subscribers),
                    "size": c.size,
                }
                for c in self.cycles
            ],
            "pairs": [
                {
                    "publisher": p.publisher,
                    "subscriber": p.subscriber,
                    "expected": p.expected,
                    "received": p.received,
                    "lost": list(p.lost),
                    "duplicated": list(p.duplicated),
                    "out_of_order": list(p.out_of_order),
                    "unexpected": list(p.unexpected),
                    "unconfirmed": p.unconfirmed,
                }
                for p in self.pairs
            ],
        }


def check(
    published: Iterable[Published],
    received: Iterable[Received],
    windows: Iterable[Window],
    settle: float = 0.0,
    ordering: str = "FIFO",
) -> Report:
    """Check a history with the checks ``ordering`` (NO, FIFO or TOTAL) asks for."""
    if ordering not in CHECKS:
        raise ValueError(f"bad ordering {ordering!r} (expected {', '.join(CHECKS)})")
    checks = CHECKS[ordering]
    received = list(received)
    confirmed: dict[str, dict[int, Published]] = defaultdict(dict)
    for p in published:
        confirmed[p.publisher][p.seq] = p
    by_subscriber: dict[str, list[Window]] = defaultdict(list)
    for w in windows:
        by_subscriber[w.subscriber].append(w)
    arrived: dict[tuple[str, str], list[Received]] = defaultdict(list)
    for r in received:
        arrived[r.publisher, r.subscriber].append(r)
    timelines = {publisher: _timeline(publications.values()) for publisher, publications in confirmed.items()}
    expected: dict[tuple[str, str], set[int]] = defaultdict(set)
    for subscriber, subscribed in by_subscriber.items():
        for publisher, publications in confirmed.items():
            for w in subscribed:
                since = _since(w, settle, arrived.get((publisher, subscriber), []), publications)
                for topic, (times, seqs) in timelines[publisher].items():
                    if matches(w.pattern, topic):
                        last = len(times) if w.end is None else bisect_left(times, w.end)
                        expected[publisher, subscriber].update(seqs[bisect_left(times, since) : last])
    pairs = []
    for publisher, subscriber in sorted({k for k, v in expected.items() if v} | set(arrived)):
        deliveries = arrived.get((publisher, subscriber), [])
        arrivals = [r.seq for r in deliveries]
        copies = Counter(arrivals)
        wanted = expected.get((publisher, subscriber), set())
        patterns = [w.pattern for w in by_subscriber.get(subscriber, [])]
        topics = {r.topic for r in deliveries}
        strays = {t for t in topics if not any(matches(pattern, t) for pattern in patterns)}
        pairs.append(
            PairReport(
                publisher,
                subscriber,
                expected=len(wanted),
                received=len(copies),
                lost=tuple(sorted(wanted - copies.keys())),
                duplicated=tuple(sorted(seq for seq, n in copies.items() if n > 1)),
                out_of_order=_late(arrivals) if "fifo" in checks else (),
                unexpected=tuple(sorted({r.seq for r in deliveries if r.topic in strays})),
                unconfirmed=sum(1 for seq in copies if seq not in confirmed.get(publisher, {})),
            )
        )
    cycles = _cycles(received) if "total" in checks else ()
    return Report(tuple(pairs), cycles, ordering)


def _timeline(publications: Iterable[Published]) -> dict[str, tuple[list[float], list[int]]]:
    """Per topic, its publications' times in order and their sequence numbers: a window's
    share of a topic is then two binary searches, not a test of every publication."""
    by_topic: dict[str, list[Published]] = defaultdict(list)
    for p in publications:
        by_topic[p.topic].append(p)
    timeline = {}
    for topic, listed in by_topic.items():
        listed.sort(key=lambda p: p.at)
        timeline[topic] = ([p.at for p in listed], [p.seq for p in listed])
    return timeline


def _late(arrivals: Sequence[int]) -> tuple[int, ...]:
    """The sequence numbers first delivered after a higher one of the same publisher."""
    late: list[int] = []
    highest = None
    for seq in dict.fromkeys(arrivals):  # first arrivals, in order
        if highest is not None and seq < highest:
            late.append(seq)
        highest = seq if highest is None else max(highest, seq)
    return tuple(late)


def _since(w: Window, settle: float, arrivals: list[Received], publications: dict[int, Published]) -> float:
    """When ``w`` took effect for this publisher: ``settle`` after it was acknowledged, or
    sooner, when the first publication it brought had been published (from then on, SESDAD
    says, nothing may be lost)."""
    since = w.start + settle
    for r in arrivals:
        first = publications.get(r.seq)
        if first is not None and w.wants(first.topic, first.at, w.start):
            return min(since, first.at)
    return since


def _cycles(received: Sequence[Received]) -> tuple[Cycle, ...]:
    """One shortest cycle per strongly connected component (of two publications or more) of
    the graph whose edges join each subscriber's consecutive first deliveries."""
    index: dict[tuple[str, int], int] = {}
    names: list[tuple[str, int]] = []
    edges: list[dict[int, str]] = []  # node -> successor -> the first subscriber with that edge
    orders: dict[str, list[int]] = defaultdict(list)
    for r in received:
        key = (r.publisher, r.seq)
        node = index.get(key)
        if node is None:
            node = index[key] = len(names)
            names.append(key)
            edges.append({})
        orders[r.subscriber].append(node)
    for subscriber, order in orders.items():
        firsts = list(dict.fromkeys(order))  # a duplicate adds no edge
        for before, after in pairwise(firsts):
            edges[before].setdefault(after, subscriber)
    found = []
    for component in _components(edges):
        if len(component) > 1:
            path = _shortest_cycle(edges, component)
            first = min(range(len(path)), key=lambda i: names[path[i]])
            path = path[first:] + path[:first]  # told from its least publication
            found.append(
                Cycle(
                    tuple(names[n] for n in path),
                    tuple(edges[a][b] for a, b in zip(path, [*path[1:], path[0]], strict=True)),
                    len(component),
                )
            )
    return tuple(sorted(found, key=lambda c: c.publications))


def _components(edges: list[dict[int, str]]) -> list[list[int]]:
    """Tarjan's strongly connected components, iteratively: an explicit stack of (node, its
    successors still to visit) in place of recursion."""
    count = len(edges)
    order = [-1] * count  # when each node was first visited
    low = [0] * count
    on_stack = [False] * count
    stack: list[int] = []
    components: list[list[int]] = []
    visited = 0
    for root in range(count):
        if order[root] >= 0:
            continue
        order[root] = low[root] = visited
        visited += 1
        stack.append(root)
        on_stack[root] = True
        work = [(root, iter(edges[root]))]
        while work:
            node, successors = work[-1]
            for successor in successors:
                if order[successor] < 0:
                    order[successor] = low[successor] = visited
                    visited += 1
                    stack.append(successor)
                    on_stack[successor] = True
                    work.append((successor, iter(edges[successor])))
                    break
                if on_stack[successor]:
                    low[node] = min(low[node], order[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == order[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack[member] = False
                        component.append(member)
                        if member == node:
                            break
                    components.append(component)
    return components


def _shortest_cycle(edges: list[dict[int, str]], component: list[int]) -> list[int]:
    """A shortest cycle through the component's first-made node, by breadth-first search
    within the component (every node of a component lies on a cycle inside it)."""
    inside = set(component)
    start = min(component)
    parent = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for successor in edges[node]:
            if successor == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            if successor in inside and successor not in parent:
                parent[successor] = node
                queue.append(successor)
    raise AssertionError("a strongly connected component without a cycle")


def _ranges(seqs: Iterable[int]) -> str:
    """``1-3, 7, 9-10``: sequence numbers, short."""
    parts: list[str] = []
    start = end = None
    for seq in sorted(seqs):
        if end is not None and seq == end + 1:
            end = seq
            continue
        if start is not None:
            parts.append(f"{start}-{end}" if start != end else f"{start}")
        start = end = seq
    if start is not None:
        parts.append(f"{start}-{end}" if start != end else f"{start}")
    return ", ".join(parts)
