"""The event loop a process runs on (``WFM_LOOP``, :mod:`broker.loops`): the choice and its errors,
and the product on uvloop as real processes: TLS links and clients, and a workflow run by agents
whose brokers and agents all run on it (the rest of the suite runs them on the standard loop)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker import loops
from broker.client import Client
from broker.errors import LocalError
from broker.transport.tls import Identity
from tests.agents.test_processes import HOMES, LINE, MONDAY, WORKFLOWS, Overlay
from tests.processes import WFM, brokers, quiet, status
from tests.transport.harness import free_port, run

pytest.importorskip("uvloop")


def test_the_loop_is_the_standard_one_unless_wfm_loop_names_another() -> None:
    assert loops.chosen({}) == loops.chosen({"WFM_LOOP": " "}) == "asyncio"
    assert loops.chosen({"WFM_LOOP": "uvloop"}) == "uvloop"
    with pytest.raises(LocalError, match=r"^WFM_LOOP='trio': the event loop is one of asyncio, uvloop$"):
        loops.chosen({"WFM_LOOP": "trio"})
    assert loops.run(_loop_module(), loops.loop_factory("uvloop")) == "uvloop"
    assert loops.run(_loop_module(), loops.loop_factory("asyncio")) == "asyncio"


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]


def test_a_broker_asked_for_a_loop_it_does_not_know_says_so_in_one_line() -> None:
    done = subprocess.run(
        [WFM, "broker", "--uri", f"socket://127.0.0.1:{free_port()}/B1", "--memory"],
        env={**os.environ, "WFM_LOOP": "twisted"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr == "wfm: error: WFM_LOOP='twisted': the event loop is one of asyncio, uvloop\n"


@pytest.fixture
def on_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every process the test starts runs on uvloop."""
    monkeypatch.setenv("WFM_LOOP", "uvloop")


@pytest.mark.usefixtures("on_uvloop")
def test_tls_brokers_and_clients_on_uvloop(certs: Path) -> None:
    """Mutual TLS between brokers and with clients (asyncio's start_tls on uvloop's transports),
    and a publication across the link."""
    alice = Identity(certs, "alice")
    with brokers({"B1": [], "B2": ["B1"]}, certs=certs) as uris:
        for name in ("B1", "B2"):
            report = status(uris[name], Identity(certs, "deployer"))
            assert report["loop"] == "uvloop", report

        async def scenario() -> None:
            async with (
                await Client.connect(uris["B2"], "sub", tls=alice) as subscriber,
                await Client.connect(uris["B1"], "pub", tls=alice) as publisher,
            ):
                stream = await subscriber.subscribe("[class,eq,stock]")
                await publisher.advertise("[class,eq,stock],[price,>,0]")
                while (await publisher.status())["subscriptions"] == 0:  # type: ignore[operator]
                    await asyncio.sleep(0.05)
                await publisher.publish("[class,stock],[price,1]")
                assert (await stream.next(timeout=10)).publication["price"] == 1

        run(scenario(), timeout=60)


@pytest.fixture
def uv_overlay(on_uvloop: None, tmp_path: Path) -> Iterator[Overlay]:
    with brokers(LINE, heartbeat=1.0) as uris:
        world = Overlay(uris, tmp_path)
        try:
            for name in HOMES:
                world.start(name, "--max-jobs", "8")
            quiet(uris)
            yield world
        finally:
            world.stop()


def test_a_workflow_on_uvloop_brokers_and_agents(uv_overlay: Overlay) -> None:
    assert {status(uri)["loop"] for uri in uv_overlay.uris.values()} == {"uvloop"}
    uv_overlay.deploy(WORKFLOWS / "payroll.xml")
    quiet(uv_overlay.uris)
    uv_overlay.trigger("PAYROLL", ["mon"], MONDAY)
    uv_overlay.wait_end("PAYROLL", ["mon"])
    assert uv_overlay.states("PAYROLL", "mon")["APPL_END"] == "SUCCESS"
    assert uv_overlay.records("PAYROLL", "mon") == {"JobA": 1, "JobB": 1, "JobD": 1}
