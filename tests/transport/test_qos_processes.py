"""Quality of service over three ``wfm broker`` processes with logs (B1 - B2 - B3): priority under
a backlog checked for inversions, time to live expiring in a durable session and across a kill -9
and while held between brokers for a frozen one, a retained alert reaching an operator who comes
later on another broker and its acks, cancel by identity under both policies (plain, and over
TLS, where who cancels is who signed), a message id published again after its broker's kill -9,
and a regex that would make a backtracking engine hang."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from broker.client import Client, Delivery, Qos, Subscription
from broker.routing.backlog import FAIR_EVERY, WINDOW
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI
from tests.client.test_reconnect import FAST
from tests.processes import brokers, status, watcher
from tests.transport.harness import run, until
from tests.transport.test_persistence import Line, line

BACKLOG = 3_000


@asynccontextmanager
async def clients(brokers: Line, *names: tuple[str, str]) -> AsyncIterator[list[Client]]:
    """Clients ``(name, broker)``, closed after."""
    made = [await Client.connect(brokers.uris[at], name, backoff=FAST) for name, at in names]
    try:
        yield made
    finally:
        for client in made:
            await client.close()


@asynccontextmanager
async def subscribed(tmp_path: Path) -> AsyncIterator[tuple[Line, Client, Subscription]]:
    """The line of brokers, a publisher at B1 that advertised class ``t``, and the stream of a
    subscriber at B3 to it, once the subscription could reach B1."""
    with line(tmp_path) as brokers:
        async with clients(brokers, ("pub", "B1"), ("sub", "B3")) as (pub, sub):
            stream = await sub.subscribe("[class,eq,t]")
            await pub.advertise("[class,eq,t],[n,>,-1]")
            await asyncio.sleep(0.3)
            yield brokers, pub, stream


def held(brokers: Line, name: str, key: str) -> int:
    report = status(brokers.uris[name])
    return int(report.get(key, 0))  # type: ignore[call-overload]


def inversions(got: list[Delivery], start: int) -> tuple[int, int]:
    """From position ``start`` until the last delivery of the highest priority that waited: how
    many deliveries went to a lower priority while a higher one still waited, of how many."""
    levels = [d.qos.priority for d in got]
    highest_after = [0] * (len(levels) + 1)
    for k in range(len(levels) - 1, -1, -1):
        highest_after[k] = max(levels[k], highest_after[k + 1])
    span = [k for k in range(start, len(levels)) if highest_after[k + 1] > levels[k]]
    end = (span[-1] + 1) if span else start
    return len(span), end - start


def test_no_priority_inversion_under_a_backlog_beyond_the_fair_share(tmp_path: Path) -> None:
    """A subscriber at B3 pauses while 3,000 publications come from B1, most at priority 1, one in
    37 at 5 and one in 100 at 9. Once it reads again, the urgent ones come within the first two
    windows (what was carried before, and what its queue held while the first room was made), the
    fives soon after; beyond that a lower priority goes before a waiting higher one only in the
    turns kept for the oldest (one in FAIR_EVERY); within a priority, the publisher's order."""

    async def scenario() -> None:
        async with subscribed(tmp_path) as (brokers, pub, stream):
            for n in range(BACKLOG):
                level = 9 if n % 100 == 50 else 5 if n % 37 == 0 else 1
                pub.publish_nowait(f"[class,t],[n,{n}]", qos=Qos(priority=level))
            await until(lambda: held(brokers, "B3", "waiting") > BACKLOG - 3 * WINDOW, 60, "the backlog")
            got = [await stream.next(timeout=30) for _ in range(BACKLOG)]
        numbers = [int(d.publication["n"]) for d in got]  # type: ignore[call-overload]
        assert sorted(numbers) == list(range(BACKLOG))  # nothing lost, nothing twice
        for level in (1, 5, 9):
            mine = [n for n, d in zip(numbers, got, strict=True) if d.qos.priority == level]
            assert mine == sorted(mine)
        last = {level: max(k for k, d in enumerate(got) if d.qos.priority == level) for level in (5, 9)}
        fives = sum(d.qos.priority == 5 for d in got)
        assert last[9] < 2 * WINDOW and last[5] < 2 * WINDOW + 2 * fives, last  # first in, first out: ~3,000
        lower, turns = inversions(got, 2 * WINDOW)
        assert lower <= turns // FAIR_EVERY + 2, (lower, turns)

    run(scenario(), timeout=180)


