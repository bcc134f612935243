"""Replicated sites on real processes: throughput, latency, copies per site link, the delivery gap
at every subscriber when a site's leader is killed -9, and a member's catch-up.

Every broker is its own ``wfm broker`` process (logs on disk, one fsync per group), every client
its own process, as in production; the topology is SESDAD's 3-site tree (site0 the root, site1
and site2 below it), of three brokers per site, placed as ``wfm up`` and ``wfm puppet`` place it
(:meth:`wfm.topology.Topology.broker_options`). Every publication carries its publisher and a
sequence number ``n``; every delivery is recorded and the history is checked by the puppet's
checker (:func:`wfm.puppet.checker.check`): lost, duplicated and out of FIFO order, and under
TOTAL the cycles in the union of the subscribers' delivery orders. A figure whose run broke any
of them fails the benchmark (exit 1) after printing its RESULT line.

1. Orderings: publishers P1 on site1 and P2 on site2, subscribers S1 on site1 and S2 on site2, so
   each subscriber gets one publisher's publications from its own site and the other's across
   the root. ``--count`` publications (half from each, 64 in flight each) until both subscribers
   have them all (throughput), then ``--latency-count`` at ``--rate`` a second (publish to
   delivery, p50 and p99, local and across the root), under NO, FIFO and TOTAL; baseline: the
   same four clients on ONE unreplicated broker, and (for what replication alone costs) the tree
   of three unreplicated brokers, in the same run: ``--rounds`` rounds, each running every
   configuration once, each figure the median of its rounds. The FIFO run's history is also
   checked as TOTAL: its subscribers see the two publishers interleaved differently, so the
   order check finds cycles there, which shows it can fail.
2. One leaf: P1 and S1 both on site1, under FIFO (nothing leaves site1), TOTAL (every
   publication climbs to the root to be ordered and comes back) and ``RoutingPolicy flooding``
   (every publication goes to every site). Copies: what each site link carried in custody, per
   publication, counted where it arrived (``in.Carry``). In ``--rounds`` rounds as above.
   An advertiser A2 on site2 advertises what P1 does and publishes nothing, so that S1's
   subscription travels beyond site1 under FIFO too (under TOTAL it climbs to the root in any
   case, as every publication does: docs/sites.md).
3. Delivery gap: P1 on site1 publishing every 10 ms; a subscriber on every site; each site's
   leader in turn is killed -9 (``--kills`` per site), restarted a second later as ``wfm up``
   restarts it; per kill and subscriber, the longest wait between two deliveries around the
   kill. p50, p99 and max per subscriber against the targets (p99 1 s, max 2 s); baseline: the
   election timeout.
4. Catch-up: one site of three (in one process), a follower stopped while the site commits
   ``--backlog`` entries, then restarted: the seconds until it has applied up to the leader's
   commit index (target 5 s), how, and the leader's snapshot's size.

Each RESULT line says the cores, the build of the broker's hot path and the load average before
and after (the machine may be shared). Usage: python benchmarks/sites_overlay.py [--count 4000]
[--latency-count 1000] [--rate 200] [--rounds 2] [--kills 4] [--election-timeout 0.5]
[--backlog 100000] [--only orderings|leaf|gap|backlog].
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker import compiled
from broker.client import BlockingClient, Client
from broker.client.reconnect import BrokerList
from broker.sites.member import SiteConfig, SiteMember
from broker.transport.persistence import dump_state
from broker.transport.server import RouterService
from broker.transport.uri import BrokerURI
from wfm.puppet.checker import Published, Received, Report, Window, check
from wfm.topology import Topology, free_port, parse_topology
from wfm.up import linked

WFM = str(Path(sys.executable).with_name("wfm"))
ELECTION_TIMEOUT = 0.5  # wfm broker's default
TOPIC = "t"  # the checker's topic: every subscriber wants every publication
WINDOW = 64  # publications in flight per publisher in a throughput run
SHAPES = {"sites": (3, 3, 3), "tree": (1, 1, 1), "one": (1,)}  # brokers per site
FAST = {"heartbeat": 0.2, "dead_after": 0.8}
STALL = 30.0  # seconds a subscriber waits for a publication it lacks before it gives up


def environment() -> dict[str, object]:
    """What every RESULT line says of the machine: its cores, the load average (1 minute) now,
    and the build of the broker's hot path (``broker.compiled``) the processes run."""
    return {"cores": os.cpu_count(), "load": round(os.getloadavg()[0], 1), "build": compiled.BUILD}


