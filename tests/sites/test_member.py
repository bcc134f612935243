"""Brokers of a replicated site as processes see them: three ``RouterService``s on loopback in one
event loop, real clients given the site's brokers. The leader serves; stopping it moves every
client to the next leader, and the streams go on with nothing lost, repeated or reordered."""

from __future__ import annotations

import asyncio
import errno
import random
import struct
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import pytest

from broker.client import Client, Qos
from broker.client.reconnect import BrokerList
from broker.consensus import Entry
from broker.errors import LocalError
from broker.language import Publication, parse_filter
from broker.messages import (
    Append,
    AppendReply,
    Hello,
    InstallSnapshot,
    LinkDown,
    LinkUp,
    Piece,
    Ping,
    Publish,
    Refuse,
    Subscribe,
    VoteReply,
    VoteRequest,
    WireMessage,
)
from broker.sites import member, pieces
from broker.sites.inputs import decode_input
from broker.sites.member import SiteConfig
from broker.transport import codec, server
from broker.transport.codec import FrameDecoder, decode, encode
from broker.transport.handshake import ServedElsewhere
from broker.transport.link import Link
from broker.transport.server import RouterService
from broker.transport.uri import BrokerURI
from tests.transport.harness import run, until, uri
from tests.transport.test_hostile_frames import FLOOD, hostile

FAST = {"heartbeat": 0.2, "dead_after": 0.8}
ONE_FRAME = codec.MAX_FRAME


def site(
    tmp_path: Path,
    brokers: tuple[str, ...] = ("b1", "b2", "b3"),
    election_timeout: float = 0.3,
    **options: object,
) -> list[RouterService]:
    config = SiteConfig("S", tuple(uri(b) for b in brokers), election_timeout, heartbeat=0.05)
    return [
        RouterService(member, site=config, data=tmp_path / member.id, session_grace=30.0, **FAST, **options)  # type: ignore[arg-type]
        for member in config.members
    ]


def serving(services: list[RouterService]) -> RouterService | None:
    leaders = [s for s in services if s.site is not None and s.site.serving]
    assert len(leaders) <= 1, "two brokers serve the site at once"
    return leaders[0] if leaders else None


@asynccontextmanager
async def serving_site(
    tmp_path: Path, election_timeout: float = 0.3, **options: object
) -> AsyncIterator[tuple[list[RouterService], RouterService]]:
    """A site of three brokers started (with ``options`` for each ``RouterService``), once one
    of them serves it (its leader); the brokers still running are stopped after."""
    services = site(tmp_path, election_timeout=election_timeout, **options)
    for service in services:
        await service.start()
    try:
        await until(lambda: serving(services) is not None, what="a leader that serves")
        leader = serving(services)
        assert leader is not None
        yield services, leader
    finally:
        for service in services:
            if service._server is not None:
                await service.stop()


def brokers_of(services: list[RouterService]) -> BrokerList:
    return BrokerList(s.uri for s in services)


async def stream(
    publishing: BrokerList, subscribing: BrokerList
) -> tuple[Client, Client, list[int], asyncio.Task[None]]:
    """A publisher and a subscriber of ``[class,'t'],[n,N]``; what it got, in order, as it comes."""
    subscriber = await Client.connect(subscribing, "sub", **FAST)  # type: ignore[arg-type]
    publisher = await Client.connect(publishing, "pub", **FAST)  # type: ignore[arg-type]
    subscription = await subscriber.subscribe("[class,eq,'t']")
    await publisher.advertise("[class,eq,'t'],[n,>,0]")
    got: list[int] = []

    async def read() -> None:
        async for delivery in subscription:
            got.append(int(delivery.publication["n"]))

    return publisher, subscriber, got, asyncio.get_running_loop().create_task(read())


def test_a_site_needs_its_log_on_disk_and_its_own_brokers(tmp_path: Path) -> None:
    config = SiteConfig("S", (uri("b1"), uri("b2")))
    with pytest.raises(LocalError, match="must keep its log on disk"):
        RouterService(config.members[0], site=config)
    with pytest.raises(LocalError, match="not one of the brokers of site S"):
        RouterService(uri("b9"), site=config, data=tmp_path)
    with pytest.raises(ValueError, match="cannot be named as one of its brokers"):
        SiteConfig("b1", (BrokerURI("127.0.0.1", 1, "b1"),))


