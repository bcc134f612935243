"""The deployer against a broker in this process and fake agents: who is named as silent, and
the progress it reports while it waits."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.client import Client
from broker.transport.server import RouterService
from tests.transport.harness import run, uri
from wfm.deploy import deploy, ordered_batches
from wfm.workflow import load, translate
from workflow_messages import ack, ack_advertisement, control_subscription, envelope_digest

PAYROLL = Path(__file__).parents[2] / "workflows" / "payroll.xml"  # coordinator agentA; agentB, agentC


async def answering(client: Client, agent: str) -> None:
    """A fake agent: acknowledges OK every envelope addressed to it."""
    await client.advertise(ack_advertisement(agent))
    envelopes = await client.subscribe(control_subscription(agent))
    async for delivery in envelopes:
        envelope = delivery.publication
        fields = {name: str(envelope.get(name, "")) for name in ("applname", "version", "jobname", "command")}
        await client.publish(ack(agent, {**fields, "digest": envelope_digest(envelope)}, "OK", ""))


def test_only_the_silent_agent_is_named_and_the_coordinator_is_not_sent_to() -> None:
    """agentC does not answer: the coordinator's envelopes wait for it (unsent), and agentA, which
    is healthy, is not reported as silent."""
    workflow = load(PAYROLL)
    plan = translate(workflow)
    said: list[str] = []

    async def scenario() -> None:
        broker = RouterService(uri("B1"))
        await broker.start()
        agent_b = await Client.connect(broker.uri, "agentB")
        faking = asyncio.create_task(answering(agent_b, "agentB"))
        await asyncio.sleep(0.1)
        reports = await deploy(
            broker.uri, plan, ordered_batches(plan, workflow.coordinator), 1.5, lambda p: p, said.append
        )
        faking.cancel()
        await agent_b.close()
        await broker.stop()
        by_agent = {report.agent: report for report in reports}
        assert by_agent["agentB"].ok and by_agent["agentB"].results["OK"] > 0
        assert by_agent["agentC"].missing > 0 and by_agent["agentC"].unsent == 0
        assert by_agent["agentA"].missing == 0 and by_agent["agentA"].unsent == len(plan.by_agent()["agentA"])

    run(scenario())
    total = sum(map(len, plan.by_agent().values()))
    assert said[0] == f"0/{total} acknowledged, waiting for agentB, agentC"
    assert said[-1].endswith("acknowledged, waiting for agentC")
