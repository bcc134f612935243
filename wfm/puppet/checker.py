"""Did every subscriber get what it should have, once and in order? A pure checker in the manner
of Jepsen and the NATS chaos tests: publishers put a sequence number in each payload, subscribers
record what they receive, and the checker compares, per (publisher, subscriber) pair.

What a subscriber should receive: every publication whose publisher had it acknowledged (its
edge broker took it) while one of the subscriber's subscriptions matching its topic was active,
that is, from ``settle`` seconds after the subscription was acknowledged (SESDAD allows "an
arbitrary delay" before a subscription takes effect; this is ours), or from the first
publication of that publisher it brought if sooner (SESDAD: once delivery has started, nothing may
be lost), until it was withdrawn. A
subscriber that crashed keeps its subscriptions: its broker holds its session, and a restart
must bring what it missed. Such a publication never received is **lost**; one received twice or
more is **duplicated**; one received after a later one from the same publisher is **out of
order** (SESDAD's default, FIFO per publisher). A publication received but never acknowledged to
its publisher (it crashed, or gave up waiting) is only counted (**unconfirmed**): it may or may
not have got through, as a Jepsen ``:info`` operation. Publications received while the
subscriber was subscribed only during the settling delay count as received, never as lost.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from wfm.puppet.topics import matches

__all__ = ["PairReport", "Published", "Received", "Report", "Window", "check"]


@dataclass(frozen=True, slots=True)
class Published:
    """``publisher`` had publication ``seq`` on ``topic`` acknowledged at time ``at``."""

    publisher: str
    seq: int
    topic: str
    at: float


@dataclass(frozen=True, slots=True)
class Received:
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
    publisher: str
    subscriber: str
    expected: int
    received: int  # distinct publications of this publisher received
    lost: tuple[int, ...] = ()
    duplicated: tuple[int, ...] = ()  # each sequence number once, however many copies came
    out_of_order: tuple[int, ...] = ()
    unconfirmed: int = 0

    def __str__(self) -> str:
        text = (
            f"{self.publisher} -> {self.subscriber}: expected {self.expected}, received {self.received}, "
            f"lost {len(self.lost)}, duplicated {len(self.duplicated)}, out of order {len(self.out_of_order)}"
        )
        if self.unconfirmed:
            text += f", unconfirmed {self.unconfirmed}"
        for what, seqs in (("lost", self.lost), ("duplicated", self.duplicated), ("late", self.out_of_order)):
            if seqs:
                text += f"\n  {what}: {_ranges(seqs)}"
        return text


@dataclass(frozen=True, slots=True)
class Report:
    pairs: tuple[PairReport, ...] = field(default_factory=tuple)

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
    def ok(self) -> bool:
        """Nothing lost and nothing duplicated (out of order is reported, not failed)."""
        return not self.lost and not self.duplicated

    def summary(self) -> list[str]:
        lines = [str(pair) for pair in self.pairs]
        lines.append(
            f"total: lost {self.lost}, duplicated {self.duplicated}, out of order {self.out_of_order}"
            f" over {len(self.pairs)} publisher/subscriber pairs"
        )
        return lines

    def as_dict(self) -> dict[str, object]:
        return {
            "lost": self.lost,
            "duplicated": self.duplicated,
            "out_of_order": self.out_of_order,
            "pairs": [
                {
                    "publisher": p.publisher,
                    "subscriber": p.subscriber,
                    "expected": p.expected,
                    "received": p.received,
                    "lost": list(p.lost),
                    "duplicated": list(p.duplicated),
                    "out_of_order": list(p.out_of_order),
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
) -> Report:
    """Compare, per (publisher, subscriber) pair that expected or received anything."""
    confirmed: dict[str, dict[int, Published]] = defaultdict(dict)
    for p in published:
        confirmed[p.publisher][p.seq] = p
    by_subscriber: dict[str, list[Window]] = defaultdict(list)
    for w in windows:
        by_subscriber[w.subscriber].append(w)
    arrived: dict[tuple[str, str], list[Received]] = defaultdict(list)
    for r in received:
        arrived[r.publisher, r.subscriber].append(r)
    expected: dict[tuple[str, str], set[int]] = defaultdict(set)
    for subscriber, subscribed in by_subscriber.items():
        for publisher, publications in confirmed.items():
            for w in subscribed:
                since = _since(w, settle, arrived.get((publisher, subscriber), []), publications)
                expected[publisher, subscriber] |= {
                    seq for seq, p in publications.items() if w.wants(p.topic, p.at, since)
                }
    pairs = []
    for publisher, subscriber in sorted({k for k, v in expected.items() if v} | set(arrived)):
        arrivals = [r.seq for r in arrived.get((publisher, subscriber), [])]
        copies = Counter(arrivals)
        late, highest = [], None
        for seq in dict.fromkeys(arrivals):  # first arrivals, in order
            if highest is not None and seq < highest:
                late.append(seq)
            highest = seq if highest is None else max(highest, seq)
        wanted = expected.get((publisher, subscriber), set())
        pairs.append(
            PairReport(
                publisher,
                subscriber,
                expected=len(wanted),
                received=len(copies),
                lost=tuple(sorted(wanted - set(copies))),
                duplicated=tuple(sorted(seq for seq, n in copies.items() if n > 1)),
                out_of_order=tuple(late),
                unconfirmed=sum(1 for seq in copies if seq not in confirmed.get(publisher, {})),
            )
        )
    return Report(tuple(pairs))


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
