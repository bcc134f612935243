"""Every wait of a client for its broker ends: a broker that takes a request and never answers
costs the caller ``request_timeout`` seconds and a ``NoAnswer`` naming the request, not a hang."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from broker.client import BlockingClient, Client, NoAnswer
from broker.errors import RemoteError
from broker.messages import Hello
from broker.transport.codec import encode
from broker.transport.uri import BrokerURI
from tests.transport.harness import run, uri


@asynccontextmanager
async def mute_broker() -> AsyncIterator[BrokerURI]:
    """A broker that completes the handshake, then reads every request and answers none."""
    address = uri("B1")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(encode(Hello("broker", "B1")))
        while await reader.read(1 << 16):
            pass
        writer.close()

    server = await asyncio.start_server(serve, address.host, address.port)
    try:
        yield address
    finally:
        server.close()


def test_every_request_of_the_async_client_times_out_with_a_clear_error() -> None:
    async def scenario() -> None:
        async with mute_broker() as address:
            client = await Client.connect(address, "c", request_timeout=0.2)
            requests = [
                ("Advertise 1", client.advertise("[class,eq,a]")),
                ("Subscribe 2", client.subscribe("[class,eq,a]")),
                ("CompositeSubscribe 3", client.subscribe_composite("{[class,eq,a]}")),
                ("Publish 4", client.publish("[class,a]")),
                ("StatusRequest 5", client.status()),
                ("Unsubscribe B1/c/9", client.unsubscribe("B1/c/9")),
            ]
            for what, request in requests:
                with pytest.raises(NoAnswer, match=f"^B1 did not answer {what} within 0.2 s$"):
                    await request
            left = client.requests
            assert left.pending == {} and left.unacked == 0 and left.live == {}
            await client.close()

    run(scenario(), timeout=10)


def test_the_blocking_client_times_out_too() -> None:
    async def scenario() -> None:
        async with mute_broker() as address:  # served by this loop: the client blocks another thread
            client = await asyncio.to_thread(BlockingClient, address, "c", 0.3)
            with pytest.raises(NoAnswer, match=r"B1 did not answer StatusRequest 1 within 0\.3 s") as caught:
                await asyncio.to_thread(client.status)
            assert isinstance(caught.value, RemoteError)
            await asyncio.to_thread(client.close)

    run(scenario(), timeout=10)


@asynccontextmanager
async def not_a_broker(answer: bytes | None) -> AsyncIterator[BrokerURI]:
    """Something else on a broker's port: it sends ``answer`` and hangs up, or (None) says nothing."""
    address = uri("B1")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        if answer is None:
            await reader.read(1 << 16)  # until the client gives up
        writer.write(answer or b"")
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(serve, address.host, address.port)
    try:
        yield address
    finally:
        server.close()


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "it sent something that is not a wfm frame (frame of "),
        (b"\x00\x00\x00\x04\xc1\xc1\xc1\xc1", "it sent something that is not a wfm frame ("),
        (b"", "it closed the connection (closed by peer; a broker that requires TLS"),
        (None, "no answer within 0.3 s: is a wfm broker listening there?"),
    ],
)
def test_a_port_that_is_not_a_broker_is_named_with_the_reason(answer: bytes | None, reason: str) -> None:
    async def scenario() -> None:
        async with not_a_broker(answer) as address:
            with pytest.raises(RemoteError) as raised:
                await Client.connect(address, "c", timeout=0.3)
            assert f"did not answer the handshake: {reason}" in str(raised.value)

    run(scenario(), timeout=10)
