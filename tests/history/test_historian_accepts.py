"""The historian says it has accepted a query before it answers, again on a repeat of the query,
and every heartbeat while it works: in process, over one in-process broker, with a store whose query
waits until the test lets it go (a slow Spark query whose end the test decides). No Spark."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from broker.client import Client, Subscription
from broker.language import Filter, parse_publication
from broker.transport.server import RouterService
from tests.transport.harness import run, until, uri
from wfm.history.historian import RecorderService
from wfm.history.landing import StoredPublication
from wfm.history.protocol import (
    RESULT,
    Answer,
    parse_answer,
    query_advertisement,
    query_publication,
)

ROWS = [
    StoredPublication(f"B1/p/{n}", float(n), "p", parse_publication(f"[class,JOBSTATUS],[n,{n}]"))
    for n in (1, 2)
]


class HeldStore:
    """Answers every query with ROWS, but only once :attr:`release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.threads: list[threading.Thread] = []  # where the queries ran

    def has_table(self) -> bool:
        return False

    def query(
        self, subscription: Filter, since: float | None, until: float | None
    ) -> Iterator[StoredPublication]:
        self.threads.append(threading.current_thread())
        if not self.release.wait(30):
            raise TimeoutError("the test never released the query")
        return iter(ROWS)


class HeldHistorian(RecorderService):
    held: HeldStore

    def store(self) -> HeldStore:  # type: ignore[override]
        return self.held


Scenario = Callable[[Client, Subscription, HeldStore], Awaitable[None]]


def with_historian(
    tmp_path: Path,
    heartbeat: float,
    scenario: Scenario,
    store: HeldStore | None = None,
    stop_first: bool = False,
) -> None:
    """Run ``scenario`` against a historian over one broker; the held query is released before the
    historian stops, unless ``stop_first``."""

    async def main() -> None:
        broker = RouterService(uri("B1"))
        await broker.start()
        historian = HeldHistorian(broker.uri, tmp_path, ("JOBSTATUS",), compact_every=0, heartbeat=heartbeat)
        historian.held = store or HeldStore()
        running = asyncio.create_task(historian.run())
        asker = await Client.connect(broker.uri, "asker")
        try:
            answers = await asker.subscribe(f"[class,eq,{RESULT}]")  # every query's, in order
            await asker.advertise(query_advertisement())
            await until(lambda: historian.client is not None, what="the historian subscribed")
            await scenario(asker, answers, historian.held)
        finally:
            if not stop_first:
                historian.held.release.set()
            historian.stop()
            await running
            await asker.close()
            await broker.stop()

    run(main())


async def ask(asker: Client, query_id: str = "q1") -> None:
    await asker.publish(query_publication(query_id, "[class,eq,JOBSTATUS]", None, None))


async def next_answer(answers: Subscription) -> Answer:
    return parse_answer((await answers.next(10)).publication)


async def rest(answers: Subscription) -> list[Answer]:
    """What follows, up to and with the final marker, heartbeats left out."""
    got: list[Answer] = []
    while not got or not got[-1].last:
        answer = await next_answer(answers)
        if not answer.accepted:
            got.append(answer)
    return got


def check_answer(got: list[Answer]) -> None:
    assert [(a.last, a.id) for a in got] == [(False, "B1/p/1"), (False, "B1/p/2"), (True, "")]
    assert got[-1].count == 2 and not got[-1].error
    # who answers, the same in each message (and across reconnections, unlike the client name)
    assert len({a.historian for a in got}) == 1 and got[0].historian.startswith("historian@")


def test_accepted_before_the_answer_again_on_a_repeat_and_not_after(tmp_path: Path) -> None:
    async def scenario(asker: Client, answers: Subscription, store: HeldStore) -> None:
        await ask(asker)
        assert (await next_answer(answers)).accepted  # the query is held: no answer can be sent yet
        await ask(asker)  # an asker that did not hear that yet asks again: no heartbeat within an hour
        assert (await next_answer(answers)).accepted
        store.release.set()
        check_answer([await next_answer(answers) for _ in range(3)])
        await ask(asker)  # a repeat after the answer is ignored: what follows is q2's answer
        await ask(asker, "q2")
        first = await next_answer(answers)
        assert (first.query, first.accepted) == ("q2", True)
        check_answer(await rest(answers))

    with_historian(tmp_path, 3600.0, scenario)


def test_heartbeats_while_the_query_runs(tmp_path: Path) -> None:
    async def scenario(asker: Client, answers: Subscription, store: HeldStore) -> None:
        await ask(asker)  # asked once: every further accepted marker while it is held is a heartbeat
        assert [(await next_answer(answers)).accepted for _ in range(3)] == [True, True, True]
        store.release.set()
        check_answer(await rest(answers))

    with_historian(tmp_path, 0.05, scenario)


def test_stopping_does_not_wait_for_a_running_query(tmp_path: Path) -> None:
    """SIGTERM while a Spark query (or compaction) runs: the historian stops at once, and the
    interpreter does not wait for the query's thread either (closing the event loop joins the
    threads of its executor, so a query there kept the process alive until it ended). What landed
    is already flushed, and compaction is safe to interrupt."""

    async def scenario(asker: Client, answers: Subscription, store: HeldStore) -> None:
        await ask(asker)
        assert (await next_answer(answers)).accepted

    store = HeldStore()
    try:
        with_historian(tmp_path, 3600.0, scenario, store=store, stop_first=True)
        [thread] = store.threads
        assert thread.is_alive() and thread.daemon  # not waited for, and no exit waits for it
    finally:
        store.release.set()


@pytest.mark.parametrize("table", [True, False])
def test_spark_starts_with_the_historian_only_on_a_store_with_a_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: bool
) -> None:
    """After a restart, the first query of the table would otherwise wait seconds for Spark; a
    store without a table is answered from the landing log and needs none."""
    started = threading.Event()

    def spark_session(master: str | None) -> object:
        started.set()
        return object()

    monkeypatch.setattr("wfm.history.historian.spark_session", spark_session)
    if table:
        (tmp_path / "table").mkdir()
        (tmp_path / "table" / "_attributes.json").write_text("[]")

    async def main() -> None:
        broker = RouterService(uri("B1"))
        await broker.start()
        historian = RecorderService(broker.uri, tmp_path, ("JOBSTATUS",), compact_every=0)
        running = asyncio.create_task(historian.run())
        try:
            await until(lambda: historian.client is not None, what="the historian subscribed")
            if table:
                await until(started.is_set, what="Spark started")
            else:
                await asyncio.sleep(0.3)
                assert not started.is_set()
        finally:
            historian.stop()
            await running
            await broker.stop()

    run(main())