def test_one_broker_serves_and_the_others_send_clients_on_to_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving_site(tmp_path) as (services, leader):
            statuses = [s.status()["site"] for s in services]
            assert {s["leader"] for s in statuses} == {leader.uri.id}
            assert all(s["id"] == "S" for s in (svc.status() for svc in services))
            # a client given the followers first ends up at the leader
            others = [s for s in services if s is not leader]
            client = await Client.connect(BrokerList([others[0].uri, others[1].uri, leader.uri]), "c1")
            async with client:
                assert client.broker_id == leader.uri.id

    run(scenario())


def test_the_leader_stopped_mid_stream_loses_repeats_and_reorders_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with serving_site(tmp_path) as (services, leader):
            everyone = brokers_of(services)
            publisher, subscriber, got, reading = await stream(everyone, everyone)
            for n in range(1, 41):
                await publisher.publish(f"[class,'t'],[n,{n}]")
            first = leader
            await first.stop()
            for n in range(41, 81):
                await publisher.publish(f"[class,'t'],[n,{n}]")
            await until(lambda: len(got) >= 80, timeout=10, what="every publication")
            await asyncio.sleep(0.3)  # nothing more comes
            assert got == list(range(1, 81))
            second = serving(services)
            assert second is not None and second is not first
            assert subscriber.broker_id == publisher.broker_id == second.uri.id
            reading.cancel()
            await publisher.close()
            await subscriber.close()

    run(scenario(), timeout=60)


def test_a_leader_whose_links_close_is_replaced_before_an_election_timeout(tmp_path: Path) -> None:
    """A leader killed -9 closes its links at once, as one stopped does: its followers take the
    end of their member links as a hint (``Node.unlinked``) and stand at once, so the
    next leader serves well within the election timeout (1 s here), where waiting for silence
    would take one at least."""

    async def scenario() -> None:
        async with serving_site(tmp_path, election_timeout=1.0) as (services, leader):
            await asyncio.sleep(0.2)  # heartbeats: every follower heard the leader just now
            started = time.monotonic()
            await leader.stop()
            await until(lambda: serving(services) not in (None, leader), timeout=10, what="a new leader")
            took = time.monotonic() - started
            hinted = [s.counters["site.leader_unlinked"] for s in services if s is not leader]
            assert hinted == [1, 1] and took < 1.0, (hinted, took)

    run(scenario(), timeout=60)


def test_a_message_id_published_before_the_leader_stopped_is_not_routed_again_after(tmp_path: Path) -> None:
    """The site replicates the publishers' message ids with the rest of its state: ``alarm:1``
    publishes ``a1``, the leader stops, and a second process of the same publisher publishing
    ``a1`` at the next leader is answered with the first's id; the subscriber has it once."""

    async def scenario() -> None:
        async with serving_site(tmp_path) as (services, leader):
            everyone = brokers_of(services)
            subscriber = await Client.connect(everyone, "sub", **FAST)  # type: ignore[arg-type]
            subscription = await subscriber.subscribe("[class,eq,'t']")
            alarm = await Client.connect(everyone, "alarm:1", **FAST)  # type: ignore[arg-type]
            await alarm.advertise("[class,eq,'t'],[n,>,0]")
            first = await alarm.publish("[class,'t'],[n,1]", Qos(mid="a1"))
            assert (await subscription.next(timeout=10)).id == first
            await leader.stop()
            await until(lambda: serving(services) not in (None, leader), what="the next leader")
            second = await Client.connect(everyone, "alarm:2", retry_on_failed_connect=True, **FAST)  # type: ignore[arg-type]
            await second.advertise("[class,eq,'t'],[n,>,0]")
            assert await second.publish("[class,'t'],[n,1]", Qos(mid="a1")) == first
            await second.publish("[class,'t'],[n,2]", Qos(mid="a2"))
            assert (await subscription.next(timeout=10)).publication["n"] == 2  # not a1 again
            now = serving(services)
            assert now is not None and now.router.counters["dropped.duplicate_mid"] == 1
            for client in (alarm, second, subscriber):
                await client.close()

    run(scenario(), timeout=60)


