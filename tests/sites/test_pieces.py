"""A member link's large messages as a stream (``broker.sites.pieces``), over an in-memory stream
pair whose writer waits until the other end reads: a peer that reads slowly shows at once."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from broker.errors import LinkClosed
from broker.messages import InstallSnapshot, Piece, WireMessage
from broker.sites.pieces import Assembly, Outbox
from broker.transport import codec
from broker.transport.link import Link
from broker.transport.memory import memory_pair
from tests.transport.harness import run

FRAME = 4096
QUEUE = 64 << 10


def snapshot(index: int, size: int) -> InstallSnapshot:
    return InstallSnapshot(2, "b1", index, 2, random.Random(index).randbytes(size))


def linked() -> tuple[Link, Link]:
    """A leader's end of a member link (queueing at most ``QUEUE`` bytes) and its follower's."""
    (r1, w1), (r2, w2) = memory_pair()
    return Link(r1, w1, "to b2", queue_limit=QUEUE), Link(r2, w2, "from b1")


def refuse(message: WireMessage, error: Exception) -> None:
    raise AssertionError(f"{message} is unsendable: {error}")


async def received(link: Link, assembly: Assembly, count: int, pause: float = 0.0) -> list[object]:
    """The first ``count`` messages ``link`` reads, put back together, read ``pause`` apart."""
    got: list[object] = []
    while len(got) < count:
        for item in await link.receive():
            if type(item) is Piece:
                item = assembly.take(item)
            if item is not None:
                got.append(item)
        await asyncio.sleep(pause)
    return got


def test_a_message_many_times_the_link_s_queue_goes_through_as_the_peer_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 MiB, 32 times what the link queues, to a peer that reads slowly: never more than the
    window (a quarter of the queue) and a piece wait for it, and it gets the message whole."""
    monkeypatch.setattr(codec, "MAX_FRAME", FRAME)

    async def scenario() -> None:
        sender, reader = linked()
        outbox = Outbox(sender, lambda message: True, refuse)
        message = snapshot(7, 2 << 20)
        outbox.send(message)
        waiting = 0

        async def watch() -> None:
            nonlocal waiting
            while True:
                waiting = max(waiting, sender.buffered())
                await asyncio.sleep(0)

        watching = asyncio.get_running_loop().create_task(watch())
        assembly = Assembly(tmp_path, 1 << 30)
        assert await received(reader, assembly, 1, pause=0.0005) == [message]
        watching.cancel()
        assert sender.closed is None and outbox.current is None
        assert 0 < waiting <= QUEUE // 4 + FRAME + 4
        assert assembly.dropped == 0
        await sender.wait_closed()
        await reader.wait_closed()

    run(scenario(), timeout=60)


def test_a_newer_snapshot_replaces_the_one_on_its_way_and_the_other_side_drops_its_half(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snapshot 5 starts out; sent again it is not started again; snapshot 9 replaces it: its
    first piece, at 0, tells the other side to drop the half of 5 it read, and 9 arrives whole."""
    monkeypatch.setattr(codec, "MAX_FRAME", FRAME)

    async def scenario() -> None:
        sender, reader = linked()
        outbox = Outbox(sender, lambda message: True, refuse)
        old, new = snapshot(5, 200_000), snapshot(9, 100_000)
        outbox.send(old)
        await asyncio.sleep(0.05)  # the window is full: the peer does not read yet
        assert outbox.current is old and 0 < sender.sent_frames <= QUEUE // 4 // (FRAME - 32) + 1
        outbox.send(old)  # its resend timer ran out while it streamed: it goes on
        outbox.send(new)
        assembly = Assembly(tmp_path, 1 << 30)
        assert await received(reader, assembly, 1) == [new]
        assert assembly.dropped == 1
        await sender.wait_closed()
        await reader.wait_closed()

    run(scenario(), timeout=60)


def test_a_stream_no_longer_wanted_stops_and_its_half_goes_with_the_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wanted`` says no after three pieces (the follower holds the snapshot, or its leader was
    deposed): no more go out; the other side drops the half it read when the link ends."""
    monkeypatch.setattr(codec, "MAX_FRAME", FRAME)
    asked = 0

    def wanted(message: WireMessage) -> bool:
        nonlocal asked
        asked += 1
        return asked <= 3

    async def scenario() -> None:
        sender, reader = linked()
        outbox = Outbox(sender, wanted, refuse)
        outbox.send(snapshot(5, 100_000))
        assembly = Assembly(tmp_path, 1 << 30)
        reading = asyncio.get_running_loop().create_task(received(reader, assembly, 1))
        await asyncio.sleep(0.1)
        assert outbox.current is None and sender.sent_frames == 3
        await sender.wait_closed()
        with pytest.raises(LinkClosed):
            await reading
        assert assembly._got == 3 * (FRAME - 32)
        assembly.close()
        assert assembly.dropped == 1
        await reader.wait_closed()

    run(scenario(), timeout=60)


def test_pieces_out_of_place_or_over_the_limit_are_refused(tmp_path: Path) -> None:
    assembly = Assembly(tmp_path, 100)
    with pytest.raises(ValueError, match="pieces of a message of 101 bytes, over 100"):
        assembly.take(Piece(101, 0, b"x"))
    with pytest.raises(ValueError, match="a piece at 5 of 10 bytes, where 0 of 0 were due"):
        assembly.take(Piece(10, 5, b"x"))
    assert assembly.take(Piece(10, 0, b"xxxxx")) is None
    with pytest.raises(ValueError, match="a piece at 6 of 10 bytes, where 5 of 10 were due"):
        assembly.take(Piece(10, 6, b"x"))
    error = assembly.take(Piece(10, 5, b"yyyyy"))  # whole, but not a message
    assert isinstance(error, ValueError) and "bad msgpack" in str(error)
    assert assembly.dropped == 0 and not list(tmp_path.iterdir())  # nothing left on disk
