"""Hostile frames against the quality-of-service messages of a live broker (``RouterService`` on
loopback, real clients beside a peer speaking frames by hand): floods and garbage of
``Retained``, ``Cancel``, ``Renew``, ``Pull``, ``Took`` and ``Carry``.

What must hold whatever a peer sends: the broker goes on (the hostile link included, for a frame
that breaks no framing), every frame is answered or counted, no client cancels another client's
retained publication whose policy is ``originator`` nor renews another client's lease, and the
other clients are served as before.

Identities are the hops' names up to their first ``:`` (``retained.identity``): on a plain link a
client may claim any name, so a peer calling itself ``agent:x`` is ``agent`` for a cancel
policy, and a neighbour's word for who cancelled is taken. That is by design (the developer's
loopback set-up) and not tested as an attack; with TLS a cancel is its signer's, whatever a
client or a neighbour says, which the TLS tests at the end attack.
"""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import pytest

from broker.client import Client, Qos
from broker.clock import ManualClock
from broker.language import Publication, parse_filter
from broker.messages import (
    MAX_PULL,
    Ack,
    Advertise,
    Cancel,
    Carry,
    Hello,
    Publish,
    Pull,
    Refuse,
    Renew,
    Retained,
    StatusReply,
    StatusRequest,
    Subscribe,
    Took,
)
from broker.messages.qos import MAX_TTL
from broker.transport.cancels import signed
from broker.transport.codec import FrameDecoder, decode, encode
from broker.transport.server import RouterService
from broker.transport.tls import Identity
from tests.transport.harness import run, until, uri

ALERT = "[class,eq,ALERT],[job,isPresent,''],[level,isPresent,0]"
LOAD = Publication("ALERT", {"job": "load", "level": 2})


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


class Raw:
    """A peer speaking frames by hand over a socket: what it sends, and what it has been sent."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.frames = FrameDecoder()
        self.got: list[Any] = []

    @classmethod
    async def connect(cls, broker: RouterService, kind: str, name: str, tls: Identity | None = None) -> Raw:
        ssl = None if tls is None else tls.client
        raw = cls(*await asyncio.open_connection(broker.uri.host, broker.uri.port, ssl=ssl))
        raw.writer.write(encode(Hello(kind, name)))
        await raw.until(lambda got: any(isinstance(m, Hello) for m in got))
        return raw

    def send(self, *messages: Any) -> None:
        for message in messages:
            self.writer.write(message if isinstance(message, bytes) else encode(message))

    async def until(self, enough: Any, timeout: float = 10.0) -> None:
        """Read until ``enough(self.got)``; the broker must not close the link meanwhile."""
        async with asyncio.timeout(timeout):
            while not enough(self.got):
                data = await self.reader.read(1 << 16)
                assert data, f"the broker closed the link after {len(self.got)} frames"
                self.got += [decode(payload) for payload in self.frames.feed(data)]

    async def status(self, ref: str) -> dict[str, Any]:
        """The broker's status as this peer gets it: an answer after everything sent before."""
        self.send(StatusRequest(ref))
        await self.until(lambda got: any(isinstance(m, StatusReply) and m.ref == ref for m in got))
        return next(m.status for m in self.got if isinstance(m, StatusReply) and m.ref == ref)

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def refusals(got: list[Any]) -> list[str]:
    return [m.reason for m in got if isinstance(m, Refuse)]


class WallClock(ManualClock):
    """Manual dates (what expiries and leases are reckoned in), real intervals: heartbeats and
    timeouts run as usual, so moving the date does not make every link look silent."""

    def monotonic(self) -> float:
        return time.monotonic()


async def keeper(**options: Any) -> tuple[RouterService, Client, str]:
    """B1 (made with ``options``) with ``agent``, which published LOAD retained (mid ``a1``,
    policy originator): its id. Raw peers answer no ping: a link one keeps silent for a while
    must outlive a slow machine's test."""
    broker = RouterService(uri("B1"), **{"heartbeat": 30.0, "dead_after": 120.0, **options})
    await broker.start()
    agent = await Client.connect(broker.uri, "agent")
    await agent.advertise(ALERT)
    pub_id = await agent.publish(LOAD, Qos(retain=True, mid="a1"))
    return broker, agent, pub_id


