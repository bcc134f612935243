"""A publication's quality of service through brokers and the client library: the subscriber
sees its priority, id and expiry; one that expires while waiting in the subscriber's queue is
never handed out; what the overlay does not do yet is refused before anything is sent; acks
and receipts come back to the publisher; a retained alert reaches a subscriber that comes later
and is cancelled as its policy allows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from broker.client import Client, Delivery, Qos, Subscription
from broker.transport import driver
from broker.transport.server import RouterService
from tests.transport.harness import run, until, uri


@asynccontextmanager
async def two_brokers() -> AsyncIterator[tuple[RouterService, RouterService]]:
    """B1 - B2, stopped after."""
    b1 = RouterService(uri("B1"))
    b2 = RouterService(uri("B2"), neighbors=[b1.uri])
    await b1.start()
    await b2.start()
    try:
        yield b1, b2
    finally:
        await b2.stop()
        await b1.stop()


def test_a_delivery_carries_its_quality_of_service_and_an_expired_one_is_never_handed_out() -> None:
    async def scenario() -> None:
        broker = RouterService(uri("B1"))
        await broker.start()
        sub = await Client.connect(broker.uri, "sub")
        pub = await Client.connect(broker.uri, "pub")
        stream = await sub.subscribe("[class,eq,t]")
        await pub.advertise("[class,eq,t],[n,>,0]")
        await pub.publish("[class,t],[n,1]", Qos(priority=9, ttl=0.3, mid="first"))
        await pub.publish("[class,t],[n,2]", Qos(priority=1, mid="second"))
        await asyncio.sleep(0.5)  # the first expires in the subscriber's queue
        delivery = await stream.next(timeout=5)
        assert delivery.publication["n"] == 2 and delivery.qos == Qos(priority=1, mid="second")
        assert sub.stats()["expired"] == 1
        await pub.publish("[class,t],[n,3]", Qos(ttl=60))
        third = await stream.next(timeout=5)
        assert third.qos.expires is not None and 59 < third.qos.expires - third.time <= 60
        for client in (pub, sub):
            await client.close()
        await broker.stop()

    run(scenario())


def test_a_non_persistent_publication_goes_bare_in_its_place_among_persistent_ones(tmp_path: Path) -> None:
    """Through two brokers that keep logs: ``publish`` returns at once with its ref (nothing to
    wait for, nothing kept to send again), the subscriber gets it in order, outside custody."""

    async def scenario() -> None:
        b1 = RouterService(uri("B1"), data=tmp_path / "b1")
        b2 = RouterService(uri("B2"), neighbors=[b1.uri], data=tmp_path / "b2")
        await b1.start()
        await b2.start()
        sub = await Client.connect(b2.uri, "sub")
        pub = await Client.connect(b1.uri, "pub")
        stream = await sub.subscribe("[class,eq,t]")
        await pub.advertise("[class,eq,t],[n,>,0]")
        await until(lambda: b1.router.status()["subscriptions"] == 1, what="the subscription at B1")
        await pub.publish("[class,t],[n,1]")
        ref = await pub.publish("[class,t],[n,2]", Qos(persistent=False))  # (a higher priority may overtake)
        pub.publish_nowait("[class,t],[n,3]", qos=Qos(persistent=False))
        await pub.publish("[class,t],[n,4]")
        assert "@" in ref and "/" not in ref  # its ref: no answer tells its overlay-wide id
        assert pub.counters["published.nonpersistent"] == 2 and pub.asking.unacknowledged == 0
        got = await taken(stream, 4)
        assert [d.publication["n"] for d in got] == [1, 2, 3, 4]
        assert [d.qos.persistent for d in got] == [True, False, False, True]
        assert [bool(d.seq) for d in got] == [True, False, False, True]  # the bare ones: no Took owed
        assert b2.router.custody.channels["sub"].next_seq == 3  # seqs 1 and 2: the persistent ones
        for client in (pub, sub):
            await client.close()
        await b2.stop()
        await b1.stop()

    run(scenario())


async def taken(stream: Subscription, count: int) -> list[Delivery]:
    return [await stream.next(timeout=5) for _ in range(count)]


@pytest.mark.parametrize(
    ("qos", "error"),
    [
        (Qos(retain=True, persistent=False), "a retained publication must be persistent"),
        (Qos(ack="receipt", persistent=False), "an acknowledged publication must be persistent"),
        (Qos(expires=9e9), "a publisher gives a ttl; its broker sets when it expires"),
    ],
)
def test_what_the_overlay_does_not_do_yet_is_refused_before_it_is_sent(qos: Qos, error: str) -> None:
    async def scenario() -> None:
        broker = RouterService(uri("B1"))
        await broker.start()
        pub = await Client.connect(broker.uri, "pub")
        await pub.advertise("[class,eq,t],[n,>,0]")
        with pytest.raises(ValueError, match=error):
            await pub.publish("[class,t],[n,1]", qos)
        with pytest.raises(ValueError, match=error):
            pub.publish_nowait("[class,t],[n,1]", qos=qos)
        assert broker.router.counters["in.Publish"] == 0
        await pub.close()
        await broker.stop()

    run(scenario())


def test_receipts_and_client_acks_come_back_to_the_publisher_as_acks_anyone_may_subscribe_to() -> None:
    """Two subscribers on two brokers: each client sends a receipt for an ``ack=receipt``
    publication as soon as it has it; an ``ack=client`` one waits for the application's ack. The
    publisher gets them (who acknowledged named by the broker), and an operator subscribed to
    ``ACK`` sees them all."""

    async def scenario() -> None:
        async with two_brokers() as (b1, b2):
            operator = await Client.connect(b1.uri, "operator")
            acks = await operator.subscribe("[class,eq,'ACK']")
            first = await Client.connect(b1.uri, "first")
            second = await Client.connect(b2.uri, "second")
            streams = [await c.subscribe("[class,eq,t]") for c in (first, second)]
            pub = await Client.connect(b2.uri, "pub")
            await pub.advertise("[class,eq,t],[n,>,0]")
            await asyncio.sleep(0.3)  # the subscriptions reach B2
            receipt_id = await pub.publish("[class,t],[n,1]", Qos(ack="receipt", mid="r1"))
            got = await pub.receipt(receipt_id, timeout=5)
            assert (got.id, got.mid, got.kind) == (receipt_id, "r1", "receipt") and got.by in (
                "first",
                "second",
            )
            client_id = await pub.publish("[class,t],[n,2]", Qos(ack="client", mid="c1"))
            with pytest.raises(TimeoutError):
                await pub.receipt(client_id, timeout=0.5)  # nobody acknowledged it yet
            deliveries = [await stream.next(timeout=5) for stream in streams]
            assert [d.publication["n"] for d in deliveries] == [1, 1]
            with pytest.raises(ValueError, match="asked for no client acknowledgement"):
                await second.ack(deliveries[1])
            second_delivery = await streams[1].next(timeout=5)
            assert second_delivery.publication["n"] == 2
            await second.ack(second_delivery)
            acked = await pub.receipt(client_id, timeout=5)
            assert (acked.kind, acked.by, acked.mid) == ("client", "second", "c1")
            seen = sorted([(d.publication["kind"], d.publication["mid"]) for d in await taken(acks, 3)])
            assert seen == [("client", "c1"), ("receipt", "r1"), ("receipt", "r1")]
            for client in (pub, first, second, operator):
                await client.close()

    run(scenario())


def test_a_retained_alert_reaches_an_operator_who_subscribes_later_on_another_broker() -> None:
    """Kept by B1, the alert reaches an operator connecting to B2 after its publisher left; a
    cancel by another client is refused under the originator policy, the publisher's works."""

    async def scenario() -> None:
        async with two_brokers() as (b1, b2):
            agent = await Client.connect(b1.uri, "agent")
            await agent.advertise("[class,eq,ALERT],[job,isPresent,'']")
            await agent.publish("[class,ALERT],[job,load]", Qos(priority=9, retain=True, mid="load-1"))
            await agent.close()
            operator = await Client.connect(b2.uri, "operator")
            alerts = await operator.subscribe("[class,eq,ALERT]")
            got = await alerts.next(timeout=5)
            assert (got.publication["job"], got.qos.mid, got.qos.priority) == ("load", "load-1", 9)
            await operator.cancel("load-1")  # not its publisher's identity
            await asyncio.sleep(0.3)
            assert b1.router.status()["retained"] == 1
            again = await Client.connect(b1.uri, "agent")
            await again.cancel("load-1")
            await asyncio.sleep(0.3)
            assert b1.router.status()["retained"] == 0 == b2.router.status()["retained"]
            for client in (operator, again):
                await client.close()

    run(scenario())


