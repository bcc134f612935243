"""Reliability under faults: the workflow experiment of issue 14, one fault scenario at a time.

Three brokers in a line (B1 - B2 - B3), one agent per broker, started as ``wfm up`` starts them
(``wfm.up``: ``broker_children``, ``agent_children``, ``Processes``), and a 6-job workflow whose
joins span agents (D waits for B on a2 and C on a3; F for D on a1 and E on a2), deployed with
``wfm deploy``. Every job appends ``JOB GID`` to one shared log file, so what ran, and what ran
twice, is counted from the file, not from what the agents claim. N generations are triggered at
R per second (``TriggerPublisher``, failing over along B1, B2, B3), under one fault at a time:

* ``none``: nothing killed; the control, and the baseline every other scenario is compared with;
* ``middle-broker``: SIGKILL of B2 two or three times during the run, restarted after 1-2 s;
* ``edge-broker``: the same for B1, which holds the coordinator (the agent of the first job);
* ``agents``: SIGKILL of a random agent 5 times, restarted after 1-2 s with the same state dir.

A generation is complete when a monitor-like subscriber (on B3, failing over to B2 and B1) sees
its APPL_END SUCCESS, or when the log holds a line of each of its 6 jobs. It is stuck if it is
not complete 30 s after the last trigger or the last restart, whichever is later. Catch-up is
the time from that moment's start (last trigger or restart) to the last completion, given only
when every generation completed. Targets from the issue: N/N complete, 0 run twice.

Each scenario gets a fresh overlay and state; every process is stopped in a ``finally`` (Ctrl-C
included). Faults are drawn from ``--seed``, so a run's schedule can be repeated.

Run: ``python benchmarks/reliability.py [--generations 200] [--rate 20] [--scenario NAME]...``
(about a minute per scenario with the defaults). One ``RESULT`` line per scenario, then one JSON
line with everything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from broker.client import BlockingClient, ConnectError
from broker.errors import WfmError
from broker.transport.uri import BrokerURI
from wfm.triggers import TriggerPublisher
from wfm.up import WFM, Processes, agent_children, broker_children

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

    def __init__(self, processes: Processes, faults: list[Fault], start: float) -> None:
        super().__init__(name="faults", daemon=True)
        self.processes, self.faults, self.start_time = processes, faults, start
        self.stop = threading.Event()
        self.last_restart = start - UP_BETWEEN
        self.done: list[str] = []

    def run(self) -> None:
        for fault in self.faults:
            at = max(self.start_time + fault.at, self.last_restart + UP_BETWEEN)
            if self.stop.wait(max(0.0, at - time.monotonic())):
                return
            child, process = next(p for p in self.processes.running if p[0].name == fault.child)
            process.send_signal(signal.SIGKILL)
            process.wait()
            self.processes.running.remove((child, process))
            killed = time.monotonic() - self.start_time
            if self.stop.wait(fault.down):
                return
            self.processes.start(child)
            self.last_restart = time.monotonic()
            self.done.append(
                f"{child.name} killed at {killed:.1f} s, back at {self.last_restart - self.start_time:.1f} s"
            )


def run_scenario(scenario: str, index: int, generations: int, rate: float, seed: int) -> dict[str, object]:
    rng = random.Random(f"{seed}-{scenario}")
    faults = schedule(scenario, generations / rate, rng)
    with tempfile.TemporaryDirectory(prefix=f"wfm-reliability-{scenario}-") as folder:
        home = Path(folder)
        log = home / "jobs.log"
        (home / "workflow.xml").write_text(workflow_xml(log))
        processes = Processes(home / "logs", print)
        stop = threading.Event()
        watcher: threading.Thread | None = None
        fault_thread: Faults | None = None
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
            watcher = threading.Thread(target=watch, args=(uris[::-1], observed, stop), daemon=True)
            watcher.start()
            refused = 0
            with TriggerPublisher(uris, timeout=5) as publisher:
                start = time.monotonic()
                fault_thread = Faults(processes, faults, start)
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
                    observed.read_log()
                last_trigger = time.monotonic()
            fault_thread.join()
            settle_from = max(last_trigger, fault_thread.last_restart)
            relink_s = relinked(uris, settle_from)
            # a generation started after the faults: does new work run, whatever was lost?
            with TriggerPublisher(uris, timeout=5) as publisher:
                publisher.publish(WORKFLOW, f"{scenario}-probe", date.today())
            while time.monotonic() < settle_from + STUCK_AFTER and len(observed.completed) < generations + 1:
                time.sleep(0.2)
                observed.read_log()
            time.sleep(1.0)  # a late second run of a job still shows
            observed.read_log()
        finally:
            stop.set()
            if fault_thread is not None:
                fault_thread.stop.set()
                fault_thread.join()
            if watcher is not None:
                watcher.join(10)
            processes.stop()
    probe = observed.completed.pop(f"{scenario}-probe", None)
    complete = len(observed.completed)
    return {
        "scenario": scenario,
        "generations": generations,
        "complete": complete,
        "stuck": generations - complete,
        "run_twice": observed.run_twice(),
        "appl_end_failure": sum(1 for status in observed.ended.values() if status != "SUCCESS"),
        "appl_end_seen": len(observed.ended),
        "trigger_retries": refused,
        "catch_up_s": (
            round(max(observed.completed.values()) - settle_from, 2) if complete == generations else None
        ),
        "relinked_s": relink_s,
        "probe_complete": probe is not None,
        "faults": fault_thread.done,
    }


def report(result: dict[str, object], control: dict[str, object] | None) -> None:
    n = result["generations"]
    complete, twice = result["complete"], result["run_twice"]
    met = "met" if complete == n and twice == TARGET_RUN_TWICE else "NOT met"
    catch_up, relink = result["catch_up_s"], result["relinked_s"]
    print(
        f"{result['scenario']:14} complete {complete:>4}/{n}  run twice {twice:>3}  "
        f"stuck {result['stuck']:>4}  "
        f"catch-up {'never' if catch_up is None else f'{catch_up:.1f} s':>8}  "
        f"APPL_END FAILURE {result['appl_end_failure']}  trigger retries {result['trigger_retries']}  "
        f"relinked {'never' if relink is None else f'{relink} s'}  "
        f"probe after faults {'complete' if result['probe_complete'] else 'STUCK'}   "
        f"target {n}/{n}, {TARGET_RUN_TWICE} twice: {met}"
    )
    for line in result["faults"]:  # type: ignore[attr-defined]
        print(f"{'':16}{line}")
    baseline = None if control is None else control["complete"]
    line = {
        "benchmark": "reliability",
        "scenario": result["scenario"],
        "complete": complete,
        "generations": n,
        "run_twice": twice,
        "baseline": "scenario none (nothing killed), same run",
        "baseline_complete": baseline,
        "ratio": round(complete / baseline, 3) if baseline else None,  # type: ignore[operator]
        "cores": os.cpu_count(),
    }
    print("RESULT " + json.dumps(line))


def interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generations", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="generations triggered per second")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS, help="repeatable; default all")
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    if args.generations < 1 or args.rate <= 0:
        parser.error("--generations must be at least 1 and --rate positive")
    signal.signal(signal.SIGTERM, interrupted)  # stopped like Ctrl-C: the finally clauses clean up
    scenarios = [s for s in SCENARIOS if s in (args.scenario or SCENARIOS)]  # the control first
    print(
        f"reliability: {args.generations} generations at {args.rate:g}/s, seed {args.seed}, "
        f"{os.cpu_count()} cores"
    )
    results: list[dict[str, object]] = []
    control: dict[str, object] | None = None
    for scenario in scenarios:
        result = run_scenario(scenario, SCENARIOS.index(scenario), args.generations, args.rate, args.seed)
        control = result if scenario == "none" else control
        report(result, control)
        results.append(result)
    summary = {"generations": args.generations, "rate": args.rate, "seed": args.seed}
    print(json.dumps({"benchmark": "reliability", "cores": os.cpu_count(), **summary, "scenarios": results}))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("reliability: interrupted (every process started was stopped)") from None
