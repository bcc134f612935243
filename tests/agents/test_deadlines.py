"""Deadlines in the agent's state machine, with its clock passed in: a job still running (or not
started, its predecessors late) when its deadline comes publishes one ALERT at once, never again,
before or after a restart from the journal or the snapshot; a job that ended on time, or a
cancelled generation, none. The coordinator watches the generation's own deadline (APPL_END's)."""

from __future__ import annotations

import json
from pathlib import Path

from agents.events import Delivered, Effect, Finished, Incoming, Result, TimePassed
from agents.journal import Journal
from agents.queries import answer_query
from agents.state import Agent
from broker.language import Publication
from tests.agents.test_state import WORKFLOWS, install, journaled, key, published, runs, status, trigger
from tests.signing import DEPLOYER, signed
from wfm.workflow import loads, translate
from workflow_messages.deadlines import alert_quality
from workflow_messages.operations import CANCEL, operation, query

TEXT = (WORKFLOWS / "payroll.xml").read_text()
PLAN = translate(
    loads(
        TEXT.replace('<workflow name="PAYROLL">', '<workflow name="PAYROLL" deadline="2h">').replace(
            'schedule="daily" timeout="600"', 'schedule="daily" deadline="30m" timeout="600"'
        )
    )
)
V = PLAN.version
T0 = 1_000_000.0  # when the generation starts, epoch seconds of these tests' clock
DUE = T0 + 1800  # JobB's deadline, 30m after


def started(agent: Agent, gid: str = "g1", now: float = T0) -> list[Effect]:
    """agentB hears the generation's APPL_START (every agent of the workflow does)."""
    appl_start = status("APPL_START", gid, version=V)
    return agent.handle(Delivered(key(agent, "APPL_START", "SUBSCRIBE", ""), (appl_start,)), now)


def fire_b(agent: Agent, gid: str = "g1", now: float = T0 + 60) -> list[Effect]:
    pubs = (trigger(gid, at=now), status("JobA", gid, version=V))
    return agent.handle(Delivered(key(agent, "JobB", version=V), pubs), now)


def alerts(effects: list[Effect]) -> list[Publication]:
    return [p for p in published(effects) if p.cls == "ALERT"]


def agent_b() -> Agent:
    agent = Agent("agentB")
    install(agent, PLAN)
    return agent


def test_a_job_still_running_at_its_deadline_publishes_one_alert_at_once() -> None:
    agent = agent_b()
    started(agent)
    [run] = runs(fire_b(agent))
    assert alerts(agent.handle(TimePassed(), DUE - 0.1)) == []
    [alert] = alerts(agent.handle(TimePassed(), DUE))
    assert (alert["applname"], alert["jobname"], alert["GID"], alert["status"]) == (
        "PAYROLL",
        "JobB",
        "g1",
        "DEADLINE",
    )
    assert str(alert["detail"]).startswith("deadline 30m missed: JobB had not ended by ")
    qos = alert_quality(alert)
    assert qos is not None and (qos.mid, qos.retain, qos.priority) == ("PAYROLL.JobB.g1.deadline", True, 8)
    assert alerts(agent.handle(TimePassed(), DUE + 60)) == []  # once
    ended = agent.handle(Finished(run, Result(True, "exit 0", T0 + 60, 3000)), DUE + 1200)
    assert [p.cls for p in published(ended)] == ["JOBSTATUS"]  # late, but no second alert
    # wfm runs hears of it from the agent, after the generation is over too
    reply = answer_query(agent, query("*", "RUNS", "r", {"workflow": "PAYROLL"}))
    assert isinstance(reply, Publication)
    [generation] = json.loads(str(reply["content"]))["generations"]
    assert generation["missed"] == ["JobB"]


def test_a_job_whose_predecessor_is_late_misses_its_deadline_without_having_started() -> None:
    agent = agent_b()
    started(agent)
    [alert] = alerts(agent.handle(TimePassed(), DUE + 0.5))
    assert alert["jobname"] == "JobB"  # JobC has no deadline


def test_a_job_that_ended_on_time_has_no_alert() -> None:
    agent = agent_b()
    started(agent)
    [run] = runs(fire_b(agent))
    agent.handle(Finished(run, Result(True, "exit 0", T0 + 60, 10)), T0 + 70)
    assert alerts(agent.handle(TimePassed(), DUE + 1)) == []


def test_a_cancelled_generation_has_no_alert() -> None:
    agent = agent_b()
    started(agent)
    runs(fire_b(agent))
    agent.handle(Incoming(DEPLOYER.sign(operation("agentB", "PAYROLL", CANCEL, {"gid": "g1"}))), T0 + 100)
    assert alerts(agent.handle(TimePassed(), DUE + 1)) == []


def test_the_coordinator_watches_the_generation_s_deadline() -> None:
    agent = Agent("agentA")
    install(agent, PLAN)
    agent.handle(Delivered(key(agent, "APPL_START", version=V), (trigger("g1", at=T0),)), T0)
    assert alerts(agent.handle(TimePassed(), T0 + 7199)) == []
    [alert] = alerts(agent.handle(TimePassed(), T0 + 7200))
    assert (alert["jobname"], alert["status"]) == ("APPL_END", "DEADLINE")
    assert "the generation had not ended" in str(alert["detail"])
    assert alert_quality(alert).mid == "PAYROLL.APPL_END.g1.deadline"  # type: ignore[union-attr]


def test_an_alert_is_published_once_across_a_restart(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    agent = Agent("agentB")
    for publication in signed(PLAN.publications()):
        if publication["agentname"] == "agentB":
            journaled(agent, journal, Incoming(publication), 0.0)
    appl_start = Delivered(
        key(agent, "APPL_START", "SUBSCRIBE", ""), (status("APPL_START", "g1", version=V),)
    )
    journaled(agent, journal, appl_start, T0)
    acted = journaled(agent, journal, TimePassed(), DUE + 1)  # the adapter journals a tick that acted
    assert [a["jobname"] for a in alerts(acted)] == ["JobB"]
    journal.close()

    restarted = Agent("agentB")
    reopened = Journal(tmp_path)
    reopened.recover(restarted)  # the same events at the same times: the alert is remembered
    reopened.close()
    assert restarted.snapshot() == agent.snapshot()
    from_snapshot = Agent("agentB")
    from_snapshot.restore(json.loads(json.dumps(agent.snapshot())))
    for each in (restarted, from_snapshot):
        assert alerts(each.handle(TimePassed(), DUE + 60)) == []
        assert alerts(fire_b(each, now=DUE + 61)) == []


def test_a_restart_before_the_deadline_still_alerts_once_it_comes(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    agent = Agent("agentB")
    for publication in signed(PLAN.publications()):
        if publication["agentname"] == "agentB":
            journaled(agent, journal, Incoming(publication), 0.0)
    journaled(
        agent,
        journal,
        Delivered(key(agent, "APPL_START", "SUBSCRIBE", ""), (status("APPL_START", "g1", version=V),)),
        T0,
    )
    journal.close()
    restarted = Agent("agentB")
    reopened = Journal(tmp_path)
    reopened.recover(restarted)
    reopened.close()
    assert [a["jobname"] for a in alerts(restarted.handle(TimePassed(), DUE))] == ["JobB"]
