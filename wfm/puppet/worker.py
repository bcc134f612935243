"""A publisher or subscriber of a ``wfm puppet`` run: a small process over the client library.

``python -m wfm.puppet.worker publisher|subscriber --name NAME --broker URI[,URI...] --state-dir
DIR`` reads the puppet's orders on stdin, one a line (``subscribe TOPIC``, ``unsubscribe TOPIC``,
``advertise TOPIC``, ``publish N TOPIC MS``, ``status``) and reports on stdout, one JSON object a
line: ``ready``, ``subscribed``/``unsubscribed``/``advertised`` (acknowledged by its broker),
``pub`` (a publication its broker acknowledged), ``done`` (a Publish order finished), ``sub`` (a
delivery), ``status``, ``error``. ``pub`` and ``sub`` name the broker the client is linked to,
from which the puppet infers the brokers that forwarded the publication (``LoggingLevel full``).
It is a separate process so that the puppet can kill, freeze and restart it like any other.

Its client id is its name, so its broker keeps its session while it is away (durable sessions).
The state directory keeps what a restart needs: a subscriber's topics (re-subscribed under the
same request names, which its broker's session recognises) and a publisher's next sequence
number, written before the publication goes out, so a number is never used twice (a crash may
skip one). It exits when stdin ends: a puppet that dies leaves no publisher behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from broker.client import Backoff, Client, Delivery, NoAnswer, RefusedError, brokers
from broker.durable.log import replace_atomically
from broker.errors import LinkClosed
from wfm.puppet import topics

__all__ = ["main"]


def say(event: str, **fields: object) -> None:
    sys.stdout.write(json.dumps({"e": event, **fields}) + "\n")
    sys.stdout.flush()


class Worker:
    def __init__(self, role: str, name: str, client: Client, state: Path) -> None:
        self.role, self.name, self.client, self.state = role, name, client, state
        self.subscribed: dict[str, str] = {}  # topic pattern -> subscription id
        self.advertised: set[str] = set()
        self.batches: asyncio.Queue[tuple[int, str, float]] = asyncio.Queue()

    # the subscriber -------------------------------------------------------------------------------

    def _topics_file(self) -> Path:
        return self.state / "topics.json"

    async def restore(self) -> None:
        """Re-subscribe what the state directory says this subscriber had."""
        file = self._topics_file()
        for pattern in json.loads(file.read_text()) if file.exists() else []:
            await self.subscribe(pattern, restored=True)

    def _save_topics(self) -> None:
        replace_atomically(self._topics_file(), json.dumps(sorted(self.subscribed)).encode(), sync=False)

    async def subscribe(self, pattern: str, restored: bool = False) -> None:
        name = topics.request_name("sub", pattern)
        sub = await self.client.subscribe(topics.subscription(pattern), own_queue=False, name=name)
        self.subscribed[pattern] = sub.id
        self._save_topics()
        say("subscribed", topic=pattern, restored=restored)

    async def unsubscribe(self, pattern: str) -> None:
        sub_id = self.subscribed.pop(pattern, None)
        if sub_id is None:
            say("error", message=f"not subscribed to {pattern}")
            return
        self._save_topics()
        await self.client.unsubscribe(sub_id)
        say("unsubscribed", topic=pattern)

    async def receive(self) -> None:
        async for delivery in self.client:
            say("sub", **_event(delivery), broker=self.client.broker_id)

    # the publisher --------------------------------------------------------------------------------

    def _reserve(self) -> int:
        """The next sequence number, recorded as used before it is."""
        file = self.state / "next_seq"
        seq = int(file.read_text()) if file.exists() else 1
        replace_atomically(file, str(seq + 1).encode(), sync=False)
        return seq

    async def advertise(self, topic: str, answer: bool = False) -> None:
        """Advertise ``topic`` once (the puppet has its publishers advertise every topic of the
        script at the start, so that subscriptions are routed before the first publication)."""
        if topic not in self.advertised:
            await self.client.advertise(
                topics.advertisement(self.name, topic), topics.request_name("adv", topic)
            )
            self.advertised.add(topic)
        if answer:
            say("advertised", topic=topic)

    async def publish(self) -> None:
        while True:
            count, topic, interval = await self.batches.get()
            await self.advertise(topic)
            for i in range(count):
                seq = self._reserve()
                try:
                    await self.client.publish(topics.publication(self.name, topic, seq))
                except (NoAnswer, RefusedError) as error:
                    say("error", message=f"publication {seq} on {topic}: {error}")
                else:
                    say("pub", topic=topic, seq=seq, broker=self.client.broker_id)
                if i + 1 < count:
                    await asyncio.sleep(interval)
            say("done", topic=topic)

    # orders ---------------------------------------------------------------------------------------

    async def obey(self, line: str) -> None:
        words = line.split()
        if not words:
            return
        try:
            if words[0] == "subscribe" and len(words) == 2:
                await self.subscribe(topics.check_topic(words[1], pattern=True))
            elif words[0] == "unsubscribe" and len(words) == 2:
                await self.unsubscribe(words[1])
            elif words[0] == "advertise" and len(words) == 2:
                await self.advertise(topics.check_topic(words[1]), answer=True)
            elif words[0] == "publish" and len(words) == 4:
                self.batches.put_nowait((int(words[1]), topics.check_topic(words[2]), int(words[3]) / 1000))
            elif words[0] == "status":
                stats = {k: v for k, v in self.client.stats().items() if v}
                say(
                    "status",
                    text=f"{self.role} {self.name} on {self.client.broker_id or '-'}"
                    f" {'connected' if self.client.connected else 'disconnected'},"
                    f" topics {', '.join(sorted(self.subscribed)) or '-'}, {stats or 'no counters'}",
                )
            else:
                say("error", message=f"unknown order {line.strip()!r}")
        except (NoAnswer, RefusedError, ValueError) as error:
            say("error", message=f"{line.strip()}: {error}")


def _event(delivery: Delivery) -> dict[str, object]:
    p = delivery.publication
    return {"publisher": p.get("publisher"), "topic": p.get("topic"), "seq": p.get("seq")}


async def run(args: argparse.Namespace) -> None:
    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    client = await Client.connect(
        brokers(args.broker),
        args.name,
        retry_on_failed_connect=True,
        backoff=Backoff(first=0.05, cap=1.0, attempts=None),
        heartbeat=args.heartbeat,
        dead_after=args.dead_after,
    )
    worker = Worker(args.role, args.name, client, state)
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    tasks = [loop.create_task(worker.receive()), loop.create_task(worker.publish())]
    try:
        await worker.restore()
        say("ready")
        while line := await stdin.readline():
            await worker.obey(line.decode(errors="replace"))
    except LinkClosed as error:
        say("error", message=f"gave up: {error}")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m wfm.puppet.worker")
    parser.add_argument("role", choices=("publisher", "subscriber"))
    parser.add_argument("--name", required=True)
    parser.add_argument("--broker", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--dead-after", type=float, default=10.0)
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
