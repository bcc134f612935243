"""The agent's journal: a snapshot plus a tail of fsync'd JSON lines, recovered on restart.

The tail (``journal.jsonl``) is an append-only log of the events the state machine consumed
(envelopes, deliveries, finished or lost runs, ticks that started retries); each record is fsync'd
before its effects happen, so nothing acted on is missing after a crash. Records that arrive
together are fsync'd together (one ``sync`` per batch), which keeps a busy agent off the disk's
latency. Feeding them back to :meth:`agents.state.Agent.handle` rebuilds the same state, so a job
that finished is not run again and a job that was started is known to be in a supervisor's hands.

So that neither the disk nor the restart time grows with history, the journal is compacted once
the tail holds ``max_records`` records or ``max_bytes`` bytes: the agent's state
(:meth:`agents.state.Agent.snapshot`) goes to ``snapshot.json``, then the tail is emptied. Every
record carries a sequence number and the snapshot the number of the last record it includes, so a
crash at any point of compaction loses nothing and replays nothing twice:

1. the snapshot is written to a temporary file and fsync'd: a crash leaves the old snapshot and the
   whole tail (the temporary file is ignored);
2. it is renamed over ``snapshot.json`` and the folder fsync'd: from then on, the tail records it
   includes are skipped when read;
3. the tail is truncated and fsync'd.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agents.state import Agent, Delivered, Event, Finished, Incoming, Lost, Result, Run, TimePassed
from agents.supervisor import write_atomically
from broker.durable.log import private_directory
from broker.errors import LocalError
from broker.language import ParseError, Publication, parse_publication

__all__ = ["Journal"]

log = logging.getLogger(__name__)

MAX_RECORDS = 10_000
MAX_BYTES = 16 << 20


class Journal:
    """``snapshot.json`` and ``journal.jsonl`` in the agent's state directory, which it makes
    its user's only (0700, :func:`broker.durable.log.private_directory`): the journal, the
    supervisor's files and the runs' logs hold every envelope, commands included."""

    def __init__(self, state_dir: Path, max_records: int = MAX_RECORDS, max_bytes: int = MAX_BYTES) -> None:
        private_directory(state_dir)
        self.path = state_dir / "journal.jsonl"
        self.snapshot_path = state_dir / "snapshot.json"
        self.max_records, self.max_bytes = max_records, max_bytes
        # one agent per state directory: two would interleave their records, and one's compaction
        # would truncate the other's (a killed wfm up leaves its agents running)
        self._lock = os.open(state_dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            raise LocalError(f"{state_dir} is in use by another agent") from None
        self.path.touch(mode=0o600)
        self._file = self.path.open("r+b")
        self._file.seek(0, os.SEEK_END)
        self.sequence = 0  # the number of the last record written (or read)
        self.tail = 0  # records in the tail, included in the snapshot or not

    def recover(self, agent: Agent) -> int:
        """Give ``agent`` (new) the journaled state: the snapshot, then the tail records after it.
        A torn last line (a crash mid-write) is cut off, so the next record starts on a line of its
        own. Returns how many tail records were replayed."""
        snapshot = self._read_snapshot()
        included = 0
        if snapshot is not None:
            agent.restore(snapshot["state"])
            included = self.sequence = int(snapshot["sequence"])
        replayed, end = 0, 0
        self._file.seek(0)
        for number, line in enumerate(self._file, 1):
            if not line.endswith(b"\n"):
                log.warning("%s:%d: cut off a torn record", self.path, number)
                break
            end += len(line)
            self.tail += 1
            try:
                record = json.loads(line)
                sequence = int(record.get("n", number))  # journals from before compaction: by line
                event, now = _decode(record), float(record["t"])
            except (ValueError, KeyError, TypeError, ParseError) as error:
                log.warning("%s:%d: skipped a bad record: %s", self.path, number, error)
                continue
            self.sequence = max(self.sequence, sequence)
            if sequence > included:
                agent.handle(event, now)
                replayed += 1
        self._file.truncate(end)
        self._file.seek(end)
        return replayed

    def _read_snapshot(self) -> dict[str, Any] | None:
        try:
            text = self.snapshot_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            snapshot: dict[str, Any] = json.loads(text)
            int(snapshot["sequence"]), snapshot["state"]["installs"]
        except (ValueError, KeyError, TypeError) as error:  # written atomically: not a torn write
            raise LocalError(f"{self.snapshot_path}: not an agent snapshot ({error})") from None
        return snapshot

    def write(self, event: Event, now: float) -> None:
        """Buffer one record; it is durable after the next :meth:`sync`."""
        self.sequence += 1
        self.tail += 1
        record = {"n": self.sequence, "t": now, **_encode(event)}
        self._file.write(json.dumps(record, ensure_ascii=False).encode() + b"\n")

    def sync(self) -> None:
        self.flush()
        self.fsync()

    def flush(self) -> None:
        """Hand the buffered records to the kernel (they survive the process, not the machine)."""
        self._file.flush()

    def fsync(self) -> None:
        """Make what :meth:`flush` handed over durable. It touches no Python state, so an asyncio
        owner can run it in a thread while its loop goes on (and nothing else writes meanwhile)."""
        os.fsync(self._file.fileno())

    def due(self) -> bool:
        """Whether the tail is long enough to compact."""
        return self.tail >= self.max_records or self._file.tell() >= self.max_bytes

    def compact(self, state: dict[str, Any]) -> None:
        """Replace the synced tail by ``state`` (:meth:`Agent.snapshot` after every record written)."""
        self.sync()
        write_atomically(self.snapshot_path, {"sequence": self.sequence, "state": state})  # steps 1, 2
        self._file.truncate(0)  # step 3
        self._file.seek(0)
        os.fsync(self._file.fileno())
        self.tail = 0

    def close(self) -> None:
        self._file.close()
        os.close(self._lock)


def _encode(event: Event) -> dict[str, Any]:
    if isinstance(event, Incoming):
        return {"event": "incoming", "pub": _structure(event.publication)}
    if isinstance(event, Delivered):
        return {"event": "delivery", "key": event.key, "pubs": [_structure(p) for p in event.publications]}
    if isinstance(event, Finished):
        return {"event": "finished", "run": asdict(event.run), "result": asdict(event.result)}
    if isinstance(event, Lost):
        return {"event": "lost", "run": asdict(event.run)}
    return {"event": "tick"}


def _structure(publication: Publication) -> list[Any]:
    """A publication as JSON keeps it: ``[class, {attribute: value}]``. Not its text, which a
    restart would have to parse again (about 0.2 ms each with the grammar: seconds for a tail of
    10,000 records, so a restart's time grew with the tail; built from this, 3 µs)."""
    return [publication.cls, dict(publication.fields)]


def _publication(data: Any) -> Publication:
    """The publication of a journal record: ``[class, {attribute: value}]``, checked by the
    constructor as any other; or its text, as journals written before the structure have it."""
    if isinstance(data, str):
        return parse_publication(data)
    cls, attributes = data
    if not isinstance(cls, str) or not isinstance(attributes, dict):
        raise ValueError(f"not a publication: {data!r:.80}")
    return Publication(cls, attributes)


def _decode(record: dict[str, Any]) -> Event:
    kind = record["event"]
    if kind == "incoming":
        return Incoming(_publication(record["pub"] if "pub" in record else record["publication"]))
    if kind == "delivery":
        publications = record["pubs"] if "pubs" in record else record["publications"]
        return Delivered(record["key"], tuple(map(_publication, publications)))
    if kind == "finished":
        return Finished(Run(**record["run"]), Result(**record["result"]))
    if kind == "lost":
        return Lost(Run(**record["run"]))
    if kind == "tick":
        return TimePassed()
    raise ValueError(f"unknown event {kind!r}")
