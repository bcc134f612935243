"""Mutual TLS on the broker's links, attacked over real loopback sockets: each attack is refused
with a clear reason, counted and logged once, and the broker keeps serving a good client."""

from __future__ import annotations

import asyncio
import datetime
import logging
import shutil
from pathlib import Path

import pytest

import wfm.certs
from broker.client import Client, ConnectError, RefusedError
from broker.errors import LocalError
from broker.messages import Hello, LinkUp, Refuse
from broker.transport.link import Link
from broker.transport.server import RouterService
from broker.transport.tls import Identity, client_id
from broker.transport.uri import BrokerURI
from tests.transport.harness import run, until, uri
from wfm.security.acl import load_policy

ADV = "[class,eq,stock],[price,<,100]"


async def tls_broker(certs: Path, name: str = "B1", **options: object) -> RouterService:
    b = RouterService(uri(name), tls=Identity(certs, name), **options)  # type: ignore[arg-type]
    await b.start()
    return b


async def still_serving(b: RouterService, certs: Path) -> None:
    """A good client publishes to a good subscriber through ``b``."""
    alice = Identity(certs, "alice")
    async with (
        await Client.connect(b.uri, "pub", tls=alice) as pub,
        await Client.connect(b.uri, "sub", tls=alice) as sub,
    ):
        await pub.advertise(ADV)
        s = await sub.subscribe(ADV)
        await pub.publish("[class,stock],[price,3]")
        assert (await s.next(timeout=5)).publication["price"] == 3


async def hello_over_tls(address: BrokerURI, identity: Identity, hello: Hello) -> object:
    """Say ``hello`` over a TLS link made with ``identity``; the broker's first answer."""
    reader, writer = await asyncio.open_connection(address.host, address.port, ssl=identity.client)
    link = Link(reader, writer)
    link.send(hello)
    try:
        return (await link.receive())[0]
    finally:
        await link.wait_closed()


def other_ca(tmp_path: Path, trusting: Path) -> Path:
    """Identities alice and B1 from a CA of an attacker's own, who knows (trusts) the real CA."""
    directory = tmp_path / "other"
    wfm.certs.init(directory)
    wfm.certs.issue(directory, "alice", "client")
    wfm.certs.issue(directory, "B1", "broker")
    shutil.copy(trusting / "ca.crt", directory / "ca.crt")  # a certificate is public
    return directory


def test_clients_and_brokers_link_over_tls_with_their_certificates(certs: Path) -> None:
    async def scenario() -> None:
        b1 = await tls_broker(certs)
        b2 = RouterService(uri("B2"), [b1.uri], tls=Identity(certs, "B2"))
        await b2.start()
        await until(lambda: "B2" in b1.links and "B1" in b2.links, what="linked over TLS")
        seen: list[tuple[str, LinkUp]] = []
        feed = b1.driver.feed
        b1.driver.feed = lambda message, hop: (  # type: ignore[method-assign]
            seen.append((hop, message)) if isinstance(message, LinkUp) else None,
            feed(message, hop),
        )
        alice = Identity(certs, "alice")
        async with (
            await Client.connect(b2.uri, "pub", tls=alice) as pub,
            await Client.connect(b1.uri, tls=Identity(certs, "monitor")) as sub,
        ):
            assert pub.id == "alice:pub" and sub.id.startswith("monitor:")
            await pub.advertise(ADV)
            s = await sub.subscribe(ADV)
            await until(lambda: b2.router.status()["subscriptions"] == 1, what="subscription routed")
            await pub.publish("[class,stock],[price,5]")
            assert (await s.next(timeout=5)).publication["price"] == 5
        assert [(hop, up.identity, up.role) for hop, up in seen] == [(sub.id, "monitor", "monitor")]
        await b2.stop()
        await b1.stop()

    run(scenario())


