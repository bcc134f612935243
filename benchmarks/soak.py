"""Soak: does anything grow with history? Disk, memory and restart time over many generations.

Issue 14's target: restart under 1 s, and flat disk and memory, after 100,000 generations. The
overlay is started as ``wfm up`` starts it (``wfm.up``: three brokers in a line, each with its
write-ahead log under ``--data``; agent1 on B1, agent2 on B2, agent3 on B3) and a 3-job workflow
whose join spans agents (A on agent1, the coordinator; B on agent2 after A; C on agent3 after A
and B; every command ``true``) is deployed. The agents run with the retention a demanding user
would pick for a long run (``--keep-runs 100 --keep-days 1``). Then:

1. **Restarts with no history** (the baselines), three of each kind: agent1 SIGKILLed and
   started again, agent1 stopped cleanly (SIGTERM) and started again, the same two for B2. An
   agent serves again when a generation triggered as it restarts completes (one is triggered every
   0.25 s until one does; those that never complete are counted as lost probes); a broker when
   ``wfm status`` answers on every broker and the line B1 - B2 - B3 is linked again (the next
   generation's time is given too).
2. **The soak**: N generations triggered at R per second (``TriggerPublisher``); at every tenth of
   N a sample: disk use (blocks) and files of each agent's state directory and each broker's data
   directory, resident memory (``VmRSS``) of each process, generations completed, and what could
   grow inside them: an agent's journal tail, snapshot (the generations in progress and the ended
   ones it remembers) and run-log folders; a broker's log and snapshot files, inputs and
   checkpoints, and its ``wfm status`` (``held``, join state waiting, sessions and peers kept).
3. **The same restarts after the history**, timed the same way.

One ``RESULT`` line per figure, with a baseline measured in the same run, their ratio (about 1:
flat) and the core count: for disk and memory, the peak over the second half of the samples
against the peak over the first (compaction, snapshots and pruning make each a sawtooth: two
single samples could compare a trough with a crest), with the growth per 1,000 generations over
the second half; for restarts, the median after the soak against the median before it (target:
under 1 s). A ``grew`` line names every measured part whose second-half peak is more than 1.5
times its first-half peak.

Run: ``python benchmarks/soak.py [--generations 2000] [--rate 10]`` (about 4 minutes with the
defaults); the issue's run is ``--generations 100000 --rate 50 --keep-days 0.01`` (36 minutes,
docs/performance.md). The last line is
one JSON object with every sample.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

from reliability import Observed, interrupted, relinked, wait_for, watch

from broker.client import BlockingClient, ConnectError
from broker.durable.log import read_snapshot
from broker.errors import WfmError
from broker.transport.uri import BrokerURI
from wfm.triggers import TriggerPublisher
from wfm.up import WFM, Processes, agent_children, broker_children
from workflows import AGENTS, xml

PORT = 7500
WORKFLOW = "SOAK"
JOBS = [("A", ()), ("B", ("A",)), ("C", ("A", "B"))]  # round-robin on agent1, agent2, agent3
KEEP_RUNS, KEEP_DAYS = 100, 1.0
AGENT, BROKER = "agent-agent1", "broker-B2"  # the coordinator, and the middle of the line
SAMPLES = 10
RESTARTS = 3  # tries of each kind of restart, before and after the soak
PROBE_EVERY = 0.25  # seconds between probe generations while a restarted process is not serving
PROBE_LATE = 1.0  # seconds an earlier probe may still complete before it is counted lost
SETTLE = 120.0  # seconds the last generations may take to complete after the last trigger
TARGET_RESTART_S = 1.0
GREW = 1.5  # an end value more than this times the first sample's is named as growing
MiB = 1 << 20
COUNTED = {"rss", "inputs", "log_checkpoints"}  # memory has its own line; counters only go up


def disk(path: Path) -> tuple[int, int]:
    """Bytes on disk (allocated blocks) and regular files under ``path``."""
    used, files = 0, 0
    for root, dirs, names in os.walk(path):
        for name in (*dirs, *names):
            with contextlib.suppress(FileNotFoundError):  # a run log pruned meanwhile
                used += os.lstat(os.path.join(root, name)).st_blocks * 512
        files += len(names)
    return used, files


def rss(pid: int) -> int:
    """Resident memory of process ``pid`` in bytes (``VmRSS``), 0 if it has gone."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def agent_parts(state: Path) -> dict[str, int]:
    """What can grow in an agent's state directory: the journal's tail and snapshot, what the
    snapshot remembers (generations in progress, ended ones kept as duplicates' filter for
    ``--keep-days``), and the run-log folders (one per generation, pruned by retention)."""
    journal = state / "journal"
    snapshots = sorted(journal.glob("snap-*"), key=lambda p: int(p.name[len("snap-") :]))
    parts = {
        "journal_bytes": sum(map(size, journal.glob("log-*"))),
        "snapshot_bytes": size(snapshots[-1]) if snapshots else 0,
    }
    with contextlib.suppress(FileNotFoundError, IndexError, TypeError, ValueError, KeyError):
        snapshot = json.loads(read_snapshot(snapshots[-1]) or b"")  # a checkpoint may remove it
        parts["snapshot_generations"] = len(snapshot["generations"])
        parts["snapshot_ended"] = len(snapshot["ended"])
    logs = state / "logs"
    parts["run_log_folders"] = sum(
        1 for workflow in (logs.iterdir() if logs.is_dir() else ()) for _ in workflow.iterdir()
    )
    with contextlib.suppress(OSError, ValueError):  # the supervisor daemon names itself in its lock
        parts["supervisor_rss"] = rss(int((state / "supervisor.lock").read_text().split()[0]))
    return parts


