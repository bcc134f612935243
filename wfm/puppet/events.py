"""SESDAD's log lines for events, and the brokers' reports of what they forwarded (``BroEvent``).

SESDAD (seed 002, section 5) logs the publication of an event, its forwarding by a broker, and its
delivery to a subscriber, each as one line:

```
PubEvent publisher-processname, publisher-processname, topicname, event-number
BroEvent broker-processname, publisher-processname, topicname, event-number
SubEvent subscriber-processname, publisher-processname, topicname, event-number
```

``LoggingLevel light`` (the default) logs PubEvent and SubEvent; ``full`` adds BroEvent.

"Publishers, brokers and subscribers should notify the PuppetMaster whenever they publish, forward
or receive a message": at ``full`` the puppet starts each broker with ``--trace-forwarding FILE``
(``broker.transport.trace``), a line for each publication it sends on to another broker or
delivers to a client, and :class:`Traces` reads those files as they grow. A broker of a
replicated site reports what it sent itself (the site's share of the output it carries), so the
BroEvent names the broker process that forwarded, as in SESDAD. A publication sent again after a
reconnection is reported once per broker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from wfm.puppet.topics import CLASS

__all__ = ["Traces", "bro_event", "pub_event", "sub_event"]


def pub_event(publisher: str, topic: str, seq: int) -> str:
    return f"PubEvent {publisher}, {publisher}, {topic}, {seq}"


def bro_event(broker: str, publisher: str, topic: str, seq: int) -> str:
    return f"BroEvent {broker}, {publisher}, {topic}, {seq}"


def sub_event(subscriber: str, publisher: str, topic: str, seq: int) -> str:
    return f"SubEvent {subscriber}, {publisher}, {topic}, {seq}"


Forwarded = tuple[str, str, str, int]  # broker, publisher, topic, event number


class Traces:
    """The brokers' forwarding traces (``{broker: its file}``), read as they grow: :meth:`read`
    returns what was forwarded since the last call, each (broker, publisher, topic, number) once.
    A line not yet ended (a broker writing it, or killed while it did) waits for its end; a line
    that is not a trace's, or a publication that is not a puppet worker's, is skipped (and
    counted in ``skipped``)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files
        self._offsets = dict.fromkeys(files, 0)
        self._partial = dict.fromkeys(files, b"")
        self._told: set[Forwarded] = set()
        self.skipped = 0

    def read(self) -> list[Forwarded]:
        fresh = []
        for broker, line in self._lines():
            event = self._event(broker, line)
            if event is None:
                self.skipped += 1
            elif event not in self._told:
                self._told.add(event)
                fresh.append(event)
        return fresh

    def _lines(self) -> Iterator[tuple[str, bytes]]:
        for broker, path in self.files.items():
            try:
                with path.open("rb") as file:
                    file.seek(self._offsets[broker])
                    data = file.read()
            except FileNotFoundError:  # not started yet, or started without tracing
                continue
            self._offsets[broker] += len(data)
            *lines, self._partial[broker] = (self._partial[broker] + data).split(b"\n")
            for line in lines:
                yield broker, line

    @staticmethod
    def _event(broker: str, line: bytes) -> Forwarded | None:
        try:
            attributes = json.loads(line)["attributes"]
            if attributes["class"] != CLASS:
                return None
            publisher, topic, seq = attributes["publisher"], attributes["topic"], attributes["seq"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(publisher, str) or not isinstance(topic, str) or type(seq) is not int:
            return None
        return broker, publisher, topic, seq
