"""A broker's state on disk: the router's inputs in a write-ahead log, its state in snapshots.

The router is a deterministic state machine (``handle(message, hop, now)``, nothing else changes
it), so the log holds its inputs, not its tables: replaying them through the last snapshot gives
back the same router, custody channels, durable sessions, composite join state and duplicate
filters included. ``RouterService`` records each input before it handles it and holds what the
router answers until the commit that covers the input, so nothing leaves the broker (an ``Ack``
to a publisher, a ``Took`` to a neighbour: custody taken) that a crash could undo.

An input that came off a link is logged as its wire frame (:func:`broker.transport.codec.encode`,
cheaper than a pickle, and the broker logs every input), the router's own (``LinkUp``,
``LinkDown``, ``Tick``) as pickles: the log is this process's own, in a directory only it may
read (0700), written and read by the same code. A pickle starts with byte 0x80, a wire record
with ``W``.

A snapshot is ``(format, state)``, pickled: the state is :meth:`Router.snapshot`, each stateful
part's attributes by name (:mod:`broker.routing.snapshots`), not the router object.
``SNAPSHOT_FORMAT`` is raised whenever that state changes shape or replaying the same records
would send something else (a peer's custody seqs would be out of step).

**Which formats are read.** A broker reads its own format and the one before it
(``READABLE``); a snapshot of any other is refused, in one line naming its format and what to do
(move the directory away: the broker then starts afresh, and its neighbours and clients resend
what it had). A log of the format before is replayed as it was written and checkpointed in the
current format at once, so a broker that reads only the older format never meets records of the
newer. A release that raises the format reads the one it replaces and drops the one before that:
one upgrade at a time keeps a broker's state. Format 11 is the router's snapshot
(``Router.snapshot()``); 12 adds its publishers' marks (``broker.routing.publishers``), its
retained publications (``broker.routing.retained``) and its leases (``broker.routing.leases``),
which a state of format 11 restores without: its duplicate filter of recent ids still holds what
it had routed lately, and it kept and leased nothing. Messages held in custody gained a quality
of service (``broker.messages.qos``) and subscriptions a lease: one pickled by format 11 comes
back with the defaults. 13 carries a window per channel (``broker.routing.backlog``): the same
records would give some messages their seqs later, so a log of 11 or 12 is replayed without a
window, as it was written, and windows apply from its checkpoint on; a channel, a detection
pickled before come back with an empty backlog and the default priorities. Brokers of the
development version that brought windows wrote format 12 too: a snapshot whose channels have
a backlog's slots (``WINDOW_SLOT``) says so, and its log is replayed with windows. Format 12 never left
development, so 13 reads 11 too. Composite subscriptions and their notifications gained a priority, and
a detection (``broker.routing.composites``) its requesters' priorities, within format 12: one
pickled without them comes back with the default priority (4) for everything, which is what
it had, so neither replaying the same records nor the peers' seqs change. Cancels gained a
signature within format 13 (``broker.transport.cancels``): one pickled or logged without it
is unsigned, which is what it was. 14 adds the
publishers' message ids (``Publishers.mids``): a broker of 13 or before routed a publication
that repeats one, so such a log is replayed routing them all (``Publishers.by_mid``), from a
state that remembers none, and repeats are answered from then on. Formats 12 and 13
never left development either, so 14 reads 11 too.

**What an upgrade tells the neighbours.** The state an older version left may be out of step
with what its neighbours have of it, and nothing in it tells: older brokers let a neighbour's
``LinkUp`` end the session it resumed (``Sessions.ends_by`` says why that can no longer happen),
and the neighbour dropped what came on the channel opened in its place as resent, so it lacked
advertisements, subscriptions and composite parts this broker believed it had (a workflow's
``APPL_END`` never came). So a log of an older format, once replayed, marks every neighbour's
channel (``Custody.reannounce_all``): at its next resume the broker tells the neighbour again
everything it told it and did not withdraw (``Tables.announced``, ``Composites.announced``),
once. The neighbour drops what it had as duplicates and takes what it lacked. What it has and
should not (a withdrawal it dropped) stays until it goes by itself; the join state on both
sides is kept.

A pickle names each class by its module and name, so a class that moves or is renamed would
make every log written before unreadable: ``MOVED`` and ``RENAMED`` map what a readable format
may name to where and what the classes are now, and everything this module reads goes through
them.
"""

