"""A standby takes a job over from a host that froze: real ``wfm broker`` and ``wfm agent``
processes. agentA runs Work (standby agentB, takeover 3 s); its host (the agent, its supervisor
and the job) is frozen with SIGSTOP mid-run; agentB takes Work over once agentA's link has been
down 3 s at their broker, and runs the held generation; the host is woken (SIGCONT): its
supervisor kills the run whose lease ran out, its agent learns the handover from its broker,
publishes nothing for Work, and goes on with its other jobs. Every generation's Work ran to a
final status exactly once, by the statuses received and by what the job itself wrote."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.language import Publication
from tests.agents.test_processes import MONDAY, Overlay
from tests.processes import WFM, brokers, quiet, wait_for

TAKEOVER = 3.0
WORK = (
    'echo $$ > "$WFM_OUTPUT/Work.$WFM_GID.pid"; sleep 1;'
    ' echo "$WFM_GID $WFM_AGENT_HOST" >> "$WFM_OUTPUT/Work.txt"'
)
STANDBY = f"""<workflow name="STANDBY">
  <job name="Start" agent="agentC"><command>true</command></job>
  <job name="Work" agent="agentA" standby="agentB" takeover="{TAKEOVER:g}s">
    <after job="Start"/><command>{WORK}</command>
  </job>
  <job name="Other" agent="agentA">
    <after job="Start"/><command>echo "$WFM_GID" >> "$WFM_OUTPUT/Other.txt"</command>
  </job>
  <job name="After" agent="agentC">
    <after job="Work"/><command>echo "$WFM_GID" >> "$WFM_OUTPUT/After.txt"</command>
  </job>
