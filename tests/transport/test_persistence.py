"""Brokers with a write-ahead log: restarted (cleanly, or after SIGKILL) they come back with their
tables, sessions and custody, and the overlay loses and duplicates nothing."""

from __future__ import annotations

import asyncio
import errno
import os
import pickle
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path

import pytest

from broker.client import Client
from broker.durable.log import WriteAheadLog
from broker.errors import BadMessage, LinkClosed, LocalError
from broker.language import Publication, parse_filter
from broker.messages import (
    Ack,
    Advertise,
    Carry,
    Deliver,
    Hello,
    LinkDown,
    LinkUp,
    Publish,
    Qos,
    Subscribe,
    Took,
    Unadvertise,
    WireMessage,
)
from broker.routing.acl import AccessPolicy
from broker.routing.backlog import WINDOW
from broker.routing.router import Router
from broker.transport import persistence
from broker.transport.link import Link
from broker.transport.server import RouterService
from broker.transport.uri import BrokerURI
from tests.client.test_reconnect import ADV, FAST
from tests.durable.test_log import reopened
from tests.processes import WFM, wait_for
from tests.processes import status as broker_status
from tests.transport.harness import free_port, run, until, uri


def test_a_broker_restarted_from_its_log_has_its_subscriptions_and_sessions(tmp_path: Path) -> None:
    async def scenario() -> None:
        address = uri("B1")
        b = RouterService(address, session_grace=60.0, data=tmp_path / "b1")
        await b.start()
        pub = await Client.connect(address, "pub", backoff=FAST)
        sub = await Client.connect(address, "sub", backoff=FAST)
        await pub.advertise(ADV)
        s = await sub.subscribe("[class,eq,stock]")
        await pub.publish(Publication("stock", {"n": 0}))
        assert (await s.next(timeout=5)).publication["n"] == 0
        epoch = b.router.custody.epoch
        await b.stop()
        b = RouterService(address, session_grace=60.0, data=tmp_path / "b1")
        await b.start()
        assert b.router.custody.epoch == epoch and b.router.status()["subscriptions"] == 1
        await until(lambda: pub.connected and sub.connected, what="both back")
        await pub.publish(Publication("stock", {"n": 1}))
        assert (await s.next(timeout=5)).publication["n"] == 1
        assert b.router.counters.get("refused", 0) == 0  # re-sent requests matched what it kept
        for c in (pub, sub):
            await c.close()
        await b.stop()

    run(scenario())


def test_a_second_broker_cannot_use_the_same_log(tmp_path: Path) -> None:
    first = RouterService(uri("B1"), data=tmp_path / "b")
    with pytest.raises(Exception, match="in use by another process"):
        RouterService(uri("B1"), data=tmp_path / "b")
    first.log_file.close()  # type: ignore[union-attr]


class Line:
    """B1 - B2 - B3 as ``wfm broker`` processes with logs, which a test can kill and restart."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.uris = {name: BrokerURI("127.0.0.1", free_port(), name) for name in ("B1", "B2", "B3")}
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def start(self, name: str, *options: str, failpoints: str = "") -> None:
        """Start broker ``name`` with ``options``, armed with ``failpoints`` (WFM_FAILPOINTS)."""
        before = {"B2": ["B1"], "B3": ["B2"]}.get(name, [])
        with open(self.tmp / f"{name}.log", "a") as log:
            self.procs[name] = self._spawn(name, before, log, options, failpoints)

    def _spawn(
        self, name: str, before: list[str], log: object, options: tuple[str, ...] = (), failpoints: str = ""
    ) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                WFM,
                "broker",
                "--uri",
                str(self.uris[name]),
                "--heartbeat",
                "0.2",
                "--session-grace",
                "60",
                "--data",
                str(self.tmp / name),
                *[arg for n in before for arg in ("--neighbor", str(self.uris[n]))],
                *options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
            env={**os.environ, "WFM_FAILPOINTS": failpoints},
        )

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()

    def linked(self) -> None:
        for name, neighbours in {"B1": {"B2"}, "B2": {"B1", "B3"}, "B3": {"B2"}}.items():
            wait_for(  # brokers starting on a busy machine, then redialling on their backoff (up to 5 s)
                lambda n=name, w=neighbours: set(broker_status(self.uris[n]).get("neighbors", [])) == w,
                name,
                timeout=60,
            )

    def stop(self) -> None:
        stop_all(self.procs, self.tmp)


def stop_all(procs: dict[str, subprocess.Popen[str]], tmp: Path) -> None:
    """Stop the broker processes still running; none may have logged a traceback (``tmp/NAME.log``)."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.terminate()
    for name, proc in procs.items():
        proc.wait(timeout=10)
        log = (tmp / f"{name}.log").read_text()
        assert "Traceback" not in log, log[-3000:]