def test_the_leader_routes_a_non_persistent_publication_in_order_without_replicating_it(
    tmp_path: Path,
) -> None:
    """Publications 1 to 30, every third non-persistent, pipelined: the subscriber gets them all
    in order (each non-persistent one waits for the entries proposed before it to be applied,
    never to be replicated); the site's log has only the persistent ones."""

    async def scenario() -> None:
        async with serving_site(tmp_path) as (services, leader):
            everyone = brokers_of(services)
            publisher, subscriber, got, reading = await stream(everyone, everyone)
            assert leader.site is not None
            applied = leader.site.node.applied
            for n in range(1, 31):
                qos = Qos(persistent=False) if n % 3 == 0 else Qos()
                publisher.publish_nowait(f"[class,'t'],[n,{n}]", qos=qos)
            await until(lambda: len(got) >= 30, timeout=10, what="every publication")
            assert got == list(range(1, 31))
            await until(lambda: leader.site is not None and not leader.site.unreplicated, what="none waiting")
            entries = leader.site.node.log.between(applied + 1, leader.site.node.applied)
            logged = [decode_input(e.data).message for e in entries if e.data]
            assert [m.publication["n"] for m in logged if isinstance(m, Publish)] == [  # type: ignore[attr-defined]
                n for n in range(1, 31) if n % 3
            ]
            assert leader.router.counters["in.Publish"] == 30
            reading.cancel()
            await publisher.close()
            await subscriber.close()

    run(scenario(), timeout=60)


def two_sites(tmp_path: Path) -> tuple[list[RouterService], list[RouterService]]:
    """site R (the root) and site C below it, three brokers each; every broker of C dials every
    broker of R (only C's leader does, and only R's answers)."""
    root = SiteConfig("R", tuple(uri(f"r{i}") for i in (1, 2, 3)), election_timeout=0.3, heartbeat=0.05)
    child = SiteConfig("C", tuple(uri(f"c{i}") for i in (1, 2, 3)), election_timeout=0.3, heartbeat=0.05)

    def started(
        config: SiteConfig, dials: tuple[BrokerURI, ...], below: tuple[BrokerURI, ...] = ()
    ) -> list[RouterService]:
        sites = {d.id: "R" for d in dials} | {b.id: "C" for b in below}  # the sites linked to it
        return [
            RouterService(
                m, dials, site=config, neighbor_sites=sites, data=tmp_path / m.id, session_grace=30.0, **FAST
            )  # type: ignore[arg-type]
            for m in config.members
        ]

    return started(root, (), below=child.members), started(child, root.members)


def test_a_publication_crosses_from_one_site_to_another_and_survives_both_leaders(tmp_path: Path) -> None:
    async def scenario() -> None:
        root, child = two_sites(tmp_path)
        for service in (*root, *child):
            await service.start()
        try:
            await until(lambda: serving(root) is not None and serving(child) is not None, what="two leaders")
            await until(
                lambda: "R" in serving(child).links and "C" in serving(root).links, what="the site link"
            )  # type: ignore[union-attr]
            publisher, subscriber, got, reading = await stream(brokers_of(root), brokers_of(child))
            await until(
                lambda: serving(root).router.status()["subscriptions"] > 0, what="the subscription at R"
            )  # type: ignore[union-attr]
            for n in range(1, 21):
                await publisher.publish(f"[class,'t'],[n,{n}]")
            await until(lambda: len(got) >= 20, timeout=10, what="the first publications")
            await serving(root).stop()  # type: ignore[union-attr]
            for n in range(21, 41):
                await publisher.publish(f"[class,'t'],[n,{n}]")
            await serving(child).stop()  # type: ignore[union-attr]
            for n in range(41, 61):
                await publisher.publish(f"[class,'t'],[n,{n}]")
            await until(lambda: len(got) >= 60, timeout=15, what=f"every publication, not {got}")
            await asyncio.sleep(0.3)
            assert got == list(range(1, 61))
            reading.cancel()
            await publisher.close()
            await subscriber.close()
        finally:
            for service in (*root, *child):
                if service.site is not None and service.site.disk is not None:
                    await service.stop()

    run(scenario(), timeout=60)


