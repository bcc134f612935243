"""Quality of service: how soon an expired message is removed, and a retained one's way to a
subscriber who comes later.

1. Expiry to removal: a broker (in this process, its real driver and clock) holds publications
   for a subscriber that is away; each has a time to live drawn from 50 ms to 1 s. The figure is
   the delay from each one's expiry to its removal from custody (p50, p99, max), against the
   broker's ordinary tick (``driver.TICK``, 1 s), which is when a quiet broker would otherwise
   notice (the ratio: how much sooner).
2. Retained to a later subscriber: a retained publication is kept at B1; a client connects to B3
   of the line B1 - B2 - B3 and subscribes; the figure is the time from its subscribe to the
   delivery, against the subscribe's own round trip to B3 (its acknowledgement) in the same run.
3. Priority under a backlog: on the line B1 - B2 - B3, 10,000 priority-1 publications wait at B3
   for a subscriber that was paused; it then reads again, at about 2,000 a second (a consumer
   that does some work), while 50 more publications come 20 ms apart. The figure is their
   latency (publish to delivery, p50 and p99) at priority 9, against the same run's latency of
   the same 50 at priority 1 (first in, first out behind the backlog); the ratio is how much
   sooner the urgent ones arrive.
4. Non-persistent against persistent: publications per second from a publisher to a subscriber
   through one broker that keeps its log on disk (``--data``, group commit), all persistent, then
   all non-persistent (``Qos(persistent=False)``: not logged, not held, no Took), in a window of
   at most ``WINDOW`` on their way; the ratio is how much more the non-persistent ones get through.

Usage: python benchmarks/qos.py [--messages 300] [--rounds 20] [--stream 20000] [--backlog 10000]
[--only expiry|retained|priority|nonpersistent]. One RESULT line per figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from broker.client import Client, Qos
from broker.language import Publication
from broker.messages import Message
from broker.routing.backlog import Lanes
from broker.transport import driver
from broker.transport.server import RouterService
from broker.transport.uri import BrokerURI
from wfm.topology import free_port


def uri(name: str) -> BrokerURI:
    return BrokerURI("127.0.0.1", free_port("127.0.0.1"), name)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def expiry_delays(messages: int) -> list[float]:
    """Seconds from each publication's expiry to its removal from the away subscriber's queue."""
    broker = RouterService(uri("B1"), session_grace=600)
    await broker.start()
    delays: list[float] = []
    custody = broker.router.custody
    feed = broker.driver.feed

    def timed(message: Message, hop: str) -> None:
        """Each input handled, then what it removed (the driver, not the router: the router and
        custody may be compiled, whose methods cannot be replaced)."""
        before = kept()
        feed(message, hop)
        after = kept()
        delays.extend(time.time() - m.qos.expires for key, m in before.items() if key not in after)  # type: ignore[attr-defined]

    def kept() -> dict[int, object]:
        """What custody keeps for the subscriber, held or waiting, by identity."""
        channel = custody.channels.get("sub")
        if channel is None:
            return {}
        waiting = [m for lanes in channel.backlog if isinstance(lanes, Lanes) for m, _ in lanes.messages()]
        return {id(m): m for m in [*(m for m, _ in channel.held.values()), *waiting]}

    broker.driver.feed = timed  # type: ignore[method-assign]
    sub = await Client.connect(broker.uri, "sub")
    await sub.subscribe("[class,eq,t]")
    await sub.close(bye=False)
    pub = await Client.connect(broker.uri, "pub")
    await pub.advertise("[class,eq,t],[n,>,-1]")
    rng = random.Random(35)
    for n in range(messages):
        pub.publish_nowait(f"[class,t],[n,{n}]", qos=Qos(ttl=rng.uniform(0.05, 1.0)))
    while len(delays) < messages:
        await asyncio.sleep(0.05)
    await pub.close()
    await broker.stop()
    return delays


async def retained_latency(rounds: int) -> tuple[list[float], list[float]]:
    """Per round: subscribe to delivery of a retained publication two hops away, and the
    subscribe's acknowledgement."""
    b1 = RouterService(uri("B1"))
    b2 = RouterService(uri("B2"), neighbors=[b1.uri])
    b3 = RouterService(uri("B3"), neighbors=[b2.uri])
    for broker in (b1, b2, b3):
        await broker.start()
    pub = await Client.connect(b1.uri, "pub")
    await pub.advertise("[class,eq,ALERT],[n,>,-1]")
    await pub.publish("[class,ALERT],[n,1]", Qos(retain=True))
    deliveries, acks = [], []
    for round_ in range(rounds):
        operator = await Client.connect(b3.uri, f"operator{round_}")
        started = time.perf_counter()
        # a filter of its own each round: an equal one would be answered by B3's copy
        stream = await operator.subscribe(f"[class,eq,ALERT],[n,>,{-1 - round_}]")
        acks.append(time.perf_counter() - started)
        await stream.next(timeout=10)
        deliveries.append(time.perf_counter() - started)
        await operator.close()
    await pub.close()
    for broker in (b3, b2, b1):
        await broker.stop()
    return deliveries, acks


