"""Clients failing over inside their site, over real processes: one site of three brokers, a
client given the site's three brokers (the historian, ``wfm monitor``, ``wfm client``), a stream
of publications, and the broker the client is on (the site's leader: only it serves) killed -9 or
frozen past the election timeout mid-stream. What the client stored or printed must be exactly
the stream: nothing lost, nothing twice, nothing out of order.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from broker.client import BlockingClient, Client
from broker.client.reconnect import BrokerList
from broker.language import Publication
from tests.processes import signal_child, wait_for
from wfm.history.landing import read_landing, segments
from wfm.topology import parse_topology
from wfm.up import WFM, Layout, Processes, broker_children, linked
from workflow_messages import APPL_END, job_status, status_advertisement

pytestmark = pytest.mark.chaos

TOPOLOGY = "\n".join(
    [
        "Site site0 Parent none",
        *(f"Process s0{m} Is broker On site0 URL tcp://127.0.0.1:0/b" for m in "abc"),
        "RoutingPolicy filter",
    ]
)
FROZEN = 4.0  # seconds a broker stays frozen: past the election timeout and a client's 3 s of silence


class Site:
    """Three brokers of one site, and the processes the test starts beside them."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.processes = Processes(home / "logs", print)
        self.layout = Layout.of(parse_topology(TOPOLOGY))
        _, children = broker_children(self.layout, home)
        self.brokers = {c.name.removeprefix("broker-"): c for c in children}
        self.uris = BrokerList(self.layout.routers["site0"][0])
        self.others: list[subprocess.Popen[str]] = []

    def start(self) -> None:
        for child in self.brokers.values():
            self.processes.start(child)
        serving, expected = self.layout.routers["site0"]
        wait_for(lambda: linked(serving, expected), "the site to serve", timeout=30)

    def spawn(self, name: str, argv: Sequence[str], stdin: int = subprocess.DEVNULL) -> subprocess.Popen[str]:
        """``argv`` run beside the site, its output in ``home/NAME.out`` and ``home/NAME.err``."""
        with open(self.home / f"{name}.out", "w") as out, open(self.home / f"{name}.err", "w") as err:
            process = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=err, text=True)
        self.others.append(process)
        return process

    def output(self, name: str, stream: str = "out") -> str:
        return (self.home / f"{name}.{stream}").read_text()

    def probe(self, advertisement: str, publication: Publication, got: Callable[[], bool]) -> None:
        """Publish ``publication`` until the client under test ``got`` it: it has subscribed."""
        with BlockingClient(self.uris, "probe", timeout=10) as client:
            client.advertise(advertisement)
            deadline = time.monotonic() + 30
            while not got():
                assert time.monotonic() < deadline, f"no {publication} got in 30 s: not subscribed"
                client.publish(publication)
                time.sleep(0.2)

    def leader(self) -> str:
        with BlockingClient(self.uris, timeout=10) as client:
            return str(client.status()["site"]["member"])  # type: ignore[index]

    def signal(self, broker: str, sig: signal.Signals) -> None:
        signal_child(self.processes, self.brokers[broker], sig)

    def kill_leader(self) -> str:
        """Kill -9 the site's leader, then start it again (from its log: it comes back a follower).
        A client that connects right after the kill, while the two others elect, is served by
        their new leader (it does not give up on a site that answers)."""
        leader = self.leader()
        self.signal(leader, signal.SIGKILL)
        assert self.leader() != leader
        self.processes.start(self.brokers[leader])
        return leader

    def freeze_leader(self) -> None:
        """Stop the site's leader past the election timeout, then let it go on (fenced: it steps
        down and serves nothing)."""
        leader = self.leader()
        self.signal(leader, signal.SIGSTOP)
        time.sleep(FROZEN)
        self.signal(leader, signal.SIGCONT)

    def stop(self) -> None:
        for process in self.others:
            if process.poll() is None:
                process.terminate()
        for process in self.others:
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.stop()


class Stream(threading.Thread):
    """Publishes ``publications`` in order through one client of the site, one every ``pace``
    seconds without waiting for their acknowledgements (``publish_nowait``): at any moment some
    are on their way, and a failover finds some routed but not yet acknowledged, which the client
    sends again."""

    def __init__(
        self, site: Site, advertisement: str, publications: Sequence[Publication], pace: float
    ) -> None:
        super().__init__(name="stream", daemon=True)
        self.site, self.advertisement, self.publications, self.pace = site, advertisement, publications, pace
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._publish())
        except BaseException as error:  # reported by the test
            self.error = error

    async def _publish(self) -> None:
        async with await Client.connect(self.site.uris, "stream", request_timeout=30) as client:
            await client.advertise(self.advertisement)
            for publication in self.publications:
                client.publish_nowait(publication)
                self.sent += 1
                await asyncio.sleep(self.pace)
            deadline = time.monotonic() + 30
            while client.stats()["unacknowledged"]:
                assert time.monotonic() < deadline, f"unacknowledged after 30 s: {client.stats()}"
                await asyncio.sleep(0.05)

    def finished(self, timeout: float) -> None:
        self.join(timeout)
        assert self.error is None, f"the stream stopped after {self.sent}: {self.error!r}"
        assert not self.is_alive(), f"the stream was not published in {timeout:g} s: {self.sent} sent"


def during(stream: Stream, faults: Sequence[Callable[[], object]]) -> None:
    """Run ``stream``, and each fault once its share of the stream has been sent."""
    stream.start()
    total = len(stream.publications)
    for n, fault in enumerate(faults, 1):
        share = total * n // (len(faults) + 1)
        wait_for(lambda s=share: stream.sent >= s or not stream.is_alive(), f"{share} of the stream sent", 30)
        assert stream.is_alive(), f"the stream ended after {stream.sent} publications: {stream.error!r}"
        fault()
    stream.finished(40)