from __future__ import annotations

import io
import logging
import pickle
import struct
import sys
from collections.abc import Callable
from pathlib import Path

from broker.clock import SYSTEM, Clock
from broker.durable.log import Fsync, WriteAheadLog
from broker.errors import BadMessage, FrameTooLarge, LocalError
from broker.messages import Message
from broker.routing.router import Router
from broker.transport.codec import decode, encode

__all__ = ["CHECKPOINT_RECORDS", "Fsync", "RouterLog", "dump_state", "load_state"]

log = logging.getLogger("broker")

SNAPSHOT_FORMAT = 14
READABLE = (11, 12, 13, 14)  # the formats before, and this one (see the module's docstring)
WINDOWED = 13  # the first format whose brokers carried a window per channel (``routing.backlog``)
IDEMPOTENT = 14  # the first whose brokers answered a repeated message id (``routing.publishers``)
# a slot of a channel with a window: development brokers carried windows under format 12 too
# (their snapshots name it), and their logs replay with windows like those of 13
WINDOW_SLOT = b"waiting_weight"
_WIRE = b"W"  # a record of an input from a link: this, the clock and the hop's length, the hop, a frame
_WIRE_HEAD = struct.Struct(">dH")
_FRAME_AT = len(_WIRE) + _WIRE_HEAD.size
CHECKPOINT_RECORDS = 20_000  # inputs between two snapshots: what a restart may have to replay
CHECKPOINT_BYTES = 32 << 20
MOVED = {  # module a readable log may name -> where its classes are now
    "broker.routing.messages": "broker.messages.overlay",
    "broker.routing.ids": "broker.messages.ids",
}
RENAMED = {  # (module, class) a readable log may name -> the class's name now
    ("broker.routing.acl", "Policy"): "AccessPolicy",
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        return super().find_class(MOVED.get(module, module), RENAMED.get((module, name), name))


def _load(data: bytes) -> object:
    """A pickle of this broker's log, its classes found where they are now (``MOVED``,
    ``RENAMED``)."""
    return _Unpickler(io.BytesIO(data)).load()


# What a router's state is made of besides the broker's own classes: a state that names anything
# else did not come from a broker (a site's brokers send theirs to each other, ``load_state``)
_STATE_CLASSES = (
    {("builtins", name) for name in ("set", "frozenset", "bytearray", "complex", "slice", "range")}
    | {("collections", name) for name in ("OrderedDict", "Counter", "deque", "defaultdict")}
    | {("datetime", name) for name in ("date", "datetime", "time", "timedelta", "timezone")}
    | {("decimal", "Decimal"), ("copyreg", "_reconstructor"), ("builtins", "object"), ("itertools", "count")}
    | {("array", "array"), ("array", "_array_reconstructor")}
    | {
        (module, name)  # the matcher's arrays
        for module in (
            "numpy",
            "numpy.core.multiarray",
            "numpy._core.multiarray",
            "numpy.core.numeric",
            "numpy._core.numeric",
        )
        for name in ("ndarray", "dtype", "_reconstruct", "scalar", "_frombuffer")
    }
)


class _StateUnpickler(_Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if not (module == "broker" or module.startswith("broker.")) and (module, name) not in _STATE_CLASSES:
            raise pickle.UnpicklingError(f"a router's state holds no {module}.{name}")
        return super().find_class(module, name)


def dump_state(state: object) -> bytes:
    """A router's state (``Router.snapshot`` and what goes with it) as bytes, under this format."""
    return pickle.dumps((SNAPSHOT_FORMAT, state), pickle.HIGHEST_PROTOCOL)


def load_state(data: bytes) -> object:
    """What :func:`dump_state` made; ValueError for anything else, and for a pickle that names a
    class a router's state is not made of (it may come from another broker: a pickle can call
    anything it names)."""
    try:
        written, state = _StateUnpickler(io.BytesIO(data)).load()
    except Exception as error:
        raise ValueError(f"not a router's state: {error}") from None
    if written != SNAPSHOT_FORMAT:
        raise ValueError(f"a router's state of format {written}, not {SNAPSHOT_FORMAT}")
    return state


class RouterLog:
    def __init__(
        self,
        directory: Path,
        fsync: Fsync = "group",
        checkpoint_every: int = CHECKPOINT_RECORDS,
        clock: Clock = SYSTEM,
    ) -> None:
        self.clock = clock  # for how long a restore took, in its log line
        self.wal = WriteAheadLog(directory, fsync)
        self.directory = directory
        self.checkpoint_every = checkpoint_every

    def restore(self, fresh: Callable[[], Router]) -> Router:
        """The router as the log left it, or ``fresh()`` for an empty log (snapshotted at once,
        so the custody epoch it starts is the one a restart comes back with)."""
        started = self.clock.monotonic()
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
        router, written = self._router(snapshot)
        window = router.custody.window, router.custody.window_bytes
        if written < WINDOWED and WINDOW_SLOT not in snapshot:  # a broker that carried
            # everything at once wrote these records: replayed so, each message gets the seq it
            # was sent under (a peer took them so)
            router.custody.window = router.custody.window_bytes = sys.maxsize
        router.publishers.by_mid = written >= IDEMPOTENT  # as it routed them, repeats included
        quiet = logging.getLogger("broker.routing")
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # what it logged then, it does not log again
        failed = 0
        try:
            for record in records:
                hop, now, message = _input(record)
                try:
                    router.handle(message, hop, now)
                except Exception:  # as when it was live (RouterDriver.feed): one message, not the broker
                    failed += 1
        finally:
            quiet.setLevel(level)
            router.custody.window, router.custody.window_bytes = window
            router.publishers.by_mid = True
        if failed:
            log.warning(
                "%s: %d logged inputs failed again in the router, as they did live", self.directory, failed
            )
        log.info(
            "%s restored from %s: snapshot and %d inputs in %.2f s",
            router.id,
            self.directory,
            len(records),
            self.clock.monotonic() - started,
        )
        if written != SNAPSHOT_FORMAT:  # at once: an older broker would misread these records
            router.custody.reannounce_all()  # and what older versions left may be amiss
            self.checkpoint(router)
        return router

    def record(self, message: Message, hop: str, now: float) -> None:
        try:
            frame = encode(message)  # type: ignore[arg-type]
        except (TypeError, BadMessage, FrameTooLarge):  # the router's own inputs
            self.wal.append(pickle.dumps((hop, now, message), pickle.HIGHEST_PROTOCOL))
            return
        name = hop.encode()
        self.wal.append(b"".join((_WIRE, _WIRE_HEAD.pack(now, len(name)), name, frame)))

    def due(self) -> bool:
        return (
            self.wal.records_since_checkpoint >= self.checkpoint_every
            or self.wal.log_bytes >= CHECKPOINT_BYTES
        )

    def checkpoint(self, router: Router) -> None:
        self.wal.checkpoint(pickle.dumps((SNAPSHOT_FORMAT, router.snapshot()), pickle.HIGHEST_PROTOCOL))

    def _router(self, snapshot: bytes) -> tuple[Router, int]:
        """The router in a snapshot of a format this version reads, and that format; LocalError
        for another's, which would fail on every message (its state lacks what this code expects)."""
        try:
            loaded = _load(snapshot)
        except Exception as error:  # a class or attribute this code no longer has
            loaded = error
        if isinstance(loaded, tuple) and len(loaded) == 2 and loaded[0] in READABLE:
            written, state = loaded
            if written == 11:  # before the publishers' marks, retained publications and leases
                state = state | {
                    "publishers": {"marks": {}},
                    "retention": {"kept": {}},
                    "leases": {"held": {}},
                }
            if written < IDEMPOTENT:  # before the publishers' message ids
                state = state | {"publishers": state["publishers"] | {"mids": {}}}
            return Router.restore(state), written
        found = loaded[0] if isinstance(loaded, tuple) and loaded else "an older one"
        raise LocalError(
            f"{self.directory}: the snapshot was written by another version of the broker (format "
            f"{found}, this one reads {' or '.join(map(str, READABLE))}); move the directory away to "
            "start this broker afresh"
        )

    def close(self) -> None:
        self.wal.close()


def _input(record: bytes) -> tuple[str, float, Message]:
    """The hop, the clock and the input in a record."""
    if record[:1] != _WIRE:
        return _load(record)  # type: ignore[return-value]
    now, size = _WIRE_HEAD.unpack_from(record, len(_WIRE))
    hop = record[_FRAME_AT : _FRAME_AT + size].decode()
    return hop, now, decode(memoryview(record)[_FRAME_AT + size + 4 :])  # type: ignore[return-value]
