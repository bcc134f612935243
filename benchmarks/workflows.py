"""End-to-end workflow speed: real brokers, agents and job processes, as ``wfm up`` runs them.

Starts ``wfm up`` (three brokers in a line, one agent per agent name, every workflow deployed) on
a directory of generated workflows whose jobs run ``true``, then times, from the Trigger to the
generation's APPL_END as a subscriber on B1 sees them:

* a chain of 40 no-op jobs;
* one generation of a 10-job workflow (latency, p50 of 20), and 50 generations triggered at once
  (generations per second); Temporal's cited p50 to start a workflow is 14 ms;
* 100 concurrent generations of PAYROLL's shape, and of a 5-job diamond;
* a 1,000-job workflow (10 wide, 100 deep): deployment and one generation;
* the schedulers' exactly-once count: three ``wfm schedule`` loops side by side on a cron of
  every second, each slot's gid derived from the slot (leaderless): slots fired, generations
  started (APPL_STARTs seen), duplicates; baseline in the same run: the same three loops with
  random gids (what an unco-ordinated pair of schedulers does), which start every slot three times.

The baseline measured in the same run is the floor for the chain: the same 40 commands run one
after the other by ``subprocess`` with no overlay at all; the ratio says what the decentralised
machinery adds. The peer measured in the same run is Luigi (``peers_luigi.py``, the ``bench``
extra) on the chain and the 100 diamonds. Targets: the chain under 2 s, the 100 PAYROLL
generations under 10 s.

The cost of a pool acquisition (``--only pool``): a 2-job workflow whose job on agent2 is in a
pool of one slot kept by agent1 (its request and its grant cross the overlay both ways, signed),
trigger to APPL_END, p50 of 20, against the same workflow without the pool in the same run; the
difference is what waiting for the grant of a free slot costs.

Run: ``python benchmarks/workflows.py`` (about a minute; ``--only schedulers`` or ``--only pool``
for that figure alone). The last line is one JSON object.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from datetime import date, datetime
from pathlib import Path
from xml.sax.saxutils import escape

from tzlocal import get_localzone

from broker.client import BlockingClient
from broker.client.reconnect import BrokerList, brokers
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI
from wfm.scheduler import fire, run_schedule
from wfm.timetable import Entry, parse_cron
from wfm.triggers import TriggerPublisher, new_gid
from workflow_messages import Calendar

PORT = 7300
AGENTS = ("agent1", "agent2", "agent3")
TODAY = date(2026, 11, 27)  # a Friday: PAYROLL's JobC runs


def xml(name: str, jobs: Iterable[tuple[str, tuple[str, ...]]], command: str = "true") -> str:
    """The workflow ``name`` of ``jobs`` (name, predecessors), spread over AGENTS round-robin (the
    first job on the first agent, the coordinator), each running ``command``."""
    lines = [f'<workflow name="{name}">']
    for n, (job, after) in enumerate(jobs):
        lines.append(f'  <job name="{job}" agent="{AGENTS[n % len(AGENTS)]}">')
        lines += [f'    <after job="{p}"/>' for p in after]
        lines += [f"    <command>{escape(command)}</command>", "  </job>"]
    lines.append("</workflow>")
    return "\n".join(lines) + "\n"


def chain(size: int) -> list[tuple[str, tuple[str, ...]]]:
    return [(f"J{n}", (f"J{n - 1}",) if n else ()) for n in range(size)]


def grid(width: int, depth: int) -> list[tuple[str, tuple[str, ...]]]:
    """``depth`` layers of ``width`` jobs; each job after the job above it and its left neighbour's."""
    jobs = []
    for layer in range(depth):
        for column in range(width):
            above = (
                () if layer == 0 else tuple({f"J{layer - 1}_{column}", f"J{layer - 1}_{max(column - 1, 0)}"})
            )
            jobs.append((f"J{layer}_{column}", tuple(sorted(above))))
    return jobs