@contextmanager
def line(tmp: Path) -> Iterator[Line]:
    brokers = Line(tmp)
    try:
        for name in brokers.uris:
            brokers.start(name)
        brokers.linked()
        yield brokers
    finally:
        brokers.stop()


STAY = replace(FAST, failover_after=30.0)


def numbered_stream(brokers: Line, total: int, fault: Callable[[int], Awaitable[None]]) -> list[int]:
    """``total`` numbered publications from B1 to B3 (a client at each end, given the line to fail
    over along), ``fault(n)`` awaited after the n-th: the numbers received, in their order.

    The clients stay with a killed broker until it is back (``STAY``): a subscriber that moved
    would leave what its broker holds for it there (see ``Backoff``), and a restart takes longer
    than the 3 s a client waits by default on a machine busy with other tests."""

    async def scenario() -> list[int]:
        pub = await Client.connect([brokers.uris[b] for b in ("B1", "B2", "B3")], "pub", backoff=STAY)
        sub = await Client.connect([brokers.uris[b] for b in ("B3", "B2", "B1")], "sub", backoff=STAY)
        await pub.advertise(ADV)
        s = await sub.subscribe("[class,eq,stock]")
        async with asyncio.timeout(15):  # the subscription reaches B1
            while (await asyncio.to_thread(broker_status, brokers.uris["B1"])).get("subscriptions") != 1:
                await asyncio.sleep(0.05)
        got: list[int] = []

        async def receive() -> None:
            while len(got) < total:
                got.append(int((await s.next(timeout=30)).publication["n"]))  # type: ignore[arg-type]

        receiving = asyncio.create_task(receive())
        for n in range(total):
            pub.publish_nowait(Publication("stock", {"n": n}))
            await fault(n)
            await asyncio.sleep(0.005)
        with suppress(TimeoutError):
            await asyncio.wait_for(receiving, 45)
        await asyncio.sleep(1.0)  # anything more would be a duplicate
        for c in (pub, sub):
            await c.close()
        return got

    return run(scenario(), timeout=90)


def each_once_in_order(got: list[int], total: int) -> None:
    assert len(got) == len(set(got)), f"duplicates: {sorted(n for n in set(got) if got.count(n) > 1)}"
    assert sorted(got) == list(range(total)), f"lost: {sorted(set(range(total)) - set(got))}"
    assert got == sorted(got), "out of order"


@pytest.mark.parametrize("victim", ["B2", "B1", "B3"])
def test_a_broker_killed_mid_stream_and_restarted_loses_and_duplicates_nothing(
    tmp_path: Path, victim: str
) -> None:
    """SIGKILL of the middle broker, of the publisher's edge and of the subscriber's edge, while
    numbered publications flow from B1 to B3: each arrives once, in order."""
    total = 300

    async def kill_then_restart(n: int) -> None:
        if n == total // 3:
            await asyncio.sleep(0.2)
            brokers.kill(victim)
        if n == total // 2:
            await asyncio.sleep(1.0)
            brokers.start(victim)

    with line(tmp_path) as brokers:
        each_once_in_order(numbered_stream(brokers, total, kill_then_restart), total)
    assert os.path.exists(tmp_path / victim / "lock")


@pytest.mark.parametrize("point", ["wal.checkpoint.snapshot", "wal.checkpoint.log"])
def test_a_broker_killed_inside_a_checkpoint_comes_back_whole(tmp_path: Path, point: str) -> None:
    """The middle broker kills itself (a failpoint) inside its second checkpoint: after the new
    snapshot is renamed into place and before its log exists, or after that and before the old
    generation is deleted. Restarted, it comes back from whichever generation is whole, and
    numbered publications from B1 to B3 each arrive once, in order."""
    total, every = 300, 60  # the second: the generation before the first is there to delete

    async def restart_once_dead(n: int) -> None:
        b2 = brokers.procs["B2"]
        if b2.poll() is not None:
            assert b2.returncode == -signal.SIGKILL
            await asyncio.sleep(0.3)
            brokers.start("B2", "--checkpoint-every", str(every))

    with line(tmp_path) as brokers:
        brokers.kill("B2")  # started again armed (its log goes on from the first start)
        brokers.start("B2", "--checkpoint-every", str(every), failpoints=f"{point}:2")
        brokers.linked()
        each_once_in_order(numbered_stream(brokers, total, restart_once_dead), total)
    log = (tmp_path / "B2.log").read_text()
    assert f"failpoint {point} (pass 2): killed" in log, log[-2000:]


