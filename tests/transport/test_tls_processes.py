"""The TLS attacks again, against a real ``wfm broker --tls`` process (the issue asks for real
processes): each refused with a clear reason and counted in ``wfm status``, and the broker serves
a good client after all of them."""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path

import pytest

import wfm.certs
from broker.client import Client, ConnectError, RefusedError
from broker.messages import Hello, Refuse
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI
from tests.processes import brokers
from tests.transport.harness import run
from tests.transport.test_tls import ADV, hello_over_tls, other_ca


def test_every_tls_attack_on_a_broker_process_is_refused_and_it_serves_on(
    certs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "certs"
    shutil.copytree(certs, directory)
    with monkeypatch.context() as past:
        past.setattr(
            wfm.certs, "_now", lambda: datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=365)
        )
        wfm.certs.issue(directory, "old", "client", days=30)
    alice = Identity(directory, "alice")

    async def attacks(b1: BrokerURI) -> dict[str, object]:
        answer = await hello_over_tls(b1, alice, Hello("broker", "B9"))  # a client certificate as a broker
        assert isinstance(answer, Refuse) and "may not link as a broker" in answer.reason
        with pytest.raises(ConnectError, match="did not accept our certificate"):  # another CA
            await Client.connect(b1, tls=Identity(other_ca(tmp_path, directory), "alice"), timeout=3)
        with pytest.raises(ConnectError, match="did not accept our certificate"):  # expired
            await Client.connect(b1, tls=Identity(directory, "old"), timeout=3)
        with pytest.raises(ConnectError, match="closes plain connections"):  # plain TCP
            await Client.connect(b1, "plain", timeout=3)
        async with await Client.connect(b1, tls=alice) as mallory:  # outside the ACL
            with pytest.raises(RefusedError, match=r"access denied: alice \(client\)"):
                await mallory.advertise("[class,eq,AGENT_CTL],[agentname,isPresent,'']")
        async with (
            await Client.connect(b1, "pub", tls=alice) as pub,
            await Client.connect(b1, "sub", tls=alice) as sub,
        ):
            await pub.advertise(ADV)
            s = await sub.subscribe(ADV)
            await pub.publish("[class,stock],[price,3]")
            assert (await s.next(timeout=5)).publication["price"] == 3
            return await sub.status()

    with brokers({"B1": []}, certs=directory) as uris:
        status = run(attacks(uris["B1"]), timeout=60)
    counters = status["counters"]
    assert isinstance(counters, dict)
    assert counters["link.identity_refused"] == 1 and counters["refused.acl"] == 1
    assert counters["link.tls_refused"] == 3  # another CA, expired, plain
