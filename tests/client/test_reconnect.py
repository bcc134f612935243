"""The client's own reconnection: backoff schedule, broker restart, failover, re-sent publications."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest

from broker.client import (
    Backoff,
    Client,
    ConnectError,
    ConnectionEvent,
    Delivery,
    Subscription,
    brokers,
    reconnect,
)
from broker.client.reconnect import dial, dial_any
from broker.language import Publication
from broker.messages import Ack
from broker.transport.handshake import ServedElsewhere
from broker.transport.server import RouterService
from broker.transport.uri import BrokerURI
from tests.transport.harness import ScriptedBroker, free_port, run, until, uri

ADV = "[class,eq,stock],[n,isPresent,0]"
FAST = Backoff(first=0.05, cap=0.2, attempts=None)


def test_backoff_grows_to_its_cap_with_bounded_jitter() -> None:
    backoff = Backoff(first=0.1, factor=2.0, cap=1.0, jitter=0.5)
    assert backoff.delay(0) == 0.0  # the first attempt after a loss does not wait
    assert [backoff.delay(n, lambda: 0.5) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff.delay(1, lambda: 0.0) == pytest.approx(0.05)
    assert backoff.delay(1, lambda: 1.0) == pytest.approx(0.15)
    assert backoff.delay(10, lambda: 1.0) == 1.0  # jitter never takes a wait past the cap
    with pytest.raises(ValueError, match="backoff"):
        Backoff(first=2.0, cap=1.0)


def test_dial_any_walks_the_broker_list_with_the_backoff_schedule() -> None:
    async def scenario() -> None:
        dead = [BrokerURI("127.0.0.1", free_port(), f"D{i}") for i in range(2)]
        waits: list[float] = []

        async def sleep(seconds: float) -> None:
            waits.append(seconds)

        backoff = Backoff(first=0.1, factor=2.0, cap=0.3, jitter=0.5, attempts=5)
        with pytest.raises(ConnectError, match=r"after 5 attempts.*D1.*D0"):
            await dial_any(dead, "c", 1.0, backoff, 1, lambda: 0.5, sleep)
        assert waits == [0.0, 0.1, 0.2, 0.3, 0.3]

    run(scenario())


def test_a_cancellation_racing_a_refused_connection_ends_the_retries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An agent stopped while its broker was down could hang for ever: its retrying connection
    was cancelled in the same turn of the loop as a refusal arrived, asyncio.wait_for (3.11)
    returned the refusal instead of the cancellation, and the retries went on."""

    async def scenario() -> None:
        refusals: list[asyncio.Future[None]] = []
        ours = asyncio.get_running_loop()
        original = asyncio.open_connection

        async def refused(*args: Any, **kwargs: Any) -> Any:
            if asyncio.get_running_loop() is not ours:  # a thread an earlier test left dialling
                return await original(*args, **kwargs)
            refusals.append(ours.create_future())
            await refusals[-1]

        monkeypatch.setattr("asyncio.open_connection", refused)
        # the attempt's own timeout is far beyond the test's: under load, a poll can come later
        # than a short one, and a timed-out first attempt would be the retry counted below
        dialling = asyncio.create_task(
            dial_any([uri("B1")], "c", 600.0, Backoff(first=0.01, cap=0.01, attempts=None))
        )
        await until(lambda: bool(refusals), what="the first attempt")
        refusals[-1].set_exception(ConnectionRefusedError("refused"))
        dialling.cancel()  # in the same turn of the loop as the refusal
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(dialling, 2.0)
        assert len(refusals) == 1

    run(scenario())


