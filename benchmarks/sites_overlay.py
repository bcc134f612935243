"""Replicated sites on real links: throughput, copies per site link, and the delivery gap.

Brokers are real ``RouterService``s on loopback TCP in one process (one event loop), each site's
log on disk (``tempfile``, fsync per group), with real clients: a publisher on site1, a
subscriber on site2, so every publication crosses the root site0 (two site links).

1. Throughput: ``--count`` publications (64 in flight) until the subscriber has them all, on a
   tree of three sites of three brokers, against the same tree of three unreplicated brokers in
   the same run (the baseline); and under ``Ordering TOTAL`` against FIFO (NO is FIFO: the
   overlay gives no less).
2. Copies per site link: the frames the root's leader received from site1 on its link, per
   publication (1 is one copy; pings and custody answers go the other way or are few).
3. Delivery gap: a publication every 10 ms; the root's leader is crashed (its links aborted,
   its tasks cancelled, its log closed without a checkpoint: what kill -9 leaves); the gap is
   the longest time between two deliveries at the subscriber (p50, p99, max). ``--kills`` runs,
   each on a fresh tree; baseline: the election timeout.
4. Catch-up: one site of three, a follower stopped while the site commits ``--backlog`` entries,
   then restarted: the time until it has applied up to the leader's commit index (target 5 s).

Usage: python benchmarks/sites_overlay.py [--count 2000] [--kills 12] [--election-timeout 0.5]
[--backlog 100000] [--only throughput|gap|backlog]. One RESULT line per figure.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import itertools
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

from broker.client import Client
from broker.client.reconnect import BrokerList
from broker.sites.member import SiteConfig, SiteMember
from broker.transport.persistence import dump_state
from broker.transport.server import RouterService
from broker.transport.uri import BrokerURI
from wfm.topology import free_port

ELECTION_TIMEOUT = 0.5
FAST = {"heartbeat": 0.2, "dead_after": 0.8}


def uri(name: str) -> BrokerURI:
    return BrokerURI("127.0.0.1", free_port("127.0.0.1"), name)


class Tree:
    """site0 (root), site1 and site2 below it: of three brokers each, or of one (``replicated``
    false)."""

    def __init__(
        self, home: Path, replicated: bool, ordering: str = "FIFO", election_timeout: float = ELECTION_TIMEOUT
    ) -> None:
        self.services: dict[str, list[RouterService]] = {}
        members = 3 if replicated else 1
        names = "abc"[:members]
        configs = {
            name: SiteConfig(
                name, tuple(uri(f"{name}{m}") for m in names), election_timeout, election_timeout / 5
            )
            for name in ("site0", "site1", "site2")
        }
        for name, config in configs.items():
            dials = () if name == "site0" else configs["site0"].members
            # the sites of the brokers it links to, both ways: only they may say so in a hello
            below = [(m.id, child) for child in ("site1", "site2") for m in configs[child].members]
            linked = [(d.id, "site0") for d in dials] + (below if name == "site0" else [])
            sites = dict(linked) if replicated else {}
            self.services[name] = [
                RouterService(
                    m,
                    dials,
                    site=config if replicated else None,
                    neighbor_sites=sites,
                    ordering=ordering,
                    parent="" if name == "site0" else ("site0" if replicated else "site0a"),
                    data=home / m.id,
                    session_grace=60.0,
                    **FAST,  # type: ignore[arg-type]
                )
                for m in config.members
            ]

    def brokers(self, site: str) -> BrokerList:
        return BrokerList(s.uri for s in self.services[site])

    def serving(self, site: str) -> RouterService:
        for service in self.services[site]:
            if service.site is None or service.site.serving:
                return service
        raise LookupError(site)

    async def start(self) -> None:
        for services in self.services.values():
            for service in services:
                await service.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                root = self.serving("site0")
                if {"site1", "site2"} <= set(root.links) or {"site1a", "site2a"} <= set(root.links):
                    return
            except LookupError:
                pass
            await asyncio.sleep(0.05)
        raise TimeoutError("the tree did not link")

    async def stop(self) -> None:
        for services in self.services.values():
            for service in services:
                if service._server is not None:
                    await service.stop()


async def linked_tree(
    home: Path, replicated: bool, ordering: str = "FIFO", election_timeout: float = ELECTION_TIMEOUT
) -> Tree:
    """A started tree; built again on fresh ports if one was taken meanwhile (``free_port`` only
    says a port was free, and other processes on the machine take ports too)."""
    for attempt in itertools.count(1):
        tree = Tree(home / str(attempt), replicated, ordering, election_timeout)
        try:
            await tree.start()
        except OSError as error:
            await tree.stop()
            if error.errno != errno.EADDRINUSE or attempt == 3:
                raise
        else:
            return tree
    raise AssertionError("unreachable")


async def crash(service: RouterService) -> None:
    """What kill -9 leaves: links aborted, timers gone, the log closed as it is."""
    links = list(service.links.values()) + (list(service.site.links.values()) if service.site else [])
    for link in links:
        link.close("killed", abort=True)
    for task in list(service._tasks):
        task.cancel()
    assert service._server is not None
    service._server.close()
    service._server = None
    if service.site is not None:
        service.site.close()


async def clients(
    tree: Tree, arrived: dict[int, float] | None = None
) -> tuple[Client, Client, list[float], asyncio.Task[None]]:
    subscriber = await Client.connect(tree.brokers("site2"), "sub", **FAST)  # type: ignore[arg-type]
    publisher = await Client.connect(tree.brokers("site1"), "pub", **FAST)  # type: ignore[arg-type]
    stream = await subscriber.subscribe("[class,eq,'t']")
    await publisher.advertise("[class,eq,'t'],[n,>,0]")
    arrivals: list[float] = []

    async def read() -> None:
        async for delivery in stream:
            arrivals.append(time.monotonic())
            if arrived is not None:
                arrived[int(delivery.publication["n"])] = arrivals[-1]

    reading = asyncio.get_running_loop().create_task(read())
    deadline = time.monotonic() + 10
    while not tree.serving("site1").router.status()["subscriptions"]:  # known where it is published
        if time.monotonic() > deadline:
            raise TimeoutError("the subscription did not reach the publisher's site")
        await asyncio.sleep(0.05)
    return publisher, subscriber, arrivals, reading


async def throughput(replicated: bool, count: int, ordering: str = "FIFO") -> tuple[float, float]:
    """Publications per second through the tree, and copies per publication on site1's link."""
    with tempfile.TemporaryDirectory() as home:
        tree = await linked_tree(Path(home), replicated, ordering)
        try:
            publisher, subscriber, arrivals, reading = await clients(tree)
            root = tree.serving("site0")
            hop = "site1" if replicated else "site1a"
            before = root.links[hop].received_frames
            started = time.perf_counter()
            in_flight: set[asyncio.Task[str]] = set()
            for n in range(1, count + 1):
                in_flight.add(asyncio.create_task(publisher.publish(f"[class,'t'],[n,{n}]")))
                if len(in_flight) >= 64:
                    _, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.gather(*in_flight)
            while len(arrivals) < count:
                await asyncio.sleep(0.002)
            elapsed = time.perf_counter() - started
            copies = (root.links[hop].received_frames - before) / count
            reading.cancel()
            await publisher.close()
            await subscriber.close()
            return count / elapsed, copies
        finally:
            await tree.stop()


