"""The asyncio broker over real loopback sockets, all in one event loop."""

from __future__ import annotations

import asyncio
import random
import re
import struct
from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from broker.client import Client, ConnectError, RefusedError
from broker.language import Publication, parse_filter
from broker.messages import Hello, Refuse, Subscribe
from broker.routing.custody import Channel
from broker.transport import driver
from broker.transport.codec import decode, encode
from broker.transport.server import RouterService
from tests.transport.harness import run, until, uri

ADV = "[class,eq,stock],[price,<,100]"


async def line(count: int, **options: object) -> list[RouterService]:
    uris = [uri(f"B{i + 1}") for i in range(count)]
    brokers = [RouterService(u, uris[i - 1 : i] if i else [], **options) for i, u in enumerate(uris)]  # type: ignore[arg-type]
    for b in brokers:
        await b.start()
    for i, b in enumerate(brokers):
        expected = {x.uri.id for x in brokers[max(i - 1, 0) : i + 2]} - {b.uri.id}
        await until(lambda b=b, e=expected: set(b.links) >= e, what=f"{b.uri.id} linked")
    return brokers


async def stop(*brokers: RouterService) -> None:
    for b in brokers:
        await b.stop()


def test_three_brokers_end_to_end() -> None:
    async def scenario() -> None:
        b1, b2, b3 = await line(3)
        pub = await Client.connect(b1.uri, "pub")
        sub = await Client.connect(b3.uri, "sub")
        await pub.advertise(ADV)
        s = await sub.subscribe("[class,eq,stock],[price,<,50]")
        assert s.id == "B3/sub/1"
        # ref 1 was the advertisement; @ when pub connected (ms, hex)
        assert re.fullmatch(r"B1/pub/2@[0-9a-f]+", await pub.publish("[class,stock],[price,10]"))
        with pytest.raises(RefusedError, match="fits no advertisement"):
            await pub.publish("[class,stock],[price,150]")
        delivery = await s.next(timeout=5)
        assert str(delivery.publication) == "[class,stock],[price,10]"
        for i in range(200):
            pub.publish_nowait(Publication("stock", {"price": i % 100}))
        got = [(await s.next(timeout=5)).publication["price"] for _ in range(100)]
        assert got == [i % 100 for i in range(200) if i % 100 < 50]
        status = await sub.status()
        assert status["id"] == "B3" and status["neighbors"] == ["B2"] and status["subscriptions"] == 1
        assert status["counters"]["delivered"] == 101  # type: ignore[index]
        await pub.close()
        await sub.close()
        await stop(b1, b2, b3)

    run(scenario())


def test_a_detailed_status_lists_the_tables_and_the_dialled_neighbours() -> None:
    """What the dashboard draws: B2 dials B1, so B2 knows B1's URI; the tables come only on request."""

    async def scenario() -> None:
        b1, b2 = await line(2)
        pub = await Client.connect(b1.uri, "pub")
        await pub.advertise(ADV)
        await pub.subscribe_composite("{{[class,eq,stock],[price,<,5]}&{[class,eq,stock],[price,>,95]}}")
        await until(lambda: len(b2.router.tables.srt) == 1, what="advertisement at B2")
        async with await Client.connect(b2.uri, "dash") as dash:
            brief, detailed = await dash.status(), await dash.status(detail=True)
        assert brief["neighbor_uris"] == {"B1": str(b1.uri)} and "srt" not in brief
        assert detailed["srt"] == {"entries": [{"id": "B1/pub/1", "filter": ADV, "hop": "B1"}], "total": 1}
        async with await Client.connect(b1.uri, "dash") as dash:
            at_b1 = await dash.status(detail=True)
        assert at_b1["neighbor_uris"] == {}  # B1 dials no one
        assert at_b1["prt"]["total"] == len(at_b1["prt"]["entries"]) == 2  # the composite's two atoms
        (composite,) = at_b1["composites"]["entries"]
        assert composite["detected_here"] is True and at_b1["composites"]["total"] == 1
        await pub.close()
        await stop(b1, b2)

    run(scenario())


