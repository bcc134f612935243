"""A durable client session through a real RouterService and the client library: a subscriber
whose link is cut gets, once it reconnects, what was published while it was away, in order."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.client import Client, RefusedError
from broker.clock import ManualClock
from broker.language import Publication
from broker.messages import LinkDown, LinkUp
from broker.routing.router import Router
from broker.transport.driver import RouterDriver
from broker.transport.server import RouterService
from tests.client.test_reconnect import ADV, FAST
from tests.transport.harness import run, until, uri

LOG = logging.LoggerAdapter(logging.getLogger("test"), {})


class Gate:
    """A client's sleep that, once closed, holds its reconnection until opened again: a link cut
    while the gate is closed is a client that is away (or, never opened, gone)."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()

    async def sleep(self, seconds: float) -> None:
        await self.open.wait()
        await asyncio.sleep(seconds)


def test_a_subscriber_cut_off_gets_what_was_published_meanwhile_when_it_reconnects() -> None:
    async def scenario() -> None:
        b = RouterService(uri("B1"), session_grace=60.0)
        await b.start()
        back = Gate()
        pub = await Client.connect(b.uri, "pub", backoff=FAST)
        sub = await Client.connect(b.uri, "sub", backoff=FAST, sleep=back.sleep)
        await pub.advertise(ADV)
        s = await sub.subscribe("[class,eq,stock]")
        await pub.publish(Publication("stock", {"n": 0}))
        assert (await s.next(timeout=5)).publication["n"] == 0
        assert sub.link is not None
        back.open.clear()
        sub.link.close("cut", abort=True)
        await until(lambda: b.router.status()["sessions_waiting"] == 1, what="the session kept")
        for n in range(1, 4):
            await pub.publish(Publication("stock", {"n": n}))
        assert b.router.status()["subscriptions"] == 1  # still in place
        back.open.set()
        await until(lambda: sub.connected, what="reconnected")
        got = [(await s.next(timeout=5)).publication["n"] for _ in range(3)]
        assert got == [1, 2, 3]
        await pub.publish(Publication("stock", {"n": 4}))  # then live ones
        assert (await s.next(timeout=5)).publication["n"] == 4
        status = b.router.status()
        assert status["sessions_waiting"] == 0 and status["counters"]["session_queued"] == 3
        assert status["counters"].get("refused", 0) == 0  # the re-sent subscription was acknowledged
        assert s.id == "B1/sub/1" and sub.stats()["reconnects"] == 1
        for c in (pub, sub):
            await c.close()
        await b.stop()

    run(scenario())


def test_a_client_that_does_not_come_back_is_withdrawn_on_a_quiet_broker() -> None:
    async def scenario() -> None:
        b = RouterService(uri("B1"), session_grace=0.3)
        await b.start()
        back = Gate()
        sub = await Client.connect(b.uri, "sub", backoff=FAST, sleep=back.sleep)
        await sub.subscribe("[class,eq,stock]")
        assert sub.link is not None
        back.open.clear()
        sub.link.close("crashed", abort=True)  # no goodbye: a closing client leaves for good (Bye)
        await until(lambda: b.router.status()["sessions_waiting"] == 1, what="the session kept")
        assert b.router.status()["subscriptions"] == 1
        await until(lambda: b.router.status()["subscriptions"] == 0, what="the session expired")
        assert b.router.counters["sessions_expired"] == 1
        await sub.close()
        await b.stop()

    run(scenario())


def test_a_client_that_closes_says_goodbye_and_keeps_no_session() -> None:
    """A crash and a clean exit look alike on TCP: ``close`` says Bye, so a ``wfm client`` or a
    ``wfm monitor`` that ends leaves nothing queueing for it for the grace period."""

    async def scenario() -> None:
        b = RouterService(uri("B1"), session_grace=600.0)
        await b.start()
        try:
            sub = await Client.connect(b.uri, "sub")
            await sub.subscribe("[class,eq,stock]")
            assert b.router.status()["subscriptions"] == 1
            await sub.close()
            await until(lambda: b.router.status()["subscriptions"] == 0, what="withdrawn at once")
            assert b.router.status()["sessions_waiting"] == 0
        finally:
            await b.stop()

    run(scenario())


def test_a_restarted_client_that_names_its_requests_finds_them_in_its_kept_session() -> None:
    """An agent killed and restarted is a new process: its counted refs start at 1 again, in
    another order. Named requests (as the agent makes them) are recognised instead of refused."""

    async def scenario() -> None:
        b = RouterService(uri("B1"), session_grace=60.0)
        await b.start()
        back = Gate()
        first = await Client.connect(b.uri, "agent", backoff=FAST, sleep=back.sleep)
        kept = await first.subscribe("[class,eq,a]", name="ka")
        await first.subscribe("[class,eq,b]", name="kb")
        assert first.link is not None
        back.open.clear()
        first.link.close("killed", abort=True)
        await until(lambda: b.router.status()["sessions_waiting"] == 1, what="the session kept")
        second = await Client.connect(b.uri, "agent")  # the restarted process
        await second.subscribe("[class,eq,b]", name="kb")
        again = await second.subscribe("[class,eq,a]", name="ka")
        status = b.router.status()
        assert again.id == kept.id and status["subscriptions"] == 2
        assert status["counters"].get("refused", 0) == 0
        with pytest.raises(RefusedError, match="already in use"):
            await second.subscribe("[class,eq,c]", name="ka")  # the same name for another filter
        for bad in ("7", "a/b", "x@y", ""):  # a number is the client's own; / and @ have meanings
            with pytest.raises(ValueError, match="request name"):
                await second.subscribe("[class,eq,d]", name=bad)
        for client in (first, second):
            await client.close()
        await b.stop()

    run(scenario())


