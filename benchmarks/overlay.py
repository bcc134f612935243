"""Overlay throughput and latency on loopback, against Redis and NATS pub/sub in the same run.

Every party is its own process, as in production: ``wfm broker`` processes, one publisher, and
one or more subscribers (multiprocessing). Figures:

* publications/s through one broker (1 publisher, 1 subscriber, 1,000 other subscriptions);
* publications/s end to end through a chain of 3 brokers;
* publications/s with 10 subscribers that each receive every publication;
* latency p50/p99 at a fixed 1,000 publications/s through one broker;
* CPU time per publication of the server, the publisher and the subscriber (what bounds
  throughput when the processes share a few cores, and what load distorts least);
* the first and the last again over mutual TLS (every client and the broker with a certificate of
  a CA made for the run), against the plain figures of the same run (``--tls-only``: just these);
* with ``--loops`` (only these): the first and the last with the broker and our clients on uvloop
  against the standard loop (``WFM_LOOP``, :mod:`broker.loops`), rounds alternating.
* with ``--builds`` (only these): the first three and the last with the brokers' hot path compiled
  against their pure Python (``WFM_PURE=1``, :mod:`broker.compiled`), rounds alternating; our
  clients run the build this process loaded (they are forked from it).
* with ``--floor`` (only these): through one server, 1 publisher and 1 subscriber, ``wfm broker``
  against ``benchmarks/relay.py``, a server that speaks our protocol to our clients and does nothing
  else (without the codec, and with it), and against Redis and NATS, rounds alternating: the floor
  of this design, what the codec costs, and what routing, matching and custody cost on top.

Redis (``PUBLISH``/``SUBSCRIBE``) and NATS (core subjects) get the same shapes (one server each;
a chain does not exist there, so the 3-broker figure is compared with the single server), messages
of the same size, Python clients (redis-py, nats-py) and 1,000 other subscriptions that never match
(other channels, other subjects). Every figure is the median of ``--repeat`` rounds (3), each round
measuring every system one after the other, so that the ratios compare figures of the same minutes.
Needs ``redis-server`` and ``nats-server`` on PATH (Debian: ``apt-get install redis-server
nats-server``) and the ``redis`` and ``nats-py`` packages (the ``bench`` extra); a peer missing is
left out and the result line says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from broker import compiled, loops
from broker.client import BrokerList, Client
from broker.client.reconnect import brokers as broker_list
from broker.language import Publication
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI
from wfm.certs import init, issue

WFM = str(Path(sys.executable).with_name("wfm"))
RELAY = str(Path(__file__).with_name("relay.py"))
PAYLOAD = "x" * 64
CLASS = "bench"


_taken: set[int] = set()


def free_port() -> int:
    """A port nobody listens on and that this run has not handed out yet (a broker process may
    take a while to bind what it was given)."""
    for port in range(23000, 30000):
        if port in _taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _taken.add(port)
        return port
    raise RuntimeError("no free port")


@contextmanager
def brokers(count: int, certs: Path | None = None) -> Iterator[list[BrokerList]]:
    """A chain of ``count`` wfm broker processes; with ``certs``, over TLS (clients as alice)."""
    uris: list[BrokerURI] = []
    procs = []
    for i in range(count):
        uri = BrokerURI("127.0.0.1", free_port(), f"B{i + 1}")
        args = [
            WFM,
            "broker",
            "--uri",
            str(uri),
            "--memory",
            *(["--neighbor", str(uris[-1])] if uris else []),
        ]
        args += ["--tls", str(certs), "--identity", uri.id] if certs else []
        procs.append(subprocess.Popen(args, stderr=subprocess.DEVNULL))
        uris.append(uri)
        time.sleep(0.3)
    tls = None if certs is None else Identity(certs, "alice")
    reach = [broker_list(uri).secured(tls) for uri in uris]
    for target in reach:  # a chain's work is done by all its brokers
        SERVERS[str(target)] = [proc.pid for proc in procs]
    try:
        asyncio.run(_wait_linked(reach))
        yield reach
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


@contextmanager
def certificates(count: int) -> Iterator[Path]:
    """A CA made for the run, brokers B1..B``count`` and a client alice."""
    with tempfile.TemporaryDirectory(prefix="wfm-bench-certs-") as directory:
        certs = Path(directory)
        init(certs)
        for i in range(count):
            issue(certs, f"B{i + 1}", "broker")
        issue(certs, "alice", "client")
        yield certs


@contextmanager
def relay(codec: bool) -> Iterator[BrokerList]:
    """A ``benchmarks/relay.py`` process (``codec``: decoding and encoding every frame), reached
    as broker R1; it runs the build this process would (``WFM_PURE`` and ``PYTHONPATH`` are
    inherited)."""
    uri = BrokerURI("127.0.0.1", free_port(), "R1")
    args = [sys.executable, RELAY, "--uri", str(uri), *(["--codec"] if codec else [])]
    proc = subprocess.Popen(args, stderr=subprocess.DEVNULL)
    reach = broker_list(uri)
    SERVERS[str(reach)] = [proc.pid]
    try:
        asyncio.run(_wait_linked([reach]))
        yield reach
    finally:
        proc.terminate()
        proc.wait(10)


async def _wait_linked(uris: list[BrokerList]) -> None:
    for i, uri in enumerate(uris):
        want = (i > 0) + (i < len(uris) - 1)
        for _ in range(200):
            try:
                async with await Client.connect(uri) as c:
                    if len((await c.status())["neighbors"]) == want:  # type: ignore[arg-type]
                        break
            except (OSError, TimeoutError):  # not listening yet, or busy starting
                pass
            await asyncio.sleep(0.05)


# --- our overlay -------------------------------------------------------------------------------


def our_subscriber(uri: BrokerList, count: int, ready: Any, results: Any) -> None:
    async def run() -> None:
        async with await Client.connect(uri) as client:
            sub = await client.subscribe(f"[class,eq,{CLASS}]")
            ready.put(True)
            latencies = []
            first = last = 0.0
            for i in range(count):
                delivery = await sub.next(timeout=60)
                last = time.time()
                if i == 0:
                    first = last
                latencies.append(last - delivery.publication["t"])  # type: ignore[operator]
            results.put({"first": first, "last": last, "latencies": latencies})

    loops.run(run(), loops.loop_factory(loops.chosen()))


async def paced(start: float, count: int, rate: float) -> AsyncIterator[int]:
    """0 to ``count`` - 1, the i-th at ``start`` + i / ``rate`` (``rate`` 0: at once), with a turn
    of the event loop every 200 so that the client's writer runs."""
    for i in range(count):
        if rate:
            delay = start + i / rate - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
        yield i
        if i % 200 == 0:
            await asyncio.sleep(0)


