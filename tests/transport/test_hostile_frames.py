"""A flood of hostile frames on one link: each is refused and counted, the link and the broker go
on, and the log stays a few lines long."""

from __future__ import annotations

import asyncio
import logging
import random
import struct

import msgpack
import pytest

from broker.client import Client
from broker.messages import Hello, InstallSnapshot, Piece, Refuse, StatusReply, VoteRequest
from broker.throttle import LogThrottle
from broker.transport.codec import FrameDecoder, decode, encode
from broker.transport.server import RouterService
from tests.transport.harness import run, uri
from tests.transport.test_codec_composite import nested

FLOOD = 300


def hostile(rng: random.Random) -> bytes:
    """One frame payload a broken or hostile peer might send; none is a valid message."""
    kind = rng.randrange(6)
    if kind == 0:
        return nested(rng.choice([33, 500, 1000]))  # composites deeper than the limit
    if kind == 1:  # a relative time no clock can fix
        return msgpack.packb(["sub", "1", ["c", [["time", ">", ["rel", -(10**15)]]]], 5])
    if kind == 2:
        return msgpack.packb(["pub", "1", ["c", [["x", None]]], 5, True, None])
    if kind == 3:
        return msgpack.packb([rng.choice(["nope", "sub", "csub", "notify"]), rng.random()])
    if kind == 4:
        return b"\x91" * rng.randint(1, 2000) + b"\xc0"  # arrays nested up to msgpack's own limit
    return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))


def test_a_flood_of_hostile_frames_is_refused_counted_and_logged_briefly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rng = random.Random(14)

    async def scenario() -> None:
        broker = RouterService(uri("B1"))
        await broker.start()
        bystander = await Client.connect(broker.uri, "bystander")
        reader, writer = await asyncio.open_connection(broker.uri.host, broker.uri.port)
        writer.write(encode(Hello("client", "fuzz")))
        for _ in range(FLOOD):
            payload = hostile(rng)
            writer.write(struct.pack(">I", len(payload)) + payload)
        writer.write(encode(StatusReply("s", {})))  # valid, but not from a client: refused too
        writer.write(encode(VoteRequest(9, "B1", 0, 0)))  # a site's consensus: not on this link
        writer.write(encode(InstallSnapshot(9, "B1", 5, 1, b"state")))  # nor a site's snapshot
        writer.write(encode(Piece(1, 0, b"\x93")))  # nor a piece of one
        await writer.drain()
        frames = FrameDecoder()
        replies: list[object] = []
        while len(replies) < FLOOD + 5:  # the hello, then one refusal per frame
            data = await asyncio.wait_for(reader.read(1 << 16), 10)
            assert data, f"the broker closed the link after {len(replies)} replies"
            replies += [decode(payload) for payload in frames.feed(data)]
        assert isinstance(replies[0], Hello) and (replies[0].kind, replies[0].id) == ("broker", "B1")
        assert all(isinstance(r, Refuse) for r in replies[1:])
        assert sum(r.reason.startswith("bad message") for r in replies[1:]) == FLOOD  # type: ignore[union-attr]
        assert replies[-3:] == [
            Refuse("", f"a {kind} is for the brokers of a site, and this link is not")
            for kind in ("VoteRequest", "InstallSnapshot", "Piece")
        ]
        assert "fuzz" in broker.links
        status = await bystander.status()  # and the broker serves everyone else
        assert status["counters"]["link.bad_messages"] == FLOOD + 3  # type: ignore[index]
        writer.close()
        await writer.wait_closed()
        await bystander.close()
        await broker.stop()

    with caplog.at_level(logging.WARNING, logger="broker"):
        run(scenario())
    warnings = [r for r in caplog.records if r.name == "broker" and r.levelno >= logging.WARNING]
    assert 1 <= len(warnings) <= 5, [r.getMessage() for r in warnings]
    assert all(len(r.getMessage()) < 400 for r in warnings)


def test_the_throttle_logs_a_burst_then_one_line_per_interval_with_the_count() -> None:
    throttle = LogThrottle(burst=3, interval=10.0, peers=2)
    assert [throttle.admit("a", 0.0) for _ in range(3)] == [0, 0, 0]
    assert [throttle.admit("a", 1.0) for _ in range(50)] == [None] * 50
    assert [throttle.admit("b", 1.0) for _ in range(4)] == [0, 0, 0, None]  # a burst per peer
    assert throttle.admit("a", 10.5) == 50  # the summary: 50 not logged since the last line
    assert throttle.admit("a", 11.0) is None
    throttle.admit("c", 12.0)  # a third peer: the one heard from longest ago ("b") is forgotten
    assert throttle.admit("b", 12.0) == 0  # remembered, it would have said 1 not logged