async def later_subscriber_gets(broker: RouterService, name: str) -> list[str]:
    """What a client that subscribes now to every ALERT is sent within a short while."""
    async with await Client.connect(broker.uri, name) as client:
        return await quiet(await client.subscribe("[class,eq,ALERT]"))


def test_a_client_cannot_cancel_another_client_s_retained_publication_however_it_asks() -> None:
    """Mallory floods cancels of ``agent``'s retained publication: by its publisher's id for it,
    by its overlay-wide id, with a forged ``by`` and extreme hop ttls (which a client's cancel
    does not carry on: its edge broker sets both), and as garbage. Each valid one is
    acknowledged and refused where the publication is kept (``retained.cancel_refused``), each
    bad frame refused (``link.bad_messages``); the publication stays, and a later subscriber
    gets it once. Then its publisher cancels it, once, and it is gone."""

    async def scenario() -> None:
        broker, agent, pub_id = await keeper()
        mallory = await Raw.connect(broker, "client", "mallory")
        valid = [
            Cancel("c1", "a1", by="agent"),
            Cancel("c2", pub_id, by="agent"),
            Cancel("c3", "a1", by="agent", ttl=255),
            Cancel("c4", pub_id, ttl=0),
            Cancel("c5", "a1", by="agent:x" * 60),
        ]
        flood = [Cancel(f"f{n}", "a1" if n % 2 else pub_id, by="agent") for n in range(500)]
        garbage = [
            frame(msgpack.packb(["cancel", "g1", "a1", "agent", -1])),
            frame(msgpack.packb(["cancel", "g2", "a1", "agent", (1 << 64) - 1])),
            frame(msgpack.packb(["cancel", "g3", "a1", "agent", "32"])),
            frame(msgpack.packb(["cancel", "g4", "a1", None, 32])),
            frame(msgpack.packb(["cancel", "g5", "", "agent", 32])),
            frame(msgpack.packb(["cancel", "g6", "x" * 513, "agent", 32])),
            frame(msgpack.packb(["cancel", "g7", "a1", "a" * 513, 32])),
            frame(msgpack.packb(["cancel", "g8", "a1"])),
            frame(msgpack.packb(["cancel"] + ["a1"] * 40)),
        ]
        mallory.send(*valid, *flood, *garbage)
        status = await mallory.status("s")
        acks = {m.ref for m in mallory.got if isinstance(m, Ack)}
        assert acks == {m.id for m in valid + flood}
        assert sum(r.startswith("bad message") for r in refusals(mallory.got)) == len(garbage)
        counters = status["counters"]
        assert counters["retained.cancel_refused"] == len(valid) + len(flood)
        assert "retained.cancelled" not in counters
        assert counters["link.bad_messages"] == len(garbage)
        assert list(broker.router.retention.kept) == [pub_id]
        assert await later_subscriber_gets(broker, "late") == [str(LOAD)]
        await agent.cancel("a1")
        assert broker.router.counters["retained.cancelled"] == 1
        assert await later_subscriber_gets(broker, "later") == []
        assert "mallory" in broker.links
        await mallory.close()
        await agent.close()
        await broker.stop()

    run(scenario())


