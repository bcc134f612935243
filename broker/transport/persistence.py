"""A broker's state on disk: the router's inputs in a write-ahead log, its whole state in snapshots.

The router is a deterministic state machine (``handle(message, hop, now)``, nothing else changes
it), so the log holds its inputs, not its tables: replaying them through the last snapshot gives
back the same router, custody channels, durable sessions, composite join state and duplicate
filters included. ``RouterService`` records each input before it handles it and holds what the
router answers until the commit that covers the input, so nothing leaves the broker (an ``Ack``
to a publisher, a ``Took`` to a neighbour: custody taken) that a crash could undo.

Records and snapshots are pickles: the log is this process's own, in a directory only it may
read (0700), written and read by the same code.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections.abc import Callable
from pathlib import Path

from broker.durable.log import Fsync, WriteAheadLog
from broker.errors import LocalError
from broker.routing import Router
from broker.routing.messages import Message

__all__ = ["CHECKPOINT_RECORDS", "Fsync", "RouterLog"]

log = logging.getLogger("broker")

SNAPSHOT_FORMAT = 5  # raised whenever the router's state changes shape, or what replaying its log sends
# (a peer's custody seqs would be out of step): 4: detections stay where placed; 5: stand-ins go upstream
CHECKPOINT_RECORDS = 20_000  # inputs between two snapshots: what a restart may have to replay
CHECKPOINT_BYTES = 32 << 20


class RouterLog:
    def __init__(
        self, directory: Path, fsync: Fsync = "group", checkpoint_every: int = CHECKPOINT_RECORDS
    ) -> None:
        self.wal = WriteAheadLog(directory, fsync)
        self.directory = directory
        self.checkpoint_every = checkpoint_every

    def restore(self, fresh: Callable[[], Router]) -> Router:
        """The router as the log left it, or ``fresh()`` for an empty log (snapshotted at once,
        so the custody epoch it starts is the one a restart comes back with)."""
        started = time.monotonic()
        snapshot, records = self.wal.recover()
        if snapshot is None and not records:
            router = fresh()
            self.checkpoint(router)
            return router
        if snapshot is None:  # the first snapshot is written before any record: it was lost
            raise LocalError(
                f"{self.directory}: the log has records but no usable snapshot, so the broker's "
                "custody epoch is lost; move the directory away to start this broker afresh"
            )
        router = self._router(snapshot)
        quiet = logging.getLogger("broker.routing")
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # what it logged then, it does not log again
        failed = 0
        try:
            for record in records:
                hop, now, message = pickle.loads(record)
                try:
                    router.handle(message, hop, now)
                except Exception:  # as when it was live (RouterService._feed): one message, not the broker
                    failed += 1
        finally:
            quiet.setLevel(level)
        if failed:
            log.warning(
                "%s: %d logged inputs failed again in the router, as they did live", self.directory, failed
            )
        log.info(
            "%s restored from %s: snapshot and %d inputs in %.2f s",
            router.id,
            self.directory,
            len(records),
            time.monotonic() - started,
        )
        return router

    def record(self, message: Message, hop: str, now: float) -> None:
        self.wal.append(pickle.dumps((hop, now, message), pickle.HIGHEST_PROTOCOL))

    def due(self) -> bool:
        return (
            self.wal.records_since_checkpoint >= self.checkpoint_every
            or self.wal.log_bytes >= CHECKPOINT_BYTES
        )

    def checkpoint(self, router: Router) -> None:
        self.wal.checkpoint(pickle.dumps((SNAPSHOT_FORMAT, router), pickle.HIGHEST_PROTOCOL))

    def _router(self, snapshot: bytes) -> Router:
        """The router in a snapshot of this version's format; LocalError for another's, which
        would fail on every message (its state lacks what this code expects)."""
        try:
            loaded = pickle.loads(snapshot)
        except Exception as error:  # a class or attribute this code no longer has
            loaded = error
        if isinstance(loaded, tuple) and len(loaded) == 2 and loaded[0] == SNAPSHOT_FORMAT:
            return loaded[1]  # type: ignore[no-any-return]
        found = loaded[0] if isinstance(loaded, tuple) and loaded else "an older one"
        raise LocalError(
            f"{self.directory}: the snapshot was written by another version of the broker (format "
            f"{found}, this one reads {SNAPSHOT_FORMAT}); move the directory away to start this "
            "broker afresh"
        )

    def close(self) -> None:
        self.wal.close()
