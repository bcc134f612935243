"""Where a broker listens and what it dials: TCP, or (for tests) the in-memory ``MemoryNetwork``.

The server and the dialler ask a ``Network`` for their streams instead of asyncio directly, so
the same broker code runs over sockets and, with no port at all, over memory stream pairs. TLS
needs a socket: it is for TCP only.

A TLS listener (:meth:`Network.listen_tls`) hands over each connection as an :class:`Accepted`
socket that nothing has read yet: its handler decides whether to take it (the gate's admission)
and then has the loop run the TLS handshake on it from the first byte. Starting TLS on a stream
instead (``StreamWriter.start_tls``) relies on nothing reading the socket before: true of the
standard loop, which starts reading a connection after its handler's first step, not of uvloop,
which starts at once, so that the peer's ClientHello could land in the stream, out of the TLS
layer's reach, and the handshake then waited for it until it timed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from broker.transport.link import Reader, Writer
from broker.transport.uri import BrokerURI

__all__ = ["TCP", "Accepted", "Handler", "Listening", "Network", "TLSHandler"]

log = logging.getLogger(__name__)

Handler = Callable[[Reader, Writer], Awaitable[None]]  # one accepted connection, until it ends
ACCEPT_RETRY = 0.1  # seconds before accepting again after the system refused (out of descriptors)


class Accepted:
    """An accepted TCP connection that nothing has read yet."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        try:
            self.address: tuple[str, int] = sock.getpeername()[:2]
        except OSError:  # gone already
            self.address = ("?", 0)

    async def secured(self, context: ssl.SSLContext, timeout: float) -> tuple[Reader, Writer]:
        """Its streams after the server's side of the TLS handshake, done by the loop from the
        first byte; the handshake's OSError, SSLError or TimeoutError otherwise (the socket closed)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, self.sock, ssl=context, ssl_handshake_timeout=timeout
            )
        except BaseException:
            self.close()
            raise
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    def close(self) -> None:
        """Drop the connection (refused, or its handshake failed)."""
        with contextlib.suppress(OSError):
            self.sock.close()


TLSHandler = Callable[[Accepted], Coroutine[Any, Any, None]]


class _TLSListener:
    """Accepts connections on listening sockets and hands each, unread, to its handler."""

    def __init__(self, sockets: list[socket.socket], handler: TLSHandler) -> None:
        self.sockets = sockets
        self.handler = handler
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._accept(sock)) for sock in sockets]
        self.handling: set[asyncio.Task[None]] = set()

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as error:  # EMFILE and the like: the connection waits in the backlog
                log.warning("cannot accept a connection: %s", error)
                await asyncio.sleep(ACCEPT_RETRY)
                continue
            conn.setblocking(False)
            task = loop.create_task(self.handler(Accepted(conn)))
            self.handling.add(task)
            task.add_done_callback(self.handling.discard)

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def _listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for every address ``host`` names, as
    ``asyncio.start_server`` makes them; OSError (naming the address) if one cannot be bound."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    made: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            made.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as error:
                where = f"error while attempting to bind on address {address!r}"  # asyncio's words
                raise OSError(error.errno, f"{where}: {(error.strerror or '').lower()}") from None
            sock.listen(100)
            sock.setblocking(False)
    except BaseException:
        for sock in made:
            sock.close()
        raise
    return made


class Listening(Protocol):
    """A listening endpoint: closing it stops new connections, not the ones accepted."""

    def close(self) -> None: ...
    async def wait_closed(self) -> None: ...


class Network(Protocol):
    async def listen(self, uri: BrokerURI, handler: Handler) -> Listening: ...
    async def listen_tls(self, uri: BrokerURI, handler: TLSHandler) -> Listening: ...
    async def open(self, uri: BrokerURI) -> tuple[Reader, Writer]: ...


class _TCP:
    async def listen(self, uri: BrokerURI, handler: Handler) -> Listening:
        return await asyncio.start_server(handler, uri.host, uri.port)

    async def listen_tls(self, uri: BrokerURI, handler: TLSHandler) -> Listening:
        return _TLSListener(await _listening_sockets(uri.host, uri.port), handler)

    async def open(self, uri: BrokerURI) -> tuple[Reader, Writer]:
        return await asyncio.open_connection(uri.host, uri.port)


TCP: Network = _TCP()