def test_a_retained_publication_kept_by_a_site_outlives_the_site_s_leader(tmp_path: Path) -> None:
    """Site C keeps a retained alert (its keeper: the publication entered the overlay there) whose
    publisher has gone. C's leader stops, another of C's brokers leads, from the state the site
    replicated; subscribers that come after, at C and at site R (drawn to C by the alert's
    advertisement), get it once each."""

    async def scenario() -> None:
        root, child = two_sites(tmp_path)
        for service in (*root, *child):
            await service.start()

        def linked() -> bool:
            c, r = serving(child), serving(root)
            return c is not None and r is not None and "R" in c.links and "C" in r.links

        try:
            await until(linked, what="two leaders and the site link")
            publisher = await Client.connect(brokers_of(child), "agent", **FAST)  # type: ignore[arg-type]
            await publisher.advertise("[class,eq,ALERT],[job,isPresent,'']")
            pub_id = await publisher.publish("[class,ALERT],[job,load]", Qos(retain=True, mid="a1"))
            await publisher.close()  # gone for good: the site keeps its alert
            first = serving(child)
            assert first is not None and first.router.retention.kept[pub_id].keeper
            await first.stop()
            await until(lambda: linked() and serving(child) is not first, timeout=10, what="C led again")
            leader = serving(child)
            assert leader is not None and leader.router.retention.kept[pub_id].keeper
            for name, at in (("operator", child), ("far", root)):
                async with await Client.connect(brokers_of(at), name, **FAST) as late:  # type: ignore[arg-type]
                    stream = await late.subscribe("[class,eq,ALERT]")
                    got = [(await stream.next(timeout=10)).id]
                    with suppress(TimeoutError):
                        got.append((await stream.next(timeout=1.0)).id)
                    assert got == [pub_id], name
        finally:
            for service in (*root, *child):
                if service._server is not None:
                    await service.stop()

    run(scenario(), timeout=60)


def small_frames_and_snapshots(monkeypatch: pytest.MonkeyPatch, frame: int = 4096) -> Counter[str]:
    """Compaction every 20 entries (a leader keeps 30 for a member behind), frames of ``frame``
    bytes; the pieces sent, by the type of the message they are of."""
    monkeypatch.setattr(member, "COMPACT_EVERY", 20)
    monkeypatch.setattr(member, "COMPACT_FORCE", 30)
    monkeypatch.setattr(codec, "MAX_FRAME", frame)
    sent = Counter[str]()
    cut = codec.in_pieces

    def counted(message: WireMessage) -> Iterator[WireMessage]:
        for part in cut(message):
            sent[type(message).__name__] += type(part) is Piece
            yield part

    monkeypatch.setattr(pieces, "in_pieces", counted)
    return sent


async def behind_the_snapshot(
    tmp_path: Path, services: list[RouterService], leader: RouterService, padding: int = 0, **options: object
) -> tuple[RouterService, Client]:
    """A follower stopped while a client subscribes (also ``padding`` times with a filter of a
    KiB, to grow the state) and publishes 60 publications, which the leader compacts away: it
    is started again (with ``options``) behind the leader's snapshot."""
    away = next(s for s in services if s is not leader)
    assert away.site is not None and leader.site is not None
    before = away.site.node.log.last_index
    await away.stop()
    client = await Client.connect(brokers_of(services), "pub", **FAST)  # type: ignore[arg-type]
    await client.subscribe("[class,eq,'t']")
    for n in range(padding):
        await client.subscribe(f"[class,eq,'t'],[pad,eq,'{n:04}{'x' * 1000}']")
    await client.advertise("[class,eq,'t'],[n,>,0]")
    for n in range(1, 61):
        await client.publish(f"[class,'t'],[n,{n}]")
    held = leader.site.node.snapshot
    assert held is not None and held.index > before  # what it missed is gone from every log
    back = RouterService(away.uri, site=away.site.config, data=tmp_path / away.uri.id, **FAST, **options)  # type: ignore[arg-type]
    await back.start()
    services[services.index(away)] = back
    return back, client


