"""Real ``wfm broker`` processes with ``--data``, killed with SIGKILL at the moments that matter
to the quality-of-service features and started again from their logs: a retained publication
whose advertisement never reached the neighbour, an away subscriber's priority backlog, a lease
that ran out while its broker was down."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from broker.client import Client, Qos
from broker.language import Publication, parse_filter
from broker.messages import Carry, Deliver, Subscribe, Took
from broker.routing.backlog import WINDOW
from broker.transport.server import RouterService
from broker.transport.uri import BrokerURI
from tests.processes import WFM, wait_for
from tests.processes import status as broker_status
from tests.transport.harness import run, until, uri
from tests.transport.test_persistence import _answered, _raw, stop_all

ALERT = "[class,eq,ALERT],[job,isPresent,''],[level,isPresent,0]"


class Brokers:
    """``wfm broker`` processes, each with its log in ``tmp/NAME``, started and killed by name."""

    def __init__(self, tmp: Path, *names: str) -> None:
        self.tmp = tmp
        self.uris = {name: uri(name) for name in names}
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def start(self, name: str, *neighbours: str) -> None:
        with open(self.tmp / f"{name}.log", "a") as log:
            self.procs[name] = subprocess.Popen(
                [
                    WFM,
                    "broker",
                    "--uri",
                    str(self.uris[name]),
                    "--heartbeat",  # dead after 8 s: the raw peers answer no ping
                    "2",
                    "--session-grace",
                    "60",
                    "--data",
                    str(self.tmp / name),
                    *[arg for n in neighbours for arg in ("--neighbor", str(self.uris[n]))],
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                text=True,
                env=dict(os.environ),
            )
        wait_for(lambda: broker_status(self.uris[name]).get("id") == name, name, timeout=60)

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()

    def status(self, name: str) -> dict[str, object]:
        return broker_status(self.uris[name])

    def stop(self) -> None:
        stop_all(self.procs, self.tmp)


@contextmanager
def processes(tmp: Path, *names: str) -> Iterator[Brokers]:
    brokers = Brokers(tmp, *names)
    try:
        yield brokers
    finally:
        brokers.stop()


def counters(brokers: Brokers, name: str) -> dict[str, int]:
    return brokers.status(name)["counters"]  # type: ignore[return-value]


def test_a_retained_publication_whose_advertisement_never_left_reaches_a_later_subscriber_once(
    tmp_path: Path,
) -> None:
    """B1 keeps a retained publication while its neighbour B2 is down (its advertisement of the
    publication waits in custody for B2) and is killed. B1 restarted from its log, then B2
    started (in this process): B2 learns the advertisement, and a subscriber that comes later
    at B2 gets the publication once."""
    with processes(tmp_path, "B1", "B2") as brokers:
        brokers.start("B1", "B2")  # it dials B2, which is not there yet

        async def keep() -> str:
            async with await Client.connect(brokers.uris["B1"], "agent") as agent:
                await agent.advertise(ALERT)
                return await agent.publish("[class,ALERT],[job,load],[level,2]", Qos(retain=True, mid="a1"))

        pub_id = run(keep())  # acknowledged: in B1's log
        brokers.kill("B1")
        brokers.start("B1", "B2")

        async def later() -> list[str]:
            b2 = RouterService(brokers.uris["B2"])  # B1 dials it, and sends what it held for it
            await b2.start()
            await until(lambda: "B1" in b2.links, timeout=15, what="B1 linked")
            async with await Client.connect(b2.uri, "later") as client:
                stream = await client.subscribe("[class,eq,ALERT]")
                got = [(await stream.next(timeout=10)).id]
                with suppress(TimeoutError):
                    got.append((await stream.next(timeout=1.0)).id)
            await b2.stop()
            return got

        assert run(later()) == [pub_id]
        assert brokers.status("B1")["retained"] == 1


def test_an_away_subscriber_s_priority_backlog_survives_a_kill(tmp_path: Path) -> None:
    """A subscriber (a peer speaking frames by hand, so it takes exactly when the test says) is
    away while ``WINDOW + 40`` ordinary publications and then an urgent one are queued for it;
    its broker is killed and restarted from its log. Back, the subscriber is sent the window
    again (it took none), and once it takes it, the urgent one, then the rest: each once."""
    total = WINDOW + 40
    with processes(tmp_path, "B1") as brokers:
        brokers.start("B1")
        address = brokers.uris["B1"]

        async def away() -> str:
            sub, hello = await _raw(address, "client", "sub")
            sub.send(Subscribe("s", parse_filter("[class,eq,t]")))
            await _answered(sub, "s")
            sub.close("away", abort=True)
            async with await Client.connect(address, "pub") as pub:
                await pub.advertise("[class,eq,t],[n,>,-1]")
                for n in range(total):
                    pub.publish_nowait(Publication("t", {"n": n}), qos=Qos(priority=1))
                await pub.publish(Publication("t", {"n": total}), Qos(priority=9))
            return hello.epoch

        epoch = run(away())
        waiting = brokers.status("B1")
        assert waiting["held_for_away"] == total + 1 and waiting["waiting"] == total + 1 - WINDOW
        brokers.kill("B1")
        brokers.start("B1")

        async def back() -> list[int]:
            link, _ = await _raw(address, "client", "sub", epoch, 0)
            got: list[tuple[int, int]] = []
            async with asyncio.timeout(20):
                while len(got) < total + 1:
                    for item in await link.receive():
                        if isinstance(item, Carry) and isinstance(item.message, Deliver):
                            got.append((item.seq, int(item.message.publication["n"])))  # type: ignore[arg-type]
                    if len(got) == WINDOW:
                        link.send(Took(got[-1][0]))
            try:
                async with asyncio.timeout(1.0):
                    extra = await link.receive()
                got += [(i.seq, -1) for i in extra if isinstance(i, Carry)]
            except TimeoutError:
                pass
            link.close("done")
            return [n for _, n in got]

        got = run(back())
        assert got == [*range(WINDOW), total, *range(WINDOW, total)]


def test_a_lease_that_ran_out_while_its_broker_was_dead_ends_at_its_restart(tmp_path: Path) -> None:
    """A subscription leased for 1 s whose client never renews it (it speaks frames by hand),
    and one leased for an hour; the broker is killed at once and is dead for more than 1 s.
    Restarted, it has ended the first (counted ``leases.expired``) and kept the other."""
    with processes(tmp_path, "B1") as brokers:
        brokers.start("B1")
        address: BrokerURI = brokers.uris["B1"]

        async def leased() -> None:
            sub, _ = await _raw(address, "client", "sub")
            sub.send(Subscribe("short", parse_filter("[class,eq,t]"), lease=1))
            sub.send(Subscribe("long", parse_filter("[class,eq,t]"), lease=3600))
            await _answered(sub, "long")  # both in the log
            sub.close("away", abort=True)

        run(leased())
        brokers.kill("B1")
        run(asyncio.sleep(1.2))
        brokers.start("B1")
        status = brokers.status("B1")
        assert (status["leases"], status["subscriptions"]) == (1, 1)
        assert counters(brokers, "B1")["leases.expired"] == 1
