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
3. Non-persistent against persistent: publications per second from a publisher to a subscriber
   through one broker that keeps its log on disk (``--data``, group commit), all persistent, then
   all non-persistent (``Qos(persistent=False)``: not logged, not held, no Took), in a window of
   at most ``WINDOW`` on their way; the ratio is how much more the non-persistent ones get through.

Usage: python benchmarks/qos.py [--messages 300] [--rounds 20] [--stream 20000]. One RESULT line
per figure.
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
    expire = custody.expire

    def timed(now: float) -> None:
        channel = custody.channels.get("sub")
        before = dict(channel.held) if channel is not None else {}
        expire(now)
        after = channel.held if channel is not None else {}
        delays.extend(time.time() - m.qos.expires for seq, (m, _) in before.items() if seq not in after)  # type: ignore[union-attr,operator]

    custody.expire = timed  # type: ignore[method-assign]
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
    args = parser.parse_args()
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
