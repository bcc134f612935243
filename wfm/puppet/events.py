"""SESDAD's log lines for events, and which brokers forwarded what (``BroEvent``).

SESDAD (seed 002, section 5) logs the publication of an event, its forwarding by a broker, and its
delivery to a subscriber, each as one line:

```
PubEvent publisher-processname, publisher-processname, topicname, event-number
BroEvent broker-processname, publisher-processname, topicname, event-number
SubEvent subscriber-processname, publisher-processname, topicname, event-number
```

``LoggingLevel light`` (the default) logs PubEvent and SubEvent; ``full`` adds BroEvent.

Our brokers do not tell anyone which publication they forwarded: a broker's status has counters,
not events, and nothing outside ``broker/`` may change that. What the puppet can observe is which
broker took each publication (the publisher's broker when the publication was acknowledged) and
which broker delivered it (the subscriber's when it arrived). Our overlay is a tree and a
publication travels from its edge broker along the tree to each subscriber's broker, so every broker
on that path did forward it: :class:`Forwarding` names those brokers, each once per publication, as
soon as both ends are known. A BroEvent is therefore always true but comes late (just before the
SubEvent that revealed it, or just after the PubEvent if the delivery was heard first) and
forwarding that reached no subscriber (towards a subscription withdrawn meanwhile, or a publication
lost on the way) is never logged.
"""

from __future__ import annotations

from collections import defaultdict, deque

from wfm.topology import Topology

__all__ = ["Forwarding", "bro_event", "pub_event", "sub_event"]


def pub_event(publisher: str, topic: str, seq: int) -> str:
    return f"PubEvent {publisher}, {publisher}, {topic}, {seq}"


def bro_event(broker: str, publisher: str, topic: str, seq: int) -> str:
    return f"BroEvent {broker}, {publisher}, {topic}, {seq}"


def sub_event(subscriber: str, publisher: str, topic: str, seq: int) -> str:
    return f"SubEvent {subscriber}, {publisher}, {topic}, {seq}"


class Forwarding:
    """The brokers that forwarded each publication, as far as deliveries show (see the module's
    docstring). Pure: the runner tells it what publishers and subscribers said, and logs the
    brokers it returns."""

    def __init__(self, topology: Topology) -> None:
        self._links: dict[str, set[str]] = defaultdict(set)
        for broker in topology.of_role("broker"):
            self._links.setdefault(broker.name, set())  # a broker with no link is still one
            for neighbour in topology.neighbours(broker.name):
                self._links[broker.name].add(neighbour.id)
                self._links[neighbour.id].add(broker.name)
        self._paths: dict[tuple[str, str], tuple[str, ...]] = {}
        self._entered: dict[tuple[str, int], str] = {}  # publication -> the broker that took it
        self._waiting: dict[tuple[str, int], list[str]] = defaultdict(list)  # -> delivering brokers
        self._told: dict[tuple[str, int], set[str]] = defaultdict(set)

    def path(self, start: str, end: str) -> tuple[str, ...]:
        """The brokers from ``start`` to ``end`` along the tree, both included; () if either is
        not a broker of the topology."""
        if start not in self._links or end not in self._links:
            return ()
        known = self._paths.get((start, end))
        if known is None:
            before: dict[str, str] = {start: start}
            queue = deque([start])
            while queue and end not in before:
                node = queue.popleft()
                for neighbour in sorted(self._links[node]):
                    if neighbour not in before:
                        before[neighbour] = node
                        queue.append(neighbour)
            if end not in before:
                known = ()
            else:
                steps = [end]
                while steps[-1] != start:
                    steps.append(before[steps[-1]])
                known = tuple(reversed(steps))
            self._paths[start, end] = known
        return known

    def published(self, publisher: str, seq: int, broker: str) -> list[str]:
        """``broker`` took ``publisher``'s publication ``seq``: the brokers that forwarded it to
        the deliveries heard before this, not told before."""
        key = (publisher, seq)
        self._entered[key] = broker
        return [b for end in self._waiting.pop(key, []) for b in self._new(key, broker, end)]

    def delivered(self, publisher: str, seq: int, broker: str) -> list[str]:
        """``broker`` delivered ``publisher``'s publication ``seq``: the brokers that forwarded it
        there, not told before (none yet if its publisher has not said where it went in)."""
        key = (publisher, seq)
        start = self._entered.get(key)
        if start is None:
            self._waiting[key].append(broker)
            return []
        return self._new(key, start, broker)

    def _new(self, key: tuple[str, int], start: str, end: str) -> list[str]:
        told = self._told[key]
        fresh = [b for b in self.path(start, end) if b not in told]
        told.update(fresh)
        return fresh
