"""A Trigger with an expiry (``wfm trigger --ttl``), in the agent's state machine: the coordinator
decides once, by its clock when APPL_START fires, whether the generation starts or ends EXPIRED;
the decision is in its journal and snapshot, so a restart neither runs an expired generation nor
declares expired one that started."""

from __future__ import annotations

import json
import logging
from datetime import date
from pathlib import Path

import pytest

from agents.events import Delivered, Effect, Incoming
from agents.journal import Journal
from agents.queries import answer_query
from agents.state import Agent
from broker.language import Publication
from tests.agents.test_state import PLAN, V, fire, install, journaled, key, published, runs, status
from tests.signing import DEPLOYER, signed
from workflow_messages import trigger
from workflow_messages.operations import query

EXPIRES = 100.0  # the Triggers' expiry, epoch seconds of these tests' clock


def late_trigger(gid: str, expires: object = EXPIRES, signed_at: float = 50.0) -> Publication:
    """A Trigger for Monday 2026-11-23, signed at ``signed_at`` with ``[expires,E]`` (any value)."""
    bare = trigger("PAYROLL", gid, date(2026, 11, 23))
    with_expiry = Publication("Trigger", {**bare.fields, "expires": expires})  # type: ignore[dict-item]
    return DEPLOYER.signer.sign_publication(with_expiry, int(signed_at * 1e6))


def start(agent: Agent, gid: str, now: float, expires: object = EXPIRES) -> list[Effect]:
    """APPL_START's firing: the Trigger reaches the coordinator (agentA) at ``now``."""
    return agent.handle(Delivered(key(agent, "APPL_START"), (late_trigger(gid, expires),)), now)


def test_a_late_trigger_ends_its_generation_expired_and_starts_nothing() -> None:
    agent = Agent("agentA")
    install(agent)
    [end] = published(start(agent, "g1", EXPIRES + 0.5))
    assert (end["jobname"], end["status"], end["version"], end["GID"]) == ("APPL_END", "EXPIRED", V, "g1")
    assert end["detail"] == (
        "expired: the Trigger reached agentA 0.500 s after its expiry (1970-01-01 00:01:40 UTC); nothing ran"
    )
    assert ("PAYROLL", "g1") in agent.ended and ("PAYROLL", "g1") not in agent.generations
    # no APPL_START went out, so no job fires; one made up anyway is of a generation that is over
    assert fire(agent, "JobA", "g1", "APPL_START", now=101.0) == []
    assert start(agent, "g1", 102.0) == []  # the Trigger delivered again: no second APPL_END
    assert agent.outcomes["PAYROLL", "g1"]["date"] == "2026-11-23"


def test_a_trigger_at_its_expiry_is_late_and_one_just_before_starts_its_generation() -> None:
    agent = Agent("agentA")
    install(agent)
    assert [p["status"] for p in published(start(agent, "at", EXPIRES))] == ["EXPIRED"]
    [begun] = published(start(agent, "before", EXPIRES - 0.001))
    assert (begun["jobname"], begun["status"]) == ("APPL_START", "SUCCESS")
    assert runs(fire(agent, "JobA", "before", "APPL_START", now=EXPIRES + 60))  # its jobs run late
    assert start(agent, "before", EXPIRES + 120) == []  # delivered again after the expiry: a duplicate


def test_a_trigger_without_an_expiry_starts_its_generation_whenever_it_comes() -> None:
    agent = Agent("agentA")
    install(agent)
    plain = DEPLOYER.signer.sign_publication(trigger("PAYROLL", "g1", date(2026, 11, 23)), int(50e6))
    [begun] = published(agent.handle(Delivered(key(agent, "APPL_START"), (plain,)), 1e6))
    assert (begun["jobname"], begun["status"]) == ("APPL_START", "SUCCESS")


@pytest.mark.parametrize("garbled", ["tomorrow", -5, 1e12])
def test_a_garbled_expiry_is_refused_in_one_line_and_the_agent_goes_on(
    garbled: object, caplog: pytest.LogCaptureFixture
) -> None:
    agent = Agent("agentA")
    install(agent)
    with caplog.at_level(logging.WARNING, "agents.refusals"):
        assert start(agent, "g1", 60.0, garbled) == []
    assert agent.refused["firing"] == 1 and ("PAYROLL", "g1") not in agent.generations
    [line] = [r.getMessage() for r in caplog.records if r.name == "agents.refusals"]
    assert "ignored a firing of PAYROLL APPL_START: the trigger's expires" in line and "\n" not in line
    assert [p["status"] for p in published(start(agent, "g2", 60.0))] == ["SUCCESS"]  # goes on


def test_only_the_coordinator_decides_a_job_after_appl_start_runs_even_past_the_expiry() -> None:
    """The generation started on time: the Trigger in its later jobs' firings is not judged again."""
    agent = Agent("agentB")
    install(agent)
    triggered = late_trigger("g1")
    effects = agent.handle(Delivered(key(agent, "JobB"), (triggered, status("JobA", "g1"))), EXPIRES + 3600)
    assert [r.job for r in runs(effects)] == ["JobB"]


def test_a_restart_after_the_expired_decision_does_not_run_it(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    agent = Agent("agentA")
    for publication in signed(PLAN.publications()):
        if publication["agentname"] == "agentA":
            journaled(agent, journal, Incoming(publication), 0.0)
    late = Delivered(key(agent, "APPL_START"), (late_trigger("late"),))
    [expired] = published(journaled(agent, journal, late, EXPIRES + 1))
    on_time = Delivered(key(agent, "APPL_START"), (late_trigger("on-time"),))
    [started] = published(journaled(agent, journal, on_time, EXPIRES - 1))
    assert (expired["status"], started["status"]) == ("EXPIRED", "SUCCESS")
    journal.close()

    restarted = Agent("agentA")
    reopened = Journal(tmp_path)
    reopened.recover(restarted)  # the same events at the same times: the same decisions
    reopened.close()
    assert restarted.snapshot() == agent.snapshot()
    for each in (restarted, snapshotted(restarted)):
        # the broker delivers both Triggers again (their deliveries were not done), later still
        assert start(each, "late", EXPIRES + 60) == []
        assert start(each, "on-time", EXPIRES + 60) == []  # started: never declared expired
        assert runs(fire(each, "JobA", "on-time", "APPL_START", now=EXPIRES + 61))
        assert fire(each, "JobA", "late", "APPL_START", now=EXPIRES + 61) == []


def snapshotted(agent: Agent) -> Agent:
    """A new agent restored from ``agent``'s snapshot (as JSON, as the journal keeps it)."""
    restored = Agent(agent.name)
    restored.restore(json.loads(json.dumps(agent.snapshot())))
    return restored


def test_wfm_runs_hears_of_an_expired_generation_from_its_coordinator() -> None:
    agent = Agent("agentA")
    install(agent)
    start(agent, "g1", EXPIRES + 2)
    reply = answer_query(agent, query("*", "RUNS", "r", {"workflow": "PAYROLL"}))
    assert isinstance(reply, Publication)
    [generation] = json.loads(str(reply["content"]))["generations"]
    assert (generation["gid"], generation["date"]) == ("g1", "2026-11-23")
    assert generation["jobs"]["APPL_END"]["status"] == "EXPIRED"
    assert "APPL_START" not in generation["jobs"]
