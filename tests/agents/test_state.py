"""The agent's state machine without sockets or processes: envelopes and firings in, effects out."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.journal import Journal
from agents.state import Agent, Delivered, Effect, Emit, Event, Finished, Incoming, Result, Run, Start, Tick
from broker.language import Publication
from wfm.workflow import Plan, load, translate
from workflow_messages import job_status

WORKFLOWS = Path(__file__).parents[2] / "workflows"
PLAN = translate(load(WORKFLOWS / "payroll.xml"))
V = PLAN.version
MONDAY, FRIDAY = "2026.11.23", "2026.11.27"


def install(agent: Agent, plan: Plan = PLAN) -> list[Effect]:
    return [
        e for p in plan.publications() if p["agentname"] == agent.name for e in agent.handle(Incoming(p), 0)
    ]


def published(effects: list[Effect]) -> list[Publication]:
    return [e.publication for e in effects if isinstance(e, Emit)]


def runs(effects: list[Effect]) -> list[Run]:
    return [e.run for e in effects if isinstance(e, Start)]


def key(agent: Agent, job: str, command: str = "COMPOSITESUBSCRIBE", version: str = V) -> str:
    return next(
        k
        for k, (_, v, j) in agent.owners.items()
        if j == job and v == version and agent.wanted[k].command == command
    )


def trigger(gid: str, date: str = MONDAY) -> Publication:
    return Publication("Trigger", {"applname": "PAYROLL", "GID": gid, "schedule": date})


def status(job: str, gid: str, value: str = "SUCCESS", version: str = V) -> Publication:
    return job_status("PAYROLL", job, gid, value, "", version=version, agent="other")


def fire(agent: Agent, job: str, gid: str, *after: str, date: str = MONDAY, now: float = 1.0) -> list[Effect]:
    pubs = (trigger(gid, date), *(status(a, gid) for a in after))
    return agent.handle(Delivered(key(agent, job), pubs), now)


def acks(effects: list[Effect]) -> list[tuple[str, str]]:
    return [(str(p["command"]), str(p["result"])) for p in published(effects) if p.cls == "AGENT_ACK"]


def test_every_envelope_is_acknowledged_and_a_repeat_changes_nothing() -> None:
    agent = Agent("agentB")
    first = install(agent)
    assert {result for _, result in acks(first)} == {"OK"}
    assert len(acks(first)) == len(PLAN.by_agent()["agentB"])
    again = install(agent)
    assert {result for _, result in acks(again)} == {"UNCHANGED"}
    assert [e for e in again if not isinstance(e, Emit)] == []


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"command": "DANCE"}, "unknown command"),
        ({"content": "{not json"}, "not JSON"),
        ({"command": "SUBSCRIBE", "content": "[class,eq"}, "unexpected end of message"),
        ({"command": "JOBINFO", "content": '{"workflow":"PAYROLL"}'}, "differ"),
        ({"agentname": "agentZ", "applname": "PAYROLL"}, "addressed to"),
        ({"version": 7}, "non-empty string version"),
    ],
)
def test_a_bad_envelope_is_acknowledged_error(changes: dict[str, object], fragment: str) -> None:
    agent = Agent("agentC")
    base = dict(PLAN.publications()[-1])
    base.pop("class")
    bad = Publication("AGENT_CTL", {**base, "content": "{}", "command": "COMPOSITESUBSCRIBE", **changes})  # type: ignore[dict-item]
    effects = agent.handle(Incoming(bad), 0)
    [ack] = published(effects)
    assert ack.cls == "AGENT_ACK" and ack["result"] == "ERROR"
    assert fragment in str(ack["detail"])
    assert agent.wanted == {} or all(k.endswith("starts") for k in agent.wanted)


def test_appl_start_then_the_first_job() -> None:
    agent = Agent("agentA")
    install(agent)
    [start] = published(agent.handle(Delivered(key(agent, "APPL_START"), (trigger("g1"),)), 1.0))
    assert (start["jobname"], start["status"], start["version"], start["GID"]) == (
        "APPL_START",
        "SUCCESS",
        V,
        "g1",
    )
    [run] = runs(fire(agent, "JobA", "g1", "APPL_START"))
    assert (run.job, run.gid, run.attempt, run.date, run.timeout) == ("JobA", "g1", 1, "2026-11-23", 60.0)
    assert run.cwd == str(WORKFLOWS)


def test_norun_when_the_schedule_does_not_hold() -> None:
    agent = Agent("agentB")
    install(agent)
    [norun] = published(fire(agent, "JobC", "g1", "JobA", date=MONDAY))
    assert (norun["jobname"], norun["status"]) == ("JobC", "NORUN")
    assert "Monday" in str(norun["detail"])
    [run] = runs(fire(agent, "JobC", "g2", "JobA", date=FRIDAY))
    assert run.job == "JobC"


def test_a_bad_trigger_date_fails_the_job() -> None:
    agent = Agent("agentB")
    install(agent)
    [failure] = published(fire(agent, "JobB", "g1", "JobA", date="2026.13.45"))
    assert failure["status"] == "FAILURE" and "YYYY.MM.DD" in str(failure["detail"])


def test_duplicates_and_other_versions_are_ignored() -> None:
    agent = Agent("agentB")
    install(agent)
    assert runs(fire(agent, "JobB", "g1", "JobA"))
    assert fire(agent, "JobB", "g1", "JobA") == []
    other = (trigger("g2"), status("JobA", "g2", version="0123456789ab"))
    assert agent.handle(Delivered(key(agent, "JobB"), other), 1.0) == []


def test_retries_with_backoff_then_failure() -> None:
    agent = Agent("agentB", backoff=2.0)
    install(agent)
    [run] = runs(fire(agent, "JobB", "g1", "JobA"))  # retries="2"
    failed = Result(False, "exit 1 after 0.1 s", 1.0, 0.1)
    assert agent.handle(Finished(run, failed), 10.0) == []
    assert agent.next_wakeup() == 12.0
    assert agent.handle(Tick(), 11.9) == []
    [second] = runs(agent.handle(Tick(), 12.0))
    assert second.attempt == 2
    assert agent.handle(Finished(second, failed), 20.0) == []
    assert agent.next_wakeup() == 24.0  # doubled
    [third] = runs(agent.handle(Tick(), 24.0))
    [failure] = published(agent.handle(Finished(third, failed), 30.0))
    assert (failure["status"], failure["attempt"], failure["detail"]) == ("FAILURE", 3, "exit 1 after 0.1 s")


def test_a_timeout_is_a_failure_with_its_reason() -> None:
    agent = Agent("agentA")
    install(agent)
    [run] = runs(fire(agent, "JobA", "g1", "APPL_START"))
    [failure] = published(agent.handle(Finished(run, Result(False, "timed out after 60 s", 1.0, 60.0)), 61.0))
    assert (failure["status"], failure["detail"], failure["duration"]) == (
        "FAILURE",
        "timed out after 60 s",
        60,
    )


def test_the_concurrency_limit_queues_runs() -> None:
    agent = Agent("agentB", max_jobs=2)
    install(agent)
    started = [r for gid in ("g1", "g2", "g3") for r in runs(fire(agent, "JobB", gid, "JobA"))]
    assert [r.gid for r in started] == ["g1", "g2"]
    effects = agent.handle(Finished(started[0], Result(True, "exit 0", 1.0, 0.5)), 2.0)
    assert [p["status"] for p in published(effects)] == ["SUCCESS"]
    assert [r.gid for r in runs(effects)] == ["g3"]


def test_the_coordinator_ends_a_generation_and_everyone_forgets_it() -> None:
    agent = Agent("agentA")
    install(agent)
    agent.handle(Delivered(key(agent, "APPL_START"), (trigger("g1"),)), 1.0)
    statuses = key(agent, "APPL_END", "SUBSCRIBE")
    ends: list[Publication] = []
    for job, value in (("JobA", "SUCCESS"), ("JobB", "SUCCESS"), ("JobC", "NORUN"), ("JobD", "SUCCESS")):
        assert ends == []
        ends = published(agent.handle(Delivered(statuses, (status(job, "g1", value),)), 2.0))
    [end] = ends
    assert (end["jobname"], end["status"], end["detail"]) == ("APPL_END", "SUCCESS", "skipped: Alert")
    assert agent.handle(Delivered(statuses, (status("JobD", "g1"),)), 3.0) == []  # no second APPL_END
    agent.handle(Delivered(statuses, (end,)), 3.0)
    assert ("PAYROLL", "g1") not in agent.generations
    assert agent.handle(Delivered(key(agent, "APPL_START"), (trigger("g1"),)), 4.0) == []  # late repeat


def test_a_failed_job_ends_the_generation_as_failure() -> None:
    agent = Agent("agentA")
    install(agent)
    agent.handle(Delivered(key(agent, "APPL_START"), (trigger("g1"),)), 1.0)
    statuses = key(agent, "APPL_END", "SUBSCRIBE")
    agent.handle(Delivered(statuses, (status("JobA", "g1", "FAILURE"),)), 2.0)
    [end] = published(agent.handle(Delivered(statuses, (status("Alert", "g1"),)), 2.0))
    assert (end["status"], end["detail"]) == ("FAILURE", "failed: JobA; skipped: JobB, JobC, JobD")


def journaled(agent: Agent, journal: Journal, event: Event, now: float) -> list[Effect]:
    journal.write(event, now)
    journal.sync()
    return agent.handle(event, now)


def test_a_restart_resumes_from_the_journal(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    agent = Agent("agentB")
    for publication in PLAN.publications():
        if publication["agentname"] == "agentB":
            journaled(agent, journal, Incoming(publication), 0.0)
    g1 = (trigger("g1"), status("JobA", "g1"))
    [done] = runs(journaled(agent, journal, Delivered(key(agent, "JobB"), g1), 1.0))
    journaled(agent, journal, Finished(done, Result(True, "exit 0", 1.0, 0.1)), 2.0)
    [running] = runs(
        journaled(agent, journal, Delivered(key(agent, "JobB"), (trigger("g2"), status("JobA", "g2"))), 3.0)
    )
    journal.close()

    restarted = Agent("agentB", backoff=1.0)
    reopened = Journal(tmp_path)
    restarted.replay(reopened.read())
    reopened.close()
    assert restarted.wanted == agent.wanted
    assert restarted.handle(Delivered(key(restarted, "JobB"), g1), 5.0) == []  # finished: not again
    [interrupted] = restarted.interrupted(10.0)
    assert interrupted.run == running and interrupted.result.detail == "agent restarted"
    assert restarted.handle(interrupted, 10.0) == []  # JobB has retries left
    [retry] = runs(restarted.handle(Tick(), 11.0))
    assert (retry.gid, retry.attempt) == ("g2", 2)


def test_a_running_job_without_retries_fails_after_a_restart() -> None:
    agent = Agent("agentA")
    install(agent)
    runs(fire(agent, "JobA", "g1", "APPL_START"))
    [interrupted] = agent.interrupted(5.0)
    [failure] = published(agent.handle(interrupted, 5.0))
    assert (failure["status"], failure["detail"]) == ("FAILURE", "agent restarted")


def test_a_generation_stays_on_its_version_and_the_old_one_goes_when_unused() -> None:
    agent = Agent("agentA")
    install(agent)
    agent.handle(Delivered(key(agent, "APPL_START"), (trigger("g1"),)), 1.0)  # g1 on V
    workflow = load(WORKFLOWS / "payroll.xml")
    changed = translate(type(workflow)(workflow.name, (*workflow.jobs[:-1],), workflow.source))  # no Alert
    assert changed.version != V
    acks_v2 = acks(install(agent, changed))
    assert acks_v2 and {r for _, r in acks_v2} == {"OK"}
    assert agent.current("PAYROLL") == changed.version
    assert agent.handle(Delivered(key(agent, "APPL_START"), (trigger("g2"),)), 2.0) == []  # old version: no
    [start] = published(
        agent.handle(Delivered(key(agent, "APPL_START", version=changed.version), (trigger("g2"),)), 2.0)
    )
    assert start["version"] == changed.version
    assert runs(fire(agent, "JobA", "g1", "APPL_START"))  # g1's statuses carry V
    v2_job_a = (trigger("g1"), status("APPL_START", "g1"))
    assert agent.handle(Delivered(key(agent, "JobA", version=changed.version), v2_job_a), 3.0) == []

    cleanup = key(agent, "APPL_END", "SUBSCRIBE")
    agent.handle(Delivered(cleanup, (status("APPL_END", "g2", version=changed.version),)), 4.0)
    assert ("PAYROLL", V) in agent.deployments  # g1 still runs on V
    withdrawn = agent.handle(Delivered(cleanup, (status("APPL_END", "g1"),)), 5.0)
    assert ("PAYROLL", V) not in agent.deployments and withdrawn
    assert all(
        v == changed.version for _, v, _ in (agent.owners[k] for k in agent.wanted if "starts" not in k)
    )


def test_undeploy_withdraws_everything() -> None:
    agent = Agent("agentC")
    install(agent)
    undeploy = Publication(
        "AGENT_CTL",
        {
            "agentname": "agentC",
            "command": "UNDEPLOY",
            "content": "",
            "applname": "PAYROLL",
            "jobname": "*",
            "version": V,
        },
    )
    effects = agent.handle(Incoming(undeploy), 1.0)
    assert acks(effects) == [("UNDEPLOY", "OK")]
    assert agent.wanted == {} and agent.deployments == {}
    assert acks(agent.handle(Incoming(undeploy), 1.0)) == [("UNDEPLOY", "UNCHANGED")]
