"""When a client tells its broker it has taken a delivery: when its consumer asks for the next one
of the same stream, or, with ``manual_done``, when the application says so (after its journal)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from broker.client import Client, Delivery
from broker.client import deliveries as deliveries_module
from broker.language import Publication
from broker.transport.server import RouterService
from tests.client.test_reconnect import ADV, FAST
from tests.transport.harness import run, until, uri


def _held(broker: RouterService) -> int:
    return int(broker.router.status()["held"])


def test_a_delivery_is_taken_when_the_next_is_asked_for() -> None:
    async def scenario() -> None:
        b = RouterService(uri("B1"), session_grace=60.0)
        await b.start()
        pub = await Client.connect(b.uri, "pub", backoff=FAST)
        sub = await Client.connect(b.uri, "sub", backoff=FAST)
        await pub.advertise(ADV)
        s = await sub.subscribe("[class,eq,stock]")
        for n in (1, 2):
            await pub.publish(Publication("stock", {"n": n}))
        await s.next(timeout=5)
        await s.next(timeout=5)
        await asyncio.sleep(0.2)
        assert _held(b) == 2  # the second is being handled; the first's Took waits for a batch
        with pytest.raises(TimeoutError):
            await s.next(timeout=0.2)  # caught up: both are taken, in one Took
        await until(lambda: _held(b) == 0, what="both taken once the consumer caught up")
        for c in (pub, sub):
            await c.close()
        await b.stop()

    run(scenario())


@asynccontextmanager
async def _three_held() -> AsyncIterator[tuple[RouterService, Client, list[Delivery]]]:
    """A broker holding three deliveries for a ``manual_done`` subscriber that has them all."""
    b = RouterService(uri("B1"), session_grace=60.0)
    await b.start()
    pub = await Client.connect(b.uri, "pub", backoff=FAST)
    sub = await Client.connect(b.uri, "sub", backoff=FAST, manual_done=True)
    await pub.advertise(ADV)
    s = await sub.subscribe("[class,eq,stock]")
    for n in (1, 2, 3):
        await pub.publish(Publication("stock", {"n": n}))
    got = [await s.next(timeout=5) for _ in range(3)]
    await until(lambda: _held(b) == 3, what="all held: none is done")
    yield b, sub, got
    for c in (pub, sub):
        await c.close()
    await b.stop()


def test_with_manual_done_a_delivery_is_taken_only_when_the_application_says_so() -> None:
    async def scenario() -> None:
        async with _three_held() as (b, sub, got):
            sub.done(got[1])
            sub.done(got[0])
            await until(lambda: _held(b) == 1, what="the first two taken, in order")

    run(scenario())


def test_deliveries_done_in_one_turn_are_taken_with_one_took() -> None:
    """An agent is done with a journaled batch one delivery after the other, each time with
    nothing left in its queue: one Took covers them all, not one a delivery."""

    async def scenario() -> None:
        async with _three_held() as (b, sub, got):
            before = b.router.counters["in.Took"]
            for delivery in got:
                sub.done(delivery)
            await until(lambda: _held(b) == 0, what="all three taken")
            assert b.router.counters["in.Took"] - before == 1

    run(scenario())


def test_deliveries_done_in_turns_close_together_are_taken_with_one_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A consumer that keeps up with a steady stream is caught up after each delivery, in a turn
    of its own: its Took waits ``DELAY`` to cover those that follow (a Took each was a third of
    what a broker handled in a busy workflow)."""
    monkeypatch.setattr(deliveries_module, "DELAY", 0.5)  # a slow machine's turns stay well inside it

    async def scenario() -> None:
        async with _three_held() as (b, sub, got):
            before = b.router.counters["in.Took"]
            for delivery in got:
                sub.done(delivery)
                await asyncio.sleep(0.01)
            await until(lambda: _held(b) == 0, what="all three taken")
            assert b.router.counters["in.Took"] - before == 1

    run(scenario())


def test_a_took_due_at_the_end_of_the_turn_goes_before_the_client_closes() -> None:
    """Done, then closed before the Took's delay (to start again later): the broker has the Took,
    so the next run is not handed the same deliveries again."""

    async def scenario() -> None:
        async with _three_held() as (b, sub, got):
            for delivery in got:
                sub.done(delivery)
            await sub.close(bye=False)
            await until(lambda: _held(b) == 0, what="all three taken before the link closed")

    run(scenario())
