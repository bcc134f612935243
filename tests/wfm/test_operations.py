"""``wfm workflows``, ``runs``, ``logs``, ``cancel`` and ``rerun`` against real brokers and agents
(the agents' tests' overlay: B1 - B2 - B3, agentA, agentB, agentC)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from unittest.mock import ANY

import pytest
from click.testing import CliRunner

from broker.client import BlockingClient
from broker.errors import RemoteError
from broker.language import Publication
from tests.agents.test_processes import MONDAY, WORKFLOWS, Overlay, overlay
from tests.processes import WFM, brokers, quiet, wait_for
from wfm.cli import cli, main
from wfm.history.landing import Landing
from wfm.monitor import Monitor
from wfm.operations import Deployed, Session
from workflow_messages import JOBSTATUS, TRIGGER

__all__ = ["overlay"]  # the fixture

STATUS = {"class": "JOBSTATUS", "applname": "PAYROLL"}

SLOW = """<workflow name="SLOW">
  <job name="Sleep" agent="agentA"><command>echo started; sleep 60</command></job>
  <job name="After" agent="agentB"><after job="Sleep"/><command>echo after</command></job>
  <job name="Alert" agent="agentC"><after job="Sleep" on="failure"/><command>echo alert</command></job>
</workflow>
"""


def wfm(overlay: Overlay, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WFM, *args, "--broker", str(overlay.uris["B1"])], capture_output=True, text=True, timeout=timeout
    )


def lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_workflows_runs_and_logs(overlay: Overlay) -> None:
    overlay.deploy(WORKFLOWS / "payroll.xml")
    [payroll] = lines(wfm(overlay, "workflows", "-o", "json"))
    assert (payroll["workflow"], payroll["coordinator"]) == ("PAYROLL", "agentA")
    assert payroll["agents"] == {"agentA": ["JobA"], "agentB": ["JobB", "JobC"], "agentC": ["Alert", "JobD"]}
    table = wfm(overlay, "workflows")
    assert "PAYROLL" in table.stdout and "3 agents answered" in table.stderr
    overlay.trigger("PAYROLL", ["mon"], MONDAY)
    overlay.wait_end("PAYROLL", ["mon"])
    [run] = lines(wfm(overlay, "runs", "PAYROLL", "-o", "json"))
    assert (run["gid"], run["date"], run["status"]) == ("mon", "2026-11-23", "SUCCESS")
    assert run["jobs"] == {
        "JobA": "SUCCESS",
        "JobB": "SUCCESS",
        "JobC": "NORUN",
        "JobD": "SUCCESS",
        "Alert": "NORUN",  # skipped: one word, as the history and the reports say
    }
    assert isinstance(run["duration"], float) and run["duration"] >= 0
    assert "mon" in wfm(overlay, "runs", "PAYROLL").stdout
    log = wfm(overlay, "logs", "PAYROLL", "JobB", "--gid", "mon")
    assert log.returncode == 0 and log.stdout == "PAYROLL mon 2026-11-23: JobB compute\n"
    assert "attempt 1 (attempts 1) on agentB" in log.stderr
    [answer] = lines(wfm(overlay, "logs", "PAYROLL", "JobB", "--gid", "mon", "-o", "json"))
    assert (answer["agent"], answer["truncated"], answer["ended"]) == ("agentB", False, True)
    norun = wfm(overlay, "logs", "PAYROLL", "JobC", "--gid", "mon")  # JobC runs on Fridays
    assert (norun.returncode, norun.stdout) == (0, ""), norun.stderr
    assert (
        norun.stderr
        == "wfm: JobC did not run in mon (NORUN: not scheduled on Monday 2026-11-23), so it has no log\n"
    )
    unknown = wfm(overlay, "runs", "NOSUCH")
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("wfm: error: no agent has workflow NOSUCH deployed (3 agents answered")
    nojob = wfm(overlay, "logs", "PAYROLL", "JobZ", "--gid", "mon")
    assert nojob.returncode == 1 and "PAYROLL has no job JobZ" in nojob.stderr
    nogid = wfm(overlay, "logs", "PAYROLL", "JobB", "--gid", "other")
    assert nogid.returncode == 1 and "agentB knows no generation other of PAYROLL" in nogid.stderr


def test_cancel_stops_a_running_job_and_the_generation_ends_cancelled(
    overlay: Overlay, tmp_path: Path
) -> None:
    slow = tmp_path / "slow.xml"
    slow.write_text(SLOW)
    overlay.deploy(slow)
    overlay.trigger("SLOW", ["g1"])
    deadline = time.monotonic() + 20
    while "RUNNING" not in wfm(overlay, "runs", "SLOW").stdout:  # the table shows Sleep:RUNNING
        assert time.monotonic() < deadline, "Sleep never ran"
    began = time.monotonic()
    acks = lines(wfm(overlay, "cancel", "SLOW", "--gid", "g1", "-o", "json"))
    # agentB's and agentC's CANCELs race Sleep's cancelled FAILURE from agentA: either stops Alert,
    # and the generation may be over at agentB and agentC before their CANCEL comes
    answers = {a["agent"]: (a["result"], a["detail"]) for a in acks}
    assert answers.pop("agentA")[0] == "OK" and sorted(answers) == ["agentB", "agentC"]
    assert all(answer in (("OK", ANY), ("UNCHANGED", "generation g1 is over")) for answer in answers.values())
    overlay.wait_end("SLOW", ["g1"])
    assert time.monotonic() - began < 15  # not the 60 s of the sleep
    statuses = overlay.statuses["SLOW", "g1"]
    assert (statuses["APPL_END"]["status"], statuses["Sleep"]["status"]) == ("CANCELLED", "FAILURE")
    assert str(statuses["Sleep"]["detail"]).startswith("cancelled: exit -15")
    assert (statuses["Alert"]["status"], statuses["Alert"]["detail"]) == ("NORUN", "cancelled")
    assert (statuses["After"]["status"], statuses["After"]["skipped"]) == ("NORUN", 1)  # after a failure
    again = lines(wfm(overlay, "cancel", "SLOW", "--gid", "g1", "-o", "json"))
    assert {a["result"] for a in again} == {"UNCHANGED"}
    overlay.agents["agentC"].send_signal(signal.SIGSTOP)  # an agent that does not answer
    try:
        silent = wfm(overlay, "cancel", "SLOW", "--gid", "g2", "--timeout", "2")
    finally:
        overlay.agents["agentC"].send_signal(signal.SIGCONT)
    assert silent.returncode == 3
    assert silent.stderr == "wfm: error: no answer within 2 s from the agent of SLOW's Alert\n"


def test_a_deployment_retires_the_agents_it_leaves_out(overlay: Overlay, tmp_path: Path) -> None:
    """The coordinator moves from agentA to agentC: left alone, agentA went on starting every
    generation on the old version too, and each job ran twice."""
    step = WORKFLOWS / "scripts" / "step.sh"

    def moved(coordinator: str) -> Path:
        file = tmp_path / f"{coordinator}.xml"
        file.write_text(
            f"""<workflow name="MOVED">
  <job name="Start" agent="{coordinator}"><command>sh {step} start</command></job>
  <job name="Work" agent="agentB"><after job="Start"/><command>sh {step} work</command></job>