async def _raw(
    address: BrokerURI, kind: str, name: str, peer_epoch: str = "", took: int = 0
) -> tuple[Link, Hello]:
    """A peer speaking frames by hand: its hello, and the broker's."""
    reader, writer = await asyncio.open_connection(address.host, address.port)
    link = _Raw(reader, writer, name, 1 << 20)
    link.behind = []
    link.send(Hello(kind, name, peer_epoch=peer_epoch, took=took))
    items = await link.receive()
    assert isinstance(items[0], Hello)
    link.behind = items[1:]  # what the broker sent at once (custody sent again) may share the read
    return link, items[0]


class _Raw(Link):
    """A link read by hand whose next ``receive`` gives first what came behind the hello."""

    behind: list[WireMessage | BadMessage]

    async def receive(self) -> list[WireMessage | BadMessage]:
        if self.behind:
            items, self.behind = self.behind, []
            return items
        return await super().receive()


async def _answered(link: Link, ref: str, timeout: float = 15.0) -> None:
    """Until the broker acknowledges the request ``ref`` on ``link`` (after the commit that logged
    it: nothing leaves a broker with a log before then)."""
    async with asyncio.timeout(timeout):
        while not any(isinstance(item, Ack) and item.ref == ref for item in await link.receive()):
            pass


async def _carried(link: Link, wait: float, kind: type[Carry | Took] = Carry) -> list[int]:
    """The seqs of what comes carried (or of the Tooks that come) on ``link`` within ``wait`` seconds."""
    seqs: list[int] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + wait
    while (left := end - loop.time()) > 0:
        try:
            items = await asyncio.wait_for(link.receive(), left)
        except TimeoutError:
            break
        seqs += [item.seq for item in items if isinstance(item, kind)]
    return seqs


def _slow_commits(broker: RouterService, seconds: float) -> None:
    """A disk that has been slow for a while: each commit takes ``seconds``, in a thread."""
    broker.driver.commits.offload.average = seconds  # type: ignore[union-attr]
    wal = broker.log_file.wal  # type: ignore[union-attr]
    commit = wal.commit

    def slow() -> int:
        time.sleep(seconds)  # a slow fsync
        return commit()

    wal.commit = slow  # type: ignore[method-assign]


def test_what_was_carried_for_a_link_replaced_during_a_commit_comes_again_in_order(tmp_path: Path) -> None:
    async def scenario() -> None:
        address = uri("A")
        a = RouterService(address, session_grace=60.0, data=tmp_path / "a")
        await a.start()
        pub = await Client.connect(address, "pub", backoff=FAST)
        await pub.advertise(ADV)
        sub, hello = await _raw(address, "client", "sub")
        sub.send(Subscribe("s", parse_filter("[class,eq,stock]")))
        await asyncio.sleep(0.2)
        for n in (1, 2, 3, 4):
            await pub.publish(Publication("stock", {"n": n}))
        assert await _carried(sub, 0.3) == [1, 2, 3, 4]
        sub.send(Took(3))  # 4 is "lost in the socket" when the link drops
        await asyncio.sleep(0.2)
        _slow_commits(a, 0.6)
        late = asyncio.ensure_future(pub.publish(Publication("stock", {"n": 5})))
        await asyncio.sleep(0.05)  # 5 is handled; its Carry waits for the commit
        sub.close("flap", abort=True)
        await until(lambda: "sub" not in a.links, what="the link down")
        again, _ = await _raw(address, "client", "sub", hello.epoch, 3)
        assert await _carried(again, 2.0) == [4, 5]  # not 5 before 4, then 4 dropped as taken
        await late
        again.close("done")
        await pub.close()
        await a.stop()

    run(scenario())


def test_a_group_commit_answers_a_neighbour_with_one_took(tmp_path: Path) -> None:
    """Took is cumulative: after a group commit a neighbour gets one, for the last of what it
    carried, not one per message (each a frame the neighbour decodes, logs and handles)."""

    async def scenario() -> None:
        a = RouterService(uri("A"), session_grace=60.0, data=tmp_path / "a")
        await a.start()
        b, _ = await _raw(a.uri, "broker", "B", "B:1")
        for n in range(1, 6):  # queued in one turn: one write, one read, one group commit
            b.send(Carry(n, Advertise(f"B/p/{n}", parse_filter(f"[class,eq,c{n}]"))))
        assert await _carried(b, 1.0, Took) == [5]
        assert a.counters["log_commits"] == 1
        b.send(Carry(6, Advertise("B/p/6", parse_filter("[class,eq,c6]"))))
        assert await _carried(b, 1.0, Took) == [6]
        b.close("done")
        await a.stop()

    run(scenario())