async def urgent_latency(backlog: int, urgent: int, priority: int) -> list[float]:
    """Seconds from publish to delivery of ``urgent`` publications at ``priority`` that come
    while a paused subscriber's backlog of ``backlog`` priority-1 ones drains (see the module)."""
    b1 = RouterService(uri("B1"))
    b2 = RouterService(uri("B2"), neighbors=[b1.uri])
    b3 = RouterService(uri("B3"), neighbors=[b2.uri])
    for broker in (b1, b2, b3):
        await broker.start()
    while len(b2.router.tables.neighbors) < 2:
        await asyncio.sleep(0.01)
    pub = await Client.connect(b1.uri, "pub")
    sub = await Client.connect(b3.uri, "sub")
    stream = await sub.subscribe("[class,eq,t]")
    await pub.advertise("[class,eq,t],[n,>,-1]")
    await asyncio.sleep(0.2)
    for n in range(backlog):
        pub.publish_nowait(Publication("t", {"n": n}), qos=Qos(priority=1))
    while b3.router.custody.status()["held"] < backlog:  # all at B3, the subscriber paused
        await asyncio.sleep(0.01)
    sent: dict[int, float] = {}
    latencies: list[float] = []

    async def consume() -> None:
        count = 0
        while len(latencies) < urgent:
            delivery = await stream.next(timeout=120)
            n = int(delivery.publication["n"])  # type: ignore[arg-type]
            if n >= backlog:
                latencies.append(time.perf_counter() - sent[n])
            count += 1
            if count % 2 == 0:  # some work per delivery: about 2,000 a second
                await asyncio.sleep(0.001)

    consuming = asyncio.get_running_loop().create_task(consume())
    for n in range(backlog, backlog + urgent):
        sent[n] = time.perf_counter()
        pub.publish_nowait(Publication("t", {"n": n}), qos=Qos(priority=priority))
        await asyncio.sleep(0.02)
    await consuming
    for client in (pub, sub):
        await client.close()
    for broker in (b3, b2, b1):
        await broker.stop()
    return latencies


WINDOW = 2000  # publications on their way at most (the subscriber's client reads as they come)