</workflow>"""
        )
        return file

    overlay.deploy(moved("agentA"))
    overlay.trigger("MOVED", ["g1"])
    overlay.wait_end("MOVED", ["g1"])
    reports = {r["agent"]: r for r in lines(wfm(overlay, "deploy", str(moved("agentC")), "-o", "json"))}
    assert reports["agentA"]["retired"] and reports["agentA"]["ok"] == 1
    assert not reports["agentB"]["retired"] and not reports["agentC"]["retired"]
    said = wfm(overlay, "deploy", str(moved("agentC")))  # again: agentA holds nothing of it now
    assert said.returncode == 0 and "agentA" not in said.stdout, said
    [workflow] = lines(wfm(overlay, "workflows", "-o", "json"))
    assert workflow["coordinator"] == "agentC" and sorted(workflow["agents"]) == ["agentB", "agentC"]
    assert sorted(workflow["held"]) == ["agentB", "agentC"]  # agentA, idle, dropped it at once
    overlay.trigger("MOVED", ["g2"])
    overlay.wait_end("MOVED", ["g2"])
    time.sleep(1.0)  # a second generation, started by agentA, would have run by now
    assert overlay.records("MOVED", "g2") == {"Start": 1, "Work": 1}
    assert overlay.statuses["MOVED", "g2"]["Start"]["agentname"] == "agentC"


def test_rerun_from_the_failed_job(overlay: Overlay) -> None:
    overlay.deploy(WORKFLOWS / "payroll.xml")
    (overlay.output / "fail").mkdir(parents=True)
    (overlay.output / "fail" / "JobB").touch()
    overlay.trigger("PAYROLL", ["g1"], MONDAY)
    overlay.wait_end("PAYROLL", ["g1"])
    assert overlay.states("PAYROLL", "g1")["JobB"] == "FAILURE"
    (overlay.output / "fail" / "JobB").unlink()
    done = wfm(overlay, "rerun", "PAYROLL", "--gid", "g1", "--from", "JobB")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "g1-r1\n"
    overlay.wait_end("PAYROLL", ["g1-r1"])
    assert overlay.states("PAYROLL", "g1-r1")["APPL_END"] == "SUCCESS"
    assert str(overlay.statuses["PAYROLL", "g1-r1"]["JobA"]["detail"]).startswith("reused from g1: exit 0")
    assert overlay.records("PAYROLL", "g1-r1") == {"JobB": 1, "JobD": 1}  # JobA did not run again
    full = wfm(overlay, "rerun", "PAYROLL", "--gid", "g1", "-o", "json")
    assert json.loads(full.stdout) == {"workflow": "PAYROLL", "gid": "g1-r2", "rerun_of": "g1", "from": None}
    overlay.wait_end("PAYROLL", ["g1-r2"])
    assert overlay.records("PAYROLL", "g1-r2") == {"JobA": 1, "JobB": 1, "JobD": 1}
    unknown = wfm(overlay, "rerun", "PAYROLL", "--gid", "nosuch")
    assert unknown.returncode == 1 and "no agent remembers generation nosuch of PAYROLL" in unknown.stderr


def test_a_failed_job_raises_an_alert_until_an_operator_acknowledges_it(overlay: Overlay) -> None:
    """The agent of a job that fails publishes a retained alert asking for an ack: ``wfm alerts``
    lists it from another broker after the run ended; acknowledged, it is gone for everyone, and
    its ack went out as an ACK publication naming the alert."""
    overlay.deploy(WORKFLOWS / "payroll.xml")
    (overlay.output / "fail").mkdir(parents=True, exist_ok=True)
    (overlay.output / "fail" / "JobB").touch()
    try:
        overlay.trigger("PAYROLL", ["alerted"], MONDAY)
        overlay.wait_end("PAYROLL", ["alerted"])
    finally:
        (overlay.output / "fail" / "JobB").unlink()
    listed = [r for r in lines(wfm(overlay, "alerts", "-o", "json")) if r["gid"] == "alerted"]
    assert [(r["id"], r["job"], r["status"], r["priority"]) for r in listed] == [
        ("PAYROLL.JobB.alerted", "JobB", "FAILURE", 8)
    ]
    with BlockingClient(str(overlay.uris["B3"]), "watcher") as watcher:
        watcher.subscribe("[class,eq,ACK]")
        done = wfm(overlay, "alerts", "ack", "PAYROLL.JobB.alerted")
        assert done.returncode == 0 and done.stderr == "acknowledged PAYROLL.JobB.alerted\n", done.stderr
        ack = watcher.receive(timeout=10)
        assert ack is not None
        assert (ack.publication["mid"], ack.publication["kind"]) == ("PAYROLL.JobB.alerted", "client")
    after = [r for r in lines(wfm(overlay, "alerts", "-o", "json")) if r["gid"] == "alerted"]
    assert after == []
    again = wfm(overlay, "alerts", "ack", "PAYROLL.JobB.alerted")
    assert again.returncode == 1 and "no alert PAYROLL.JobB.alerted waits" in again.stderr


def test_no_agent_answering_is_a_timeout_exit_3() -> None:
    with brokers({"B1": []}) as uris:
        for command in (["workflows"], ["runs", "PAYROLL"], ["cancel", "PAYROLL", "--gid", "g1"]):
            done = subprocess.run(
                [WFM, *command, "--broker", str(uris["B1"]), "--timeout", "1"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert (done.returncode, done.stderr) == (3, "wfm: error: no agent answered within 1 s\n"), (
                command
            )


def test_runs_from_a_store_reads_the_landing_log_without_spark(tmp_path: Path) -> None:
    store = tmp_path / "history"
    rows = [
        {"class": "Trigger", "applname": "PAYROLL", "GID": "g1", "schedule": "2026.11.20"},
        {**STATUS, "GID": "g1", "jobname": "JobA", "status": "SUCCESS", "started": 10.0, "duration": 2.0},
        {**STATUS, "GID": "g1", "jobname": "APPL_END", "status": "SUCCESS", "started": 13.0},
        {**STATUS, "GID": "g2", "jobname": "JobA", "status": "FAILURE", "started": 20.0, "duration": 1.0},
        {**STATUS, "GID": "g2", "jobname": "APPL_END", "status": "CANCELLED", "detail": "cancelled"},
        {**STATUS, "applname": "OTHER", "GID": "g3", "jobname": "JobA", "status": "SUCCESS"},
    ]
    with Landing(store / "landing") as landing:
        for number, row in enumerate(rows):
            attributes = {k: v for k, v in row.items() if k != "class"}
            landing.append(Publication(str(row["class"]), attributes), float(number), "tester", f"id{number}")
    done = CliRunner().invoke(cli, ["runs", "PAYROLL", "--store", str(store), "-o", "json"])
    assert done.exit_code == 0, done.output
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["gid"], r["status"], r["duration"]) for r in records] == [
        ("g2", "CANCELLED", 1.0),
        ("g1", "SUCCESS", 3.0),
    ]
    assert records[1]["date"] == "2026-11-20" and records[1]["jobs"] == {"JobA": "SUCCESS"}
    assert "wfm: 2 generations of PAYROLL in" in done.stderr and "Spark" not in done.stderr
    for extra in (["--watch"], ["--broker", "socket://127.0.0.1:1/B1"]):
        usage = CliRunner().invoke(cli, ["runs", "PAYROLL", "--store", str(store), *extra])
        assert usage.exit_code == 2 and "--store reads the store only" in usage.stderr
    neither = CliRunner().invoke(cli, ["runs", "PAYROLL"], env={"WFM_BROKER": None})
    assert neither.exit_code == 2 and "give --broker URI (or $WFM_BROKER), or --store DIR" in neither.stderr
    missing = CliRunner().invoke(cli, ["runs", "PAYROLL", "--store", str(tmp_path / "none")])
    assert missing.exit_code == 1 and "no history store at" in missing.stderr


def test_rerun_from_a_job_does_not_ask_to_reuse_a_skipped_job_and_reports_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job skipped in the generation has no outcome anywhere (its agents would refuse to reuse
    it): it is not in ``reuse``. An agent's refusal names the agent and its reason."""
    graph = {
        "JobA": [["APPL_START", "success"]],
        "JobB": [["JobA", "success"]],
        "Alert": [["JobA", "failure"]],
    }
    deployed = Deployed(
        "W", "v1", {"v1"}, {"a": ["Alert", "JobA"], "b": ["JobB"]}, graph=graph, coordinator="a"
    )
    deployed.jobs = {job: {"agent": "a" if job != "JobB" else "b"} for job in graph}
    monitor = Monitor()
    monitor.receive({"class": TRIGGER, "applname": "W", "GID": "g1", "schedule": "2026.11.23"})
    for job, status, detail in (
        ("JobA", "SUCCESS", ""),
        ("JobB", "FAILURE", ""),
        ("APPL_END", "FAILURE", "failed: JobB; skipped: Alert"),
    ):
        monitor.receive(
            {
                "class": JOBSTATUS,
                "applname": "W",
                "GID": "g1",
                "jobname": job,
                "status": status,
                "detail": detail,
            }
        )
    sent: dict[str, object] = {}

    async def operate(
        workflow: str, command: str, content: dict[str, object], *_: object
    ) -> dict[str, tuple[str, str]]:
        sent.update(content)
        return {"a": ("OK", "1 outcomes of g1 reused here"), "b": ("ERROR", "b has no outcome of JobA in g1")}

    session = Session(None, None, 1.0)  # type: ignore[arg-type]
    monkeypatch.setattr(session, "deployed", lambda workflow: asyncio.sleep(0, deployed))
    monkeypatch.setattr(session, "_runs", lambda deployed, limit, gid: asyncio.sleep(0, monitor))
    monkeypatch.setattr(session, "operate", operate)
    monkeypatch.setattr(session, "advertise_operations", lambda workflow: asyncio.sleep(0))
    with pytest.raises(RemoteError, match=r"^rerun of g1 refused: b: ERROR b has no outcome of JobA in g1$"):
        asyncio.run(session.rerun("W", "g1", "JobB", lambda p: p))
    assert sent == {"gid": "g1", "new": "g1-r1", "reuse": ["JobA"]}  # not Alert


