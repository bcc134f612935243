"""A broker's forwarding trace: one line per publication it sends on, for tools that must see
what each broker did (SESDAD's PuppetMaster logs a ``BroEvent`` for each broker that forwarded an
event, ``wfm puppet`` at ``LoggingLevel full``).

A line is a JSON object: ``t`` (epoch seconds it was written onto the link), ``to`` (the hop: a
neighbour broker, a site, or a client), ``id`` (the publication's overlay-wide id, or the
client's ref for what a client published), ``publication`` (its text) and ``attributes``. A
publication sent again after a reconnection is traced again: a reader that wants each once keeps
what it has seen.

Tracing is off unless a broker is started with a file for it; it is never allowed to cost the
broker what it routes: a line that cannot be written (the disk full, the file gone) ends the
trace, logged once, and the broker goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import IO

from broker.clock import Clock
from broker.messages import Deliver, Publish

__all__ = ["ForwardingTrace"]


class ForwardingTrace:
    """Appends the trace's lines to ``path`` (created, or appended to: a restarted broker goes
    on with the same file, on a new line if a kill tore its last), one write per line so that a
    reader sees whole lines soon."""

    def __init__(
        self,
        path: Path,
        clock: Clock,
        counters: Counter[str],
        log: logging.LoggerAdapter[logging.Logger],
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        with path.open("a+b") as file:  # a line torn by a kill stays a line of its own
            end = file.seek(0, os.SEEK_END)
            if end:
                file.seek(end - 1)
                if file.read(1) != b"\n":
                    file.write(b"\n")  # appended: "a" writes at the end wherever it read
        self._file: IO[str] | None = path.open("a", encoding="utf-8", buffering=1)
        self._clock, self._counters, self._log = clock, counters, log

    def __call__(self, hop: str, message: Publish | Deliver) -> None:
        if self._file is None:
            return
        publication = message.publication
        line = {
            "t": self._clock.time(),
            "to": hop,
            "id": message.id,
            "publication": str(publication),
            "attributes": dict(publication),
        }
        try:
            self._file.write(json.dumps(line, ensure_ascii=False) + "\n")
        except (OSError, ValueError) as error:  # ValueError: written to a closed file
            self.close()
            self._counters["trace.failed"] += 1
            self._log.error("stopped the forwarding trace in %s: %s", self.path, error)
        else:
            self._counters["trace.lines"] += 1

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            with contextlib.suppress(OSError):  # what it could not flush is lost with the trace
                file.close()
