"""A client's receive queue takes a delivery out at its expiry, wherever it waits, not when it
reaches the head: counted (``expired``) then, done with for its broker, and holding no room.

The queue's dates come from a manual clock (``ManualClock``, the clock the client is given): it
moves only when a test moves it. The timer the queue sets for the soonest expiry runs on the
event loop's own time, so a test moves the clock past the expiry first and then lets the loop
run past the timer (an ``asyncio.sleep`` longer than the timer's delay returns after it)."""

from __future__ import annotations

import asyncio
from collections import Counter

from broker.client import Client, Qos
from broker.client.queues import GONE_AT, REINDEX_AT, DeliveryQueue
from broker.clock import ManualClock
from broker.transport.server import RouterService
from tests.client.test_qos_skew import WallClock
from tests.transport.harness import run, until, uri

Item = tuple[int, int, float | None]  # priority, number, expiry (epoch seconds)
TIMER = 0.05  # seconds of the loop's time until the items that expire do


def number(item: Item) -> int:
    return item[1]


def queue_of(clock: ManualClock, limit: int, dropped: list[tuple[int, bool]]) -> DeliveryQueue[Item]:
    """A queue of ``limit`` items by the dates of ``clock``; what it drops goes to ``dropped``
    (the item's number, and whether the queue was empty then)."""
    return DeliveryQueue(
        limit,
        Counter(),
        lambda queue: None,
        on_drop=lambda item, caught_up: dropped.append((number(item), caught_up)),
        priority=lambda item: item[0],
        expires=lambda item: item[2],
        dates=clock.time,
    )


def test_an_expired_entry_leaves_the_queue_at_its_expiry_wherever_it_waits() -> None:
    """A full queue, its head and another entry never expiring: the two entries that expire,
    one of them last, leave at their expiry with nobody reading, counted, and make room."""

    async def scenario() -> None:
        clock, dropped = ManualClock(), []
        queue = queue_of(clock, 4, dropped)
        soon = clock.time() + TIMER
        for item in [(9, 0, None), (5, 1, soon), (5, 2, None), (1, 3, soon)]:
            queue.put(item)
        assert queue.full and not queue.space.is_set()
        clock.advance(1.0)
        await asyncio.sleep(4 * TIMER)
        assert queue.queue.qsize() == 2 and queue.counters["expired"] == 2
        assert dropped == [(1, False), (3, False)]
        assert queue.space.is_set()  # a reader waiting for room reads on
        assert [number(await queue.get(0)) for _ in range(2)] == [0, 2]  # type: ignore[arg-type]
        assert queue.queue.empty()

    run(scenario())


def test_an_entry_expired_on_its_way_never_enters_and_a_clock_jump_is_seen_at_the_next_get() -> None:
    async def scenario() -> None:
        clock, dropped = ManualClock(), []
        queue = queue_of(clock, 10, dropped)
        queue.put((5, 0, clock.time() - 1.0))  # expired before it came
        assert queue.queue.empty() and dropped == [(0, True)]
        queue.put((5, 1, clock.time() + 3600.0))  # its timer rings in an hour
        queue.put((1, 2, None))
        clock.advance(7200.0)  # a date that jumped: the next get sees it, not the timer
        assert number(await queue.get(0)) == 2  # type: ignore[arg-type]
        assert queue.counters["expired"] == 2 and dropped[-1] == (1, False)

    run(scenario())


def test_what_expires_or_was_taken_leaves_no_trail_in_the_queue() -> None:
    """Thousands of entries expired behind one that does not, then thousands taken before they
    expired: the lanes and the expiries the queue keeps stay of the order of what waits."""

    async def scenario() -> None:
        clock, dropped = ManualClock(), []
        queue = queue_of(clock, 100_000, dropped)
        queue.put((9, 0, None))
        for n in range(1, 3001):
            queue.put((1, n, clock.time() + TIMER))
        clock.advance(1.0)
        await asyncio.sleep(4 * TIMER)
        lanes = queue.queue._lanes
        assert len(dropped) == 3000 and sum(len(lane) for lane in lanes.values()) <= GONE_AT + 1
        assert number(await queue.get(0)) == 0  # type: ignore[arg-type]
        for n in range(3001, 6001):
            queue.put((1, n, clock.time() + 3600.0))
            assert number(await queue.get(0)) == n  # type: ignore[arg-type]
        assert len(queue.queue._expiring) <= 2 * REINDEX_AT and queue.queue.empty()

    run(scenario())


def test_a_subscriber_that_reads_nothing_has_its_expired_deliveries_taken_out_at_their_expiry() -> None:
    """Ten deliveries with a ttl of one second, behind one that never expires, wait in a
    subscription's queue whose consumer reads nothing: once the date passes their expiry they
    are out of the client (counted, not queued), and the consumer then gets the other only."""

    async def scenario() -> None:
        clock = WallClock()  # manual dates (the broker's and the client's), real intervals
        broker = RouterService(uri("B1"), clock=clock)
        await broker.start()
        sub = await Client.connect(broker.uri, "sub", clock=clock)
        pub = await Client.connect(broker.uri, "pub", clock=clock)
        stream = await sub.subscribe("[class,eq,t]")
        await pub.advertise("[class,eq,t],[n,>,-1]")
        await pub.publish("[class,t],[n,0]", Qos(priority=9))
        for n in range(1, 11):
            await pub.publish(f"[class,t],[n,{n}]", Qos(ttl=1.0))
        await until(lambda: sub.stats()["queued"] == 11, what="all in the queue")
        clock.advance(2.0)
        await until(lambda: sub.stats().get("expired") == 10, timeout=5, what="expired where they wait")
        assert sub.stats()["queued"] == 1
        assert (await stream.next(timeout=5)).publication["n"] == 0
        for client in (pub, sub):
            await client.close()
        await broker.stop()

    run(scenario())