async def caught_up(back: RouterService, leader: RouterService) -> None:
    """Until ``back`` applied what ``leader`` committed, from a snapshot, to the same state (the
    node counts a snapshot applied once handed out to write: the state is restored after)."""
    assert back.site is not None and leader.site is not None
    node, leading = back.site.node, leader.site.node

    def same() -> bool:
        tables = back.router.status(detail=True)["prt"] == leader.router.status(detail=True)["prt"]
        return node.applied >= leading.commit and tables

    await until(same, timeout=20, what="the member caught up")
    assert node.snapshot is not None and leading.snapshot is not None
    assert node.snapshot.index >= leading.snapshot.index
    assert back.site.state.attached == leader.site.state.attached


@pytest.mark.parametrize("frame", [ONE_FRAME, 4096], ids=["one-frame", "in-pieces"])
def test_a_member_back_behind_the_snapshot_is_sent_it_and_holds_the_same_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frame: int
) -> None:
    """With frames of 4 KiB, the snapshot (some 20 KiB) goes in pieces, as a busy site's does."""
    sent = small_frames_and_snapshots(monkeypatch, frame)

    async def scenario() -> None:
        async with serving_site(tmp_path) as (services, leader):
            back, client = await behind_the_snapshot(tmp_path, services, leader)
            await caught_up(back, leader)
            if frame < ONE_FRAME:  # it went in pieces (and so may have a batch of entries)
                assert sent["InstallSnapshot"] >= 1
            else:
                assert sum(sent.values()) == 0
            await client.close()

    run(scenario(), timeout=60)


def test_a_snapshot_larger_than_the_link_s_queue_is_streamed_as_the_link_drains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Links that queue 32 KiB at most, and a state of over 100 KiB: queued at once, its pieces
    would close the member link as a slow consumer, every time, and the member would never
    catch up. Written as the link drains, at most a quarter of the queue waits at a time."""
    limit = 32 << 10
    sent = small_frames_and_snapshots(monkeypatch)

    async def scenario() -> None:
        async with serving_site(tmp_path, queue_limit=limit) as (services, leader):
            back, client = await behind_the_snapshot(tmp_path, services, leader, 100, queue_limit=limit)
            await caught_up(back, leader)
            assert leader.site is not None and leader.site.node.snapshot is not None
            assert len(leader.site.node.snapshot.data) > 3 * limit
            assert sent["InstallSnapshot"] * (4096 - 32) > 3 * limit
            assert not any(s.counters["slow_consumers"] for s in services)
            await client.close()

    run(scenario(), timeout=60)


def test_a_snapshot_half_sent_by_a_leader_stopped_is_dropped_and_the_next_leader_s_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader's stream stalls after a few pieces (its link takes no more), and the leader is
    stopped: the member behind drops the half it read when the link ends, never installs it, and
    is caught up by the next leader's snapshot, streamed whole."""
    small_frames_and_snapshots(monkeypatch)
    writable = Link.writable
    asked = Counter[Link]()
    stalling: list[RouterService] = []

    async def stalled(link: Link, limit: int) -> bool:
        asked[link] += 1
        if asked[link] > 3 and any(s.site is not None and link in s.site.outboxes for s in stalling):
            await asyncio.Event().wait()  # until the leader stops (and cancels its stream)
        return await writable(link, limit)

    monkeypatch.setattr(Link, "writable", stalled)

    async def scenario() -> None:
        async with serving_site(tmp_path) as (services, first):
            stalling.append(first)
            back, client = await behind_the_snapshot(tmp_path, services, first, 20)
            assert back.site is not None
            assembling = back.site.assembling
            await until(lambda: any(a._got for a in assembling.values()), what="the first pieces")
            await asyncio.sleep(0.3)
            assert any(a._got < a._total for a in assembling.values())  # half a snapshot, stalled
            assert back.site.node.snapshot is None
            await first.stop()
            await until(lambda: serving(services) not in (None, first), what="the next leader")
            second = serving(services)
            assert second is not None and second is not back and second.site is not None
            await caught_up(back, second)
            assert back.site.counters["site.pieces_dropped"] >= 1
            await client.close()

    run(scenario(), timeout=60)