def test_a_hello_says_only_what_the_log_has_taken(tmp_path: Path) -> None:
    """A neighbour's Carry handled during a slow commit is not reported taken in a hello: a
    crash before the commit would lose it, and the neighbour would not send it again."""

    async def scenario() -> None:
        address = uri("A")
        a = RouterService(address, session_grace=60.0, data=tmp_path / "a")
        await a.start()
        b, hello = await _raw(address, "broker", "B", "B:1")
        b.send(Carry(1, Advertise("B/p/1", parse_filter("[class,eq,bond]"))))
        await asyncio.sleep(0.3)
        _slow_commits(a, 1.0)
        b.send(Carry(2, Advertise("B/p/2", parse_filter("[class,eq,stock]"))))
        await asyncio.sleep(0.1)
        b.close("flap", abort=True)
        await until(lambda: "B" not in a.links, what="the link down")
        again, hello = await _raw(address, "broker", "B", hello.epoch)
        assert hello.took == 1
        again.close("done")
        await a.stop()

    run(scenario())


def test_a_restarted_broker_runs_with_the_settings_it_is_started_with(tmp_path: Path) -> None:
    async def scenario() -> None:
        address = uri("A")
        first = RouterService(address, session_grace=600.0, data=tmp_path / "a")
        await first.start()
        await first.stop()
        policy = AccessPolicy.parse('[roles.client]\npublish = ["*"]\n')
        again = RouterService(address, session_grace=5.0, data=tmp_path / "a", policy=policy)
        await again.start()
        assert again.router.sessions.grace == 5.0 and again.router.policy is policy  # not the log's
        await again.stop()
        other = RouterService(address, covering="active", data=tmp_path / "a")
        with pytest.raises(LocalError, match="written with covering 'off', not 'active'"):
            await other.start()
        other.log_file.close()  # type: ignore[union-attr]

    run(scenario())


def test_a_full_disk_at_a_checkpoint_does_not_stop_the_acknowledgements(tmp_path: Path) -> None:
    async def scenario() -> None:
        address = uri("A")
        a = RouterService(address, data=tmp_path / "a", checkpoint_every=3)
        await a.start()
        pub = await Client.connect(address, "pub", backoff=FAST)
        await pub.advertise(ADV)

        def full(snapshot: bytes) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        a.log_file.wal.checkpoint = full  # type: ignore[union-attr, method-assign]
        for n in range(3):
            await asyncio.wait_for(pub.publish(Publication("stock", {"n": n})), 5)
        assert a.counters["log_errors"] >= 1
        await pub.close()
        a.log_file.wal.checkpoint = WriteAheadLog.checkpoint.__get__(a.log_file.wal)  # type: ignore[union-attr, method-assign]
        await a.stop()

    run(scenario())


def test_a_snapshot_of_another_format_is_refused_in_one_line(tmp_path: Path) -> None:
    """A broker upgraded over a data directory whose state has another shape would fail on every
    message; it refuses to start instead, saying what to do."""
    log = persistence.RouterLog(tmp_path)
    log.restore(lambda: Router("B1"))
    log.wal.checkpoint(pickle.dumps(Router("B1")))  # as the format before versions
    log.close()
    again = persistence.RouterLog(tmp_path)
    refused = r"another version of the broker \(format an older one, this one reads"
    with pytest.raises(LocalError, match=refused):
        again.restore(lambda: Router("B1"))
    again.close()


def _fed(log: persistence.RouterLog, router: Router, inputs: list[tuple[object, str]]) -> None:
    """What ``RouterDriver.feed`` does: each input logged, then handled."""
    for now, (message, hop) in enumerate(inputs, start=1):
        log.record(message, hop, float(now))  # type: ignore[arg-type]
        router.handle(message, hop, float(now))  # type: ignore[arg-type]
    log.wal.commit()


INPUTS: list[tuple[object, str]] = [
    (LinkUp(False), "pub"),
    (LinkUp(False), "sub"),
    (Advertise("a1", parse_filter("[class,eq,stock],[n,>,-1]")), "pub"),
    (Subscribe("s1", parse_filter("[class,eq,stock]")), "sub"),
]


def _written_by_format(
    directory: Path, written: int, state: object, inputs: list[tuple[object, str]]
) -> None:
    """A log as a broker of format ``written`` left it: its snapshot (up to format 10 the
    router itself, then its state), and its inputs as pickles (5's records)."""
    wal = WriteAheadLog(directory)
    wal.recover()
    wal.checkpoint(pickle.dumps((written, state), pickle.HIGHEST_PROTOCOL))
    for now, (message, hop) in enumerate(inputs, start=1):
        wal.append(pickle.dumps((hop, float(now), message), pickle.HIGHEST_PROTOCOL))
    wal.commit()
    wal.close()


@pytest.mark.parametrize("written", [5, 6, 7, 8, 9, 10])
def test_a_log_older_than_the_format_before_is_refused_in_one_line_naming_its_format(
    tmp_path: Path, written: int
) -> None:
    """The formats before 11 are no longer read (the module's policy): the broker says which
    format it found and which it reads, in one line, instead of replaying the log otherwise than
    it was sent."""
    _written_by_format(tmp_path, written, Router("B1"), INPUTS)
    log = persistence.RouterLog(tmp_path)
    with pytest.raises(LocalError) as refused:
        log.restore(lambda: Router("B9"))
    log.close()
    assert f"(format {written}, this one reads 11 or 12 or 13 or 14)" in str(refused.value)
    assert "\n" not in str(refused.value)