def our_publisher(uri: BrokerList, count: int, rate: float, subscribers: int, results: Any) -> None:
    async def run() -> None:
        async with await Client.connect(uri) as client:
            await client.advertise(f"[class,eq,{CLASS}],[seq,isPresent,0],[t,isPresent,0],[pad,isPresent,'']")
            # Subscriptions travel towards advertisements, so on a chain they reach this broker
            # only now; publishing earlier would (rightly) not reach them.
            while (await client.status())["subscriptions"] < subscribers:  # type: ignore[operator]
                await asyncio.sleep(0.02)
            start, cpu_start = time.time(), time.process_time()
            async for i in paced(start, count, rate):
                client.publish_nowait(Publication(CLASS, {"seq": i, "t": time.time(), "pad": PAYLOAD}))
            await client.publish(Publication(CLASS, {"seq": -1, "t": time.time(), "pad": PAYLOAD}))
            results.put({"start": start, "cpu_start": cpu_start})

    loops.run(run(), loops.loop_factory(loops.chosen()))


def holder(uri: BrokerList, count: int, ready: Any, stop: Any) -> None:
    """Keeps ``count`` subscriptions that never match in the broker's table until told to stop."""

    async def run() -> None:
        async with await Client.connect(uri, "others") as client:
            for i in range(count):
                await client.subscribe(f"[class,eq,{CLASS}],[seq,<,{-10 - i}]")
            ready.put(True)
            while not stop.is_set():
                await asyncio.sleep(0.1)

    asyncio.run(run())


