"""A message the broker cannot encode (a composite's firing larger than a frame) costs itself
only: the committer task, the publisher's link and the subscriber's custody all go on."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.client import Client
from broker.language import Publication
from broker.transport.codec import MAX_FRAME
from broker.transport.server import RouterService
from tests.client.test_reconnect import FAST
from tests.transport.harness import run, until, uri

PAIR = "{{[class,eq,stock],[n,=,1]}&{[class,eq,stock],[n,=,2]}}"
BIG = "x" * 600_000  # one publication fits a 1 MiB frame; a Notify of two does not


@pytest.mark.parametrize("logged", [False, True], ids=["memory", "log"])
def test_a_firing_too_large_to_send_is_dropped_and_later_ones_flow(tmp_path: Path, logged: bool) -> None:
    async def scenario() -> None:
        b = RouterService(uri("B1"), session_grace=60.0, data=tmp_path / "b1" if logged else None)
        await b.start()
        pub = await Client.connect(b.uri, "pub", backoff=FAST)
        sub = await Client.connect(b.uri, "sub", backoff=FAST)
        await pub.advertise("[class,eq,stock],[n,isPresent,0],[text,isPresent,'']")
        pair = await sub.subscribe_composite(PAIR)
        for n in (1, 2):
            await pub.publish(Publication("stock", {"n": n, "text": BIG}))
        await until(lambda: b.router.counters["dropped.unsendable"] == 1, what="the large firing dropped")
        cut = b.links["sub"]
        cut.close("cut by the test", abort=True)  # what custody holds for it goes again
        await until(lambda: b.links.get("sub") not in (None, cut), what="the subscriber back")
        for n in (1, 2):  # acknowledged: with a log, by the committer that met the large one
            await pub.publish(Publication("stock", {"n": n, "text": "small"}))
        delivery = await pair.next(timeout=5)
        assert [p["text"] for p in delivery.publications] == ["small", "small"]
        counters = b.status()["counters"]
        assert counters["dropped.unsendable"] == 1  # type: ignore[index]  # not held, not sent again
        assert b.counters["task_errors"] == b.counters["bad_frames"] == 0
        assert pub.counters["reconnects"] == 0
        for client in (pub, sub):
            await client.close()
        await b.stop()

    run(scenario())


def test_a_publication_whose_delivery_does_not_fit_a_frame_costs_that_delivery_only() -> None:
    """The client-side case: the publication fits a Publish frame, but its Deliver (with the
    subscription ids and the overlay-wide id) is larger; the publisher's link must not pay."""

    async def scenario() -> None:
        b = RouterService(uri("B1"))
        await b.start()
        pub = await Client.connect(b.uri, "pub", backoff=FAST)
        sub = await Client.connect(b.uri, "sub", backoff=FAST)
        await pub.advertise("[class,eq,stock],[n,isPresent,0],[text,isPresent,'']")
        s = await sub.subscribe("[class,eq,stock]")
        await pub.publish(Publication("stock", {"n": 1, "text": "x" * (MAX_FRAME - 60)}))
        await pub.publish(Publication("stock", {"n": 2, "text": "small"}))
        assert (await s.next(timeout=5)).publication["n"] == 2
        assert (b.router.counters["dropped.unsendable"], pub.counters["reconnects"]) == (1, 0)
        for client in (pub, sub):
            await client.close()
        await b.stop()

    run(scenario())
