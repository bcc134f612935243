"""Priority and pull through brokers and the client library: an urgent publication overtakes a
backlog built for a subscriber that was paused, on the way and in the subscriber's own queue; a
subscriber pulls batches with ``fetch`` and goes back to being pushed, or turns from pushed to
pulling mid-stream, with nothing lost or repeated, across a reconnection too."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from broker.client import Client, Qos
from broker.client.queues import DeliveryQueue
from broker.routing.backlog import WINDOW
from broker.transport.server import RouterService
from tests.client.test_reconnect import FAST
from tests.transport.harness import run, until, uri

BACKLOG = 2_000


def first(item: tuple[int, int]) -> int:
    return item[0]


@asynccontextmanager
async def chain(queue_limit: int = 100_000) -> AsyncIterator[tuple[RouterService, Client, Client]]:
    """B1 - B2 - B3, a publisher of ``t`` at B1 and a subscriber at B3 (its queues full at
    ``queue_limit``)."""
    b1 = RouterService(uri("B1"), session_grace=60.0)
    b2 = RouterService(uri("B2"), neighbors=[b1.uri], session_grace=60.0)
    b3 = RouterService(uri("B3"), neighbors=[b2.uri], session_grace=60.0)
    for b in (b1, b2, b3):
        await b.start()
    await until(lambda: len(b2.router.tables.neighbors) == 2, what="the chain linked")
    pub = await Client.connect(b1.uri, "pub")
    sub = await Client.connect(b3.uri, "sub", backoff=FAST, queue_limit=queue_limit)
    await pub.advertise("[class,eq,t],[n,>,-1]")
    try:
        yield b3, pub, sub
    finally:
        for client in (pub, sub):
            await client.close()
        for b in (b3, b2, b1):
            await b.stop()


def test_an_urgent_publication_overtakes_a_backlog_built_for_a_paused_subscriber() -> None:
    async def scenario() -> None:
        async with chain() as (b3, pub, sub):
            stream = await sub.subscribe("[class,eq,t]")
            await asyncio.sleep(0.2)
            for n in range(BACKLOG):
                pub.publish_nowait(f"[class,t],[n,{n}]", qos=Qos(priority=1))
            await pub.publish(f"[class,t],[n,{BACKLOG}]", Qos(priority=9))
            await until(
                lambda: b3.router.status()["waiting"] > BACKLOG - 2 * WINDOW, what="the backlog at B3"
            )
            got = [(await stream.next(timeout=10)).publication["n"] for _ in range(BACKLOG + 1)]
            assert sorted(got) == list(range(BACKLOG + 1))  # nothing lost, nothing twice
            assert got.index(BACKLOG) < 2 * WINDOW  # not after the 2,000 before it
            low = [n for n in got if n != BACKLOG]
            assert low == sorted(low)  # one publisher, one priority: in order

    run(scenario(), timeout=60)


def test_the_client_hands_out_the_highest_priority_first_and_in_order_within_one() -> None:
    async def scenario() -> None:
        queue: DeliveryQueue[tuple[int, int]] = DeliveryQueue(100, Counter(), print, priority=first)
        for item in [(1, 0), (5, 1), (1, 2), (9, 3), (5, 4)]:
            queue.put(item)
        queue.put(None)
        got = [await queue.get(1.0) for _ in range(6)]
        assert got == [(9, 3), (5, 1), (5, 4), (1, 0), (1, 2), None]

    run(scenario())


def test_a_lossy_queue_drops_its_oldest_of_the_lowest_priority() -> None:
    async def scenario() -> None:
        queue: DeliveryQueue[tuple[int, int]] = DeliveryQueue(3, Counter(), print, lossy=True, priority=first)
        for item in [(9, 0), (1, 1), (1, 2), (5, 3)]:
            queue.put(item)
        assert [await queue.get(1.0) for _ in range(3)] == [(9, 0), (5, 3), (1, 2)]

    run(scenario())


def test_a_subscriber_fetches_batches_then_is_pushed_to_with_nothing_lost_or_repeated() -> None:
    async def scenario() -> None:
        async with chain() as (b3, pub, sub):
            await sub.subscribe("[class,eq,t]", own_queue=False)
            first = await sub.fetch(10, timeout=0.5)  # nothing yet: an empty batch, no error
            assert first == []
            for n in range(25):
                await pub.publish(f"[class,t],[n,{n}]")
            await until(lambda: b3.router.status()["waiting"] == 15, what="15 kept at B3")
            batches = [await sub.fetch(10, timeout=2.0) for _ in range(3)]
            assert [[d.publication["n"] for d in batch] for batch in batches] == [
                list(range(10)),
                list(range(10, 20)),
                list(range(20, 25)),
            ]
            sub.push()
            for n in range(25, 30):
                await pub.publish(f"[class,t],[n,{n}]")
            assert [(await sub.next(timeout=5)).publication["n"] for _ in range(5)] == list(range(25, 30))
            assert b3.router.status()["waiting"] == 0

    run(scenario(), timeout=60)


def test_a_pushed_subscriber_turns_to_pulling_mid_stream_with_nothing_lost_or_repeated() -> None:
    """1,000 publications pushed to a subscriber that reads nothing: B3 carried a window, which
    its client reads beyond its full queue (50) until it stops reading, and keeps the rest. The
    subscriber turns to pulling with ``fetch(10)``: it gets what was pushed first, then only
    what it asks for (B3 keeps the others; what was carried and not read yet when it turned
    comes too, taken for some of what it asked, so it may ask for that many more than it
    needs), every publication once, in order, ten at most at a time."""

    async def scenario() -> None:
        total = BACKLOG // 2
        async with chain(queue_limit=50) as (b3, pub, sub):
            await sub.subscribe("[class,eq,t]", own_queue=False)
            await asyncio.sleep(0.2)
            for n in range(total - 1):
                pub.publish_nowait(f"[class,t],[n,{n}]")
            await pub.publish(f"[class,t],[n,{total - 1}]")
            await until(lambda: sub.stats()["queued"] >= 50, what="the subscriber's queue full")
            await until(lambda: b3.router.status()["waiting"] == total - WINDOW, what="the rest at B3")
            unread = WINDOW - sub.deliveries.receipts.received  # carried, and in the socket still
            got: list[int] = []
            while len(got) < total:
                batch = await sub.fetch(10, timeout=5.0)
                assert 0 < len(batch) <= 10
                got += [int(d.publication["n"]) for d in batch]  # type: ignore[call-overload]
                sent = total - b3.router.status()["waiting"]  # pushed, then asked for
                assert sent <= max(WINDOW, len(got) + 10) + unread
            assert got == list(range(total))
            assert await sub.fetch(10, timeout=0.3) == []
            assert sub.stats()["dropped.duplicates"] == 0 and b3.router.status()["waiting"] == 0

    run(scenario(), timeout=60)


def test_a_pulling_subscriber_that_reconnects_still_pulls_and_loses_nothing() -> None:
    async def scenario() -> None:
        async with chain() as (b3, pub, sub):
            await sub.subscribe("[class,eq,t]", own_queue=False)
            await sub.fetch(1, timeout=0.2)
            b3.links["sub"].close("cut by the test", abort=True)
            for n in range(12):
                await pub.publish(f"[class,t],[n,{n}]")
            await until(lambda: sub.connected and b3.links.get("sub") is not None, what="back")
            await until(lambda: b3.router.status()["waiting"] >= 11, what="kept at B3, not pushed")
            got = [d.publication["n"] for d in await sub.fetch(5, timeout=2.0)]
            got += [d.publication["n"] for d in await sub.fetch(10, timeout=1.0)]
            assert got == list(range(12))

    run(scenario(), timeout=60)


@pytest.mark.parametrize("bad", [0, -1, 10**7, 1.5])
def test_a_fetch_of_a_bad_size_is_refused(bad: object) -> None:
    async def scenario() -> None:
        async with chain() as (_, _pub, sub):
            with pytest.raises(ValueError, match="fetch takes 1 to"):
                await sub.fetch(bad, timeout=0.1)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="pull takes 0 to"):
                sub.pull(-1)

    run(scenario())


def test_a_composite_firing_comes_with_its_subscription_priority() -> None:
    async def scenario() -> None:
        async with chain() as (_, pub, sub):
            urgent = await sub.subscribe_composite(
                "{[class,eq,t],[n,>,5]}&{[class,eq,t],[n,<,3]}", priority=9
            )
            await asyncio.sleep(0.2)
            for n in (1, 7):
                await pub.publish(f"[class,t],[n,{n}]")
            firing = await urgent.next(timeout=5)
            assert firing.qos.priority == 9 and len(firing.publications) == 2

    run(scenario())