STRANDED: list[tuple[object, str]] = [  # a publication held for B2, which comes back having forgotten B1
    (LinkUp(True, epoch="B2-1"), "B2"),
    (LinkUp(False), "pub"),
    (Advertise("a", parse_filter("[class,eq,t],[n,>,-1]")), "pub"),
    (Carry(1, Subscribe("B2/s/1", parse_filter("[class,eq,t]"))), "B2"),
    (Took(1), "B2"),  # the advertisement
    (LinkDown(), "B2"),
    (Publish("1", Publication("t", {"n": 1}), ack=False), "pub"),
    (LinkUp(True, epoch="B2-2"), "B2"),
]


@pytest.mark.parametrize("written", [11, persistence.SNAPSHOT_FORMAT])
def test_a_log_replays_sending_again_what_was_held_for_a_neighbour_back_new(
    tmp_path: Path, written: int
) -> None:
    """The publications held for a neighbour back on a new channel go again after the tables,
    whether the log's snapshot is of the format before (without the publishers' marks) or this."""
    state = Router("B1", session_grace=60).snapshot()
    if written == 11:
        del state["publishers"]
    _written_by_format(tmp_path, written, state, STRANDED)
    log = persistence.RouterLog(tmp_path)
    router = log.restore(lambda: Router("B9"))
    held = [type(m).__name__ for m, _ in router.custody.channels["B2"].held.values()]
    assert held == ["Advertise", "Publish"]
    assert router.counters["dropped.link_closed"] == 0
    log.close()


def test_a_publication_whose_advertisement_went_is_not_sent_again_on_a_new_channel() -> None:
    """The neighbour would refuse it (no advertisement covers it any more): it is dropped, and
    counted so, with the old channel."""
    router = Router("B1", session_grace=60)
    for now, (message, hop) in enumerate(STRANDED[:-1]):
        router.handle(message, hop, float(now))  # type: ignore[arg-type]
    router.handle(Unadvertise(next(iter(router.owned["pub"]))), "pub", 8.0)
    out = router.handle(LinkUp(True, epoch="B2-2"), "B2", 9.0)
    assert not [m for _, m in out if isinstance(m, Carry) and isinstance(m.message, Publish)]
    assert router.counters["resent.new_channel"] == 0
    assert router.counters["dropped.link_closed"] == 2  # the publication and the Unadvertise after it


def test_a_restored_brokers_hello_says_the_last_took_it_gave(tmp_path: Path) -> None:
    """B3 carried two advertisements to B1, which passed them to B4 and held back its Took; B4
    took the first. Restored, B1's LinkDowns send the stand-ins upstream and release the Took in
    steps (B3's LinkDown comes after B4's), so a Took that says less is among what the first
    commit sends (to no link): the hello to B3 must still say the most B1 took, or B3 resends
    what B1 has and drops."""
    router = Router("B1", session_grace=600, epoch="B1.1")
    now = 1_800_000_000.0
    for hop in ("B2", "B3", "B4"):
        router.handle(LinkUp(True, f"{hop}.1:1", None, name=f"B1.1:{hop}"), hop, now)
    first = router.handle(Carry(1, Advertise("B3/p/1", parse_filter("[class,eq,a]"), 9)), "B3", now)
    router.handle(Carry(2, Advertise("B3/p/2", parse_filter("[class,eq,b]"), 9)), "B3", now)
    to_b4 = next(m.seq for hop, m in first if hop == "B4" and isinstance(m, Carry))
    router.handle(Took(to_b4), "B4", now)
    assert router.custody.channels["B3"].acked == 0 and router.status()["tooks_held_back"] == 2
    log = persistence.RouterLog(tmp_path)
    log.wal.recover()
    log.checkpoint(router)
    log.close()

    async def main() -> None:
        broker = RouterService(BrokerURI("127.0.0.1", free_port(), "B1"), session_grace=600, data=tmp_path)
        await broker.start()
        try:
            await until(lambda: broker.router.counters["link.log_commits"] or broker.counters["log_commits"])
            assert broker.router.custody.channels["B3"].acked == 2
            assert broker.driver.hello("B3").took == 2
        finally:
            await broker.stop()

    run(main())


