"""A site's state streamed to a member behind: throughput, the event loop's longest stall, memory.

Two ends of a member link on loopback TCP in one event loop, as a leader and a follower of a
site hold them (``Link`` with the default 64 MiB queue limit, frames of ``MAX_FRAME``): the
leader's ``Outbox`` streams an ``InstallSnapshot`` of ``--mib`` MiB of state (several times the
queue limit by default: queued at once, it would close the link as a slow consumer), the
follower's ``Assembly`` writes the pieces to a file and decodes the message from it. Meanwhile a
task that sleeps 1 ms at a time measures how late it wakes: the longest stall is the longest the
broker's other links and clients would wait, both ends' work counted (in a site they run in two
processes). Then the baseline: the same MiB over a bare loopback asyncio stream. Prints one
``RESULT`` line: seconds, MiB/s, the longest stall (and the longest before the
last piece arrived: the decoding of the whole message, one copy of the state, comes after), the
99th percentile in ms, the stalls over 50 ms, the process's peak resident memory and its growth
while streaming, the load average, and the baseline's MiB/s and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from broker.messages import InstallSnapshot, Piece
from broker.sites.pieces import Assembly, Outbox
from broker.transport.link import Link


async def stream(mib: int, directory: Path) -> dict[str, object]:
    state = os.urandom(mib << 20)
    message = InstallSnapshot(7, "b1", 1_000_000, 6, state)
    accepted: asyncio.Queue[Link] = asyncio.Queue()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await accepted.put(Link(reader, writer, "from b1"))

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    leader = Link(reader, writer, "to b2")
    follower = await accepted.get()
    lags: list[float] = []
    running = True

    async def watch() -> None:
        while running:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - before - 0.001)

    def refuse(message: object, error: Exception) -> None:
        raise SystemExit(f"unsendable: {error}")

    watching = asyncio.get_running_loop().create_task(watch())
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    Outbox(leader, lambda message: True, refuse).send(message)
    assembly = Assembly(directory, 1 << 30)
    got: object = None
    streaming = 0  # the lags measured before the last piece arrived: the stream's, not the decoding's
    while got is None:
        for item in await follower.receive():
            assert type(item) is Piece
            if item.last:
                streaming = len(lags)
            got = assembly.take(item)
    elapsed = time.perf_counter() - start
    running = False
    await watching
    assert got == message, "the state arrived changed"
    assert leader.closed is None, leader.closed
    for link in (leader, follower):
        await link.wait_closed()
    server.close()
    await server.wait_closed()
    while_streaming = max(lags[:streaming])
    lags.sort()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "mib": mib,
        "seconds": round(elapsed, 2),
        "mib_per_s": round(mib / elapsed, 1),
        "longest_stall_ms": round(lags[-1] * 1000, 1),
        "longest_stall_while_streaming_ms": round(while_streaming * 1000, 1),
        "p99_stall_ms": round(lags[int(len(lags) * 0.99)] * 1000, 2),
        "stalls_over_50ms": sum(lag > 0.05 for lag in lags),
        "peak_rss_mib": round(peak / 1024),
        "rss_growth_while_streaming_mib": round((peak - rss_before) / 1024),
        "load": os.getloadavg()[0],
    }


async def raw(mib: int) -> float:
    """Seconds to carry ``mib`` MiB over a loopback asyncio stream with nothing else to do: the
    baseline (the same bytes, the same kind of connection, no framing, pieces or file)."""
    done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    size = mib << 20

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        left = size
        while left:
            left -= len(await reader.read(1 << 20))
        done.set_result(time.perf_counter())
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    _, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    chunk = os.urandom(1 << 20)
    start = time.perf_counter()
    for _ in range(mib):
        writer.write(chunk)
        await writer.drain()
    elapsed = await done - start
    writer.close()
    server.close()
    await server.wait_closed()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB of state (default 256)")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        result = asyncio.run(stream(arguments.mib, Path(directory)))
    baseline = arguments.mib / asyncio.run(raw(arguments.mib))
    result |= {
        "baseline": "the same MiB over a bare loopback asyncio stream, same run",
        "baseline_mib_per_s": round(baseline, 1),
        "ratio": round(float(result["mib_per_s"]) / baseline, 3),  # type: ignore[arg-type]
        "cores": os.cpu_count(),
    }
    print("RESULT " + json.dumps({"benchmark": "snapshot-stream", **result}))


if __name__ == "__main__":
    main()
