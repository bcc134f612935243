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
from tests.processes import wait_for
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
    def __init__(self, home: Path) -> None:
        self.home = home
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
        file.write_text(xml("CHAIN", CHAIN, f"echo \"$WFM_WORKFLOW $WFM_JOB $WFM_GID\" >> '{self.log}'"))
        deploy = [*WFM, "deploy", str(file), "--broker", str(self.site(0)), "--timeout", "50"]
        done = subprocess.run(deploy, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        self.watch = BlockingClient(self.site(0), "test-watch", timeout=10)
        self.watch.subscribe("[class,eq,JOBSTATUS],[jobname,eq,APPL_END]")
        self.trigger = TriggerPublisher(self.site(0))

    def leader(self, n: int) -> str:
        with BlockingClient(self.site(n), timeout=10) as client:
            return str(client.status()["site"]["member"])  # type: ignore[index]

    def signal(self, broker: str, sig: signal.Signals) -> None:
        process = next(p for c, p in self.processes.running if c is self.brokers[broker])
        process.send_signal(sig)
        if sig == signal.SIGKILL:
            process.wait()
            self.processes.running.remove((self.brokers[broker], process))

    def run(self, gid: str, timeout: float = 30.0) -> None:
        self.trigger.publish("CHAIN", gid, date.today())
        deadline = time.monotonic() + timeout
        while gid not in self.ended:
            assert time.monotonic() < deadline, f"{gid} did not end in {timeout:g} s; ended: {self.ended}"
            delivery = self.watch.receive(1.0)
            if delivery is not None:
                self.ended[str(delivery.publication["GID"])] = str(delivery.publication["status"])

    def ran(self) -> Counter[str]:
        time.sleep(0.5)  # a second run of a job, if any, would show
        return Counter(self.log.read_text().splitlines())

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