WORKFLOWS = {
    "CHAIN40": chain(40),
    "TEN": [
        ("A", ()),
        ("B", ("A",)),
        ("C", ("A",)),
        ("D", ("A",)),
        ("E", ("B", "C")),
        ("F", ("C", "D")),
        ("G", ("E",)),
        ("H", ("F",)),
        ("I", ("G", "H")),
        ("J", ("I",)),
    ],
    "PAYROLL": [("JobA", ()), ("JobB", ("JobA",)), ("JobC", ("JobA",)), ("JobD", ("JobB", "JobC"))],
    "DIAMOND": [("A", ()), ("B", ("A",)), ("C", ("A",)), ("D", ("A",)), ("E", ("B", "C", "D"))],
    "TICK": [("A", ())],
    "UNPOOLED": [("K", ()), ("A", ())],  # K on agent1 (the coordinator), A on agent2
}
POOL = '<pool name="p" slots="1" keeper="agent1"/>'  # POOLED: UNPOOLED with A in a pool agent1 keeps
SCHEDULERS, SCHEDULED_FOR = 3, 10.0  # schedulers side by side, seconds of a cron of every second
BIG = grid(10, 100)


class Watch:
    """A subscriber on B1 that timestamps every APPL_END."""

    def __init__(self, uri: BrokerList) -> None:
        self.client = BlockingClient(uri, "bench-watch", timeout=30)
        self.client.subscribe("[class,eq,JOBSTATUS],[jobname,eq,APPL_END],[GID,isPresent,'']")
        self.ended: dict[str, tuple[float, str]] = {}

    def wait(self, gids: set[str], timeout: float) -> float:
        """Until every gid has ended; returns the time of the last end."""
        deadline = time.perf_counter() + timeout
        while not gids <= self.ended.keys():
            if time.perf_counter() > deadline:
                missing = sorted(gids - self.ended.keys())
                raise TimeoutError(f"{len(missing)} generations did not end, e.g. {missing[:3]}")
            delivery = self.client.receive(timeout=0.5)
            if delivery is not None:
                self.ended[str(delivery.publication["GID"])] = (
                    time.perf_counter(),
                    str(delivery.publication["status"]),
                )
        return max(self.ended[g][0] for g in gids)


def run(
    trigger: TriggerPublisher, watch: Watch, workflow: str, gids: list[str], timeout: float = 120
) -> float:
    """Trigger ``gids`` at once; seconds until the last APPL_END."""
    start = time.perf_counter()
    for gid in gids:
        trigger.publish(workflow, gid, TODAY)
    end = watch.wait(set(gids), timeout)
    failed = [g for g in gids if watch.ended[g][1] != "SUCCESS"]
    if failed:
        raise RuntimeError(f"{len(failed)} generations of {workflow} failed")
    return end - start


def baseline(size: int) -> float:
    start = time.perf_counter()
    for _ in range(size):
        subprocess.run(["/bin/sh", "-c", "true"], check=True)
    return time.perf_counter() - start


def luigi_figures() -> dict[str, float | int | str]:
    """Luigi on the chain and the diamonds (``peers_luigi.py``, a process of its own)."""
    script = Path(__file__).with_name("peers_luigi.py")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    if done.returncode:
        return {"luigi": f"failed: {done.stderr.strip().splitlines()[-1:]}"}
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def report(name: str, value: float, unit: str, baseline_name: str, baseline_value: float) -> None:
    print(
        f"{name:46} {value:9.3f} {unit:4} {baseline_name} {baseline_value:.3f} {unit}   "
        f"ratio {value / baseline_value:.2f}   cores {os.cpu_count()}"
    )