def test_hostile_frames_on_a_member_link_are_refused_and_the_site_serves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone links to a follower as another member (no TLS here to stop the claim) and sends
    garbage, a publication and consensus messages that name another sender with a huge term:
    each is refused, no broker takes the forged term or falls over, and a stream through the
    site loses and repeats nothing; pieces of a message larger than a member takes close the link."""
    rng = random.Random(34)
    monkeypatch.setattr(member, "MAX_ASSEMBLED", 10_000)

    async def scenario() -> None:
        async with serving_site(tmp_path) as (services, leader):
            everyone = brokers_of(services)
            publisher, subscriber, got, reading = await stream(everyone, everyone)
            for n in range(1, 21):
                await publisher.publish(f"[class,'t'],[n,{n}]")
            follower = next(s for s in services if s is not leader and s.site is not None)
            posing_as = next(s.uri.id for s in services if s is not follower and s is not leader)
            reader, writer = await asyncio.open_connection(follower.uri.host, follower.uri.port)
            writer.write(encode(Hello("broker", posing_as, site="S")))
            for _ in range(FLOOD):
                payload = hostile(rng)
                writer.write(struct.pack(">I", len(payload)) + payload)
            writer.write(encode(Publish("1", Publication("t", {"n": 999}))))
            writer.write(encode(Append(10**9, "b9", 10**9, 10**9, (Entry(10**9, 10**9 + 1, b"x"),), 10**9)))
            writer.write(encode(InstallSnapshot(10**9, "b9", 10**9, 10**9, b"not a state")))
            await writer.drain()
            replies: list[object] = []
            frames = FrameDecoder()
            # the hello, then a refusal per bad frame and the publication; and whatever one member
            # says to another (the link poses as one): a vote asked for if an election comes
            while sum(isinstance(r, Refuse) for r in replies) < FLOOD + 1:
                data = await asyncio.wait_for(reader.read(1 << 16), 10)
                assert data, f"the follower closed the link after {len(replies)} replies"
                replies += [decode(payload) for payload in frames.feed(data)]
            assert isinstance(replies[0], Hello) and replies[0].id == follower.uri.id
            member_talk = (Refuse, Ping, VoteRequest, VoteReply, Append, AppendReply)
            assert all(isinstance(r, member_talk) for r in replies[1:]), replies
            writer.write(encode(Piece(12_000, 0, b"\x00" * 4000)))  # refused at once: 12,000 > 10,000
            await writer.drain()
            while await asyncio.wait_for(reader.read(1 << 16), 10):
                pass  # until the follower closes the link
            writer.close()
            await writer.wait_closed()
            for n in range(21, 41):
                await publisher.publish(f"[class,'t'],[n,{n}]")
            await until(lambda: len(got) >= 40, timeout=10, what="every publication")
            await asyncio.sleep(0.3)  # nothing more comes
            assert got == list(range(1, 41))
            assert all(s._server is not None for s in services)  # no broker fell over
            assert follower.site is not None and follower.site.counters["bad_messages"] >= FLOOD
            assert all(s.site is not None and s.site.node.term < 10**9 for s in services), "a forged term"
            reading.cancel()
            await publisher.close()
            await subscriber.close()

    run(scenario(), timeout=60)


def test_a_piece_stream_out_of_order_or_cut_short_closes_its_link_and_installs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone posing as a member sends a follower pieces of a snapshot out of their order (a
    gap, one again, one before the first, one of another length): each closes that link at
    once; half of one, then the link's end: the half is dropped. Nothing is installed, and a
    stream through the site loses and repeats nothing."""
    monkeypatch.setattr(codec, "MAX_FRAME", 4096)

    async def scenario() -> None:
        async with serving_site(tmp_path) as (services, leader):
            everyone = brokers_of(services)
            publisher, subscriber, got, reading = await stream(everyone, everyone)
            for n in range(1, 21):
                await publisher.publish(f"[class,'t'],[n,{n}]")
            follower = next(s for s in services if s is not leader and s.site is not None)
            assert follower.site is not None
            posing_as = next(s.uri.id for s in services if s is not follower and s is not leader)
            forged = InstallSnapshot(1, posing_as, 10**6, 1, random.Random(7).randbytes(20_000))
            parts = [p for p in codec.in_pieces(forged) if isinstance(p, Piece)]
            assert len(parts) == 5
            moved = Piece(parts[1].total + 1, parts[1].at, parts[1].data)

            async def posing(frames: list[Piece], close: bool) -> None:
                reader, writer = await asyncio.open_connection(follower.uri.host, follower.uri.port)
                writer.write(encode(Hello("broker", posing_as, site="S")))
                for frame in frames:
                    writer.write(encode(frame))
                await writer.drain()
                if not close:
                    async with asyncio.timeout(10):
                        while await reader.read(1 << 16):
                            pass  # until the follower closes the link
                writer.close()
                await writer.wait_closed()

            for frames in ([parts[0], parts[2]], [*parts[:2], parts[1]], [parts[1]], [parts[0], moved]):
                await posing(frames, close=False)
            assert follower.site.counters["bad_frames"] == 4
            await posing(parts[:3], close=True)
            await until(lambda: follower.site.counters["site.pieces_dropped"] >= 4, what="the halves dropped")  # type: ignore[union-attr]
            assert all(s.site is not None and s.site.node.commit < 10**6 for s in services)
            assert follower.site.node.snapshot is None
            for n in range(21, 41):
                await publisher.publish(f"[class,'t'],[n,{n}]")
            await until(lambda: len(got) >= 40, timeout=10, what="every publication")
            await asyncio.sleep(0.3)  # nothing more comes
            assert got == list(range(1, 41))
            reading.cancel()
            await publisher.close()
            await subscriber.close()

    run(scenario(), timeout=60)