def broker_parts(data: Path, uri: BrokerURI) -> dict[str, int]:
    """What can grow in a broker: its write-ahead log and snapshot files, and the tables its
    status shows (messages in custody, join state, sessions and neighbours kept while away)."""
    files = list(data.iterdir()) if data.is_dir() else []
    parts = {
        "log_bytes": sum(size(f) for f in files if f.name.startswith("log")),
        "snapshot_bytes": sum(size(f) for f in files if f.name.startswith("snap")),
    }
    try:
        with BlockingClient(uri, timeout=5) as client:
            status: dict[str, Any] = client.status()
    except (ConnectError, OSError, TimeoutError, WfmError):
        return parts
    for field in ("held", "held_for_away", "composite_waiting", "sessions_waiting", "subscriptions"):
        parts[field] = int(status.get(field, 0))
    parts["away"] = len(status.get("away", ()))
    parts["composite_dropped"] = int(status.get("composite_dropped", 0))
    counters = status.get("counters", {})
    parts["inputs"] = sum(int(v) for k, v in counters.items() if k.startswith("in."))
    parts["log_checkpoints"] = int(counters.get("link.log_checkpoints", 0))
    return parts


class Overlay:
    """The running overlay: its processes, the brokers' addresses, and what the watcher saw."""

    def __init__(self, home: Path, keep_runs: int, keep_days: float) -> None:
        self.home = home
        self.processes = Processes(home / "logs", print)
        self.uris, brokers = broker_children(PORT, home)
        retention = ("--keep-runs", str(keep_runs), "--keep-days", str(keep_days))
        agents = [
            replace(c, argv=(*c.argv, *retention)) for c in agent_children(AGENTS, self.uris, home / "agents")
        ]
        self.children = [*brokers, *agents]
        self.observed = Observed(home / "jobs.log")  # jobs are `true`: completions come from APPL_END
        self.stop = threading.Event()
        self.watcher = threading.Thread(
            target=watch, args=(self.uris[::-1], self.observed, self.stop, WORKFLOW), daemon=True
        )
        self.probes = 0

    def start(self) -> None:
        for child in self.children[:3]:
            self.processes.start(child)
        if relinked(self.uris, time.monotonic()) is None:
            raise RuntimeError("the brokers did not link")
        for child in self.children[3:]:
            self.processes.start(child)
        (self.home / "soak.xml").write_text(xml(WORKFLOW, JOBS))
        deploy = [
            *WFM,
            "deploy",
            str(self.home / "soak.xml"),
            "--broker",
            str(self.uris[0]),
            "--timeout",
            "60",
        ]
        subprocess.run(deploy, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        self.watcher.start()
        with TriggerPublisher(self.uris, timeout=5) as publisher:  # until the watcher sees one end
            for attempt in range(30):
                publisher.publish(WORKFLOW, f"warm-up-{attempt}", date.today())
                with contextlib.suppress(RuntimeError):
                    wait_for(lambda: bool(self.observed.completed), "a first generation", 2.0)
                    return
        raise RuntimeError("no generation completed after deployment")

    def close(self) -> None:
        self.stop.set()
        if self.watcher.is_alive():
            self.watcher.join(10)
        self.processes.stop()

    def completed(self) -> int:
        with self.observed.lock:
            return len(self.observed.completed)

    def serves(self, since: float, timeout: float = 60.0) -> tuple[float, int]:
        """Trigger probe generations every PROBE_EVERY seconds until one completes: seconds from
        ``since`` to that, and how many probes triggered before it never completed (Triggers that
        reached no agent: a clean stop withdraws the agent's session, a kill does not)."""
        gids: list[str] = []
        deadline = time.monotonic() + timeout
        with TriggerPublisher(self.uris, timeout=5) as publisher:
            while not any(gid in self.observed.completed for gid in gids):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"none of {len(gids)} probe generations completed in {timeout:g} s")
                self.probes += 1
                gids.append(f"probe-{self.probes}")
                publisher.publish(WORKFLOW, gids[-1], date.today())
                with contextlib.suppress(RuntimeError):
                    wait_for(lambda: any(g in self.observed.completed for g in gids), "a probe", PROBE_EVERY)
        first = min(self.observed.completed[g] for g in gids if g in self.observed.completed)
        time.sleep(PROBE_LATE)  # an earlier probe that is only slower is not lost
        return round(first - since, 3), sum(1 for g in gids if g not in self.observed.completed)

    def restart(self, name: str, how: signal.Signals) -> float:
        """Stop child ``name`` with ``how`` and start it again; when it was started (monotonic)."""
        child, process = next(p for p in self.processes.running if p[0].name == name)
        process.send_signal(how)
        process.wait(30)
        self.processes.running.remove((child, process))
        started = time.monotonic()
        self.processes.start(child)
        return started

    def restarts(self) -> dict[str, dict[str, Any]]:
        """Seconds until each restarted process serves again, the median of RESTARTS tries (agent:
        a generation triggered as it restarts completes; broker: every broker answers and is
        linked; then a generation), with every try and the probes lost."""
        times: dict[str, dict[str, Any]] = {}
        for name, how in itertools.product((AGENT, BROKER), (signal.SIGKILL, signal.SIGTERM)):
            tries: list[float | None] = []
            generation, lost = [], 0
            for _ in range(RESTARTS):
                started = self.restart(name, how)
                if name == BROKER:
                    tries.append(relinked(self.uris, started))
                serves, probes_lost = self.serves(started)
                generation.append(serves)
                lost += probes_lost
            if name == AGENT:
                tries = list(generation)
            done = [t for t in tries if t is not None]
            median = statistics.median(done) if len(done) == len(tries) else None
            times[f"{name} {how.name}"] = {"serves_s": median, "tries_s": tries, "probes_lost": lost}
            if name == BROKER:
                times[f"{name} {how.name}"]["generation_s"] = statistics.median(generation)
        return times

    def sample(self, at: str, triggered: int) -> dict[str, Any]:
        self.processes.check()  # a process that died on its own is the finding, not a bad sample
        processes: dict[str, dict[str, int]] = {}
        for child, process in self.processes.running:
            kind, _, name = child.name.partition("-")
            where = self.home / ("brokers" if kind == "broker" else "agents") / name
            used, files = disk(where)
            parts = (
                broker_parts(where, self.uris[int(name[1:]) - 1]) if kind == "broker" else agent_parts(where)
            )
            processes[child.name] = {"disk": used, "files": files, "rss": rss(process.pid), **parts}
        return {"at": at, "triggered": triggered, "completed": self.completed(), "processes": processes}