@contextmanager
def other_subscriptions(target: Any, count: int, holder_of: Any = None) -> Iterator[None]:
    """``count`` subscriptions that never match, held in another process (``holder`` for ours,
    ``holder_of`` for a peer's ``target``)."""
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=holder_of or holder, args=(target, count, ready, stop))
    proc.start()
    ready.get(timeout=120)
    try:
        yield
    finally:
        stop.set()
        proc.join(30)


def measure(
    subscriber: Any,
    publisher: Any,
    target: Any,
    count: int,
    subscribers: int = 1,
    rate: float = 0.0,
    publish_to: Any = None,
) -> dict[str, float]:
    """Run ``subscribers`` subscriber processes and one publisher process against ``target``
    (the publisher against ``publish_to`` if given) and summarise what they saw."""
    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    subs = [
        ctx.Process(target=_subscriber_with_cpu, args=(subscriber, target, count, ready, results))
        for _ in range(subscribers)
    ]
    for p in subs:
        p.start()
    for _ in subs:
        ready.get(timeout=60)
    servers = SERVERS.get(str(publish_to or target), [])
    before = cpu_seconds(servers)
    pub = ctx.Process(
        target=_with_cpu, args=(publisher, publish_to or target, count, rate, subscribers, results)
    )
    pub.start()
    collected = [results.get(timeout=300) for _ in range(subscribers + 1)]
    after = cpu_seconds(servers)
    for p in [*subs, pub]:
        p.join(60)
    summary = _summarise(collected, count)
    if before is not None and after is not None:
        summary["server_cpu_us"] = round((after - before) / count * 1e6, 1)
    return summary


# CPU time per publication of each process: what load distorts least, and what bounds throughput
# when three processes share a few cores. Servers by target (str of a broker list or a port).
SERVERS: dict[str, list[int]] = {}
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pids: list[int]) -> float | None:
    """CPU seconds of these processes so far (Linux's /proc), None elsewhere: the time their
    threads ran, in nanoseconds (``schedstat``; a thread that ended is not counted, and the servers
    measured keep theirs), else user and system time in clock ticks (10 ms: half a microsecond a
    publication over 20,000, too coarse for a server that spends a few)."""
    if not pids:
        return None
    try:
        nanoseconds = 0
        for pid in pids:
            for task in Path(f"/proc/{pid}/task").iterdir():
                nanoseconds += int((task / "schedstat").read_text().split()[0])
        return nanoseconds / 1e9
    except (OSError, IndexError, ValueError):
        pass
    try:
        total = 0
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None


class _Cpu:
    """A results queue that adds the CPU seconds its process spent since it was made, or since
    its role's mark: a subscriber's once subscribed (``_Ready``), a publisher's at its first
    publication (``cpu_start`` in its result), so that importing a peer's client package and
    connecting do not count as CPU per publication."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue
        self.start = time.process_time()

    def put(self, item: Any) -> None:
        if isinstance(item, dict):
            item = {**item}
            item["cpu"] = time.process_time() - item.pop("cpu_start", self.start)
        self.queue.put(item)


class _Ready:
    """A subscriber's ready queue: once it says it is subscribed, its CPU counts from then."""

    def __init__(self, queue: Any, cpu: _Cpu) -> None:
        self.queue, self.cpu = queue, cpu

    def put(self, item: Any) -> None:
        self.cpu.start = time.process_time()
        self.queue.put(item)


def _with_cpu(role: Any, *args: Any) -> None:
    """Run a publisher (``role``) whose result says what CPU it spent."""
    role(*args[:-1], _Cpu(args[-1]))


def _subscriber_with_cpu(role: Any, target: Any, count: int, ready: Any, results: Any) -> None:
    """Run a subscriber (``role``) whose result says what CPU it spent once subscribed."""
    cpu = _Cpu(results)
    role(target, count, _Ready(ready, cpu), cpu)


