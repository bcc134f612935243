"""The agent's adapter: broker connection, journal and job processes around :class:`Agent`.

One loop consumes events (deliveries, finished runs, timer ticks) one at a time: journal the event,
let the state machine decide, carry out its effects. It never waits for the broker: publications
are pipelined (the client keeps them until acknowledged), and each request or withdrawal the state
machine asks for runs as a task of its own, one at a time per registration key, so a slow broker
answer holds up that registration only, not deliveries or finished jobs.

Events wait in a bounded queue: when the loop falls behind, the reader stops taking deliveries
from the client, whose own queue then stops it reading its socket, and the broker slows the flow
(back-pressure, as in :mod:`broker.client.queues`); nothing is dropped.

The connection is kept by the client, which reconnects by itself and re-sends every live request
and unacknowledged publication; after each reconnection the agent issues what its state machine
came to want meanwhile, and withdraws what it no longer wants. A re-sent request the broker refuses
is reported by the client: one of the agent's own (its acknowledgements' advertisement, its control
subscription) ends the agent with that error, as at the start, rather than leaving it up and deaf;
a job's registration is requested again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from agents import pools, standby
from agents.durations import Durations
from agents.events import (
    Delivered,
    Effect,
    Emit,
    Event,
    Finished,
    HandedOver,
    Incoming,
    Lost,
    Register,
    Result,
    Run,
    Start,
    Stop,
    TakenOver,
    TimePassed,
    Withdraw,
)
from agents.journal import Journal
from agents.queries import LogRequest, answer_query
from agents.registering import CONTROL, OWN, QUERY, Registering
from agents.runner import Retention, SupervisorClient, log_tail, prune, stop, write_lease
from agents.state import Agent
from broker import failpoints
from broker.client import (
    DAEMON_BACKOFF,
    Brokers,
    Client,
    ConnectionEvent,
    Delivery,
    RefusedError,
    TooManyUnacknowledged,
)
from broker.client.queues import DeliveryQueue
from broker.clock import SYSTEM, Clock
from broker.durable.offload import Offload
from broker.errors import LinkClosed
from broker.language import Publication
from broker.messages import DEFAULT_QOS, Qos
from broker.throttle import LogThrottle
from broker.transport.handshake import HANDED_OVER, handed_over
from broker.transport.link import Link
from broker.transport.tls import client_id as client_id_of
from workflow_messages import JOBSTATUS, ack_advertisement, control_subscription
from workflow_messages.alerts import ALERT, alert_advertisement, job_alert
from workflow_messages.deadlines import alert_quality
from workflow_messages.jobstate import JOBSTATE, state_advertisement
from workflow_messages.operations import answer, answer_advertisement, query_subscription
from workflow_messages.pools import POOL
from workflow_messages.signature import Author
from workflow_messages.standby import key as standby_key

__all__ = ["AgentService"]

log = logging.getLogger(__name__)
T = TypeVar("T")

STOP_GRACE = 5.0  # seconds a cancelled run's command has between SIGTERM and SIGKILL
BATCH = 32  # events handled (and fsync'd) together before the event loop gets a turn
PRUNE_EVERY = 60.0  # seconds between prunings of run logs, at the most
EVENTS_LIMIT = 10_000  # events waiting for the loop; past it, the reader waits (back-pressure)
SYNC_LAG = 1.0  # seconds the records of runs' ends may wait for an fsync (``_ends_only``)


def client_name(agent: str) -> str:
    """The client id agent ``agent`` connects under, the same across its restarts (its broker
    resumes its session by it); with TLS the broker scopes it by the certificate's name."""
    return f"{agent}-1"