def show(sample: dict[str, Any]) -> None:
    print(f"  {sample['at']:>5}  triggered {sample['triggered']:>7}  completed {sample['completed']:>7}")
    for name, figures in sample["processes"].items():
        rest = "  ".join(f"{k} {v}" for k, v in figures.items() if k not in ("disk", "files", "rss"))
        print(
            f"         {name:14} disk {figures['disk'] / MiB:7.2f} MiB  files {figures['files']:>6}  "
            f"rss {figures['rss'] / MiB:6.1f} MiB  {rest}"
        )


def soak(overlay: Overlay, generations: int, rate: float) -> list[dict[str, Any]]:
    """Trigger ``generations`` at ``rate``, sampling at every tenth; the last sample is taken once
    every generation completed (or SETTLE seconds after the last trigger)."""
    points = {max(1, round(generations * k / SAMPLES)): f"{100 * k // SAMPLES}%" for k in range(1, SAMPLES)}
    samples = []
    with TriggerPublisher(overlay.uris, timeout=5) as publisher:
        start = time.monotonic()
        for i in range(generations):
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
            publisher.publish(WORKFLOW, f"soak-{i:07d}", date.today())
            if i + 1 in points:
                samples.append(overlay.sample(points[i + 1], i + 1))
                show(samples[-1])
    last = time.monotonic()
    soaked = {f"soak-{i:07d}" for i in range(generations)}
    while time.monotonic() < last + SETTLE and not soaked <= overlay.observed.completed.keys():
        time.sleep(0.5)
    samples.append(overlay.sample("end", generations))
    samples[-1]["settle_s"] = round(time.monotonic() - last, 1)
    samples[-1]["soak_completed"] = len(soaked & overlay.observed.completed.keys())
    show(samples[-1])
    return samples


