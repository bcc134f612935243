"""Links and both sides of the handshake over an in-memory stream pair: no socket, no port."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

from broker.clock import ManualClock
from broker.errors import LinkClosed
from broker.messages import Hello, Ping, Pong, Refuse, Unsubscribe
from broker.transport.dialer import greet
from broker.transport.gate import Gate, Shaken
from broker.transport.handshake import Misconfigured
from broker.transport.link import Link
from broker.transport.memory import memory_pair
from broker.transport.uri import BrokerURI
from tests.transport.harness import run

B1 = BrokerURI("127.0.0.1", 7000, "B1")


def test_two_links_talk_over_a_memory_pair_and_see_its_end() -> None:
    async def scenario() -> None:
        clock = ManualClock(now=5.0)
        (r1, w1), (r2, w2) = memory_pair()
        one, two = Link(r1, w1, "one", clock=clock), Link(r2, w2, "two", clock=clock)
        assert one.send(Hello("client", "c")) and one.send(Ping())
        assert await two.receive() == [Hello("client", "c"), Ping()]
        assert two.last_received == 5.0  # the injected clock's, not the process's
        two.send(Pong())
        assert await one.receive() == [Pong()]
        await one.wait_closed()
        with pytest.raises(LinkClosed, match="closed by peer"):
            await two.receive()
        await two.wait_closed()

    run(scenario())


def test_a_write_waits_until_the_other_end_reads_it() -> None:
    async def scenario() -> None:
        (reader, _), (_, writer) = memory_pair()
        writer.write(b"abc")
        draining = asyncio.create_task(writer.drain())
        await asyncio.sleep(0.01)
        assert not draining.done()  # no buffer to hide a peer that does not read
        assert await reader.read(2) == b"ab" and not draining.done()
        assert await reader.read() == b"c"
        await asyncio.wait_for(draining, 1)

    run(scenario())


def gate() -> Gate:
    log = logging.LoggerAdapter(logging.getLogger("broker"), {"broker": "B1"})
    return Gate(None, 1 << 20, Counter(), log, ManualClock())


async def handshake(said: Hello, answer: Hello | str) -> tuple[Link, Shaken | None]:
    """The dialler's hello against the gate, back to back."""
    (cr, cw), (sr, sw) = memory_pair()
    client = Link(cr, cw, "B1")
    accepting = asyncio.create_task(gate().accept(sr, sw, lambda hello: answer))
    try:
        await greet(client, B1, said, timeout=1.0)
    finally:
        shaken = await accepting
    return client, shaken


def test_the_dialler_and_the_gate_shake_hands_without_a_socket() -> None:
    async def scenario() -> None:
        ours = Hello("broker", "B1", epoch="e:1")
        client, shaken = await handshake(Hello("client", "c"), ours)
        assert shaken is not None
        link, hello, sent, who = shaken
        assert (hello, sent, who, client.peer) == (Hello("client", "c"), ours, None, ours)
        await client.wait_closed()
        await link.wait_closed()

    run(scenario())


def test_what_a_client_pipelines_behind_its_hello_waits_for_the_link() -> None:
    async def scenario() -> None:
        (cr, cw), (sr, sw) = memory_pair()
        client = Link(cr, cw, "B1")
        client.send(Hello("client", "c"))
        client.send(Unsubscribe("s1"))
        shaken = await gate().accept(sr, sw, lambda hello: Hello("broker", "B1"))
        assert shaken is not None and shaken[0].pending == [Unsubscribe("s1")]
        await client.wait_closed()
        await shaken[0].wait_closed()

    run(scenario())


def test_a_refusal_reaches_the_dialler_as_the_reason() -> None:
    async def scenario() -> None:
        with pytest.raises(Misconfigured, match="refused the connection: client id 'c' is already connected"):
            await handshake(Hello("client", "c"), "client id 'c' is already connected")

    run(scenario())


def test_a_first_frame_that_is_not_a_hello_is_refused_by_the_gate() -> None:
    async def scenario() -> None:
        (cr, cw), (sr, sw) = memory_pair()
        client = Link(cr, cw, "B1")
        client.send(Ping())
        g = gate()
        assert await g.accept(sr, sw, lambda hello: Hello("broker", "B1")) is None
        assert await client.receive() == [Refuse("", "handshake failed: expected hello, got Ping()")]
        assert g.counters["handshake_failed"] == 1
        await client.wait_closed()

    run(scenario())


def test_a_write_to_an_end_that_closed_fails_as_a_reset_connection_does() -> None:
    async def scenario() -> None:
        (_, closing), (_, writer) = memory_pair()
        closing.close()
        writer.write(b"lost")
        with pytest.raises(ConnectionResetError):
            await writer.drain()

    run(scenario())
