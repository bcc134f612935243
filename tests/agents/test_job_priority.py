"""A job's priority goes with its condition's firings: its agent subscribes the job's composite
subscription with it (without a broker: a client that records what it is asked)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from agents.registering import Registering
from agents.state import Agent
from tests.agents.test_state import install
from wfm.workflow import loads, translate

URGENT = """<workflow name="URGENT">
  <job name="First" agent="agentA"><command>true</command></job>
  <job name="Middle" agent="agentB" priority="9"><after job="First"/><command>true</command></job>
  <job name="Last" agent="agentB"><after job="Middle"/><command>true</command></job>
</workflow>"""


class RecordingClient:
    """Connected; answers every request at once and keeps the composite ones' priorities."""

    connected = True

    def __init__(self) -> None:
        self.priorities: dict[str, int] = {}

    def known_id(self, name: str) -> None:
        return None

    async def advertise(self, advertisement: object, name: str) -> None:
        return None

    async def subscribe(self, subscription: object, own_queue: bool, name: str) -> None:
        return None

    async def subscribe_composite(
        self, composite: object, clear: object, own_queue: bool, name: str, policy: object, priority: int
    ) -> SimpleNamespace:
        self.priorities[str(composite)] = priority
        return SimpleNamespace(id=name)


def test_a_job_with_priority_9_subscribes_its_condition_with_priority_9() -> None:
    agent = Agent("agentB")
    install(agent, translate(loads(URGENT)))
    composites = {key: r for key, r in agent.wanted.items() if r.command == "COMPOSITESUBSCRIBE"}
    by_job = {key.split(" ")[3]: r for key, r in composites.items()}
    assert {job: r.priority for job, r in by_job.items()} == {"Middle": 9, "Last": 4}

    registering = Registering(agent)
    client = RecordingClient()

    async def scenario() -> None:
        for key, registration in composites.items():
            await registering.request(client, key, registration)  # type: ignore[arg-type]

    asyncio.run(scenario())
    assert client.priorities == {
        str(by_job["Middle"].composite): 9,
        str(by_job["Last"].composite): 4,
    }