def test_a_reconnection_stays_with_the_broker_it_lost_before_failing_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its session is there, and a broker restarted from its log is soon back: the client tries
    it until its waits add up to ``stay`` seconds, then walks the list."""
    targets = [BrokerURI("127.0.0.1", 1000 + i, f"D{i}") for i in range(3)]
    tried: list[str] = []

    async def dial(target: BrokerURI, *args: object) -> None:
        tried.append(target.id)
        raise ConnectError(f"{target.id} is down")

    async def sleep(seconds: float) -> None:
        pass

    monkeypatch.setattr(reconnect, "dial", dial)
    backoff = Backoff(first=0.1, cap=0.3, attempts=7)
    with pytest.raises(ConnectError, match="after 7 attempts"):
        run(dial_any(targets, "c", 1.0, backoff, 1, lambda: 0.5, sleep, stay=0.5))
    assert tried == ["D1", "D1", "D1", "D2", "D0", "D1", "D2"]  # after 0 + 0.1 + 0.2 + 0.3 s: moves
    tried.clear()
    with pytest.raises(ConnectError):
        run(dial_any(targets, "c", 1.0, backoff, 1, lambda: 0.5, sleep))  # a first connection
    assert tried == ["D1", "D2", "D0", "D1", "D2", "D0", "D1"]


def test_a_broker_of_a_site_that_names_its_leader_sends_the_client_there_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A follower names the leader: dialled next without a wait. The leader, elected but not
    serving yet, names itself: dialled again after ``SENT_ON_RETRY``. A name right after a jump
    is followed after the wait too (two stale names must not make a loop without one)."""
    targets = [BrokerURI("127.0.0.1", 1000 + i, f"D{i}") for i in range(3)]
    answers = {
        0: ["D2"],  # D0 follows D2
        1: ["D2", "D0"],
        2: ["D2", "D1", ""],  # elected: serves once caught up; then a stale name; then serves
    }
    tried: list[tuple[str, float]] = []
    waits: list[float] = []

    async def dial(target: BrokerURI, *args: object) -> tuple[str, list[object]]:
        index = targets.index(target)
        tried.append((target.id, waits[-1]))
        if answers[index]:
            leader = answers[index].pop(0)
            if leader:
                raise ServedElsewhere(f"{target.id} sends us on", leader)
        return "link", []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(reconnect, "dial", dial)
    index, link, _ = run(dial_any(targets, "c", 1.0, FAST, 0, lambda: 0.5, sleep))
    retry = reconnect.SENT_ON_RETRY
    assert tried == [
        ("D0", 0.0),  # names D2
        ("D2", 0.0),  # at once; names itself
        ("D2", retry),  # names D1 (stale)
        ("D1", 0.0),  # at once; names D2: after a jump, so a wait
        ("D2", retry),  # serves
    ]
    assert (index, link) == (2, "link")


