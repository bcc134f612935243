"""Clock skew and time to live, on a live broker with clients whose clocks disagree with it.

What is tolerated (docs/qos.md, Time to live): the first broker fixes a publication's expiry on
its own clock (``ttl`` + its now), and every broker and client compares that expiry with its
own clock. So a publisher's wrong clock changes nothing, and a subscriber whose clock is ahead
of the first broker's by s seconds drops a delivery s seconds early (one behind keeps it s
seconds longer): a skew of a few seconds costs a 30 s message a few seconds of its life and
nothing more. A delivery handed out well within its ttl by the broker's clock is never dropped
for such a skew. The design tolerates skew of the order of the shortest ttl in use; beyond that
(a client 30 s ahead) a 30 s message is dropped at once by that client, and counted.

The broker's dates and the clients' are manual (``WallClock``): they move only when the test
moves them, so every expiry is exact; intervals (heartbeats) are real.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from broker.client import Client, Qos
from broker.clock import ManualClock
from broker.transport.server import RouterService
from tests.transport.harness import run, uri

TTL = 30.0


@dataclass
class Skewed:
    """The same manual clock as another, ``skew`` seconds off in wall time."""

    base: ManualClock
    skew: float

    def monotonic(self) -> float:
        return self.base.monotonic()

    def time(self) -> float:
        return self.base.time() + self.skew


class WallClock(ManualClock):
    """Manual dates, real intervals: heartbeats run as usual while the test moves the date."""

    def monotonic(self) -> float:
        return time.monotonic()


@pytest.mark.parametrize(
    ("publisher_skew", "subscriber_skew", "waited", "handed_out"),
    [
        (0.0, 5.0, 1.0, True),  # ahead 5 s, a delivery 1 s old: well within its ttl
        (0.0, 5.0, 20.0, True),  # ahead 5 s, 20 s old: still 5 s to spare by its clock
        (-600.0, 5.0, 20.0, True),  # the publisher's clock 10 minutes behind: nothing changes
        (600.0, 5.0, 20.0, True),  # or ahead
        (0.0, 5.0, 26.0, False),  # ahead 5 s, 26 s old: dropped 4 s before the broker would
        (0.0, -5.0, 32.0, True),  # behind 5 s, 32 s old: kept 2 s past its expiry
        (0.0, 30.0, 0.0, False),  # ahead by the whole ttl: dropped at once (not tolerated)
    ],
)
def test_a_subscriber_s_skewed_clock_moves_expiry_by_its_skew_and_no_more(
    publisher_skew: float, subscriber_skew: float, waited: float, handed_out: bool
) -> None:
    """A publication with ttl 30 s waits ``waited`` seconds (broker time) in the subscriber's
    queue, then the subscriber asks for it: handed out, or dropped and counted (``expired``),
    as the subscriber's clock says. Its expiry is the first broker's time plus 30 s whatever
    the publisher's clock."""

    async def scenario() -> None:
        clock = WallClock()
        broker = RouterService(uri("B1"), clock=clock)
        await broker.start()
        pub = await Client.connect(broker.uri, "pub", clock=Skewed(clock, publisher_skew))
        sub = await Client.connect(broker.uri, "sub", clock=Skewed(clock, subscriber_skew))
        stream = await sub.subscribe("[class,eq,t]")
        await pub.advertise("[class,eq,t],[n,>,0]")
        accepted = clock.time()
        await pub.publish("[class,t],[n,1]", Qos(ttl=TTL))
        await pub.publish("[class,t],[n,2]")  # never expires: what comes after it
        clock.advance(waited)
        first = await stream.next(timeout=5)
        if handed_out:
            assert first.publication["n"] == 1
            assert first.qos.expires == accepted + TTL
            assert sub.stats().get("expired", 0) == 0
        else:
            assert first.publication["n"] == 2
            assert sub.stats()["expired"] == 1
        for client in (pub, sub):
            await client.close()
        await broker.stop()

    run(scenario())
