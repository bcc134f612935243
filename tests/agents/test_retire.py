"""An agent left out of a new version of a workflow (UNDEPLOY ``{"retire": true}``), in the
state machine: it finishes the generations in flight, starts none, then removes the workflow."""

from __future__ import annotations

import json

from agents.events import Delivered, Finished, Incoming, Result, Withdraw
from agents.forgetting import SWEEP_EVERY
from agents.state import Agent
from broker.language import Publication
from tests.agents.test_operations import ack_of
from tests.agents.test_state import MONDAY, install, key, published, runs
from tests.signing import DEPLOYER, signed, signed_trigger
from wfm.deploy import retire_publications, undeploy_publications, withdraw_publications
from wfm.workflow import After, Job, Plan, Workflow, translate
from workflow_messages import job_status


def plan(first: str, second: str, command: str = "true") -> Plan:
    jobs = (Job("A", first, command), Job("B", second, "true", after=(After("A"),)))
    return translate(Workflow("CO", jobs))


OLD, NEW = plan("a", "b"), plan("x", "b")  # a, the old coordinator, is not in the new version


def go(gid: str) -> Publication:
    return signed_trigger("CO", gid, MONDAY, at=1.0)  # these tests' agents live near epoch 1


def start(agent: Agent, gid: str, now: float) -> list:  # type: ignore[type-arg]
    return agent.handle(Delivered(key(agent, "APPL_START", version=OLD.version), (go(gid),)), now)


def retire(agent: Agent, of: Plan = NEW, now: float = 2.0) -> list:  # type: ignore[type-arg]
    """What ``wfm deploy`` of ``of`` sends ``agent``, which said it had OLD."""
    return agent.handle(Incoming(DEPLOYER.sign(retire_publications(of, {agent.name: [OLD.version]})[0])), now)


def test_a_retired_coordinator_finishes_its_generation_starts_none_then_removes_the_workflow() -> None:
    agent = Agent("a")
    install(agent, OLD)
    [started] = published(start(agent, "g1", 1.0))
    effects = retire(agent)
    assert ack_of(effects) == ("OK", "")
    assert not [e for e in effects if isinstance(e, Withdraw)]  # g1 runs on the old version
    assert agent.current("CO") is None
    assert published(start(agent, "g2", 3.0)) == []  # no generation beside the new coordinator's
    assert ("CO", "g2") not in agent.generations
    restarted = Agent("a")  # the retirement is kept over a restart
    restarted.restore(json.loads(json.dumps(agent.snapshot())))
    assert restarted.retired == {("CO", OLD.version)} and restarted.current("CO") is None
    [run] = runs(agent.handle(Delivered(key(agent, "A", version=OLD.version), (go("g1"), started)), 4.0))
    [done] = published(agent.handle(Finished(run, Result(True, "exit 0", 4.0, 0.1)), 5.0))
    keys = {k for k, (workflow, _, _) in agent.owners.items() if workflow == "CO"}
    ended = job_status("CO", "B", "g1", "SUCCESS", "", version=OLD.version, agent="b")
    # APPL_END fires on the end jobs' statuses alone (no Trigger in its condition)
    effects = agent.handle(Delivered(key(agent, "APPL_END", version=OLD.version), (ended,)), 6.0)
    assert [(p["jobname"], p["status"]) for p in published(effects)] == [("APPL_END", "SUCCESS")]
    assert {e.key for e in effects if isinstance(e, Withdraw)} == keys and "CO starts" in keys
    assert agent.deployments == {} and agent.wanted == {} and agent.retired == set()
    assert done["status"] == "SUCCESS"


def test_an_idle_agent_is_removed_at_once_and_a_new_deployment_takes_it_back() -> None:
    agent = Agent("a")
    install(agent, OLD)
    effects = retire(agent)
    assert ack_of(effects) == ("OK", "") and "CO starts" in {
        e.key for e in effects if isinstance(e, Withdraw)
    }
    assert agent.deployments == {} and agent.retired == set()
    assert ack_of(retire(agent, now=3.0)) == ("UNCHANGED", "")  # nothing of CO here
    install(agent, OLD)  # deployed again (say, the old file): current again
    assert agent.current("CO") == OLD.version