def test_neighbour_restart_restores_routing() -> None:
    async def scenario() -> None:
        b1, b2, b3 = await line(3, heartbeat=0.1, dead_after=0.5)
        pub = await Client.connect(b1.uri, "pub")
        sub = await Client.connect(b3.uri, "sub")
        await pub.advertise(ADV)
        s = await sub.subscribe(ADV)
        await b2.stop()
        await until(lambda: "B2" not in b1.links and "B2" not in b3.links, what="B2 gone")
        b2 = RouterService(b2.uri, [b1.uri], heartbeat=0.1, dead_after=0.5)
        await b2.start()  # b3 names b2 as neighbour and redials it; b2 dials b1
        await until(lambda: set(b2.links) == {"B1", "B3"}, what="B2 relinked")
        await until(lambda: b2.router.status()["subscriptions"] == 1, what="routing restored")
        await pub.publish("[class,stock],[price,7]")
        assert (await s.next(timeout=5)).publication["price"] == 7
        for c in (pub, sub):
            await c.close()
        await stop(b1, b2, b3)

    run(scenario())


async def raw(b: RouterService) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(b.uri.host, b.uri.port)


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def test_fuzzed_peers_never_stop_the_broker() -> None:
    rng = random.Random(11)

    async def scenario() -> None:
        (b,) = await line(1)
        pub = await Client.connect(b.uri, "pub")
        sub = await Client.connect(b.uri, "sub")
        await pub.advertise(ADV)
        s = await sub.subscribe(ADV)
        valid = encode(Hello("client", "fuzz"))[4:]
        payloads = [
            b"",
            b"\xc1",
            msgpack.packb(["sub", "x"]),
            msgpack.packb(["pub", "1", ["stock", [["price", "NaN"]]], 5, True, None]),
            msgpack.packb(["adv", "1", ["stock", [["price", "<", True]]], 5]),
            msgpack.packb([[[[[[[[]]]]]]]] * 3),
            encode(Refuse("", "x"))[4:],
        ]
        for attempt in range(60):
            reader, writer = await raw(b)
            if attempt % 3:
                writer.write(frame(valid))  # a proper hello, and its answer, then garbage frames
                await writer.drain()
                assert await reader.read(1 << 16)
            for _ in range(rng.randint(1, 6)):
                if rng.random() < 0.5:
                    payload = rng.choice(payloads)
                else:
                    payload = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40)))
                writer.write(frame(payload))
            if attempt % 7 == 0:
                writer.write(b"\xff\xff\xff\xff garbage")  # a length no broker accepts
            if attempt % 5 == 0:
                writer.write(bytes(rng.getrandbits(8) for _ in range(64)))  # not even framed
            await writer.drain()
            writer.close()
            await writer.wait_closed()
        await pub.publish("[class,stock],[price,1]")
        assert (await s.next(timeout=5)).publication["price"] == 1  # still serving everyone else
        counters = b.status()["counters"]
        assert counters["link.bad_messages"] > 20
        assert counters["link.bad_frames"] >= 3  # oversize prefixes on established links
        assert counters["link.handshake_failed"] >= 10
        for c in (pub, sub):
            await c.close()
        await stop(b)

    run(scenario(), timeout=60)


def test_bad_message_is_answered_with_refuse_and_link_survives() -> None:
    async def scenario() -> None:
        (b,) = await line(1)
        reader, writer = await raw(b)
        writer.write(encode(Hello("client", "raw")) + frame(b"\x93\xa3sub\x01\x02"))
        await writer.drain()
        data = await reader.read(1 << 16)
        (hello_len,) = struct.unpack(">I", data[:4])
        hello = decode(data[4 : 4 + hello_len])
        assert isinstance(hello, Hello) and (hello.kind, hello.id) == ("broker", "B1")
        rest = data[4 + hello_len :] or await reader.read(1 << 16)
        refusal = decode(rest[4:])
        assert isinstance(refusal, Refuse) and refusal.reason.startswith("bad message")
        assert "raw" in b.links  # still connected
        writer.close()
        await writer.wait_closed()
        await stop(b)

    run(scenario())


def test_handshake_rules() -> None:
    async def scenario() -> None:
        (b,) = await line(1)
        first = await Client.connect(b.uri, "same")
        with pytest.raises(ConnectError, match="already connected"):
            await Client.connect(b.uri, "same")
        with pytest.raises(ConnectError, match="already connected"):
            await Client.connect(b.uri, "B1")
        with pytest.raises(ConnectError, match="answered as"):
            await Client.connect(b.uri.__class__(b.uri.host, b.uri.port, "B9"))
        reader, writer = await raw(b)
        writer.write(frame(msgpack.packb(["statreq", "1"])))  # no hello first
        await writer.drain()
        assert await reader.read(1 << 16)  # a refusal, then the close
        assert await reader.read(1 << 16) == b""
        writer.close()
        await writer.wait_closed()
        assert b.counters["handshake_failed"] == 1
        await first.close()
        await stop(b)

    run(scenario())


