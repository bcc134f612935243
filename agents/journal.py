"""The agent's journal: the events its state machine consumed, on :class:`broker.durable.WriteAheadLog`.

Each record is an event (envelopes, deliveries, finished or lost runs, ticks that started
retries; :mod:`agents.journal_records`) fsync'd before its effects happen, so nothing acted on is
missing after a crash. Records that arrive together are fsync'd together (one ``fsync`` per
batch), which keeps a busy agent off the disk's latency; the adapter may leave a batch flushed
and not synced when losing it to a crash of the machine costs nothing (``_ends_only`` in
:mod:`agents.service`). Feeding them back to :meth:`agents.state.Agent.handle` rebuilds the same state,
so a job that finished is not run again and a job that was started is known to be in a
supervisor's hands.

So that neither the disk nor the restart time grows with history, the journal is compacted once
it holds ``max_records`` records or ``max_bytes`` bytes since the last snapshot: the agent's
state (:meth:`agents.state.Agent.snapshot`, as JSON) becomes the log's checkpoint, whose steps
lose nothing and replay nothing twice whenever a crash comes (:mod:`broker.durable.log`).

The log lives in ``journal/`` of the agent's state directory. A state directory that still holds
the journal in its older layout (``snapshot.json`` and ``journal.jsonl``:
:mod:`agents.old_journal`) is converted on the first start: read, checkpointed into the log, and
deleted once the checkpoint is durable (a crash in between reads it again, or deletes it).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from agents import old_journal
from agents.events import Event
from agents.journal_records import decode, encode
from agents.state import Agent
from broker.durable.log import LogInUse, WriteAheadLog, private_directory
from broker.errors import LocalError
from broker.language import ParseError

__all__ = ["Journal"]

log = logging.getLogger(__name__)

MAX_RECORDS = 10_000
MAX_BYTES = 16 << 20


class Journal:
    """The log in ``journal/`` of the agent's state directory, which it makes its user's only
    (0700, :func:`broker.durable.log.private_directory`): the journal, the supervisor's files and
    the runs' logs hold every envelope, commands included."""

    def __init__(self, state_dir: Path, max_records: int = MAX_RECORDS, max_bytes: int = MAX_BYTES) -> None:
        self.state_dir = private_directory(state_dir)
        self.directory = state_dir / "journal"
        self.max_records, self.max_bytes = max_records, max_bytes
        # one agent per state directory: two would interleave their records, and one's
        # checkpoint would cut the other's (a killed wfm up leaves its agents running)
        try:
            self.wal = WriteAheadLog(self.directory)
        except LogInUse:
            raise LocalError(f"{state_dir} is in use by another agent") from None
        if old_journal.in_use(state_dir):
            self.wal.close()
            raise LocalError(f"{state_dir} is in use by another agent")
        # read at once, so records written before :meth:`recover` go after these
        self._found: tuple[bytes | None, list[bytes]] | None = self.wal.recover()

    def recover(self, agent: Agent) -> int:
        """Give ``agent`` (new) the journaled state: the snapshot, then the records after it.
        Returns how many records were replayed."""
        if self._found is None:
            raise RuntimeError(f"{self.directory}: recover() is called once")
        (snapshot, records), self._found = self._found, None
        if snapshot is None and not records:
            converted = old_journal.replay(self.state_dir, agent)
            if converted is None:
                return 0
            self.compact(agent.snapshot())
            log.info(
                "%s: converted the journal of an earlier version into %s", self.state_dir, self.directory
            )
            self._remove_old()
            return converted
        self._remove_old()  # a conversion cut short after its checkpoint
        if snapshot is not None:
            agent.restore(self._state(snapshot))
        replayed = 0
        for number, record in enumerate(records, 1):
            try:
                event, now = decode(json.loads(record))
            except (ValueError, KeyError, TypeError, ParseError) as error:
                log.warning(
                    "%s: record %d after the snapshot: skipped a bad record: %s",
                    self.directory,
                    number,
                    error,
                )
                continue
            agent.handle(event, now)
            replayed += 1
        return replayed

    def _state(self, snapshot: bytes) -> dict[str, Any]:
        try:
            state: dict[str, Any] = json.loads(snapshot)
            state["installs"]
        except (ValueError, KeyError, TypeError) as error:  # checksummed: not a torn write
            raise LocalError(f"{self.directory}: not an agent snapshot ({error})") from None
        return state

    def _remove_old(self) -> None:
        for name in old_journal.FILES:
            (self.state_dir / name).unlink(missing_ok=True)

    def write(self, event: Event, now: float) -> None:
        """Buffer one record; it is durable after the next :meth:`fsync`."""
        self.wal.append(encode(event, now))

    def flush(self) -> None:
        """Hand the buffered records to the kernel (they survive the process, not the machine)."""
        self.wal.flush()

    def fsync(self) -> None:
        """Make the records written so far durable, flushed or not. An asyncio owner may run it in
        a thread while its loop goes on (:class:`broker.durable.offload.Offload`)."""
        self.wal.commit()

    sync = fsync  # flush and fsync in one call: the same, since fsync writes what is not flushed

    def due(self) -> bool:
        """Whether the journal is long enough to compact."""
        return self.wal.records_since_checkpoint >= self.max_records or self.wal.log_bytes >= self.max_bytes

    def compact(self, state: dict[str, Any]) -> None:
        """Replace the records by ``state`` (:meth:`Agent.snapshot` after every record written)."""
        self.wal.checkpoint(json.dumps(state, ensure_ascii=False).encode())

    def close(self) -> None:
        self.wal.close()
