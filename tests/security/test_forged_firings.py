"""Firings a compromised broker could make up from real, signed publications (the agent's broker
joins a job's condition; so may a neighbour's): the agent acts on a firing only if it is exactly
what the job's condition asks for. No sockets: an agent with a CA fed the deliveries directly."""

from __future__ import annotations

import time

import pytest

from agents.events import Delivered, Emit, Incoming, Start
from agents.state import Agent
from agents.trust import Trust
from broker.language import Publication
from tests.agents.test_state import PLAN, key
from tests.agents.test_trust import CA, NOW
from wfm.security.acl import load_policy
from workflow_messages import job_status, trigger
from workflow_messages.jobstatus import generation_end

CA_ = CA()
DEPLOYER = CA_.issue("ops", "deployer")
AGENTS = {name: CA_.issue(name, "agent") for name in ("agentA", "agentB", "agentC")}


def deployed(name: str) -> Agent:
    agent = Agent(name, trust=Trust(ca=CA_.certificate))
    for envelope in PLAN.publications():
        if envelope["agentname"] == name:
            agent.handle(Incoming(DEPLOYER.sign(envelope)), time.time())
    return agent


def go(gid: str = "g1", workflow: str = "PAYROLL") -> Publication:
    return DEPLOYER.sign_publication(trigger(workflow, gid, NOW.date()))


def ended(job: str, agent: str, gid: str = "g1", version: str = PLAN.version) -> Publication:
    status = job_status("PAYROLL", job, gid, "SUCCESS", "", version=version, agent=agent)
    return AGENTS[agent].sign_publication(status)


def fire(agent: Agent, job: str, *publications: Publication) -> list[Publication | str]:
    """What a firing of ``job`` does: the runs it starts and the statuses it publishes."""
    effects = agent.handle(Delivered(key(agent, job), publications), time.time())
    return [
        e.run.job if isinstance(e, Start) else e.publication for e in effects if isinstance(e, Start | Emit)
    ]


@pytest.mark.parametrize(
    ("agent", "job", "firing"),
    [
        ("agentB", "JobB", (go(), ended("APPL_START", "agentA"))),  # JobA's status left out
        ("agentC", "JobD", (go(), ended("JobB", "agentB"))),  # JobC's left out
        ("agentB", "JobB", (go(), ended("JobA", "agentA", gid="g0"))),  # another generation's
        (
            "agentB",
            "JobB",
            (go(), ended("JobA", "agentA"), ended("JobA", "agentA", gid="g2")),
        ),  # one too many
        ("agentA", "APPL_START", (go(workflow="OTHER"),)),  # another workflow's Trigger
        ("agentA", "APPL_END", (ended("APPL_START", "agentA"),)),  # no end job's status
        ("agentA", "APPL_END", (go(), ended("JobD", "agentC"), ended("Alert", "agentC"))),  # a Trigger in it
    ],
)
def test_a_made_up_firing_of_real_publications_does_nothing(
    agent: str, job: str, firing: tuple[Publication, ...]
) -> None:
    running = deployed(agent)
    assert fire(running, job, *firing) == []
    assert running.refused["firing"] == 1


def test_the_real_firing_still_runs_the_job() -> None:
    agent = deployed("agentB")
    assert fire(agent, "JobB", go(), ended("JobA", "agentA")) == ["JobB"]


def test_an_end_under_a_version_not_deployed_here_ends_nothing() -> None:
    """A stolen agent key signs APPL_END under a made-up version (whose deployment would name no
    coordinator to check): the generation goes on here."""
    agent = deployed("agentB")
    starts = next(k for k, (_, _, job) in agent.owners.items() if job == "APPL_START")
    agent.handle(Delivered(starts, (ended("APPL_START", "agentA"),)), time.time())
    agent.handle(Delivered(starts, (ended("APPL_END", "agentB", version="bogus"),)), time.time())
    assert ("PAYROLL", "g1") in agent.generations and ("PAYROLL", "g1") not in agent.ended


def test_only_the_coordinators_end_clears_a_generations_join_state_in_the_brokers() -> None:
    """Every broker forgets a generation's waiting Trigger and statuses on its APPL_END (the
    composites' ``clear``): only the coordinator's, which only its identity may publish, so another
    agent's key cannot stall a generation overlay-wide."""
    agent = deployed("agentB")
    clears = {str(r.clear) for r in agent.wanted.values() if r.clear is not None}
    assert clears == {str(generation_end("PAYROLL", "agentA"))}
    assert "[agentname,eq,agentA]" in clears.pop()
    forged = job_status("PAYROLL", "APPL_END", "g1", "SUCCESS", "", version="v", agent="agentA")
    assert load_policy().may_publish("agentX", "agent", forged, 0.0) is not None
    assert load_policy().may_publish("agentA", "agent", forged, 0.0) is None
