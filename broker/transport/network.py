"""Where a broker listens and what it dials: TCP, or (for tests) the in-memory ``MemoryNetwork``.

The server and the dialler ask a ``Network`` for their streams instead of asyncio directly, so
the same broker code runs over sockets and, with no port at all, over memory stream pairs. TLS
needs a socket: it is for TCP only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from broker.transport.link import Reader, Writer
from broker.transport.uri import BrokerURI

__all__ = ["TCP", "Handler", "Listening", "Network"]

Handler = Callable[[Reader, Writer], Awaitable[None]]  # one accepted connection, until it ends


class Listening(Protocol):
    """A listening endpoint: closing it stops new connections, not the ones accepted."""

    def close(self) -> None: ...
    async def wait_closed(self) -> None: ...


class Network(Protocol):
    async def listen(self, uri: BrokerURI, handler: Handler) -> Listening: ...
    async def open(self, uri: BrokerURI) -> tuple[Reader, Writer]: ...


class _TCP:
    async def listen(self, uri: BrokerURI, handler: Handler) -> Listening:
        return await asyncio.start_server(handler, uri.host, uri.port)

    async def open(self, uri: BrokerURI) -> tuple[Reader, Writer]:
        return await asyncio.open_connection(uri.host, uri.port)


TCP: Network = _TCP()