def test_a_client_whose_site_elects_polls_its_brokers_with_no_backoff_from_the_dead_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its broker, the leader, was killed: the client dials the next at once. While the others
    send it on with no leader to name, it asks each once at once, then one every
    ``SENT_ON_RETRY``, the dead one included (restarted, it could be elected) and no failure:
    a refused connection there does not grow the wait, which would find the new leader only
    a growing backoff after it serves (a third of a second at the third round)."""
    targets = [BrokerURI("127.0.0.1", 1000 + i, f"D{i}") for i in range(3)]
    rounds = 4  # rounds of refusals before D2, elected, serves
    tried: list[tuple[str, float]] = []
    waits: list[float] = []

    async def dial(target: BrokerURI, *args: object) -> tuple[str, list[object]]:
        tried.append((target.id, waits[-1]))
        if target.id == "D0":
            raise ConnectError("D0 is down")
        if target.id == "D1" or len(tried) <= 3 * rounds:
            raise ServedElsewhere(f"{target.id} sends us on: electing")
        return "link", []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(reconnect, "dial", dial)
    backoff = Backoff(first=0.1, cap=5.0, attempts=3)
    index, link, _ = run(dial_any(targets, "c", 1.0, backoff, 1, lambda: 0.5, sleep))
    retry = reconnect.SENT_ON_RETRY
    assert [t for t, _ in tried] == ["D1", "D2", "D0"] * rounds + ["D1", "D2"]
    assert [w for _, w in tried] == [0.0, 0.0, 0.0] + [retry] * (3 * rounds - 1)
    assert (index, link) == (2, "link")


def test_broker_lists_parse_from_text_and_sequences() -> None:
    a, b = "socket://127.0.0.1:1000/B1", "socket://h:2000/B2"
    assert [u.id for u in brokers(f"{a}, {b}")] == ["B1", "B2"]
    assert [u.id for u in brokers([BrokerURI.parse(a), b])] == ["B1", "B2"]
    with pytest.raises(ValueError, match="not a broker URI"):
        brokers(f"{a},nonsense")
    with pytest.raises(ValueError, match="no broker"):
        brokers(" , ")


async def restart(broker: RouterService) -> RouterService:
    await broker.stop()
    again = RouterService(broker.uri, broker.neighbors)
    await again.start()
    return again


def test_broker_restart_resumes_subscriptions_and_delivers_unacknowledged_publications() -> None:
    async def scenario() -> None:
        b = RouterService(uri("B1"))
        await b.start()
        events: list[ConnectionEvent] = []
        restored = asyncio.Event()
        restored.set()

        async def after_the_subscriber(seconds: float) -> None:
            """The publisher's reconnection waits until the subscriber's is done: what is
            published while no subscription exists reaches nobody (durable sessions aside)."""
            await restored.wait()
            await asyncio.sleep(seconds)

        pub = await Client.connect(b.uri, "pub", backoff=FAST, sleep=after_the_subscriber)
        sub = await Client.connect(b.uri, "sub", backoff=FAST, on_event=events.append)
        await pub.advertise(ADV)
        s = await sub.subscribe("[class,eq,stock]")
        plain = await sub.subscribe_composite("{{[class,eq,stock],[n,=,$I$N]}}")
        await pub.publish(Publication("stock", {"n": 0}))
        assert (await s.next(timeout=5)).publication["n"] == 0
        await plain.next(timeout=5)
        restored.clear()
        b = await restart(b)
        for n in range(1, 4):  # made while the broker is away: kept and re-sent
            pub.publish_nowait(Publication("stock", {"n": n}))
        acked = asyncio.ensure_future(pub.publish(Publication("stock", {"n": 4})))
        await until(lambda: b.router.status()["subscriptions"] == 2, what="subscriptions restored")
        restored.set()
        await until(lambda: pub.connected, what="publisher reconnected")
        assert (await asyncio.wait_for(acked, 5)).startswith("B1/pub/")
        got = [(await s.next(timeout=5)).publication["n"] for _ in range(4)]
        assert got == [1, 2, 3, 4]
        assert (await plain.next(timeout=5)).subscription == plain.id  # the id the caller knows
        assert s.id == "B1/sub/1" and set(sub.subscriptions) == {s.id, plain.id}
        assert [e.kind for e in events] == ["disconnected", "reconnected"]
        assert pub.stats()["unacknowledged"] == 0 and pub.stats()["resent.publications"] == 4
        await sub.unsubscribe(s.id)  # withdrawn under the id it has now
        assert b.router.status()["subscriptions"] == 1  # the composite's atom only
        for c in (pub, sub):
            await c.close()
        await b.stop()

    run(scenario())


async def publish_but_lose_the_ack(pub: Client, sub: Subscription) -> Delivery:
    """Publish one, and make ``pub`` miss its acknowledgement (as if the link dropped before it
    came) once the subscriber has it: the publication stays unacknowledged, to be re-sent."""
    lost: list[Ack] = []
    handle = pub._handle

    def handle_but_lose(item: object) -> None:
        if isinstance(item, Ack) and not lost and "@" in item.ref:
            lost.append(item)
            return
        handle(item)

    pub._handle = handle_but_lose  # type: ignore[method-assign]
    pub.publish_nowait(Publication("stock", {"n": 1}))
    first = await sub.next(timeout=5)
    await until(lambda: bool(lost), what="the ack arrived")
    assert pub.stats()["unacknowledged"] == 1
    return first


async def next_after_the_resend(pub: Client, sub: Subscription) -> int:
    """Once the re-sent publication is acknowledged, publish another: what the subscriber gets
    next (2 unless the re-sent one came through twice)."""
    await until(lambda: pub.stats()["unacknowledged"] == 0, what="the re-sent publication acknowledged")
    pub.publish_nowait(Publication("stock", {"n": 2}))
    n = (await sub.next(timeout=5)).publication["n"]
    assert isinstance(n, int)
    return n


def test_a_publication_whose_ack_was_lost_is_delivered_once_after_the_reconnection() -> None:
    async def scenario() -> None:
        b = RouterService(uri("B1"))
        await b.start()
        pub = await Client.connect(b.uri, "pub", backoff=FAST)
        sub = await Client.connect(b.uri, "sub")
        await pub.advertise(ADV)
        s = await sub.subscribe("[class,eq,stock]")
        first = await publish_but_lose_the_ack(pub, s)
        assert pub.link is not None
        pub.link.close("cut", abort=True)
        assert await next_after_the_resend(pub, s) == 2  # not the duplicate of 1
        assert first.id.startswith("B1/pub/") and b.router.counters["dropped.duplicate"] == 1
        for c in (pub, sub):
            await c.close()
        await b.stop()

    run(scenario())


def test_failover_to_the_next_broker_and_no_duplicate_at_the_subscriber() -> None:
    async def scenario() -> None:
        u1, u2 = uri("B1"), uri("B2")
        b1, b2 = RouterService(u1), RouterService(u2, [u1])
        for b in (b1, b2):
            await b.start()
        await until(lambda: "B1" in b2.links, what="B2 linked to B1")
        pub = await Client.connect([u1, u2], "pub", backoff=FAST)
        sub = await Client.connect(u2, "sub")
        s = await sub.subscribe("[class,eq,stock]")
        await pub.advertise(ADV)
        await until(lambda: b1.router.status()["subscriptions"] == 1, what="subscription reached B1")
        first = await publish_but_lose_the_ack(pub, s)
        await b1.stop()  # the publisher fails over to B2 and re-sends there
        await until(lambda: pub.connected and pub.broker_id == "B2", what="failed over to B2")
        assert await next_after_the_resend(pub, s) == 2
        assert first.id.startswith("B1/pub/2@") and sub.stats()["dropped.duplicates"] == 1
        for c in (pub, sub):
            await c.close()
        await b2.stop()

    run(scenario())


def test_connect_fails_over_to_a_broker_that_answers() -> None:
    async def scenario() -> None:
        b = RouterService(uri("B2"))
        await b.start()
        dead = BrokerURI("127.0.0.1", free_port(), "B1")
        async with await Client.connect(f"{dead},{b.uri}", "c") as client:
            assert client.broker_id == "B2"
        with pytest.raises(ConnectError, match=r"^cannot connect to socket://127\.0\.0\.1:\d+/B1"):
            await Client.connect(dead, "c")
        await b.stop()

    run(scenario())


def test_giving_up_ends_the_streams_and_fails_what_waits() -> None:
    async def scenario() -> None:
        b = RouterService(uri("B1"))
        await b.start()
        events: list[str] = []
        client = await Client.connect(
            b.uri,
            "c",
            backoff=Backoff(first=0.01, cap=0.02, attempts=2),
            on_event=lambda e: events.append(e.kind),
        )
        await b.stop()
        await until(lambda: client.closed, what="gave up")
        assert events == ["disconnected", "closed"]
        assert [d async for d in client] == []
        with pytest.raises(ConnectionError):
            await client.publish("[class,stock],[n,1]")

    run(scenario())


def test_an_idle_client_keeps_its_link_to_a_broker_with_a_slow_heartbeat() -> None:
    """The broker pings idle links every 30 s; a client that wants a sign of life every second
    asks for one (Ping, answered by a Pong) instead of dropping a healthy link."""

    async def scenario() -> None:
        broker = RouterService(uri("B1"), heartbeat=30.0, dead_after=120.0)
        await broker.start()
        try:
            client = await Client.connect(broker.uri, "idle", heartbeat=0.1, dead_after=1.0)
            await asyncio.sleep(2.5)
            assert client.connected
            assert client.stats()["heartbeat_timeouts"] == 0 and client.stats()["reconnects"] == 0
            await client.close()
        finally:
            await broker.stop()

    run(scenario())


def test_a_re_sent_subscription_the_broker_refuses_is_reported() -> None:
    """After a reconnection the broker refuses to restore a subscription: the caller hears of it
    (``refused``, with the id it knows), instead of waiting for deliveries that never come."""

    async def scenario() -> None:
        refuse = lambda connection, request: "no room" if connection > 1 else None  # noqa: E731
        async with ScriptedBroker(refuse) as broker:
            events: list[ConnectionEvent] = []
            client = await Client.connect(broker.uri, "c", backoff=FAST, on_event=events.append)
            sub = await client.subscribe("[class,eq,stock]")
            broker.drop()
            await until(lambda: any(e.kind == "refused" for e in events), what="the refusal reported")
            assert events[-1] == ConnectionEvent("refused", "B1", "no room", sub.id)
            assert client.stats()["refused.resent"] == 1
            await client.close()

    run(scenario())


@pytest.mark.parametrize(
    ("tls", "reason"),
    [
        (False, "did not answer the handshake: no answer within 0.3 s: is a wfm broker listening there?"),
        (True, "cannot connect to {uri}: no answer to the TLS handshake within 0.3 s: is a wfm broker"),
    ],
)
def test_a_silent_port_is_named_with_the_reason_with_or_without_tls(tls: bool, reason: str) -> None:
    """Under TLS, a port that takes the connection and says nothing timed out in the TLS handshake
    with no reason at all: ``cannot connect to socket://...: ``."""

    async def scenario() -> None:
        address = uri("B1")

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while await reader.read(1 << 16):
                pass
            writer.close()

        server = await asyncio.start_server(silent, address.host, address.port)
        try:
            context = ssl.create_default_context() if tls else None
            with pytest.raises(ConnectError) as raised:
                await dial(address, "c", 0.3, tls=context)
            assert reason.format(uri=address) in str(raised.value)
        finally:
            server.close()

    run(scenario(), timeout=10)