def test_silent_peer_is_dropped_by_heartbeat() -> None:
    async def scenario() -> None:
        b = RouterService(uri("B1"), heartbeat=0.05, dead_after=0.3)
        await b.start()
        _, writer = await raw(b)
        writer.write(encode(Hello("client", "mute")))  # never answers a ping
        await writer.drain()
        await until(lambda: "mute" in b.links, what="connected")
        await until(lambda: "mute" not in b.links, timeout=3, what="dropped")
        assert b.counters["heartbeat_timeouts"] == 1
        writer.close()
        await writer.wait_closed()
        await stop(b)

    run(scenario())


def test_a_client_that_only_receives_is_kept_alive() -> None:
    """A steady stream to a client leaves no idle time for the broker to ping it; it must still
    be pinged (and answer), or it looks silent and is dropped."""

    async def scenario() -> None:
        b = RouterService(uri("B1"), heartbeat=0.05, dead_after=0.3)
        await b.start()
        pub = await Client.connect(b.uri, "pub")
        reader = await Client.connect(b.uri, "reader")
        await pub.advertise("[class,eq,tick],[n,isPresent,0]")
        sub = await reader.subscribe("[class,eq,tick]")
        for n in range(40):  # 1 s of deliveries every 25 ms, longer than dead_after
            await pub.publish(Publication("tick", {"n": n}))
            await sub.next(1.0)
            await asyncio.sleep(0.025)
        assert reader.connected and b.counters["heartbeat_timeouts"] == 0
        await pub.close()
        await reader.close()
        await stop(b)

    run(scenario())


async def _bulk_to_a_stuck_reader(window: int | None) -> tuple[RouterService, Any]:
    """3,000 publications of 10 kB (30 MB: more than the kernel's socket buffers hold) to a
    consumer that keeps up and one that subscribed and never reads; what the broker holds then.
    ``window``: the custody window to clients, if not the default."""
    b = RouterService(uri("B1"), queue_limit=4 << 20, dead_after=600.0)  # the raw reader answers no ping
    await b.start()
    if window is not None:
        b.router.custody.window = b.router.custody.window_bytes = window
    pub = await Client.connect(b.uri, "pub")
    fast = await Client.connect(b.uri, "fast")
    await pub.advertise("[class,eq,bulk],[n,isPresent,0],[pad,isPresent,'']")
    fs = await fast.subscribe("[class,eq,bulk]")
    _, writer = await raw(b)  # subscribes, then never reads
    writer.write(encode(Hello("client", "slow")))
    writer.write(encode(Subscribe("1", parse_filter("[class,eq,bulk]"))))
    await writer.drain()
    await until(lambda: b.router.status()["subscriptions"] == 2, what="both subscribed")
    pad = "x" * 10_000
    for i in range(3000):
        pub.publish_nowait(Publication("bulk", {"n": i, "pad": pad}))
        if i % 10 == 0:  # let the fast consumer keep up: 100 kB bursts
            await asyncio.sleep(0)
    got = [(await fs.next(timeout=10)).publication["n"] for _ in range(3000)]
    assert got == list(range(3000))
    for c in (pub, fast):
        await c.close()
    return b, writer


def test_a_stuck_consumer_waits_in_custody_and_others_keep_going() -> None:
    """What a consumer that stopped reading has not taken waits in the broker's custody, a
    window of it in flight: its link's buffers stay small, the others keep going, and it gets
    the rest once it reads and takes again (the window is what lets an urgent message
    overtake a backlog, see broker.routing.backlog)."""

    async def scenario() -> None:
        b, writer = await _bulk_to_a_stuck_reader(None)
        link = b.links["slow"]
        assert link.buffered() < 2 * b.router.custody.window_bytes + 65536
        assert b.router.status()["waiting"] > 3000 - 2 * b.router.custody.window
        assert "link.slow_consumers" not in b.status()["counters"]
        writer.close()
        await writer.wait_closed()
        await stop(b)

    run(scenario(), timeout=60)


def test_slow_consumer_is_disconnected_and_others_keep_going() -> None:
    """A link whose buffers outgrow the queue limit (here: a custody window wider than it) is
    closed, counted, and the others keep going."""

    async def scenario() -> None:
        b, writer = await _bulk_to_a_stuck_reader(100 << 20)
        await until(lambda: "slow" not in b.links, what="slow consumer dropped")
        counters = b.status()["counters"]
        assert counters["link.slow_consumers"] == 1 and counters["link.dropped.unsent"] > 0
        writer.close()
        await writer.wait_closed()
        await stop(b)

    run(scenario(), timeout=60)