def test_a_client_sends_retained_copies_and_carries_of_its_own_and_is_refused() -> None:
    """A client may not hand the broker a ``Retained`` (that is between brokers), nor wrap what
    it sends in ``Carry``: each is refused and counted, the publication inside goes nowhere and
    is kept nowhere, even one that names another client's subscription."""

    async def scenario() -> None:
        broker, agent, pub_id = await keeper()
        victim = await Client.connect(broker.uri, "victim")
        stream = await victim.subscribe("[class,eq,ALERT]")
        assert str((await stream.next(timeout=5)).publication) == str(LOAD)  # the retained one
        sub_id = stream.id
        forged = Publication("ALERT", {"job": "forged", "level": 9})
        mallory = await Raw.connect(broker, "client", "mallory")
        mallory.send(
            Retained(sub_id, forged, "B1/agent/99", 1.0, Qos(retain=True)),
            Carry(1, Retained(sub_id, forged, "B1/agent/98", 1.0, Qos(retain=True))),
            Carry(2, Publish("p1", forged, qos=Qos(retain=True))),
            Carry(1 << 62, Subscribe("s1", parse_filter("[class,eq,ALERT]"))),
            frame(msgpack.packb(["carry", -1, ["unsub", "x"]])),
            frame(msgpack.packb(["carry", 3, ["carry", 4, ["unsub", "x"]]])),
            frame(msgpack.packb(["retained", sub_id, ["ALERT", [["job", "x"]]], "i", -5.0, []])),
        )
        status = await mallory.status("s")
        reasons = refusals(mallory.got)
        assert reasons[:4] == [
            "a client cannot send Retained",
            "a client cannot send Carry",
            "a client cannot send Carry",
            "a client cannot send Carry",
        ]
        assert all(r.startswith("bad message") for r in reasons[4:]) and len(reasons) == 7
        assert status["counters"]["link.bad_messages"] == 3
        assert list(broker.router.retention.kept) == [pub_id]
        try:
            extra = await stream.next(timeout=0.5)
        except TimeoutError:
            extra = None
        assert extra is None, f"the victim was sent {extra}"
        assert await later_subscriber_gets(broker, "late") == [str(LOAD)]
        await mallory.close()
        for client in (victim, agent):
            await client.close()
        await broker.stop()

    run(scenario())


def test_a_client_cannot_renew_another_client_s_lease_and_floods_of_renewals_are_counted() -> None:
    """``victim`` (a peer that never renews) holds a subscription leased for 10 s; mallory renews
    it every second, in renewals of up to 10,000 ids (unknown ones, and its own), and sends
    renewals that are not messages (none, 10,001, not strings). The broker's dates are manual
    one, so the lease ends exactly when it should: at 10 s, whatever mallory renewed, counted
    (``leases.expired``) and the victim told; mallory's own lease goes on; every renewal that
    named an id not renewed is counted (``leases.unknown``), every bad frame refused."""

    async def scenario() -> None:
        clock = WallClock()
        broker, agent, _ = await keeper(clock=clock)
        victim = await Raw.connect(broker, "client", "victim")
        victim.send(Subscribe("v", parse_filter("[class,eq,ALERT]"), lease=10))
        await victim.until(lambda got: any(isinstance(m, Ack) and m.ref == "v" for m in got))
        victim_sub = next(m.id for m in victim.got if isinstance(m, Ack) and m.ref == "v")
        mallory = await Raw.connect(broker, "client", "mallory")
        mallory.send(Subscribe("m", parse_filter("[class,eq,ALERT]"), lease=10))
        await mallory.until(lambda got: any(isinstance(m, Ack) and m.ref == "m" for m in got))
        mallory_sub = next(m.id for m in mallory.got if isinstance(m, Ack) and m.ref == "m")
        unknown = tuple(f"B1/nobody/{n}" for n in range(9_998))
        garbage = [
            frame(msgpack.packb(["renew", []])),
            frame(msgpack.packb(["renew", [victim_sub] * 10_001])),
            frame(msgpack.packb(["renew", [1, 2]])),
            frame(msgpack.packb(["renew", victim_sub])),
            frame(msgpack.packb(["renew", None])),
            frame(msgpack.packb(["renew", [""]])),
        ]
        for second in range(1, 10):
            clock.advance(1.0)
            mallory.send(
                Renew((victim_sub,)),
                Renew((victim_sub, mallory_sub, *unknown)),
                Renew(tuple([victim_sub] * 10_000)),
            )
            if second == 1:
                mallory.send(*garbage)
            await mallory.status(f"s{second}")
        clock.advance(1.0)  # 10 s after the victim's subscription
        status = await mallory.status("end")
        counters = status["counters"]
        assert counters["leases.expired"] == 1
        assert counters["leases.unknown"] == 27  # three renewals a second, each naming the victim's
        assert counters["link.bad_messages"] == len(garbage)
        assert victim_sub not in broker.router.tables.prt and mallory_sub in broker.router.tables.prt
        await victim.until(lambda got: Refuse(victim_sub, "lease expired") in got)
        assert "mallory" in broker.links and "victim" in broker.links
        await victim.close()
        await mallory.close()
        await agent.close()
        await broker.stop()

    run(scenario())