def test_a_broker_of_a_site_down_while_the_others_elect_is_no_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One broker of a site killed, the two others electing: a first connection (as many
    attempts as brokers) waits for their leader rather than give up after three rounds; one
    whose site never elects gives up all the same, once refused ``SENT_ON_ROUNDS`` times for
    each attempt."""
    targets = [BrokerURI("127.0.0.1", 1000 + i, f"D{i}") for i in range(3)]
    tried: list[str] = []
    elected_after = 20  # dials

    async def dial(target: BrokerURI, *args: object) -> tuple[str, list[object]]:
        tried.append(target.id)
        if target.id == "D0":
            raise ConnectError("D0 is down")
        if len(tried) < elected_after:
            raise ServedElsewhere(f"{target.id} does not serve: it is electing a leader", "")
        return "link", []

    async def sleep(seconds: float) -> None:
        pass

    monkeypatch.setattr(reconnect, "dial", dial)
    first = Backoff(attempts=len(targets))
    index, link, _ = run(dial_any(targets, "c", 1.0, first, 0, lambda: 0.5, sleep))
    assert (targets[index].id, link) == (tried[-1], "link") and len(tried) == elected_after
    elected_after = 10_000
    tried.clear()
    with pytest.raises(ConnectError, match="after 3 attempts"):
        run(dial_any(targets, "c", 1.0, first, 0, lambda: 0.5, sleep))
    assert len(tried) <= 3 * (reconnect.SENT_ON_ROUNDS * 3 // 2 + 1)