def test_each_delivery_lands_on_exactly_one_queue() -> None:
    async def scenario() -> None:
        (b,) = await line(1)
        pub = await Client.connect(b.uri, "pub")
        sub = await Client.connect(b.uri, "sub", queue_limit=50)
        await pub.advertise(ADV)
        own = await sub.subscribe("[class,eq,stock],[price,<,10]")
        merged = await sub.subscribe("[class,eq,stock],[price,>=,10]", own_queue=False)
        for i in range(20):
            pub.publish_nowait(Publication("stock", {"price": i}))
        await pub.publish("[class,stock],[price,99]")
        assert [(await own.next(timeout=5)).publication["price"] for _ in range(10)] == list(range(10))
        merged_prices = [(await sub.next(timeout=5)).publication["price"] for _ in range(11)]
        assert merged_prices == [*range(10, 20), 99]
        with pytest.raises(TimeoutError):
            await sub.next(timeout=0.2)  # nothing of `own` leaked into the merged stream
        with pytest.raises(RuntimeError, match="merged stream"):
            await merged.next(timeout=0.1)
        assert sub.dropped == 0
        for c in (pub, sub):
            await c.close()
        await stop(b)

    run(scenario())


def _pending(service: RouterService) -> int:
    """Index entries the broker's matcher has not merged yet (``broker.matching.bounds``)."""
    classes = service.router.tables.matcher._classes.values()
    return sum(len(b.pending_keys) for c in classes for a in c.attributes.values() for b in a.bounds)


def test_a_quiet_broker_builds_the_index_a_bulk_add_left_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deployment's subscriptions are indexed while the broker is quiet, not by the
    publications after it; what matches does not change."""
    monkeypatch.setattr(driver, "QUIET", 0.5)  # the check right after the adds comes well before

    async def scenario() -> None:
        b = RouterService(uri("B1"))
        await b.start()
        sub = await Client.connect(b.uri, "sub")
        pub = await Client.connect(b.uri, "pub")
        await pub.advertise("[class,eq,stock],[name,isPresent,''],[price,<,100]")
        added = [sub.subscribe(f"[class,eq,stock],[name,eq,'s{n}'],[price,<,{n}]") for n in range(300)]
        await asyncio.gather(*added)  # sent in one go, handled in a burst
        assert _pending(b) > 0  # what the adds left, with no publication since
        await until(lambda: _pending(b) == 0, what="the index built while quiet")
        await pub.publish("[class,stock],[name,'s7'],[price,5]")
        await until(lambda: b.router.counters.get("delivered", 0) == 1, what="the one match")
        await pub.close()
        await sub.close()
        await b.stop()

    run(scenario())


@pytest.mark.parametrize("grace", [0.0, 600.0])
def test_a_quiet_broker_ticks_only_while_a_took_is_held_back_or_a_peer_is_away(
    monkeypatch: pytest.MonkeyPatch, grace: float
) -> None:
    """``ANSWER_WAIT`` and the end of a session are counted on the router's inputs: a quiet broker
    must hear Ticks while a stand-in holds back a Took (grace or not: a neighbour that takes
    nothing, its disk full, would keep it held back for ever) or a peer is away. Otherwise none:
    each Tick is an input, logged like any other (one a second, all day, on an idle broker)."""
    monkeypatch.setattr(driver, "TICK", 0.02)

    async def main() -> None:
        broker = RouterService(uri("B1"), session_grace=grace)
        await broker.start()
        router = broker.router

        async def ticks_while(start: Callable[[], None], stop: Callable[[], None]) -> None:
            await asyncio.sleep(0.2)
            assert router.counters["in.Tick"] == 0
            start()
            await until(lambda: router.counters["in.Tick"] > 0, what="a Tick")
            stop()
            await asyncio.sleep(0.05)
            ticks = router.counters["in.Tick"]
            await asyncio.sleep(0.2)
            assert router.counters["in.Tick"] == ticks
            router.counters["in.Tick"] = 0

        try:
            channel = Channel("B2-1", "", client=False)  # what a hold for neighbour B2 keeps
            await ticks_while(
                lambda: router.stand_ins.holding.update({"B2": (channel, {1: (0.0, set())})}),
                router.stand_ins.holding.clear,
            )
            if grace:
                await ticks_while(
                    lambda: router.sessions.away.update({"c": 1e18}), router.sessions.away.clear
                )
        finally:
            await broker.stop()

    run(main())
