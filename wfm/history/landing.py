"""The historian's landing log: publications appended as JSON lines, fsync'd in small batches.

One line per publication::

    {"id": "b1-42", "time": 1795000000.25, "publisher": "agentA", "class": "JOBSTATUS",
     "attributes": {"applname": "PAYROLL", "duration": 12.5}}

``time`` is the broker's timestamp in seconds since the epoch. Lines go to segment files in
``STORE/landing/``; a writer always starts a new segment, holds an exclusive ``flock`` on the one it
writes, and rolls over to a new one past ``segment_bytes``. A segment nobody holds is *sealed*:
compaction may take it. No clock is read here: the caller passes ``now`` to :meth:`maybe_flush`.

Reading tolerates a torn last line (a writer killed mid-write) and keeps the first line of each id,
so a publication landed twice (a historian restarted before its last batch was acknowledged) is
read once.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time as clock
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from broker.language import Publication

__all__ = [
    "SEGMENT_SUFFIX",
    "Landing",
    "StoredPublication",
    "fsync_path",
    "read_landing",
    "sealed_segments",
    "segments",
]

log = logging.getLogger("wfm.history")

SEGMENT_SUFFIX = ".jsonl"


@dataclass(frozen=True, slots=True)
class StoredPublication:
    """A publication as the store keeps it: with its id, broker time and publisher."""

    id: str
    time: float
    publisher: str
    publication: Publication

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "time": self.time,
                "publisher": self.publisher,
                "class": self.publication.cls,
                "attributes": dict(self.publication.fields),
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> StoredPublication:
        publication = Publication(record["class"], record["attributes"])
        return cls(str(record["id"]), float(record["time"]), str(record["publisher"]), publication)


def segments(directory: Path) -> list[Path]:
    """Every segment, oldest first (names start with their creation time in nanoseconds)."""
    return sorted(directory.glob("*" + SEGMENT_SUFFIX)) if directory.is_dir() else []


def sealed_segments(directory: Path) -> list[Path]:
    """The segments no writer holds: those compaction may take and then remove."""
    sealed = []
    for path in segments(directory):
        with open(path, "rb") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            fcntl.flock(handle, fcntl.LOCK_UN)
        sealed.append(path)
    return sealed


def read_landing(paths: Iterable[Path]) -> Iterator[StoredPublication]:
    """The publications in these segments, each id once; torn or corrupt lines are skipped."""
    seen: set[str] = set()
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    stored = StoredPublication.from_record(json.loads(line))
                except (ValueError, KeyError, TypeError):
                    if line.endswith("\n"):  # a torn last line is expected after a crash; this is not
                        log.warning("%s:%d: skipping a corrupt landing line", path, number)
                    continue
                if stored.id not in seen:
                    seen.add(stored.id)
                    yield stored


def fsync_path(path: Path) -> None:
    """Make a file's content, or the creations and removals in a directory, durable."""
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


class Landing:
    """Appends publications to the landing log; :meth:`flush` makes them durable (write + fsync).

    ``maybe_flush(now)`` flushes once ``batch_count`` lines are pending or ``batch_seconds`` have
    passed since the last flush; :attr:`durable` counts the lines known to be on disk.
    """

    def __init__(
        self,
        directory: Path | str,
        batch_count: int = 512,
        batch_seconds: float = 0.05,
        segment_bytes: int = 64 << 20,
    ) -> None:
        self.directory = Path(directory)
        self.batch_count = batch_count
        self.batch_seconds = batch_seconds
        self.segment_bytes = segment_bytes
        self.durable = 0
        self.batches = 0  # flushes that wrote something: one fsync each
        self._pending: list[str] = []
        self._last_flush: float | None = None
        self._segment: IO[bytes] | None = None
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # in the store, which is 0700 too

    def append(self, publication: Publication, time: float, publisher: str, id: str) -> None:
        self._pending.append(StoredPublication(id, time, publisher, publication).to_json() + "\n")

    @property
    def pending(self) -> int:
        return len(self._pending)

    def maybe_flush(self, now: float) -> int:
        """Flush if the batch is full or old enough; returns the number of lines made durable."""
        if self._last_flush is None:
            self._last_flush = now
        if len(self._pending) >= self.batch_count or (
            self._pending and now - self._last_flush >= self.batch_seconds
        ):
            self._last_flush = now
            return self.flush()
        return 0

    def flush(self) -> int:
        """Write and fsync every pending line; returns how many."""
        if not self._pending:
            return 0
        segment = self._segment or self._open_segment()
        segment.write("".join(self._pending).encode())
        segment.flush()
        os.fsync(segment.fileno())
        count = len(self._pending)
        self.durable += count
        self.batches += 1
        self._pending.clear()
        if segment.tell() >= self.segment_bytes:
            self._close_segment()
        return count

    def close(self) -> None:
        self.flush()
        self._close_segment()

    def _open_segment(self) -> IO[bytes]:
        path = self.directory / f"{clock.time_ns():020d}-{os.getpid()}{SEGMENT_SUFFIX}"
        # 0600: every publication, wherever the landing log is; held open across flushes
        segment = open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")  # noqa: SIM115
        fcntl.flock(segment, fcntl.LOCK_EX)
        fsync_path(self.directory)  # the new file's name is durable too
        self._segment = segment
        return segment

    def _close_segment(self) -> None:
        if self._segment is not None:
            self._segment.close()  # releases the lock: the segment is sealed
            self._segment = None

    def __enter__(self) -> Landing:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