def test_pulls_of_every_wrong_kind_are_refused_and_a_valid_one_paces_only_its_own_client() -> None:
    """Pull with a negative, huge, fractional, boolean, text or missing count is a bad frame:
    refused and counted; ``Pull(0)`` holds back mallory's own deliveries, ``Pull(None)`` lets
    them go, huge sums of valid pulls are only credits of its own; a ``Took`` of seqs never
    sent forgets only what was held for mallory. Another subscriber is served throughout."""

    async def scenario() -> None:
        broker, agent, _ = await keeper()
        bystander = await Client.connect(broker.uri, "bystander")
        stream = await bystander.subscribe("[class,eq,ALERT],[job,eq,'news']")
        mallory = await Raw.connect(broker, "client", "mallory")
        mallory.send(Subscribe("m", parse_filter("[class,eq,ALERT],[job,eq,'news']")))
        garbage = [
            frame(msgpack.packb(["pull", -1])),
            frame(msgpack.packb(["pull", MAX_PULL + 1])),
            frame(msgpack.packb(["pull", (1 << 64) - 1])),
            frame(msgpack.packb(["pull", 1.5])),
            frame(msgpack.packb(["pull", True])),
            frame(msgpack.packb(["pull", "5"])),
            frame(msgpack.packb(["pull"])),
            frame(msgpack.packb(["pull", 1, 2])),
            frame(msgpack.packb(["took", -1])),
            frame(msgpack.packb(["took", 1 << 63])),
            frame(msgpack.packb(["took", "1"])),
        ]
        mallory.send(*garbage, Pull(0))
        await mallory.status("s1")
        for n in range(5):
            await agent.publish(Publication("ALERT", {"job": "news", "level": n}))
        got = [(await stream.next(timeout=5)).publication["level"] for _ in range(5)]
        assert got == [0, 1, 2, 3, 4]
        await mallory.status("s2")
        assert not any(isinstance(m, Carry) for m in mallory.got)  # it pulled none
        mallory.send(*[Pull(MAX_PULL)] * 50, Took(10**12), Took(1 << 62))
        await mallory.until(lambda got: sum(isinstance(m, Carry) for m in got) == 5)
        mallory.send(Pull(None))
        status = await mallory.status("s3")
        counters = status["counters"]
        assert counters["link.bad_messages"] == len(garbage)
        assert sum(r.startswith("bad message") for r in refusals(mallory.got)) == len(garbage)
        assert counters["in.Pull"] == 52 and counters["in.Took"] >= 2
        await agent.publish(Publication("ALERT", {"job": "news", "level": 5}))
        assert (await stream.next(timeout=5)).publication["level"] == 5
        await mallory.until(lambda got: sum(isinstance(m, Carry) for m in got) == 6)
        assert "mallory" in broker.links
        await mallory.close()
        for client in (bystander, agent):
            await client.close()
        await broker.stop()

    run(scenario())


async def neighbour_scene() -> tuple[RouterService, Client, str, Client, Any, Raw]:
    """B1 keeping ``agent``'s retained LOAD, ``victim`` subscribed to every ALERT (it has LOAD),
    and ``X``, a peer that says it is a neighbour broker, linked to B1 by hand."""
    broker, agent, pub_id = await keeper()
    victim = await Client.connect(broker.uri, "victim")
    stream = await victim.subscribe("[class,eq,ALERT]")
    assert str((await stream.next(timeout=5)).publication) == str(LOAD)
    x = await Raw.connect(broker, "broker", "X")
    await until(lambda: "X" in broker.router.tables.neighbors, what="X linked")
    return broker, agent, pub_id, victim, stream, x