def test_a_client_that_closes_without_bye_keeps_its_session_for_its_restart() -> None:
    """An agent stopped to be started again closes with ``bye=False``: its broker keeps its
    subscriptions and what matches meanwhile, as for a crash; with ``Bye`` they go at once."""

    async def scenario() -> None:
        b = RouterService(uri("B1"), session_grace=60.0)
        await b.start()
        for bye in (False, True):
            sub = await Client.connect(b.uri, f"sub-{bye}", backoff=FAST)
            await sub.subscribe("[class,eq,stock]")
            await sub.close(bye=bye)
            await until(lambda name=f"sub-{bye}": name not in b.links, what="closed")
        assert b.router.status()["away"] == ["sub-False"]
        await b.stop()

    run(scenario())


@dataclass
class Later:
    """The system's clocks, ``offset`` seconds later by ``time``: brokers stopped for longer
    than their grace period, without waiting for it."""

    offset: float = 0.0

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time() + self.offset


def test_a_neighbour_whose_grace_ran_out_while_both_were_down_is_forgotten_on_both_sides(
    tmp_path: Path,
) -> None:
    """B3 stops, B2 keeps its session, B2 stops; both come back after B2's grace for B3 is over
    (not B3's for B2), B3's link first. Its LinkUp must not be what withdraws B3's session: the
    hellos named the kept channel, and B3 would resume it while B2 had forgotten what came
    through it (the advertisement here). B2 withdraws it first, so B3 finds a new channel and
    tells B2 again."""

    async def scenario() -> None:
        clock = Later()
        u2, u3 = uri("B2"), uri("B3")

        def b2() -> RouterService:
            return RouterService(u2, session_grace=60.0, data=tmp_path / "b2", clock=clock)

        def b3() -> RouterService:
            return RouterService(u3, [u2], session_grace=600.0, data=tmp_path / "b3", clock=clock)

        def advertised_from_b3(broker: RouterService) -> bool:
            return any(entry.hop == "B3" for entry in broker.router.tables.srt.values())

        first, second = b2(), b3()
        await first.start()
        await second.start()
        pub = await Client.connect(u3, "pub", backoff=FAST)
        await pub.advertise(ADV)
        await until(lambda: advertised_from_b3(first), what="B2 told of the advertisement")
        await second.stop()
        await until(lambda: "B3" in first.router.sessions.away, what="B3's session kept")
        await first.stop()
        clock.offset = 120.0
        first, second = b2(), b3()
        await first.start()
        await second.start()
        await until(lambda: "B3" in first.links and "B2" in second.links and pub.connected, what="linked")
        await until(lambda: advertised_from_b3(first), what="B2 told of the advertisement again")
        assert second.router.custody.peer_epoch("B2") == first.router.custody.channels["B3"].name
        assert first.router.counters["sessions_expired"] == 1
        assert all(b.router.counters["dropped.resent"] == 0 for b in (first, second))
        await pub.close()
        for broker in (second, first):
            await broker.stop()

    run(scenario())


def test_a_link_that_comes_as_its_session_ends_is_not_taken_and_an_ended_session_goes_first() -> None:
    """``Peers.serve`` asks ``session_ends`` before it takes a link: a session that is over is
    withdrawn then (so the peer's next hello finds a new channel), and one that would be over
    within a Tick is not resumed either (its LinkUp, handled a moment later, could end it)."""
    clock = ManualClock()
    driver = RouterDriver(Router("B2", session_grace=60), {}, None, Counter(), LOG, clock)
    driver.feed(LinkUp(True, "B3.1:1", name="B2.1:1"), "B3")
    driver.feed(LinkDown(), "B3")
    clock.advance(58.5)
    assert not driver.session_ends("B3")
    clock.advance(1)
    assert driver.session_ends("B3") and "B3" in driver.router.custody.channels
    clock.advance(1)
    assert driver.session_ends("B3") and "B3" not in driver.router.custody.channels
    assert driver.router.counters["sessions_expired"] == 1 and not driver.session_ends("B3")


def test_hellos_to_the_brokers_of_a_site_name_one_new_channel_until_a_link_takes_it() -> None:
    """A site's brokers are dialled at once (one task each), and only its leader takes the link:
    a hello to a follower that refuses, sent while the leader's handshake is under way, must not
    rename the channel the leader was told, or ``Peers.serve`` finds "the channel changed during
    the handshake", closes the link, and the next try races the same way (under load, for ever:
    the site link never came up). Once a link takes the name, the next new channel has another."""
    driver = RouterDriver(Router("C1"), {}, None, Counter(), LOG, ManualClock())
    to_leader = driver.hello("R")
    to_follower = driver.hello("R")  # refused: the follower names the leader
    assert to_follower.epoch == to_leader.epoch
    assert driver.channel("R") == to_leader.epoch  # what Peers.serve compares with its hello's
    driver.feed(LinkUp(True, "R.1:1", name=to_leader.epoch), "R")
    assert driver.hello("R").epoch == to_leader.epoch  # the channel's own name now
    driver.feed(LinkDown(), "R")
    assert driver.hello("S").epoch not in (to_leader.epoch, "")  # another hop: a name of its own
