"""Chaos: the middle broker killed during a 1,000-job deployment and while a generation runs.

Real processes, as ``wfm up`` runs them: three brokers in a line, each with its write-ahead log
(``--data``) and a session grace period, one agent on each (agent1, the coordinator, on B1).
Every job appends ``WORKFLOW JOB GID`` to one shared file, so what ran, and what ran twice, is
counted from the file, not from what the agents report. B2 is the victim: every envelope for
agent2 and agent3, every acknowledgement coming back and every status between the ends crosses it.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest

from benchmarks.workflows import AGENTS, chain, grid, xml
from broker.client import BlockingClient
from tests.processes import wait_for
from tests.transport.harness import free_port
from wfm.triggers import TriggerPublisher
from wfm.up import WFM, Processes, agent_children, broker_children, linked
from workflow_messages import AGENT_ACK

pytestmark = pytest.mark.chaos

BIG = grid(10, 100)
SMALL = chain(3)  # J0 on agent1 (B1), J1 on agent2 (B2), J2 on agent3 (B3)
KILL_AFTER_ACKS = 1  # of the first batch (a DEPLOY for each agent but the coordinator): under way
DOWN = 1.0  # seconds B2 stays down


def free_ports() -> int:
    """P such that P, P + 1 and P + 2 are free, for ``broker_children``."""
    while True:
        port = free_port()
        with socket.socket() as one, socket.socket() as two:
            try:
                one.bind(("127.0.0.1", port + 1))
                two.bind(("127.0.0.1", port + 2))
            except OSError:
                continue
        return port


class Overlay:
    """The brokers and agents, the shared job log, and a watcher on B1 counting AGENT_ACKs and
    keeping every APPL_END's status by (workflow, gid)."""

    def __init__(self, home: Path, processes: Processes) -> None:
        self.home, self.processes = home, processes
        self.log = home / "jobs.log"
        self.uris, brokers = broker_children(free_ports(), home)  # each with --data home/brokers/ID
        self.brokers = [replace(child, argv=(*child.argv, "--session-grace", "60")) for child in brokers]
        self.acks = 0
        self.ended: dict[tuple[str, str], str] = {}

    def start(self) -> None:
        for child in self.brokers:
            self.processes.start(child)
        for i, uri in enumerate(self.uris):
            neighbours = {u.id for u in self.uris[max(i - 1, 0) : i + 2]} - {uri.id}
            wait_for(lambda u=uri, n=neighbours: linked(u, n), f"{uri.id} linked")
        for child in agent_children(AGENTS, self.uris, self.home / "agents"):
            self.processes.start(child)
        self.watch = BlockingClient(self.uris[0], "test-watch", timeout=10)
        self.watch.subscribe("[class,eq,AGENT_ACK]")
        self.watch.subscribe("[class,eq,JOBSTATUS],[jobname,eq,APPL_END]")

    def workflow(self, name: str, jobs: list[tuple[str, tuple[str, ...]]]) -> Path:
        file = self.home / f"{name.lower()}.xml"
        file.write_text(xml(name, jobs, f"echo \"$WFM_WORKFLOW $WFM_JOB $WFM_GID\" >> '{self.log}'"))
        return file

    def deploy(self, file: Path) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*WFM, "deploy", str(file), "--broker", str(self.uris[0]), "--timeout", "50"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def receive(self, timeout: float = 1.0) -> None:
        delivery = self.watch.receive(timeout)
        if delivery is None:
            return
        if delivery.publication.cls == AGENT_ACK:
            self.acks += 1
            return
        end = delivery.publication
        self.ended[str(end["applname"]), str(end["GID"])] = str(end["status"])

    def until_ended(self, *generations: tuple[str, str], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not set(generations) <= self.ended.keys():
            assert time.monotonic() < deadline, f"only {sorted(self.ended)} ended in {timeout:g} s"
            self.receive()

    def kill_b2(self) -> None:
        child, process = next(p for p in self.processes.running if p[0] is self.brokers[1])
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.processes.running.remove((child, process))

    def ran(self) -> Counter[str]:
        time.sleep(0.5)  # a second run of a job, if any, would show
        return Counter(self.log.read_text().splitlines())


@contextmanager
def overlay(home: Path) -> Iterator[Overlay]:
    processes = Processes(home / "logs", print)
    running = Overlay(home, processes)
    try:
        running.start()
        with running.watch:
            yield running
    finally:
        processes.stop()


def test_middle_broker_killed_during_a_1000_job_deployment(tmp_path: Path) -> None:
    """The deployment completes (every agent acknowledges every envelope) and one generation then
    runs each of the 1,000 jobs exactly once."""
    with overlay(tmp_path) as o:
        deploying = o.deploy(o.workflow("BIG", BIG))
        deadline = time.monotonic() + 30
        while o.acks < KILL_AFTER_ACKS:
            assert time.monotonic() < deadline, f"only {o.acks} acknowledgements in 30 s"
            o.receive()
        assert deploying.poll() is None, "the deployment ended before the kill"
        o.kill_b2()
        time.sleep(DOWN)
        o.processes.start(o.brokers[1])
        out, err = deploying.communicate(timeout=60)
        assert deploying.returncode == 0, out + err
        with TriggerPublisher(o.uris[0]) as trigger:
            trigger.publish("BIG", "g1", date.today())
        o.until_ended(("BIG", "g1"))
        assert o.ended == {("BIG", "g1"): "SUCCESS"}
        assert o.ran() == {f"BIG {job} g1": 1 for job, _ in BIG}


def test_generation_triggered_while_the_middle_broker_is_down(tmp_path: Path) -> None:
    """A Trigger taken by B1 while B2 is down reaches agent2 and agent3 once B2 is back from its
    log: the generation completes, each job once. Without ``--data`` the restarted B2 has
    forgotten the agents' join state and what it had taken in custody: it stays stuck."""
    with overlay(tmp_path) as o:
        deploying = o.deploy(o.workflow("SMALL", SMALL))
        assert deploying.communicate(timeout=60) and deploying.returncode == 0
        with TriggerPublisher(o.uris[0]) as trigger:  # advertised before the kill, as wfm schedule is
            trigger.publish("SMALL", "s0", date.today())
            o.until_ended(("SMALL", "s0"))
            o.kill_b2()
            trigger.publish("SMALL", "s1", date.today())
            time.sleep(DOWN)
            o.processes.start(o.brokers[1])
            o.until_ended(("SMALL", "s1"), timeout=30)
        assert o.ended == {("SMALL", "s0"): "SUCCESS", ("SMALL", "s1"): "SUCCESS"}
        assert o.ran() == {f"SMALL {job} {gid}": 1 for job, _ in SMALL for gid in ("s0", "s1")}