def measure_ours(
    pub_uri: BrokerList, sub_uri: BrokerList, count: int, subscribers: int = 1, rate: float = 0.0
) -> dict[str, float]:
    return measure(our_subscriber, our_publisher, sub_uri, count, subscribers, rate, publish_to=pub_uri)


# --- peers: redis and nats ---------------------------------------------------------------------


def _peer_message(i: int) -> bytes:
    """What a peer's publication carries: the same sequence number, timestamp and padding as ours."""
    return f"{i},{time.time()},{PAYLOAD}".encode()


def _sent_at(data: bytes) -> float:
    return float(data.split(b",", 2)[1])


def redis_subscriber(port: int, count: int, ready: Any, results: Any) -> None:
    import redis

    pubsub = redis.Redis(port=port).pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(CLASS)
    ready.put(True)
    latencies = []
    first = last = 0.0
    received = 0
    while received < count:
        message = pubsub.get_message(timeout=60)
        if message is None:
            continue
        last = time.time()
        if received == 0:
            first = last
        latencies.append(last - _sent_at(message["data"]))
        received += 1
    results.put({"first": first, "last": last, "latencies": latencies})


def redis_publisher(port: int, count: int, rate: float, subscribers: int, results: Any) -> None:
    import redis

    client = redis.Redis(port=port)
    while client.pubsub_numsub(CLASS)[0][1] < subscribers:
        time.sleep(0.02)
    start, cpu_start = time.time(), time.process_time()
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        if rate:
            delay = start + i / rate - time.time()
            if delay > 0:
                pipe.execute()
                time.sleep(delay)
        pipe.publish(CLASS, _peer_message(i))
        if rate or i % 200 == 199:
            pipe.execute()
    pipe.execute()
    results.put({"start": start, "cpu_start": cpu_start})


def redis_holder(port: int, count: int, ready: Any, stop: Any) -> None:
    import redis

    pubsub = redis.Redis(port=port).pubsub()
    pubsub.subscribe(*(f"{CLASS}-other-{i}" for i in range(count)))
    ready.put(True)
    while not stop.is_set():
        pubsub.get_message(timeout=0.1)


def nats_subscriber(port: int, count: int, ready: Any, results: Any) -> None:
    import nats

    async def run() -> None:
        client = await nats.connect(f"nats://127.0.0.1:{port}")
        latencies: list[float] = []
        times = [0.0, 0.0]
        done = asyncio.get_running_loop().create_future()

        async def on_message(message: Any) -> None:
            now = times[1] = time.time()
            if not latencies:
                times[0] = now
            latencies.append(now - _sent_at(message.data))
            if len(latencies) == count:
                done.set_result(None)

        await client.subscribe(CLASS, cb=on_message)
        await client.flush()  # a round trip: the server has the subscription
        ready.put(True)
        await asyncio.wait_for(done, 300)
        results.put({"first": times[0], "last": times[1], "latencies": latencies})
        await client.close()

    asyncio.run(run())


def nats_publisher(port: int, count: int, rate: float, subscribers: int, results: Any) -> None:
    import nats

    async def run() -> None:
        client = await nats.connect(f"nats://127.0.0.1:{port}")
        start, cpu_start = time.time(), time.process_time()
        async for i in paced(start, count, rate):
            await client.publish(CLASS, _peer_message(i))
        await client.flush()
        results.put({"start": start, "cpu_start": cpu_start})
        await client.close()

    asyncio.run(run())


def nats_holder(port: int, count: int, ready: Any, stop: Any) -> None:
    import nats

    async def run() -> None:
        client = await nats.connect(f"nats://127.0.0.1:{port}")
        for i in range(count):
            await client.subscribe(f"{CLASS}.other.{i}")
        await client.flush()
        ready.put(True)
        while not stop.is_set():
            await asyncio.sleep(0.1)
        await client.close()

    asyncio.run(run())


