"""CANCEL, RERUN and the queries, in the agent's state machine: no sockets, no processes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from agents.events import Delivered, Finished, Incoming, Result, Start, Stop
from agents.queries import ANSWER_BUDGET, LogRequest, answer_query
from agents.runner import log_tail
from agents.state import Agent
from broker.language import Publication
from tests.agents.test_state import (
    FRIDAY,
    MONDAY,
    PLAN,
    acks,
    fire,
    install,
    key,
    published,
    runs,
    status,
    trigger,
)
from tests.signing import DEPLOYER
from workflow_messages.operations import CANCEL, MAX_CONTENT, RERUN, operation, query


def operate(agent: Agent, command: str, now: float = 5.0, **content: object) -> list:  # type: ignore[type-arg]
    return agent.handle(Incoming(DEPLOYER.sign(operation(agent.name, "PAYROLL", command, content))), now)


def ack_of(effects: list) -> tuple[str, str]:  # type: ignore[type-arg]
    [ack] = [p for p in published(effects) if p.cls == "AGENT_ACK"]
    return str(ack["result"]), str(ack["detail"])


def test_cancel_stops_the_running_jobs_and_drops_the_queued_ones() -> None:
    agent = Agent("agentB", max_jobs=1)
    install(agent)
    [running] = runs(fire(agent, "JobB", "g1", "JobA", date=FRIDAY))
    assert runs(fire(agent, "JobC", "g1", "JobA", date=FRIDAY)) == []  # queued
    effects = operate(agent, CANCEL, gid="g1")
    assert [e.run for e in effects if isinstance(e, Stop)] == [running]
    [norun] = [p for p in published(effects) if p.cls == "JOBSTATUS"]
    assert (norun["jobname"], norun["status"], norun["detail"]) == ("JobC", "NORUN", "cancelled")
    assert ack_of(effects) == ("OK", "1 running stopped, 1 queued not run")
    # JobB has retries="2": stopped, it is not retried
    [stopped] = published(agent.handle(Finished(running, Result(False, "exit -15 after 1 s", 1.0, 1.0)), 6.0))
    assert (stopped["status"], stopped["detail"]) == ("FAILURE", "cancelled: exit -15 after 1 s")
    assert agent.pending == [] and agent.running == {}
    # every job of this agent has published in g1: the generation is over here
    assert ack_of(operate(agent, CANCEL, gid="g1")) == ("UNCHANGED", "generation g1 is over")


def test_a_generation_cancelled_twice_is_unchanged() -> None:
    agent = Agent("agentB", max_jobs=1)
    install(agent)
    runs(fire(agent, "JobB", "g1", "JobA", date=FRIDAY))
    operate(agent, CANCEL, gid="g1")
    assert ack_of(operate(agent, CANCEL, gid="g1")) == ("UNCHANGED", "generation g1 was cancelled already")


def test_jobs_of_a_cancelled_generation_publish_norun_once_and_never_run() -> None:
    agent = Agent("agentB")
    install(agent)
    assert (
        ack_of(operate(agent, CANCEL, gid="g1"))[1]
        == "generation g1 not seen here yet: its jobs will not run"
    )
    restarted = Agent("agentB")  # the cancellation is in the state a restart restores
    restarted.restore(json.loads(json.dumps(agent.snapshot())))
    for each in (agent, restarted):
        effects = fire(each, "JobB", "g1", "JobA")
        assert runs(effects) == []
        assert [(p["jobname"], p["status"]) for p in published(effects)] == [("JobB", "NORUN")]
        assert fire(each, "JobB", "g1", "JobA") == []  # a firing delivered again: nothing
        assert runs(fire(each, "JobB", "g2", "JobA"))  # other generations run


def test_the_coordinator_ends_a_cancelled_generation_cancelled() -> None:
    agent = Agent("agentA")
    install(agent)
    agent.handle(Delivered(key(agent, "APPL_START"), (trigger("g1"),)), 1.0)
    operate(agent, CANCEL, gid="g1")
    ends = (status("JobD", "g1", "NORUN"), status("Alert", "g1", "NORUN", skipped=True))
    [end] = published(agent.handle(Delivered(key(agent, "APPL_END"), ends), 2.0))
    assert (end["jobname"], end["status"], end["detail"]) == (
        "APPL_END",
        "CANCELLED",
        "cancelled; skipped: Alert",
    )


def test_a_status_from_a_cancelled_generation_stops_the_jobs_after_it_before_the_cancel_comes() -> None:
    """The status of a run a CANCEL stopped may reach the next job's agent before that agent's own
    CANCEL: an alert on failure must not run then, and the generation must still end CANCELLED."""
    stopped = status("JobA", "g1", "FAILURE", failed=["JobA"], cancelled=True)
    agent = Agent("agentC")
    install(agent)
    effects = agent.handle(Delivered(key(agent, "Alert"), (trigger("g1"), stopped)), 1.0)
    assert runs(effects) == []
    [norun] = published(effects)
    assert (norun["status"], norun["detail"], norun["cancelled"]) == ("NORUN", "cancelled", 1)
    restarted = Agent("agentC")  # kept over a restart
    restarted.restore(json.loads(json.dumps(agent.snapshot())))
    [jobd] = published(fire(restarted, "JobD", "g1", "JobB", "JobC", now=2.0))
    assert (jobd["status"], jobd["cancelled"]) == ("NORUN", 1)
    coordinator = Agent("agentA")  # its CANCEL not come either
    install(coordinator)
    coordinator.handle(Delivered(key(coordinator, "APPL_START"), (trigger("g1"),)), 1.0)
    [end] = published(coordinator.handle(Delivered(key(coordinator, "APPL_END"), (jobd, norun)), 3.0))
    assert end["status"] == "CANCELLED" and str(end["detail"]).startswith("cancelled; failed: JobA")
    # unsigned, a status stops no running job: only the signed CANCEL does
    agentb = Agent("agentB")
    install(agentb)
    [running] = runs(fire(agentb, "JobB", "g2", "JobA"))
    upstream = status("JobA", "g2", "FAILURE", failed=["JobA"], cancelled=True)
    late = agentb.handle(Delivered(key(agentb, "JobC"), (trigger("g2"), upstream)), 2.0)
    assert runs(late) == [] and not [e for e in late if isinstance(e, Stop)]
    assert [e.run for e in operate(agentb, CANCEL, gid="g2") if isinstance(e, Stop)] == [running]
    [other] = runs(fire(agentb, "JobB", "g3", "JobA"))  # other generations run
    assert other.gid == "g3"


def test_cancel_and_rerun_must_be_signed_and_move_no_deployed_version() -> None:
    agent = Agent("agentB")
    install(agent)
    unsigned = operation("agentB", "PAYROLL", CANCEL, {"gid": "g1"})
    assert ack_of(agent.handle(Incoming(unsigned), 1.0)) == ("REFUSED", "unsigned envelope")
    operate(agent, CANCEL, gid="g1")
    assert {result for _, result in acks(install(agent))} == {"UNCHANGED"}  # not a downgrade


@pytest.mark.parametrize(
    ("content", "fragment"),
    [({}, "needs a gid"), ({"gid": "g1"}, "new gid"), ({"gid": "g1", "new": "g2", "reuse": "JobB"}, "list")],
)
def test_a_bad_rerun_is_an_error(content: dict[str, object], fragment: str) -> None:
    agent = Agent("agentB")
    install(agent)
    result, detail = ack_of(operate(agent, RERUN, **content))
    assert result == "ERROR" and fragment in detail


def test_rerun_from_a_job_reuses_the_outcomes_of_the_jobs_before_it() -> None:
    agent = Agent("agentB")
    install(agent)
    [run] = runs(fire(agent, "JobB", "g1", "JobA", date=MONDAY))
    agent.handle(Finished(run, Result(False, "exit 1 after 0.1 s", 1.0, 0.1)), 2.0)
    fire(agent, "JobC", "g1", "JobA", date=MONDAY)  # NORUN: not scheduled on Mondays
    effects = operate(agent, RERUN, gid="g1", new="g1-r1", reuse=["JobC", "JobA"])
    assert ack_of(effects) == ("OK", "1 outcomes of g1 reused here")
    assert ack_of(operate(agent, RERUN, gid="g1", new="g1-r1", reuse=["JobC"]))[0] == "UNCHANGED"
    assert ack_of(operate(agent, RERUN, gid="g0", new="g1-r1", reuse=[]))[0] == "ERROR"  # taken
    assert ack_of(operate(agent, RERUN, gid="g0", new="g1", reuse=[]))[0] == "ERROR"  # it exists
    [reused] = published(fire(agent, "JobC", "g1-r1", "JobA", date=MONDAY))
    assert (reused["status"], reused["GID"]) == ("NORUN", "g1-r1")
    assert str(reused["detail"]).startswith("reused from g1: not scheduled on Monday")
    [again] = runs(fire(agent, "JobB", "g1-r1", "JobA", date=MONDAY))  # rerun from JobB: it runs
    assert (again.gid, again.attempt) == ("g1-r1", 1)


def test_a_reused_or_cancelled_status_names_the_failures_upstream() -> None:
    """APPL_END knows failures only from its end jobs' ``failed``: a reused Alert (it ran on
    JobA's failure) that dropped it made a rerun end SUCCESS, naming jobs that ran as skipped."""
    agent = Agent("agentC")
    install(agent)

    def alert_after_a_failed(gid: str, now: float) -> list:  # type: ignore[type-arg]
        failed = status("JobA", gid, "FAILURE", failed=["JobA"])
        return agent.handle(Delivered(key(agent, "Alert"), (trigger(gid), failed)), now)

    [alert] = runs(alert_after_a_failed("g1", 1.0))
    agent.handle(Finished(alert, Result(True, "exit 0", 1.0, 0.1)), 2.0)
    assert ack_of(operate(agent, RERUN, gid="g1", new="g1-r1", reuse=["JobA", "Alert"]))[0] == "OK"
    [reused] = published(alert_after_a_failed("g1-r1", 3.0))
    assert (reused["status"], reused["failed"]) == ("SUCCESS", "JobA")
    operate(agent, CANCEL, gid="g2")
    [cancelled] = published(alert_after_a_failed("g2", 4.0))
    assert (cancelled["status"], cancelled["detail"], cancelled["failed"]) == ("NORUN", "cancelled", "JobA")