def test_inputs_from_links_are_logged_as_wire_frames_and_replay(tmp_path: Path) -> None:
    log = persistence.RouterLog(tmp_path)
    router = log.restore(lambda: Router("B1"))
    _fed(log, router, INPUTS)
    log.close()
    _, records = reopened(tmp_path)
    assert [record[:1] for record in records] == [b"\x80", b"\x80", b"W", b"W"]  # LinkUp pickled
    again = persistence.RouterLog(tmp_path)
    restored = again.restore(lambda: Router("B9"))
    assert restored.id == "B1" and restored.status()["subscriptions"] == 1
    assert restored.status()["advertisements"] == 1
    again.close()


def test_a_log_of_the_format_before_replays_and_is_rewritten_at_once(tmp_path: Path) -> None:
    """Format 11 had no publishers' marks: an upgraded broker restores its state without them,
    replays the log (which makes them), then checkpoints, so the version before never reads
    this one's records (it refuses the snapshot instead)."""
    state = Router("B1").snapshot()
    del state["publishers"]
    published = (Publish("7@s1", Publication("stock", {"n": 1}), ack=False), "pub")
    _written_by_format(tmp_path, 11, state, [*INPUTS, published])
    log = persistence.RouterLog(tmp_path)
    router = log.restore(lambda: Router("B9"))
    assert router.id == "B1" and router.status()["subscriptions"] == 1
    log.close()
    snapshot, records = reopened(tmp_path)
    assert snapshot is not None and pickle.loads(snapshot)[0] == persistence.SNAPSHOT_FORMAT == 14
    assert pickle.loads(snapshot)[1]["publishers"] == {"marks": {("pub", "s1"): (7, 5.0)}, "mids": {}}
    assert records == []


def _alarm(ref: str) -> tuple[object, str]:
    """``pub`` publishes ``[class,stock],[n,1]`` under its message id ``a1`` (``ref``: its
    number and session)."""
    return Publish(ref, Publication("stock", {"n": 1}), qos=Qos(mid="a1")), "pub"


def _answer(router: Router, ref: str, now: float) -> tuple[str | None, list[str]]:
    """The publication id the router's Ack to ``_alarm(ref)`` names, and the kinds it carried."""
    message, hop = _alarm(ref)
    out = router.handle(message, hop, now)  # type: ignore[arg-type]
    acked = next((m.id for _, m in out if isinstance(m, Ack)), None)
    return acked, [type(m.message).__name__ for _, m in out if isinstance(m, Carry)]


def test_a_broker_restored_from_its_log_answers_a_repeated_message_id_with_the_first(
    tmp_path: Path,
) -> None:
    """The publisher's message ids are the router's state: replayed from the log (no snapshot
    since), a repeat from a new session of the publisher is answered with the first's id, not
    delivered again; and so once the log was checkpointed."""
    log = persistence.RouterLog(tmp_path)
    router = log.restore(lambda: Router("B1"))
    _fed(log, router, [*INPUTS, _alarm("1@s1")])
    first, _ = _answer(router, "1@s1", 9.0)  # its own copy: answered with its id
    log.close()
    log = persistence.RouterLog(tmp_path)
    restored = log.restore(lambda: Router("B9"))
    assert _answer(restored, "1@s2", 10.0) == (first, [])
    log.checkpoint(restored)
    log.close()
    log = persistence.RouterLog(tmp_path)
    assert _answer(log.restore(lambda: Router("B9")), "1@s3", 11.0) == (first, [])
    log.close()


def test_a_log_of_a_format_before_message_ids_replays_the_repeats_it_routed(tmp_path: Path) -> None:
    """A broker of format 13 routed a repeated message id: replayed so (its subscriber's seqs
    stay as they were), and answered from the restore on, with the first's id."""
    _written_by_format(tmp_path, 13, Router("B1").snapshot(), [*INPUTS, _alarm("1@s1"), _alarm("1@s2")])
    log = persistence.RouterLog(tmp_path)
    router = log.restore(lambda: Router("B9"))
    log.close()
    assert router.counters["delivered"] == 2 and router.custody.channels["sub"].next_seq == 3
    assert _answer(router, "1@s3", 10.0) == ("B1/pub/1@s1", [])
    assert router.publishers.by_mid


def _hand_started(address: BrokerURI, cwd: Path, *options: str) -> subprocess.Popen[str]:
    """``wfm broker`` as a user starts it by hand in ``cwd`` (no ``--data``), up and answering."""
    with open(cwd / "broker.log", "a") as log:
        process = subprocess.Popen(
            [WFM, "broker", "--uri", str(address), "--heartbeat", "0.2", "--session-grace", "60", *options],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )
    wait_for(lambda: broker_status(address).get("id") == address.id, "the broker", timeout=60)
    return process


