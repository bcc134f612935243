"""A job whose definition's calendar does not allow the generation's date: it does not run, it
publishes NORUN naming the calendar, its successors go on, and a restart does not run it."""

from __future__ import annotations

import json
from pathlib import Path

from agents.events import Delivered, Effect, Incoming
from agents.journal import Journal
from agents.queries import answer_query
from agents.state import Agent
from broker.language import Publication
from tests.agents.test_state import install, journaled, key, published, runs
from tests.signing import DEPLOYER, signed
from tests.workflow.test_calendars import FR, document
from wfm.workflow import loads, translate
from workflow_messages import job_status
from workflow_messages.operations import query

PLAN = translate(loads(document(FR)))  # A (agentA, calendar FR: workdays but 2026-12-25), B after A
V = PLAN.version
PLAN_CALENDAR = loads(document(FR)).calendars[0]
SATURDAY, CHRISTMAS, MONDAY = "2026.11.28", "2026.12.25", "2026.11.23"


def trigger(gid: str, day: str, at: float = 1.0) -> Publication:
    fields = {"applname": "W", "GID": gid, "schedule": day}
    return DEPLOYER.signer.sign_publication(Publication("Trigger", fields), int(at * 1e6))  # type: ignore[arg-type]


def firing(job: str, gid: str, day: str, before: str = "SUCCESS") -> tuple[Publication, ...]:
    after = {"A": ("APPL_START", "agentA"), "B": ("A", "agentA")}[job]
    return (trigger(gid, day), job_status("W", after[0], gid, before, "", version=V, agent=after[1]))


def fire(agent: Agent, job: str, gid: str, day: str, before: str = "SUCCESS") -> list[Effect]:
    return agent.handle(Delivered(key(agent, job, version=V), firing(job, gid, day, before)), 1.0)


def test_on_a_saturday_the_job_publishes_norun_naming_its_calendar_and_its_successor_runs() -> None:
    a, b = Agent("agentA"), Agent("agentB")
    install(a, PLAN)
    install(b, PLAN)
    effects = fire(a, "A", "g1", SATURDAY)
    assert runs(effects) == []
    [norun] = published(effects)
    assert (norun["jobname"], norun["status"]) == ("A", "NORUN")
    assert norun["detail"] == "not in calendar FR (mon,tue,wed,thu,fri): Saturday 2026-11-28"
    assert norun.get("skipped") != 1  # not run by its calendar, not skipped on a branch not taken
    [run] = runs(fire(b, "B", "g1", SATURDAY, before="NORUN"))  # NORUN is accepted like SUCCESS
    assert (run.job, run.date) == ("B", "2026-11-28")


def test_on_a_holiday_the_job_publishes_norun_and_on_a_workday_it_runs() -> None:
    agent = Agent("agentA")
    install(agent, PLAN)
    [norun] = published(fire(agent, "A", "g1", CHRISTMAS))
    assert (norun["status"], norun["detail"]) == ("NORUN", "not in calendar FR: 2026-12-25 is a holiday")
    [run] = runs(fire(agent, "A", "g2", MONDAY))
    assert run.job == "A"


def test_a_job_without_a_calendar_runs_every_day() -> None:
    agent = Agent("agentB")
    install(agent, PLAN)
    [run] = runs(fire(agent, "B", "g1", CHRISTMAS))
    assert run.job == "B"


def test_the_norun_is_published_once_across_a_restart(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    agent = Agent("agentA")
    for publication in signed(PLAN.publications()):
        if publication["agentname"] == "agentA":
            journaled(agent, journal, Incoming(publication), 0.0)
    go = Delivered(key(agent, "A", version=V), firing("A", "g1", SATURDAY))
    [norun] = published(journaled(agent, journal, go, 1.0))
    assert norun["status"] == "NORUN"
    journal.close()

    restarted = Agent("agentA")
    reopened = Journal(tmp_path)
    reopened.recover(restarted)
    reopened.close()
    assert restarted.snapshot() == agent.snapshot()
    assert restarted.handle(Delivered(key(restarted, "A", version=V), firing("A", "g1", SATURDAY)), 2.0) == []
    restored = Agent("agentA")
    restored.restore(json.loads(json.dumps(agent.snapshot())))
    assert restored.deployments["W", V].jobs["A"].named == PLAN_CALENDAR
    assert restored.handle(Delivered(key(restored, "A", version=V), firing("A", "g1", SATURDAY)), 2.0) == []

    reply = answer_query(restored, query("*", "RUNS", "r", {"workflow": "W"}))
    assert isinstance(reply, Publication)
    [generation] = json.loads(str(reply["content"]))["generations"]
    assert generation["jobs"]["A"]["status"] == "NORUN"
    assert generation["jobs"]["A"]["detail"].startswith("not in calendar FR")


def test_a_deploy_with_a_bad_calendar_is_refused_with_its_reason() -> None:
    [publication] = [p for p in PLAN.publications() if p["agentname"] == "agentA"]
    content = json.loads(str(publication["content"]))
    content["jobs"][1]["calendar"]["holidays"] = ["2026-02-30"]
    fields = {k: v for k, v in publication.items() if k != "class"} | {"content": json.dumps(content)}
    effects = Agent("agentA").handle(Incoming(DEPLOYER.sign(Publication("AGENT_CTL", fields))), 0)
    [ack] = published(effects)
    assert ack["result"] == "ERROR" and "holiday '2026-02-30' is not a date" in str(ack["detail"])


def test_workflows_answers_the_calendar_of_a_job_that_has_one() -> None:
    agent = Agent("agentA")
    install(agent, PLAN)
    reply = answer_query(agent, query("*", "WORKFLOWS", "r", {}))
    assert isinstance(reply, Publication)
    [deployment] = json.loads(str(reply["content"]))["deployments"]
    assert deployment["jobs"]["A"]["calendar"] == PLAN_CALENDAR.record()
    other = Agent("agentB")
    install(other, PLAN)
    reply = answer_query(other, query("*", "WORKFLOWS", "r", {}))
    assert isinstance(reply, Publication)
    [deployment] = json.loads(str(reply["content"]))["deployments"]
    assert "calendar" not in deployment["jobs"]["B"]