def result(figure: str, value: float, unit: str, baseline: str, base: float, **extra: object) -> None:
    ratio = round(value / base, 3) if base else None
    print(
        f"{figure:44} {value:10.3f} {unit:4} {baseline} {base:.3f} {unit}   ratio {ratio}   "
        f"cores {os.cpu_count()}"
    )
    line = {"benchmark": "soak", "figure": figure, "value": value, "unit": unit, "baseline": baseline}
    print(
        "RESULT "
        + json.dumps({**line, "baseline_value": base, "ratio": ratio, **extra, "cores": os.cpu_count()})
    )


def peaks(samples: list[dict[str, Any]], name: str) -> dict[str, int]:
    """The largest value of every figure of process ``name`` over ``samples``."""
    peak: dict[str, int] = {}
    for sample in samples:
        for key, value in sample["processes"][name].items():
            peak[key] = max(peak.get(key, value), value)
    return peak


def report(
    samples: list[dict[str, Any]], before: dict[str, Any], after: dict[str, Any], generations: int
) -> None:
    """Disk and memory: the peak over the second half of the run against the peak over the
    first (compaction, snapshots and pruning make every figure a sawtooth, so two samples could
    compare a trough with a crest); restarts: after the soak against before it."""
    half = len(samples) // 2
    end = samples[-1]
    result(
        "generations completed",
        end["soak_completed"],
        "gen",
        "triggered",
        generations,
        settle_s=end["settle_s"],
    )
    for name in end["processes"]:
        early, late = peaks(samples[:half], name), peaks(samples[half:], name)
        for key, label in (("disk", "disk use"), ("rss", "resident memory")):
            first_late, last = samples[half]["processes"][name][key], end["processes"][name][key]
            slope = (last - first_late) / MiB / max(end["triggered"] - samples[half]["triggered"], 1) * 1000
            result(
                f"{name} {label}, peak 2nd half",
                late[key] / MiB,
                "MiB",
                "peak 1st half",
                early[key] / MiB,
                mib_per_1000_generations_2nd_half=round(slope, 3),
            )
        grown = [
            f"{key} {early.get(key, 0)} -> {value}"
            for key, value in late.items()
            if key not in COUNTED
            and value > GREW * max(early.get(key, 0), 1)
            and value - early.get(key, 0) > 100
        ]
        if grown:
            print(f"  grew: {name}: {', '.join(grown)} (peak of the 1st half -> of the 2nd)")
    for what, times in after.items():
        value, base = times["serves_s"], before[what]["serves_s"]
        if value is None or base is None:
            print(f"  {what}: did not serve again in time (before {base}, after {value})")
            continue
        extra = {"target_s": TARGET_RESTART_S, "met": value < TARGET_RESTART_S}
        extra |= {k: v for k, v in times.items() if k != "serves_s"}
        extra |= {f"baseline_{k}": v for k, v in before[what].items() if k != "serves_s"}
        result(f"{what} restart until it serves", value, "s", "the same before the soak", base, **extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generations", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=10.0, help="generations triggered per second")
    parser.add_argument("--keep-runs", type=int, default=KEEP_RUNS, help="given to every agent")
    parser.add_argument("--keep-days", type=float, default=KEEP_DAYS, help="given to every agent")
    parser.add_argument("--dir", type=Path, help="state and logs here, kept (default: a temporary folder)")
    args = parser.parse_args()
    if args.generations < SAMPLES or args.rate <= 0:
        parser.error(f"--generations must be at least {SAMPLES} and --rate positive")
    signal.signal(signal.SIGTERM, interrupted)  # stopped like Ctrl-C: the finally clauses clean up
    print(
        f"soak: {args.generations} generations at {args.rate:g}/s, agents --keep-runs {args.keep_runs} "
        f"--keep-days {args.keep_days:g}, {os.cpu_count()} cores"
    )
    with contextlib.ExitStack() as stack:
        if args.dir is None:
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="wfm-soak-")))
        else:
            args.dir.mkdir(parents=True, exist_ok=False)
            home = args.dir
        overlay = Overlay(home, args.keep_runs, args.keep_days)
        try:
            overlay.start()
            before = overlay.restarts()
            print(f"  restarts before the soak: {before}")
            samples = soak(overlay, args.generations, args.rate)
            after = overlay.restarts()
            print(f"  restarts after the soak: {after}")
        finally:
            overlay.close()
    report(samples, before, after, args.generations)
    summary = {"generations": args.generations, "rate": args.rate, "keep_runs": args.keep_runs}
    summary |= {"keep_days": args.keep_days, "restarts_before": before, "restarts_after": after}
    print(json.dumps({"benchmark": "soak", "cores": os.cpu_count(), **summary, "samples": samples}))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("soak: interrupted (every process started was stopped)") from None
