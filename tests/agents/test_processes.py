"""Agents end to end: real ``wfm broker`` processes in a line B1 - B2 - B3, one ``wfm agent`` per
agent name (agentA on B1, agentB on B2, agentC on B3), ``wfm deploy`` through B2, triggers published
at B3. Runs are counted from what the jobs themselves leave under ``$WFM_OUTPUT``, not from statuses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from broker.client import BlockingClient
from broker.language import Publication
from broker.transport.uri import BrokerURI
from tests.processes import WFM, brokers, quiet, status, wait_for
from tests.transport.harness import free_port
from wfm.signing import signer_of
from workflow_messages import trigger, trigger_advertisement

WORKFLOWS = Path(__file__).parents[2] / "workflows"
STEP = WORKFLOWS / "scripts" / "step.sh"
LINE = {"B1": [], "B2": ["B1"], "B3": ["B2"]}
HOMES = {"agentA": "B1", "agentB": "B2", "agentC": "B3"}
MONDAY, FRIDAY = "2026.11.23", "2026.11.27"


class Overlay:
    """Brokers, agents and an observer that publishes triggers and collects every JOBSTATUS."""

    def __init__(self, uris: dict[str, BrokerURI], tmp: Path) -> None:
        self.uris, self.tmp, self.output = uris, tmp, tmp / "out"
        self.agents: dict[str, subprocess.Popen[str]] = {}
        self.observe()
        self.statuses: dict[tuple[str, str], dict[str, Publication]] = {}

    def observe(self) -> None:
        """(Re)connect the observer at B3: it publishes triggers and receives every status."""
        self.observer = BlockingClient(self.uris["B3"], "observer")
        self.observer.advertise(trigger_advertisement())
        self.observer.subscribe("[class,eq,JOBSTATUS],[applname,isPresent,'']")

    def start(self, name: str, *extra: str) -> None:
        with (self.tmp / f"{name}.log").open("a") as log:  # the child keeps its own descriptor
            self.agents[name] = subprocess.Popen(
                [
                    WFM,
                    "-v",
                    "agent",
                    "--name",
                    name,
                    "--broker",
                    str(self.uris[HOMES[name]]),
                    "--state-dir",
                    str(self.tmp / name),
                    "--retry-backoff",
                    "0.2",
                    *extra,
                ],
                stderr=log,
                text=True,
                env={**os.environ, "WFM_OUTPUT": str(self.output)},
            )

    def deploy(self, file: Path) -> str:
        done = subprocess.run(
            [WFM, "deploy", str(file), "--broker", str(self.uris["B2"]), "--timeout", "20"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def trigger(self, workflow: str, gids: list[str], date: str = MONDAY) -> None:
        for gid in gids:
            # signed by the key wfm deploy made under this test's $XDG_STATE_HOME, as wfm trigger does
            day = datetime.strptime(date, "%Y.%m.%d").date()
            self.observer.publish(signer_of(None).sign_publication(trigger(workflow, gid, day)))

    def wait_end(self, workflow: str, gids: list[str], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not all("APPL_END" in self.statuses.get((workflow, g), {}) for g in gids):
            assert time.monotonic() < deadline, f"generations did not end: {self.statuses}"
            self.collect(0.5)

    def collect(self, timeout: float) -> None:
        """Keep the next status, if one arrives within ``timeout`` seconds."""
        delivery = self.observer.receive(timeout)
        if delivery is not None:
            p = delivery.publication
            self.statuses.setdefault((str(p["applname"]), str(p["GID"])), {})[str(p["jobname"])] = p

    def states(self, workflow: str, gid: str) -> dict[str, str]:
        return {job: str(p["status"]) for job, p in self.statuses[workflow, gid].items()}

    def records(self, workflow: str, gid: str) -> dict[str, int]:
        """Job -> number of records it appended in that generation (one per run)."""
        directory = self.output / workflow / gid
        return {p.stem: len(p.read_text().splitlines()) for p in directory.glob("*.txt")}

    def stop(self) -> None:
        for process in self.agents.values():
            process.terminate()
        for name, process in self.agents.items():
            assert process.wait(10) == 0, f"{name} exited with {process.returncode}"
            assert "Traceback" not in (self.tmp / f"{name}.log").read_text()
        self.observer.close()


@pytest.fixture
def overlay(tmp_path: Path) -> Iterator[Overlay]:
    with brokers(LINE, heartbeat=1.0) as uris:
        world = Overlay(uris, tmp_path)
        try:
            for name in HOMES:
                world.start(name, "--max-jobs", "8")
            quiet(uris)
            yield world
        finally:
            world.stop()


def test_payroll_on_a_monday_and_on_a_friday(overlay: Overlay) -> None:
    first = overlay.deploy(WORKFLOWS / "payroll.xml")
    assert "agentA: 1 OK" in first and "agentB: 1 OK" in first  # one DEPLOY envelope per agent
    again = overlay.deploy(WORKFLOWS / "payroll.xml")
    assert "agentA: 1 UNCHANGED" in again and " OK" not in again
    quiet(overlay.uris)
    overlay.trigger("PAYROLL", ["mon"], MONDAY)
    overlay.trigger("PAYROLL", ["fri"], FRIDAY)
    overlay.wait_end("PAYROLL", ["mon", "fri"])
    monday = overlay.states("PAYROLL", "mon")
    assert monday == {
        "APPL_START": "SUCCESS",
        "JobA": "SUCCESS",
        "JobB": "SUCCESS",
        "JobC": "NORUN",
        "JobD": "SUCCESS",
        "Alert": "NORUN",  # the failure branch, not taken: skipped
        "APPL_END": "SUCCESS",
    }
    assert overlay.states("PAYROLL", "fri")["JobC"] == "SUCCESS"
    assert overlay.records("PAYROLL", "mon") == {"JobA": 1, "JobB": 1, "JobD": 1}
    assert overlay.records("PAYROLL", "fri") == {"JobA": 1, "JobB": 1, "JobC": 1, "JobD": 1}
    job_b = overlay.statuses["PAYROLL", "mon"]["JobB"]
    assert (
        job_b["agentname"] == "agentB" and job_b["attempt"] == 1 and str(job_b["detail"]).startswith("exit 0")
    )
    log = overlay.tmp / "agentB" / "logs" / "PAYROLL" / "mon" / "JobB.1.log"
    assert "PAYROLL mon 2026-11-23: JobB compute" in log.read_text()


def test_the_failure_branch(overlay: Overlay) -> None:
    overlay.deploy(WORKFLOWS / "recovery.xml")
    quiet(overlay.uris)
    (overlay.output / "fail").mkdir(parents=True)
    (overlay.output / "fail" / "Load").touch()
    overlay.trigger("RECOVERY", ["bad"])
    overlay.wait_end("RECOVERY", ["bad"])
    (overlay.output / "fail" / "Load").unlink()
    overlay.trigger("RECOVERY", ["good"])
    overlay.wait_end("RECOVERY", ["good"])
    bad, good = overlay.states("RECOVERY", "bad"), overlay.states("RECOVERY", "good")
    assert (bad["Load"], bad["Rollback"], bad["Report"], bad["APPL_END"]) == (
        "FAILURE",
        "SUCCESS",
        "SUCCESS",
        "FAILURE",
    )
    assert str(overlay.statuses["RECOVERY", "bad"]["APPL_END"]["detail"]) == "failed: Load"
    assert good["Rollback"] == "NORUN" and good["APPL_END"] == "SUCCESS"  # a skip status: not run
    assert overlay.statuses["RECOVERY", "good"]["Rollback"]["skipped"] == 1
    assert overlay.records("RECOVERY", "good") == {"Fetch": 1, "Load": 1}

    undeploy = [
        WFM,
        "undeploy",
        str(WORKFLOWS / "recovery.xml"),
        "--broker",
        str(overlay.uris["B1"]),
        "-o",
        "json",
    ]
    done = subprocess.run(undeploy, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["ok"] for line in done.stdout.splitlines()] == [1, 1, 1]
    quiet(overlay.uris)
    overlay.trigger("RECOVERY", ["after"])
    time.sleep(1.0)
    overlay.collect(0.5)
    assert ("RECOVERY", "after") not in overlay.statuses


def workflow(tmp: Path, name: str, middle: str) -> Path:
    """A three-job chain whose middle job (on agentB) is ``middle``, an XML fragment."""
    path = tmp / f"{name}.xml"
    path.write_text(f"""<workflow name="{name}">
  <job name="First" agent="agentA"><command>sh {STEP} first</command></job>
  {middle}
  <job name="Last" agent="agentC"><after job="Middle"/><command>sh {STEP} last</command></job>
