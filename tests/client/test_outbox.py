"""The client's outbox on disk: what a killed client had not got acknowledged is re-sent by the
next one, under the same ids, so that the broker drops the copies that got through."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.client import Client
from broker.client import outbox as outbox_module
from broker.client.client import OutboxError
from broker.durable import LogInUse
from broker.language import Publication
from broker.messages import Ack
from broker.transport import MAX_FRAME
from broker.transport.server import RouterService
from tests.durable.test_log import SlowFile
from tests.transport.harness import run, until, uri

ADV = "[class,eq,stock],[n,isPresent,0]"


def stock(n: int) -> Publication:
    return Publication("stock", {"n": n})


def lose_acks(pub: Client) -> None:
    """``pub`` misses every acknowledgement of a publication from now on (as if killed before
    they came): they stay in its outbox."""
    handle = pub._handle

    def handle_but_lose(item: object) -> None:
        if not (isinstance(item, Ack) and "@" in item.ref):
            handle(item)

    pub._handle = handle_but_lose  # type: ignore[method-assign]


async def started(tmp_path: Path) -> tuple[RouterService, Client]:
    b = RouterService(uri("B1"))
    await b.start()
    sub = await Client.connect(b.uri, "sub")
    return b, sub


def test_a_restarted_client_resends_what_was_not_acknowledged_and_the_broker_drops_the_copy(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        b, sub = await started(tmp_path)
        s = await sub.subscribe("[class,eq,stock]")
        pub = await Client.connect(b.uri, "pub", outbox=tmp_path / "outbox")
        await pub.advertise(ADV)
        lose_acks(pub)
        pub.publish_nowait(stock(1))
        first = await s.next(timeout=5)  # it got through; its ack did not
        await pub.close()  # the process ends with the publication unacknowledged

        again = await Client.connect(b.uri, outbox=tmp_path / "outbox")
        assert again.id == "pub" and again.stats()["outbox"] == 1
        await again.advertise(ADV)
        assert again.resend_outbox() == 1
        await until(lambda: again.stats()["outbox"] == 0, what="the re-sent publication acknowledged")
        await again.publish(stock(2))
        second = await s.next(timeout=5)
        assert second.publication == stock(2)  # not the copy of 1
        assert b.router.counters["dropped.duplicate"] == 1
        assert first.id.rpartition("@")[2] == second.id.rpartition("@")[2]  # one session for both runs
        for c in (again, sub):
            await c.close()
        await b.stop()

    run(scenario())


def test_what_never_reached_the_broker_is_delivered_by_the_next_run(tmp_path: Path) -> None:
    async def scenario() -> None:
        b, sub = await started(tmp_path)
        s = await sub.subscribe("[class,eq,stock]")
        pub = await Client.connect(b.uri, "pub", outbox=tmp_path / "outbox")
        await pub.advertise(ADV)
        assert pub.link is not None
        pub.link.send = lambda message: True  # type: ignore[method-assign] # a link that loses all
        pub.publish_nowait(stock(1))
        await until(lambda: (tmp_path / "outbox" / "log-0").stat().st_size > 0, what="stored")
        await pub.close()
        again = await Client.connect(b.uri, outbox=tmp_path / "outbox")
        await again.advertise(ADV)
        await again.publish(stock(2))  # the first publication of a run sends what was left first
        assert [(await s.next(timeout=5)).publication for _ in range(2)] == [stock(1), stock(2)]
        assert again.stats()["resent.outbox"] == 1
        for c in (again, sub):
            await c.close()
        await b.stop()

    run(scenario())


def test_numbers_go_on_after_a_restart_and_a_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new run never reuses a number of the same session: the broker would drop it as a copy."""
    monkeypatch.setattr(outbox_module, "CHECKPOINT_AFTER", 4)

    async def scenario() -> None:
        b, sub = await started(tmp_path)
        s = await sub.subscribe("[class,eq,stock]")
        for run_ in range(3):
            pub = await Client.connect(b.uri, "pub", outbox=tmp_path / "outbox")
            await pub.advertise(ADV)
            for n in range(5):
                await pub.publish(stock(10 * run_ + n))
            assert pub.stats()["outbox"] == 0
            await pub.close()
        got = [(await s.next(timeout=5)).publication["n"] for _ in range(15)]
        assert got == [10 * r + n for r in range(3) for n in range(5)]
        assert b.router.counters["dropped.duplicate"] == 0
        assert list((tmp_path / "outbox").glob("snap-*"))  # the outbox was compacted
        for c in (sub,):
            await c.close()
        await b.stop()

    run(scenario())