async def stream_rate(count: int, persistent: bool) -> float:
    """Publications per second from ``pub`` to ``sub`` through one broker with a log."""
    with tempfile.TemporaryDirectory() as directory:
        broker = RouterService(uri("B1"), data=Path(directory) / "b1")
        await broker.start()
        sub = await Client.connect(broker.uri, "sub")
        stream = await sub.subscribe("[class,eq,t]")
        pub = await Client.connect(broker.uri, "pub")
        await pub.advertise("[class,eq,t],[n,>,-1]")
        qos = Qos(persistent=persistent)
        got = 0

        async def read() -> None:
            nonlocal got
            async for _ in stream:
                got += 1

        reading = asyncio.get_running_loop().create_task(read())
        started = time.perf_counter()
        for n in range(count):
            while n - got >= WINDOW:
                await asyncio.sleep(0.001)
            pub.publish_nowait(Publication("t", {"n": n}), qos=qos)  # not parsed: the broker's cost
        while got < count:
            await asyncio.sleep(0.001)
        elapsed = time.perf_counter() - started
        reading.cancel()
        for client in (pub, sub):
            await client.close()
        await broker.stop()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--stream", type=int, default=20_000)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--only", choices=["expiry", "retained", "priority", "nonpersistent"])
    args = parser.parse_args()
    figures = {"expiry": expiry, "retained": retained, "priority": priority, "nonpersistent": nonpersistent}
    for name, figure in figures.items():
        if args.only in (None, name):
            figure(args)


def expiry(args: argparse.Namespace) -> None:
    delays = asyncio.run(expiry_delays(args.messages))
    p99 = _percentile(delays, 0.99)
    print(
        "RESULT",
        json.dumps(
            {
                "benchmark": "qos-expiry-removal",
                "messages": len(delays),
                "p50_ms": round(statistics.median(delays) * 1000, 2),
                "p99_ms": round(p99 * 1000, 2),
                "max_ms": round(max(delays) * 1000, 2),
                "baseline_tick_s": driver.TICK,
                "p99_vs_tick": round(p99 / driver.TICK, 4),
                "cores": os.cpu_count(),
            }
        ),
    )


def retained(args: argparse.Namespace) -> None:
    deliveries, acks = asyncio.run(retained_latency(args.rounds))
    print(
        "RESULT",
        json.dumps(
            {
                "benchmark": "qos-retained-to-later-subscriber",
                "rounds": len(deliveries),
                "p50_ms": round(statistics.median(deliveries) * 1000, 2),
                "p99_ms": round(_percentile(deliveries, 0.99) * 1000, 2),
                "baseline_subscribe_ack_p50_ms": round(statistics.median(acks) * 1000, 2),
                "ratio_p50": round(statistics.median(deliveries) / statistics.median(acks), 2),
                "cores": os.cpu_count(),
            }
        ),
    )


def priority(args: argparse.Namespace) -> None:
    urgent = asyncio.run(urgent_latency(args.backlog, 50, priority=9))
    fifo = asyncio.run(urgent_latency(args.backlog, 50, priority=1))
    print(
        "RESULT",
        json.dumps(
            {
                "benchmark": "qos-priority-under-backlog",
                "backlog": args.backlog,
                "urgent_p50_ms": round(statistics.median(urgent) * 1000, 1),
                "urgent_p99_ms": round(_percentile(urgent, 0.99) * 1000, 1),
                "baseline_fifo_p50_ms": round(statistics.median(fifo) * 1000, 1),
                "baseline_fifo_p99_ms": round(_percentile(fifo, 0.99) * 1000, 1),
                "ratio_p99": round(_percentile(fifo, 0.99) / _percentile(urgent, 0.99), 1),
                "cores": os.cpu_count(),
            }
        ),
    )


def nonpersistent(args: argparse.Namespace) -> None:
    persistent = asyncio.run(stream_rate(args.stream, persistent=True))
    bare = asyncio.run(stream_rate(args.stream, persistent=False))
    print(
        "RESULT",
        json.dumps(
            {
                "benchmark": "qos-nonpersistent-throughput",
                "publications": args.stream,
                "nonpersistent_per_s": round(bare),
                "baseline_persistent_per_s": round(persistent),
                "ratio": round(bare / persistent, 2),
                "cores": os.cpu_count(),
            }
        ),
    )


if __name__ == "__main__":
    main()