async def quiet(stream: Any) -> list[str]:
    """What ``stream`` is sent until it is quiet for half a second."""
    got = []
    try:
        while True:
            got.append(str((await stream.next(timeout=0.5)).publication))
    except TimeoutError:
        return got


def test_a_neighbour_s_hostile_qos_frames_are_dropped_counted_or_refused() -> None:
    """From a neighbour broker's link: garbage is refused (``link.bad_messages``); a client's
    messages (``Renew``, ``Pull``) are dropped (``dropped.unexpected``); a cancel whose hops
    are used up is dropped (``dropped.ttl``), one seen before too (``dropped.duplicate``), one
    by someone other than the publisher refused where the publication is kept; a ``Took`` of
    seqs never sent forgets only what was held for that neighbour; a ``Retained`` (of what X
    advertised) for a subscription this broker does not know is dropped (``dropped.retained``).
    The retained
    publication stays, the victim is sent nothing, and the link and the broker go on."""

    async def scenario() -> None:
        broker, agent, pub_id, victim, stream, x = await neighbour_scene()
        x.send(
            Advertise("X/a/1", parse_filter(ALERT)),  # what X's Retained below fits
            Renew(("B1/victim/1",)),
            Pull(0),
            Pull(None),
            Cancel("X/m/c0", "a1", by="agent", ttl=0),
            Cancel("X/m/c1", "a1", by="mallory"),
            Cancel("X/m/c1", "a1", by="agent"),  # a copy of c1: dropped whoever it names
            Carry(1, Cancel("X/m/c2", pub_id, by="mallory", ttl=255)),
            Carry(1, Cancel("X/m/c3", pub_id, by="agent")),  # seq 1 again: taken before
            Retained("B1/nobody/1", LOAD, "X/evil/1", 1.0, Qos(retain=True)),
            Took(10**12),
            frame(msgpack.packb(["cancel", "X/m/c4", "a1", "agent", -1])),
            frame(msgpack.packb(["retained", "B1/victim/1", ["ALERT", []], "i", 1.0, [9]])),
            frame(msgpack.packb(["took", -5])),
            frame(msgpack.packb(["carry", 2, ["renew", ["B1/victim/1"]]])),
        )
        await x.until(lambda got: sum(r.startswith("bad message") for r in refusals(got)) == 4)
        counters = broker.router.counters
        assert counters["dropped.unexpected"] == 3
        assert counters["dropped.ttl"] == 1
        assert counters["dropped.duplicate"] == 1
        assert counters["dropped.resent"] == 1
        assert counters["retained.cancel_refused"] == 2 and counters["retained.cancelled"] == 0
        assert counters["dropped.retained"] == 1
        assert broker.counters["bad_messages"] == 4
        assert list(broker.router.retention.kept) == [pub_id]
        assert await quiet(stream) == []
        assert await later_subscriber_gets(broker, "late") == [str(LOAD)]
        assert "X" in broker.links
        await x.close()
        for client in (victim, agent):
            await client.close()
        await broker.stop()

    run(scenario())


