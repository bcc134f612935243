"""The deployer against a broker in this process and fake agents: who is named as silent, and
the progress it reports while it waits."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agents.events import Effect, Event, Incoming
from agents.service import AgentService
from agents.state import Agent
from agents.trust import Trust
from broker.client import Client
from broker.transport.server import RouterService
from tests.signing import DEPLOYER
from tests.transport.harness import run, uri
from wfm.deploy import deploy, ordered_batches
from wfm.workflow import After, Job, Plan, Workflow, load, translate
from workflow_messages import AGENT_CTL, ack, ack_advertisement, control_subscription, envelope_digest

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


class Recording(Agent):
    """An agent that notes, in one list shared by all, each envelope it takes."""

    def __init__(self, name: str, taken: list[tuple[str, str]]) -> None:
        super().__init__(name, trust=Trust())
        self.taken = taken

    def handle(self, event: Event, now: float) -> list[Effect]:
        if isinstance(event, Incoming) and event.publication.cls == AGENT_CTL:
            self.taken.append((self.name, str(event.publication["command"])))
        return super().handle(event, now)


def test_old_coordinators_are_retired_before_the_new_one_gets_its_envelopes_and_the_rest_after(
    tmp_path: Path,
) -> None:
    """Between the new coordinator's DEPLOY and the old one's retirement, a trigger would start a
    generation on each version; the other agents left out must stay until the old coordinator
    starts no more generations that need them."""

    def plan(*agents: str) -> Plan:
        jobs = [Job("A", agents[0], "true")]
        jobs += [Job(f"J{i}", agent, "true", after=(After("A"),)) for i, agent in enumerate(agents[1:])]
        return translate(Workflow("CO", tuple(jobs)))

    old, new = plan("a", "b", "c"), plan("x", "b")  # a coordinated, c had a job: both left out
    taken: list[tuple[str, str]] = []
    warned: list[str] = []

    async def scenario() -> None:
        broker = RouterService(uri("B1"))
        await broker.start()
        services = [
            AgentService(Recording(name, taken), broker.uri, tmp_path / name, tmp_path) for name in "abcx"
        ]
        running = [asyncio.create_task(service.run()) for service in services]
        try:
            for each, coordinator in ((old, "a"), (new, "x")):
                batches = ordered_batches(each, coordinator)
                reports = await deploy(broker.uri, each, batches, 20, DEPLOYER.sign, retire=warned.append)
                assert all(r.ok and not r.missing and not r.unsent for r in reports), (coordinator, reports)
            by_agent = {r.agent: r for r in reports}
            assert {a for a, r in by_agent.items() if r.retired} == {"a", "c"}
        finally:
            for service in services:
                service.stop()
            await asyncio.gather(*running)
            await broker.stop()

    run(scenario())
    assert warned == []
    since = taken.index(("b", "DEPLOY"), taken.index(("a", "DEPLOY")) + 1)  # the new version's
    rest = taken[since:]
    x_first = rest.index(next(t for t in rest if t[0] == "x"))
    assert rest.index(("a", "UNDEPLOY")) < x_first < rest.index(("c", "UNDEPLOY")), rest