def test_what_expires_in_a_durable_session_is_never_delivered_across_a_kill(tmp_path: Path) -> None:
    """The subscriber at B3 is away (its session kept); five publications live one second, five an
    hour. B3 is killed -9 and restarted from its log after the short ones expired: they are out at
    once (counted), and the subscriber back gets the five others only."""

    async def scenario() -> None:
        with line(tmp_path) as brokers:
            async with clients(brokers, ("pub", "B1")) as (pub,):
                sub = await Client.connect(brokers.uris["B3"], "sub", backoff=FAST)
                await sub.subscribe("[class,eq,t]", own_queue=False)
                await pub.advertise("[class,eq,t],[n,>,-1]")
                await asyncio.sleep(0.3)
                await sub.close(bye=False)  # away: B3 keeps its session
                for n in range(10):
                    await pub.publish(f"[class,t],[n,{n}]", Qos(ttl=1.0 if n % 2 else 3600.0))
                await until(lambda: held(brokers, "B3", "held_for_away") == 10, 30, "held at B3")
                brokers.kill("B3")
                await asyncio.sleep(1.5)
                brokers.start("B3")
                brokers.linked()
                await until(lambda: held(brokers, "B3", "held_for_away") == 5, 30, "expired at B3")
                counters = status(brokers.uris["B3"])["counters"]
                assert counters["expired.held"] == 5  # type: ignore[index]
                back = await Client.connect(brokers.uris["B3"], "sub", backoff=FAST)
                got = [int((await back.next(timeout=10)).publication["n"]) for _ in range(5)]  # type: ignore[call-overload]
                assert got == [0, 2, 4, 6, 8]
                await asyncio.sleep(0.3)
                assert back.stats()["queued"] == 0 and back.stats().get("expired", 0) == 0
                await back.close()

    run(scenario(), timeout=180)


def test_what_expires_held_between_brokers_is_removed_there_and_never_delivered(tmp_path: Path) -> None:
    """B3 is frozen (SIGSTOP) with a subscriber on it: B2 loses the link and holds what comes
    from B1 for it, five publications living one second and five an hour. The short ones leave
    B2's hold at their expiry, while B3 is still frozen (counted there); B3 thawed, the subscriber
    gets the five others only, in order."""

    async def scenario() -> None:
        async with subscribed(tmp_path) as (brokers, pub, stream):
            brokers.procs["B3"].send_signal(signal.SIGSTOP)
            try:
                await until(lambda: "B3" not in status(brokers.uris["B2"])["neighbors"], 30, "B3 lost")  # type: ignore[operator]
                for n in range(10):
                    await pub.publish(f"[class,t],[n,{n}]", Qos(ttl=1.0 if n % 2 else 3600.0))
                await until(lambda: held(brokers, "B2", "held_for_away") == 10, 30, "held at B2")
                await until(lambda: held(brokers, "B2", "held_for_away") == 5, 10, "expired at B2")
                counters = status(brokers.uris["B2"])["counters"]
                assert counters["expired.held"] == 5  # type: ignore[index]
            finally:
                brokers.procs["B3"].send_signal(signal.SIGCONT)
            got = [int((await stream.next(timeout=30)).publication["n"]) for _ in range(5)]  # type: ignore[call-overload]
            assert got == [0, 2, 4, 6, 8]
            with pytest.raises(TimeoutError):
                await stream.next(timeout=1.0)

    run(scenario(), timeout=180)