</workflow>""")
    return path


def test_a_job_timeout(overlay: Overlay) -> None:
    middle = (
        f'<job name="Middle" agent="agentB" timeout="1"><after job="First"/>'
        f"<command>sleep 30; sh {STEP} middle</command></job>"
    )
    overlay.deploy(workflow(overlay.tmp, "SLOW", middle))
    quiet(overlay.uris)
    overlay.trigger("SLOW", ["g1"])
    overlay.wait_end("SLOW", ["g1"])
    status = overlay.statuses["SLOW", "g1"]["Middle"]
    assert status["status"] == "FAILURE" and str(status["detail"]).startswith("timed out after 1 s")
    assert 1 <= float(status["duration"]) < 5
    assert overlay.states("SLOW", "g1")["APPL_END"] == "FAILURE"
    assert overlay.statuses["SLOW", "g1"]["Last"]["skipped"] == 1  # skipped, not run


def middle_running(overlay: Overlay, name: str, seconds: float) -> None:
    """Deploy the chain ``name`` whose Middle (on agentB) takes ``seconds``, trigger its g1, and
    return once Middle has started."""
    marker = overlay.tmp / f"{name}-middle-started"
    middle = (
        f'<job name="Middle" agent="agentB"><after job="First"/>'
        f"<command>touch {marker}; sleep {seconds:g}; sh {STEP} middle</command></job>"
    )
    overlay.deploy(workflow(overlay.tmp, name, middle))
    quiet(overlay.uris)
    overlay.trigger(name, ["g1"])
    wait_for(marker.exists, "Middle started")


@pytest.mark.parametrize("restart", ["while-it-runs", "after-it-ended"])
def test_an_agent_killed_mid_job_runs_it_once_and_publishes_its_outcome(
    overlay: Overlay, restart: str
) -> None:
    """kill -9 of the agent while its job runs (retries 0): the job's supervisor outlives it; the
    restarted agent re-attaches to it, or finds its recorded outcome, and publishes SUCCESS once."""
    ended = overlay.output / "KILL" / "g1" / "Middle.txt"
    middle_running(overlay, "KILL", seconds=2)
    overlay.agents["agentB"].send_signal(signal.SIGKILL)
    overlay.agents["agentB"].wait(5)
    if restart == "after-it-ended":
        wait_for(ended.exists, "Middle ended without its agent")
    else:
        assert not ended.exists()
    overlay.start("agentB")
    overlay.wait_end("KILL", ["g1"], timeout=40)
    status = overlay.statuses["KILL", "g1"]["Middle"]
    assert (status["status"], status["attempt"]) == ("SUCCESS", 1)
    assert str(status["detail"]).startswith("exit 0 after ")
    assert overlay.states("KILL", "g1") == {
        "APPL_START": "SUCCESS",
        "First": "SUCCESS",
        "Middle": "SUCCESS",
        "Last": "SUCCESS",
        "APPL_END": "SUCCESS",
    }
    assert overlay.records("KILL", "g1") == {"First": 1, "Middle": 1, "Last": 1}


def test_an_agent_frozen_past_the_heartbeat_timeout_resumes_without_running_anything_twice(
    overlay: Overlay,
) -> None:
    """SIGSTOP of agentB while its job runs, longer than its broker's heartbeat timeout (4 s): the
    broker drops it; continued, it reconnects, re-subscribes, publishes the job's outcome once and
    runs the next generation."""
    middle_running(overlay, "FROZEN", seconds=1)
    agent = overlay.agents["agentB"]
    agent.send_signal(signal.SIGSTOP)
    try:
        time.sleep(6.0)  # past B2's dead_after (4 x the 1 s heartbeat); Middle ends meanwhile
    finally:
        agent.send_signal(signal.SIGCONT)
    overlay.wait_end("FROZEN", ["g1"], timeout=40)
    wait_for(lambda: "reconnected" in (overlay.tmp / "agentB.log").read_text(), "agentB reconnected")
    quiet(overlay.uris)
    overlay.trigger("FROZEN", ["g2"])
    overlay.wait_end("FROZEN", ["g2"], timeout=40)
    for gid in ("g1", "g2"):
        assert overlay.states("FROZEN", gid)["APPL_END"] == "SUCCESS"
        assert overlay.statuses["FROZEN", gid]["Middle"]["attempt"] == 1
        assert overlay.records("FROZEN", gid) == {"First": 1, "Middle": 1, "Last": 1}


def test_a_hundred_generations_at_once_run_every_job_once(overlay: Overlay) -> None:
    overlay.deploy(WORKFLOWS / "payroll.xml")
    quiet(overlay.uris)
    gids = [f"g{n:03}" for n in range(100)]
    overlay.trigger("PAYROLL", gids)
    overlay.wait_end("PAYROLL", gids, timeout=120)
    for gid in gids:
        assert overlay.records("PAYROLL", gid) == {"JobA": 1, "JobB": 1, "JobD": 1}, gid
        assert overlay.states("PAYROLL", gid)["APPL_END"] == "SUCCESS"


def test_agents_reconnect_after_their_broker_restarts(tmp_path: Path) -> None:
    uri = BrokerURI("127.0.0.1", free_port(), "B1")

    def broker() -> subprocess.Popen[str]:
        command = [WFM, "broker", "--uri", str(uri), "--heartbeat", "1.0", "--memory"]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        wait_for(lambda: status(uri).get("id") == "B1", "broker up")
        return process

    process = broker()
    world = Overlay({name: uri for name in LINE}, tmp_path)
    try:
        for name in HOMES:
            world.start(name)
        time.sleep(0.5)
        world.deploy(WORKFLOWS / "payroll.xml")
        world.observer.close()
        process.terminate()
        assert process.wait(10) == 0
        process = broker()
        world.observe()  # a new session: the old one ended with the broker
        wait_for(lambda: status(uri).get("subscriptions", 0) >= 10, "agents re-subscribed", timeout=20)  # type: ignore[operator]
        assert "agentA: 1 UNCHANGED" in world.deploy(WORKFLOWS / "payroll.xml")
        world.trigger("PAYROLL", ["after-restart"])
        world.wait_end("PAYROLL", ["after-restart"])
        assert world.records("PAYROLL", "after-restart") == {"JobA": 1, "JobB": 1, "JobD": 1}
    finally:
        world.stop()
        process.terminate()
        process.wait(10)


def test_a_job_s_priority_goes_with_its_statuses(overlay: Overlay) -> None:
    middle = (
        f'<job name="Middle" agent="agentB" priority="8"><after job="First"/>'
        f"<command>sh {STEP} middle</command></job>"
    )
    overlay.deploy(workflow(overlay.tmp, "URGENT", middle))
    with BlockingClient(str(overlay.uris["B3"]), "priorities") as watcher:
        watcher.subscribe("[class,eq,JOBSTATUS],[applname,eq,URGENT]")
        time.sleep(0.5)  # the subscription reaches the agents' brokers
        overlay.trigger("URGENT", ["p1"])
        overlay.wait_end("URGENT", ["p1"])
        priorities = {}
        while (delivery := watcher.receive(timeout=2)) is not None:
            priorities[delivery.publication["jobname"]] = delivery.qos.priority
    assert (priorities["First"], priorities["Middle"], priorities["Last"]) == (4, 8, 4)


def test_a_trigger_its_coordinator_picks_up_too_late_ends_expired_and_runs_nothing(overlay: Overlay) -> None:
    """``wfm trigger --ttl``: on time, the generation runs; a Trigger published while the
    coordinator (agentA) is frozen, past its expiry when agentA takes it, ends its generation
    EXPIRED and runs no job; one already late when it arrives makes ``wfm trigger`` fail, saying so."""
    overlay.deploy(WORKFLOWS / "payroll.xml")
    quiet(overlay.uris)

    def wfm_trigger(gid: str, ttl: str, *extra: str) -> subprocess.CompletedProcess[str]:
        command = [WFM, "trigger", "PAYROLL", "--gid", gid, "--ttl", ttl, "--date", "2026-11-23"]
        broker = ["--broker", str(overlay.uris["B3"]), "--no-check", *extra]
        return subprocess.run([*command, *broker], capture_output=True, text=True, timeout=30)

    on_time = wfm_trigger("on-time", "1h", "-o", "json")
    assert on_time.returncode == 0, on_time.stderr
    assert json.loads(on_time.stdout)["expires"] > time.time() + 3500
    overlay.wait_end("PAYROLL", ["on-time"])
    assert overlay.states("PAYROLL", "on-time")["APPL_END"] == "SUCCESS"
    assert overlay.records("PAYROLL", "on-time") == {"JobA": 1, "JobB": 1, "JobD": 1}
    coordinator = overlay.agents["agentA"]
    coordinator.send_signal(signal.SIGSTOP)  # up, but taking nothing (less than B1's 4 s heartbeat timeout)
    try:
        assert wfm_trigger("late", "1s", "--wait", "0").returncode == 0
        time.sleep(2.0)
    finally:
        coordinator.send_signal(signal.SIGCONT)
    overlay.wait_end("PAYROLL", ["late"])
    assert overlay.states("PAYROLL", "late") == {"APPL_END": "EXPIRED"}
    assert "after its expiry" in str(overlay.statuses["PAYROLL", "late"]["APPL_END"]["detail"])
    assert not (overlay.output / "PAYROLL" / "late").exists()  # no job ran
    quiet(overlay.uris)
    already = wfm_trigger("already", "1ms")
    assert already.returncode == 1
    assert already.stderr.startswith("wfm: error: PAYROLL generation already was not started: expired: ")
    overlay.wait_end("PAYROLL", ["already"])
    assert overlay.states("PAYROLL", "already") == {"APPL_END": "EXPIRED"}