def test_a_peer_without_a_broker_certificate_cannot_link_as_a_broker(
    certs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        b = await tls_broker(certs)
        alice = Identity(certs, "alice")
        for _ in range(3):
            answer = await hello_over_tls(b.uri, alice, Hello("broker", "B9"))
            assert isinstance(answer, Refuse)
            assert answer.reason == (
                "alice (role client) may not link as a broker: only a broker certificate may"
            )
        # a broker certificate may link only under its own name
        answer = await hello_over_tls(b.uri, Identity(certs, "B2"), Hello("broker", "B3"))
        assert isinstance(answer, Refuse)
        assert answer.reason == "broker certificate B2 may not link as broker 'B3'"
        await still_serving(b, certs)
        assert b.status()["counters"]["link.identity_refused"] == 4
        assert "B9" not in b.links and "B3" not in b.links
        await b.stop()

    with caplog.at_level(logging.WARNING, "broker"):
        run(scenario())
    refusals = [r.getMessage() for r in caplog.records if "may not link as a broker" in r.getMessage()]
    assert len(refusals) == 1, refusals  # logged once per peer address


def test_a_client_id_must_be_its_certificate_name(certs: Path) -> None:
    async def scenario() -> None:
        b = await tls_broker(certs)
        alice = Identity(certs, "alice")
        answer = await hello_over_tls(b.uri, alice, Hello("client", "mallory"))
        assert isinstance(answer, Refuse)
        assert answer.reason == (
            "certificate alice (role client) may not be client 'mallory': only alice or alice:SUFFIX"
        )
        answer = await hello_over_tls(b.uri, alice, Hello("client", "alicex"))  # a prefix is not the name
        assert isinstance(answer, Refuse) and "may not be client 'alicex'" in answer.reason
        await still_serving(b, certs)
        assert b.status()["counters"]["link.identity_refused"] == 2
        await b.stop()

    run(scenario())


def test_a_client_certificate_from_another_ca_is_refused(
    certs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        b = await tls_broker(certs)
        with pytest.raises(ConnectError, match="did not accept our certificate"):
            await Client.connect(b.uri, tls=Identity(other_ca(tmp_path, certs), "alice"), timeout=3)
        await until(lambda: b.counters["tls_refused"] == 1, what="counted")
        await still_serving(b, certs)
        await b.stop()

    with caplog.at_level(logging.WARNING, "broker"):
        run(scenario())
    (refusal,) = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refusal.endswith(
        "TLS handshake failed: certificate verify failed: unable to get local issuer certificate"
    )


def test_a_broker_certificate_from_another_ca_is_refused_by_the_client(certs: Path, tmp_path: Path) -> None:
    async def scenario() -> None:
        b = RouterService(uri("B1"), tls=Identity(other_ca(tmp_path, certs), "B1"))
        await b.start()
        with pytest.raises(ConnectError, match="certificate verify failed"):
            await Client.connect(b.uri, tls=Identity(certs, "alice"), timeout=3)
        await b.stop()

    run(scenario())


def test_an_expired_certificate_is_refused(
    certs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "certs"
    shutil.copytree(certs, directory)
    year_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=365)
    monkeypatch.setattr(wfm.certs, "_now", lambda: year_ago)
    wfm.certs.issue(directory, "old", "client", days=30)

    async def scenario() -> None:
        b = await tls_broker(directory)
        with pytest.raises(ConnectError, match="did not accept our certificate"):
            await Client.connect(b.uri, tls=Identity(directory, "old"), timeout=3)
        await until(lambda: b.counters["tls_refused"] == 1, what="counted")
        await still_serving(b, certs)
        await b.stop()

    with caplog.at_level(logging.WARNING, "broker"):
        run(scenario())
    assert any("certificate has expired" in r.getMessage() for r in caplog.records)


def test_a_plain_tcp_connection_to_a_tls_broker_fails_cleanly(
    certs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        b = await tls_broker(certs)
        for _ in range(3):
            with pytest.raises(ConnectError, match="requires TLS closes plain connections"):
                await Client.connect(b.uri, "plain", timeout=3)
        await until(lambda: b.counters["tls_refused"] == 3, what="counted")
        await still_serving(b, certs)
        assert b.status()["counters"]["link.tls_refused"] == 3
        await b.stop()

    with caplog.at_level(logging.WARNING, "broker"):
        run(scenario())
    refusals = [r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage()]
    assert len(refusals) == 1, refusals


def test_a_broker_without_tls_listens_on_loopback_only(certs: Path) -> None:
    with pytest.raises(LocalError, match=r"refusing to listen on 0\.0\.0\.0 without TLS.*--insecure"):
        RouterService(BrokerURI("0.0.0.0", 7000, "B1"))
    RouterService(BrokerURI("0.0.0.0", 7000, "B1"), insecure=True)
    RouterService(BrokerURI("0.0.0.0", 7000, "B1"), tls=Identity(certs, "B1"))
    RouterService(BrokerURI("localhost", 7000, "B1"))
    with pytest.raises(LocalError, match="needs an identity of its own name, not B2"):
        RouterService(BrokerURI("127.0.0.1", 7000, "B1"), tls=Identity(certs, "B2"))


def test_client_ids_are_scoped_by_the_identity() -> None:
    assert client_id("alice", None) == "alice"
    assert client_id("alice", "alice") == "alice"
    assert client_id("alice", "alice:x") == "alice:x"
    assert client_id("alice", "mallory") == "alice:mallory"
    assert client_id("alice", "alicex") == "alice:alicex"


def test_a_client_outside_its_acl_is_refused_naming_the_rule_and_the_broker_serves_on(certs: Path) -> None:
    """mallory has a client certificate from the right CA: she may not advertise or publish
    AGENT_CTL, nor subscribe to agents' envelopes; each refusal names the rule, is counted, and
    alice goes on publishing and subscribing."""

    async def scenario() -> None:
        b = await tls_broker(certs, policy=load_policy())
        alice = Identity(certs, "alice")  # role client, like mallory's would be
        async with await Client.connect(b.uri, "mallory", tls=alice) as mallory:
            with pytest.raises(RefusedError, match=r"access denied: alice \(client\) may not advertise"):
                await mallory.advertise("[class,eq,AGENT_CTL],[agentname,isPresent,'']")
            with pytest.raises(RefusedError, match=r"roles\.client\.deny_subscribe"):
                await mallory.subscribe("[class,eq,AGENT_CTL],[agentname,eq,a1]")
            with pytest.raises(RefusedError, match=r"roles\.client\.deny_publish"):
                await mallory.advertise("[class,eq,JOBSTATUS],[agentname,isPresent,'']")
        assert b.status()["counters"]["refused.acl"] == 3  # type: ignore[index]
        await still_serving(b, certs)
        await b.stop()

    run(scenario())