def test_a_retained_alert_reaches_an_operator_later_on_another_broker_and_acks_come_back(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        with line(tmp_path) as brokers:
            async with clients(brokers, ("agent", "B1"), ("console", "B2")) as (agent, console):
                await agent.advertise("[class,eq,ALERT],[job,isPresent,'']")
                receipts = await console.subscribe("[class,eq,ACK]")
                alert_id = await agent.publish(
                    "[class,ALERT],[job,load]", Qos(priority=8, retain=True, ack="client", mid="a1")
                )
                await asyncio.sleep(0.5)
                async with clients(brokers, ("operator", "B3")) as (operator,):  # an hour later
                    alerts = await operator.subscribe("[class,eq,ALERT]")
                    alert = await alerts.next(timeout=10)
                    assert alert.id == alert_id and alert.qos.mid == "a1" and alert.qos.priority == 8
                    await operator.ack(alert)
                    receipt = await agent.receipt(alert_id, timeout=10)
                    assert (receipt.kind, receipt.by, receipt.mid) == ("client", "operator", "a1")
                    seen = await receipts.next(timeout=10)  # anyone may watch the acks
                    assert seen.publication["mid"] == "a1" and seen.publication["kind"] == "client"
                await agent.advertise("[class,eq,NOTE],[n,>,0]")
                note = await agent.publish("[class,NOTE],[n,1]", Qos(ack="receipt"))
                async with clients(brokers, ("reader", "B3")) as (reader,):
                    await reader.subscribe("[class,eq,NOTE]")
                    await asyncio.sleep(0.3)
                    note = await agent.publish("[class,NOTE],[n,2]", Qos(ack="receipt"))
                    assert (await agent.receipt(note, timeout=10)).kind == "receipt"

    run(scenario(), timeout=120)


async def _retained(client: Client, filter_: str) -> set[str]:
    """The message ids of what a new subscription of ``client`` is sent (the retained
    publications kept for it), once a second passes without another."""
    stream = await client.subscribe(filter_)
    found: set[str] = set()
    while True:
        try:
            found.add((await stream.next(timeout=1.0)).qos.mid)
        except TimeoutError:
            return found


def test_cancel_follows_the_policy_by_identity(tmp_path: Path) -> None:
    """``x`` may be cancelled by its publisher only, ``y`` by anyone: mallory's cancel of ``x``
    leaves it kept, of ``y`` ends it; the publisher's cancel of ``x`` ends it. A subscriber that
    comes later on another broker sees what is kept at each step."""

    async def later(brokers: Line, name: str) -> set[str]:
        async with clients(brokers, (name, "B2")) as (late,):
            return await _retained(late, "[class,eq,ALERT]")

    async def scenario() -> None:
        with line(tmp_path) as brokers:
            async with clients(brokers, ("keeper", "B1"), ("mallory", "B3")) as (keeper, mallory):
                await keeper.advertise("[class,eq,ALERT],[n,>,0]")
                await keeper.publish("[class,ALERT],[n,1]", Qos(retain=True, mid="x"))
                await keeper.publish("[class,ALERT],[n,2]", Qos(retain=True, mid="y", cancel="any"))
                assert await later(brokers, "first") == {"x", "y"}
                await mallory.cancel("x")
                await mallory.cancel("y")
                await asyncio.sleep(0.5)
                assert await later(brokers, "second") == {"x"}
                await keeper.cancel("x")
                await asyncio.sleep(0.5)
                assert await later(brokers, "third") == set()

    run(scenario(), timeout=120)


def test_over_tls_a_cancel_is_its_signer_s_whatever_the_client_calls_itself(certs: Path) -> None:
    """Three ``wfm broker --tls`` processes: alice publishes at B1 ``x`` (only she may cancel it)
    and ``y`` (anyone may). The operator's certificate in a client that calls itself ``alice``,
    at B3, cancels both: it is ``operator:alice``, and its signature is the operator's, so ``x``
    stays and ``y`` goes. Then alice cancels ``x`` from another process at B3, two brokers away
    from where she published: her signature is checked at each broker, and ``x`` goes."""
    alice, operator = Identity(certs, "alice"), Identity(certs, "operator")

    async def kept(b2: BrokerURI, name: str) -> set[str]:
        async with await Client.connect(b2, name, tls=operator, backoff=FAST) as late:
            return await _retained(late, "[class,eq,NOTICE]")

    async def scenario(uris: dict[str, BrokerURI]) -> dict[str, object]:
        keeper = await Client.connect(uris["B1"], "keeper", tls=alice, backoff=FAST)
        impostor = await Client.connect(uris["B3"], "alice", tls=operator, backoff=FAST)
        again = await Client.connect(uris["B3"], "later", tls=alice, backoff=FAST)
        try:
            assert impostor.id == "operator:alice"
            await keeper.advertise("[class,eq,NOTICE],[n,>,0]")
            await keeper.publish("[class,NOTICE],[n,1]", Qos(retain=True, mid="x"))
            await keeper.publish("[class,NOTICE],[n,2]", Qos(retain=True, mid="y", cancel="any"))
            assert await kept(uris["B2"], "first") == {"x", "y"}
            await impostor.cancel("x")
            await impostor.cancel("y")
            await asyncio.sleep(0.5)
            assert await kept(uris["B2"], "second") == {"x"}
            await again.cancel("x")
            await asyncio.sleep(0.5)
            assert await kept(uris["B2"], "third") == set()
            return status(uris["B1"], watcher(certs))
        finally:
            for client in (keeper, impostor, again):
                await client.close()

    with brokers({"B1": [], "B2": ["B1"], "B3": ["B2"]}, certs=certs) as uris:
        report = run(scenario(uris), timeout=120)
    counters = report["counters"]
    assert isinstance(counters, dict)
    assert counters["retained.cancel_refused"] == 1 and counters["retained.cancelled"] == 2
    assert "link.cancel_unverified" not in counters  # every signature held


def test_a_repeated_message_id_is_answered_with_the_first_across_a_kill(tmp_path: Path) -> None:
    """``alarm:1`` publishes message id ``a1`` at B1, which is killed -9 and restarted from its
    log; a second process of the same publisher publishes ``a1`` again there: answered with the
    first's id, not routed. Another publisher's ``a1`` is its own: the watcher at B3 has each
    once."""

    async def scenario() -> None:
        with line(tmp_path) as brokers:
            async with clients(brokers, ("watcher", "B3"), ("alarm:1", "B1")) as (watcher, alarm):
                alerts = await watcher.subscribe("[class,eq,ALERT]")
                await alarm.advertise("[class,eq,ALERT],[n,>,0]")
                await asyncio.sleep(0.3)
                first = await alarm.publish("[class,ALERT],[n,1]", Qos(mid="a1"))
                assert (await alerts.next(timeout=10)).id == first
                brokers.kill("B1")
                brokers.start("B1")
                brokers.linked()
                async with clients(brokers, ("alarm:2", "B1"), ("other", "B1")) as (second, other):
                    for publisher in (second, other):
                        await publisher.advertise("[class,eq,ALERT],[n,>,0]")
                    assert await second.publish("[class,ALERT],[n,1]", Qos(mid="a1")) == first
                    await other.publish("[class,ALERT],[n,2]", Qos(mid="a1"))
                    assert (await alerts.next(timeout=10)).publication["n"] == 2
                    counters = status(brokers.uris["B1"])["counters"]
                    assert counters["dropped.duplicate_mid"] == 1  # type: ignore[index]

    run(scenario(), timeout=120)


def test_a_pattern_that_hangs_a_backtracking_engine_is_answered_at_once(tmp_path: Path) -> None:
    """``(a+)+$`` against 5,000 a's and a ``!`` takes Python's re longer than the universe's age;
    RE2 answers in linear time, so the broker routes the next publication at once."""

    async def scenario() -> None:
        with line(tmp_path) as brokers:
            async with clients(brokers, ("pub", "B1"), ("sub", "B3")) as (pub, sub):
                stream = await sub.subscribe("[class,eq,t],[s,str-regex,'(a+)+$']")
                await pub.advertise("[class,eq,t],[s,isPresent,'']")
                await asyncio.sleep(0.3)
                started = time.perf_counter()
                await pub.publish("[class,t],[s,'" + "a" * 5000 + "!']")
                await pub.publish("[class,t],[s,'aaa']")
                assert (await stream.next(timeout=5)).publication["s"] == "aaa"
                assert time.perf_counter() - started < 2.0

    run(scenario(), timeout=120)
