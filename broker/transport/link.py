"""One framed connection: frames in, and a bounded outgoing queue written in batches.

Writes never block the broker: ``send`` appends to the queue and a writer task drains it,
joining everything queued into one ``write`` (batching) before awaiting ``drain`` (back-pressure
from the socket). A peer that cannot keep up lets the backlog grow; once the bytes waiting for it
(our queue plus asyncio's transport buffer) pass ``queue_limit`` the link is closed with a logged
reason. That is the slow-consumer policy: one slow client never stalls the others or eats the
broker's memory.

A link reads and writes through two small protocols, not asyncio's classes, so a test runs one
over an in-memory stream pair (``broker.transport.memory``) as well as over a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from broker.clock import SYSTEM, Clock
from broker.errors import BadMessage, LinkClosed
from broker.messages import Hello, WireMessage
from broker.transport.codec import FrameDecoder, decode, encode

__all__ = ["SLOW_CONSUMER", "Link", "Reader", "Writer"]

SLOW_CONSUMER = "slow consumer"  # how the reason for closing a link too slow to read begins

log = logging.getLogger(__name__)


class Reader(Protocol):
    """What a link reads from: ``asyncio.StreamReader``, or a memory stream's end."""

    async def read(self, n: int = -1) -> bytes: ...


class Writer(Protocol):
    """What a link writes to: ``asyncio.StreamWriter``, or a memory stream's end."""

    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def close(self) -> None: ...
    def is_closing(self) -> bool: ...
    def get_extra_info(self, name: str, default: Any = None) -> Any: ...