# what the stream's publisher advertises: the statuses of every job of the workflow FAILOVER
STATUSES = str(status_advertisement("FAILOVER", "J")).replace("[jobname,eq,J]", "[jobname,isPresent,'']")


def statuses(gid: str, count: int) -> list[Publication]:
    """One generation's job statuses J000, J001, ... then its APPL_END."""
    jobs = [f"J{n:03d}" for n in range(count)] + [APPL_END]
    return [job_status("FAILOVER", job, gid, "SUCCESS", "", version="v1", agent="a") for job in jobs]


def test_the_historian_stores_each_event_once_across_a_kill_and_a_freeze(tmp_path: Path) -> None:
    site = Site(tmp_path)
    store = tmp_path / "store"
    try:
        site.start()
        argv = [*WFM, "historian", "--broker", str(site.uris), "--store", str(store), "--compact-every", "0"]
        site.spawn("historian", argv)

        def landed(gid: str = "g1") -> list[str]:
            stored = read_landing(segments(store / "landing"))
            return [str(s.publication["jobname"]) for s in stored if s.publication["GID"] == gid]

        site.probe(STATUSES, statuses("probe", 0)[0], lambda: bool(landed("probe")))

        stream = Stream(site, STATUSES, statuses("g1", 150), 0.04)
        during(stream, [site.kill_leader, site.freeze_leader])
        expected = [str(p["jobname"]) for p in stream.publications]
        wait_for(lambda: len(landed()) >= len(expected), f"{len(expected)} statuses landed", 20)
        time.sleep(0.5)  # a copy landed late would show
        assert landed() == expected
    finally:
        site.stop()


def test_the_monitor_shows_each_job_status_once_across_a_kill_and_a_freeze(tmp_path: Path) -> None:
    site = Site(tmp_path)
    try:
        site.start()
        argv = [*WFM, "monitor", "FAILOVER", "--broker", str(site.uris), "-o", "json", "--timeout", "60"]
        monitor = site.spawn("monitor", argv)
        wait_for(lambda: "waiting for" in site.output("monitor", "err"), "the monitor subscribed", 30)

        def shown() -> list[str]:
            return [json.loads(line)["job"] for line in site.output("monitor").splitlines()]

        stream = Stream(site, STATUSES, statuses("g1", 150), 0.04)
        during(stream, [site.kill_leader, site.freeze_leader])
        assert monitor.wait(20) == 0, site.output("monitor", "err")  # it saw APPL_END: the generation ended
        assert shown() == [str(p["jobname"]) for p in stream.publications]
    finally:
        site.stop()


def test_wfm_client_prints_each_publication_once_across_a_kill_and_a_freeze(tmp_path: Path) -> None:
    site = Site(tmp_path)
    try:
        site.start()
        client = site.spawn("client", [*WFM, "client", "--broker", str(site.uris)], stdin=subprocess.PIPE)
        assert client.stdin is not None
        client.stdin.write("s [class,eq,JOBSTATUS],[applname,eq,FAILOVER]\n")
        client.stdin.flush()
        wait_for(lambda: "sub " in site.output("client", "err"), "wfm client subscribed", 30)

        def printed() -> list[str]:
            return [line.split(" ", 1)[1] for line in site.output("client").splitlines()]

        stream = Stream(site, STATUSES, statuses("g1", 150), 0.04)
        during(stream, [site.kill_leader, site.freeze_leader])
        wait_for(lambda: len(printed()) >= len(stream.publications), "every publication printed", 20)
        client.stdin.close()  # it lingers half a second, then exits
        assert client.wait(20) == 0, site.output("client", "err")
        assert printed() == [str(p) for p in stream.publications]
    finally:
        site.stop()


def test_wfm_client_publisher_is_deduplicated_across_a_failover(tmp_path: Path) -> None:
    """A ``wfm client`` publishing with ``id=`` through a kill and a freeze: each publication
    reaches the subscriber once and in order; the same lines published again by another
    ``wfm client`` of the same identity, after another leader change, reach it not at all (the
    site keeps the message ids it routed, replicated)."""
    site = Site(tmp_path)
    try:
        site.start()
        with BlockingClient(site.uris, "subscriber", timeout=20) as subscriber:
            subscriber.subscribe("[class,eq,JOBSTATUS],[applname,eq,FAILOVER]")
            publications = statuses("g1", 99)
            lines = [f"a {STATUSES}"] + [f"p {p} id=m{n}" for n, p in enumerate(publications)]
            got: list[str] = []

            def receive() -> int:
                while (delivery := subscriber.receive(0.05)) is not None:
                    got.append(str(delivery.publication))
                return len(got)

            def publish(name: str, pace: str) -> subprocess.Popen[str]:
                argv = [*WFM, "client", "--broker", str(site.uris), "--id", "publisher", "--linger", "0"]
                process = site.spawn(name, argv, stdin=subprocess.PIPE)
                assert process.stdin is not None
                process.stdin.write(pace.join(lines) + "\n")
                process.stdin.close()
                return process

            first = publish("first", "\nsleep 0.05\n")
            for fault, share in ((site.kill_leader, 33), (site.freeze_leader, 66)):
                wait_for(lambda s=share: receive() >= s, f"{share} publications received", 30)
                fault()
            wait_for(lambda: receive() >= len(publications), "every publication received", 30)
            assert first.wait(20) == 0, site.output("first", "err")
            site.kill_leader()
            again = publish("again", "\n")
            assert again.wait(30) == 0, site.output("again", "err")
            deadline = time.monotonic() + 1.0  # a repeat routed again would show
            while time.monotonic() < deadline:
                receive()
            assert got == [str(p) for p in publications]
    finally:
        site.stop()
