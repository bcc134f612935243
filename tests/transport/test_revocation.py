"""Revocation: ``wfm certs revoke`` writes a CRL signed by the CA; running brokers refuse the
identity at its next handshake and close the links it has, without a restart; ``Revocations``
answers other processes (the agents) and never trusts a list the CA did not sign."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509

import wfm.certs
from broker.client import Client, ConnectError
from broker.client.reconnect import ConnectionEvent
from broker.clock import ManualClock
from broker.errors import LinkClosed, LocalError
from broker.messages import Hello, Ping, Pong, Refuse
from broker.transport.backoff import Backoff
from broker.transport.link import Link
from broker.transport.revocation import CRL, RevocationError, Revocations
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI
from tests.processes import WFM, brokers, status, wait_for
from tests.transport.harness import run


@pytest.fixture
def directory(certs: Path, tmp_path: Path) -> Path:
    """A copy of the session's CA and identities, to revoke some of."""
    copy = tmp_path / "certs"
    shutil.copytree(certs, copy)
    return copy


def certificate(directory: Path, name: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate((directory / f"{name}.crt").read_bytes())


def revoke(directory: Path, name: str) -> str:
    """``wfm certs revoke DIR NAME`` as an operator runs it: its output."""
    done = subprocess.run(
        [WFM, "certs", "revoke", str(directory), name], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def revoking(directory: Path, name: str) -> str:
    """``revoke`` without stopping the event loop (its clients must answer their pings)."""
    process = await asyncio.create_subprocess_exec(
        WFM, "certs", "revoke", str(directory), name, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err
    return out.decode()


async def linked_as(address: BrokerURI, identity: Identity, client: str) -> asyncio.Task[list[object]]:
    """A raw client link to ``address`` as ``identity``, past the handshake, answering pings: a
    task that ends with what the broker sent when the broker closes the link (its last words)."""
    reader, writer = await asyncio.open_connection(address.host, address.port, ssl=identity.client)
    link = Link(reader, writer)
    link.send(Hello("client", client))
    assert isinstance((await link.receive())[0], Hello)

    async def listen() -> list[object]:
        said: list[object] = []
        try:
            while True:
                for item in await link.receive():
                    if isinstance(item, Ping):
                        link.send(Pong())
                    else:
                        said.append(item)
        except LinkClosed:
            pass
        await link.wait_closed()
        return said

    return asyncio.get_running_loop().create_task(listen())


def test_a_running_broker_refuses_a_revoked_client_and_cuts_its_link(directory: Path) -> None:
    """alice is linked to a running broker process; after ``wfm certs revoke DIR alice`` the broker,
    not restarted, closes her link saying why, and refuses her next handshake; a revoked broker
    loses its link to a neighbour too. Counted as ``link.revoked_refused``."""
    alice = Identity(directory, "alice")
    deployer = Identity(directory, "deployer")

    async def scenario(b1: BrokerURI) -> None:
        link = await linked_as(b1, alice, "alice")
        # a client that stays, and tries once to come back (refused as revoked): a reconnection
        # still in its TLS handshake when the client closes would be a peer hanging up, which the
        # broker cannot tell from one that does not trust it (``tls_refused``), so the client is
        # closed only once it gave up (its ``closed`` event)
        once = Backoff(attempts=1)
        gave_up = asyncio.Event()

        def event(happened: ConnectionEvent) -> None:
            if happened.kind == "closed":
                gave_up.set()

        async with await Client.connect(
            b1, "before", tls=alice, backoff=once, timeout=15, on_event=event
        ) as before:
            assert "revoked alice (serial" in await revoking(directory, "alice")
            said = await asyncio.wait_for(link, 10)
            assert any(isinstance(s, Refuse) and s.reason == "certificate alice is revoked" for s in said), (
                said
            )
            with pytest.raises(ConnectError, match="did not accept our certificate"):
                # a timeout past the broker's own (5 s), so that a loaded machine lets the broker finish the
                # handshake and say why it refused (a client that gives up first is a plain TLS failure)
                await Client.connect(b1, "after", tls=Identity(directory, "alice"), timeout=15)
            assert before.id == "alice:before"
            await asyncio.wait_for(gave_up.wait(), 30)
        async with await Client.connect(b1, tls=deployer) as ops:  # everyone else is still served
            await ops.status()

    with brokers({"B1": [], "B2": ["B1"]}, certs=directory) as uris:
        run(scenario(uris["B1"]), timeout=60)
        counters = status(uris["B1"], deployer)["counters"]
        assert isinstance(counters, dict)
        assert counters["link.revoked_refused"] >= 3, counters  # two links cut, handshakes after
        assert "link.tls_refused" not in counters, counters
        assert "B2" in status(uris["B1"], deployer)["neighbors"]  # type: ignore[operator]
        revoke(directory, "B2")
        wait_for(lambda: status(uris["B1"], deployer)["neighbors"] == [], "B2 cut off", timeout=10)
        assert status(uris["B2"], Identity(directory, "monitor")) == {}  # clients refuse it too
        wait_for(lambda: status(uris["B2"], deployer) == {}, "a running client refusing B2", timeout=5)


def test_revocations_answers_for_any_certificate_and_follows_the_file(directory: Path) -> None:
    clock = ManualClock()
    revocations = Revocations(directory, recheck=1.0, clock=clock)
    alice, monitor = certificate(directory, "alice"), certificate(directory, "monitor")
    assert revocations.current is None and not revocations.revoked(alice)  # no list: nothing revoked
    wfm.certs.revoke(directory, "alice")
    assert not revocations.revoked(alice)  # looked less than a second ago
    clock.advance(1.0)
    assert revocations.revoked(alice) and not revocations.revoked(monitor)
    assert revocations.current is not None and [e.name for e in revocations.current.entries] == ["alice"]
    assert Revocations(directory).revoked(alice)  # a new process reads it at start


def test_a_list_the_ca_did_not_sign_is_refused_and_logged(
    directory: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An attacker's CA (or a stale list of an older CA) cannot un-revoke anyone nor revoke
    anyone: the list is refused in one logged line, and the one in use stays."""
    wfm.certs.revoke(directory, "alice")
    revocations = Revocations(directory)
    forged = tmp_path / "forged"
    wfm.certs.init(forged)
    wfm.certs.issue(forged, "x", "client")
    wfm.certs.revoke(forged, "x")  # a valid list, of another CA, that revokes no one of ours
    shutil.copy(forged / CRL, directory / CRL)
    with caplog.at_level(logging.ERROR, "broker.transport.revocation"):
        assert not revocations.check()
        assert not revocations.check()  # the same file: logged once
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"{directory / CRL} is not signed by the CA: refused") and "\n" not in line
    assert revocations.revoked(certificate(directory, "alice"))
    assert revocations.problem is not None
    with pytest.raises(RevocationError, match="is not signed by the CA"):
        Revocations(directory)  # a process does not start on a list it cannot trust
    with pytest.raises(LocalError, match=r"TLS identity monitor: .* is not signed by the CA"):
        Identity(directory, "monitor")


def test_an_older_or_vanished_list_does_not_bring_back_a_revoked_identity(directory: Path) -> None:
    wfm.certs.revoke(directory, "alice")
    older = (directory / CRL).read_bytes()
    wfm.certs.revoke(directory, "monitor")
    revocations = Revocations(directory)
    alice, monitor = certificate(directory, "alice"), certificate(directory, "monitor")
    (directory / CRL).write_bytes(older)  # signed by the CA, but number 1 < 2
    os.utime(directory / CRL, ns=(1, 1))
    assert not revocations.check() and revocations.revoked(monitor)
    assert revocations.problem is not None and "older than the list in use" in revocations.problem
    (directory / CRL).unlink()
    assert not revocations.check() and revocations.revoked(alice) and revocations.revoked(monitor)


def test_an_identity_refreshes_its_contexts_when_the_list_changes(directory: Path) -> None:
    identity = Identity(directory, "B1")
    before = identity.server
    assert not identity.refresh(now=True) and identity.server is before
    wfm.certs.revoke(directory, "alice")
    assert identity.refresh(now=True) and identity.server is not before