def topology(shape: str, ordering: str = "FIFO", routing: str = "filter") -> Topology:
    """SESDAD's tree of ``shape`` (``SHAPES``) on free loopback ports."""
    lines = [f"Site site{i} Parent {'none' if i == 0 else 'site0'}" for i in range(len(SHAPES[shape]))]
    lines += [
        f"Process s{i}{member} Is broker On site{i} URL tcp://127.0.0.1:0/broker"
        for i, size in enumerate(SHAPES[shape])
        for member in "abc"[:size]
    ]
    lines += [f"RoutingPolicy {routing}", f"Ordering {ordering}"]
    return parse_topology("\n".join(lines), f"<{shape}>").with_ports()


class Overlay:
    """A ``topology``'s brokers, each a ``wfm broker`` process with its log in ``home``."""

    def __init__(self, topology: Topology, home: Path, election_timeout: float = ELECTION_TIMEOUT) -> None:
        self.topology, self.home, self.election_timeout = topology, home, election_timeout
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def argv(self, name: str) -> list[str]:
        neighbours = [a for uri in self.topology.neighbours(name) for a in ("--neighbor", str(uri))]
        site = self.topology.site_of(name)
        election = [] if site is None else ["--election-timeout", str(self.election_timeout)]
        return [
            WFM,
            "broker",
            "--uri",
            str(self.topology.uri(name)),
            *neighbours,
            *self.topology.broker_options(name),
            *election,
            "--heartbeat",
            str(FAST["heartbeat"]),
            "--data",
            str(self.home / name),
        ]

    def launch(self, name: str) -> None:
        with open(self.home / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen(self.argv(name), stdout=log, stderr=log)

    def start(self, patience: float = 60.0) -> None:
        """Every broker, then wait until each router is linked to its neighbours."""
        for process in self.topology.of_role("broker"):
            self.launch(process.name)
        deadline = time.monotonic() + patience
        for name, (serving, expected) in self.topology.routers().items():
            while not linked(serving, expected):
                dead = [n for n, p in self.processes.items() if p.poll() is not None]
                if dead or time.monotonic() > deadline:
                    why = f"{', '.join(dead)} exited" if dead else f"not linked within {patience:g} s"
                    raise RuntimeError(f"{name}: {why} (logs in {self.home})")
                time.sleep(0.05)

    def brokers(self, site: str) -> str:
        """The brokers a client on ``site`` connects to (site0 when there is no such site)."""
        brokers = self.topology.brokers_on(site) or self.topology.brokers_on("site0")
        return str(BrokerList(self.topology.uri(b.name) for b in brokers))

    def status(self, site: str) -> dict[str, Any]:
        """The status of the broker that serves ``site`` now."""
        with BlockingClient(self.brokers(site), timeout=10) as client:
            return client.status()

    def leader(self, site: str) -> str:
        return str(self.status(site)["site"]["member"])

    def elections(self) -> dict[str, int]:
        """Leaders each replicated site elected after its first (from the brokers' logs): one
        per leader killed, and any more are elections a stalled leader caused."""
        counted: dict[str, int] = {}
        for process in self.topology.of_role("broker"):
            if self.topology.site_of(process.name) is not None:
                text = (self.home / f"{process.name}.log").read_text(errors="replace")
                counted[process.site] = counted.get(process.site, -1) + text.count(" leads (term ")
        return counted

    def kill(self, name: str) -> None:
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait()

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def overlay(
    shape: str, ordering: str = "FIFO", routing: str = "filter", election_timeout: float = ELECTION_TIMEOUT
) -> Iterator[Overlay]:
    """A started ``Overlay`` of ``shape``, closed at the end; started again on other ports if a
    broker could not start (a port ``free_port`` gave may be taken meanwhile by another process)."""
    with tempfile.TemporaryDirectory(prefix="wfm-bench-sites-") as home:
        for attempt in itertools.count(1):
            directory = Path(home) / str(attempt)
            directory.mkdir()
            running = Overlay(topology(shape, ordering, routing), directory, election_timeout)
            try:
                running.start()
            except RuntimeError:
                running.close()
                if attempt == 3:
                    raise
                continue
            try:
                yield running
            finally:
                running.close()
            return


# --- clients, each its own process -------------------------------------------------------------


def publication(publisher: str, n: int) -> str:
    return f"[class,'{TOPIC}'],[p,'{publisher}'],[n,{n}]"


def subscriber_process(
    brokers: str,
    name: str,
    expected: int,
    phase: int,
    first: int,
    ready: Any,
    primed: dict[str, Any],
    half: Any,
    results: Any,
) -> None:
    """Subscribe, then record every delivery (publisher, n, when) until ``expected`` distinct
    publications have come and a second more has passed (a duplicate would come then), or none
    new for ``STALL`` seconds (the checker then counts what is missing as lost); n = 0 is
    a publisher's probe: it sets ``primed[publisher]``. ``half`` is set once the ``first``
    publications numbered up to ``phase`` have come (the throughput run is over)."""

    async def run() -> None:
        async with await Client.connect(brokers, name, **FAST) as client:  # type: ignore[arg-type]
            stream = await client.subscribe(f"[class,eq,'{TOPIC}']")
            ready.set()
            got: list[tuple[str, int, float]] = []
            distinct: set[tuple[str, int]] = set()
            early = 0  # distinct publications numbered up to ``phase``
            last = time.monotonic()  # of the last new publication: one missing for STALL ends it
            done_at: float | None = None
            while time.monotonic() < last + STALL and (done_at is None or time.monotonic() < done_at + 1.0):
                try:
                    delivery = await stream.next(timeout=0.1)
                except TimeoutError:
                    continue
                at = time.monotonic()
                publisher, n = str(delivery.publication["p"]), int(delivery.publication["n"])
                if n == 0:
                    primed[publisher].set()
                    continue
                got.append((publisher, n, at))
                if (publisher, n) not in distinct:
                    last = at
                    distinct.add((publisher, n))
                    early += n <= phase
                    if early == first:
                        half.set()
                if done_at is None and len(distinct) >= expected:
                    done_at = at
            results.put((name, got))

    asyncio.run(run())


def publisher_process(
    brokers: str,
    name: str,
    phases: list[tuple[int, float]],
    primed: list[Any],
    halves: list[Any],
    go: Any,
    finished: Any,
    results: Any,
) -> None:
    """Advertise, probe (n = 0, every 50 ms) until every subscriber has seen a probe, wait for
    ``go``, then publish each phase ``(count, rate)``: at ``rate`` a second, or with ``WINDOW``
    in flight if 0; before the second phase, wait until every subscriber has the first
    (``halves``). Reports when each publication was sent and acknowledged, and stays until
    ``finished``."""

    async def run() -> None:
        async with await Client.connect(brokers, name, **FAST) as client:  # type: ignore[arg-type]
            await client.advertise(f"[class,eq,'{TOPIC}'],[p,eq,'{name}'],[n,>=,0]")
            while not all(event.is_set() for event in primed):
                client.publish_nowait(publication(name, 0))
                await asyncio.sleep(0.05)
            while not go.is_set():
                await asyncio.sleep(0.005)
            sent: dict[int, float] = {}
            acked: dict[int, float] = {}

            async def one(n: int) -> None:
                sent[n] = time.monotonic()
                await client.publish(publication(name, n))
                acked[n] = time.monotonic()

            first = 1
            for number, (count, rate) in enumerate(phases):
                if number:
                    while not all(event.is_set() for event in halves):
                        await asyncio.sleep(0.005)
                flying: set[asyncio.Task[None]] = set()
                started = time.monotonic()
                for i, n in enumerate(range(first, first + count)):
                    if rate:
                        await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
                    elif len(flying) >= WINDOW:
                        await asyncio.wait(flying, return_when=asyncio.FIRST_COMPLETED)
                    task = asyncio.create_task(one(n))
                    flying.add(task)
                    task.add_done_callback(flying.discard)
                await asyncio.gather(*flying)
                first += count
            results.put((name, sent, acked))
            while not finished.is_set():  # its advertisement stays until every subscriber is done
                await asyncio.sleep(0.05)

    asyncio.run(run())


@dataclass
class Run:
    """What the clients of one run saw: when each publication was sent and acknowledged, each
    subscriber's deliveries in order, and when publishing started."""

    sent: dict[str, dict[int, float]] = field(default_factory=dict)
    acked: dict[str, dict[int, float]] = field(default_factory=dict)
    got: dict[str, list[tuple[str, int, float]]] = field(default_factory=dict)
    started: float = 0.0

    def report(self, ordering: str) -> Report:
        published = [Published(p, n, TOPIC, at) for p, acks in self.acked.items() for n, at in acks.items()]
        received = [Received(s, p, n, TOPIC, at) for s, got in self.got.items() for p, n, at in got]
        windows = [Window(s, TOPIC, 0.0) for s in self.got]
        return check(published, received, windows, ordering=ordering)


def clients(
    running: Overlay,
    publishers: dict[str, str],
    subscribers: dict[str, str],
    phases: list[tuple[int, float]],
    during: Callable[[float], None] | None = None,
    advertisers: dict[str, str] | None = None,
) -> Run:
    """Run ``subscribers`` and ``publishers`` (name -> site) against ``running``, each publisher
    publishing ``phases``; ``during(started)`` is called once they publish (the faults).
    ``advertisers`` (name -> site) advertise what the publishers do and publish nothing."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    go, finished = ctx.Event(), ctx.Event()
    ready = {s: ctx.Event() for s in subscribers}
    everyone = {**publishers, **(advertisers or {})}
    primed = {s: {p: ctx.Event() for p in everyone} for s in subscribers}
    halves = {s: ctx.Event() for s in subscribers}
    each = sum(count for count, _ in phases)
    subs = [
        ctx.Process(
            target=subscriber_process,
            args=(
                running.brokers(site),
                name,
                each * len(publishers),
                phases[0][0],
                phases[0][0] * len(publishers),
                ready[name],
                primed[name],
                halves[name],
                results,
            ),
        )
        for name, site in subscribers.items()
    ]
    for process in subs:
        process.start()
    for event in ready.values():
        if not event.wait(60):
            raise TimeoutError("a subscriber did not subscribe within 60 s")
    pubs = [
        ctx.Process(
            target=publisher_process,
            args=(
                running.brokers(site),
                name,
                phases if name in publishers else [(0, 0.0)] * len(phases),
                [primed[s][name] for s in subscribers],
                list(halves.values()),
                go,
                finished,
                results,
            ),
        )
        for name, site in everyone.items()
    ]
    for process in pubs:
        process.start()
    for by_publisher in primed.values():
        for event in by_publisher.values():
            if not event.wait(60):
                raise TimeoutError("a subscriber saw no probe of a publisher within 60 s")
    run = Run(started=time.monotonic())
    go.set()
    if during is not None:
        during(run.started)
    for _ in range(len(subs) + len(pubs)):
        item = results.get(timeout=900)
        if len(item) == 3 and item[0] in publishers:
            run.sent[item[0]], run.acked[item[0]] = item[1], item[2]
        elif len(item) == 2:
            run.got[item[0]] = item[1]
    finished.set()
    for process in subs + pubs:
        process.join(30)
    return run


# --- figures -----------------------------------------------------------------------------------


def percentile(values: list[float], p: int) -> float:
    """The ``p``-th percentile of ``values`` (inclusive: at most their largest)."""
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1] if len(values) > 1 else values[0]


def checked(report: Report) -> dict[str, object]:
    """What the checker found, for a RESULT line."""
    found: dict[str, object] = {
        "lost": report.lost,
        "duplicated": report.duplicated,
        "out_of_order": report.out_of_order,
    }
    if report.ordering == "TOTAL":
        found["order_cycles"] = len(report.cycles)
    return found


FAILED: list[str] = []  # figures whose runs the checker faulted: the benchmark exits 1


def verdict(figure: str, report: Report) -> None:
    if not report.ok:
        FAILED.append(f"{figure}: " + report.summary()[-1])


def measured(run: Run, count: int, sites: dict[str, str], shape: str, ordering: str) -> dict[str, object]:
    """Throughput of the first phase (``count`` publications of each publisher, until every
    subscriber has them), latency of the second, by path (a subscriber on its publisher's site:
    local; else across the root), and the checker's findings (FIFO at least: NO runs as FIFO)."""
    last = max(at for got in run.got.values() for _, n, at in got if n <= count)
    publications = count * len(run.sent)
    figures: dict[str, object] = {"per_s": round(publications / (last - run.started))}
    waits: dict[str, list[float]] = {"local": [], "across": []}
    for subscriber, got in run.got.items():
        seen: set[tuple[str, int]] = set()
        for publisher, n, at in got:
            if n > count and (publisher, n) not in seen:
                path = "local" if shape == "one" or sites[publisher] == sites[subscriber] else "across"
                waits[path].append(at - run.sent[publisher][n])
            seen.add((publisher, n))
    for path, values in waits.items():
        if values:
            figures[f"{path}_p50_p99_ms"] = [round(percentile(values, p) * 1000, 1) for p in (50, 99)]
    report = run.report("TOTAL" if ordering == "TOTAL" else "FIFO")
    figures.update(checked(report))
    figure = f"{shape} {ordering}"
    verdict(figure, report)
    return figures


SUMMED = ("lost", "duplicated", "out_of_order", "order_cycles", "cycles_if_checked_as_total")


def merged(rows: list[dict[str, object]]) -> dict[str, object]:
    """One configuration's rounds as one row: the checker's findings added up, every figure the
    median of its rounds (a list or a dict figure by figure)."""
    out: dict[str, object] = {}
    for key, first in rows[0].items():
        values: list[Any] = [row[key] for row in rows]
        if key in SUMMED:
            out[key] = sum(values)
        elif isinstance(first, list):
            out[key] = [round(statistics.median(figure), 1) for figure in zip(*values, strict=True)]
        elif isinstance(first, dict):
            out[key] = {k: round(statistics.median(v[k] for v in values), 3) for k in first}
        else:
            out[key] = round(statistics.median(values))
    return {**out, "rounds": len(rows)}


def orderings(count: int, latency_count: int, rate: float, rounds: int) -> None:
    """Figure 1: NO, FIFO and TOTAL on the replicated tree against one broker and the tree of
    unreplicated brokers, two publishers and two subscribers on two leaves; ``rounds`` rounds,
    each running every configuration once, so that the ratios compare figures of the same
    minutes."""
    sites = {"P1": "site1", "P2": "site2", "S1": "site1", "S2": "site2"}
    publishers = {p: sites[p] for p in ("P1", "P2")}
    subscribers = {s: sites[s] for s in ("S1", "S2")}
    phases = [(count // 2, 0.0), (latency_count // 2, rate / 2)]
    runs: dict[str, list[dict[str, object]]] = {}
    before = environment()
    for number, shape, ordering in (
        (number, shape, ordering)
        for number in range(1, rounds + 1)
        for shape, ordering in (
            ("one", "FIFO"),
            ("tree", "FIFO"),
            ("sites", "NO"),
            ("sites", "FIFO"),
            ("sites", "TOTAL"),
        )
    ):
        with overlay(shape, ordering) as running:
            run = clients(running, publishers, subscribers, phases)
            row = measured(run, count // 2, sites, shape, ordering)
            if ordering == "FIFO" and shape == "sites":
                row["cycles_if_checked_as_total"] = len(run.report("TOTAL").cycles)
            runs.setdefault(f"{shape}_{ordering}".lower(), []).append(row)
            line = {"benchmark": f"sites-run-{shape}-{ordering}", "round": number, **row, **environment()}
            print("RESULT", json.dumps(line), flush=True)
    rows = {name: merged(made) for name, made in runs.items()}
    one, tree = rows["one_fifo"]["per_s"], rows["tree_fifo"]["per_s"]
    no, fifo, total = (rows[f"sites_{o}"]["per_s"] for o in ("no", "fifo", "total"))
    assert isinstance(one, int) and isinstance(tree, int) and isinstance(no, int)
    assert isinstance(fifo, int) and isinstance(total, int)
    summary = {
        "benchmark": "sites-orderings",
        "publications": count,
        "rounds": rounds,
        "no_per_s": no,
        "fifo_per_s": fifo,
        "total_per_s": total,
        "baseline_one_broker_per_s": one,
        "unreplicated_tree_per_s": tree,
        "ratio_no_vs_one_broker": round(no / one, 2),
        "target_no_vs_one_broker": 0.5,
        "ratio_fifo_vs_no": round(fifo / no, 2),
        "target_fifo_vs_no": 0.9,
        "ratio_total_vs_no": round(total / no, 2),
        "target_total_vs_no": 0.6,
        "ratio_no_vs_unreplicated_tree": round(no / tree, 2),
        "latency_rate_per_s": rate,
        "p50_p99_ms": {
            k: {p: v[f"{p}_p50_p99_ms"] for p in ("local", "across") if f"{p}_p50_p99_ms" in v}
            for k, v in rows.items()
        },
        "lost": sum(int(str(r["lost"])) for r in rows.values()),
        "duplicated": sum(int(str(r["duplicated"])) for r in rows.values()),
        "out_of_order": sum(int(str(r["out_of_order"])) for r in rows.values()),
        "order_cycles_total": rows["sites_total"]["order_cycles"],
        "load_before": before["load"],
        **environment(),
    }
    print("RESULT", json.dumps(summary), flush=True)


def carried(running: Overlay) -> dict[str, int]:
    """Publications (and the rest a link carries in custody: advertisements, subscriptions) each
    site link has carried so far, counted where they arrived (``in.Carry``, router state, so
    the same at every member of a site whoever serves): 'site1>site0' is what the root took
    from its children (only site1 publishes in the leaf runs), 'site0>site2' what site2 took
    from the root. A link's own frames would count the acknowledgements (``Took``) too."""
    took = {
        site: int(running.status(site)["counters"].get("in.Carry", 0)) for site in ("site0", "site1", "site2")
    }
    return {"site1>site0": took["site0"], "site0>site1": took["site1"], "site0>site2": took["site2"]}


def leaf(count: int, latency_count: int, rate: float, rounds: int) -> None:
    """Figure 2: one publisher and one subscriber on site1, under FIFO, TOTAL and flooding: what
    TOTAL's climb to the root costs, and the copies each site link carries; in ``rounds``."""
    sites = {"P1": "site1", "S1": "site1"}
    runs: dict[str, list[dict[str, object]]] = {}
    for number, ordering, routing in (
        (number, ordering, routing)
        for number in range(1, rounds + 1)
        for ordering, routing in (("FIFO", "filter"), ("TOTAL", "filter"), ("FIFO", "flooding"))
    ):
        with overlay("sites", ordering, routing) as running:
            before = carried(running)
            phases = [(count, 0.0), (latency_count, rate)]
            run = clients(running, {"P1": "site1"}, {"S1": "site1"}, phases, advertisers={"A2": "site2"})
            after = carried(running)
            row = measured(run, count, sites, "sites", ordering)
            publications = count + latency_count
            row["copies_per_publication"] = {
                direction: round((after[direction] - before[direction]) / publications, 3)
                for direction in after
            }
            name = f"{ordering}-{routing}".lower()
            runs.setdefault(name, []).append(row)
            line = {
                "benchmark": f"sites-leaf-{name}",
                "round": number,
                "routing": routing,
                **row,
                **environment(),
            }
            print("RESULT", json.dumps(line), flush=True)
    rows = {name: merged(made) for name, made in runs.items()}
    fifo, total, flood = (rows[k]["per_s"] for k in ("fifo-filter", "total-filter", "fifo-flooding"))
    assert isinstance(fifo, int) and isinstance(total, int) and isinstance(flood, int)
    print(
        "RESULT",
        json.dumps(
            {
                "benchmark": "sites-leaf",
                "fifo_per_s": fifo,
                "total_per_s": total,
                "flooding_per_s": flood,
                "ratio_total_vs_fifo": round(total / fifo, 2),
                "ratio_flooding_vs_filter": round(flood / fifo, 2),
                "rounds": rounds,
                "local_p50_p99_ms": {name: row["local_p50_p99_ms"] for name, row in rows.items()},
                "copies_per_publication": {name: row["copies_per_publication"] for name, row in rows.items()},
                "lost": sum(int(str(r["lost"])) for r in rows.values()),
                "duplicated": sum(int(str(r["duplicated"])) for r in rows.values()),
                "out_of_order": sum(int(str(r["out_of_order"])) for r in rows.values()),
                "order_cycles_total": rows["total-filter"]["order_cycles"],
                **environment(),
            }
        ),
        flush=True,
    )


def gaps_around(arrivals: list[float], kill: float, until: float) -> float:
    """The longest wait between two deliveries that ends after ``kill`` and by ``until`` (the
    next kill, or the end): each wait is a kill's, the last before it ended. If nothing arrived
    by then, the wait to the first delivery after ``kill``, whenever it came."""
    before = [at for at in arrivals if at <= kill][-1:]
    during = [at for at in arrivals if kill < at <= until] or [at for at in arrivals if at > kill][:1]
    return max((b - a for a, b in itertools.pairwise(before + during)), default=float("inf"))


def gap(kills: int, election_timeout: float, spacing: float = 4.0, rate: float = 100.0) -> None:
    """Figure 3: each site's leader killed -9 in turn, ``kills`` times per site."""
    subscribers = {"S0": "site0", "S1": "site1", "S2": "site2"}
    order = [f"site{i % 3}" for i in range(3 * kills)]
    lead = 3.0
    count = int(rate * (lead + spacing * len(order) + 2.0))
    killed: list[tuple[str, str, float]] = []  # (site, broker, when)
    before = environment()
    with overlay("sites", "FIFO", election_timeout=election_timeout) as running:

        def faults(started: float) -> None:
            for i, site in enumerate(order):
                time.sleep(max(0.0, started + lead + i * spacing - time.monotonic()))
                name = running.leader(site)
                running.kill(name)
                killed.append((site, name, time.monotonic()))
                time.sleep(1.0)  # as wfm up restarts a site's broker that died
                running.launch(name)

        run = clients(running, {"P1": "site1"}, subscribers, [(count, rate)], during=faults)
        elections = running.elections()
    report = run.report("FIFO")
    verdict("gap", report)
    per: dict[str, dict[str, object]] = {}
    for subscriber in subscribers:
        arrivals = sorted(at for _, _, at in run.got[subscriber])
        waits = [
            (site, gaps_around(arrivals, at, killed[i + 1][2] if i + 1 < len(killed) else float("inf")))
            for i, (site, _, at) in enumerate(killed)
        ]
        values = sorted(w for _, w in waits)
        per[subscriber] = {
            "p50_s": round(statistics.median(values), 3),
            "p99_s": round(percentile(values, 99), 3),
            "max_s": round(values[-1], 3),
            "max_by_site_killed_s": {
                s: round(max(w for k, w in waits if k == s), 3) for s in sorted(set(order))
            },
        }
    worst_p99 = max(float(str(v["p99_s"])) for v in per.values())
    worst_max = max(float(str(v["max_s"])) for v in per.values())
    line = {
        "benchmark": "sites-delivery-gap",
        "kills": len(killed),
        "killed": [f"{site}:{name}" for site, name, _ in killed],
        "publications": count,
        "per_subscriber": per,
        "worst_p99_s": worst_p99,
        "worst_max_s": worst_max,
        "target_p99_s": 1.0,
        "target_max_s": 2.0,
        "baseline_election_timeout_s": election_timeout,
        "ratio_max": round(worst_max / election_timeout, 2),
        "kills_per_site": {site: order.count(site) for site in sorted(set(order))},
        "elections_per_site": elections,
        **checked(report),
        "load_before": before["load"],
        **environment(),
    }
    print("RESULT", json.dumps(line), flush=True)


def uri(name: str) -> BrokerURI:
    return BrokerURI("127.0.0.1", free_port("127.0.0.1"), name)


async def catch_up(
    backlog: int, election_timeout: float = ELECTION_TIMEOUT, give_up: float = 60.0
) -> dict[str, float | int | str | None]:
    """One site of three: a follower stopped while the site commits ``backlog`` entries (a
    publisher's publications, 256 in flight), then restarted: the seconds until it has applied
    up to the leader's commit index (None: not within ``give_up``), how it got there (the
    leader's snapshot or its entries), the leader's snapshot and the part of it that is the
    router's duplicate filter (``seen``: the ids of the last publications routed)."""
    with tempfile.TemporaryDirectory() as home:
        config = SiteConfig(
            "site0", tuple(uri(f"site0{m}") for m in "abc"), election_timeout, election_timeout / 5
        )

        def member(m: BrokerURI) -> RouterService:
            return RouterService(m, site=config, data=Path(home) / m.id, session_grace=60.0, **FAST)  # type: ignore[arg-type]

        services = [member(m) for m in config.members]

        async def leader() -> SiteMember:
            deadline = time.monotonic() + 20
            while True:
                for service in services:
                    if service.site is not None and service.site.serving:
                        return service.site
                if time.monotonic() > deadline:
                    raise TimeoutError("no leader")
                await asyncio.sleep(0.01)

        for service in services:
            await service.start()
        try:
            first = await leader()
            down = next(s for s in services if s.site is not first)
            assert down.site is not None
            await down.stop()
            services.remove(down)
            held = down.site.node.applied
            publisher = await Client.connect(BrokerList(config.members), "pub", **FAST)  # type: ignore[arg-type]
            await publisher.advertise("[class,eq,'t'],[n,>,0]")
            start = first.node.commit
            filled = time.perf_counter()
            in_flight: set[asyncio.Task[str]] = set()
            for n in itertools.count(1):
                if (await leader()).node.commit - start >= backlog:
                    break
                in_flight.add(asyncio.create_task(publisher.publish(f"[class,'t'],[n,{n}]")))
                if len(in_flight) >= 256:
                    _, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.gather(*in_flight)
            filled = time.perf_counter() - filled
            await publisher.close()
            site = await leader()
            target = site.node.commit
            snapshot = site.node.snapshot
            again = member(down.uri)
            services.append(again)
            restarted = time.perf_counter()
            await again.start()
            assert again.site is not None
            deadline = time.monotonic() + give_up
            while again.site.node.applied < target and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            current = time.perf_counter() - restarted
            installed = again.site.node.snapshot
            seen = site.state.router.seen  # the duplicate filter's publication ids
            return {
                "entries_behind": target - held,
                "catch_up_s": round(current, 3) if again.site.node.applied >= target else None,
                "applied": again.site.node.applied,
                "how": "snapshot" if installed is not None and installed.index > held else "entries",
                "leader_snapshot_bytes": 0 if snapshot is None else len(snapshot.data),
                "seen_ids": len(seen),
                "seen_bytes": len(dump_state(list(seen))),
                "unsendable": sum(s.counters["site.unsendable"] for s in services),
                "leader_changes": sum(s.counters["site.led"] for s in services) - 1,
                "backlog_committed_per_s": round((target - start) / filled),
            }
        finally:
            for service in services:
                await service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=4000, help="publications of a throughput run")
    parser.add_argument("--latency-count", type=int, default=1000, help="publications of a latency run")
    parser.add_argument("--rate", type=float, default=200.0, help="publications a second of a latency run")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the orderings and leaf runs")
    parser.add_argument("--kills", type=int, default=4, help="leaders killed per site in the gap run")
    parser.add_argument(
        "--election-timeout", type=float, default=ELECTION_TIMEOUT, help="wfm broker's default: 0.5"
    )
    parser.add_argument("--backlog", type=int, default=100_000, help="entries a stopped member misses")
    parser.add_argument(
        "--only", choices=("orderings", "leaf", "gap", "backlog"), action="append", help="these figures only"
    )
    args = parser.parse_args()
    parts = set(args.only or ("orderings", "leaf", "gap", "backlog"))
    logging.basicConfig(level=logging.ERROR)
    if "orderings" in parts:
        orderings(args.count, args.latency_count, args.rate, args.rounds)
    if "leaf" in parts:
        leaf(args.count, args.latency_count, args.rate, args.rounds)
    if "gap" in parts:
        gap(args.kills, args.election_timeout)
    if "backlog" in parts:
        before = environment()
        caught = asyncio.run(catch_up(args.backlog, args.election_timeout))
        line = {
            "benchmark": "sites-catch-up",
            **caught,
            "target_s": 5,
            "load_before": before["load"],
            **environment(),
        }
        print("RESULT", json.dumps(line), flush=True)
    if FAILED:
        sys.exit("the checker found anomalies:\n" + "\n".join(FAILED))


if __name__ == "__main__":
    main()
