"""Never drop silently: a consumer that falls behind slows the flow; a lossy one counts its drops."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

from broker.client import Client
from broker.client.queues import DeliveryQueue, Seen, dedup_key
from broker.language import Publication
from broker.messages import client_session
from broker.transport.server import RouterService
from tests.transport.harness import run, until, uri

FLOOD = 20_000
PAD = "x" * 200


@contextlib.asynccontextmanager
async def flooding() -> AsyncIterator[tuple[RouterService, Client, Client]]:
    """A broker, a publisher that may flood it, and a subscriber whose queues hold 100."""
    b = RouterService(uri("B1"))
    await b.start()
    pub = await Client.connect(b.uri, "pub")
    sub = await Client.connect(b.uri, "sub", queue_limit=100)
    await pub.advertise("[class,eq,bulk],[n,isPresent,0],[pad,isPresent,'']")
    try:
        yield b, pub, sub
    finally:
        for c in (pub, sub):
            await c.close()
        await b.stop()


def test_a_flood_to_a_slow_consumer_loses_nothing_under_back_pressure() -> None:
    async def scenario() -> None:
        async with flooding() as (b, pub, sub):
            s = await sub.subscribe("[class,eq,bulk]")
            for n in range(FLOOD):
                pub.publish_nowait(Publication("bulk", {"n": n, "pad": PAD}))
                if n % 500 == 0:
                    await asyncio.sleep(0)
            got = []
            for _ in range(FLOOD):
                got.append((await s.next(timeout=10)).publication["n"])
                if len(got) % 1000 == 0:
                    await asyncio.sleep(0.01)  # slower than the publisher
            assert got == list(range(FLOOD))
            assert sub.stats()["dropped.lossy"] == 0 and sub.connected
            assert "sub" in b.links and b.status()["counters"].get("link.slow_consumers", 0) == 0

    run(scenario(), timeout=60)


def test_a_lossy_subscription_counts_every_delivery_it_drops() -> None:
    async def scenario() -> None:
        async with flooding() as (_, pub, sub):
            lossy = await sub.subscribe("[class,eq,bulk]", lossy=True)
            total = 2_000
            for n in range(total):
                pub.publish_nowait(Publication("bulk", {"n": n, "pad": PAD}))
            await until(lambda: lossy.dropped + lossy._queue.queue.qsize() == total, what="every delivery in")
            kept = [(await lossy.next(timeout=1)).publication["n"] for _ in range(100)]
            assert kept == list(range(total - 100, total))  # the newest stay
            assert lossy.dropped == total - 100 == sub.stats()["dropped.lossy"] == sub.dropped

    run(scenario(), timeout=60)


def test_a_full_queue_asks_the_reader_to_wait_and_frees_it_when_read() -> None:
    async def scenario() -> None:
        full: list[object] = []
        queue: DeliveryQueue[int] = DeliveryQueue(2, Counter(), full.append)
        queue.put(1)
        assert not full and queue.space.is_set()
        queue.put(2)
        assert full == [queue] and not queue.space.is_set()
        assert await queue.get(None) == 1 and queue.space.is_set()

    run(scenario())


def test_seen_drops_a_copy_routed_by_another_broker_only_for_client_sessions() -> None:
    session = client_session(1.0, 0xABCDEF)
    assert len(session) == 20 and dedup_key(f"B1/c/3@{session}") == f"c/3@{session}"
    assert dedup_key("B1/c/3@18c0ffee000") == "B1/c/3@18c0ffee000"  # a broker's own session
    seen = Seen(limit=2)
    assert not seen.again(f"B1/c/3@{session}") and seen.again(f"B2/c/3@{session}")
    assert not seen.again("B1/c/3@18c0ffee000") and not seen.again("B2/c/3@18c0ffee000")
    assert not seen.again(f"B1/c/3@{session}")  # forgotten past the limit
