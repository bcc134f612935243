"""The agent's state machine without sockets or processes: envelopes and firings in, effects out."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

import agents.forgetting
from agents.events import (
    Delivered,
    Effect,
    Emit,
    Event,
    Finished,
    Incoming,
    Lost,
    Result,
    Run,
    Start,
    TimePassed,
)
from agents.forgetting import DAY, SWEEP_EVERY
from agents.journal import Journal
from agents.run_queue import LOST
from agents.state import Agent
from broker.language import Publication
from tests.signing import DEPLOYER, signed, signed_trigger
from wfm.workflow import After, Job, Plan, Workflow, load, translate
from wfm.workflow.translate import encode
from workflow_messages import job_status
from workflow_messages.jobstate import JOBSTATE

WORKFLOWS = Path(__file__).parents[2] / "workflows"
PLAN = translate(load(WORKFLOWS / "payroll.xml"))
V = PLAN.version
MONDAY, FRIDAY = "2026.11.23", "2026.11.27"


def install(agent: Agent, plan: Plan = PLAN) -> list[Effect]:
    return [
        e
        for p in signed(plan.publications())
        if p["agentname"] == agent.name
        for e in agent.handle(Incoming(p), 0)
    ]


def published(effects: list[Effect]) -> list[Publication]:
    """What ``effects`` publish, but the states of jobs not ended (:func:`states`)."""
    return [e.publication for e in effects if isinstance(e, Emit) and e.publication.cls != JOBSTATE]


def states(effects: list[Effect]) -> list[tuple[str, str, str, str]]:
    """The JOBSTATEs ``effects`` publish: (job, gid, state, reason)."""
    return [
        (str(p["jobname"]), str(p["GID"]), str(p["state"]), str(p["reason"]))
        for e in effects
        if isinstance(e, Emit) and (p := e.publication).cls == JOBSTATE
    ]


def runs(effects: list[Effect]) -> list[Run]:
    return [e.run for e in effects if isinstance(e, Start)]


def key(agent: Agent, job: str, command: str = "COMPOSITESUBSCRIBE", version: str = V) -> str:
    return next(
        k
        for k, (_, v, j) in agent.owners.items()
        if j == job and v == version and agent.wanted[k].command == command
    )


def trigger(gid: str, date: str = MONDAY, at: float = 1.0) -> Publication:
    """Signed at ``at``, the agent's time in these tests (agents refuse one signed far from it)."""
    return signed_trigger("PAYROLL", gid, date, at)


def status(job: str, gid: str, value: str = "SUCCESS", version: str = V, **extra: Any) -> Publication:
    return job_status("PAYROLL", job, gid, value, "", version=version, agent="other", **extra)


def end_here(agent: Agent, gid: str, now: float) -> None:
    """agentB's jobs of ``gid`` skipped (JobA failed): the generation is over for agentB."""
    for job in ("JobB", "JobC"):
        failed = status("JobA", gid, "FAILURE", failed=["JobA"])
        agent.handle(Delivered(key(agent, job), (trigger(gid, at=now), failed)), now)


def fire(agent: Agent, job: str, gid: str, *after: str, date: str = MONDAY, now: float = 1.0) -> list[Effect]:
    pubs = (trigger(gid, date, at=now), *(status(a, gid) for a in after))
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
    effects = agent.handle(Incoming(DEPLOYER.sign(bad)), 0)
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
    assert agent.handle(TimePassed(), 11.9) == []
    [second] = runs(agent.handle(TimePassed(), 12.0))
    assert second.attempt == 2
    assert agent.handle(Finished(second, failed), 20.0) == []
    assert agent.next_wakeup() == 24.0  # doubled
    [third] = runs(agent.handle(TimePassed(), 24.0))
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
    [run] = runs(fire(agent, "JobA", "g1", "APPL_START"))
    agent.handle(Finished(run, Result(True, "exit 0", 1.0, 0.1)), 2.0)
    ends = (status("JobD", "g1"), status("Alert", "g1", "NORUN", skipped=True))
    [end] = published(agent.handle(Delivered(key(agent, "APPL_END"), ends), 2.0))
    assert (end["jobname"], end["status"], end["detail"]) == ("APPL_END", "SUCCESS", "skipped: Alert")
    assert agent.handle(Delivered(key(agent, "APPL_END"), ends), 3.0) == []  # no second APPL_END
    assert ("PAYROLL", "g1") not in agent.generations  # every job here published: over here
    assert agent.handle(Delivered(key(agent, "APPL_START"), (trigger("g1"),)), 4.0) == []  # late repeat


