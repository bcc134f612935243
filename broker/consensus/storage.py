"""A site member's consensus state on disk, on the broker's write-ahead log.

What ``Node.ready()`` hands out to write (``HardState``, entries from an index on) becomes one
record each, and :meth:`SiteLog.write` commits them (one fsync for the batch) before it returns:
the caller sends the batch's messages only after that, which is the whole of what Raft asks of
a disk (``docs/sites.md``). Records are msgpack arrays: ``["state", term, vote]`` and
``["entries", first index, [[term, data], ...]]``; an entries record replaces whatever the log
held from its first index on, as a follower's log is cut where a leader's disagrees. Replayed in
order, the last state and the entries as cut and extended are what the member had promised.

The log's snapshot (the write-ahead log's checkpoint) is the whole of it: ``["whole", term, vote,
[[term, data], ...]]`` and, once the log is compacted, the state machine's snapshot after it
(``index, term, data``: the entries listed follow it). It is written every ``checkpoint_every``
records, so a restart replays a bounded tail, and at once when the log is compacted
(:meth:`SiteLog.compact`: the state machine's snapshot replaces the entries it stands for, so the
log does not grow forever) or a leader's snapshot is installed (:meth:`SiteLog.write` with a
snapshot). A restart (:meth:`SiteLog.load`) gives the snapshot back with the entries after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from broker.durable.log import Fsync, LogCorrupt, WriteAheadLog
from broker.errors import LocalError
from broker.messages.consensus import Entry, HardState, Snapshot

__all__ = ["Recovered", "SiteLog"]

CHECKPOINT_RECORDS = 10_000


@dataclass(frozen=True, slots=True)
class Recovered:
    """What a member had written: its term and vote, its latest snapshot (None if its log was
    never compacted) and the entries after it; ``Node(config, now, random, r.state, r.entries,
    snapshot=r.snapshot)`` once the state machine is restored from ``r.snapshot``."""

    state: HardState = field(default_factory=HardState)
    snapshot: Snapshot | None = None
    entries: list[Entry] = field(default_factory=list)


class SiteLog:
    """The consensus state of one member of a site, in ``directory`` (one process at a time);
    :meth:`load` first, then :meth:`write` and :meth:`compact`."""

    def __init__(self, directory: Path, fsync: Fsync = "group", checkpoint_every: int = CHECKPOINT_RECORDS):
        self.wal = WriteAheadLog(directory, fsync)
        self.directory = directory
        self.checkpoint_every = checkpoint_every
        self.state = HardState()
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []  # those after the snapshot
        self._since_checkpoint = 0

    @property
    def _offset(self) -> int:
        return self.snapshot.index if self.snapshot is not None else 0

    def load(self) -> Recovered:
        """What the member had written: its term and vote, its snapshot and the entries after it."""
        snapshot, records = self.wal.recover()
        try:
            if snapshot is not None:
                self._apply(msgpack.unpackb(snapshot, raw=False))
            for record in records:
                self._apply(msgpack.unpackb(record, raw=False))
        except (ValueError, TypeError, msgpack.UnpackException) as error:
            raise LogCorrupt(f"{self.directory}: a consensus record cannot be read: {error}") from None
        self._since_checkpoint = len(records)
        return Recovered(self.state, self.snapshot, list(self.entries))

    def recover(self) -> tuple[HardState, list[Entry]]:
        """What a member whose log was never compacted had written: its term and vote, and its
        entries. A compacted log is refused (its entries would be taken for the whole log):
        :meth:`load` gives its snapshot too."""
        recovered = self.load()
        if recovered.snapshot is not None:
            raise LocalError(f"{self.directory}: the site's log is compacted: load() gives its snapshot too")
        return recovered.state, recovered.entries

    def write(self, state: HardState | None, entries: list[Entry], snapshot: Snapshot | None = None) -> None:
        """Make ``state``, ``snapshot`` and ``entries`` durable (the snapshot replaces the whole
        log, the entries replace it from the first one's index on); returns once they are on
        disk."""
        if state is None and not entries and snapshot is None:
            return
        if snapshot is not None:  # a leader's: the log is what it says and what follows it
            if snapshot.index <= self._offset:
                raise ValueError(f"snapshot {snapshot.index} is older than the log's ({self._offset})")
            if state is not None:
                self.state = state
            self.snapshot, self.entries = snapshot, []
            self._extend(entries)
            self._checkpoint()
            return
        if state is not None:
            self.wal.append(msgpack.packb(["state", state.term, state.vote]))
            self.state = state
        if entries:
            self.wal.append(msgpack.packb(["entries", entries[0].index, [[e.term, e.data] for e in entries]]))
            self._extend(entries)
        self.wal.commit()
        self._since_checkpoint += 1
        if self._since_checkpoint >= self.checkpoint_every:
            self._checkpoint()

    def compact(self, snapshot: Snapshot) -> None:
        """The state machine's ``snapshot`` (``Node.compact``'s) stands for the entries up to
        its index from now on: they are dropped, and the log is written afresh as the snapshot
        and the entries after it. One no newer than the log's changes nothing."""
        if snapshot.index <= self._offset:
            return
        position = snapshot.index - self._offset
        if position > len(self.entries) or self.entries[position - 1].term != snapshot.term:
            raise ValueError(f"snapshot {snapshot.index} (term {snapshot.term}) is of no entry the log holds")
        self.snapshot, self.entries = snapshot, self.entries[position:]
        self._checkpoint()

    def close(self) -> None:
        self.wal.close()

    def _extend(self, entries: list[Entry]) -> None:
        if entries:
            first, last = entries[0].index, self._offset + len(self.entries)
            if not self._offset < first <= last + 1:
                raise ValueError(f"entries from {first} after a log of {last} (compacted to {self._offset})")
            del self.entries[entries[0].index - self._offset - 1 :]
            self.entries.extend(entries)

    def _checkpoint(self) -> None:
        self.wal.checkpoint(msgpack.packb(self._whole()))
        self._since_checkpoint = 0

    def _whole(self) -> list[Any]:
        whole = ["whole", self.state.term, self.state.vote, [[e.term, e.data] for e in self.entries]]
        if self.snapshot is not None:
            whole += [self.snapshot.index, self.snapshot.term, self.snapshot.data]
        return whole

    def _apply(self, record: list[Any]) -> None:
        kind = record[0]
        if kind == "state":
            self.state = HardState(record[1], record[2])
        elif kind == "entries":
            first, offset = record[1], self._offset
            if not offset + 1 <= first <= offset + len(self.entries) + 1:
                raise ValueError(f"entries from {first} after a log of {offset + len(self.entries)}")
            del self.entries[first - offset - 1 :]
            self.entries += [Entry(term, first + i, bytes(data)) for i, (term, data) in enumerate(record[2])]
        elif kind == "whole":
            self.state = HardState(record[1], record[2])
            self.snapshot = Snapshot(record[4], record[5], bytes(record[6])) if len(record) > 4 else None
            offset = self._offset
            self.entries = [
                Entry(term, offset + i + 1, bytes(data)) for i, (term, data) in enumerate(record[3])
            ]
        else:
            raise ValueError(f"unknown record {kind!r}")
