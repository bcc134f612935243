"""A write-ahead log with group commit and snapshots: what a process must not lose, on disk.

The owner appends records (bytes) as its state changes, commits them (one write and one fsync for
everything appended since the last commit: *group commit*), and from time to time hands over a
snapshot of its whole state: the log then starts afresh, so disk use and restart time are bounded
by the state, not by history. On restart, :meth:`WriteAheadLog.recover` returns the last snapshot
and the records after it, in order.

Files in the directory (mode 0700, :func:`private_directory`; files 0600), one *generation*
``N`` each:

- ``log-N``: records appended after snapshot ``N``; each is a 4-byte length, a CRC32 (of the
  length and the record) and the record.
- ``snap-N``: a snapshot covering every record of the generations before ``N`` (``snap-0`` is
  the empty state and never written): magic, length, CRC32, blob.
- ``lock``: held (``flock``) by the one process that may use the directory.

A checkpoint to generation ``N+1`` first commits what is buffered to ``log-N``, then writes
``snap-N+1`` atomically (temporary file, fsync, rename, fsync of the directory), creates
``log-N+1``, and deletes the generations before ``N``. Generation ``N`` is kept, so a corrupt
latest snapshot falls back to ``snap-N`` + ``log-N`` + ``log-N+1``: the same state. A crash between
any two steps leaves either the old generation complete or the new one; a leftover temporary file
is ignored.

A crash in the middle of a commit leaves a torn last record: recovery cuts the log there, with one
warning naming the file and offset. A commit that fails (a full disk, EIO) raises the ``OSError``,
cuts the file back to what was committed before, and keeps the records it did not write: the next
commit writes them again. ``fsync="each"`` syncs after every record (to measure what group commit
saves), ``"off"`` never syncs (survives the process dying, not the machine). ``flush`` writes
what is appended without syncing it, for an owner that decides record by record which must be
durable before it acts (the next ``commit`` or checkpoint syncs it).

No asyncio here: ``commit`` blocks; an asyncio owner runs it through ``offload.Offload``, on its
loop while commits are fast and in a thread (its loop going on appending) while they are not.
``checkpoint`` blocks too; its snapshot must be of the state that the records appended so far
reached, so a broker calls it in its loop, between inputs.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import secrets
import stat
import struct
import threading
import zlib
from pathlib import Path
from typing import Literal

from broker import failpoints
from broker.errors import LocalError

__all__ = [
    "LogCorrupt",
    "LogInUse",
    "WriteAheadLog",
    "private_directory",
    "read_snapshot",
    "replace_atomically",
]

log = logging.getLogger(__name__)

Fsync = Literal["group", "each", "off"]
_HEADER = struct.Struct(">II")  # record length, CRC32 of the length's bytes and the record
_SNAPSHOT = struct.Struct(">8sQI")  # magic, blob length, CRC32 of the blob
_MAGIC = b"wfmsnap1"
_NAME = re.compile(r"(log|snap)-(\d{1,12})\Z")
MAX_RECORD = 1 << 30  # a length above this is garbage, not a record


class LogInUse(LocalError):
    """Another process (or another log object) holds the directory's lock."""


class LogCorrupt(LocalError):
    """A log directory that cannot be recovered without losing what was committed."""


def _frame(record: bytes) -> bytes:
    length = len(record).to_bytes(4, "big")
    return length + zlib.crc32(record, zlib.crc32(length)).to_bytes(4, "big") + record


def _records(data: bytes) -> tuple[list[bytes], int]:
    """The whole records at the start of ``data``, and where the first bad or torn one starts."""
    records: list[bytes] = []
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, crc = _HEADER.unpack_from(data, offset)
        end = offset + _HEADER.size + length
        if length > MAX_RECORD or end > len(data):
            break
        record = data[offset + _HEADER.size : end]
        if zlib.crc32(record, zlib.crc32(data[offset : offset + 4])) != crc:
            break
        records.append(record)
        offset = end
    return records, offset


