"""The agent's adapter: broker connection, journal and job processes around :class:`Agent`.

One loop consumes events (deliveries, finished runs, timer ticks) one at a time: journal the event,
let the state machine decide, carry out its effects. The connection is kept by the client, which
reconnects by itself and re-sends every live request and unacknowledged publication; after each
reconnection the agent issues what its state machine came to want meanwhile, and withdraws what it
no longer wants.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from pathlib import Path

from agents.envelope import Registration
from agents.journal import Journal
from agents.runner import Retention, prune, supervise
from agents.state import (
    Agent,
    Delivered,
    Effect,
    Emit,
    Event,
    Finished,
    Incoming,
    Lost,
    Request,
    Run,
    Start,
    Tick,
    Withdraw,
)
from broker.client import DAEMON_BACKOFF, Brokers, Client, ConnectionEvent, Delivery, TooManyUnacknowledged
from broker.errors import LinkClosed
from broker.language import Publication
from workflow_messages import ack_advertisement, control_subscription

__all__ = ["AgentService"]

log = logging.getLogger(__name__)

CONTROL = "\0control"  # the key of the agent's own AGENT_CTL subscription
BATCH = 32  # events handled (and fsync'd) together before the event loop gets a turn
FIRST = asyncio.FIRST_COMPLETED
PRUNE_EVERY = 60.0  # seconds between prunings of run logs
EARLY_LIMIT = 10_000  # deliveries held for subscriptions whose id is not known yet


class AgentService:
    """Runs ``agent`` against the broker at ``uri`` until :meth:`stop`."""

    def __init__(
        self,
        agent: Agent,
        uri: Brokers,
        state_dir: Path,
        workdir: Path,
        retention: Retention | None = None,
    ) -> None:
        self.agent, self.uri, self.state_dir, self.workdir = agent, uri, state_dir, workdir
        self.retention = retention or Retention()
        self.journal = Journal(state_dir)
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.client: Client | None = None
        self.issued: dict[str, tuple[str, str]] = {}  # key -> (broker id, command)
        self.keys: dict[str, str] = {}  # subscription id -> key
        # deliveries read before the subscription's id was known: its acknowledgement and its
        # first deliveries can come in one read, and the reader runs before the request returns
        self.early: dict[str, list[Delivery]] = {}
        self.outbox: list[Publication] = []  # publications made before the first connection
        self.lock = asyncio.Lock()  # requests and re-issuing must not interleave
        self.runs: set[asyncio.Task[None]] = set()
        self.stopping = asyncio.Event()
        self._reconciling: set[asyncio.Task[None]] = set()

    def stop(self) -> None:
        self.stopping.set()

    async def run(self) -> None:
        """Recover the journal, re-attach to the runs it had started, then serve until :meth:`stop`.

        The supervisors of runs outlive the agent (:mod:`agents.runner`): stopping leaves them
        running, and the next start re-attaches to them or publishes how they ended."""
        replayed = self.journal.recover(self.agent)
        log.info("agent %s recovered its journal (%d records after the snapshot)", self.agent.name, replayed)
        for run in list(self.agent.running.values()):
            self._supervise(run)
        await self._handle(Tick())
        connection = asyncio.create_task(self._keep_connected())
        stopping = asyncio.create_task(self.stopping.wait())
        pruning = asyncio.create_task(self._prune_regularly())
        try:
            while not self.stopping.is_set():
                wakeup = self.agent.next_wakeup()
                timeout = 1.0 if wakeup is None else max(0.0, min(1.0, wakeup - time.time()))
                getter = asyncio.create_task(self.events.get())
                done, _ = await asyncio.wait(
                    {getter, stopping, connection}, timeout=timeout, return_when="FIRST_COMPLETED"
                )
                if connection in done:  # the broker refused or ignored the agent's own requests:
                    getter.cancel()  # end with that error, rather than staying up and deaf
                    connection.result()
                    break
                if getter in done:
                    batch = [getter.result()]
                    while not self.events.empty() and len(batch) < BATCH:  # one fsync for them all
                        batch.append(self.events.get_nowait())
                    await self._handle(*batch)
                    await asyncio.sleep(0)  # a burst of envelopes must not starve the link's heartbeats
                else:
                    getter.cancel()
                    await self._handle(Tick())
        finally:
            stopping.cancel()
            connection.cancel()
            pruning.cancel()
            for task in self._reconciling:
                task.cancel()
            for task in self.runs:
                task.cancel()  # only the waiting: the supervisors go on, a restart re-attaches
            await asyncio.gather(connection, pruning, *self.runs, *self._reconciling, return_exceptions=True)
            if self.client is not None:
                await self.client.close()
            self.journal.close()

    async def _handle(self, *events: Event) -> None:
        """Feed events to the state machine, make them durable, then carry out their effects."""
        now = time.time()
        effects: list[Effect] = []
        for event in events:
            caused = self.agent.handle(event, now)
            if caused or not isinstance(event, Tick):
                self.journal.write(event, now)
            effects += caused
        self.journal.sync()
        if self.journal.due():
            self.journal.compact(self.agent.snapshot())
        for effect in effects:
            await self._apply(effect)

    async def _apply(self, effect: Effect) -> None:
        if isinstance(effect, Start):
            self._supervise(effect.run)
        elif isinstance(effect, Emit):
            self._publish(effect.publication)
        else:
            async with self.lock:
                if self.client is not None and self.client.connected:
                    await self._issue_or_withdraw(self.client, effect)

    def _supervise(self, run: Run) -> None:
        task = asyncio.create_task(self._outcome(run))
        self.runs.add(task)
        task.add_done_callback(self.runs.discard)

    async def _outcome(self, run: Run) -> None:
        """Start ``run`` or re-attach to it (:func:`supervise`), then hand its end to the loop.
        A run that cannot be supervised (no process or file left, a full disk) ends lost, not
        stuck: it would hold one of the agent's job slots for ever."""
        try:
            result = await supervise(run, self.state_dir, self.workdir)
        except (OSError, ValueError, KeyError) as error:  # no process or fd left, disk full, bad status
            log.error("%s: cannot supervise it: %s", run.label, error)
            result = None
        if result is None:
            log.error("%s: its supervisor died before recording how it ended", run.label)
            self.events.put_nowait(Lost(run))
            return
        log.info("%s: %s", run.label, result.detail)
        self.events.put_nowait(Finished(run, result))

    async def _prune_regularly(self) -> None:
        """Delete run logs past their retention, never those of a generation still in progress."""
        while True:
            busy = self.agent.in_progress()
            deleted = await asyncio.to_thread(prune, self.state_dir, self.retention, busy, time.time())
            if deleted:
                log.info("pruned the run logs of %d generations", deleted)
            await asyncio.sleep(PRUNE_EVERY)

    def _publish(self, publication: Publication) -> None:
        """Through the client, which keeps it until acknowledged (across reconnections); before
        the first connection, into the outbox."""
        client = self.client
        if client is None:
            self.outbox.append(publication)
            return
        try:
            client.publish_nowait(publication)
        except (LinkClosed, TooManyUnacknowledged) as error:
            log.error("publication lost: %s: %s", error, publication)

    async def _issue_or_withdraw(self, client: Client, effect: Request | Withdraw) -> None:
        try:
            if isinstance(effect, Request):
                await self._issue(client, effect.key, effect.registration)
            elif effect.key in self.issued:
                broker_id, command = self.issued.pop(effect.key)
                self.keys.pop(broker_id, None)
                self.early.pop(broker_id, None)
                await (client.unadvertise if command == "ADVERTISE" else client.unsubscribe)(broker_id)
        except LinkClosed:
            pass  # re-issued from the wanted set on reconnection
        except Exception as error:
            log.warning("broker refused %s: %s", effect.key.split(" ", 4)[:4], error)

    async def _issue(self, client: Client, key: str, registration: Registration) -> None:
        if registration.command == "ADVERTISE":
            assert registration.filter is not None
            broker_id = await client.advertise(registration.filter, name=_name(key))
        elif registration.command == "SUBSCRIBE":
            assert registration.filter is not None
            broker_id = (await client.subscribe(registration.filter, own_queue=False, name=_name(key))).id
        else:
            assert registration.composite is not None
            sub = await client.subscribe_composite(
                registration.composite, registration.clear, own_queue=False, name=_name(key)
            )
            broker_id = sub.id
        self.issued[key] = (broker_id, registration.command)
        self.keys[broker_id] = key
        for delivery in self.early.pop(broker_id, ()):
            self._deliver(key, delivery)

    # connection -----------------------------------------------------------------------------

    async def _keep_connected(self) -> None:
        """Connect (until a broker answers), make the agent's requests, then read. The client
        reconnects by itself and re-sends what it holds; what the state machine asked or
        withdrew while the link was down is reconciled at each reconnection."""
        client = await Client.connect(
            self.uri,
            f"{self.agent.name}-1",
            retry_on_failed_connect=True,
            backoff=DAEMON_BACKOFF,
            on_event=self._connection_event,
            outbox=self.state_dir / "outbox",  # statuses not yet acknowledged survive a restart
        )
        async with self.lock:
            await client.advertise(ack_advertisement(self.agent.name), name="acks")
            control = await client.subscribe(
                control_subscription(self.agent.name), own_queue=False, name="control"
            )
            self.keys[control.id] = CONTROL
            self.client = client
        log.info("agent %s connected to %s", self.agent.name, client.broker_id)
        await self._reconcile()
        client.resend_outbox()  # what the last run left unacknowledged, now that it is advertised
        outbox, self.outbox = self.outbox, []
        for publication in outbox:
            self._publish(publication)
        await self._read(client)

    def _connection_event(self, event: ConnectionEvent) -> None:
        if event.kind == "reconnected":
            task = asyncio.get_running_loop().create_task(self._reconcile())
            self._reconciling.add(task)  # a reference, so that it is not collected half-way
            task.add_done_callback(self._reconciling.discard)

    async def _reconcile(self) -> None:
        """Issue what the state machine wants and is not issued, withdraw what it no longer wants."""
        async with self.lock:
            client = self.client
            if client is None or not client.connected:
                return  # again at the next reconnection
            for key in [k for k in self.issued if k not in self.agent.wanted]:
                await self._issue_or_withdraw(client, Withdraw(key))
            for key, registration in list(self.agent.wanted.items()):
                if key not in self.issued:
                    await self._issue_or_withdraw(client, Request(key, registration))

    async def _read(self, client: Client) -> None:
        async for delivery in client:
            key = self.keys.get(delivery.subscription)
            if key is not None:
                self._deliver(key, delivery)
            elif sum(map(len, self.early.values())) < EARLY_LIMIT:
                self.early.setdefault(delivery.subscription, []).append(delivery)
            else:
                log.error("delivery for unknown subscription %s dropped", delivery.subscription)

    def _deliver(self, key: str, delivery: Delivery) -> None:
        if key == CONTROL:
            self.events.put_nowait(Incoming(delivery.publication))
        else:
            self.events.put_nowait(Delivered(key, delivery.publications or (delivery.publication,)))


def _name(key: str) -> str:
    """The ref a registration is requested under, the same in every run of the agent: a broker
    that kept the agent's session through a restart recognises the request it already holds."""
    return "k" + hashlib.sha256(key.encode()).hexdigest()[:24]