def schedulers(b1: BrokerList, leaderless: bool) -> dict[str, int]:
    """SCHEDULERS schedule loops, each with its own connection, on a cron of every second for
    SCHEDULED_FOR seconds: slots fired, generations started (APPL_STARTs of TICK seen by a
    subscriber), duplicates (starts beyond one per slot). ``leaderless``: each slot's gid is
    derived from the slot (``wfm schedule``); else a random gid per fire (the baseline)."""
    entry = Entry("TICK", parse_cron("* * * * * *", get_localzone()), Calendar())
    starts = BlockingClient(b1, "bench-starts", timeout=30)
    starts.subscribe("[class,eq,JOBSTATUS],[applname,eq,TICK],[jobname,eq,APPL_START]")
    slots: set[datetime] = set()
    lock, stop = threading.Lock(), threading.Event()

    def loop() -> None:
        with TriggerPublisher(b1) as publisher:

            def job(entry: Entry, slot: datetime) -> None:
                with lock:
                    slots.add(slot)
                if leaderless:
                    fire(entry, publisher, slot)
                else:
                    publisher.publish(entry.workflow, new_gid(slot), slot.date())

            run_schedule([entry], job, stop)

    threads = [threading.Thread(target=loop) for _ in range(SCHEDULERS)]
    for thread in threads:
        thread.start()
    time.sleep(SCHEDULED_FOR)
    stop.set()
    for thread in threads:
        thread.join()
    started: dict[str, int] = {}
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 3.0:  # until 3 s bring no more starts
        delivery = starts.receive(timeout=0.5)
        if delivery is not None:
            gid = str(delivery.publication["GID"])
            started[gid] = started.get(gid, 0) + 1
            quiet_since = time.monotonic()
    starts.close()
    generations = sum(started.values())
    return {"slots": len(slots), "generations": generations, "duplicates": generations - len(slots)}


def report_schedulers(b1: BrokerList) -> dict[str, int]:
    ours, baseline = schedulers(b1, leaderless=True), schedulers(b1, leaderless=False)
    print(
        f"RESULT {SCHEDULERS} schedulers, 1 s cron, {SCHEDULED_FOR:g} s: slots {ours['slots']} "
        f"generations {ours['generations']} duplicates {ours['duplicates']}   baseline (random "
        f"gids): slots {baseline['slots']} generations {baseline['generations']} "
        f"duplicates {baseline['duplicates']}"
    )
    return {
        **{f"schedulers_{key}": value for key, value in ours.items()},
        **{f"schedulers_random_gid_{key}": value for key, value in baseline.items()},
    }


def pooled() -> str:
    """UNPOOLED, renamed POOLED, its job A in the pool of one slot that agent1 keeps."""
    text = xml("POOLED", WORKFLOWS["UNPOOLED"])
    text = text.replace('<workflow name="POOLED">', f'<workflow name="POOLED">\n  {POOL}')
    return text.replace('<job name="A" agent="agent2">', '<job name="A" agent="agent2" pool="p">')


def report_pool(b1: BrokerList) -> dict[str, float]:
    """Trigger to APPL_END of POOLED and UNPOOLED, alternated, p50 of 20 each."""
    watch = Watch(b1)
    with TriggerPublisher(b1) as trigger:
        for workflow in ("POOLED", "UNPOOLED"):  # the first generations pay for imports and connections
            run(trigger, watch, workflow, [f"{workflow}-warm-up"])
        times: dict[str, list[float]] = {"POOLED": [], "UNPOOLED": []}
        for i in range(20):
            for workflow, measured in times.items():
                measured.append(run(trigger, watch, workflow, [f"{workflow}-{i}"]))
    watch.client.close()
    pool, plain = (statistics.median(times[w]) * 1000 for w in ("POOLED", "UNPOOLED"))
    report("2-job workflow, one job in a pool of 1, p50", pool, "ms", "the same without a pool", plain)
    print(f"{'a pool acquisition (free slot, over the overlay)':46} {pool - plain:9.1f} ms")
    return {
        "pool_p50_ms": round(pool, 1),
        "no_pool_p50_ms": round(plain, 1),
        "pool_ratio": round(pool / plain, 2),
    }