@pytest.mark.parametrize("memory", [False, True], ids=["default", "memory"])
def test_a_broker_started_without_data_keeps_what_it_acknowledged_through_a_kill(
    tmp_path: Path, memory: bool
) -> None:
    """``wfm broker`` with neither ``--data`` nor ``--memory`` logs in ``./.wfm/brokers/ID``: a
    subscriber is away while numbered publications flow, the broker is killed with SIGKILL after
    a third of them were acknowledged and started again the same way; the subscriber, back, gets
    every one once, in order (what the broker acknowledged included). With ``--memory`` the
    broker comes back empty: the subscriber's session, subscription and the publications held
    for it are gone, and nothing was written in the directory."""
    address = uri("B1")
    options = ("--memory",) if memory else ()
    total = 90
    broker = _hand_started(address, tmp_path, *options)

    async def scenario() -> tuple[set[int], list[int], int]:
        sub, hello = await _raw(address, "client", "sub")
        sub.send(Subscribe("s", parse_filter("[class,eq,stock]")))
        await _answered(sub, "s")  # its Ack: the subscription is in the broker's tables and log
        sub.close("away", abort=True)  # its session is kept for 60 s
        pub = await Client.connect(address, "pub", backoff=FAST)
        await pub.advertise(ADV)
        sent: list[asyncio.Future[str]] = []
        acknowledged: set[int] = set()

        def taken() -> set[int]:
            return {k for k, done in enumerate(sent) if done.done() and not done.exception()}

        for n in range(total):
            sent.append(asyncio.ensure_future(pub.publish(Publication("stock", {"n": n}))))
            await asyncio.sleep(0.005)
            if n == total // 3:
                await asyncio.sleep(0.1)
                await until(lambda: len(taken()) > total // 4, timeout=15, what="a quarter acknowledged")
                acknowledged = taken()
                broker.send_signal(signal.SIGKILL)  # mid-traffic: publications are in flight
                broker.wait()
            if n == total // 2:
                await asyncio.to_thread(restart)
        await asyncio.wait_for(asyncio.gather(*sent), 30)  # re-sent by the client until acknowledged
        await pub.close()
        back, _ = await _raw(address, "client", "sub", hello.epoch, 0)
        got: list[int] = []
        loop = asyncio.get_running_loop()
        end = loop.time() + (10 if not memory else 1)
        while len(got) < total and (left := end - loop.time()) > 0:
            try:
                items = await asyncio.wait_for(back.receive(), left)
            except (TimeoutError, LinkClosed):  # nothing came (a raw link sends no pings)
                break
            got += [
                int(i.message.publication["n"])
                for i in items
                if isinstance(i, Carry) and isinstance(i.message, Deliver)
            ]  # type: ignore[arg-type]
        subscriptions = int(broker_status(address).get("subscriptions", -1))  # type: ignore[call-overload]
        back.close("done")
        return acknowledged, got, subscriptions

    def restart() -> None:
        nonlocal broker
        broker = _hand_started(address, tmp_path, *options)

    try:
        acknowledged, got, subscriptions = run(scenario(), timeout=60)
    finally:
        broker.terminate()
        broker.wait(10)
    log = (tmp_path / "broker.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    assert len(acknowledged) > total // 4  # the kill came mid-traffic, after many acknowledgements
    if memory:
        assert (got, subscriptions) == ([], 0)
        assert not (tmp_path / ".wfm").exists()
        assert "its state in memory only" in log
    else:
        each_once_in_order(got, total)
        assert subscriptions == 1
        assert (tmp_path / ".wfm" / "brokers" / "B1" / "lock").exists()
        assert f"its state in {tmp_path / '.wfm' / 'brokers' / 'B1'}" in log


def test_a_second_broker_of_the_same_id_in_the_same_directory_is_refused_naming_the_first(
    tmp_path: Path,
) -> None:
    address = uri("B1")
    first = _hand_started(address, tmp_path)
    try:
        second = subprocess.run(
            [WFM, "broker", "--uri", str(uri("B1"))], cwd=tmp_path, capture_output=True, text=True, timeout=30
        )
    finally:
        first.terminate()
        first.wait(10)
    data = tmp_path / ".wfm" / "brokers" / "B1"
    assert (second.returncode, second.stdout) == (1, "")
    assert second.stderr == (
        f"wfm: error: {data} is in use by another process (process {first.pid} holds its lock): "
        "broker B1 runs with it already; give this one a --data DIR of its own, or --memory\n"
    )


def test_memory_and_data_exclude_each_other(tmp_path: Path) -> None:
    done = subprocess.run(
        [WFM, "broker", "--uri", str(uri("B1")), "--memory", "--data", str(tmp_path / "d")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "wfm: error: --memory and --data exclude each other: give one\n"
    assert list(tmp_path.iterdir()) == []


BEFORE = Path(__file__).with_name("broker_before")  # written by the version before this format


def test_a_log_the_version_before_wrote_is_restored_whole_and_checkpointed_in_this_format(
    tmp_path: Path,
) -> None:
    """A real log of the previous version (format 11, the router's state without the
    publishers' marks): a snapshot and inputs after it. Restored, the router has what it had
    (its id, subscriptions, advertisement, counters, access rules), delivers a new publication,
    and the log is checkpointed in this version's format."""
    directory = tmp_path / "B1"
    directory.mkdir(mode=0o700)
    for file in BEFORE.iterdir():
        (directory / file.name).write_bytes(file.read_bytes())
    log = persistence.RouterLog(directory)
    router = log.restore(lambda: Router("B9"))
    log.close()
    status = router.status()
    assert (router.id, status["subscriptions"], status["advertisements"]) == ("B1", 3, 1)
    assert (router.counters["delivered"], router.counters["in.Publish"]) == (2, 3)
    assert router.policy is not None and "client" in router.policy.roles
    assert router.tables.routing == "filter"  # a setting the version before did not have
    output = router.handle(Publish("3", Publication("stock", {"n": 9}), ack=False), "pub", 8.0)
    carried = [(target, m.message) for target, m in output if isinstance(m, Carry)]
    assert [(target, type(m).__name__) for target, m in carried] == [("sub", "Deliver")]
    again = persistence.RouterLog(directory)
    restored = again.restore(lambda: Router("B9"))
    again.close()
    assert restored.status()["subscriptions"] == 3
    written = WriteAheadLog(directory)
    snapshot, _ = written.recover()
    written.close()
    assert snapshot is not None and pickle.loads(snapshot)[0] == persistence.SNAPSHOT_FORMAT


@pytest.mark.parametrize(
    ("written", "windows"), [(12, False), (12, True), (persistence.SNAPSHOT_FORMAT, True)]
)
def test_a_log_written_before_windows_replays_each_message_under_the_seq_it_was_sent(
    tmp_path: Path, written: int, windows: bool
) -> None:
    """300 publications for a subscriber away: a broker of format 12 carried them all at once
    (seqs 1-300, which the subscriber may have taken); replayed so, none waits for a window, and
    windows apply from then on. Of this format, or of 12 by a development broker that had
    windows (its snapshot's channels have a backlog), the window holds the rest back."""
    away = [
        (LinkUp(False), "sub"),
        (Subscribe("s", parse_filter("[class,eq,t]")), "sub"),
        (LinkUp(False), "pub"),
        (Advertise("a", parse_filter("[class,eq,t],[n,>,-1]")), "pub"),
        (LinkDown(), "sub"),
        *[(Publish(f"{n}@s", Publication("t", {"n": n}), ack=False), "pub") for n in range(300)],
    ]
    before = Router("B1", session_grace=600)
    if windows:  # a channel, pickled with a backlog's slots
        before.handle(LinkUp(False), "other", 0.5)
    _written_by_format(tmp_path, written, before.snapshot(), away)
    log = persistence.RouterLog(tmp_path)
    router = log.restore(lambda: Router("B9"))
    channel = router.custody.channels["sub"]
    assert (len(channel.held), channel.waiting) == ((WINDOW, 300 - WINDOW) if windows else (300, 0))
    assert router.custody.window == WINDOW
    log.close()


@pytest.mark.parametrize("written", [12, persistence.SNAPSHOT_FORMAT])
def test_a_log_of_an_older_format_is_restored_to_tell_each_neighbour_again_what_it_was_told(
    tmp_path: Path, written: int
) -> None:
    """What an older version left may be out of step with a neighbour's tables, and nothing in
    it tells: restored from an older format, the broker tells each neighbour again, at its next
    resume and once, what it told it (here a subscription B2 took); clients are told nothing."""
    inputs: list[tuple[object, str]] = [
        (LinkUp(True, "B2.1:1", None, name="B1.1:B2"), "B2"),
        (LinkUp(False), "sub"),
        (Carry(1, Advertise("B2/p/1", parse_filter("[class,eq,t]"), 9)), "B2"),
        (Subscribe("s", parse_filter("[class,eq,t]")), "sub"),
        (Took(1), "B2"),
        (LinkDown(), "B2"),
    ]
    _written_by_format(tmp_path, written, Router("B1", session_grace=600, epoch="B1.1").snapshot(), inputs)
    log = persistence.RouterLog(tmp_path)
    router = log.restore(lambda: Router("B9"))
    log.close()
    assert not router.custody.channels["sub"].reannounce
    for _ in range(2):
        took = router.custody.channels["B2"].next_seq - 1
        out = router.handle(LinkUp(True, "B2.1:1", took, name="B1.1:B2"), "B2", 10.0)
        told = [(type(m.message).__name__, m.seq) for hop, m in out if hop == "B2" and isinstance(m, Carry)]
        assert told == ([("Subscribe", 2)] if written == 12 else [])
        router.handle(LinkDown(), "B2", 11.0)
        written = persistence.SNAPSHOT_FORMAT  # once