@contextmanager
def peer_server(command: list[str], module: str) -> Iterator[int | None]:
    """A peer's server on a free port (``{port}`` in ``command``), or None without the server's
    program or its Python client ``module``."""
    if shutil.which(command[0]) is None:
        yield None
        return
    try:
        __import__(module)
    except ImportError:
        yield None
        return
    port = free_port()
    proc = subprocess.Popen(
        [part.format(port=port) for part in command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(100):  # until it listens
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    SERVERS[str(port)] = [proc.pid]
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


PEERS = {
    "redis": (
        ["redis-server", "--port", "{port}", "--save", "", "--appendonly", "no"],
        "redis",
        (redis_subscriber, redis_publisher, redis_holder),
    ),
    "nats": (
        ["nats-server", "-a", "127.0.0.1", "-p", "{port}"],
        "nats",
        (nats_subscriber, nats_publisher, nats_holder),
    ),
}


def started_peers(stack: ExitStack) -> dict[str, int]:
    """Each peer whose server is installed, started for the length of ``stack`` with 1,000 other
    subscriptions held on it: its name -> its port."""
    peers: dict[str, int] = {}
    for peer, (command, module, (_, _, holder_of)) in PEERS.items():
        port = stack.enter_context(peer_server(command, module))
        if port is not None:
            stack.enter_context(other_subscriptions(port, 1000, holder_of))
            peers[peer] = port
    return peers


def _summarise(collected: list[dict[str, Any]], count: int) -> dict[str, float]:
    start = next(c["start"] for c in collected if "start" in c)
    receivers = [c for c in collected if "last" in c]
    last = max(c["last"] for c in receivers)
    latencies = sorted(x for c in receivers for x in c["latencies"])
    publisher = next(c for c in collected if "start" in c)
    return {
        "per_second": round(count / (last - start)),
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 3),
        "publisher_cpu_us": round(publisher["cpu"] / count * 1e6, 1),
        "subscriber_cpu_us": round(statistics.mean(c["cpu"] for c in receivers) / count * 1e6, 1),
    }


def median_row(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the rounds."""
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


# --- main --------------------------------------------------------------------------------------


KEYS = {
    "1 broker, 1 subscriber": "one_broker",
    "1 broker, 10 subscribers": "one_broker_10_subscribers",
    "latency at 1,000/s": "latency_at_1000_per_s",
    "3 brokers, 1 subscriber": "three_brokers",
}


def _figure(row: dict[str, float], latency: bool) -> str:
    return f"p50 {row['p50_ms']} ms p99 {row['p99_ms']} ms" if latency else f"{row['per_second']:,}/s"


def _cpu(row: dict[str, float]) -> str:
    parts = [row.get(f"{who}_cpu_us") for who in ("server", "publisher", "subscriber")]
    return "/".join("?" if part is None else f"{part:g}" for part in parts) + " us"


def _ratio(ours: dict[str, float], peer: dict[str, float], latency: bool) -> float:
    """Throughput: ours/peer (higher is better); latency: p99 ours/peer (lower is better)."""
    return ours["p99_ms"] / peer["p99_ms"] if latency else ours["per_second"] / peer["per_second"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=30_000, help="publications per throughput figure")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each figure is their median")
    parser.add_argument("--tls-only", action="store_true", help="only TLS against plain, through one broker")
    parser.add_argument(
        "--loops", action="store_true", help="only uvloop against the standard loop, 1 broker"
    )
    parser.add_argument(
        "--builds", action="store_true", help="only the brokers compiled against their pure Python"
    )
    parser.add_argument(
        "--floor", action="store_true", help="only the broker against a relay of our protocol, 1 broker"
    )
    args = parser.parse_args()
    count = args.count
    if args.floor:
        rows = floor_rows(count, args.repeat)
        print("RESULT " + json.dumps({"benchmark": "overlay", "cores": os.cpu_count(), **rows}))
        return
    if args.builds:
        rows = build_rows(count, args.repeat)
        print("RESULT " + json.dumps({"benchmark": "overlay", "cores": os.cpu_count(), **rows}))
        return
    if args.loops:
        rows = loop_rows(count, args.repeat)
        print("RESULT " + json.dumps({"benchmark": "overlay", "cores": os.cpu_count(), **rows}))
        return
    if args.tls_only:
        print("RESULT " + json.dumps({"benchmark": "overlay", "cores": os.cpu_count(), **tls_rows(count)}))
        return
    shapes = {  # name: (publications, subscribers, rate)
        "1 broker, 1 subscriber": (count, 1, 0.0),
        "1 broker, 10 subscribers": (count // 5, 10, 0.0),
        "latency at 1,000/s": (3000, 1, 1000.0),
        "3 brokers, 1 subscriber": (count, 1, 0.0),
    }
    rounds: dict[str, dict[str, list[dict[str, float]]]] = {name: {} for name in shapes}
    with ExitStack() as stack:
        peers = started_peers(stack)
        with brokers(1) as (b1,), other_subscriptions(b1, 1000), brokers(3) as chain:
            for _ in range(args.repeat):
                for name, (n, subscribers, rate) in shapes.items():
                    pub_uri, sub_uri = (chain[0], chain[-1]) if name.startswith("3 brokers") else (b1, b1)
                    runs = rounds[name]
                    runs.setdefault("ours", []).append(measure_ours(pub_uri, sub_uri, n, subscribers, rate))
                    for peer, port in peers.items():
                        subscriber, publisher, _ = PEERS[peer][2]
                        runs.setdefault(peer, []).append(
                            measure(subscriber, publisher, port, n, subscribers, rate)
                        )
    result: dict[str, Any] = {
        "benchmark": "overlay",
        "cores": os.cpu_count(),
        "repeat": args.repeat,
        "baselines": {
            peer: "pub/sub" if peer in peers else "missing: no server or no client package" for peer in PEERS
        },
    }
    plain = {}
    for name, runs in rounds.items():
        latency = name.startswith("latency")
        ours = plain[name] = median_row(runs["ours"])
        line = f"{name:26} ours {_figure(ours, latency):30}"
        entry: dict[str, Any] = {"ours": ours}
        for peer in peers:
            row = median_row(runs[peer])
            ratio = _ratio(ours, row, latency)
            line += f" {peer} {_figure(row, latency):30} ratio {ratio:.2f}"
            entry[peer] = row
            entry[f"ratio_{peer}"] = round(ratio, 3)
        print(line, flush=True)
        result[KEYS[name]] = entry
    cpu = " ".join(f"{system} {_cpu(result['one_broker'][system])}" for system in ["ours", *peers])
    print(f"{'CPU per publication':26} server/publisher/subscriber through 1 broker: {cpu}", flush=True)
    result.update(tls_rows(count, plain=plain))
    print("RESULT " + json.dumps(result))


def tls_rows(count: int, plain: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """Through one broker (with 1,000 other subscriptions) over TLS, against the plain figures
    (measured now if not given): throughput ratio TLS/plain (higher is better; the target is at
    least 0.7) and p99 latency ratio (lower is better)."""
    shapes = {"1 broker, 1 subscriber": (count, 0.0), "latency at 1,000/s": (3000, 1000.0)}
    if plain is None:
        with brokers(1) as (b1,), other_subscriptions(b1, 1000):
            plain = {name: measure_ours(b1, b1, n, rate=rate) for name, (n, rate) in shapes.items()}
    with certificates(1) as certs, brokers(1, certs) as (b1,), other_subscriptions(b1, 1000):
        tls = {name: measure_ours(b1, b1, n, rate=rate) for name, (n, rate) in shapes.items()}
    result: dict[str, Any] = {}
    for name in shapes:
        latency = name.startswith("latency")
        ratio = (
            tls[name]["p99_ms"] / plain[name]["p99_ms"]
            if latency
            else tls[name]["per_second"] / plain[name]["per_second"]
        )
        print(
            f"{name + ', TLS':26} ours {_figure(tls[name], latency):30}"
            f" plain {_figure(plain[name], latency):30}"
            f" ratio {ratio:.2f}",
            flush=True,
        )
        result[f"tls_{KEYS[name]}"] = {"tls": tls[name], "plain": plain[name], "ratio": round(ratio, 3)}
    return result


def loop_rows(count: int, repeat: int) -> dict[str, Any]:
    """Through one broker (with 1,000 other subscriptions), the broker and our clients on uvloop
    against the standard loop, the loops taking turns each round: throughput ratio uvloop/asyncio
    (higher is better), p99 latency ratio (lower is better) and CPU per publication of each."""
    shapes = {"1 broker, 1 subscriber": (count, 0.0), "latency at 1,000/s": (3000, 1000.0)}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        loop: {name: [] for name in shapes} for loop in loops.LOOPS
    }
    for _ in range(repeat):
        for loop in loops.LOOPS:
            os.environ[loops.ENV] = loop  # the broker process and our clients' processes inherit it
            with brokers(1) as (b1,), other_subscriptions(b1, 1000):
                for name, (n, rate) in shapes.items():
                    runs[loop][name].append(measure_ours(b1, b1, n, rate=rate))
    os.environ.pop(loops.ENV)
    return _compared(runs, "uvloop", "asyncio")


def build_rows(count: int, repeat: int) -> dict[str, Any]:
    """The brokers' hot path compiled against their pure Python (``WFM_PURE=1`` in the broker
    processes), the two taking turns each round: through one broker (1,000 other subscriptions)
    and a chain of three, throughput ratio compiled/pure (higher is better), p99 latency ratio
    (lower is better) and the CPU per publication of each."""
    if compiled.BUILD != "compiled":
        raise SystemExit("overlay.py --builds: this install has no compiled build (see setup.py)")
    shapes = {
        "1 broker, 1 subscriber": (1, count, 0.0),
        "1 broker, 10 subscribers": (1, count // 5, 0.0),
        "latency at 1,000/s": (1, 3000, 1000.0),
        "3 brokers, 1 subscriber": (3, count, 0.0),
    }
    builds = {"compiled": "0", "pure": "1"}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {b: {name: [] for name in shapes} for b in builds}
    for _ in range(repeat):
        for build, pure in builds.items():
            os.environ[compiled.ENV] = pure  # the broker processes inherit it
            with brokers(1) as (b1,), other_subscriptions(b1, 1000), brokers(3) as chain:
                for name, (size, n, rate) in shapes.items():
                    pub_uri, sub_uri = (chain[0], chain[-1]) if size == 3 else (b1, b1)
                    subscribers = 10 if "10 subscribers" in name else 1
                    runs[build][name].append(measure_ours(pub_uri, sub_uri, n, subscribers, rate))
    os.environ.pop(compiled.ENV)
    return _compared(runs, "compiled", "pure")


def _compared(runs: dict[str, dict[str, list[dict[str, float]]]], new: str, old: str) -> dict[str, Any]:
    """Each shape's median under ``new`` against ``old`` (the keys of ``runs``), printed, and
    the result's entries: throughput ratio new/old, p99 latency ratio, CPU per publication."""
    result: dict[str, Any] = {}
    for name in runs[new]:
        latency = name.startswith("latency")
        ours, theirs = median_row(runs[new][name]), median_row(runs[old][name])
        ratio = _ratio(ours, theirs, latency)
        print(
            f"{name + ', ' + new:26} ours {_figure(ours, latency):30} {old} {_figure(theirs, latency):30}"
            f" ratio {ratio:.2f}" + ("" if latency else f"; CPU {new} {_cpu(ours)}, {old} {_cpu(theirs)}"),
            flush=True,
        )
        result[f"{new}_{KEYS[name]}"] = {new: ours, old: theirs, "ratio": round(ratio, 3)}
    return result


FLOOR = {"relay": "relay", "relay+codec": "relay_codec", "ours": "ours"}  # the variant's RESULT key


def floor_rows(count: int, repeat: int) -> dict[str, Any]:
    """Through one server, 1 publisher and 1 subscriber (our clients, as in the one-broker
    figure): ``relay`` (``benchmarks/relay.py``: our protocol, the publication never decoded, no
    routing), ``relay+codec`` (the same, every frame decoded and encoded by the codec), ``ours``
    (``wfm broker`` with 1,000 other subscriptions) and the peers (Redis, NATS, 1,000 other
    subscriptions each), taking turns each round, median of ``repeat`` rounds. Each variant's
    throughput and CPU per publication of the server, the publisher and the subscriber, and what
    the cores allow: ``cores`` / the CPU all three processes spend per publication. The server's
    CPU differences: the codec's (``relay+codec`` - ``relay``), and routing, matching and
    custody's (``ours`` - ``relay+codec``)."""
    runs: dict[str, list[dict[str, float]]] = {}
    with ExitStack() as stack:
        peers = started_peers(stack)
        servers = {
            "relay": stack.enter_context(relay(codec=False)),
            "relay+codec": stack.enter_context(relay(codec=True)),
        }
        (servers["ours"],) = stack.enter_context(brokers(1))
        stack.enter_context(other_subscriptions(servers["ours"], 1000))
        for _ in range(repeat):
            for name, target in servers.items():
                runs.setdefault(name, []).append(measure_ours(target, target, count))
            for peer, port in peers.items():
                subscriber, publisher, _ = PEERS[peer][2]
                runs.setdefault(peer, []).append(measure(subscriber, publisher, port, count))
    cores = os.cpu_count() or 1
    rows = {name: median_row(rounds) for name, rounds in runs.items()}
    missing = "missing: no server or no client package"
    baselines = {peer: "pub/sub" if peer in peers else missing for peer in PEERS}
    floor = {"count": count, "repeat": repeat, "build": compiled.BUILD, "baselines": baselines}
    result: dict[str, Any] = {"floor": floor}
    for name, row in rows.items():
        spent = sum(row.get(f"{who}_cpu_us", 0.0) for who in ("server", "publisher", "subscriber"))
        row["all_cpu_us"] = round(spent, 1)
        row["cores_allow_per_second"] = round(cores / spent * 1e6) if spent else 0
        print(
            f"{'floor, ' + name:26} {_figure(row, False):12} CPU server/publisher/subscriber {_cpu(row)}:"
            f" all {spent:.1f} us, {cores} cores allow {row['cores_allow_per_second']:,}/s",
            flush=True,
        )
        result["floor"][FLOOR.get(name, name)] = row
    relay_, codec_, ours = rows["relay"], rows["relay+codec"], rows["ours"]
    figures: dict[str, float] = {
        "codec_us": codec_["server_cpu_us"] - relay_["server_cpu_us"],
        "routing_custody_matching_us": ours["server_cpu_us"] - codec_["server_cpu_us"],
        "ratio_ours_relay": ours["per_second"] / relay_["per_second"],
        "ratio_ours_relay_codec": ours["per_second"] / codec_["per_second"],
    }
    for peer in peers:
        figures[f"ratio_relay_{peer}"] = relay_["per_second"] / rows[peer]["per_second"]
        figures[f"ratio_relay_codec_{peer}"] = codec_["per_second"] / rows[peer]["per_second"]
        figures[f"ratio_ours_{peer}"] = ours["per_second"] / rows[peer]["per_second"]
    result["floor"].update({key: round(value, 3) for key, value in figures.items()})
    against = "".join(f", {figures[f'ratio_relay_{peer}']:.2f}x {peer}" for peer in peers)
    print(
        f"{'floor':26} relay {relay_['per_second']:,.0f}/s{against}; the codec costs the server"
        f" {figures['codec_us']:.1f} us, routing, matching and custody"
        f" {figures['routing_custody_matching_us']:.1f} us more;"
        f" ours/relay {figures['ratio_ours_relay']:.2f},"
        f" ours/relay+codec {figures['ratio_ours_relay_codec']:.2f}",
        flush=True,
    )
    return result


if __name__ == "__main__":
    main()