def test_what_expires_while_a_subscriber_is_away_goes_when_it_expires_on_a_quiet_broker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing else happens on the broker: a Tick comes at the expiry itself (the usual ones are
    a minute apart here), and the publication held for the subscriber away is dropped."""
    monkeypatch.setattr(driver, "TICK", 60.0)

    async def scenario() -> None:
        broker = RouterService(uri("B1"), session_grace=600)
        await broker.start()
        sub = await Client.connect(broker.uri, "sub")
        await sub.subscribe("[class,eq,t]")
        pub = await Client.connect(broker.uri, "pub")
        await pub.advertise("[class,eq,t],[n,>,0]")
        await sub.close(bye=False)  # away: its session waits for it
        await until(lambda: broker.router.status()["away"] == ["sub"], what="the subscriber away")
        await pub.publish("[class,t],[n,1]", Qos(ttl=0.5))
        assert broker.router.custody.status()["held_for_away"] == 1
        await until(lambda: broker.router.counters["expired.held"] == 1, timeout=5, what="expired")
        assert broker.router.custody.status()["held_for_away"] == 0
        await pub.close()
        await broker.stop()

    run(scenario())


def test_a_leased_subscription_lives_while_its_client_renews_it_and_ends_when_it_hangs() -> None:
    async def scenario() -> None:
        broker = RouterService(uri("B1"), session_grace=600)
        await broker.start()
        sub = await Client.connect(broker.uri, "sub")
        stream = await sub.subscribe("[class,eq,t]", lease=1.0)
        pub = await Client.connect(broker.uri, "pub")
        await pub.advertise("[class,eq,t],[n,>,0]")
        await asyncio.sleep(2.5)  # two and a half leases: renewed meanwhile
        await pub.publish("[class,t],[n,1]")
        assert (await stream.next(timeout=5)).publication["n"] == 1
        assert sub._renewing is not None
        sub._renewing.cancel()  # as if the application hung: no more renewals
        await until(lambda: broker.router.counters["leases.expired"] == 1, timeout=5, what="the lease ended")
        assert broker.router.status()["subscriptions"] == 0
        for client in (pub, sub):
            await client.close()
        await broker.stop()

    run(scenario())