def test_only_a_deployment_of_the_retired_version_that_applies_ends_its_retirement() -> None:
    agent = Agent("a")
    install(agent, OLD)
    start(agent, "g1", 1.0)
    retire(agent)
    assert ack_of(retire(agent, now=2.5)) == ("UNCHANGED", "")
    [deploy] = [p for p in OLD.publications() if p["agentname"] == "a" and p["command"] == "DEPLOY"]
    fields = {name: value for name, value in deploy.items() if name != "class"}
    broken = Publication(deploy.cls, {**fields, "content": "{}"})
    assert ack_of(agent.handle(Incoming(DEPLOYER.sign(broken)), 3.0))[0] == "ERROR"
    assert agent.current("CO") is None  # an envelope refused leaves the retirement as it was
    newer = plan("x", "a", command="echo newer")  # a new version, a not coordinating it
    [first, *_] = [p for p in signed(newer.publications()) if p["agentname"] == "a"]
    agent.handle(Incoming(first), 3.5)
    assert agent.current("CO") in (None, newer.version)  # never the retired one
    install(agent, OLD)  # the retired version deployed again (say, its file)
    assert agent.retired == set()


def test_a_late_retirement_leaves_a_version_installed_after_what_it_names() -> None:
    """Two deploys overlapping: the older one's retirement, signed anew at each resend, comes
    after a newer version named this agent again; it must not retire that one."""
    agent = Agent("a")
    install(agent, OLD)
    newer = plan("a", "b", command="echo newer")
    install(agent, newer)
    assert ack_of(retire(agent, now=3.0)) == ("OK", "")  # names OLD, which it had then
    assert agent.current("CO") == newer.version and ("CO", OLD.version) not in agent.deployments


def test_a_retirement_must_come_from_a_version_that_left_the_agent_out_and_say_retire() -> None:
    agent = Agent("a")
    install(agent, OLD)
    assert ack_of(retire(agent, of=OLD)) == (
        "ERROR",
        f"CO version {OLD.version} is deployed here: not retired by it",
    )
    [envelope] = undeploy_publications(NEW)[:1]
    for content in (
        '{"retire": true}',
        '{"retire": []}',
        '{"retire": [1]}',
        '{"retire": ["v"], "x": 1}',
        "[1",
    ):
        fields = {name: value for name, value in envelope.items() if name != "class"}
        odd = Publication(envelope.cls, {**fields, "agentname": "a", "content": content})
        result, detail = ack_of(agent.handle(Incoming(DEPLOYER.sign(odd)), 3.0))
        assert result == "ERROR" and detail.startswith("UNDEPLOY content must be empty or "), detail
        assert len(detail) < 250
    assert agent.current("CO") == OLD.version  # nothing changed


def test_a_generation_of_a_retired_workflow_forgotten_by_the_sweep_releases_its_version() -> None:
    agent = Agent("a", forget_after=2 * SWEEP_EVERY)
    install(agent, OLD)
    start(agent, "g1", 1.0)  # its APPL_END never comes
    retire(agent)
    assert agent.deployments
    effects = agent.handle(Delivered("nothing", ()), 10 * SWEEP_EVERY)
    assert "CO starts" in {e.key for e in effects if isinstance(e, Withdraw)}
    assert agent.deployments == {} and agent.generations == {}


def test_a_withdrawn_version_goes_and_the_one_before_goes_on() -> None:
    """A deployment of NEW that did not complete is rolled back: b, which installed its part,
    withdraws it, and OLD is the version its generations run on again."""
    agent = Agent("b")
    install(agent, OLD)
    install(agent, NEW)
    assert {v for _, v in agent.deployments} == {OLD.version, NEW.version}
    effects = agent.handle(Incoming(DEPLOYER.sign(withdraw_publications(NEW, ["b"])[0])), 2.0)
    assert ack_of(effects) == ("OK", "")
    assert {v for _, v in agent.deployments} == {OLD.version}
    assert {e.key for e in effects if isinstance(e, Withdraw)} and "CO starts" in agent.owners
    again = agent.handle(Incoming(DEPLOYER.sign(withdraw_publications(NEW, ["b"])[0])), 3.0)
    assert ack_of(again) == ("UNCHANGED", "")


def test_a_version_a_generation_runs_on_is_not_withdrawn() -> None:
    agent = Agent("a")
    install(agent, OLD)
    start(agent, "g1", 1.0)
    effects = agent.handle(Incoming(DEPLOYER.sign(withdraw_publications(OLD, ["a"])[0])), 2.0)
    assert ack_of(effects) == ("ERROR", f"CO version {OLD.version} runs a generation here: not withdrawn")
    assert ("CO", OLD.version) in agent.deployments