class Link:
    def __init__(
        self,
        reader: Reader,
        writer: Writer,
        name: str = "?",
        queue_limit: int = 64 << 20,
        frame_limit: int | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.clock = clock
        self.reader = reader
        self.writer = writer
        self.name = name
        self.queue_limit = queue_limit
        self.decoder = FrameDecoder() if frame_limit is None else FrameDecoder(frame_limit)
        self._queue: list[bytes] = []
        self._queued_bytes = 0
        self._transport_bytes = 0  # the transport's buffer after our last write (at least what it holds)
        self.pending: list[WireMessage | BadMessage] = []  # read along with the handshake
        self.peer: Hello | None = None  # the peer's hello, once the handshake is done
        self._wakeup = asyncio.Event()
        self._writing = False  # frames taken off the queue, their drain not returned yet
        self._drained = asyncio.Event()  # set when a drain returns, and when the link closes
        self.closed: str | None = None
        self.last_received = self.last_sent = self.clock.monotonic()
        self.sent_frames = 0
        self.received_frames = 0  # (with sent_frames: a link's rates, as a dashboard shows them)
        self.discarded_frames = 0  # queued but never written: the link was aborted first
        self._writer_task = asyncio.get_running_loop().create_task(self._write_loop())

    def send(self, message: WireMessage) -> bool:
        """Queue a message; False when the link is closed (or just closed for being too slow)."""
        if self.closed is not None:
            return False
        frame = encode(message)
        # the transport's buffer as of our last write, which only the peer's reading shrinks
        # since: asked again (a call per message otherwise) only when it may be over the limit
        if self._queued_bytes + self._transport_bytes + len(frame) > self.queue_limit:
            backlog = self.buffered()
            if backlog + len(frame) > self.queue_limit:
                self.close(f"{SLOW_CONSUMER}: {backlog} bytes waiting", abort=True)
                self.discarded_frames += 1
                return False
        self._queue.append(frame)
        self._queued_bytes += len(frame)
        self._wakeup.set()
        return True

    def buffered(self) -> int:
        """Bytes queued for the peer and not written into its socket yet."""
        return self._queued_bytes + self._transport_backlog()

    @property
    def too_slow(self) -> bool:
        """Whether it was closed because its peer did not read what it was sent."""
        return self.closed is not None and self.closed.startswith(SLOW_CONSUMER)

    async def writable(self, limit: int) -> bool:
        """Until at most ``limit`` bytes wait for the peer, or none is being written (the
        transport then holds at most its high-water mark): a sender of a long stream writes a
        piece as the peer reads, so the stream never nears ``queue_limit`` whatever its size.
        False once the link is closed."""
        while self.closed is None and (self._queue or self._writing) and self.buffered() > limit:
            self._drained.clear()
            await self._drained.wait()
        return self.closed is None

    def _transport_backlog(self) -> int:
        transport = getattr(self.writer, "transport", None)
        return transport.get_write_buffer_size() if transport is not None else 0

    async def read_all(self, handle: Callable[[WireMessage | BadMessage], None]) -> None:
        """Hand every frame to ``handle``: those read with the handshake (``pending``), then
        each as it comes, until the link closes; ProtocolError if the peer breaks framing."""
        for item in self.pending:
            handle(item)
        self.pending.clear()
        try:
            while True:
                for item in await self.receive():
                    handle(item)
        except LinkClosed:
            return

    async def receive(self) -> list[WireMessage | BadMessage]:
        """The next messages (or per-frame errors) off the wire. Raises ``LinkClosed`` at the end,
        and ``FrameTooLarge`` for a stream that cannot be trusted any more."""
        while True:
            if self.closed is not None:
                raise LinkClosed(self.closed)
            try:
                data = await self.reader.read(1 << 16)
            except (ConnectionError, OSError) as error:
                self.close(f"connection error: {error}")
                raise LinkClosed(self.closed or "closed") from None
            if not data:
                self.close("closed by peer")
                raise LinkClosed("closed by peer")
            self.last_received = self.clock.monotonic()
            items: list[WireMessage | BadMessage] = []
            for payload in self.decoder.feed(data):
                try:
                    items.append(decode(payload))
                except BadMessage as error:
                    items.append(error)
            self.received_frames += len(items)
            if items:
                return items

    async def _write_loop(self) -> None:
        try:
            while self.closed is None:
                if not self._queue:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                frames, self._queue, self._queued_bytes = self._queue, [], 0
                self._writing = True
                self.writer.write(b"".join(frames))
                self.sent_frames += len(frames)
                self.last_sent = self.clock.monotonic()
                self._transport_bytes = self._transport_backlog()
                await self.writer.drain()
                self._writing = False
                self._drained.set()
        except (ConnectionError, OSError) as error:
            self.close(f"write failed: {error}")
        except asyncio.CancelledError:
            pass

    def close(self, reason: str, abort: bool = False) -> None:
        """Close the link. ``abort`` drops what is buffered at once; a graceful close would wait
        for the peer to read it, which a slow or dead peer never does."""
        if self.closed is not None:
            return
        self.closed = reason
        log.debug("link %s closed: %s", self.name, reason)
        self._wakeup.set()
        self._drained.set()
        transport = getattr(self.writer, "transport", None)
        if abort:
            self.discarded_frames += len(self._queue)
        if abort and transport is not None:
            transport.abort()
        elif not self.writer.is_closing():
            self.writer.close()

    async def flush_and_close(self, reason: str, timeout: float = 1.0) -> None:
        """Write what is queued (a last error reply, say), then close; a peer that does not read
        it within ``timeout`` is cut off (a graceful close would wait for it for ever)."""
        stuck = False
        if self._queue and self.closed is None:
            try:
                self.writer.write(b"".join(self._queue))
                self._queue, self._queued_bytes = [], 0
                async with asyncio.timeout(timeout):
                    await self.writer.drain()
            except (ConnectionError, OSError, TimeoutError):
                stuck = True
        self.close(reason, abort=stuck)

    async def wait_closed(self, timeout: float = 2.0) -> None:
        """Until the socket is really closed (so nothing is left for the garbage collector)."""
        self.close("closing")
        self._writer_task.cancel()
        waiter = getattr(self.writer, "wait_closed", None)
        if waiter is not None:
            with contextlib.suppress(ConnectionError, OSError, TimeoutError):
                # shielded: the close waiter is one future for every caller, and a caller that is
                # cancelled or times out would cancel it under the others (seen with TLS, whose
                # close takes a round trip: a broker stopping raised CancelledError)
                async with asyncio.timeout(timeout):
                    await asyncio.shield(waiter())
        await asyncio.gather(self._writer_task, return_exceptions=True)