def test_a_failed_job_ends_the_generation_as_failure() -> None:
    agent = Agent("agentA")
    install(agent)
    agent.handle(Delivered(key(agent, "APPL_START"), (trigger("g1"),)), 1.0)
    ends = (
        status("JobD", "g1", "NORUN", skipped=True, failed=["JobA"]),
        status("Alert", "g1", failed=["JobA"]),
    )
    [end] = published(agent.handle(Delivered(key(agent, "APPL_END"), ends), 2.0))
    assert (end["status"], end["detail"]) == ("FAILURE", "failed: JobA; skipped: JobB, JobC, JobD")


def journaled(agent: Agent, journal: Journal, event: Event, now: float) -> list[Effect]:
    journal.write(event, now)
    journal.sync()
    return agent.handle(event, now)


def test_a_restart_resumes_from_the_journal(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    agent = Agent("agentB")
    for publication in signed(PLAN.publications()):
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
    assert reopened.recover(restarted) == len(PLAN.by_agent()["agentB"]) + 3
    reopened.close()
    assert restarted.wanted == agent.wanted and restarted.snapshot() == agent.snapshot()
    assert restarted.handle(Delivered(key(restarted, "JobB"), g1), 5.0) == []  # finished: not again
    assert list(restarted.running.values()) == [running]  # in its supervisor's hands: not started again
    assert restarted.handle(TimePassed(), 6.0) == []
    [success] = published(restarted.handle(Finished(running, Result(True, "exit 0", 3.0, 4.0)), 10.0))
    assert (success["GID"], success["status"], success["attempt"]) == ("g2", "SUCCESS", 1)


def test_a_run_that_succeeded_while_the_agent_was_down_is_a_success_without_retries() -> None:
    agent = Agent("agentA")
    install(agent)
    [run] = runs(fire(agent, "JobA", "g1", "APPL_START"))  # retries="0"
    restarted = Agent("agentA")
    restarted.restore(agent.snapshot())
    [success] = published(restarted.handle(Finished(run, Result(True, "exit 0 after 2 s", 1.0, 2.0)), 5.0))
    assert (success["status"], success["attempt"], success["detail"]) == ("SUCCESS", 1, "exit 0 after 2 s")


def test_a_lost_run_fails_and_is_never_retried() -> None:
    agent = Agent("agentB")
    install(agent)
    [run] = runs(fire(agent, "JobB", "g1", "JobA"))  # retries="2"
    [failure] = published(agent.handle(Lost(run), 5.0))
    assert (failure["status"], failure["detail"], failure["attempt"]) == ("FAILURE", LOST, 1)
    assert agent.next_wakeup() is None and agent.running == {}
    assert agent.handle(TimePassed(), 100.0) == []
    assert agent.handle(Lost(run), 6.0) == []  # a repeat changes nothing


def test_a_firing_delivered_twice_starts_one_run_before_and_after_a_restart() -> None:
    agent = Agent("agentB")
    install(agent)
    [run] = runs(fire(agent, "JobB", "g1", "JobA"))
    assert fire(agent, "JobB", "g1", "JobA") == []  # while it runs
    restarted = Agent("agentB")
    restarted.restore(agent.snapshot())
    assert fire(restarted, "JobB", "g1", "JobA") == []  # after a restart, still running
    restarted.handle(Finished(run, Result(True, "exit 0", 1.0, 0.1)), 2.0)
    assert fire(restarted, "JobB", "g1", "JobA") == []  # after it finished
    again = Agent("agentB")
    again.restore(restarted.snapshot())
    assert fire(again, "JobB", "g1", "JobA") == []


def test_a_snapshot_restores_the_same_state() -> None:
    agent = Agent("agentB", max_jobs=1, backoff=2.0)
    install(agent)
    [first] = runs(fire(agent, "JobB", "g1", "JobA"))
    assert runs(fire(agent, "JobB", "g2", "JobA") + fire(agent, "JobC", "g1", "JobA", date=FRIDAY)) == []
    [second] = runs(agent.handle(Finished(first, Result(False, "exit 1", 1.0, 0.1)), 2.0))  # g1: at 4.0
    end_here(agent, "g0", 2.0)
    restored = Agent("agentB", max_jobs=1, backoff=2.0)
    restored.restore(json.loads(json.dumps(agent.snapshot())))
    assert restored.snapshot() == agent.snapshot()
    assert restored.wanted == agent.wanted and restored.owners == agent.owners
    assert restored.deployments == agent.deployments and restored.next_wakeup() == 4.0
    assert restored.generations == agent.generations and restored.ended == agent.ended
    assert restored.current("PAYROLL") == agent.current("PAYROLL")
    end = Finished(second, Result(True, "exit 0", 2.0, 2.0))
    assert restored.handle(end, 4.0) == agent.handle(end, 4.0)


T0 = 1_800_000_000.0  # an epoch time on a minute boundary, as the agent's clock gives it


def test_a_generation_whose_appl_end_was_lost_is_forgotten_after_its_retention(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = Agent("agentB", forget_after=2 * DAY)
    install(agent)
    agent.handle(Delivered("PAYROLL starts", (status("APPL_START", "lost"),)), T0)  # its APPL_END never comes
    [running] = runs(fire(agent, "JobB", "busy", "JobA", now=T0))
    later = T0 + 2 * DAY + SWEEP_EVERY
    assert agent.handle(TimePassed(), later) == []
    assert agent.in_progress() == {("PAYROLL", "busy")}  # a run of its own still runs
    assert "forgot PAYROLL lost: not seen to end within 2 days" in caplog.text
    assert fire(agent, "JobB", "lost", "JobA", now=later) == []  # a late firing is a duplicate
    agent.handle(Finished(running, Result(True, "exit 0", T0, 1.0)), later + 1)
    agent.handle(TimePassed(), later + SWEEP_EVERY)
    assert agent.generations == {} and list(agent.ended) == [("PAYROLL", "lost"), ("PAYROLL", "busy")]
    agent.handle(TimePassed(), later + 2 * DAY + 2 * SWEEP_EVERY)
    assert agent.ended == {}  # remembered as long, then forgotten too


def test_an_ended_generation_stays_a_duplicate_however_many_end_after_it() -> None:
    agent = Agent("agentB", forget_after=DAY)
    install(agent)
    for n in range(10_001):
        end_here(agent, f"g{n}", T0 + n)
    assert fire(agent, "JobB", "g0", "JobA", now=T0 + DAY) == []  # a day's worth: still a duplicate
    [run] = runs(fire(agent, "JobB", "g0", "JobA", now=T0 + DAY + SWEEP_EVERY))  # forgotten
    assert run.gid == "g0"


def test_ended_generations_are_remembered_up_to_a_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded by age and by count: at a high rate, a day's worth would not fit in memory."""
    monkeypatch.setattr(agents.forgetting, "MAX_ENDED", 3)
    agent = Agent("agentB", forget_after=DAY)
    install(agent)
    for n in range(4):
        end_here(agent, f"g{n}", T0 + n)
    assert [gid for _, gid in agent.ended] == ["g1", "g2", "g3"]


def test_replaying_the_journal_forgets_the_same_as_the_live_agent(tmp_path: Path) -> None:
    """The live agent forgets at a tick the journal leaves out (it changed nothing else); the
    replay forgets at the next journaled event of the same minute, with the same cutoff."""
    journal = Journal(tmp_path)
    agent = Agent("agentB", forget_after=DAY)
    for publication in signed(PLAN.publications()):
        if publication["agentname"] == "agentB":
            journaled(agent, journal, Incoming(publication), T0)
    journaled(agent, journal, Delivered("PAYROLL starts", (status("APPL_START", "old"),)), T0)
    journaled(agent, journal, Delivered("PAYROLL starts", (status("APPL_START", "new"),)), T0 + 90)
    assert agent.handle(TimePassed(), T0 + DAY + 61) == []  # not journaled: forgets "old", not "new"
    journaled(agent, journal, Delivered("PAYROLL starts", (status("APPL_START", "next"),)), T0 + DAY + 100)
    journal.close()
    assert set(agent.generations) == {("PAYROLL", "new"), ("PAYROLL", "next")}
    restarted = Agent("agentB", forget_after=DAY)
    reopened = Journal(tmp_path)
    reopened.recover(restarted)
    reopened.close()
    assert restarted.snapshot() == agent.snapshot()


def test_a_snapshot_from_before_the_age_bound_is_restored_and_timed_at_the_first_sweep() -> None:
    agent = Agent("agentB")
    install(agent)
    agent.handle(Delivered("PAYROLL starts", (status("APPL_START", "g1"),)), T0)
    snapshot = agent.snapshot()
    snapshot["generations"] = [entry[:6] for entry in snapshot["generations"]]
    snapshot["ended"], snapshot["swept"] = [["PAYROLL", "g0"]], None
    del snapshot["swept"]
    restored = Agent("agentB")
    restored.restore(snapshot)
    restored.handle(TimePassed(), T0 + 5)
    assert restored.ended == {("PAYROLL", "g0"): T0} and restored.generations["PAYROLL", "g1"].since == T0


@pytest.mark.parametrize(
    ("jobs", "fragment"),
    [
        ([{"job": "JobB", "command": "x", "after": [["JobA", "sometimes"]]}], "after must be"),
        ([{"job": "JobB", "command": "x", "after": [["JobA", "success"]]}] * 2, "names job 'JobB' twice"),
        ([{"job": "JobB", "command": "x"}], "runs after nothing"),
        ([{"job": "JobB", "virtual": True}], "only APPL_START and APPL_END are virtual"),
        ([{"job": "JobB", "command": " ", "after": [["JobA", "success"]]}], "non-empty command"),
        ("JobB", "non-empty list of job objects"),
        # each failed once the deployment was half made: ERROR, yet in the next snapshot
        (
            [{"job": "APPL_START", "virtual": True}, {"job": "APPL_END", "virtual": True, "graph": {}}],
            "no end job",
        ),
        (
            [
                {"job": "JobB", "command": "x", "after": [["JobA", "success"]]},
                {"job": "a'b\"c", "command": "x", "after": [["JobB", "success"]]},
            ],
            "job name 'a",
        ),
        ([{"job": "JobB", "command": "x", "after": [["x\ny", "success"]]}], "predecessor 'x"),
        (
            [{"job": "JobB", "command": "x", "after": [["JobA", "success"]], "timeout": float("nan")}],
            "finite",
        ),
        ([{"job": "JobB", "command": "x", "after": [["JobA", "success"]], "timeout": 1e400}], "finite"),
        # a dict: more of the content than its jobs
        (
            {"jobs": [{"job": "JobB", "command": "x", "after": [["JobA", "success"]]}], "split": "../x"},
            "split",
        ),
        (
            {"jobs": [{"job": "JobB", "command": "x", "after": [["JobA", "success"]]}], "split": ["a"]},
            "split",
        ),
    ],
)
def test_a_bad_deploy_is_refused_with_its_reason_and_the_agent_goes_on(jobs: object, fragment: str) -> None:
    agent = Agent("agentB")
    [good] = [p for p in PLAN.publications() if p["agentname"] == "agentB"]
    fields = jobs if isinstance(jobs, dict) else {"jobs": jobs}
    content = encode({"workflow": "PAYROLL", "version": V, **fields})
    bad = Publication("AGENT_CTL", {**good.fields, "content": content})
    [ack] = published(agent.handle(Incoming(DEPLOYER.sign(bad)), 0))
    assert ack["result"] == "ERROR" and fragment in str(ack["detail"])
    assert agent.deployments == {} and agent.wanted == {}
    assert agent.snapshot()["deployments"] == []
    assert acks(install(agent)) == [("DEPLOY", "OK")]  # the good one is taken afterwards


def test_a_snapshot_envelope_that_cannot_be_applied_is_skipped_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An older agent installed half of a DEPLOY it then refused, and kept its envelope: restoring
    that snapshot raised, and the agent could not start."""
    agent = Agent("agentB")
    install(agent)
    snapshot = json.loads(json.dumps(agent.snapshot()))
    [good] = snapshot["deployments"]
    bad = [
        "BROKEN",
        "v0",
        "DEPLOY",
        "*",
        json.dumps({"workflow": "BROKEN", "version": "v0", "jobs": [{"job": "a'b"}]}),
    ]
    snapshot["deployments"] = [{"order": 0, "ended": False, "envelopes": [bad]}, good]
    restored = Agent("agentB")
    restored.restore(snapshot)
    assert list(restored.deployments) == [("PAYROLL", V)] and restored.current("PAYROLL") == V
    assert "snapshot: skipped a DEPLOY envelope of BROKEN version v0" in caplog.text


def test_a_job_after_a_failure_is_skipped_and_the_skip_carries_on() -> None:
    agent = Agent("agentB")
    install(agent)
    failed = status("JobA", "g1", "FAILURE", failed=["JobA"])
    [skip] = published(agent.handle(Delivered(key(agent, "JobB"), (trigger("g1"), failed)), 1.0))
    assert (skip["status"], skip["skipped"], skip["failed"]) == ("NORUN", 1, "JobA")
    assert skip["detail"] == "skipped: JobA ended FAILURE"
    agent_c = Agent("agentC")
    install(agent_c)
    after_skip = (trigger("g1"), skip, status("JobC", "g1", "NORUN"))
    [skip_d] = published(agent_c.handle(Delivered(key(agent_c, "JobD"), after_skip), 1.0))
    assert (skip_d["status"], skip_d["skipped"], skip_d["detail"]) == (
        "NORUN",
        1,
        "skipped: JobB was skipped",
    )
    [alert] = runs(agent_c.handle(Delivered(key(agent_c, "Alert"), (trigger("g1"), failed)), 1.0))
    [done] = published(agent_c.handle(Finished(alert, Result(True, "exit 0", 1.0, 0.1)), 2.0))
    assert (done["status"], done["skipped"], done["failed"]) == ("SUCCESS", 0, "JobA")  # carried on
    ok = status("JobA", "g2")
    [not_taken] = published(agent_c.handle(Delivered(key(agent_c, "Alert"), (trigger("g2"), ok)), 3.0))
    assert (not_taken["status"], not_taken["skipped"]) == ("NORUN", 1)
    assert ("PAYROLL", "g1") in agent_c.ended  # both its jobs published: over for agentC


def test_a_version_in_parts_is_taken_only_once_all_its_parts_are_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """APPL_START came in the coordinator's first part, APPL_END in its last: a trigger between
    them started a generation that never ended. Nor does a job fire on a version whose other jobs
    here are still coming (the generation would be over here once the jobs known had published)."""
    whole = [  # each agent's content in one part: its length depends on the checkout's path (cwd)
        len(str(p["content"]))
        for p in translate(load(WORKFLOWS / "payroll.xml")).publications()
        if p["agentname"] in ("agentA", "agentB")
    ]
    monkeypatch.setattr(importlib.import_module("wfm.workflow.translate"), "PART_LIMIT", min(whole))
    plan = translate(load(WORKFLOWS / "payroll.xml"))
    parts = {
        name: [p for p in signed(plan.publications()) if p["agentname"] == name]
        for name in ("agentA", "agentB")
    }
    assert [len(parts[name]) for name in parts] == [2, 2]
    coordinator, b = Agent("agentA"), Agent("agentB")
    coordinator.handle(Incoming(parts["agentA"][0]), 0.0)
    b.handle(Incoming(parts["agentB"][0]), 0.0)
    assert coordinator.current("PAYROLL") is None and b.current("PAYROLL") is None
    assert (
        published(coordinator.handle(Delivered(key(coordinator, "APPL_START"), (trigger("g1"),)), 1.0)) == []
    )
    assert fire(b, "JobB", "g1", "JobA") == [] and b.refused["firing"] == 1
    restored = Agent("agentB")  # a restart counts the same parts
    restored.restore(json.loads(json.dumps(b.snapshot())))
    assert restored.current("PAYROLL") is None
    for agent in (coordinator, b):
        [ack] = published(agent.handle(Incoming(parts[agent.name][1]), 2.0))
        assert (ack["result"], agent.current("PAYROLL")) == ("OK", V)
    [start] = published(coordinator.handle(Delivered(key(coordinator, "APPL_START"), (trigger("g2"),)), 3.0))
    assert (start["jobname"], start["GID"]) == ("APPL_START", "g2")
    assert runs(fire(b, "JobB", "g2", "JobA")) and ("PAYROLL", "g2") not in b.ended


def test_parts_of_two_splits_of_one_version_never_make_it_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same version deployed from two folders (a longer cwd) splits one agent's jobs in two
    parts both times, at different places: part 1 of one split and part 2 of the other left job
    B out and counted complete. Each part names its split; the agent counts one split's parts."""
    jobs = (Job("A", "b", "true " + "x" * 300), Job("B", "b", "true"), Job("C", "b", "true"))
    short, long = (
        Workflow("SPLIT", jobs, source=f"{folder}/split.xml") for folder in ("/w", "/w" + "/y" * 60)
    )
    translation = importlib.import_module("wfm.workflow.translate")

    def parts(workflow: Workflow) -> list[Publication]:
        return [p for p in translate(workflow).publications() if p["agentname"] == "b"]

    def jobs_in(part: Publication) -> list[str]:
        return [entry["job"] for entry in json.loads(str(part["content"]))["jobs"]]

    for limit in range(300, 2000):  # the first part limit at which the two splits differ
        monkeypatch.setattr(translation, "PART_LIMIT", limit)
        first, second = parts(short), parts(long)
        if len(first) == len(second) == 2 and jobs_in(first[0]) != jobs_in(second[0]):
            break
    else:
        raise AssertionError("no part limit splits the two otherwise")
    assert not {"A", "B", "C"} <= {*jobs_in(second[0]), *jobs_in(first[1])}  # one is left out
    agent = Agent("b")
    one, two, three = signed([second[0], first[1], first[0]])  # in the order they are sent
    assert published(agent.handle(Incoming(one), 0.0))[0]["result"] == "OK"
    agent.handle(Incoming(two), 0.0)
    version = translate(short).version
    assert agent.current("SPLIT") is None  # not complete: a job is missing
    agent.handle(Incoming(three), 0.0)
    assert agent.current("SPLIT") == version
    assert {"A", "B", "C"} <= set(agent.deployments["SPLIT", version].jobs)


def test_an_agent_keeps_no_generation_of_a_version_it_does_not_host() -> None:
    """An agent the new version leaves out keeps its APPL_START subscription (until undeployed):
    it recorded every generation of the new version, for --keep-days."""
    agent = Agent("agentB")
    install(agent)
    agent.handle(Delivered("PAYROLL starts", (status("APPL_START", "g1", version="0123456789ab"),)), 1.0)
    agent.handle(Delivered("PAYROLL starts", (status("APPL_START", "g2"),)), 1.0)
    assert list(agent.generations) == [("PAYROLL", "g2")]


def test_a_coordinator_left_without_appl_start_by_a_new_version_starts_no_more_generations() -> None:
    """It kept its old version current (the last one with APPL_START here): every trigger then
    started two generations, one on each version, by the old and the new coordinator."""

    def plan(first: str, second: str) -> Plan:
        jobs = (Job("A", first, "true"), Job("B", second, "true", after=(After("A"),)))
        return translate(Workflow("CO", jobs))

    old, new = plan("a", "x"), plan("x", "a")
    agent = Agent("a")
    install(agent, old)
    install(agent, new)
    assert agent.current("CO") == new.version
    go = signed_trigger("CO", "g1", MONDAY, at=1.0)
    assert published(agent.handle(Delivered(key(agent, "APPL_START", version=old.version), (go,)), 1.0)) == []
