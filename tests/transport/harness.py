"""Helpers for tests that open real loopback sockets."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Coroutine
from typing import Any, TypeVar

from broker.transport.uri import BrokerURI

T = TypeVar("T")


def free_port() -> int:
    """A free port below the kernel's ephemeral range (32768 and up on Linux), so that no
    client's outgoing connection can take it between this check and the broker's bind."""
    while True:
        port = random.randint(12000, 30000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


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