def test_the_workflows_query_lists_deployments_and_the_coordinator_has_the_graph() -> None:
    a, b = Agent("agentA"), Agent("agentB")
    install(a)
    install(b)
    for agent, coordinator, jobs in ((a, True, ["JobA"]), (b, False, ["JobB", "JobC"])):
        reply = answer_query(agent, query("*", "WORKFLOWS", "r1", {}))
        assert isinstance(reply, Publication) and reply["result"] == "OK" and reply["agentname"] == agent.name
        [deployment] = json.loads(str(reply["content"]))["deployments"]
        assert (deployment["workflow"], deployment["current"], deployment["coordinator"]) == (
            "PAYROLL",
            True,
            coordinator,
        )
        assert sorted(deployment["jobs"]) == jobs
        assert (deployment["graph"] is not None) == coordinator
    assert json.loads(str(answer_query(a, query("*", "WORKFLOWS", "r", {}))["content"]))["deployments"][0][  # type: ignore[index]
        "graph"
    ]["JobD"] == [["JobB", "success"], ["JobC", "success"]]
    assert answer_query(a, query("agentB", "WORKFLOWS", "r1", {})) is None  # not addressed to it


def test_the_runs_query_gives_recent_generations_newest_first() -> None:
    agent = Agent("agentB")
    install(agent)
    for gid in ("g1", "g2", "x3"):
        fire(agent, "JobC", gid, "JobA", date=MONDAY)
    runs(fire(agent, "JobB", "g2", "JobA", date=MONDAY))

    def generations(**content: object) -> list[dict[str, object]]:
        reply = answer_query(agent, query("*", "RUNS", "r", {"workflow": "PAYROLL", **content}))
        assert isinstance(reply, Publication) and reply["result"] == "OK", reply
        return json.loads(str(reply["content"]))["generations"]  # type: ignore[no-any-return]

    assert [g["gid"] for g in generations()] == ["x3", "g2", "g1"]
    assert [g["gid"] for g in generations(gid="g", limit=1)] == ["g2"]
    [g2] = generations(gid="g2")
    assert g2["date"] == "2026-11-23" and g2["busy"] == {"JobB": "running"}
    assert g2["jobs"]["JobC"]["status"] == "NORUN"  # type: ignore[index]
    bad = answer_query(agent, query("*", "RUNS", "r", {"workflow": "PAYROLL", "limit": 0}))
    assert isinstance(bad, Publication) and bad["result"] == "ERROR" and "limit" in str(bad["content"])


