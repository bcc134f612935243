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

__all__ = ["MemoryReader", "MemoryWriter", "memory_pair"]


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
