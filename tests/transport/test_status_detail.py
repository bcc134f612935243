"""A broker's status detail (its tables, who is away, where its neighbours are) is for roles
deployer and operator; any other identity gets the counts and counters, and is told so. A plain
developer link (no certificate, no role) sees everything, as before."""

from __future__ import annotations

import shutil
from pathlib import Path

import wfm.certs
from broker.client import Client
from broker.routing.router import WITHHELD
from broker.transport.server import RouterService
from broker.transport.tls import Identity
from tests.transport.harness import run, until, uri
from tests.transport.test_tls import ADV, tls_broker

DETAIL = {"srt", "prt", "composites", "away", "epoch", "neighbor_uris"}
COUNTS = {"id", "uri", "neighbors", "clients", "subscriptions", "advertisements", "counters"}


def test_only_deployers_and_operators_see_a_brokers_detail(certs: Path, tmp_path: Path) -> None:
    directory = tmp_path / "certs"
    shutil.copytree(certs, directory)
    for name, role in (("ops", "operator"), ("cron", "scheduler"), ("history", "historian")):
        wfm.certs.issue(directory, name, role)

    async def scenario() -> None:
        b2 = await tls_broker(directory, "B2")
        b1 = await tls_broker(directory, "B1", neighbors=[b2.uri])
        await until(lambda: "B2" in b1.links, what="linked")
        async with await Client.connect(b1.uri, "pub", tls=Identity(directory, "alice")) as alice:
            await alice.advertise(ADV)
            for name in ("alice", "monitor", "cron", "history"):
                async with await Client.connect(b1.uri, tls=Identity(directory, name)) as client:
                    status = await client.status(detail=True)
                assert not DETAIL & status.keys(), name
                assert status.keys() >= COUNTS and status["withheld"] == WITHHELD, name
                assert status["advertisements"] == 1 and status["neighbors"] == ["B2"]
            for name in ("deployer", "ops"):
                async with await Client.connect(b1.uri, tls=Identity(directory, name)) as client:
                    status = await client.status(detail=True)
                assert status.keys() >= DETAIL and "withheld" not in status, name
                assert status["neighbor_uris"] == {"B2": str(b2.uri)}
                assert [e["filter"] for e in status["srt"]["entries"]] == [ADV]  # type: ignore[index]
        await b1.stop()
        await b2.stop()

    run(scenario())


def test_a_plain_link_without_a_role_still_sees_the_detail() -> None:
    async def scenario() -> None:
        b = RouterService(uri("B1"))
        await b.start()
        async with await Client.connect(b.uri) as client:
            status = await client.status(detail=True)
        assert status.keys() >= DETAIL and "withheld" not in status
        await b.stop()

    run(scenario())
