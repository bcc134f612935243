"""A site member's consensus state on disk, on the broker's write-ahead log.

What ``Node.ready()`` hands out to write (``HardState``, entries from an index on) becomes one
record each, and :meth:`SiteLog.write` commits them (one fsync for the batch) before it returns:
the caller sends the batch's messages only after that, which is the whole of what Raft asks of
a disk (``docs/sites.md``). Records are msgpack arrays: ``["state", term, vote]`` and
``["entries", first index, [[term, data], ...]]``; an entries record replaces whatever the log
held from its first index on, as a follower's log is cut where a leader's disagrees. Replayed in
order, the last state and the entries as cut and extended are what the member had promised.

Every ``checkpoint_every`` records the whole state is written as the log's snapshot, so a restart
replays a bounded tail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack

from broker.durable.log import Fsync, LogCorrupt, WriteAheadLog
from broker.messages.consensus import Entry, HardState

__all__ = ["SiteLog"]

CHECKPOINT_RECORDS = 10_000


class SiteLog:
    """The consensus state of one member of a site, in ``directory`` (one process at a time);
    :meth:`recover` first, then :meth:`write`."""

    def __init__(self, directory: Path, fsync: Fsync = "group", checkpoint_every: int = CHECKPOINT_RECORDS):
        self.wal = WriteAheadLog(directory, fsync)
        self.directory = directory
        self.checkpoint_every = checkpoint_every
        self.state = HardState()
        self.entries: list[Entry] = []
        self._since_checkpoint = 0

    def recover(self) -> tuple[HardState, list[Entry]]:
        """What the member had written: its term and vote, and its entries."""
        snapshot, records = self.wal.recover()
        try:
            if snapshot is not None:
                self._apply(msgpack.unpackb(snapshot, raw=False))
            for record in records:
                self._apply(msgpack.unpackb(record, raw=False))
        except (ValueError, TypeError, msgpack.UnpackException) as error:
            raise LogCorrupt(f"{self.directory}: a consensus record cannot be read: {error}") from None
        self._since_checkpoint = len(records)
        return self.state, list(self.entries)

    def write(self, state: HardState | None, entries: list[Entry]) -> None:
        """Make ``state`` and ``entries`` durable (the entries replace the log from the first
        one's index on); returns once they are on disk."""
        if state is None and not entries:
            return
        if state is not None:
            self.wal.append(msgpack.packb(["state", state.term, state.vote]))
            self.state = state
        if entries:
            first = entries[0].index
            self.wal.append(msgpack.packb(["entries", first, [[e.term, e.data] for e in entries]]))
            del self.entries[first - 1 :]
            self.entries.extend(entries)
        self.wal.commit()
        self._since_checkpoint += 1
        if self._since_checkpoint >= self.checkpoint_every:
            self.wal.checkpoint(msgpack.packb(self._whole()))
            self._since_checkpoint = 0

    def close(self) -> None:
        self.wal.close()

    def _whole(self) -> list[Any]:
        return ["whole", self.state.term, self.state.vote, [[e.term, e.data] for e in self.entries]]

    def _apply(self, record: list[Any]) -> None:
        kind = record[0]
        if kind == "state":
            self.state = HardState(record[1], record[2])
        elif kind == "entries":
            first = record[1]
            if not 1 <= first <= len(self.entries) + 1:
                raise ValueError(f"entries from {first} after a log of {len(self.entries)}")
            del self.entries[first - 1 :]
            self.entries += [Entry(term, first + i, bytes(data)) for i, (term, data) in enumerate(record[2])]
        elif kind == "whole":
            self.state = HardState(record[1], record[2])
            self.entries = [Entry(term, i + 1, bytes(data)) for i, (term, data) in enumerate(record[3])]
        else:
            raise ValueError(f"unknown record {kind!r}")