def test_a_neighbour_cannot_slip_an_unadvertised_publication_in_as_a_retained_copy() -> None:
    """A ``Retained`` is an answer to a subscription, routed back along its path: like a
    publication a neighbour forwards, it must fit an advertisement from the neighbour's side.
    One that fits none (nothing is advertised from X's side) is dropped, delivered to no one
    and kept nowhere, so no later subscriber is sent it either."""

    async def scenario() -> None:
        broker, agent, pub_id, victim, stream, x = await neighbour_scene()
        forged = Publication("ALERT", {"job": "forged", "level": 9})
        x.send(
            Publish("X/evil/1", forged, qos=Qos(retain=True)),
            Retained(stream.id, forged, "X/evil/2", 1.0, Qos(retain=True)),
            Carry(1, Retained(stream.id, forged, "B1/agent/77", 1.0, Qos(retain=True, mid="a1"))),
        )
        await until(lambda: broker.router.counters["in.Carry"] >= 1, what="X's frames handled")
        assert broker.router.counters["dropped.nonconforming"] == 3
        assert await quiet(stream) == []
        assert list(broker.router.retention.kept) == [pub_id]
        assert await later_subscriber_gets(broker, "late") == [str(LOAD)]
        await x.close()
        for client in (victim, agent):
            await client.close()
        await broker.stop()

    run(scenario())


async def tls_scene(certs: Path) -> tuple[RouterService, Client, str, Raw]:
    """B1 over TLS keeping ``alice``'s retained LOAD (mid ``a1``, policy originator), and ``X``,
    a peer holding the certificate of broker B2, linked to B1 by hand as that broker."""
    broker = RouterService(uri("B1"), tls=Identity(certs, "B1"), heartbeat=30.0, dead_after=120.0)
    await broker.start()
    alice = await Client.connect(broker.uri, "agent", tls=Identity(certs, "alice"))
    await alice.advertise(ALERT)
    pub_id = await alice.publish(LOAD, Qos(retain=True, mid="a1"))
    x = await Raw.connect(broker, "broker", "B2", tls=Identity(certs, "B2"))
    await until(lambda: "B2" in broker.router.tables.neighbors, what="X linked")
    return broker, alice, pub_id, x


async def later_over_tls(broker: RouterService, certs: Path, name: str) -> list[str]:
    """What a client that subscribes now to every ALERT is sent within a short while (over TLS,
    as ``operator``)."""
    async with await Client.connect(broker.uri, name, tls=Identity(certs, "operator")) as client:
        return await quiet(await client.subscribe("[class,eq,ALERT]"))


def test_a_neighbour_cannot_cancel_a_retained_publication_in_its_publisher_s_name(certs: Path) -> None:
    """With TLS, who cancels is who signed the cancel, checked by every broker: X, a neighbour
    broker gone bad, names alice as the canceller of her retained publication (policy
    originator), unsigned, bare and in custody; signs a cancel with its own key; replays a
    cancel alice really signed an hour before she published; and moves alice's signature to a
    cancel of another id. None is taken for alice's (the unverified counted), the publication
    stays, and a later subscriber gets it; then alice cancels it herself, and it is gone."""

    async def scenario() -> None:
        broker, alice, pub_id, x = await tls_scene(certs)
        own = signed(Identity(certs, "B2"), "X/m/c2", "a1", time.time())
        replayed = signed(Identity(certs, "alice"), "B1/agent/c3", "a1", time.time() - 3600)
        moved = replace(signed(Identity(certs, "alice"), "X/m/c4", "other", time.time()), mid="a1")
        x.send(
            Cancel("X/m/c1", "a1", by="alice"),
            own,
            replayed,
            moved,
            Carry(1, Cancel("X/m/c5", pub_id, by="alice")),
        )
        counters = broker.router.counters
        await until(lambda: counters["in.Cancel"] == 4 and counters["in.Carry"] == 1, what="X's cancels")
        try:
            assert broker.counters["cancel_unverified"] == 3  # unsigned twice, and the moved signature
            assert broker.router.counters["retained.cancel_refused"] == 5
            assert "retained.cancelled" not in broker.router.counters
            assert list(broker.router.retention.kept) == [pub_id]
            assert await later_over_tls(broker, certs, "late") == [str(LOAD)]
            await alice.cancel("a1")
            assert broker.router.counters["retained.cancelled"] == 1
            assert await later_over_tls(broker, certs, "later") == []
            assert "B2" in broker.links
        finally:
            await x.close()
            await alice.close()
            await broker.stop()

    run(scenario())


