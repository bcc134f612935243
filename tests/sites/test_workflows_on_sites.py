"""Workflows on replicated sites, over real processes: three sites of three brokers (as
``workflows/sites.txt``), one agent on each site, a chain of three jobs crossing all of them.
Site leaders are killed -9 (one, then two at once) and frozen past the election timeout while
generations run; each generation completes and runs each job exactly once (counted from a file
the jobs append to, not from what the agents report).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from datetime import date
from pathlib import Path

import pytest

from benchmarks.workflows import AGENTS, chain, xml
from broker.client import BlockingClient
from broker.client.reconnect import BrokerList
from tests.processes import signal_child, wait_for
from wfm.topology import parse_topology
from wfm.triggers import TriggerPublisher
from wfm.up import WFM, Layout, Processes, agent_children, broker_children, linked

pytestmark = pytest.mark.chaos

CHAIN = chain(3)  # J0 on agent1 (site0), J1 on agent2 (site1), J2 on agent3 (site2)
TOPOLOGY = "\n".join(
    [
        "Site site0 Parent none",
        "Site site1 Parent site0",
        "Site site2 Parent site0",
        *(f"Process s{s}{m} Is broker On site{s} URL tcp://127.0.0.1:0/b" for s in range(3) for m in "abc"),
        *(f"Process {agent} Is agent On site{s} URL tcp://127.0.0.1:0/a" for s, agent in enumerate(AGENTS)),
        "RoutingPolicy filter",
    ]
)


class Sites:
    """The three sites, their agents and CHAIN deployed; each job appends ``CHAIN JOB GID`` to
    ``jobs.log`` when it starts, and with ``seconds`` it then sleeps that long and appends the
    same line and ``ended``."""

    def __init__(self, home: Path, seconds: float = 0.0) -> None:
        self.home = home
        self.seconds = seconds
        self.processes = Processes(home / "logs", print)
        self.layout = Layout.of(parse_topology(TOPOLOGY))
        _, children = broker_children(self.layout, home)
        self.brokers = {c.name.removeprefix("broker-"): c for c in children}
        self.log = home / "jobs.log"
        self.ended: dict[str, str] = {}

    def site(self, n: int) -> BrokerList:
        return BrokerList(self.layout.routers[f"site{n}"][0])

    def start(self) -> None:
        for child in self.brokers.values():
            self.processes.start(child)
        for name, (serving, expected) in self.layout.routers.items():
            wait_for(lambda s=serving, e=expected: linked(s, e), f"{name} linked", timeout=30)
        agents = [self.layout.agents[a] for a in AGENTS]
        for child in agent_children(AGENTS, agents, self.home / "agents", placed=self.layout.agents):
            self.processes.start(child)
        file = self.home / "chain.xml"
        job = "$WFM_WORKFLOW $WFM_JOB $WFM_GID"
        line = f"echo \"{job}\" >> '{self.log}'"
        if self.seconds:
            line += f"; sleep {self.seconds:g}; echo \"{job} ended\" >> '{self.log}'"
        file.write_text(xml("CHAIN", CHAIN, line))
        deploy = [*WFM, "deploy", str(file), "--broker", str(self.site(0)), "--timeout", "50"]
        done = subprocess.run(deploy, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        self.watch = BlockingClient(self.site(0), "test-watch", timeout=10)
        self.watch.subscribe("[class,eq,JOBSTATUS],[jobname,eq,APPL_END]")
        self.trigger = TriggerPublisher(self.site(0))

    def leader(self, n: int) -> str:
        with BlockingClient(self.site(n), timeout=10) as client:
            return str(client.status()["site"]["member"])  # type: ignore[index]

    def whole(self, n: int) -> None:
        """Until site ``n``'s leader is linked to both other brokers of its site."""

        def linked() -> bool:
            with BlockingClient(self.site(n), timeout=10) as client:
                return len(client.status()["site"]["linked"]) == 2  # type: ignore[index, arg-type]

        wait_for(linked, f"site{n} whole again", timeout=20)

    def signal(self, broker: str, sig: signal.Signals) -> None:
        signal_child(self.processes, self.brokers[broker], sig)

    def run(self, gid: str, timeout: float = 30.0) -> None:
        self.trigger.publish("CHAIN", gid, date.today())
        self.end(gid, timeout)

    def end(self, gid: str, timeout: float = 30.0) -> None:
        """Until the generation ``gid`` ends (its APPL_END seen), at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while gid not in self.ended:
            assert time.monotonic() < deadline, f"{gid} did not end in {timeout:g} s; ended: {self.ended}"
            delivery = self.watch.receive(1.0)
            if delivery is not None:
                self.ended[str(delivery.publication["GID"])] = str(delivery.publication["status"])

    def ran(self) -> Counter[str]:
        """How many times each job of each generation started."""
        time.sleep(0.5)  # a second run of a job, if any, would show
        return Counter(line for line in self.lines() if not line.endswith(" ended"))

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def at(self, line: str, timeout: float = 20.0) -> None:
        """Until a job has appended ``line`` to the log."""
        wait_for(lambda: line in self.lines(), f"{line!r} in the jobs' log (it has {self.lines()})", timeout)

    def stop(self) -> None:
        for closing in (getattr(self, "trigger", None), getattr(self, "watch", None)):
            if closing is not None:
                closing.close()
        self.processes.stop()


def test_killed_and_frozen_site_leaders_stall_nothing_and_run_nothing_twice(tmp_path: Path) -> None:
    sites = Sites(tmp_path)
    try:
        sites.start()
        sites.run("g0")
        root = sites.leader(0)
        sites.signal(root, signal.SIGKILL)  # the root's leader: the trigger's and agent1's broker
        sites.run("g1")
        sites.processes.start(sites.brokers[root])  # back from its log, as a follower
        one, two = sites.leader(1), sites.leader(2)
        sites.signal(one, signal.SIGKILL)  # two sites' leaders at once
        sites.signal(two, signal.SIGKILL)
        sites.run("g2")
        sites.processes.start(sites.brokers[one])
        sites.processes.start(sites.brokers[two])
        frozen = sites.leader(0)
        sites.signal(frozen, signal.SIGSTOP)  # longer than the election timeout: it is replaced
        sites.run("g3")
        sites.signal(frozen, signal.SIGCONT)  # wakes up fenced: it steps down and serves nothing
        sites.run("g4")
        assert sites.ended == {f"g{n}": "SUCCESS" for n in range(5)}
        assert sites.ran() == {f"CHAIN {job} g{n}": 1 for job, _ in CHAIN for n in range(5)}
    finally:
        sites.stop()


def test_brokers_killed_and_frozen_while_jobs_run_stall_nothing_and_run_nothing_twice(tmp_path: Path) -> None:
    """The faults come while a generation runs: the leader of the site whose agent runs a job
    (the broker that agent is on: only a site's leader serves) killed -9 in the middle of the job,
    and the root's leader frozen past the election timeout as a job's end status leaves for the
    next site."""
    sites = Sites(tmp_path, seconds=1.0)
    try:
        sites.start()
        sites.trigger.publish("CHAIN", "g0", date.today())
        for n in range(2):  # J0 on site0 (agent1's; the trigger's and the watcher's too), J1 on site1
            sites.at(f"CHAIN J{n} g0")
            killed = sites.leader(n)
            sites.signal(killed, signal.SIGKILL)
            sites.processes.start(sites.brokers[killed])  # back from its log, as a follower
        sites.end("g0")
        sites.whole(0)
        sites.trigger.publish("CHAIN", "g1", date.today())
        sites.at("CHAIN J0 g1 ended")  # its status leaves site0 for agent2's site1
        frozen = sites.leader(0)
        sites.signal(frozen, signal.SIGSTOP)
        time.sleep(2.0)  # past the election timeout: it wakes up fenced, steps down, drops its links
        sites.signal(frozen, signal.SIGCONT)
        sites.at("CHAIN J2 g1")  # agent3 runs J2, on site2
        sites.signal(sites.leader(2), signal.SIGKILL)
        sites.end("g1")
        assert sites.ended == {"g0": "SUCCESS", "g1": "SUCCESS"}
        assert sites.ran() == {f"CHAIN {job} g{n}": 1 for job, _ in CHAIN for n in range(2)}
    finally:
        sites.stop()