def test_the_runs_query_names_a_generation_that_ended_and_is_no_longer_listed() -> None:
    agent = Agent("agentB")
    agent.ended["PAYROLL", "20261101-backfill"] = 0.0  # ended, its outcome dropped since

    def content(gid: str) -> dict[str, object]:
        reply = answer_query(agent, query("*", "RUNS", "r", {"workflow": "PAYROLL", "gid": gid}))
        assert isinstance(reply, Publication) and reply["result"] == "OK", reply
        return json.loads(str(reply["content"]))  # type: ignore[no-any-return]

    assert content("20261101-backfill")["ended"] == ["20261101-backfill"]
    assert "ended" not in content("20261101")  # a prefix: only an exact gid is looked up


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[" * 100_000, "nested too deeply"),  # json.loads raised RecursionError: the agent ended
        ('{"limit":' + "1" * 5000 + "}", "digits"),
        (" " * (MAX_CONTENT + 1), "exceeds the limit"),
    ],
)
def test_a_hostile_query_is_answered_error(content: str, fragment: str) -> None:
    agent = Agent("agentB")
    hostile = Publication(
        "AGENT_QUERY", {"agentname": "*", "query": "RUNS", "request": "r1", "content": content}
    )
    reply = answer_query(agent, hostile)
    assert isinstance(reply, Publication) and reply["result"] == "ERROR"
    assert fragment in json.loads(str(reply["content"]))["error"]