async def latency(
    replicated: bool, ordering: str, rate: float = 200.0, count: int = 1000
) -> tuple[float, float]:
    """The p50 and p99 latency (seconds) from publishing to delivery across the tree, ``rate``
    publications a second."""
    with tempfile.TemporaryDirectory() as home:
        tree = await linked_tree(Path(home), replicated, ordering)
        try:
            arrived: dict[int, float] = {}
            publisher, subscriber, _, reading = await clients(tree, arrived)
            sent: dict[int, float] = {}
            started = time.monotonic()
            for n in range(1, count + 1):
                await asyncio.sleep(max(0.0, started + n / rate - time.monotonic()))
                sent[n] = time.monotonic()
                publisher.publish_nowait(f"[class,'t'],[n,{n}]")
            deadline = time.monotonic() + 30
            while len(arrived) < count and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            reading.cancel()
            await publisher.close()
            await subscriber.close()
            waits = [arrived[n] - sent[n] for n in sent if n in arrived]
            return statistics.median(waits), percentile(waits, 99)
        finally:
            await tree.stop()


async def gap(election_timeout: float) -> float:
    """The longest wait between two deliveries when the root's leader is crashed mid-stream."""
    with tempfile.TemporaryDirectory() as home:
        tree = await linked_tree(Path(home), True, election_timeout=election_timeout)
        try:
            publisher, subscriber, arrivals, reading = await clients(tree)
            for n in range(1, 301):
                if n == 100:
                    deadline = time.monotonic() + 5
                    while len(arrivals) < 50:  # the stream flows: the gap is the crash's
                        if time.monotonic() > deadline:
                            raise AssertionError(f"only {len(arrivals)} delivered before the crash")
                        await asyncio.sleep(0.01)
                    await crash(tree.serving("site0"))
                publisher.publish_nowait(f"[class,'t'],[n,{n}]")
                await asyncio.sleep(0.01)
            deadline = time.monotonic() + 15
            while len(arrivals) < 300 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            if len(arrivals) < 300:
                raise AssertionError(f"only {len(arrivals)} of 300 delivered")
            reading.cancel()
            await publisher.close()
            await subscriber.close()
            return max(b - a for a, b in itertools.pairwise(arrivals))
        finally:
            await tree.stop()


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