def test_a_client_s_cancel_over_tls_must_be_its_own_signed_now(certs: Path) -> None:
    """Over TLS a client's cancel is refused at its broker, and goes no further, unless its own
    identity signed it and not too far ahead of the broker's clock: unsigned, signed by another
    identity (the operator's key in alice's hands), signed an hour ahead; each refused with the
    reason and counted (``link.cancel_refused``); the publication stays."""

    async def scenario() -> None:
        broker, alice, pub_id, x = await tls_scene(certs)
        mallory = await Raw.connect(broker, "client", "alice:m", tls=Identity(certs, "alice"))
        now = time.time()
        mallory.send(
            Cancel("c1", "a1", by="alice"),
            signed(Identity(certs, "operator"), "c2", "a1", now),
            signed(Identity(certs, "alice"), "c3", "a1", now + 3600),
        )
        status = await mallory.status("s")
        try:
            assert refusals(mallory.got) == [
                "the cancel is not signed",
                "the cancel is signed by operator, not by this client's identity alice",
                "the cancel is dated 3600 s ahead of this broker's clock",
            ]
            assert status["counters"]["link.cancel_refused"] == 3
            assert "in.Cancel" not in broker.router.counters  # so it went on to no neighbour
            assert list(broker.router.retention.kept) == [pub_id]
        finally:
            await mallory.close()
            await x.close()
            await alice.close()
            await broker.stop()

    run(scenario())


def test_retained_publications_with_hostile_ttls_and_expiries_are_refused_or_bounded() -> None:
    """``agent`` publishes retained publications whose quality of service is out of bounds:
    a ttl negative, zero, not a number, infinite or beyond ten years, a priority out of range,
    a qos that is not 8 fields (bad frames, refused and counted); an expiry of its own (refused:
    the broker sets it); ten years exactly (kept, expiring in ten years by the broker's clock).
    Nothing out of bounds is kept, and the broker serves on."""

    def pub(ref: str, qos: list[Any]) -> bytes:
        return frame(
            msgpack.packb(["pub", ref, ["ALERT", [["job", "x"], ["level", 1]]], 32, True, None, qos])
        )

    def qos(priority: Any = 4, ttl: Any = None, expires: Any = None) -> list[Any]:
        return [priority, ttl, expires, True, True, "none", "", "originator"]

    async def scenario() -> None:
        broker, agent, pub_id = await keeper()
        mallory = await Raw.connect(broker, "client", "agent:2")  # the same identity as agent
        mallory.send(Advertise("a", parse_filter(ALERT)))
        garbage = [
            pub("g1", qos(ttl=-1)),
            pub("g2", qos(ttl=0)),
            pub("g3", qos(ttl=float("nan"))),
            pub("g4", qos(ttl=float("inf"))),
            pub("g5", qos(ttl=MAX_TTL * 2)),
            pub("g6", qos(ttl=True)),
            pub("g7", qos(priority=10)),
            pub("g8", qos(priority=-1)),
            pub("g9", qos(expires=-5.0)),
            pub("g10", qos()[:7]),
            pub("g11", qos(ttl="30")),
        ]
        mallory.send(*garbage, pub("own", qos(expires=1e10)), pub("ten", qos(ttl=MAX_TTL)))
        await mallory.until(lambda got: any(isinstance(m, Ack) and m.ref == "ten" for m in got))
        reasons = refusals(mallory.got)
        assert sum(r.startswith("bad message") for r in reasons) == len(garbage)
        assert "a client gives a ttl: the broker sets when it expires" in reasons
        assert broker.counters["bad_messages"] == len(garbage)
        kept = broker.router.retention.kept
        assert len(kept) == 2 and pub_id in kept
        (ten,) = (k for i, k in kept.items() if i != pub_id)
        assert ten.qos.expires == pytest.approx(ten.time + MAX_TTL)
        assert await later_subscriber_gets(broker, "late") == [str(LOAD), str(ten.publication)]
        await mallory.close()
        await agent.close()
        await broker.stop()

    run(scenario())
