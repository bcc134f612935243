"""The agent's adapter: deliveries that arrive before their subscription's id (without a broker),
and its outbox across a restart (with one, in this process)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

from agents.envelope import Registration
from agents.service import AgentService
from agents.state import Agent, Delivered
from broker.client import Backoff, Client, Delivery
from broker.language import parse_filter, parse_publication
from broker.transport.server import RouterService
from broker.transport.uri import BrokerURI
from tests.agents.test_state import PLAN, install
from tests.transport.harness import run, until, uri
from workflow_messages import job_status

FILTER = parse_filter("[class,eq,JOBSTATUS],[jobname,eq,A]")
FIRST, SECOND = (
    parse_publication("[class,JOBSTATUS],[jobname,A],[n,1]"),
    parse_publication("[class,JOBSTATUS],[jobname,A],[n,2]"),
)


class RacingClient:
    """Its subscription's first delivery is read before ``subscribe`` returns, as when the ack and
    the delivery come in one read and the reader task runs first."""

    def __init__(self) -> None:
        self.acked = asyncio.Event()
        self.read = asyncio.Event()

    async def subscribe(self, subscription: object, own_queue: bool, name: str) -> SimpleNamespace:
        await self.read.wait()  # the reader has taken the delivery before this request returns
        return SimpleNamespace(id="B1/agentA/7")

    async def __aiter__(self) -> AsyncIterator[Delivery]:
        yield Delivery("B1/agentA/7", FIRST, id="id1")
        self.read.set()
        await self.acked.wait()
        yield Delivery("B1/agentA/7", SECOND, id="id2")


def test_a_delivery_read_before_its_subscription_id_is_known_is_kept_in_order(tmp_path: Path) -> None:
    service = AgentService(Agent("agentA"), BrokerURI("127.0.0.1", 1, "B1"), tmp_path, tmp_path)
    client = RacingClient()

    async def scenario() -> None:
        reader = asyncio.create_task(service._read(client))  # type: ignore[arg-type]
        await service._issue(client, "key", Registration("SUBSCRIBE", FILTER))  # type: ignore[arg-type]
        client.acked.set()
        await reader

    asyncio.run(scenario())
    events = [service.events.get_nowait() for _ in range(service.events.qsize())]
    assert events == [Delivered("key", (FIRST,)), Delivered("key", (SECOND,))]
    service.journal.close()


def test_a_restarted_agent_resends_a_status_that_was_never_acknowledged(tmp_path: Path) -> None:
    """The agent publishes a JOBSTATUS while its broker is down and stops before the broker is
    back: the next run with the same state dir publishes it, under the id it had."""
    status = job_status("PAYROLL", "JobB", "g1", "SUCCESS", "", version=PLAN.version, agent="agentB")

    def agent_b() -> Agent:
        agent = Agent("agentB")
        install(agent)
        return agent

    async def scenario() -> None:
        b = RouterService(uri("B1"))
        await b.start()
        watch = await Client.connect(b.uri, "watch", backoff=Backoff(first=0.05, cap=0.2, attempts=None))
        statuses = await watch.subscribe("[class,eq,JOBSTATUS],[jobname,eq,JobB]")
        first = AgentService(agent_b(), b.uri, tmp_path / "agentB", tmp_path)
        running = asyncio.create_task(first.run())
        await until(lambda: len(first.issued) == len(first.agent.wanted) > 0, what="the agent registered")
        assert first.client is not None
        stamp = first.client._stamp
        await b.stop()
        await until(lambda: first.client is not None and not first.client.connected, what="the link lost")
        first._publish(status)
        first.stop()
        await running
        assert first.client.stats()["outbox"] == 1  # on disk, never sent

        b = RouterService(b.uri)
        await b.start()
        await until(lambda: b.router.status()["subscriptions"] == 1, what="the watcher back")
        second = AgentService(agent_b(), b.uri, tmp_path / "agentB", tmp_path)
        running = asyncio.create_task(second.run())
        got = await statuses.next(timeout=10)
        assert got.publication == status and got.id.endswith(f"@{stamp}")  # the id of the first run
        await until(lambda: second.client is not None and second.client.stats()["outbox"] == 0, what="acked")
        second.stop()
        await running
        await watch.close()
        await b.stop()

    run(scenario())
