"""The agent's adapter, without a broker: deliveries that arrive before their subscription's id."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

from agents.envelope import Registration
from agents.service import AgentService
from agents.state import Agent, Delivered
from broker.client import Delivery
from broker.language import parse_filter, parse_publication
from broker.transport.uri import BrokerURI

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
        await service._request(client, "key", Registration("SUBSCRIBE", FILTER))  # type: ignore[arg-type]
        client.acked.set()
        await reader

    asyncio.run(scenario())
    events = [service.events.queue.get_nowait() for _ in range(service.events.queue.qsize())]
    assert events == [Delivered("key", (FIRST,)), Delivered("key", (SECOND,))]
    service.journal.close()
