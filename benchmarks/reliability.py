"""Reliability under faults: the workflow experiment of issue 14, one fault scenario at a time.

Three brokers in a line (B1 - B2 - B3), one agent per broker, started as ``wfm up`` starts them
(``wfm.up``: ``broker_children``, ``agent_children``, ``Processes``), and a 6-job workflow whose
joins span agents (D waits for B on a2 and C on a3; F for D on a1 and E on a2), deployed with
``wfm deploy``. Every job appends ``JOB GID`` to one shared log file, so what ran, and what ran
twice, is counted from the file, not from what the agents claim. N generations are triggered at
R per second (``TriggerPublisher``, failing over along B1, B2, B3), under one fault at a time:

* ``none``: nothing killed; the control, and the baseline every other scenario is compared with;
* ``middle-broker``: SIGKILL of B2 two or three times during the run, restarted after 1-2 s (the
  next kill at least ``UP_BETWEEN`` after the restarted broker accepts connections again);
* ``edge-broker``: the same for B1, which holds the coordinator (the agent of the first job);
* ``agents``: SIGKILL of a random agent 5 times, restarted after 1-2 s with the same state dir.

A generation is complete when a monitor-like subscriber (on B3, failing over to B2 and B1) sees
its APPL_END SUCCESS, or when the log holds a line of each of its 6 jobs. It is stuck if it is
not complete 30 s after the last trigger or the last restart, whichever is later. Catch-up is
the time from that moment's start (last trigger or restart) to the last completion, given only
when every generation completed.

Through every scenario a *probe* stream runs beside the workflow, checked as Jepsen checks a
queue: a client on B1 publishes numbered publications (``PROBE_RATE`` a second) that a client on
B3 receives through B2; at the end every number must have arrived once, in order (lost,
duplicated and out-of-order are counted at the receiving application, after the client's own
duplicate filter). For each restart: how long until the probe was delivered again (the delivery
gap), until everything published before the restart had arrived (the probe's catch-up), and
until the next job of the agent behind the restarted process ran. The brokers' status counters
(``held``, ``dropped.*``, ``resent.*``) are read at the end of each scenario. Targets from the
issue: N/N complete, 0 run twice, 0 lost (or duplicated), delivery again within 2 s of a restart.

Each scenario gets a fresh overlay and state; every process is stopped in a ``finally`` (Ctrl-C
included). Faults are drawn from ``--seed``, so a run's schedule can be repeated.

The cost of durability, after the scenarios (``--durability-only``: that alone;
``--no-durability``: skip it): persistent publications per second through 3 ``wfm broker``
processes in a line, a publisher on B1 pipelining ``publish_nowait`` and waiting for every
acknowledgement, a subscriber process on B3 counting until all have arrived: with ``--fsync
group`` against ``--fsync each`` (target: at least 10x) and against brokers with ``--memory``
(target: at least half their throughput).

Run: ``python benchmarks/reliability.py [--generations 200] [--rate 20] [--scenario NAME]...``
(about a minute per scenario with the defaults). One ``RESULT`` line per scenario and one per
durability ratio, then one JSON line with everything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import json
import multiprocessing as mp
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from broker.client import BlockingClient, Client, ConnectError, Subscription
from broker.client.reconnect import DAEMON_BACKOFF
from broker.errors import LinkClosed, WfmError
from broker.language import Publication
from broker.transport.uri import BrokerURI
from wfm.triggers import TriggerPublisher
from wfm.up import BROKER_IDS, WFM, Child, Processes, agent_children, broker_children

PORT = 7400  # each scenario uses PORT + 10 * its index, so a restart never meets a port in TIME_WAIT
AGENTS = ("a1", "a2", "a3")  # a1 on B1 (the coordinator: it runs the first job), a2 on B2, a3 on B3
JOBS = {  # job: (agent, predecessors)
    "A": ("a1", ()),
    "B": ("a2", ("A",)),
    "C": ("a3", ("A",)),
    "D": ("a1", ("B", "C")),
    "E": ("a2", ("D",)),
    "F": ("a3", ("D", "E")),
}
WORKFLOW = "RELIABILITY"
SCENARIOS = ("none", "middle-broker", "edge-broker", "agents")
STUCK_AFTER = 30.0  # seconds after the last trigger or restart
UP_BETWEEN = 1.0  # seconds a killed process stays up before the next kill (short runs spread out)
TARGET_RUN_TWICE = 0
TARGET_GAP = 2.0  # seconds from a restart until delivery resumes
PROBE = "RELIABILITY_PROBE"  # the class of the probe stream's publications
PROBE_RATE = 50.0  # probe publications a second
PROBE_DRAIN = 15.0  # seconds the probe's receiver may take to get the last ones, after the scenario
POLL = 0.05  # seconds between two reads of the job log: the resolution of job times


def workflow_xml(log: Path) -> str:
    lines = [f'<workflow name="{WORKFLOW}">']
    for job, (agent, after) in JOBS.items():
        lines.append(f'  <job name="{job}" agent="{agent}">')
        lines += [f'    <after job="{p}"/>' for p in after]
        lines.append(f"    <command>echo \"$WFM_JOB $WFM_GID\" &gt;&gt; '{log}'</command>")
        lines.append("  </job>")
    lines.append("</workflow>")
    return "\n".join(lines) + "\n"


@dataclass
class Fault:
    """One SIGKILL: of which child, when (seconds after the first trigger), down for how long."""

    child: str
    at: float
    down: float


def schedule(scenario: str, window: float, rng: random.Random) -> list[Fault]:
    """The kills of a scenario, spread over the triggering window (``window`` seconds)."""
    if scenario == "none":
        return []
    if scenario == "agents":
        victims = [f"agent-{rng.choice(AGENTS)}" for _ in range(5)]
    else:
        victims = ["broker-B2" if scenario == "middle-broker" else "broker-B1"] * rng.choice((2, 3))
    slot = window / len(victims)
    return [
        Fault(victim, round(slot * (i + rng.uniform(0.1, 0.6)), 2), round(rng.uniform(1.0, 2.0), 2))
        for i, victim in enumerate(victims)
    ]


@dataclass
class Observed:
    """What the log and the subscriber saw, with the time each generation completed."""

    log: Path
    lock: threading.Lock = field(default_factory=threading.Lock)
    lines: Counter[tuple[str, str]] = field(default_factory=Counter)
    ended: dict[str, str] = field(default_factory=dict)  # gid -> APPL_END status
    completed: dict[str, float] = field(default_factory=dict)  # gid -> monotonic time
    runs: list[tuple[str, float]] = field(default_factory=list)  # (job, monotonic time), as logged
    _offset: int = 0

    def read_log(self) -> None:
        try:
            with open(self.log, "rb") as file:
                file.seek(self._offset)
                data = file.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # a line being written is read next time
        self._offset += end
        now = time.monotonic()
        with self.lock:
            for line in data[:end].decode(errors="replace").splitlines():
                job, _, gid = line.strip().partition(" ")
                self.lines[(job, gid)] += 1
                self.runs.append((job, now))
                if gid not in self.completed and all((j, gid) in self.lines for j in JOBS):
                    self.completed[gid] = now

    def appl_end(self, gid: str, status: str) -> None:
        with self.lock:
            self.ended[gid] = status
            if status == "SUCCESS":
                self.completed.setdefault(gid, time.monotonic())

    def run_twice(self) -> int:
        with self.lock:
            return sum(count - 1 for count in self.lines.values())

    def next_run(self, agent: str, since: float) -> float | None:
        """Seconds from ``since`` until a job of ``agent`` next ran; None if none did."""
        with self.lock:
            after = [at for job, at in self.runs if JOBS[job][0] == agent and at > since]
        return round(min(after) - since, 2) if after else None


def poll_log(observed: Observed, stop: threading.Event) -> None:
    """Reads the job log every ``POLL`` seconds until ``stop``: when each job ran, to that much."""
    while not stop.wait(POLL):
        observed.read_log()
    observed.read_log()


@dataclass
class Checked:
    """The probe stream checked: numbers published, and what the receiving application got."""

    published: int
    unacknowledged: int  # still waiting for B1's acknowledgement at the end
    received: int  # distinct numbers
    lost: int
    duplicated: int
    out_of_order: int  # deliveries of a number below one delivered before
    longest_silence_s: float  # between two deliveries, anywhere in the scenario


class Probe(threading.Thread):
    """The probe stream, in its own event loop: numbered publications from B1, at
    ``PROBE_RATE`` a second until ``stop_publishing``, received on B3 until every one has come
    (or ``PROBE_DRAIN`` seconds after the stop). Both clients reconnect as daemons do (agents),
    with stable names, so their brokers keep their sessions while they are away."""

    def __init__(self, publish_at: BrokerURI, receive_at: BrokerURI) -> None:
        super().__init__(name="probe", daemon=True)
        self.publish_at, self.receive_at = publish_at, receive_at
        self.ready = threading.Event()
        self.stop_publishing = threading.Event()
        self.sent: list[float] = []  # number -> monotonic time published
        self.deliveries: list[tuple[int, float]] = []  # (number, monotonic time), as delivered
        self.unacknowledged = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as error:  # reported by the scenario, which must still clean up
            self.error = error
            self.ready.set()

    async def _run(self) -> None:
        clients: list[Client] = []
        try:
            for uri, name in ((self.receive_at, "bench-probe-sub"), (self.publish_at, "bench-probe-pub")):
                clients.append(await Client.connect(uri, name, backoff=DAEMON_BACKOFF))
            receiver, publisher = clients
            stream = await receiver.subscribe(f"[class,eq,{PROBE}]")
            await publisher.advertise(f"[class,eq,{PROBE}],[n,isPresent,0]")
            # until the subscription reaches B1, nothing arrives, but for what stand-ins carry on
            # before the brokers answered the advertisement: a warm-up publication counts only if
            # B1 stood in for no one when it was published (negative numbers, not counted)
            settled: set[int] = set()
            for warm_up in itertools.count(-1, -1):
                if self.stop_publishing.is_set():
                    break
                if (await publisher.status()).get("stand_ins", 0) == 0:
                    settled.add(warm_up)
                await publisher.publish(Publication(PROBE, {"n": warm_up}))
                with contextlib.suppress(TimeoutError):
                    if int((await stream.next(timeout=0.2)).publication["n"]) in settled:
                        break
            receiving = asyncio.create_task(self._receive(stream))
            self.ready.set()
            start = time.monotonic()
            while not self.stop_publishing.is_set():
                publisher.publish_nowait(Publication(PROBE, {"n": len(self.sent)}))
                self.sent.append(time.monotonic())
                await asyncio.sleep(max(0.0, start + len(self.sent) / PROBE_RATE - time.monotonic()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(receiving, PROBE_DRAIN)
            self.unacknowledged = publisher.stats()["unacknowledged"]
        finally:
            for client in clients:
                with contextlib.suppress(OSError, WfmError):
                    await client.close()

    async def _receive(self, stream: Subscription) -> None:
        """Until every number published has come (the warm-up's -1s are left out)."""
        numbers: set[int] = set()
        while not (self.stop_publishing.is_set() and len(numbers) >= len(self.sent)):
            try:
                delivery = await stream.next(timeout=0.2)
            except TimeoutError:
                continue
            except LinkClosed:
                return
            n = int(delivery.publication["n"])
            if n >= 0:
                self.deliveries.append((n, time.monotonic()))
                numbers.add(n)

    def check(self) -> Checked:
        counts = Counter(n for n, _ in self.deliveries)
        out_of_order, top = 0, -1
        for n, _ in self.deliveries:
            if n < top:
                out_of_order += 1
            top = max(top, n)
        times = [at for _, at in self.deliveries]
        silences = [b - a for a, b in itertools.pairwise(times)]
        return Checked(
            published=len(self.sent),
            unacknowledged=self.unacknowledged,
            received=len(counts),
            lost=sum(1 for n in range(len(self.sent)) if n not in counts),
            duplicated=sum(c - 1 for c in counts.values()),
            out_of_order=out_of_order,
            longest_silence_s=round(max(silences, default=0.0), 2),
        )

    def resumed(self, since: float) -> float | None:
        """Seconds from ``since`` to the first delivery after it; None if none came."""
        after = [at for _, at in self.deliveries if at > since]
        return round(min(after) - since, 2) if after else None

    def caught_up(self, since: float) -> float | None:
        """Seconds from ``since`` until every number published before it had arrived (0 if they
        all had by then); None if some never did."""
        before = sum(1 for at in self.sent if at < since)
        first: dict[int, float] = {}
        for n, at in self.deliveries:
            first.setdefault(n, at)
        if any(n not in first for n in range(before)):
            return None
        return round(max(0.0, max((first[n] for n in range(before)), default=since) - since), 2)


def watch(uris: list[BrokerURI], observed: Observed, stop: threading.Event, workflow: str = WORKFLOW) -> None:
    """The monitor-like subscriber: every APPL_END of ``workflow``, until ``stop``."""
    try:
        client = BlockingClient(uris, "bench-reliability-watch", timeout=5)
    except (ConnectError, OSError, WfmError) as error:
        print(f"  watcher could not connect ({error}): counting from the log only")
        return
    try:
        client.subscribe(f"[class,eq,JOBSTATUS],[applname,eq,{workflow}],[jobname,eq,APPL_END]")
        while not stop.is_set():
            delivery = client.receive(timeout=0.2)
            if delivery is not None:
                publication = delivery.publication
                observed.appl_end(str(publication["GID"]), str(publication["status"]))
    except (OSError, WfmError) as error:
        print(f"  watcher gave up ({error}): counting from the log only")
    finally:
        with contextlib.suppress(OSError, WfmError):
            client.close()


def linked(uri: BrokerURI, neighbours: set[str]) -> bool:
    try:
        with BlockingClient(uri, timeout=2) as client:
            return set(client.status().get("neighbors", ())) == neighbours  # type: ignore[call-overload]
    except (ConnectError, OSError, TimeoutError, WfmError):
        return False


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def relinked(uris: list[BrokerURI], since: float, timeout: float = STUCK_AFTER) -> float | None:
    """Seconds from ``since`` until the line B1 - B2 - B3 is whole again; None if not in time."""
    for i, uri in enumerate(uris):
        expected = {uris[j].id for j in (i - 1, i + 1) if 0 <= j < len(uris)}
        try:
            wait_for(lambda u=uri, e=expected: linked(u, e), f"{uri.id} linked", timeout)  # type: ignore[misc]
        except RuntimeError:
            return None
    return round(time.monotonic() - since, 2)


class Faults(threading.Thread):
    """Applies a schedule: SIGKILL of a child, then the same command started again."""

    def __init__(
        self, processes: Processes, faults: list[Fault], start: float, brokers: dict[str, BrokerURI]
    ) -> None:
        super().__init__(name="faults", daemon=True)
        self.processes, self.faults, self.start_time, self.brokers = processes, faults, start, brokers
        self.stop = threading.Event()
        self.last_restart = start - UP_BETWEEN  # when the last restarted process was up
        self.restarts: list[tuple[Child, float, float]] = []  # (child, killed, back), monotonic

    def run(self) -> None:
        for fault in self.faults:
            at = max(self.start_time + fault.at, self.last_restart + UP_BETWEEN)
            if self.stop.wait(max(0.0, at - time.monotonic())):
                return
            child, process = next(p for p in self.processes.running if p[0].name == fault.child)
            process.send_signal(signal.SIGKILL)
            process.wait()
            self.processes.running.remove((child, process))
            killed = time.monotonic()
            if self.stop.wait(fault.down):
                return
            self.processes.start(child)
            back = time.monotonic()
            self.restarts.append((child, killed, back))
            self.last_restart = self.listening(child) or back

    def listening(self, child: Child) -> float | None:
        """When a restarted broker accepts connections again (None for an agent, or a broker not up
        within ``STUCK_AFTER``): the next kill comes ``UP_BETWEEN`` after that, not after the start
        of the process, which can take a second on a busy machine. Killed sooner, a broker is up
        for less time than its neighbours take to redial it, and the gap measured is the schedule's."""
        uri = self.brokers.get(child.name)
        deadline = time.monotonic() + STUCK_AFTER
        while uri is not None and time.monotonic() < deadline and not self.stop.is_set():
            with contextlib.suppress(OSError), socket.create_connection((uri.host, uri.port), timeout=1):
                return time.monotonic()
            time.sleep(0.02)
        return None


def behind(child: Child) -> str:
    """The agent whose work a restart of ``child`` interrupts: that agent, or the one on that broker."""
    kind, _, name = child.name.partition("-")
    return name if kind == "agent" else AGENTS[BROKER_IDS.index(name)]


CUSTODY_COUNTERS = ("dropped", "resent", "unheld", "router_errors", "log_")


def broker_counters(uris: list[BrokerURI]) -> dict[str, dict[str, object]]:
    """What each broker's status (``wfm status --broker URI -o json``) says of custody: what it
    holds, and every drop, resend and error counter that is not zero."""
    found: dict[str, dict[str, object]] = {}
    for uri in uris:
        try:
            with BlockingClient(uri, timeout=3) as client:
                status = client.status()
        except (ConnectError, OSError, TimeoutError, WfmError) as error:
            found[uri.id] = {"error": str(error)}
            continue
        counters: dict[str, int] = status.get("counters", {})  # type: ignore[assignment]
        found[uri.id] = {
            **{key: status.get(key) for key in ("held", "held_for_away", "sessions_waiting")},
            **{k: v for k, v in counters.items() if v and any(w in k for w in CUSTODY_COUNTERS)},
        }
    return found


def run_scenario(
    scenario: str, index: int, generations: int, rate: float, seed: int, keep: Path | None = None
) -> dict[str, object]:
    """One scenario in a temporary folder, or in ``keep/SCENARIO`` (kept, to read the processes'
    logs and the brokers' write-ahead logs afterwards)."""
    rng = random.Random(f"{seed}-{scenario}")
    faults = schedule(scenario, generations / rate, rng)
    with contextlib.ExitStack() as stack:
        if keep is None:
            folder = tempfile.TemporaryDirectory(prefix=f"wfm-reliability-{scenario}-")
            home = Path(stack.enter_context(folder))
        else:
            home = keep / scenario
            home.mkdir(parents=True, exist_ok=False)
        log = home / "jobs.log"
        (home / "workflow.xml").write_text(workflow_xml(log))
        processes = Processes(home / "logs", print)
        stop = threading.Event()
        threads: list[threading.Thread] = []
        fault_thread: Faults | None = None
        probe: Probe | None = None
        try:
            uris, brokers = broker_children(PORT + 10 * index, home)
            for child in brokers:
                processes.start(child)
            if relinked(uris, time.monotonic()) is None:
                raise RuntimeError("the brokers did not link")
            for child in agent_children(AGENTS, uris, home / "agents"):
                processes.start(child)
            deploy = [*WFM, "deploy", str(home / "workflow.xml"), "--broker", str(uris[0]), "--timeout", "60"]
            subprocess.run(deploy, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            gids = [f"{scenario}-{i:04d}" for i in range(generations)]
            observed = Observed(log)
            threads = [
                threading.Thread(target=watch, args=(uris[::-1], observed, stop), daemon=True),
                threading.Thread(target=poll_log, args=(observed, stop), daemon=True),
            ]
            for thread in threads:
                thread.start()
            probe = Probe(uris[0], uris[-1])
            probe.start()
            if not probe.ready.wait(30) or probe.error is not None:
                raise RuntimeError(f"the probe stream did not start: {probe.error or 'timeout'}")
            refused = 0
            with TriggerPublisher(uris, timeout=5) as publisher:
                start = time.monotonic()
                fault_thread = Faults(processes, faults, start, {f"broker-{u.id}": u for u in uris})
                fault_thread.start()
                for i, gid in enumerate(gids):
                    time.sleep(max(0.0, start + i / rate - time.monotonic()))
                    deadline = time.monotonic() + 10
                    while True:
                        try:
                            publisher.publish(WORKFLOW, gid, date.today())
                            break
                        except (ConnectError, OSError, TimeoutError, WfmError):
                            refused += 1
                            if time.monotonic() > deadline:
                                break
                            time.sleep(0.2)
                last_trigger = time.monotonic()
            fault_thread.join()
            settle_from = max(last_trigger, fault_thread.last_restart)
            relink_s = relinked(uris, settle_from)
            # a generation started after the faults: does new work run, whatever was lost?
            with TriggerPublisher(uris, timeout=5) as publisher:
                publisher.publish(WORKFLOW, f"{scenario}-probe", date.today())
            while time.monotonic() < settle_from + STUCK_AFTER and len(observed.completed) < generations + 1:
                time.sleep(0.2)
            time.sleep(1.0)  # a late second run of a job still shows
            probe.stop_publishing.set()
            probe.join(PROBE_DRAIN + 10)
            counters = broker_counters(uris)
        finally:
            stop.set()
            if fault_thread is not None:
                fault_thread.stop.set()
                fault_thread.join()
            if probe is not None:
                probe.stop_publishing.set()
                probe.join(PROBE_DRAIN + 10)
            for thread in threads:
                thread.join(10)
            processes.stop()
    completed = dict(observed.completed)
    probe_gen = completed.pop(f"{scenario}-probe", None)
    complete = len(completed)
    restarts = [
        {
            "process": child.name,
            "killed_s": round(killed - start, 2),
            "back_s": round(back - start, 2),
            "probe_resumed_s": probe.resumed(back),
            "probe_caught_up_s": probe.caught_up(back),
            "next_job_s": observed.next_run(behind(child), back),
            "agent": behind(child),
        }
        for child, killed, back in fault_thread.restarts
    ]
    checked = probe.check()
    return {
        "scenario": scenario,
        "generations": generations,
        "complete": complete,
        "stuck": generations - complete,
        "run_twice": observed.run_twice(),
        "appl_end_failure": sum(1 for status in observed.ended.values() if status != "SUCCESS"),
        "appl_end_seen": len(observed.ended),
        "trigger_retries": refused,
        "catch_up_s": round(max(completed.values()) - settle_from, 2) if complete == generations else None,
        "relinked_s": relink_s,
        "after_faults_complete": probe_gen is not None,
        "probe": dataclasses.asdict(checked),
        "restarts": restarts,
        "gap_after_restart_s": longest_gap(restarts),
        "probe_catch_up_s": worst([r["probe_caught_up_s"] for r in restarts]),  # type: ignore[misc]
        "brokers": counters,
    }


def worst(values: list[float | None]) -> float | None:
    """The largest, or None if one of them never happened (or there are none)."""
    return None if not values or None in values else max(v for v in values if v is not None)


def longest_gap(restarts: list[dict[str, Any]]) -> float | None:
    """The longest wait from a restart until delivery resumed: the probe stream for a broker
    (B1 - B3 crosses it, or starts at it), the restarted agent's next job for an agent (an
    agent that had no job left is not waited for). None if delivery never resumed after one."""
    waited = [
        r["probe_resumed_s"] if r["process"].startswith("broker-") else r["next_job_s"]
        for r in restarts
        if r["process"].startswith("broker-") or r["next_job_s"] is not None
    ]
    return worst(waited) if waited else None


def met(result: dict[str, Any]) -> bool:
    n, probe, gap = result["generations"], result["probe"], result["gap_after_restart_s"]
    return (
        result["complete"] == n
        and result["run_twice"] == TARGET_RUN_TWICE
        and probe["lost"] == 0
        and probe["duplicated"] == 0
        and (not result["restarts"] or (gap is not None and gap <= TARGET_GAP))
    )


def seconds(value: object) -> str:
    return "never" if value is None else f"{value:.2f} s"


def report(result: dict[str, Any], control: dict[str, Any] | None) -> None:
    n = result["generations"]
    complete, twice, probe = result["complete"], result["run_twice"], result["probe"]
    restarted = bool(result["restarts"])
    gap = seconds(result["gap_after_restart_s"]) if restarted else "n/a"
    caught_up = seconds(result["probe_catch_up_s"]) if restarted else "n/a"
    print(
        f"{result['scenario']:14} complete {complete:>4}/{n}  run twice {twice:>3}  "
        f"stuck {result['stuck']:>4}  "
        f"catch-up {seconds(result['catch_up_s'])}  APPL_END FAILURE {result['appl_end_failure']}  "
        f"trigger retries {result['trigger_retries']}  relinked {seconds(result['relinked_s'])}  "
        f"generation after faults {'complete' if result['after_faults_complete'] else 'STUCK'}"
    )
    print(
        f"{'':16}probe B1->B3: {probe['published']} published, {probe['lost']} lost, "
        f"{probe['duplicated']} duplicated, {probe['out_of_order']} out of order, "
        f"{probe['unacknowledged']} unacknowledged; longest silence {probe['longest_silence_s']:.2f} s; "
        f"after a restart: delivery again within {gap}, caught up within {caught_up}   "
        f"targets ({n}/{n}, {TARGET_RUN_TWICE} twice, 0 lost, 0 duplicated, delivery within "
        f"{TARGET_GAP:g} s): {'met' if met(result) else 'NOT met'}"
    )
    for r in result["restarts"]:
        next_job = "none ran" if r["next_job_s"] is None else seconds(r["next_job_s"])
        print(
            f"{'':16}{r['process']} killed at {r['killed_s']:.1f} s, back at {r['back_s']:.1f} s: "
            f"probe again after {seconds(r['probe_resumed_s'])}, caught up after "
            f"{seconds(r['probe_caught_up_s'])}; {r['agent']}'s next job after {next_job}"
        )
    for broker, counters in result["brokers"].items():
        print(f"{'':16}{broker} at the end: {json.dumps(counters)}")
    baseline = None if control is None else control
    line = {
        "benchmark": "reliability",
        "scenario": result["scenario"],
        "complete": complete,
        "generations": n,
        "run_twice": twice,
        "lost": probe["lost"],
        "duplicated": probe["duplicated"],
        "out_of_order": probe["out_of_order"],
        "probe_published": probe["published"],
        "gap_after_restart_s": result["gap_after_restart_s"],
        "catch_up_s": result["catch_up_s"],
        "probe_catch_up_s": result["probe_catch_up_s"],
        "targets_met": met(result),
        "baseline": "scenario none (nothing killed), same run",
        "baseline_complete": None if baseline is None else baseline["complete"],
        "baseline_longest_silence_s": None if baseline is None else baseline["probe"]["longest_silence_s"],
        "ratio": round(complete / baseline["complete"], 3) if baseline and baseline["complete"] else None,
        "cores": os.cpu_count(),
    }
    print("RESULT " + json.dumps(line), flush=True)


# --- the cost of durability ---------------------------------------------------------------------

DURABLE = "DURABLE"  # the class of the durability part's publications
DURABILITY_PORT = PORT + 10 * len(SCENARIOS)  # each configuration uses 3 ports from here on
PAD = "x" * 64  # as in benchmarks/overlay.py
CONFIGURATIONS = {  # name: how the brokers keep their state
    "group": "--data, --fsync group (one fsync per group commit)",
    "each": "--data, --fsync each (one fsync per logged message)",
    "memory": "--memory (state in memory only)",
}
TARGET_EACH = 10.0  # group commit against fsync each: at least this many times the throughput
TARGET_MEMORY = 0.5  # durable against in-memory: at least this fraction
STALLED = 60.0  # seconds without progress after which a configuration's run is given up


def durability_brokers(
    port: int, state: Path, configuration: str, slow_fsync: float = 0.0
) -> tuple[list[BrokerURI], list[Child]]:
    """The line of ``wfm up`` (B1 - B2 - B3, each logging in ``state/brokers/ID``), with the fsync
    policy of ``configuration``, or ``--memory`` for ``memory``; with ``slow_fsync``, each
    broker's fsyncs take that many milliseconds more (``benchmarks/slow_fsync.py``)."""
    uris, children = broker_children(port, state)
    if slow_fsync:
        slowed = (sys.executable, str(Path(__file__).with_name("slow_fsync.py")), f"{slow_fsync:g}")
        children = [dataclasses.replace(c, argv=(*slowed, *c.argv[len(WFM) :])) for c in children]
    if configuration == "memory":
        at = children[0].argv.index("--data")
        children = [
            dataclasses.replace(c, argv=(*c.argv[:at], "--memory", *c.argv[at + 2 :])) for c in children
        ]
    else:
        children = [dataclasses.replace(c, argv=(*c.argv, "--fsync", configuration)) for c in children]
    return uris, children


def durable_subscriber(uri: str, count: int, ready: Any, results: Any) -> None:
    """On B3, in its own process: every publication once and in order, or the count says not."""

    async def run() -> None:
        async with await Client.connect(uri, "bench-durability-sub") as client:
            stream = await client.subscribe(f"[class,eq,{DURABLE}]")
            ready.put(True)
            numbers: set[int] = set()
            duplicated = out_of_order = 0
            top = -1
            last = time.time()
            while len(numbers) < count:
                try:
                    n = int((await stream.next(timeout=STALLED)).publication["n"])
                except TimeoutError:
                    break
                last = time.time()
                duplicated += n in numbers
                out_of_order += n < top
                numbers.add(n)
                top = max(top, n)
            results.put(
                {
                    "last": last,
                    "received": len(numbers),
                    "duplicated": duplicated,
                    "out_of_order": out_of_order,
                }
            )

    asyncio.run(run())


async def publish_durably(uri: BrokerURI, count: int) -> dict[str, float]:
    """On B1: ``count`` publications pipelined, then the wait for every acknowledgement (given
    up ``STALLED`` seconds after the last one came)."""
    async with await Client.connect(uri, "bench-durability-pub") as client:
        await client.advertise(f"[class,eq,{DURABLE}],[n,isPresent,0],[pad,isPresent,'']")
        while (await client.status())["subscriptions"] < 1:  # type: ignore[operator]
            # the advertisement's stand-in for B2 counts as one at once (and routes toward B3
            # until B3's subscriber's own subscription is back): this waits for the
            # advertisement's first hop, not for the subscriber
            await asyncio.sleep(0.02)
        start = time.time()
        for n in range(count):
            fields: dict[str, int | str] = {"n": n, "pad": PAD}
            client.publish_nowait(Publication(DURABLE, fields))
            if n % 200 == 199:
                await asyncio.sleep(0)  # let the writer run
        unacknowledged, since = count, time.time()
        while unacknowledged and time.time() - since < STALLED:
            await asyncio.sleep(0.005)
            if client.stats()["unacknowledged"] < unacknowledged:
                unacknowledged, since = client.stats()["unacknowledged"], time.time()
        return {"start": start, "acknowledged": since, "unacknowledged": unacknowledged}


def measure_durability(configuration: str, index: int, count: int, slow_fsync: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"wfm-durability-{configuration}-") as folder:
        home = Path(folder)
        processes = Processes(home / "logs", print)
        ctx = mp.get_context("spawn")
        ready, results = ctx.Queue(), ctx.Queue()
        subscriber: Any = None
        try:
            uris, children = durability_brokers(DURABILITY_PORT + 3 * index, home, configuration, slow_fsync)
            for child in children:
                processes.start(child)
            if relinked(uris, time.monotonic()) is None:
                raise RuntimeError("the brokers did not link")
            subscriber = ctx.Process(target=durable_subscriber, args=(str(uris[-1]), count, ready, results))
            subscriber.start()
            ready.get(timeout=60)
            published = asyncio.run(publish_durably(uris[0], count))
            received = results.get(timeout=STALLED + 30)
            subscriber.join(30)
            counters = broker_counters(uris)
        finally:
            if subscriber is not None and subscriber.is_alive():
                subscriber.terminate()
            processes.stop()
    end = max(received["last"], published["acknowledged"])
    whole = received["received"] == count and not published["unacknowledged"]
    return {
        "configuration": configuration,
        "brokers": CONFIGURATIONS[configuration],
        "count": count,
        "per_second": round(count / (end - published["start"])) if whole else None,
        "acknowledged_per_second": (
            round(count / (published["acknowledged"] - published["start"])) if whole else None
        ),
        "received": received["received"],
        "unacknowledged": published["unacknowledged"],
        "duplicated": received["duplicated"],
        "out_of_order": received["out_of_order"],
        "brokers_at_end": counters,
    }


def fsync_ms(records: int = 300) -> float:
    """Milliseconds one fsync of a small append takes where the brokers keep their logs (the
    temporary folder), with nothing else of this run going on: what ``--fsync each`` pays per
    logged message, and so what bounds the group/each ratio."""
    with tempfile.TemporaryDirectory(prefix="wfm-durability-fsync-") as folder:
        fd = os.open(Path(folder) / "probe", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            started = time.perf_counter()
            for _ in range(records):
                os.write(fd, PAD.encode())
                os.fsync(fd)
            return round((time.perf_counter() - started) / records * 1000, 3)
        finally:
            os.close(fd)


def durability(count: int, slow_fsync: float = 0.0) -> list[dict[str, Any]]:
    """The three configurations, each on a fresh line of brokers, and one RESULT line per ratio."""
    fsync = fsync_ms()
    print(f"durability: one fsync of a small append takes {fsync} ms here", flush=True)
    if slow_fsync:
        print(f"durability: the brokers' fsyncs each take {slow_fsync:g} ms more (--slow-fsync)", flush=True)
    rows = {name: measure_durability(name, i, count, slow_fsync) for i, name in enumerate(CONFIGURATIONS)}
    for row in rows.values():
        if row["per_second"] is None:
            figure = (
                f"STALLED: {row['received']:,} of {row['count']:,} received, {row['unacknowledged']:,} "
                f"unacknowledged, no progress for {STALLED:g} s"
            )
        else:
            figure = (
                f"{row['per_second']:>7,}/s end to end ({row['acknowledged_per_second']:,}/s acknowledged at "
                f"B1), {row['count']:,} publications"
            )
        print(
            f"durability {row['configuration']:7} {figure}, {row['duplicated']} duplicated, "
            f"{row['out_of_order']} out of order  [{row['brokers']}]"
        )
        for broker, counters in row["brokers_at_end"].items():
            print(f"{'':19}{broker} at the end: {json.dumps(counters)}")
    lines = []
    for baseline, target in (("each", TARGET_EACH), ("memory", TARGET_MEMORY)):
        ours, theirs = rows["group"]["per_second"], rows[baseline]["per_second"]
        ratio = None if ours is None or theirs is None else ours / theirs
        verdict = "not measured (a run stalled)" if ratio is None else "met" if ratio >= target else "NOT met"
        shown = "?" if ratio is None else f"{ratio:.2f}x"
        print(f"durability group commit against {baseline}: {shown} (target {target:g}x: {verdict})")
        line = {
            "benchmark": "reliability-durability",
            "figure": "persistent publications/s through 3 brokers, --fsync group",
            "per_second": ours,
            "baseline": f"{CONFIGURATIONS[baseline]}, same run",
            "baseline_per_second": theirs,
            "ratio": None if ratio is None else round(ratio, 3),
            "target": f"at least {target:g}x",
            "target_met": ratio is not None and ratio >= target,
            "count": count,
            "fsync_ms": fsync,
            "slow_fsync_ms": slow_fsync,
            "cores": os.cpu_count(),
        }
        print("RESULT " + json.dumps(line), flush=True)
        lines.append(line)
    return [*rows.values(), *lines]


def interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generations", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="generations triggered per second")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS, help="repeatable; default all")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--dir", type=Path, help="each scenario's state and logs in DIR/SCENARIO, kept")
    part = parser.add_mutually_exclusive_group()
    part.add_argument("--durability-only", action="store_true", help="only the cost of durability")
    part.add_argument("--no-durability", action="store_true", help="only the fault scenarios")
    parser.add_argument(
        "--durability-count", type=int, default=20_000, help="publications per durability configuration"
    )
    parser.add_argument(
        "--slow-fsync",
        type=float,
        default=0.0,
        metavar="MS",
        help="the durability part's brokers pay MS milliseconds more per fsync: a disk whose fsync "
        "costs milliseconds, where group commit is meant to pay off (this machine's: ~0.1 ms)",
    )
    args = parser.parse_args()
    if args.generations < 1 or args.rate <= 0 or args.durability_count < 1:
        parser.error("--generations and --durability-count must be at least 1 and --rate positive")
    if not 0 <= args.slow_fsync < 1000:
        parser.error("--slow-fsync must be from 0 to 999 milliseconds")
    signal.signal(signal.SIGTERM, interrupted)  # stopped like Ctrl-C: the finally clauses clean up
    summary: dict[str, object] = {"benchmark": "reliability", "cores": os.cpu_count()}
    if not args.durability_only:
        scenarios = [s for s in SCENARIOS if s in (args.scenario or SCENARIOS)]  # the control first
        print(
            f"reliability: {args.generations} generations at {args.rate:g}/s, seed {args.seed}, "
            f"probe {PROBE_RATE:g}/s, {os.cpu_count()} cores",
            flush=True,
        )
        results: list[dict[str, Any]] = []
        control: dict[str, Any] | None = None
        for scenario in scenarios:
            result = run_scenario(
                scenario, SCENARIOS.index(scenario), args.generations, args.rate, args.seed, args.dir
            )
            control = result if scenario == "none" else control
            report(result, control)
            results.append(result)
        summary.update(generations=args.generations, rate=args.rate, seed=args.seed, scenarios=results)
    if not args.no_durability:
        print(f"durability: {args.durability_count:,} publications B1 -> B3 per configuration", flush=True)
        summary["durability"] = durability(args.durability_count, args.slow_fsync)
    print(json.dumps(summary))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("reliability: interrupted (every process started was stopped)") from None
