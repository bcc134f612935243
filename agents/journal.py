"""The agent's journal: one JSON line per event, fsync'd, replayed on restart.

An append-only log of the events the state machine consumed (envelopes, deliveries, finished runs,
ticks that started retries) is all a restarted agent needs: replaying them through
:meth:`agents.state.Agent.replay` rebuilds the same state, so a job that finished is not run again
and a job that was running is known to have been interrupted. Each record is fsync'd before its
effects happen, so nothing acted on is missing after a crash; records that arrive together are
fsync'd together (one ``sync`` per batch), which is what keeps a busy agent off the disk's latency.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agents.state import Delivered, Event, Finished, Incoming, Result, Run, Tick
from broker.language import ParseError, parse_publication

__all__ = ["Journal"]

log = logging.getLogger(__name__)


class Journal:
    """``journal.jsonl`` in the agent's state directory."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / "journal.jsonl"
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, event: Event, now: float) -> None:
        """Buffer one record; it is durable after the next :meth:`sync`."""
        self._file.write(json.dumps({"t": now, **_encode(event)}, ensure_ascii=False) + "\n")

    def sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def read(self) -> Iterator[tuple[Event, float]]:
        """Every complete record; a torn last line (a crash mid-write) is skipped with a warning."""
        with self.path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                try:
                    record = json.loads(line)
                    yield _decode(record), float(record["t"])
                except (ValueError, KeyError, TypeError, ParseError) as error:
                    log.warning("%s:%d: skipped a bad record: %s", self.path, number, error)

    def close(self) -> None:
        self._file.close()


def _encode(event: Event) -> dict[str, Any]:
    if isinstance(event, Incoming):
        return {"event": "incoming", "publication": str(event.publication)}
    if isinstance(event, Delivered):
        return {"event": "delivery", "key": event.key, "publications": [str(p) for p in event.publications]}
    if isinstance(event, Finished):
        run, result = event.run, event.result
        return {"event": "finished", "run": _fields(run), "result": _fields(result)}
    return {"event": "tick"}


def _fields(value: Run | Result) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__slots__}  # type: ignore[union-attr]


def _decode(record: dict[str, Any]) -> Event:
    kind = record["event"]
    if kind == "incoming":
        return Incoming(parse_publication(record["publication"]))
    if kind == "delivery":
        return Delivered(record["key"], tuple(parse_publication(p) for p in record["publications"]))
    if kind == "finished":
        return Finished(Run(**record["run"]), Result(**record["result"]))
    if kind == "tick":
        return Tick()
    raise ValueError(f"unknown event {kind!r}")