def test_an_answer_cut_to_fit_a_message_is_said_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment = {
        "workflow": "W",
        "version": "v1",
        "current": True,
        "coordinator": True,
        "graph": {"J": [["APPL_START", "success"]]},
        "jobs": {"J": {"command": "true", "schedule": "daily", "timeout": None, "retries": 0}},
    }
    state = {"status": "SUCCESS", "detail": "", "attempt": 1, "started": 1.0, "duration": 1.0}
    generation = {"gid": "g1", "date": "2026-11-23", "jobs": {"J": state}, "busy": {}, "cancelled": False}
    answers = {
        "WORKFLOWS": {"deployments": [deployment], "truncated": False},
        "RUNS": {"generations": [generation], "truncated": True},
    }

    async def ask(kind: str, *_: object, **__: object) -> dict[str, dict[str, object]]:
        return {"agentA": answers[kind]}

    @asynccontextmanager
    async def connect(uri: object, timeout: float) -> AsyncIterator[Session]:
        session = Session(None, uri, timeout)  # type: ignore[arg-type]
        monkeypatch.setattr(session, "ask", ask)
        yield session

    monkeypatch.setattr(Session, "connect", connect)
    assert main(["runs", "W", "--broker", "socket://127.0.0.1:1/B1", "-o", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["gid"] == "g1"
    assert err == "wfm: warning: agentA left out what does not fit in one answer\n"
    assert main(["workflows", "--broker", "socket://127.0.0.1:1/B1", "-o", "json"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_trigger_refuses_a_workflow_no_agent_has_at_once_and_publishes_nothing(overlay: Overlay) -> None:
    """It waited 10 s for an APPL_START that never came, then failed, and left the Trigger
    published: a historian kept a generation nobody started."""
    overlay.deploy(WORKFLOWS / "payroll.xml")
    with BlockingClient(overlay.uris["B3"]) as historian:
        historian.subscribe("[class,eq,Trigger],[applname,isPresent,''],[GID,isPresent,'']")
        quiet(overlay.uris)
        began = time.monotonic()
        unknown = wfm(overlay, "trigger", "NOSUCH", "--gid", "g-none", "--wait", "60")
        # not the wait for an APPL_START (60 s): the bound leaves a busy machine (other tests,
        # -n 2) the seconds a Python command takes to start
        assert time.monotonic() - began < 30
        assert (unknown.returncode, unknown.stdout) == (1, "")
        assert unknown.stderr == (
            "wfm: error: cannot trigger NOSUCH: no agent has workflow NOSUCH deployed"
            " (3 agents answered; workflows: PAYROLL); nothing published\n"
        )
        assert historian.receive(timeout=1) is None
        known = wfm(overlay, "trigger", "PAYROLL", "--gid", "g-known", "--date", "2026-11-23")
        assert (known.returncode, known.stdout) == (0, "g-known\n"), known.stderr
        delivery = historian.receive(timeout=5)
        assert delivery is not None and delivery.publication["GID"] == "g-known"
    overlay.wait_end("PAYROLL", ["g-known"])


def test_trigger_with_no_agent_answering_warns_and_publishes_as_before() -> None:
    """Nobody to ask is no answer: the Trigger goes out as it did before the question (a broker
    may keep it for a coordinator that is away), and the wait for its APPL_START decides."""
    with brokers({"B1": []}) as uris, BlockingClient(uris["B1"]) as subscriber:
        subscriber.subscribe("[class,eq,Trigger],[applname,isPresent,''],[GID,isPresent,'']")
        done = subprocess.run(
            [WFM, "trigger", "PAYROLL", "--gid", "g-any", "--wait", "0", "--broker", str(uris["B1"])],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert (done.returncode, done.stdout) == (0, "g-any\n"), done.stderr
        assert done.stderr == (
            "wfm: warning: no agent answered within 5 s: cannot tell whether PAYROLL is deployed\n"
        )
        delivery = subscriber.receive(timeout=5)
        assert delivery is not None and delivery.publication["GID"] == "g-any"


def test_a_scheduler_identity_that_may_not_ask_triggers_unchecked(certs: Path) -> None:
    """The default ACL lets a scheduler publish Triggers only, not questions to agents."""
    with brokers({"B1": []}, certs=certs) as uris:
        done = subprocess.run(
            [WFM, "trigger", "PAYROLL", "--gid", "g-cron", "--wait", "0", "--broker", str(uris["B1"])],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "WFM_TLS": str(certs), "WFM_IDENTITY": "scheduler"},
        )
    assert (done.returncode, done.stdout) == (0, "g-cron\n"), done.stderr


def test_cancel_of_a_gid_no_agent_knows_sends_nothing_unless_forced(overlay: Overlay) -> None:
    """A mistyped gid exited 0, every agent quietly cancelling a generation that will never come."""
    overlay.deploy(WORKFLOWS / "payroll.xml")
    overlay.trigger("PAYROLL", ["g1"], MONDAY)
    overlay.wait_end("PAYROLL", ["g1"])
    typo = wfm(overlay, "cancel", "PAYROLL", "--gid", "g11")
    assert (typo.returncode, typo.stdout) == (1, "")
    assert typo.stderr == (
        "wfm: error: no agent knows generation g11 of PAYROLL: nothing cancelled"
        " (--force cancels it before it starts)\n"
    )
    forced = lines(wfm(overlay, "cancel", "PAYROLL", "--gid", "g11", "--force", "-o", "json"))
    # OK, not "cancelled already": the first sent nothing
    assert {a["agent"]: a["result"] for a in forced} == {"agentA": "OK", "agentB": "OK", "agentC": "OK"}
    over = lines(wfm(overlay, "cancel", "PAYROLL", "--gid", "g1", "-o", "json"))
    assert {a["result"] for a in over} == {"UNCHANGED"}  # known: sent, and over already


def half_on(tmp_path: Path, coordinator: str) -> Path:
    """HALF: its first job (so its coordinator) on ``coordinator``, the second on agentB."""
    half = tmp_path / "half.xml"
    half.write_text(
        f"""<workflow name="HALF">
  <job name="Start" agent="{coordinator}"><command>true</command></job>
  <job name="Work" agent="agentB"><after job="Start"/><command>true</command></job>
</workflow>"""
    )
    return half


def test_a_deployment_whose_agent_is_not_up_sends_nothing_and_names_it(
    overlay: Overlay, tmp_path: Path
) -> None:
    """The coordinator's agent down: agentB took its jobs, and the workflow stayed half-deployed
    (coordinator "?"), every trigger of it starting nothing."""
    done = wfm(overlay, "deploy", str(half_on(tmp_path, "agentZ")), "--timeout", "2")
    assert (done.returncode, done.stdout) == (3, "")
    last = done.stderr.splitlines()[-1]
    assert last.startswith("wfm: error: HALF ") and last.endswith(
        ": no answer within 2 s from agentZ (are they running?): nothing sent, not deployed"
    )
    assert lines(wfm(overlay, "workflows", "-o", "json")) == []  # agentB has nothing of it


def _restarted(overlay: Overlay, name: str) -> None:
    """Start agent ``name`` again and wait until it is connected with its requests in place (its
    log says so): on a busy machine it takes seconds, longer than a deployment's --timeout 3."""
    log = overlay.tmp / f"{name}.log"
    line = f"agent {name} connected to "
    before = log.read_text().count(line)
    overlay.start(name)
    wait_for(lambda: log.read_text().count(line) > before, f"{name} connected", timeout=60)


def test_a_deployment_whose_agent_dies_once_envelopes_are_out_is_rolled_back(
    overlay: Overlay, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator's agent answers that it is up, then dies on its DEPLOY (after agentB
    installed its part): the version is withdrawn from agentB, and the error says so."""
    overlay.agents["agentA"].kill()
    overlay.agents["agentA"].wait(10)
    monkeypatch.setenv("WFM_FAILPOINTS", "agent.journaled.DEPLOY")
    _restarted(overlay, "agentA")
    monkeypatch.delenv("WFM_FAILPOINTS")
    quiet(overlay.uris)
    half = half_on(tmp_path, "agentA")
    done = wfm(overlay, "deploy", str(half), "--timeout", "3")
    assert done.returncode == 3, done.stderr
    assert "agentB: 1 OK" in done.stdout
    last = done.stderr.splitlines()[-1]
    assert last.startswith("wfm: error: HALF ") and last.endswith(
        ": no answer within 3 s from agentA (are they running?); rolled back: withdrawn from agentB;"
        " agentA may hold part of it: deploy again once back"
    )
    assert overlay.agents["agentA"].wait(10) == -signal.SIGKILL  # died where the failpoint is
    assert lines(wfm(overlay, "workflows", "-o", "json")) == []  # agentB has nothing of it
    _restarted(overlay, "agentA")  # back, with the DEPLOY it journaled: deployed again, whole
    quiet(overlay.uris)
    assert "agentB: 1 OK" in overlay.deploy(half)  # withdrawn from it: installed anew
    [deployed] = lines(wfm(overlay, "workflows", "-o", "json"))
    assert deployed["agents"] == {"agentA": ["Start"], "agentB": ["Work"]}


def test_undeploy_takes_the_workflows_name(overlay: Overlay) -> None:
    overlay.deploy(WORKFLOWS / "payroll.xml")
    done = wfm(overlay, "undeploy", "PAYROLL", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert sorted((r["agent"], r["ok"]) for r in lines(done)) == [("agentA", 1), ("agentB", 1), ("agentC", 1)]
    assert "wfm: deploying" not in done.stderr
    assert lines(wfm(overlay, "workflows", "-o", "json")) == []
    again = wfm(overlay, "undeploy", "PAYROLL")
    assert (again.returncode, again.stderr) == (
        1,
        "wfm: error: no agent that answered has workflow PAYROLL deployed\n",
    )
    neither = wfm(overlay, "undeploy", "nosuch.xml")
    assert neither.returncode == 2 and "no file nosuch.xml" in neither.stderr


def test_undeploy_says_undeploying(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its progress said "deploying PAYROLL ..." (shown once a step takes a second)."""
    import wfm.cli.workflow as module

    said: list[str] = []

    @contextmanager
    def progress(what: str) -> Iterator[Callable[[str], None]]:
        said.append(what)
        yield lambda _: None

    async def deploy_plan(*_: object) -> list[object]:
        return []

    monkeypatch.setattr(module, "progress", progress)
    monkeypatch.setattr(module, "deploy_plan", deploy_plan)
    uri = "socket://127.0.0.1:1/B1"
    assert main(["undeploy", str(WORKFLOWS / "payroll.xml"), "--broker", uri]) == 0
    [what] = said
    assert what.startswith("undeploying PAYROLL ") and what.endswith(f" through {uri}")