def test_a_publication_the_disk_refuses_is_not_sent_and_not_kept(tmp_path: Path) -> None:
    async def scenario() -> None:
        b, sub = await started(tmp_path)
        s = await sub.subscribe("[class,eq,stock]")
        pub = await Client.connect(b.uri, "pub", outbox=tmp_path / "outbox")
        await pub.advertise(ADV)
        assert pub._outbox is not None and pub._outbox._wal._segment is not None
        segment = pub._outbox._wal._segment
        real, segment.file = segment.file, SlowFile(segment.file, room=0)
        with pytest.raises(OutboxError, match=r"cannot store a publication in outbox .*No space left"):
            await pub.publish(stock(1))
        segment.file = real  # room again
        await pub.publish(stock(2))
        assert (await s.next(timeout=5)).publication == stock(2)
        await pub.close()
        again = await Client.connect(b.uri, outbox=tmp_path / "outbox")
        assert again.resend_outbox() == 0  # the refused one did not come back with the next commit
        for c in (again, sub):
            await c.close()
        await b.stop()

    run(scenario())


def test_an_outbox_has_one_owner(tmp_path: Path) -> None:
    async def scenario() -> None:
        b, sub = await started(tmp_path)
        pub = await Client.connect(b.uri, "pub", outbox=tmp_path / "outbox")
        with pytest.raises(LogInUse, match="outbox is in use"):
            await Client.connect(b.uri, "pub", outbox=tmp_path / "outbox")
        await pub.close()
        with pytest.raises(OutboxError, match="belongs to client 'pub', not 'other'"):
            await Client.connect(b.uri, "other", outbox=tmp_path / "outbox")
        await asyncio.gather(sub.close())
        await b.stop()

    run(scenario())


def test_what_cannot_be_sent_is_refused_before_it_is_kept(tmp_path: Path) -> None:
    """A publication too large for a frame would fail at every start of the client: refused."""

    async def scenario() -> None:
        b, sub = await started(tmp_path)
        s = await sub.subscribe("[class,eq,stock]")
        pub = await Client.connect(b.uri, "pub", outbox=tmp_path / "outbox")
        await pub.advertise(ADV)
        huge = Publication("stock", {"n": 0, "text": "x" * MAX_FRAME})
        refused = rf"^a publication of class stock is not kept in outbox {tmp_path}/outbox, it cannot be sent"
        with pytest.raises(OutboxError, match=refused):
            pub.publish_nowait(huge)
        with pytest.raises(OutboxError, match=refused):
            await pub.publish(huge)
        assert pub.stats()["outbox"] == 0
        await pub.publish(stock(1))
        await pub.close()
        again = await Client.connect(b.uri, outbox=tmp_path / "outbox")
        await again.advertise(ADV)
        assert again.resend_outbox() == 0
        assert (await s.next(timeout=5)).publication == stock(1)
        for c in (again, sub):
            await c.close()
        await b.stop()

    run(scenario())


def test_a_publication_past_the_outbox_keeps_an_id_of_its_own(tmp_path: Path) -> None:
    """Not durable: never on disk, and numbered in a session of this run, so that the next run,
    which counts only what its outbox kept, gives none of its ids again."""

    async def scenario() -> None:
        b, sub = await started(tmp_path)
        s = await sub.subscribe("[class,eq,stock]")
        pub = await Client.connect(b.uri, "pub", outbox=tmp_path / "outbox")
        await pub.advertise(ADV)
        pub.publish_nowait(stock(1), durable=False)
        assert pub.stats()["outbox"] == 0
        first = await s.next(timeout=5)
        await until(lambda: pub.stats()["unacknowledged"] == 0, what="acknowledged")
        await pub.close()
        again = await Client.connect(b.uri, outbox=tmp_path / "outbox")
        await again.advertise(ADV)
        again.publish_nowait(stock(2))
        second = await s.next(timeout=5)
        assert (first.publication, second.publication) == (stock(1), stock(2))  # not dropped as a copy
        assert first.id.rpartition("@")[2] != second.id.rpartition("@")[2]
        for c in (again, sub):
            await c.close()
        await b.stop()

    run(scenario())