</workflow>
"""


class Hosts(Overlay):
    """Three agents on one broker (a standby must be a client of its primary's broker), each
    telling its jobs which host it is; an observer that keeps every status, in order."""

    def observe(self) -> None:
        super().observe()
        self.received: list[Publication] = []

    def start(self, name: str, *extra: str) -> None:
        os.environ["WFM_AGENT_HOST"] = name  # what the job writes: who ran it
        try:
            super().start(name, *extra)
        finally:
            del os.environ["WFM_AGENT_HOST"]

    def collect(self, timeout: float) -> None:
        delivery = self.observer.receive(timeout)
        if delivery is not None:
            p = delivery.publication
            self.received.append(p)
            self.statuses.setdefault((str(p["applname"]), str(p["GID"])), {})[str(p["jobname"])] = p


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    # the broker takes a silent client for gone after 4 heartbeats (1 s)
    with brokers({"B1": []}, heartbeat=0.25, session_grace=60.0) as uris:
        uris = {"B1": uris["B1"], "B2": uris["B1"], "B3": uris["B1"]}  # every agent on B1
        world = Hosts(uris, tmp_path)
        try:
            for name in ("agentA", "agentB", "agentC"):
                world.start(name)
            quiet({"B1": uris["B1"]})
            yield world
        finally:
            for process in world.agents.values():  # the woken agentA may still be in its backoff
                process.terminate()
            for process in world.agents.values():
                process.wait(10)
            world.observer.close()


def _gone(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_standby_takes_over_a_frozen_host_once_and_the_host_woken_publishes_nothing(
    hosts: Hosts, tmp_path: Path
) -> None:
    hosts.output.mkdir(parents=True)
    definition = tmp_path / "standby.xml"
    definition.write_text(STANDBY)
    hosts.deploy(definition)
    hosts.trigger("STANDBY", ["g1"], MONDAY)
    pid_file = hosts.output / "Work.g1.pid"
    wait_for(pid_file.exists, "Work runs on agentA", timeout=10)

    # agentA's host freezes mid-run: its job, its supervisor and its agent
    job = int(pid_file.read_text())
    supervisor = int((hosts.tmp / "agentA" / "supervisor.lock").read_text().split()[0])
    os.killpg(job, signal.SIGSTOP)
    os.kill(supervisor, signal.SIGSTOP)
    hosts.agents["agentA"].send_signal(signal.SIGSTOP)
    frozen = time.monotonic()

    def work(gid: str) -> list[Publication]:
        return [p for p in hosts.received if p["jobname"] == "Work" and p["GID"] == gid]

    deadline = frozen + 1 + TAKEOVER + 6
    while not work("g1"):
        assert time.monotonic() < deadline, "agentB did not take Work over"
        hosts.collect(0.5)
    taken = time.monotonic() - frozen
    (status,) = work("g1")
    assert status["agentname"] == "agentB" and status["status"] == "SUCCESS"
    assert str(status["detail"]).startswith("taken over from agentA by agentB: exit 0")
    assert taken >= TAKEOVER  # the broker's grant waited for the takeover after the link went

    # the host wakes: its supervisor first (it kills the run whose lease ran out), then the rest
    os.kill(supervisor, signal.SIGCONT)
    wait_for(lambda: _gone(job), "the frozen run killed by its supervisor", timeout=5)
    hosts.agents["agentA"].send_signal(signal.SIGCONT)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job, signal.SIGCONT)
    log = hosts.tmp / "agentA.log"
    wait_for(lambda: "handed over to agentB" in log.read_text(), "agentA learns the handover", timeout=10)
    # on a fresh session (what was routed to it meanwhile is lost, as after a grace period)
    wait_for(lambda: "reconnected" in log.read_text().split("handed over to")[-1], "agentA back", 10)
    time.sleep(0.5)  # its subscriptions made again

    # a later generation: Work runs on agentB, Other still on agentA (a fresh session)
    hosts.trigger("STANDBY", ["g2"], MONDAY)
    hosts.wait_end("STANDBY", ["g1", "g2"], timeout=20)
    hosts.collect(0.5)  # anything agentA would still say
    for gid in ("g1", "g2"):
        assert [p["agentname"] for p in work(gid)] == ["agentB"], f"Work {gid}: {work(gid)}"
        assert hosts.states("STANDBY", gid) == {
            "APPL_START": "SUCCESS",
            "Start": "SUCCESS",
            "Work": "SUCCESS",
            "Other": "SUCCESS",
            "After": "SUCCESS",
            "APPL_END": "SUCCESS",
        }
    assert sorted((hosts.output / "Work.txt").read_text().split("\n")[:-1]) == ["g1 agentB", "g2 agentB"]
    assert sorted((hosts.output / "After.txt").read_text().split()) == ["g1", "g2"]
    assert sorted((hosts.output / "Other.txt").read_text().split()) == ["g1", "g2"]
    assert not [p for p in hosts.received if p["jobname"] == "Work" and p["agentname"] == "agentA"]
    # the supervisor's record: the frozen run was killed by its lease (fenced), never finished
    runs = (hosts.tmp / "agentA" / "logs" / "STANDBY" / "g1" / "runs.jsonl").read_text()
    assert '"fenced": true' in runs
    # wfm runs shows the takeover (asked of every agent: agentB's record has the job)
    shown = subprocess.run(
        [WFM, "runs", "STANDBY", "--broker", str(hosts.uris["B1"]), "-o", "json", "--timeout", "10"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert [json.loads(line).get("taken_over") for line in shown.stdout.splitlines()] == [
        {"Work": "agentA by agentB"}
    ] * 2, shown.stderr


COORDINATED = f"""<workflow name="COORD">
  <job name="Start" agent="agentA" standby="agentB" takeover="{TAKEOVER:g}s">
    <command>echo "$WFM_GID $WFM_AGENT_HOST" >> "$WFM_OUTPUT/Start.txt"</command>
  </job>
  <job name="Next" agent="agentC">
    <after job="Start"/><command>echo "$WFM_GID" >> "$WFM_OUTPUT/Next.txt"</command>
  </job>
</workflow>
"""


def test_the_coordinators_standby_starts_and_ends_a_generation_triggered_while_its_host_is_frozen(
    hosts: Hosts, tmp_path: Path
) -> None:
    """agentA coordinates COORD (its first start job, Start, has the standby agentB). Its host
    freezes while idle; a generation triggered then is started, run and ended by agentB, once;
    agentA woken publishes nothing of it, and the next generation is agentB's from start to end."""
    hosts.output.mkdir(parents=True)
    definition = tmp_path / "coordinated.xml"
    definition.write_text(COORDINATED)
    hosts.deploy(definition)
    hosts.trigger("COORD", ["g1"], MONDAY)
    hosts.wait_end("COORD", ["g1"], timeout=10)

    supervisor = int((hosts.tmp / "agentA" / "supervisor.lock").read_text().split()[0])
    os.kill(supervisor, signal.SIGSTOP)
    hosts.agents["agentA"].send_signal(signal.SIGSTOP)
    frozen = time.monotonic()
    hosts.trigger("COORD", ["g2"], MONDAY)
    hosts.wait_end("COORD", ["g2"], timeout=1 + TAKEOVER + 8)
    assert time.monotonic() - frozen >= TAKEOVER  # the broker waited for the takeover

    os.kill(supervisor, signal.SIGCONT)
    hosts.agents["agentA"].send_signal(signal.SIGCONT)
    log = hosts.tmp / "agentA.log"
    wait_for(lambda: "handed over to agentB" in log.read_text(), "agentA learns the handover", timeout=10)
    wait_for(lambda: "reconnected" in log.read_text().split("handed over to")[-1], "agentA back", 10)
    time.sleep(0.5)
    hosts.trigger("COORD", ["g3"], MONDAY)
    hosts.wait_end("COORD", ["g3"], timeout=10)
    hosts.collect(1.0)  # anything agentA would still say

    def published(gid: str) -> list[tuple[str, str]]:
        return sorted(
            (str(p["jobname"]), str(p["agentname"]))
            for p in hosts.received
            if p["applname"] == "COORD" and p["GID"] == gid
        )

    assert published("g1") == [
        ("APPL_END", "agentA"),
        ("APPL_START", "agentA"),
        ("Next", "agentC"),
        ("Start", "agentA"),
    ]
    for gid in ("g2", "g3"):  # each once, and not one of agentA's
        assert published(gid) == [
            ("APPL_END", "agentB"),
            ("APPL_START", "agentB"),
            ("Next", "agentC"),
            ("Start", "agentB"),
        ], gid
        assert hosts.states("COORD", gid) == dict.fromkeys(
            ("APPL_START", "Start", "Next", "APPL_END"), "SUCCESS"
        )
    assert (hosts.output / "Start.txt").read_text().split("\n")[:-1] == [
        "g1 agentA",
        "g2 agentB",
        "g3 agentB",
    ]
    assert sorted((hosts.output / "Next.txt").read_text().split()) == ["g1", "g2", "g3"]