def test_a_logs_query_is_checked_before_anything_is_read(tmp_path: Path) -> None:
    agent = Agent("agentB")
    install(agent)
    assert runs(fire(agent, "JobB", "g1", "JobA"))

    def ask(**content: object) -> Publication | LogRequest | None:
        return answer_query(agent, query("agentB", "LOGS", "r", {"workflow": "PAYROLL", **content}))

    assert ask(gid="g1", job="JobB") == LogRequest("r", "PAYROLL", "g1", "JobB", 0)
    for bad, fragment in (
        ({"gid": "g1", "job": "JobA"}, "not deployed on agentB"),
        ({"gid": "other", "job": "JobB"}, "knows no generation"),
        ({"gid": "../x", "job": "JobB"}, "invalid gid"),
    ):
        reply = ask(**bad)
        assert (
            isinstance(reply, Publication)
            and reply["result"] == "ERROR"
            and fragment in str(reply["content"])
        )
    folder = tmp_path / "logs" / "PAYROLL" / "g1"
    folder.mkdir(parents=True)
    (folder / "JobB.1.log").write_bytes(b"first\n")
    (folder / "JobB.2.log").write_bytes(b"x" * 10 + b"\xff end\n")
    tail = log_tail(tmp_path, "PAYROLL", "g1", "JobB", 0, limit=8)
    assert tail == {
        "attempts": [1, 2],
        "attempt": 2,
        "size": 16,
        "truncated": True,
        "ended": False,
        "started": None,  # no runs record: logs written by hand
        "text": "xx\ufffd end\n",
    }
    assert log_tail(tmp_path, "PAYROLL", "g1", "JobB", 1)["text"] == "first\n"
    with pytest.raises(ValueError, match="no attempt 3"):
        log_tail(tmp_path, "PAYROLL", "g1", "JobB", 3)
    with pytest.raises(ValueError, match="no log of JobC"):
        log_tail(tmp_path, "PAYROLL", "g1", "JobC", 0)


BAD_GID = "../../../secret"


def test_a_gid_from_a_message_is_checked_before_it_names_a_folder() -> None:
    """Without TLS anyone may publish a Trigger, and its gid names the folder of the run logs: a
    bad one is refused (a firing is logged and counted, an envelope or a query answered ERROR)
    and the agent goes on."""
    coordinator, agent = Agent("agentA"), Agent("agentB")
    install(coordinator)
    install(agent)
    assert coordinator.handle(Delivered(key(coordinator, "APPL_START"), (trigger(BAD_GID),)), 1.0) == []
    assert fire(agent, "JobB", BAD_GID, "JobA") == []
    assert (coordinator.refused["firing"], agent.refused["firing"]) == (1, 1)
    assert coordinator.generations == {} and agent.generations == {} and agent.outcomes == {}
    for command, content in ((CANCEL, {"gid": BAD_GID}), (RERUN, {"gid": "g1", "new": "-r1", "reuse": []})):
        result, detail = ack_of(operate(agent, command, **content))
        assert result == "ERROR" and detail.startswith("invalid gid")
    assert agent.generations == {}
    assert runs(fire(agent, "JobB", "g1", "JobA"))  # it goes on


