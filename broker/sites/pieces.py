"""Messages larger than a frame between the brokers of a site: sent as a stream, put back together.

A site's state outgrows a frame as its router fills, and one larger than a link's queue
(``queue_limit``, 64 MiB by default) could never be queued on it at once: the link would be
closed as a slow consumer. So a member link's ``Outbox`` sends such a message as ``Piece``s
written as the link drains, never more than ``WINDOW`` bytes waiting for the peer, while the
broker goes on with its other links (each piece is a slice of the state, made as it is sent: the
state is not held twice). The other side's ``Assembly`` writes the pieces it reads into a file,
not memory, and decodes the message once the last one is there.

A stream ends early when its message is no longer wanted (asked before each piece: a snapshot
its leader no longer leads for, or one the follower holds), when a newer snapshot replaces it,
or when the link closes. The next message's first piece, at 0, tells the other side to drop what
it read, as the link's end does; a piece anywhere else out of place closes the link. So a message
is only ever decoded from a whole stream of its own pieces, and ``Node`` fences a whole snapshot
of a deposed leader by its term as it fences every message.
"""

from __future__ import annotations

import asyncio
import mmap
import tempfile
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO

from broker.errors import BadMessage, ProtocolError
from broker.messages import InstallSnapshot, Piece, WireMessage
from broker.transport.codec import decode, in_pieces
from broker.transport.link import Link

__all__ = ["WINDOW", "Assembly", "Outbox"]

WINDOW = 4 << 20  # bytes a stream lets wait for the peer at most (less on a link with a smaller queue)


class Outbox:
    """One member link's messages too large for a frame, sent one after the other as pieces
    written as the link drains. ``wanted(message)`` is asked before each piece and once the
    last has gone out (a snapshot's sender counts its resend from then: ``Node.snapshot_sending``);
    ``unsendable(message, error)`` hears of one that cannot be encoded."""

    def __init__(
        self,
        link: Link,
        wanted: Callable[[WireMessage], bool],
        unsendable: Callable[[WireMessage, Exception], None],
    ) -> None:
        self.link = link
        self.wanted = wanted
        self.unsendable = unsendable
        self.window = min(WINDOW, link.queue_limit // 4)
        self.waiting: deque[WireMessage] = deque()
        self.current: WireMessage | None = None
        self._replaced = False  # a newer snapshot came for the one on its way
        self._task: asyncio.Task[None] | None = None

    def send(self, message: WireMessage) -> None:
        """Send ``message`` after those before it. A snapshot replaces one that waits or is on its
        way, unless it is that very one sent again (its resend timer ran out while it streamed)."""
        if type(message) is InstallSnapshot:
            if _same_snapshot(self.current, message):
                return
            self.waiting = deque(m for m in self.waiting if type(m) is not InstallSnapshot)
            self._replaced = type(self.current) is InstallSnapshot
        self.waiting.append(message)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def close(self) -> None:
        """The link ended: nothing more is sent."""
        self.waiting.clear()
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        try:
            while self.waiting and self.link.closed is None:
                message = self.current = self.waiting.popleft()
                self._replaced = False
                try:
                    await self._stream(message)
                except (ProtocolError, ValueError, TypeError) as error:  # it cannot be encoded
                    self.unsendable(message, error)
        finally:
            self.current = self._task = None

    async def _stream(self, message: WireMessage) -> None:
        link = self.link
        for piece in in_pieces(message):
            if not await link.writable(self.window) or self._replaced or not self.wanted(message):
                return
            link.send(piece)
        if await link.writable(0) and not self._replaced:
            self.wanted(message)  # all of it is in the socket: the answer is due from now


def _same_snapshot(current: WireMessage | None, message: InstallSnapshot) -> bool:
    """Whether ``current`` is the snapshot ``message`` is (a term has one leader)."""
    if type(current) is not InstallSnapshot:
        return False
    return (current.term, current.last_index) == (message.term, message.last_index)


class Assembly:
    """The pieces one member link has read of a message, kept in a file in ``directory``
    (unlinked from the start: nothing of it outlives the process), so a large state is held in
    memory once, decoded, not twice; at most ``limit`` bytes a message. ``dropped`` counts
    messages begun and given up by their sender."""

    def __init__(self, directory: Path, limit: int) -> None:
        self.directory = directory
        self.limit = limit
        self.dropped = 0
        self._file: IO[bytes] | None = None
        self._total = self._got = 0

    def take(self, piece: Piece) -> WireMessage | BadMessage | None:
        """The message ``piece`` completes (or why its payload is not one), None until then.
        ProtocolError for a piece out of place or a message over the limit: the link that
        carried it cannot be trusted any more, and must close."""
        if piece.at == 0:
            if piece.total > self.limit:
                raise ProtocolError(f"pieces of a message of {piece.total} bytes, over {self.limit}")
            self.close()
            self._file = tempfile.TemporaryFile(dir=self.directory)  # noqa: SIM115 (see close)
            self._total, self._got = piece.total, 0
        elif self._file is None or (piece.total, piece.at) != (self._total, self._got):
            raise ProtocolError(
                f"a piece at {piece.at} of {piece.total} bytes, where {self._got} of {self._total} were due"
            )
        file = self._file
        file.write(piece.data)
        self._got += len(piece.data)
        if not piece.last:
            return None
        self._file = None
        try:
            file.flush()
            with (
                mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
                memoryview(mapped) as payload,
            ):
                return decode(payload)
        except BadMessage as error:
            return error
        finally:
            file.close()

    def close(self) -> None:
        """Drop what was read of a message (its link ended, or its sender gave it up)."""
        if self._file is not None:
            self.dropped += 1
            self._file.close()
            self._file = None