def percentile(values: list[float], p: int) -> float:
    """The ``p``-th percentile of ``values`` (inclusive: at most their largest)."""
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument(
        "--election-timeout", type=float, default=ELECTION_TIMEOUT, help="wfm broker's default: 0.5"
    )
    parser.add_argument("--backlog", type=int, default=100_000, help="entries a stopped member misses")
    parser.add_argument(
        "--only",
        choices=("throughput", "latency", "gap", "backlog"),
        action="append",
        help="these figures only",
    )
    args = parser.parse_args()
    parts = set(args.only or ("throughput", "latency", "gap", "backlog"))
    logging.basicConfig(level=logging.ERROR)
    cores = os.cpu_count()
    if "throughput" in parts:
        replicated, copies = asyncio.run(throughput(True, args.count))
        single, _ = asyncio.run(throughput(False, args.count))
        total, _ = asyncio.run(throughput(True, args.count, "TOTAL"))
        print(
            "RESULT",
            json.dumps(
                {
                    "benchmark": "sites-throughput",
                    "replicated_per_s": round(replicated),
                    "baseline_unreplicated_per_s": round(single),
                    "ratio": round(replicated / single, 2),
                    "cores": cores,
                }
            ),
        )
        ordered = {
            "benchmark": "sites-total-order",
            "total_per_s": round(total),
            "baseline_fifo_per_s": round(replicated),
            "ratio": round(total / replicated, 2),
            "cores": cores,
        }
        print("RESULT", json.dumps(ordered))
        copied = {"benchmark": "sites-copies-per-link", "copies": round(copies, 3), "baseline": 1}
        print("RESULT", json.dumps(copied))
        unordered, _ = asyncio.run(throughput(True, args.count, "NO"))
        print(
            "RESULT",
            json.dumps(
                {
                    "benchmark": "sites-orderings",
                    "no_per_s": round(unordered),
                    "fifo_vs_no": round(replicated / unordered, 2),
                    "total_vs_no": round(total / unordered, 2),
                    "cores": cores,
                }
            ),
        )
    if "latency" in parts:
        waits = {mode: asyncio.run(latency(True, mode)) for mode in ("NO", "FIFO", "TOTAL")}
        single = asyncio.run(latency(False, "FIFO"))
        print(
            "RESULT",
            json.dumps(
                {
                    "benchmark": "sites-latency",
                    "rate_per_s": 200,
                    **{
                        f"{mode.lower()}_p50_p99_ms": [round(w * 1000, 1) for w in ws]
                        for mode, ws in waits.items()
                    },
                    "baseline_unreplicated_p50_p99_ms": [round(w * 1000, 1) for w in single],
                    "ratio_p99_fifo": round(waits["FIFO"][1] / single[1], 2),
                    "cores": cores,
                }
            ),
        )
    if "gap" in parts:
        gaps = sorted(asyncio.run(gap(args.election_timeout)) for _ in range(args.kills))
        print(
            "RESULT",
            json.dumps(
                {
                    "benchmark": "sites-delivery-gap",
                    "kills": len(gaps),
                    "p50_s": round(statistics.median(gaps), 3),
                    "p99_s": round(percentile(gaps, 99), 3),
                    "max_s": round(gaps[-1], 3),
                    "baseline_election_timeout_s": args.election_timeout,
                    "ratio_max": round(gaps[-1] / args.election_timeout, 2),
                    "cores": cores,
                }
            ),
        )
    if "backlog" in parts:
        caught = asyncio.run(catch_up(args.backlog, args.election_timeout))
        print("RESULT", json.dumps({"benchmark": "sites-catch-up", **caught, "target_s": 5, "cores": cores}))


if __name__ == "__main__":
    main()
