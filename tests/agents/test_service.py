"""The agent's adapter: deliveries before their subscription's id, a slow broker, a flood and a
broker that refuses the agent's own subscription (without a real broker), and its outbox across
a restart (with one, in this process)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

import agents.service
from agents import supervisor
from agents.envelope import Registration
from agents.events import Delivered, Finished, Incoming, Result, Run, TimePassed
from agents.generations import GenerationState
from agents.runner import Retention, log_path
from agents.service import AgentService
from agents.state import Agent
from broker.client import Backoff, Client, Delivery, RefusedError
from broker.clock import ManualClock
from broker.language import Publication, parse_filter, parse_publication
from broker.messages import DEFAULT_QOS, Qos
from broker.transport.server import RouterService
from broker.transport.uri import BrokerURI
from tests.agents.test_journal import records
from tests.agents.test_operations import busy_agent
from tests.agents.test_runner import start_agent
from tests.agents.test_state import PLAN, install
from tests.processes import against_scripted_broker
from tests.signing import signed
from tests.transport.harness import Request, ScriptedBroker, run, until, uri
from workflow_messages import job_status
from workflow_messages.operations import answer_subscription, query, query_advertisement

FILTER = parse_filter("[class,eq,JOBSTATUS],[jobname,eq,A]")
FIRST, SECOND = (
    parse_publication("[class,JOBSTATUS],[jobname,A],[n,1]"),
    parse_publication("[class,JOBSTATUS],[jobname,A],[n,2]"),
)


class RacingClient:
    """Its subscription's first delivery is read before ``subscribe`` returns, as when the ack and
    the delivery come in one read and the reader task runs first."""

    def __init__(self) -> None:
        self.acked = asyncio.Event()
        self.read = asyncio.Event()
        self.name: str | None = None

    async def subscribe(self, subscription: object, own_queue: bool, name: str) -> SimpleNamespace:
        self.name = name  # acknowledged: the client knows the id's name from here on
        await self.read.wait()  # the reader has taken the delivery before this request returns
        return SimpleNamespace(id="B1/agentA/7")

    def name_of(self, known_id: str) -> str | None:
        return self.name if known_id == "B1/agentA/7" else None

    async def __aiter__(self) -> AsyncIterator[Delivery]:
        yield Delivery("B1/agentA/7", FIRST, id="id1")
        self.read.set()
        await self.acked.wait()
        yield Delivery("B1/agentA/7", SECOND, id="id2")


def test_a_delivery_read_before_its_subscription_id_is_known_is_kept_in_order(tmp_path: Path) -> None:
    service = AgentService(Agent("agentA"), BrokerURI("127.0.0.1", 1, "B1"), tmp_path, tmp_path)
    client = RacingClient()

    async def scenario() -> None:
        reader = asyncio.create_task(service._read(client))  # type: ignore[arg-type]
        await service.registering.request(client, "key", Registration("SUBSCRIBE", FILTER))  # type: ignore[arg-type]
        client.acked.set()
        await reader

    asyncio.run(scenario())
    events = [service.events.queue.get_nowait() for _ in range(service.events.queue.qsize())]
    assert events == [Delivered("key", (FIRST,)), Delivered("key", (SECOND,))]
    service.journal.close()


class SlowBroker:
    """A connected client whose broker answers no request until ``answer`` is set; it records
    what was asked and published, in order."""

    connected = True

    def __init__(self) -> None:
        self.answer = asyncio.Event()
        self.calls: list[str] = []
        self.known: dict[str, str] = {}

    async def _request(self, name: str) -> SimpleNamespace:
        self.calls.append(f"request {name}")  # sent at once; the answer is what takes time
        await self.answer.wait()
        self.known[name] = f"B1/agentB/{name}"
        return SimpleNamespace(id=self.known[name])

    def known_id(self, name: str) -> str | None:
        return self.known.get(name)

    async def advertise(self, advertisement: object, name: str) -> str:
        return str((await self._request(name)).id)

    async def subscribe(self, subscription: object, own_queue: bool, name: str) -> SimpleNamespace:
        return await self._request(name)

    async def subscribe_composite(
        self, composite: object, clear: object, own_queue: bool, name: str, policy: object, priority: int
    ) -> SimpleNamespace:
        return await self._request(name)

    def publish_nowait(self, publication: Publication, qos: Qos = DEFAULT_QOS) -> None:
        self.calls.append(f"publish {publication.cls}")

    async def stored(self) -> None:
        """No outbox here: what is published is as stored as it gets."""


def test_the_event_loop_never_waits_for_the_broker(tmp_path: Path) -> None:
    """A deployment's requests wait for a slow broker; its acknowledgements, a firing and a
    finished run are handled meanwhile (they used to wait behind each request's answer)."""
    service = AgentService(Agent("agentB"), BrokerURI("127.0.0.1", 1, "B1"), tmp_path, tmp_path)
    broker = SlowBroker()
    service.client = service.registering.client = broker  # type: ignore[assignment]
    envelopes = [Incoming(p) for p in signed(PLAN.publications()) if p["agentname"] == "agentB"]

    async def scenario() -> None:
        await asyncio.wait_for(service._handle(*envelopes), 2)
        assert broker.calls.count("publish AGENT_ACK") == len(envelopes)
        assert broker.calls[0].startswith("request")  # on the link before its acknowledgement
        registering = service.registering
        assert registering.issued == {} and set(registering.requesting) == set(service.agent.wanted)
        broker.answer.set()
        await until(lambda: not registering.requesting, what="the requests answered")
        assert set(registering.issued) == set(service.agent.wanted)

    asyncio.run(scenario())
    service.journal.close()


class FloodingClient:
    """Delivers ``count`` publications for one subscription as fast as they are taken."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.taken = 0

    async def __aiter__(self) -> AsyncIterator[Delivery]:
        for n in range(self.count):
            self.taken += 1
            yield Delivery("B1/agentA/7", parse_publication(f"[class,JOBSTATUS],[jobname,A],[n,{n}]"))

    def name_of(self, known_id: str) -> str:
        return "kflood"


def test_a_flood_of_deliveries_waits_for_room_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agents.service.EVENTS_LIMIT", 10)
    service = AgentService(Agent("agentA"), BrokerURI("127.0.0.1", 1, "B1"), tmp_path, tmp_path)
    service.registering.by_name["kflood"] = "key"
    client = FloodingClient(100)

    async def scenario() -> list[object]:
        reader = asyncio.create_task(service._read(client))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        assert service.events.queue.qsize() == 10 and client.taken == 10 and not reader.done()
        got: list[object] = []
        while len(got) < client.count:
            got += [event.publications[0]["n"] for event in await service._batch()]  # type: ignore[union-attr]
        await reader
        return got

    assert asyncio.run(scenario()) == list(range(100))
    service.journal.close()


class QueryingClient:
    """Delivers two queries to the agent and keeps what it answers and marks done."""

    def __init__(self) -> None:
        self.answers: list[Publication] = []
        self.done_ids: list[str] = []

    async def __aiter__(self) -> AsyncIterator[Delivery]:
        for request in ("r1", "r2"):
            yield Delivery("B1/agentB/q", query("agentB", "WORKFLOWS", request, {}), id=request)

    def publish_nowait(self, publication: Publication, durable: bool = True) -> None:
        self.answers.append(publication)

    def done(self, delivery: Delivery) -> None:
        self.done_ids.append(str(delivery.id))

    def name_of(self, known_id: str) -> str:
        return "queries"  # the agent's own query subscription

    async def stored(self) -> None:
        """No outbox here."""


def test_an_error_in_handling_one_message_is_counted_and_the_agent_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A query whose decoding raised RecursionError ended the reader, and the agent with it: the
    reader and the event loop now survive anything one message makes them raise."""
    service = AgentService(Agent("agentB"), BrokerURI("127.0.0.1", 1, "B1"), tmp_path, tmp_path)
    client = QueryingClient()
    service.client = client  # type: ignore[assignment]
    answer_query = agents.service.answer_query

    def first_raises(agent: Agent, publication: Publication) -> object:
        if publication["request"] == "r1":
            raise RecursionError("maximum recursion depth exceeded")
        return answer_query(agent, publication)

    monkeypatch.setattr("agents.service.answer_query", first_raises)
    asyncio.run(service._read(client))  # type: ignore[arg-type]
    assert [str(a["request"]) for a in client.answers] == ["r2"] and client.done_ids == ["r1", "r2"]

    handle = service.agent.handle
    monkeypatch.setattr(
        service.agent, "handle", lambda e, now: handle(e, now) if isinstance(e, TimePassed) else 1 / 0
    )
    asyncio.run(service._handle(Delivered("key", (FIRST,)), TimePassed()))
    assert service.errors == {"reading a delivery": 1, "handling an event": 1}
    assert caplog.text.count("unexpected error") == 2
    service.journal.close()
    assert records(tmp_path) == []  # not journaled: a replay would raise it again


def refuse_control(after: int) -> Callable[[int, Request], str | None]:
    """A broker's rule: refuse the agent's control subscription on connections past ``after``."""
    return lambda connection, request: "no room" if connection > after and request.id == "control" else None


def test_an_agent_whose_control_subscription_is_not_restored_ends_with_the_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with ScriptedBroker(refuse_control(after=1)) as broker:
            service = AgentService(Agent("agentA"), broker.uri, tmp_path, tmp_path)
            running = asyncio.create_task(service.run())
            await until(lambda: service.client is not None and service.client.connected, what="connected")
            broker.drop()  # the client reconnects and re-sends the subscription: refused
            expected = "^broker B1 refused to restore agent agentA's control subscription: no room$"
            with pytest.raises(RefusedError, match=expected):
                await asyncio.wait_for(running, 10)

    run(scenario())


def test_wfm_agent_exits_with_a_clear_error_if_its_subscriptions_are_refused(tmp_path: Path) -> None:
    argv = ("agent", "--name", "agentA", "--state-dir", str(tmp_path))
    code, err = against_scripted_broker(refuse_control(after=0), *argv)
    assert code == 1 and err == "wfm: error: broker B1 refused agent agentA's control subscription: no room\n"


def test_a_restarted_agent_resends_a_status_that_was_never_acknowledged(tmp_path: Path) -> None:
    """The agent publishes a JOBSTATUS while its broker is down and stops before the broker is
    back: the next run with the same state dir publishes it, under the id it had."""
    status = job_status("PAYROLL", "JobB", "g1", "SUCCESS", "", version=PLAN.version, agent="agentB")

    def agent_b() -> Agent:
        agent = Agent("agentB")
        install(agent)
        return agent

    async def scenario() -> None:
        b = RouterService(uri("B1"))
        await b.start()
        watch = await Client.connect(b.uri, "watch", backoff=Backoff(first=0.05, cap=0.2, attempts=None))
        statuses = await watch.subscribe("[class,eq,JOBSTATUS],[jobname,eq,JobB]")
        first = AgentService(agent_b(), b.uri, tmp_path / "agentB", tmp_path)
        running = asyncio.create_task(first.run())
        registered = first.registering
        await until(
            lambda: len(registered.issued) == len(first.agent.wanted) > 0, what="the agent registered"
        )
        assert first.client is not None
        stamp = first.client.refs.stamp
        await b.stop()
        await until(lambda: first.client is not None and not first.client.connected, what="the link lost")
        first._publish(status)
        first.stop()
        await running
        assert first.client.stats()["outbox"] == 1  # on disk, never sent

        b = RouterService(b.uri)
        await b.start()
        await until(lambda: b.router.status()["subscriptions"] == 1, what="the watcher back")
        second = AgentService(agent_b(), b.uri, tmp_path / "agentB", tmp_path)
        running = asyncio.create_task(second.run())
        got = await statuses.next(timeout=10)
        assert got.publication == status and got.id.endswith(f"@{stamp}")  # the id of the first run
        await until(lambda: second.client is not None and second.client.stats()["outbox"] == 0, what="acked")
        second.stop()
        await running
        await watch.close()
        await b.stop()

    run(scenario())


def test_a_cancelled_run_is_stopped_again_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent stopped its cancelled run, whose command ignores SIGTERM, and died before its
    SIGKILL: the next run of the agent stops it again, SIGKILL timer included, and it ends
    cancelled (it used to re-attach and wait, and the command could end SUCCESS)."""
    monkeypatch.setattr("agents.service.STOP_GRACE", 0.2)
    job = Run("W", "v1", "g1", "Job", 1, "trap '' TERM; sleep 30", None, "2026-11-23", None)
    log = str(log_path(tmp_path, job))
    died = start_agent(job, tmp_path)
    agent = Agent("agentA")
    agent.running[job.workflow, job.gid, job.job] = job
    agent.generations[job.workflow, job.gid] = GenerationState("v1", {"Job": "running"}, cancelled=True)
    service = AgentService(agent, BrokerURI("127.0.0.1", 1, "B1"), tmp_path, tmp_path)

    async def scenario() -> None:
        await until(
            lambda: supervisor.recorded(log).group is not None, timeout=10, what="the command started"
        )
        died.send_signal(signal.SIGKILL)
        died.wait(5)
        running = asyncio.create_task(service.run())
        try:
            await until(lambda: not agent.running, timeout=10, what="the run stopped")
        finally:
            service.stop()
            await running

    try:
        run(scenario())
    finally:
        died.kill()
        died.wait(5)
        with contextlib.suppress(ProcessLookupError):  # the command, if it was not stopped
            os.killpg(int(supervisor.recorded(log).group), signal.SIGKILL)  # type: ignore[call-overload]
    [status] = service.outbox
    assert status["status"] == "FAILURE" and str(status["detail"]).startswith("cancelled: exit -9")


def test_an_agent_answers_a_query_past_its_outbox_and_too_large_an_answer_is_cut(tmp_path: Path) -> None:
    """A RUNS answer larger than a frame ended the agent (and one in the outbox would have failed
    again at every start): it is cut to fit, and published past the outbox."""

    async def scenario() -> None:
        b = RouterService(uri("B1"))
        await b.start()
        asker = await Client.connect(b.uri, "asker")
        await asker.advertise(query_advertisement())
        answers = await asker.subscribe(answer_subscription("r1"))
        service = AgentService(busy_agent(200, 40), b.uri, tmp_path / "agentB", tmp_path)
        running = asyncio.create_task(service.run())
        await until(lambda: service.client is not None and service.client.connected, what="connected")
        ask = query("agentB", "RUNS", "r1", {"workflow": "PAYROLL", "limit": 200})
        got = None
        while got is None:  # the query's advertisement reaches the agent's broker first
            asker.publish_nowait(ask)
            with contextlib.suppress(TimeoutError):
                got = await answers.next(timeout=0.5)
        assert got.publication["result"] == "OK" and not running.done()
        assert json.loads(str(got.publication["content"]))["truncated"] is True
        assert service.client is not None and service.client.stats()["outbox"] == 0
        service.stop()
        await running
        await asker.close()
        await b.stop()

    run(scenario())


def test_a_busy_agent_prunes_run_logs_after_a_tenth_of_keep_runs_more_runs(tmp_path: Path) -> None:
    """Not only every PRUNE_EVERY (60 s): at a hundred runs a second a minute of folders is
    thousands, many times --keep-runs."""
    service = AgentService(
        Agent("agentA"), BrokerURI("127.0.0.1", 1, "B1"), tmp_path, tmp_path, Retention(runs=20, days=None)
    )
    assert service.prune_after == 10

    async def scenario() -> list[int]:
        folders = tmp_path / "logs" / "W"
        left = []
        pruning = asyncio.create_task(service._prune_regularly())
        try:
            for n in range(3):
                for g in range(25):
                    (folders / f"g{n}-{g}").mkdir(parents=True)
                for _ in range(service.prune_after):
                    service._count_run()
                await until(lambda: len(list(folders.iterdir())) <= 20, what="a pruning", timeout=5)
                left.append(len(list(folders.iterdir())))
        finally:
            pruning.cancel()
        return left

    assert asyncio.run(scenario()) == [20, 20, 20]
    service.journal.close()


def test_the_records_of_runs_ends_wait_for_the_next_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of runs' ends that only publish is not fsync'd on its own (the supervisor's status
    file holds the ends): the next batch's fsync covers it, at the latest SYNC_LAG later; a
    delivery is fsync'd before its broker is told it is done."""
    agent = Agent("agentA")
    jobs = [Run("W", "v1", "g1", name, 1, "true", None, "2026-11-23", None) for name in ("A", "B")]
    for job in jobs:
        agent.running[job.workflow, job.gid, job.job] = job
    agent.generations["W", "g1"] = GenerationState("v1", {"A": "running", "B": "running"})
    clock = ManualClock(wall=1000.0)
    service = AgentService(agent, BrokerURI("127.0.0.1", 1, "B1"), tmp_path, tmp_path, clock=clock)
    fsyncs: list[float] = []
    monkeypatch.setattr(service.journal, "fsync", lambda: fsyncs.append(1))
    ended = Result(True, "exit 0", 999.0, 0.1)

    asyncio.run(service._handle(Finished(jobs[0], ended)))
    assert fsyncs == [] and len(records(tmp_path)) == 1  # flushed, not synced
    clock.advance(agents.service.SYNC_LAG)
    asyncio.run(service._handle(Finished(jobs[1], ended)))
    assert len(fsyncs) == 1  # the oldest waited SYNC_LAG: synced with the second
    asyncio.run(service._handle(Delivered("key", (FIRST,))))
    assert len(fsyncs) == 2
    service.journal.close()