def test_pieces_that_cannot_be_kept_on_a_full_disk_close_their_link_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower puts a large message's pieces together in a file: with no space left, the
    link that carried them is closed (counted, logged; the error no longer escapes the member
    link's handler, which on a link the follower dialled ended its dial loop), the broker serves
    on, and the member the link posed as links again."""
    monkeypatch.setattr(codec, "MAX_FRAME", 4096)

    class Full:
        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self) -> None:
            pass

    monkeypatch.setattr(pieces.tempfile, "TemporaryFile", lambda **_: Full())

    async def scenario() -> None:
        async with serving_site(tmp_path) as (services, leader):
            follower = next(s for s in services if s is not leader and s.site is not None)
            assert follower.site is not None
            posing_as = next(s.uri.id for s in services if s is not follower and s is not leader)
            forged = InstallSnapshot(1, posing_as, 10**6, 1, random.Random(7).randbytes(20_000))
            first = next(p for p in codec.in_pieces(forged) if isinstance(p, Piece))
            reader, writer = await asyncio.open_connection(follower.uri.host, follower.uri.port)
            writer.write(encode(Hello("broker", posing_as, site="S")) + encode(first))
            await writer.drain()
            async with asyncio.timeout(10):
                while await reader.read(1 << 16):
                    pass  # until the follower closes the link
            writer.close()
            await writer.wait_closed()
            assert follower.site.counters["site.pieces_unwritable"] == 1
            assert follower._server is not None
            everyone = brokers_of(services)
            await until(lambda: len(follower.site.links) == 2, what="the member links back")  # type: ignore[union-attr]
            publisher, subscriber, got, reading = await stream(everyone, everyone)
            for n in range(1, 11):
                await publisher.publish(f"[class,'t'],[n,{n}]")
            await until(lambda: len(got) >= 10, timeout=10, what="every publication")
            assert got == list(range(1, 11))
            reading.cancel()
            await publisher.close()
            await subscriber.close()

    run(scenario(), timeout=60)


def test_a_broker_named_the_leader_by_another_of_its_site_is_dialled_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A neighbour site's followers send us on naming their leader: our loop for that broker is
    woken and dials it at once, though a refusal otherwise waits ``SENT_ON_RETRY`` (here long)."""
    monkeypatch.setattr(server, "SENT_ON_RETRY", 30.0)
    others = [uri(f"s{m}") for m in "abc"]
    tried: list[str] = []

    async def dial(target: BrokerURI, *args: object) -> object:
        tried.append(target.id)
        if target.id != "sc":  # sc (elected, not serving yet) answers first, naming itself
            await asyncio.sleep(0.1)
        raise ServedElsewhere(f"{target.id} sends us on", "sc")

    monkeypatch.setattr(server, "dial", dial)

    async def scenario() -> None:
        service = RouterService(uri("b"), others, neighbor_sites={o.id: "S" for o in others})
        await service.start()
        try:
            await until(lambda: tried.count("sc") >= 2, what="the leader dialled again at once")
            await asyncio.sleep(0.2)
            assert tried.count("sa") == tried.count("sb") == 1  # they wait SENT_ON_RETRY
        finally:
            await service.stop()

    run(scenario())


def test_a_hop_that_links_again_before_its_first_link_is_applied_is_bound_to_the_new_link(
    tmp_path: Path,
) -> None:
    """Its LinkUp, LinkDown and LinkUp again are proposed before the first is applied: each
    LinkUp binds its own link, so the output goes to the second link, not to none (the first
    LinkUp took the second link and the LinkDown unbound it: the hop got nothing until it
    linked again)."""
    config = SiteConfig("S", (uri("b1"),))
    service = RouterService(config.members[0], site=config, data=tmp_path)
    site = service.site
    assert site is not None
    site.node.tick(time.monotonic() + 60)  # a site of one elects itself

    class Sink:
        closed = None

        def __init__(self) -> None:
            self.sent: list[object] = []

        def send(self, message: object) -> None:
            self.sent.append(message)

    def settle() -> None:
        node = site.node
        while node.has_ready():
            ready = node.ready()
            site.disk.write(ready.hard_state, ready.entries, ready.snapshot)
            for entry in ready.committed:
                site._apply(entry)
            node.advance(time.monotonic())

    settle()
    assert site.serving
    first, second = Sink(), Sink()
    service.links["c"] = first  # type: ignore[assignment]
    site.propose(LinkUp(False), "c")
    del service.links["c"]
    site.propose(LinkDown(), "c")
    service.links["c"] = second  # type: ignore[assignment]
    site.propose(LinkUp(False), "c")
    settle()
    assert site.binding.bound == {"c": second}
    site.propose(Subscribe("s1", parse_filter("[class,eq,t]")), "c")  # answered: SubAck
    settle()
    assert second.sent and not first.sent
    site.close()


def test_the_follower_right_after_the_dead_leader_stands_first_and_alone() -> None:
    """Election timers by turn after the leader last heard (``member._Turns``): the next broker
    by name draws first, the one after it at least a fifth of the timeout later, so two
    followers never split the vote; with no leader known, by the place of their names."""
    members = ("b3", "b1", "b2")
    turns = {me: member._Turns(me, members) for me in members}

    def draws(me: str, leader: str | None) -> list[float]:
        turns[me].leader = lambda: leader
        return [turns[me]() for _ in range(200)]

    for leader, first, second in [
        ("b1", "b2", "b3"),
        ("b2", "b3", "b1"),
        ("b3", "b1", "b2"),
        (None, "b1", "b2"),
    ]:
        soonest, then = draws(first, leader), draws(second, leader)
        assert min(soonest) > 0 and max(soonest) < 1 / 6
        assert min(then) - max(soonest) >= 1 / 5 - 1e-9 and max(then) < 1


def test_a_broker_that_claims_a_site_it_was_not_told_of_is_refused() -> None:
    """A site's name is its channel and its tables at a neighbour: a hello naming a site is taken
    only from a broker the neighbour was told is of that site (``--neighbor-site``)."""

    async def scenario() -> None:
        told = RouterService(uri("B1"), neighbor_sites={"r1": "R"})
        await told.start()
        try:
            for speaker, claim, known in (("evil", "R", "of no replicated site"), ("r1", "C", "of site 'R'")):
                reader, writer = await asyncio.open_connection(told.uri.host, told.uri.port)
                writer.write(encode(Hello("broker", speaker, site=claim)))
                await writer.drain()
                [refused] = FrameDecoder().feed(await asyncio.wait_for(reader.read(1 << 16), 10))
                reason = decode(refused).reason  # type: ignore[union-attr]
                assert reason.startswith(
                    f"broker {speaker} says it is of site {claim!r}, but this broker knows it as {known}"
                )
                writer.close()
                await writer.wait_closed()
            assert told.status()["counters"]["link.site_claim_refused"] == 2
            assert told.router.tables.neighbors == set()
        finally:
            await told.stop()

    run(scenario())