def main() -> None:
    only = sys.argv[1:] if sys.argv[1:] in (["--only", "schedulers"], ["--only", "pool"]) else None
    if sys.argv[1:] and not only:
        sys.exit("usage: workflows.py [--only schedulers|pool]")
    with tempfile.TemporaryDirectory(prefix="wfm-bench-") as folder:
        directory = Path(folder)
        for name, jobs in WORKFLOWS.items():
            (directory / f"{name.lower()}.xml").write_text(xml(name, jobs))
        (directory / "pooled.xml").write_text(pooled())
        started = time.perf_counter()
        up = subprocess.Popen(
            [sys.executable, "-m", "wfm.cli", "up", "--dir", folder, "--port", str(PORT)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert up.stdout is not None
            for line in up.stdout:
                if line.startswith("export WFM_"):  # wfm up is TLS: its CA and the deployer's identity
                    name, _, value = line.removeprefix("export ").strip().partition("=")
                    os.environ[name] = shlex.split(value)[0]  # for the wfm deploy this runs too
                if line.startswith("try:"):
                    break
            else:
                raise RuntimeError(f"wfm up did not start: {up.stderr.read() if up.stderr else ''}")
            print(
                f"wfm up with {len(WORKFLOWS) + 1} workflows ready in {time.perf_counter() - started:.1f} s"
            )
            tls = Identity(Path(os.environ["WFM_TLS"]), os.environ["WFM_IDENTITY"])
            b1 = brokers(BrokerURI("127.0.0.1", PORT, "B1")).secured(tls)
            results: dict[str, object] = {} if only else measure(directory, b1)
            if only != ["--only", "schedulers"]:
                results |= report_pool(b1)
            if only != ["--only", "pool"]:
                results |= report_schedulers(b1)
        finally:
            up.terminate()
            up.wait(30)
    print(json.dumps({"benchmark": "workflows", "cores": os.cpu_count(), **results}))


def measure(directory: Path, b1: BrokerList) -> dict[str, object]:
    watch = Watch(b1)
    with TriggerPublisher(b1) as trigger:
        run(trigger, watch, "TEN", ["warm-up"])  # the first generation pays for imports and connections
        floor = baseline(40)
        chain_s = run(trigger, watch, "CHAIN40", ["chain-1"])
        report("40 sequential no-op jobs, trigger to APPL_END", chain_s, "s", "subprocess floor", floor)
        luigi = luigi_figures()
        if "luigi_chain_s" in luigi:
            report("", chain_s, "s", "Luigi (same run)", luigi["luigi_chain_s"])
        latencies = [run(trigger, watch, "TEN", [f"ten-{i}"]) for i in range(20)]
        p50 = statistics.median(latencies)
        report("10-job workflow, one generation, p50", p50 * 1000, "ms", "Temporal's cited start p50", 14.0)
        burst = run(trigger, watch, "TEN", [f"burst-{i}" for i in range(50)])
        print(
            f"{'10-job workflow, 50 generations at once':46} {50 / burst:9.1f} generations/s ({burst:.2f} s)"
        )
        payroll = run(trigger, watch, "PAYROLL", [f"pay-{i}" for i in range(100)])
        report("100 concurrent PAYROLL generations", payroll, "s", "target", 10.0)
        diamonds = run(trigger, watch, "DIAMOND", [f"diamond-{i}" for i in range(100)])
        if "luigi_diamonds_s" in luigi:
            report(
                "100 concurrent 5-job diamonds", diamonds, "s", "Luigi (same run)", luigi["luigi_diamonds_s"]
            )
    (directory / "big.xml").write_text(xml("BIG", BIG))
    started = time.perf_counter()
    command = ["deploy", str(directory / "big.xml"), "--broker", str(b1), "--timeout", "300"]
    subprocess.run([sys.executable, "-m", "wfm.cli", *command], check=True, stdout=subprocess.DEVNULL)
    deploy_s = time.perf_counter() - started
    with TriggerPublisher(b1) as trigger:
        big_s = run(trigger, watch, "BIG", ["big-1"], timeout=600)
    print(f"{'1,000-job workflow (10 x 100): deploy, run':46} {deploy_s:9.2f} s, {big_s:.2f} s")
    watch.client.close()
    return {
        "chain40_s": round(chain_s, 3),
        "chain40_floor_s": round(floor, 3),
        "chain40_ratio": round(chain_s / floor, 2),
        "ten_p50_ms": round(p50 * 1000, 1),
        "ten_generations_per_s": round(50 / burst, 1),
        "payroll100_s": round(payroll, 2),
        "diamonds100_s": round(diamonds, 2),
        **luigi,
        "big_deploy_s": round(deploy_s, 2),
        "big_run_s": round(big_s, 2),
    }


if __name__ == "__main__":
    main()
