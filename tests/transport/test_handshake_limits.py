"""Connections in handshake are capped (over real loopback sockets): half-open TLS connections
from one address take at most their share, from many at most the total, the excess is closed at
once and counted, and a legitimate client gets in meanwhile; none of them leaves a handler behind."""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path

from broker.transport.admission import MAX_HANDSHAKES, MAX_HANDSHAKES_PER_ADDRESS
from broker.transport.server import RouterService
from tests.transport.harness import run, until
from tests.transport.test_tls import still_serving, tls_broker

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def half_open(b: RouterService, source: str, count: int) -> list[Stream]:
    """``count`` TCP connections from ``source`` that never start their TLS handshake."""
    return [
        await asyncio.open_connection(b.uri.host, b.uri.port, local_addr=(source, 0)) for _ in range(count)
    ]


async def closed_soon(stream: Stream, within: float = 1.0) -> bool:
    """Whether the broker closes ``stream`` within ``within`` seconds (its handshake timeout is 5)."""
    try:
        async with asyncio.timeout(within):
            return await stream[0].read(1) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def close(streams: list[Stream]) -> None:
    for _, writer in streams:
        writer.transport.abort()


def test_half_open_handshakes_are_capped_per_address_and_in_all(certs: Path) -> None:
    assert (MAX_HANDSHAKES, MAX_HANDSHAKES_PER_ADDRESS) == (64, 16)

    async def scenario() -> None:
        b = await tls_broker(certs)
        one = await half_open(b, "127.0.0.2", 40)  # one address: its share, the rest closed at once
        closed = await asyncio.gather(*(closed_soon(stream) for stream in one[16:]))
        assert all(closed)
        assert not any(await asyncio.gather(*(closed_soon(stream, 0.2) for stream in one[:16])))
        assert b.counters["handshake_refused"] == 24
        await still_serving(b, certs)  # from 127.0.0.1, meanwhile
        # many addresses: 16 + 4 * 16 = 80 > 64: each newcomer closes the oldest connection of an
        # address that holds the most, so they end up sharing the 64 about evenly
        many = [s for n in range(3, 7) for s in await half_open(b, f"127.0.0.{n}", 16)]
        await until(lambda: b.counters["handshake_refused"] == 24 + 16, what="room made")
        closed = await asyncio.gather(*(closed_soon(stream) for stream in one[:16] + many))
        assert sum(closed) == 16 and b.gate.admission.count == 64
        held = sorted(map(len, b.gate.admission.by_address.values()))
        assert len(held) == 5 and held[0] >= 12 and held[-1] <= 14, held
        await still_serving(b, certs)  # a client that shakes hands in milliseconds still gets in
        assert b.status()["counters"]["link.handshake_refused"] >= 24 + 16 + 1
        close(one + many)
        await until(lambda: b.gate.admission.count == 0 and not b.gate.admission.by_address, what="all ended")
        await b.stop()

    run(scenario(), timeout=60)


def test_a_connection_reset_in_its_tls_handshake_leaves_no_handler_behind(certs: Path) -> None:
    """A peer that resets the connection during the handshake: refused and counted, and its
    handler ends (it used to wait for ever for a close the stream never heard of)."""

    async def scenario() -> None:
        b = await tls_broker(certs)
        for stream in await half_open(b, "127.0.0.1", 5):
            sock = stream[1].get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
            stream[1].transport.abort()
        await until(lambda: b.counters["tls_refused"] == 5, what="counted")
        await until(lambda: not b._connections, what="handlers ended")
        await b.stop()

    run(scenario())