class AgentService:
    """Runs ``agent`` against the broker at ``uri`` until :meth:`stop`."""

    def __init__(
        self,
        agent: Agent,
        uri: Brokers,
        state_dir: Path,
        workdir: Path,
        retention: Retention | None = None,
        author: Author | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.agent, self.uri, self.state_dir, self.workdir = agent, uri, state_dir, workdir
        self.clock = clock
        self.author = author  # with TLS, signs the job statuses: agents act on no one else's
        self.retention = retention or Retention()
        self.journal = Journal(state_dir)
        self.supervisor = SupervisorClient(state_dir)
        # only the reader waits for room: finished runs (at most max_jobs) are put at once,
        # however full the queue
        self.events: DeliveryQueue[Event] = DeliveryQueue(EVENTS_LIMIT, Counter(), lambda _: None)
        self.client: Client | None = None
        self.registering = Registering(agent)
        # the delivery behind each queued event: done (its broker may forget it) once journaled
        self.behind: dict[int, Delivery] = {}
        self.outbox: list[Publication] = []  # publications made before the first connection
        # whether the broker took the advertisement of the jobs' states (JOBSTATE): one whose ACL
        # predates them refuses it, and the agent then runs on without publishing them
        self.states_advertised = True
        self.runs: set[asyncio.Task[None]] = set()
        self.leases: dict[Run, float] = {}  # the lease last written for each run in a pool
        self.unsynced_since: float | None = None  # when the oldest record not fsync'd was handled
        self.offload = Offload()  # where the journal's fsyncs run: on the loop while the disk is fast
        # a busy agent prunes sooner than every PRUNE_EVERY: after a tenth of --keep-runs more
        # runs (at 150 runs a second a minute's folders were 9,000, 90 times --keep-runs 100)
        self.prune_after = max(10, self.retention.runs // 10)
        self.started_since_prune = 0
        self.prune_due = asyncio.Event()
        self.stopping = asyncio.Event()
        self.errors: Counter[str] = Counter()  # unexpected exceptions in handling one message, by where
        self.durations = Durations()  # how long runs took and how they ended (wfm agent --metrics)
        self._errors_logged = LogThrottle(burst=1)
        # standby agents (agents.standby): as a primary, the declaration its broker confirmed on
        # which link (its runs of jobs with standbys run only while it hears from the broker on
        # that session), when it last heard, and the runs waiting for that; as a standby, when
        # it last asked for each key
        self.declared: dict[str, tuple[tuple[str, ...], float]] | None = None
        self.confirmed: Link | None = None
        self.heard: float | None = None
        self.deferred: list[Run] = []
        self.asked: dict[str, float] = {}
        self.declaring: asyncio.Task[None] | None = None
        self.any_client: Client | None = None  # the client, from before its first link

    def stop(self) -> None:
        self.stopping.set()

    async def run(self) -> None:
        """Recover the journal, re-attach to the runs it had started (stopping again those of
        cancelled generations), then serve until :meth:`stop`.

        The supervisor of its runs outlives the agent (:mod:`agents.runner`): stopping closes the
        connection to it and leaves the commands running; the next start re-attaches to them or
        publishes how they ended."""
        replayed = self.journal.recover(self.agent)
        log.info("agent %s recovered its journal (%d records after the snapshot)", self.agent.name, replayed)
        failed = self.registering.failed = asyncio.get_running_loop().create_future()
        self._act(self.agent.resume())
        await self._handle(TimePassed())
        connection = asyncio.create_task(self._keep_connected())
        stopping = asyncio.create_task(self.stopping.wait())
        pruning = asyncio.create_task(self._prune_regularly())
        try:
            while not self.stopping.is_set():
                wakeup = self.agent.next_wakeup()
                timeout = 1.0 if wakeup is None else max(0.0, min(1.0, wakeup - self.clock.time()))
                getter = asyncio.create_task(self._batch())
                waits: set[asyncio.Future[Any]] = {getter, stopping, connection, failed}
                done, _ = await asyncio.wait(waits, timeout=timeout, return_when="FIRST_COMPLETED")
                if connection in done or failed in done:  # the broker refused or ignored the
                    getter.cancel()  # agent's own requests: end with that error, not up and deaf
                    (failed if failed.done() else connection).result()
                    break
                if getter in done:
                    await self._handle(*getter.result())
                    await asyncio.sleep(0)  # a burst of envelopes must not starve the link's heartbeats
                else:
                    getter.cancel()
                    await self._handle(TimePassed())
                self._standby()
        finally:
            stopping.cancel()
            connection.cancel()
            pruning.cancel()
            for task in self.runs:
                task.cancel()  # only the waiting; the supervisor goes on, a restart re-attaches
            requests = self.registering.cancel()
            await asyncio.gather(connection, pruning, *self.runs, *requests, return_exceptions=True)
            await self.supervisor.close()
            if self.client is not None:
                await self.client.close(bye=False)  # it comes back: its broker keeps its place
            self.journal.close()

    async def _batch(self) -> list[Event]:
        """The next events, as many as are there up to BATCH: one fsync for them all."""
        batch: list[Event] = []
        while not batch or (len(batch) < BATCH and not self.events.queue.empty()):
            event = await self.events.get(None)  # waits for the first only
            assert event is not None  # nothing here puts the end marker
            batch.append(event)
        return batch

    async def _handle(self, *events: Event) -> None:
        """Feed events to the state machine, then: what they publish into the client's outbox (on
        disk), then the events into the journal, then the runs they start. A crash between the
        outbox and the journal sends a status twice (the event comes again: its delivery is done
        only once journaled), never loses one."""
        now = self.clock.time()
        effects: list[Effect] = []
        for event in events:
            try:
                caused = self.agent.handle(event, now)
            except Exception as error:  # a bug: the next events must still be handled
                self._unexpected("handling an event", error)
                delivery = self.behind.pop(id(event), None)  # not journaled: a replay would
                if delivery is not None and self.client is not None:  # raise it again, and so
                    self.client.done(delivery)  # would the broker's delivering it again
                continue
            if caused or not isinstance(event, TimePassed):
                self.journal.write(event, now)
            effects += caused
        requests = [effect.key for effect in effects if isinstance(effect, Register | Withdraw)]
        for key in requests:
            self.registering.register(key)
        if requests:  # one turn of the loop puts them on the link before what is published next
            await asyncio.sleep(0)  # (an envelope's acknowledgement): the broker has them first
        published = False
        for effect in effects:
            if isinstance(effect, Emit):
                self._publish(self._signed(effect.publication))
                published = True
        if self.client is not None:
            await self.client.stored()
        self.journal.flush()
        if _ends_only(events, effects) and now - (self.unsynced_since or now) < SYNC_LAG:
            self.unsynced_since = self.unsynced_since or now
        else:
            if published:  # a turn first: the statuses, in the outbox, need not wait for it
                await asyncio.sleep(0)
            await self.offload.run(self.journal.fsync)
            self.unsynced_since = None
        if failpoints.ARMED:  # agent.journaled.DEPLOY: killed with a DEPLOY part journaled, not done
            for event in events:
                if isinstance(event, Incoming):
                    failpoints.reach(f"agent.journaled.{event.publication.get('command')}")
        for event in events:  # in the journal now: a restart replays them, the broker need not
            delivery = self.behind.pop(id(event), None)
            if delivery is not None and self.client is not None:
                self.client.done(delivery)
        if self.journal.due():
            self.journal.compact(self.agent.snapshot())
        if any(type(event) is HandedOver for event in events):  # before its next hello
            self._discard_handed()
        if self.any_client is not None:  # what its hello says it knows was handed over
            self.any_client.connection.noted = standby.noted(self.agent)
        self._act(effects)

    def _act(self, effects: list[Effect]) -> None:
        """Renew the leases of runs in pools and of jobs with standbys, then start (or re-attach
        to) and stop runs. A run of a job with standbys starts only while this agent hears from
        its broker on a session the broker confirmed (:meth:`_window`); else it waits here."""
        windows = pools.windows(self.agent)
        for run in self.agent.running.values():
            if (until := self._window(run)) is not None:
                windows[run] = until
        for run, until in windows.items():
            if self.leases.get(run) != until:
                write_lease(self.state_dir, run, until)
        self.leases = windows
        for effect in effects:
            if isinstance(effect, Start):
                if self._fenced(effect.run):
                    self.deferred.append(effect.run)
                else:
                    self._supervise(effect.run)
            elif not isinstance(effect, Stop):
                continue
            elif effect.run in self.deferred:  # never started: nothing to stop
                self.deferred.remove(effect.run)
                if not effect.kill:  # cancelled: it ends as a cancelled run does
                    now = self.clock.time()
                    self.events.put(Finished(effect.run, Result(False, "cancelled: not started", now, 0.0)))
            elif effect.kill:  # its pool slot, or its job was handed over: not a second longer
                stop(effect.run, self.state_dir, signal.SIGKILL)
            else:
                self._stop(effect.run)
        for run in [r for r in self.deferred if not self._fenced(r)]:
            self.deferred.remove(run)
            write_lease(self.state_dir, run, self._window(run) or 0.0)
            self._supervise(run)

    # standby agents ---------------------------------------------------------------------------

    def _takeover(self, run: Run) -> float | None:
        """The takeover of ``run``'s job if it has standbys and is this agent's own, else None."""
        deployment = self.agent.deployments.get((run.workflow, run.version))
        info = None if deployment is None else deployment.jobs.get(run.job)
        if info is None or not info.standby or info.primary is not None:
            return None
        return info.takeover

    def _window(self, run: Run) -> float | None:
        """Until when ``run`` (of a job with standbys) may run: half its takeover after this
        agent last heard from its broker on a confirmed session. The broker grants a standby
        the job only after the whole takeover of its own clock from when the link went, which is
        after that: so the run stops first while the two clocks' rates differ by less than a
        third (as for pools). None for other runs."""
        takeover = self._takeover(run)
        if takeover is None:
            return None
        self._hear()
        return None if self.heard is None else self.heard + takeover / 2

    def _fenced(self, run: Run) -> bool:
        window = self._window(run)
        return (window is not None and self.clock.time() >= window - 0.05) or (
            window is None and self._takeover(run) is not None
        )

    def _hear(self) -> None:
        """When this agent last heard from its broker on the session it declared on."""
        client = self.client
        link = None if client is None else client.link
        if link is None or link is not self.confirmed or link.closed is not None:
            return
        heard = self.clock.time() - (self.clock.monotonic() - link.last_received)
        self.heard = heard if self.heard is None else max(self.heard, heard)

    def _identity(self, agent: str) -> str:
        """How the broker knows agent ``agent``'s client: its certificate's name with TLS, else
        its client id (``{agent}-1``, as every agent connects)."""
        return agent if getattr(self.uri, "tls", None) is not None else client_name(agent)

    def _client_id(self, agent: str) -> str:
        """The client id agent ``agent`` connects under (the broker's name for its session)."""
        own = client_name(agent)
        return client_id_of(agent, own) if getattr(self.uri, "tls", None) is not None else own

    def _standby(self) -> None:
        """Declare what the broker is to let this agent's standbys take over (when it changed),
        and ask for the jobs this agent holds firings of for longer than their takeover."""
        client = self.client
        if client is None or not client.connected:
            return
        declared = {
            key: (tuple(self._identity(s) for s in standbys), after)
            for key, (standbys, after) in standby.declarations(self.agent).items()
        }
        if not declared and self.declared is None:
            self.declared = declared  # nothing to declare, and nothing was: no request
        if declared != self.declared and (self.declaring is None or self.declaring.done()):
            self.declaring = asyncio.create_task(self._declare(client, declared))
        now = self.clock.time()
        for key, (primary, after) in standby.wanted(self.agent, now).items():
            if now - self.asked.get(key, 0.0) >= max(0.5, after / 8):
                self.asked[key] = now
                task = asyncio.create_task(self._ask(client, primary, key))
                self.runs.add(task)
                task.add_done_callback(self.runs.discard)

    async def _declare(self, client: Client, declared: dict[str, tuple[tuple[str, ...], float]]) -> None:
        link = client.link
        try:
            await client.declare_standbys(declared)
        except (RefusedError, LinkClosed, TimeoutError, OSError) as error:
            log.warning(
                "agent %s: its broker did not take its standby declaration: %s", self.agent.name, error
            )
            return
        self.declared = declared
        if client.link is link:  # the declaration and this link: a session the broker confirmed
            self.confirmed = link
            self._hear()
            log.info("agent %s declared %d jobs its standbys may take over", self.agent.name, len(declared))

    async def _ask(self, client: Client, primary: str, key: str) -> None:
        """Ask the broker for ``key``; once granted, hand the grant in behind every delivery read
        before it: the primary's final statuses that reached the broker came before the answer."""
        try:
            await client.take_over(self._client_id(primary), key)
        except (RefusedError, LinkClosed, TimeoutError, OSError) as error:
            log.info("agent %s: takeover of %s from %s not granted: %s", self.agent.name, key, primary, error)
            return
        while client.stats()["queued"]:
            await asyncio.sleep(0.005)
        self.events.put(TakenOver(key, primary, self.clock.time()))

    def _handed_over(self, reason: str) -> None:
        """The broker refused our hello: jobs of ours were taken over. The state machine hears of
        it (:meth:`_handle` then takes their statuses out of the client's outbox); our next
        hello says we know (``noted``), so nothing of them is ever sent on a new session."""
        grants = handed_over(reason[reason.find(HANDED_OVER) :])
        known = standby.noted(self.agent).split(",")
        if not grants or all(k in known for k in grants):
            return
        log.warning("agent %s: its broker says %s", self.agent.name, reason)
        self.events.put(HandedOver(tuple((k, who, at) for k, (who, at) in sorted(grants.items()))))

    def _discard_handed(self) -> None:
        """Take every status (and alert) of a job handed over out of what the client would send:
        the state machine publishes none of them any more, and the standby runs those runs."""
        keys = {standby_key(workflow, job) for workflow, job in standby.handed_jobs(self.agent)}

        def unwanted(publication: Publication) -> bool:
            if publication.cls not in (JOBSTATUS, ALERT):
                return False
            return standby_key(str(publication.get("applname")), str(publication.get("jobname"))) in keys

        dropped = [] if self.any_client is None else self.any_client.discard(unwanted)
        dropped += [p for p in self.outbox if unwanted(p)]
        self.outbox = [p for p in self.outbox if not unwanted(p)]
        gone = [(str(p.get("applname")), str(p.get("GID")), str(p.get("jobname"))) for p in dropped]
        standby.forget(
            self.agent, [item for item, p in zip(gone, dropped, strict=True) if p.cls == JOBSTATUS]
        )
        if dropped:
            log.warning(
                "agent %s: %d publications of jobs handed over taken out of its outbox",
                self.agent.name,
                len(dropped),
            )

    def _stop(self, run: Run) -> None:
        """SIGTERM to the run's command, SIGKILL after STOP_GRACE if it still runs; its supervisor
        then records how it ended, as after a timeout."""
        if not stop(run, self.state_dir, signal.SIGTERM):
            log.warning("%s: cancelled, but its command is not running (yet)", run.label)
        asyncio.get_running_loop().call_later(STOP_GRACE, self._kill, run)

    def _kill(self, run: Run) -> None:
        if self.agent.running.get((run.workflow, run.gid, run.job)) == run:
            stop(run, self.state_dir, signal.SIGKILL)

    def _supervise(self, run: Run) -> None:
        self._count_run()
        task = asyncio.create_task(self._outcome(run))
        self.runs.add(task)
        task.add_done_callback(self.runs.discard)

    async def _outcome(self, run: Run) -> None:
        """Start ``run`` or re-attach to it (:meth:`SupervisorClient.supervise`), then hand its end
        to the loop. A run that cannot be supervised (no supervisor, no file left, a full disk)
        ends lost, not stuck: it would hold one of the agent's job slots for ever."""
        try:
            result = await self.supervisor.supervise(run, self.workdir)
        except (OSError, ValueError, KeyError) as error:  # no supervisor, disk full, bad status
            log.error("%s: cannot supervise it: %s", run.label, error)
            result = None
        if result is None:
            log.error("%s: its supervisor died before recording how it ended", run.label)
            self.durations.lost()
            self.events.put(Lost(run))
            return
        log.info("%s: %s", run.label, result.detail)
        self.durations.observe(result.duration, result.ok)
        self.events.put(Finished(run, result))

    def _count_run(self) -> None:
        self.started_since_prune += 1
        if self.started_since_prune >= self.prune_after:
            self.prune_due.set()

    async def _prune_regularly(self) -> None:
        """Delete run logs past their retention, never those of a generation still in progress."""
        while True:
            self.started_since_prune = 0
            self.prune_due.clear()
            busy = self.agent.in_progress()
            deleted = await asyncio.to_thread(prune, self.state_dir, self.retention, busy, self.clock.time())
            if deleted:
                log.debug("pruned the run logs of %d generations", deleted)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PRUNE_EVERY):
                    await self.prune_due.wait()

    def _signed(self, publication: Publication) -> Publication:
        if self.author is None or publication.cls not in (JOBSTATUS, JOBSTATE, POOL):
            return publication
        return self.author.sign_publication(publication)

    def _publish(self, publication: Publication) -> None:
        """Through the client, which keeps it until acknowledged (across reconnections), in its
        outbox on disk; before the first connection, into the outbox here. A job's FAILURE
        goes with its alert (``workflow_messages.alerts``), in the same outbox, right after it."""
        client = self.client
        if client is None:
            self.outbox.append(publication)
            return
        if publication.cls == JOBSTATE and not self.states_advertised:
            return
        alert = job_alert(publication)
        try:
            client.publish_nowait(publication, qos=self._quality(publication))
            if alert is not None:
                client.publish_nowait(alert[0], qos=alert[1])
        except (LinkClosed, TooManyUnacknowledged) as error:
            log.error("publication lost: %s: %s", error, publication)

    def _quality(self, publication: Publication) -> Qos:
        """A job's status goes with the priority its definition gives the job; a deadline's alert
        with its own (``workflow_messages.deadlines``)."""
        if publication.cls != JOBSTATUS:
            return alert_quality(publication) or DEFAULT_QOS
        key = (str(publication.get("applname")), str(publication.get("version")))
        deployment = self.agent.deployments.get(key)
        info = deployment.jobs.get(str(publication.get("jobname"))) if deployment is not None else None
        if info is None or info.priority == DEFAULT_QOS.priority:
            return DEFAULT_QOS
        return Qos(priority=info.priority)

    # connection -----------------------------------------------------------------------------

    async def _keep_connected(self) -> None:
        """Connect (until a broker answers), make the agent's requests, then read. The client
        reconnects by itself and re-sends what it holds; what the state machine asked or
        withdrew while the link was down is reconciled at each reconnection."""
        client = await Client.connect(
            self.uri,
            client_name(self.agent.name),
            retry_on_failed_connect=True,
            created=self._created,
            backoff=DAEMON_BACKOFF,
            on_event=self._connection_event,
            outbox=self.state_dir / "outbox",  # statuses not yet acknowledged survive a restart
            manual_done=True,  # a delivery is done once its event is journaled, not when read
        )
        await self._own(client, "acks", client.advertise(ack_advertisement(self.agent.name), name="acks"))
        control = control_subscription(self.agent.name)
        await self._own(client, "control", client.subscribe(control, own_queue=False, name="control"))
        answers = answer_advertisement(self.agent.name)
        await self._own(client, "answers", client.advertise(answers, name="answers"))
        alerts = alert_advertisement(self.agent.name)
        await self._own(client, "alerts", client.advertise(alerts, name="alerts"))
        await self._advertise_states(client)
        queries = query_subscription()
        await self._own(client, "queries", client.subscribe(queries, own_queue=False, name="queries"))
        self.client = self.registering.client = client
        log.info("agent %s connected to %s", self.agent.name, client.broker_id)
        self.registering.reconcile()
        await asyncio.sleep(0)  # the requests go on the link first: publications need their advertisements
        client.resend_outbox()  # what the last run left unacknowledged, now that it is advertised
        outbox, self.outbox = self.outbox, []
        for publication in outbox:
            self._publish(publication)
        await self._read(client)

    def _created(self, client: Client) -> None:
        self.any_client = client
        client.connection.noted = standby.noted(self.agent)

    async def _advertise_states(self, client: Client) -> None:
        """The advertisement of the jobs' states, which only monitors read: refused (an ACL older
        than them), the agent goes on without publishing them, as an older agent would."""
        try:
            await client.advertise(state_advertisement(self.agent.name), name="states")
            self.states_advertised = True
        except RefusedError as error:
            self.states_advertised = False
            log.warning(
                "broker %s refused agent %s's %s (%s): the states of its jobs (held, waiting, awaiting"
                " approval) are not published; let agents publish JOBSTATE as themselves in its ACL",
                client.broker_id,
                self.agent.name,
                OWN["states"],
                error,
            )

    async def _own(self, client: Client, name: str, request: Awaitable[T]) -> T:
        """One of the agent's own requests: a refusal says which, and whose."""
        try:
            return await request
        except RefusedError as error:
            raise RefusedError(
                f"broker {client.broker_id} refused agent {self.agent.name}'s {OWN[name]}: {error}"
            ) from None

    def _connection_event(self, event: ConnectionEvent) -> None:
        if event.kind == "reconnected":
            self.confirmed, self.declared = None, None  # declared again on this session
            self.registering.reconcile()
        elif event.kind == "handed over":
            self._handed_over(event.reason)
        elif event.kind == "refused":
            self.registering.unrestored(event.request, event.broker, event.reason)

    async def _read(self, client: Client) -> None:
        async for delivery in client:
            key = self.registering.key_of(client, delivery.subscription)
            if key is not None:
                try:
                    self._deliver(key, delivery)
                except Exception as error:  # a bug, or a message nobody foresaw: the reader
                    self._unexpected("reading a delivery", error)  # must live on, or the agent
                    client.done(delivery)  # is deaf (anyone may publish a query)
                await self.events.space.wait()  # back-pressure: read on once the loop made room
            else:  # withdrawn: its last deliveries may still come
                log.info(
                    "delivery for subscription %s, which the agent no longer holds, dropped",
                    delivery.subscription,
                )
                client.done(delivery)

    def _deliver(self, key: str, delivery: Delivery) -> None:
        if key == QUERY:  # read-only: answered at once, not journaled
            self._answer(delivery.publication)
            if self.client is not None:
                self.client.done(delivery)
            return
        event: Event
        if key == CONTROL:
            event = Incoming(delivery.publication)
        else:
            event = Delivered(key, delivery.publications or (delivery.publication,))
        self.behind[id(event)] = delivery
        self.events.put(event)

    def _answer(self, query: Publication) -> None:
        reply = answer_query(self.agent, query)
        if isinstance(reply, LogRequest):
            wanted = reply
            try:
                tail = log_tail(self.state_dir, wanted.workflow, wanted.gid, wanted.job, wanted.attempt)
                reply = answer(self.agent.name, wanted.request, "OK", tail)
            except (ValueError, OSError) as error:
                reply = answer(self.agent.name, wanted.request, "ERROR", {"error": str(error)})
        if reply is None or self.client is None:
            return
        try:  # not through the outbox: an answer lost in a restart is asked again
            self.client.publish_nowait(reply, durable=False)
        except (LinkClosed, TooManyUnacknowledged) as error:
            log.error("answer to request %s lost (its asker asks again): %s", reply["request"], error)

    def _unexpected(self, where: str, error: Exception) -> None:
        """An exception nothing expected in handling one message: counted, logged with its
        traceback once a minute per ``where`` (whoever can send the message could otherwise fill
        the log), and the agent goes on with the next message."""
        self.errors[where] += 1
        unlogged = self._errors_logged.admit(where, self.clock.time())
        if unlogged is not None:
            log.error(
                "agent %s: unexpected error %s (%d so far%s), going on",
                self.agent.name,
                where,
                self.errors[where],
                f", {unlogged} not logged since the last" if unlogged else "",
                exc_info=error,
            )


def _ends_only(events: tuple[Event, ...], effects: list[Effect]) -> bool:
    """Whether the events are runs' ends that only publish, whose records need no fsync of their
    own: the next batch's covers them (a delivery's, the tick's of an idle second, or the first
    after SYNC_LAG, which is synced whatever it holds). Flushed, they survive the agent's death;
    lost in a crash of the machine, they cost nothing but a status published twice: the run is
    still running in the journal, and its supervisor, whose runs file holds the end durably,
    answers "ended" again after the restart (as after a crash between the outbox and the
    journal). Runs started (a retry) or stopped, and deliveries (done once journaled), are
    synced first: the promises of those records are the journal's own."""
    return all(type(event) is Finished for event in events) and all(
        type(effect) is Emit for effect in effects
    )