def private_directory(path: Path) -> Path:
    """``path``, a directory only its owner may enter: made with mode 0700 if missing (its
    parents as the umask says), or, if group or others had any permission on it, narrowed to
    0700 (logged at INFO; a directory this user does not own is left as it is, with a warning).
    Whatever lies beneath it, whatever its mode, is then out of other users' reach: the one
    mechanism for agents' state, the history store and brokers' logs, which hold every envelope."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        narrowed = mode & ~0o077
        try:
            path.chmod(narrowed)
        except PermissionError:
            log.warning("%s is open to other users (mode %04o) and not ours to narrow", path, mode)
        else:
            log.info("%s was open to other users (mode %04o): now %04o, owner only", path, mode, narrowed)
    return path


def _open(path: Path, flags: int) -> int:
    return os.open(path, flags | os.O_CLOEXEC, 0o600)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(path: Path, data: bytes, *, mode: int = 0o600, sync: bool = True) -> None:
    """``path`` holds its old content or all of ``data``, with ``mode`` whatever the umask: the
    one way this project replaces a file (snapshots, certificates, keys, a puppet's state).

    ``data`` goes to a temporary file of its own beside ``path`` (a unique name: two writers never
    share one; a crash leaves it behind, ending in ``.tmp``), which is renamed over ``path``.
    ``sync`` fsyncs the file before the rename and the directory after it, so the machine
    stopping leaves one or the other; without it, the process dying does (the rename is atomic),
    and the kernel writes the data back when it will."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = _open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        try:
            os.fchmod(fd, mode)  # the umask only takes bits away
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if sync:
        _sync_directory(path.parent)


def read_snapshot(path: Path) -> bytes | None:
    """The blob of the snapshot file ``path``, or None if it is not whole. Reading needs no lock:
    a snapshot file is never changed once renamed into place (a tool may read a live log's)."""
    data = path.read_bytes()
    if len(data) >= _SNAPSHOT.size:
        magic, length, crc = _SNAPSHOT.unpack_from(data)
        blob = data[_SNAPSHOT.size :]
        if magic == _MAGIC and length == len(blob) and zlib.crc32(blob) == crc:
            return blob
    return None


class _Segment:
    """The log file being appended to, and how much of it is committed (``size``)."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.file = open(_open(path, os.O_RDWR | os.O_CREAT), "r+b", buffering=0)  # noqa: SIM115
        self.size = size
        self.dirty = False  # bytes past ``size`` may be on disk: cut them before writing more
        self.unsynced = False  # bytes up to ``size`` written and not fsync'd (:meth:`WriteAheadLog.flush`)

    def write(self, data: bytes, sync: bool) -> None:
        if self.dirty:
            self.file.truncate(self.size)
            self.dirty = False
        self.dirty = True
        self.file.seek(self.size)
        view = memoryview(data)
        while view:
            written = self.file.write(view)
            if not written:
                raise OSError(f"{self.path}: short write")
            view = view[written:]
        if sync:
            os.fsync(self.file.fileno())
        self.size += len(data)
        self.dirty = False
        self.unsynced = not sync

    def sync(self) -> None:
        os.fsync(self.file.fileno())
        self.unsynced = False

    def close(self) -> None:
        self.file.close()


class WriteAheadLog:
    """The log in ``directory`` (created if missing): ``recover()`` first, then ``append`` and
    ``commit``, and ``checkpoint`` when the log has grown past what a snapshot would cost."""

    def __init__(self, directory: Path, fsync: Fsync = "group") -> None:
        if fsync not in ("group", "each", "off"):
            raise ValueError(f"fsync must be 'group', 'each' or 'off', not {fsync!r}")
        self.directory = Path(directory)
        self.fsync = fsync
        private_directory(self.directory)
        self._lock_fd = _open(self.directory / "lock", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._lock_fd, 16, 0).decode("ascii", "replace").strip()
            os.close(self._lock_fd)
            held = f"process {holder} holds its lock" if holder.isdigit() else "its lock is held"
            raise LogInUse(f"{self.directory} is in use by another process ({held})") from None
        os.ftruncate(self._lock_fd, 0)  # who holds it, for the error the next one gets
        os.pwrite(self._lock_fd, f"{os.getpid()}\n".encode(), 0)
        self._buffer: list[bytes] = []  # framed records appended and not yet committed
        self._buffered = 0  # their bytes
        self._mutex = threading.Lock()  # the buffer: append against commit's swap
        self._io = threading.Lock()  # one commit or checkpoint at a time
        self._segment: _Segment | None = None
        self.generation = 0
        self.records_since_checkpoint = 0

    @property
    def log_bytes(self) -> int:
        """Bytes logged since the last snapshot, committed or still buffered."""
        return (self._segment.size if self._segment else 0) + self._buffered

    # recovery -----------------------------------------------------------------------------------

    def _generations(self, kind: str) -> list[int]:
        found = (_NAME.match(p.name) for p in self.directory.iterdir())
        return sorted(int(m[2]) for m in found if m is not None and m[1] == kind)

    def _path(self, kind: str, generation: int) -> Path:
        return self.directory / f"{kind}-{generation}"

    def _read_snapshot(self, generation: int) -> bytes | None:
        """The blob of ``snap-<generation>``, or None (with a warning) if it is not whole."""
        path = self._path("snap", generation)
        blob = read_snapshot(path)
        if blob is None:
            log.warning("%s: corrupt snapshot, falling back to the one before", path)
        return blob

    def recover(self) -> tuple[bytes | None, list[bytes]]:
        """The last good snapshot (None: the empty state) and the records committed after it,
        in order. Cuts a torn or corrupt tail off the last log file (one warning); a corrupt
        snapshot falls back to the one before; LogCorrupt if that cannot give the whole state."""
        if self._segment is not None:
            raise RuntimeError(f"{self.directory}: recover() is called once, before appending")
        for leftover in self.directory.glob("*.tmp"):  # a checkpoint that did not finish
            leftover.unlink()
        logs = self._generations("log")
        snapshots = self._generations("snap")
        snapshot, base = None, 0
        for generation in reversed(snapshots):
            snapshot = self._read_snapshot(generation)
            if snapshot is not None:
                base = generation
                break
        if snapshots and snapshot is None and 0 not in logs:
            raise LogCorrupt(f"{self.directory}: every snapshot is corrupt and the logs before them are gone")
        last = max([base, *logs])
        missing = [g for g in range(base, last) if g not in logs]
        if missing:
            raise LogCorrupt(f"{self.directory}: log-{missing[0]} is missing (records after snap-{base})")
        records: list[bytes] = []
        for generation in range(base, last + 1):
            path = self._path("log", generation)
            data = path.read_bytes() if generation in logs else b""
            found, end = _records(data)
            if end < len(data):
                if generation != last:
                    raise LogCorrupt(f"{path}: corrupt record at offset {end} before the last log")
                log.warning(
                    "%s: cut off a torn or corrupt tail at offset %d (%d bytes)", path, end, len(data) - end
                )
            records += found
            if generation == last:
                self._segment = _Segment(path, end)
                self._segment.file.truncate(end)
                if self.fsync != "off":
                    os.fsync(self._segment.file.fileno())
                    _sync_directory(self.directory)
        self.generation = last
        self.records_since_checkpoint = len(records)
        return snapshot, records

    # appending ----------------------------------------------------------------------------------

    def append(self, record: bytes) -> None:
        """Buffer one record; it is on disk after the next :meth:`commit`."""
        framed = _frame(record)
        with self._mutex:
            self._buffer.append(framed)
            self._buffered += len(framed)
            self.records_since_checkpoint += 1

    def _take(self) -> list[bytes]:
        with self._mutex:
            batch, self._buffer, self._buffered = self._buffer, [], 0
            return batch

    def _put_back(self, batch: list[bytes]) -> None:
        with self._mutex:
            self._buffer[:0] = batch
            self._buffered += sum(map(len, batch))

    def _write(self, segment: _Segment, batch: list[bytes], each: bool = True, sync: bool = True) -> None:
        """Write ``batch`` and (``sync``, unless ``fsync="off"``) sync it with what was flushed
        before; on an error, give back what was not written, and raise. ``each`` False writes it
        with one sync even under ``fsync="each"``."""
        sync = sync and self.fsync != "off"
        done = 0
        try:
            if self.fsync == "each" and each and sync:
                for framed in batch:
                    segment.write(framed, sync=True)
                    done += 1
            elif batch:
                segment.write(b"".join(batch), sync=sync)
                done = len(batch)
            if sync and segment.unsynced:  # flushed before, nothing new to write
                segment.sync()
        finally:
            if done < len(batch):
                self._put_back(batch[done:])
                try:
                    segment.file.truncate(segment.size)
                    segment.dirty = False
                except OSError:
                    pass  # still dirty: the next write cuts the file first

    def _current(self) -> _Segment:
        if self._segment is None:
            raise RuntimeError(f"{self.directory}: call recover() before committing")
        return self._segment

    def commit(self) -> int:
        """Write and sync every record appended before the call (how many), and those
        :meth:`flush` wrote. Blocking."""
        with self._io:
            segment = self._current()
            batch = self._take()
            self._write(segment, batch)
            return len(batch)

    def flush(self) -> int:
        """Write every record appended before the call (how many) and sync none: they survive
        the process dying, not the machine, until the next :meth:`commit` or checkpoint. For an
        owner whose records need not all be durable at once (an agent's runs' ends). Blocking."""
        with self._io:
            segment = self._current()
            batch = self._take()
            self._write(segment, batch, sync=False)
            return len(batch)

    def checkpoint(self, snapshot: bytes) -> None:
        """Store ``snapshot``, the state after every record appended before the call, and start a
        new generation; the generation before the previous one is deleted. Blocking."""
        with self._io:
            segment = self._current()
            # the previous generation stays whole, to fall back on; what is buffered was acknowledged
            # to no one yet, so one sync covers it whatever the mode (a sync per record here froze
            # a broker for seconds)
            self._write(segment, self._take(), each=False)
            sync = self.fsync != "off"
            generation = self.generation + 1
            header = _SNAPSHOT.pack(_MAGIC, len(snapshot), zlib.crc32(snapshot))
            replace_atomically(self._path("snap", generation), header + snapshot, sync=sync)
            failpoints.reach("wal.checkpoint.snapshot")  # the new snapshot, and no log after it
            fresh = _Segment(self._path("log", generation), 0)
            fresh.file.truncate(0)
            if sync:
                _sync_directory(self.directory)
            failpoints.reach("wal.checkpoint.log")  # the new generation whole, the old ones left
            segment.close()
            with self._mutex:
                self._segment, self.generation = fresh, generation
                self.records_since_checkpoint = len(self._buffer)  # appended while this ran
            for kind in ("log", "snap"):
                for old in self._generations(kind):
                    if old < generation - 1:
                        self._path(kind, old).unlink()

    def close(self) -> None:
        """Release the directory. Records not committed are not written."""
        with self._io:
            if self._segment is not None:
                self._segment.close()
                self._segment = None
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1