def test_a_log_is_read_only_inside_the_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "logs" / "W").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "A.1.log").write_text("password\n")
    with pytest.raises(ValueError, match="outside"):
        log_tail(state, "W", BAD_GID, "A", 0)
    with pytest.raises(ValueError, match="outside"):
        log_tail(state, "W", "g1", str(tmp_path / "secret" / "A"), 0)  # an absolute job name


def test_rerun_refuses_to_reuse_a_job_whose_outcome_it_no_longer_keeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An agent that dropped the old generation's outcomes must not answer OK: the job it cannot
    republish would run again in the rerun, which was to reuse it."""
    monkeypatch.setattr("agents.publishing.MAX_OUTCOMES", 2)
    agent = Agent("agentB")
    install(agent)
    for gid in ("g1", "g2", "g3"):  # JobC: NORUN (not on Mondays), recorded; g1's dropped at g3
        fire(agent, "JobC", gid, "JobA", date=MONDAY)
    result, detail = ack_of(operate(agent, RERUN, gid="g1", new="g1-r1", reuse=["JobA", "JobC"]))
    assert result == "ERROR"
    assert detail.startswith("agentB has no outcome of JobC in g1 to reuse (it keeps those of its last 2")
    assert ("PAYROLL", "g1-r1") not in agent.generations
    assert ack_of(operate(agent, RERUN, gid="g3", new="g3-r1", reuse=["JobA", "JobC"])) == (
        "OK",
        "1 outcomes of g3 reused here",
    )


def test_a_restarted_agent_stops_again_the_running_jobs_of_a_cancelled_generation() -> None:
    agent = Agent("agentB")
    install(agent)
    [cancelled] = runs(fire(agent, "JobB", "g1", "JobA", date=FRIDAY))
    [other] = runs(fire(agent, "JobB", "g2", "JobA", date=FRIDAY))
    operate(agent, CANCEL, gid="g1")
    restarted = Agent("agentB")
    restarted.restore(json.loads(json.dumps(agent.snapshot())))
    assert restarted.resume() == [Start(cancelled), Start(other), Stop(cancelled)]


def busy_agent(generations: int, jobs: int) -> Agent:
    """agentB, with ``jobs`` outcomes in each of ``generations`` generations of PAYROLL."""
    agent = Agent("agentB")
    install(agent)
    record = {"status": "SUCCESS", "detail": "exit 0 after 12.3 s, " + "x" * 40, "attempt": 1}
    for n in range(generations):
        jobs_ = {f"Job{j:02}": {**record, "started": 1.7e9 + n, "duration": 12.3} for j in range(jobs)}
        agent.outcomes["PAYROLL", f"g{n:03}"] = {"date": "2026-11-23", "jobs": jobs_}
    return agent


def test_an_answer_too_large_for_a_message_keeps_what_fits_and_says_truncated() -> None:
    """wfm rerun asks for 200 generations: at 40 jobs the answer was over a megabyte, more than a
    frame, and the agent failed to publish it."""
    agent = busy_agent(200, 40)
    reply = answer_query(agent, query("*", "RUNS", "r", {"workflow": "PAYROLL", "limit": 200}))
    assert isinstance(reply, Publication) and reply["result"] == "OK"
    assert ANSWER_BUDGET // 2 < len(str(reply["content"])) <= ANSWER_BUDGET
    content = json.loads(str(reply["content"]))
    assert content["truncated"] is True and 50 < len(content["generations"]) < 200
    assert [g["gid"] for g in content["generations"][:2]] == ["g199", "g198"]  # the newest kept
    small = answer_query(agent, query("*", "RUNS", "r", {"workflow": "PAYROLL", "limit": 2}))
    assert isinstance(small, Publication) and json.loads(str(small["content"]))["truncated"] is False


def test_a_workflows_answer_too_large_cuts_long_commands_first() -> None:
    agent = Agent("agentB")
    install(agent)
    long = "echo " + "y" * ANSWER_BUDGET  # two of them: more than a frame
    for deployment in agent.deployments.values():
        for job, info in deployment.jobs.items():
            if job in ("JobB", "JobC"):
                deployment.jobs[job] = replace(info, command=long)
    reply = answer_query(agent, query("*", "WORKFLOWS", "r", {}))
    assert isinstance(reply, Publication) and reply["result"] == "OK"
    content = json.loads(str(reply["content"]))
    [deployment] = content["deployments"]
    assert content["truncated"] is True and deployment["version"] == PLAN.version
    assert deployment["jobs"]["JobB"]["command"] == long[:1000]
