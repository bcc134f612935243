"""An in-memory stream pair: two connected ends, each a reader and a writer, and no socket.

trio.testing's idea: a link (``Link``), the gate's handshake and the dialler's run over it as
over TCP, in one process, with nothing to listen on. It buffers nothing: a writer's ``drain``
waits until the other end has read everything written, so back-pressure that a socket's buffers
would hide shows at once. Closing one end is the end of the stream for the other, and a write
to an end nobody reads any more fails as a reset connection does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.transport.network import Handler, TLSHandler
from broker.transport.uri import BrokerURI

__all__ = ["MemoryNetwork", "MemoryReader", "MemoryWriter", "memory_pair"]


class _Pipe:
    """One direction: what was written and not yet read."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.ended = False  # the writer closed: once the buffer is read, the reader sees b""
        self.unread = False  # the reader's end closed: nothing written will ever be read
        self.lost = False  # and something written was not
        self.readable = asyncio.Event()
        self.drained = asyncio.Event()
        self.drained.set()


class MemoryReader:
    def __init__(self, pipe: _Pipe) -> None:
        self._pipe = pipe

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all there are if ``n`` < 0) once there are any; b"" at the end."""
        pipe = self._pipe
        while not pipe.buffer and not pipe.ended:
            pipe.readable.clear()
            await pipe.readable.wait()
        size = len(pipe.buffer) if n < 0 else min(n, len(pipe.buffer))
        data = bytes(pipe.buffer[:size])
        del pipe.buffer[:size]
        if not pipe.buffer:
            pipe.drained.set()
        return data


class MemoryWriter:
    def __init__(self, outgoing: _Pipe, incoming: _Pipe, peername: tuple[str, int]) -> None:
        self._outgoing = outgoing
        self._incoming = incoming
        self._peername = peername
        self._closing = False

    def write(self, data: bytes) -> None:
        if self._closing or not data:
            return
        if self._outgoing.unread:
            self._outgoing.lost = True
            return
        self._outgoing.buffer += data
        self._outgoing.readable.set()
        self._outgoing.drained.clear()

    async def drain(self) -> None:
        """Until the other end has read everything written; ConnectionResetError if it closed
        without reading some of it."""
        await self._outgoing.drained.wait()
        if self._outgoing.lost:
            raise ConnectionResetError("the other end of the memory stream is closed")

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._outgoing.ended = True
        self._outgoing.readable.set()
        self._incoming.unread = True  # whatever the other end still writes goes nowhere
        self._incoming.lost = bool(self._incoming.buffer)
        self._incoming.buffer.clear()
        self._incoming.drained.set()

    def is_closing(self) -> bool:
        return self._closing

    async def wait_closed(self) -> None:
        return None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._peername if name == "peername" else default


def memory_pair(
    address: tuple[str, int] = ("127.0.0.1", 1),
) -> tuple[tuple[MemoryReader, MemoryWriter], tuple[MemoryReader, MemoryWriter]]:
    """Two connected ends, as ``asyncio.open_connection`` and the server's handler would get
    them; each end's peer seems to be at ``address``."""
    there, back = _Pipe(), _Pipe()
    return (MemoryReader(back), MemoryWriter(there, back, address)), (
        MemoryReader(there),
        MemoryWriter(back, there, address),
    )


class MemoryNetwork:
    """Brokers listening in memory, by URI: what ``asyncio.start_server`` and ``open_connection``
    are for TCP, so that a whole overlay runs in one event loop with no socket."""

    def __init__(self) -> None:
        self._listening: dict[tuple[str, int], _Listener] = {}

    async def listen(self, uri: BrokerURI, handler: Handler) -> _Listener:
        where = (uri.host, uri.port)
        if where in self._listening:
            raise OSError(f"{uri.host}:{uri.port} is in use already")
        listener = self._listening[where] = _Listener(self, where, handler)
        return listener

    async def listen_tls(self, uri: BrokerURI, handler: TLSHandler) -> _Listener:
        raise TypeError("TLS needs a socket: not in memory")

    async def open(self, uri: BrokerURI) -> tuple[MemoryReader, MemoryWriter]:
        listener = self._listening.get((uri.host, uri.port))
        if listener is None:
            raise ConnectionRefusedError(f"nothing listens at {uri.host}:{uri.port}")
        ours, theirs = memory_pair((uri.host, uri.port))
        listener.accept(*theirs)
        return ours


class _Listener:
    def __init__(self, network: MemoryNetwork, where: tuple[str, int], handler: Handler) -> None:
        self._network = network
        self._where = where
        self._handler = handler
        self._handlers: set[asyncio.Task[None]] = set()

    def accept(self, reader: MemoryReader, writer: MemoryWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._run(reader, writer))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _run(self, reader: MemoryReader, writer: MemoryWriter) -> None:
        await self._handler(reader, writer)

    def close(self) -> None:
        if self._network._listening.get(self._where) is self:
            del self._network._listening[self._where]

    async def wait_closed(self) -> None:
        return None
