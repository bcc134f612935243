"""Helpers for tests that open real loopback sockets."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from broker.errors import LinkClosed
from broker.messages import (
    Ack,
    Advertise,
    CompositeSubscribe,
    Hello,
    Ping,
    Pong,
    Publish,
    Refuse,
    Subscribe,
    Unadvertise,
    Unsubscribe,
)
from broker.transport.link import Link
from broker.transport.uri import BrokerURI

T = TypeVar("T")


def free_port() -> int:
    """A free port below the kernel's ephemeral range (32768 and up on Linux), so that no
    client's outgoing connection can take it between this check and the broker's bind. Each
    pytest-xdist worker draws from a slice of its own, so that no other worker's test takes it
    either (a killed broker restarted on its port leaves it free for seconds), and never the same
    port twice in a while (two brokers of one test, not bound yet, drew the same); the slice leaves
    room above for the ports after it (``free_ports``)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    width = (30000 - 12000) // workers
    low = 12000 + worker * width
    while True:
        port = random.randint(low, low + width - 16)
        if port in _GIVEN:  # free again, but a broker of this worker may be about to bind it
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        if len(_GIVEN) > width // 2:  # a long run: start afresh
            _GIVEN.clear()
        return port


_GIVEN: set[int] = set()  # ports this process handed out: two brokers of one test drew the same


def uri(name: str) -> BrokerURI:
    return BrokerURI("127.0.0.1", free_port(), name)


def run(coroutine: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run a test coroutine with a deadline, so a hang fails instead of stalling the suite."""

    async def bounded() -> T:
        return await asyncio.wait_for(coroutine, timeout)

    return asyncio.run(bounded())


async def until(condition: Any, timeout: float = 5.0, what: str = "condition") -> None:
    """Wait until ``condition()`` is true (polling), or fail naming ``what``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


Request = Advertise | Subscribe | CompositeSubscribe


class ScriptedBroker:
    """A stand-in broker whose answers a test decides: it completes the handshake, answers each
    request with an Ack unless ``refuse(connection, request)`` gives a reason to refuse it
    (``connection`` counts connections from 1: a reconnection is 2), acknowledges publications
    and withdrawals, and answers Pings. :meth:`drop` cuts every link, so clients reconnect."""

    def __init__(self, refuse: Callable[[int, Request], str | None], name: str = "B1") -> None:
        self.uri = uri(name)
        self.refuse = refuse
        self.connections = 0
        self.links: list[Link] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> ScriptedBroker:
        self._server = await asyncio.start_server(self._serve, self.uri.host, self.uri.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.drop()

    def drop(self) -> None:
        for link in self.links:
            link.close("dropped by the test", abort=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        link = Link(reader, writer, f"client {connection}")
        self.links.append(link)
        link.send(Hello("broker", self.uri.id))
        with contextlib.suppress(LinkClosed):
            while True:
                for item in await link.receive():
                    answer = self._answer(connection, item)
                    if answer is not None:
                        link.send(answer)
        await link.wait_closed()

    def _answer(self, connection: int, item: object) -> Ack | Refuse | Pong | None:
        if isinstance(item, Ping):
            return Pong()
        if isinstance(item, Advertise | Subscribe | CompositeSubscribe):
            reason = self.refuse(connection, item)
            return Ack(item.id, f"{self.uri.id}/c/{item.id}") if reason is None else Refuse(item.id, reason)
        if isinstance(item, Publish | Unadvertise | Unsubscribe):
            return Ack(item.id, item.id)
        return None
