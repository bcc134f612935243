"""A publication's quality of service through a broker and the client library: the subscriber
sees its priority, id and expiry; one that expires while waiting in the subscriber's queue is
never handed out; what the overlay does not do yet is refused before anything is sent."""

from __future__ import annotations

import asyncio

import pytest

from broker.client import Client, Qos
from broker.transport.server import RouterService
from tests.transport.harness import run, uri


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


@pytest.mark.parametrize(
    ("qos", "error"),
    [
        (Qos(retain=True), "not built yet: retain"),
        (Qos(ack="receipt", persistent=False), "not built yet: persistent=false, ack=receipt"),
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
