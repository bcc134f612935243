"""A publisher's outbox on disk: publications not yet acknowledged survive the client's process.

``Client(..., outbox=DIR)`` stores each publication here (one group commit for all those made
meanwhile) before sending it, and removes it when its edge broker acknowledges or refuses it. The
outbox also keeps what makes the publication's overlay-wide id: the client's name, its session
(``broker.messages.client_session``) and the highest number given, so a client started again on the same
outbox re-sends what it holds under the same ids (the broker, or the subscriber after a failover,
drops a copy that got through before the crash) and numbers its new publications after them.

Records of the write-ahead log (:mod:`broker.durable.log`), one byte of kind then the body:
``I`` client name, ``S`` session, ``N`` next number (snapshots only), ``+`` a Publish frame (the
wire codec's), ``-`` the ref of one acknowledged. A snapshot (msgpack list of records) is taken
once the log holds many more records than the publications still waiting, so the outbox stays
about as large as what waits.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path

import msgpack

from broker.client.reconnect import JITTER
from broker.durable import WriteAheadLog
from broker.durable.log import Fsync
from broker.durable.offload import Offload
from broker.errors import BadMessage, LocalError, ProtocolError
from broker.messages import ClientRef, Publish, client_session
from broker.transport.codec import decode, encode

__all__ = ["Outbox", "OutboxError"]

log = logging.getLogger(__name__)

CHECKPOINT_AFTER = 1024  # log records before a snapshot is worth it (and twice those waiting)
REMOVALS_WITHIN = 1.0  # seconds a removal may wait on its own for the commit of the next publication


class OutboxError(LocalError):
    """The outbox cannot be used: its directory holds something else, or the disk refused."""


class Outbox:
    """The outbox in ``directory`` (one process at a time): what waits, and who sends it.

    ``client`` is the name to connect under: the outbox's own (re-sent publications keep their
    ids only under it), or for a new outbox ``client_id`` (else a new name)."""

    def __init__(self, directory: Path, client_id: str | None = None, fsync: Fsync = "group") -> None:
        self.directory = directory
        self.client = ""  # the name its publications were sent under
        self.session = ""
        self.next = 1  # the lowest number no publication of this session has had
        self.pending: dict[str, bytes] = {}  # ref -> its "+" record, in the order made
        self._wal = WriteAheadLog(directory, fsync)
        try:
            snapshot, records = self._wal.recover()
            for record in [*(msgpack.unpackb(snapshot) if snapshot else ()), *records]:
                self._apply(record)
            self.recovered = [self._message(record) for record in self.pending.values()]
            if self.client and client_id and client_id != self.client:
                raise OutboxError(
                    f"outbox {directory} belongs to client {self.client!r}, not {client_id!r}:"
                    " the publications it holds must be re-sent under the same name"
                )
        except BaseException:
            self._wal.close()
            raise
        self._held: list[bytes] | None = None  # records made while a snapshot is written
        self._added = self._committed = 0  # records counted since this process started
        self._committing: asyncio.Task[None] | None = None
        self._offload = Offload()  # where commits run: on the loop while the disk is fast
        self._removals: asyncio.TimerHandle | None = None  # a commit of removals alone, due later
        self._closed = False
        if not self.client:
            self.client = client_id or f"c-{uuid.uuid4().hex[:10]}"
            self._append(b"I" + self.client.encode())
        if not self.session:
            self.session = client_session(time.time(), JITTER.getrandbits(32))
            self._append(b"S" + self.session.encode())

    def _apply(self, record: bytes) -> None:
        kind, body = record[:1], record[1:]
        if kind == b"+":
            ref = self._message(record).id
            self.pending[ref] = record
            self.next = max(self.next, ClientRef.parse(ref).number + 1)
        elif kind == b"-":
            self.pending.pop(body.decode(), None)
        elif kind == b"I":
            self.client = body.decode()
        elif kind == b"S":
            self.session = body.decode()
        elif kind == b"N":
            self.next = max(self.next, int(body))
        else:
            raise OutboxError(f"outbox {self.directory}: unknown record kind {kind!r}")

    def _message(self, record: bytes) -> Publish:
        try:
            message = decode(record[5:])  # after the kind and the frame's length
        except BadMessage as error:
            raise OutboxError(f"outbox {self.directory}: a record is not a publication: {error}") from None
        if not isinstance(message, Publish):
            raise OutboxError(
                f"outbox {self.directory}: a record is a {type(message).__name__}, not a publication"
            )
        return message

    # changes --------------------------------------------------------------------------------------

    def _append(self, record: bytes) -> None:
        self._added += 1
        if self._held is not None:
            self._held.append(record)
        else:
            self._wal.append(record)

    def add(self, message: Publish) -> None:
        """Keep ``message`` (on disk after the next :meth:`flush`). OutboxError, and nothing
        kept, if it cannot be sent: kept, it would fail again at every start of the client."""
        try:
            record = b"+" + encode(message)
        except ProtocolError as error:  # too large for a frame, or not encodable
            raise OutboxError(
                f"a publication of class {message.publication.cls} is not kept in outbox"
                f" {self.directory}, it cannot be sent: {error}"
            ) from None
        self._append(record)
        self.pending[message.id] = record
        self.next = max(self.next, ClientRef.parse(message.id).number + 1)

    def remove(self, ref: str) -> None:
        """The publication ``ref`` needs no re-sending; written to disk with the next commit, or
        within REMOVALS_WITHIN seconds in the background (were it lost in a crash, the copy
        re-sent would be dropped as a duplicate). Not at once: a commit of its own per
        acknowledgement was one more fsync per publication, which a busy agent's disk and the
        brokers' logs beside it paid for (about one in ten fsyncs of a job)."""
        if self.pending.pop(ref, None) is not None:
            self._append(b"-" + ref.encode())
            if self._removals is None and not self._closed:
                self._removals = asyncio.get_running_loop().call_later(REMOVALS_WITHIN, self._remove_now)

    def _remove_now(self) -> None:
        self._removals = None
        if self._closed or self._committed >= self._added:
            return  # a commit took them meanwhile
        if self._committing is None:
            self._start_commit()
        else:  # it may have started before them
            self._removals = asyncio.get_running_loop().call_later(REMOVALS_WITHIN, self._remove_now)

    # the disk -------------------------------------------------------------------------------------

    def _start_commit(self) -> asyncio.Task[None]:
        task = self._committing = asyncio.get_running_loop().create_task(self._commit())
        task.add_done_callback(self._committed_or_not)
        return task

    def _committed_or_not(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.warning("outbox %s: cannot write to disk: %s", self.directory, task.exception())

    async def flush(self) -> None:
        """Return once every change made before the call is on disk; OSError if the disk
        refuses (what was not written is written by a later flush)."""
        target = self._added
        while self._committed < target:
            mine = self._committing is None
            task = self._start_commit() if self._committing is None else self._committing
            try:
                await asyncio.shield(task)
            except OSError:
                if mine:  # else one started earlier failed: ours may not (the disk may have room now)
                    raise

    async def _commit(self) -> None:
        """One group commit, or a snapshot when the log has grown well past what waits."""
        upto = self._added
        try:
            if self._wal.records_since_checkpoint >= max(CHECKPOINT_AFTER, 2 * len(self.pending)):
                await self._checkpoint()
            else:
                await self._offload.run(self._wal.commit)
            self._committed = max(self._committed, upto)
        finally:
            self._committing = None  # before the waiters wake: they may start the next one

    async def _checkpoint(self) -> None:
        snapshot = msgpack.packb(self._snapshot())
        self._held = []  # what comes meanwhile is not in the snapshot: it goes to the new log
        try:
            await asyncio.to_thread(self._wal.checkpoint, snapshot)
        finally:
            held, self._held = self._held, None
            for record in held:
                self._wal.append(record)

    def _snapshot(self) -> list[bytes]:
        header = [b"I" + self.client.encode(), b"S" + self.session.encode(), b"N%d" % self.next]
        return header + list(self.pending.values())

    async def close(self) -> None:
        """Write what is left (removals) and release the directory."""
        self._closed = True
        if self._removals is not None:
            self._removals.cancel()
        try:
            await self.flush()
        except OSError as error:
            log.warning("outbox %s: cannot write to disk: %s", self.directory, error)
        finally:
            await asyncio.to_thread(self._wal.close)
