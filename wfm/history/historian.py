"""The historian: lands every publication of the kept classes and answers historic queries.

:class:`RecorderService` is a thin asyncio adapter around :class:`Recorder` (landing, pure but
for the disk) and ``HistoryStore`` (Spark). One loop owns the landing log; Spark work (compaction,
queries) runs in daemon threads so landing never waits for it, and neither does a SIGTERM. A store
without a table needs no Spark (queries read the landing log in Python), so the SparkSession is
made at its first compaction; on a store with a table it is started at once, in the background.

The client reconnects by itself: after a broker restart or a lost link it re-sends the
historian's subscriptions and advertisement, and the answers not yet acknowledged.
A query publication is answered only after everything landed before it is flushed, so an asker
sees every publication the historian received before its question. While it answers, it says so:
an accepted marker when the query arrives (and for each repeat of it), then one every ``heartbeat``
seconds until the final marker, so an asker waits for a slow historian and gives up on a dead one.
Repeats of a query already answered are ignored.

With TLS a query is answered only if its asker signed it and may subscribe to its filter under the
brokers' access rules (``policy``), and the final marker of each answer is signed by the historian
(see :mod:`wfm.history.protocol`): neither a client nor a broker can read through the historian
what the client could not subscribe to, nor make an asker take a forged answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from agents.trust import Refusal, Trust, identity_author, load_ca, signed_by
from broker.client import (
    DAEMON_BACKOFF,
    Brokers,
    Client,
    Delivery,
    RefusedError,
    TooManyUnacknowledged,
    brokers,
)
from broker.clock import SYSTEM, Clock
from broker.durable.log import private_directory
from broker.errors import LinkClosed
from broker.language import Filter, Publication
from broker.routing.acl import AccessPolicy
from broker.throttle import LogThrottle
from broker.transport.revocation import Revocations
from wfm.history.connect import master_for
from wfm.history.landing import Landing
from wfm.history.protocol import (
    HEARTBEAT,
    Query,
    accepted_publication,
    attributed,
    final_publication,
    parse_query,
    query_subscription,
    result_advertisement,
    result_digest,
    result_publication,
)
from wfm.history.recorder import Recent, Recorder
from wfm.history.spark import first_line, resolve_master, spark_session
from wfm.history.store import HistoryStore
from wfm.security.acl import load_policy
from workflow_messages import JOBSTATUS, TRIGGER

__all__ = ["DEFAULT_CLASSES", "RecorderService"]

log = logging.getLogger(__name__)

# ALERT: failures and missed deadlines; JOBSTATE: jobs held, waiting, awaiting approval or queued
DEFAULT_CLASSES = ("Trigger", "JOBSTATUS", "AGENT_CTL", "ALERT", "JOBSTATE")
ANSWERED_LIMIT = 10_000  # ids of answered queries whose repeats (an asker asks while it listens) are ignored

T = TypeVar("T")


def in_daemon_thread(work: Callable[[], T], name: str) -> asyncio.Future[T]:
    """``work()`` in a new daemon thread, as a future of the running loop.

    Not ``asyncio.to_thread``: closing an event loop joins its executor's threads, so a stopped
    historian stayed alive until a long Spark query or compaction ended. Both may be abandoned: a
    compaction is idempotent and a query's asker notices the heartbeats stop."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        outcome: tuple[Callable[[Any], None], Any]
        try:
            outcome = (future.set_result, work())
        except BaseException as error:  # whatever it is, the waiter hears of it
            outcome = (future.set_exception, error)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, future, *outcome)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _settle(future: asyncio.Future[Any], setter: Callable[[Any], None], value: object) -> None:
    if not future.done():  # a cancelled waiter leaves it cancelled
        setter(value)


class RecorderService:
    """Runs until :meth:`stop`; the landing log is flushed before :meth:`run` returns."""

    def __init__(
        self,
        uri: Brokers,
        store: Path,
        keep: Sequence[str] = DEFAULT_CLASSES,
        spark_master: str | None = None,
        compact_every: float = 300.0,
        name: str = "historian",
        heartbeat: float = HEARTBEAT,
        policy: AccessPolicy | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.clock = clock  # what the landing log, trust checks and throttles read
        self.uri, self.path, self.keep = uri, store, tuple(dict.fromkeys(keep))
        self.spark_master = spark_master
        self.compact_every = compact_every
        self.name = name
        self.heartbeat = heartbeat
        self.identity = f"{name}@{socket.gethostname()}:{os.getpid()}"
        # every envelope lands here, commands included: the store is its user's only, Spark's
        # files (their modes are Hadoop's) and the landing log alike
        self.landing = Landing(private_directory(store) / "landing")
        self.recorder = Recorder(self.landing)
        self.client: Client | None = None
        self.queries: set[str] = set()  # ids of the current connection's HISTORY_QUERY subscriptions
        self.stopping = asyncio.Event()
        self._store: HistoryStore | None = None
        self._store_lock = threading.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        # the queries being answered, and answered, by asker and id: one asker cannot make another's
        # question look like a repeat by asking first under its id
        self._answering: set[str] = set()
        self._answered = Recent(ANSWERED_LIMIT)
        tls = brokers(uri).tls
        self.ca = None if tls is None else load_ca(tls.directory)  # whose signed queries it answers
        self.revocations = None if tls is None else Revocations(tls.directory, clock=clock)
        self.trust = Trust(ca=self.ca, revocations=self.revocations)  # whose Triggers and statuses it keeps
        self.refused: Counter[str] = Counter()  # publications not kept, by kind of refusal
        self.compactions: Counter[str] = Counter()  # by outcome: "done", "failed" (wfm historian --metrics)
        self._refusals = LogThrottle(burst=1)
        self.policy = policy or load_policy()
        self.author = (
            None if tls is None else identity_author(tls.directory, tls.name)
        )  # signs each answer's final marker

    def stop(self) -> None:
        self.stopping.set()

    def store(self) -> HistoryStore:
        """The store (from any thread); it makes the process's SparkSession when it first needs it."""
        with self._store_lock:
            if self._store is None:
                self._store = HistoryStore(
                    self.path, lambda: spark_session(master_for(self.path, self.spark_master))
                )
            return self._store

    async def run(self) -> None:
        remote = resolve_master(self.spark_master).startswith("sc://")  # opened in milliseconds when needed
        if self.store().has_table() and not remote:
            in_daemon_thread(self._start_spark, "spark start")
        loops = [self._keep_connected(), self._flush_timer()]
        if self.compact_every > 0:
            loops.append(self._compact_timer())
        tasks = [asyncio.create_task(loop) for loop in loops]
        stopping = asyncio.create_task(self.stopping.wait())
        try:
            # a loop that ends by an error (the broker refused the historian's subscriptions) ends
            # the historian with that error, rather than leaving it up and deaf
            done, _ = await asyncio.wait([stopping, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in done - {stopping}:
                task.result()
        finally:
            stopping.cancel()
            for task in (*tasks, *self._tasks):  # queries too: their threads are left to the exit
                task.cancel()
            await asyncio.gather(*tasks, *self._tasks, return_exceptions=True)
            self.landing.close()
            if self.client is not None:
                await self.client.close()
            log.info("historian stopped; %d publications landed", self.recorder.landed)

    def _start_spark(self) -> None:
        """On a store with a table, Spark starts with the historian, in the background: else the
        first query after a restart waits seconds for it, and the next compaction starts it anyway."""
        try:
            _ = self.store().spark  # made on first access
        except Exception as error:  # the query or compaction that needs it reports it again
            log.warning("could not start Spark: %s", first_line(error))

    # landing --------------------------------------------------------------------------------

    def _land(self, delivery: Delivery) -> None:
        forged = self._forged(delivery.publication)
        if forged is not None:
            self.refused[forged.kind] += 1
            unlogged = self._refusals.admit(f"{forged.kind} {forged.who}", self.clock.monotonic())
            if unlogged is not None:
                log.warning(
                    "not kept: a %s from %s: %s (%d %s refusals%s)",
                    delivery.publication.cls,
                    forged.who,
                    forged.reason,
                    self.refused[forged.kind],
                    forged.kind,
                    f", {unlogged} not logged since the last" if unlogged else "",
                )
            return
        self.recorder.record(delivery.publication, delivery.time, delivery.id)
        self.landing.maybe_flush(self.clock.time())

    def _forged(self, publication: Publication) -> Refusal | None:
        """With TLS, a Trigger or a job status not signed by whom agents would take it from: not
        kept, so that history (and the answers the historian signs) holds no forgery."""
        if self.ca is None:
            return None  # without TLS statuses are not signed
        try:
            if publication.cls == TRIGGER:
                self.trust.admit_trigger(publication, self.clock.time(), math.inf)
            elif publication.cls == JOBSTATUS:
                self.trust.admit_status(publication, self.clock.time(), None)
        except Refusal as refusal:
            return refusal
        return None

    async def _flush_timer(self) -> None:
        """A quiet stream still gets its last batch on disk within ``batch_seconds``."""
        while True:
            await asyncio.sleep(self.landing.batch_seconds)
            self.landing.maybe_flush(self.clock.time())

    async def _compact_timer(self) -> None:
        while True:
            await asyncio.sleep(self.compact_every)
            self.landing.close()  # seal the current segment so this compaction takes it
            try:
                moved = await in_daemon_thread(lambda: self.store().compact(), "compaction")
                self.compactions["done"] += 1
                log.info("compacted %d segments", moved)
            except Exception as error:  # Spark's errors; landing goes on, the next run retries
                self.compactions["failed"] += 1
                log.warning("compaction failed: %s", first_line(error))

    # queries --------------------------------------------------------------------------------

    def _answer(self, delivery: Delivery) -> None:
        try:
            query_id, query = parse_query(delivery.publication)
        except ValueError as error:
            log.warning("ignoring a query without a valid id: %s", error)
            return
        if isinstance(query, str):
            self._send(final_publication(query_id, 0, query), "")
            return
        refusal = self._refusal(delivery.publication, query)
        if refusal is not None:
            log.warning("refused history query %s: %s", query_id, refusal)
            self._send(final_publication(query_id, 0, refusal), query.asker)
            return
        asked = f"{query.asker} {query_id}"
        if asked in self._answering:  # a repeat: the asker hears we are still at it
            self._send(accepted_publication(query_id), query.asker)
            return
        if asked in self._answered:  # a repeat: the asker has our answer
            return
        self.landing.flush()  # what landed before the question is part of the answer
        self._answering.add(asked)
        task = asyncio.create_task(self._run_query(query))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: self._done(asked))

    def _refusal(self, publication: Publication, query: Query) -> str | None:
        """Why the asker may not have this answered, or None: with TLS, the query must be signed
        by a certificate of the CA naming the asker, who may subscribe to its filter."""
        if self.ca is None:
            return None  # a developer's plain set-up: the brokers check nobody either
        try:
            asker = signed_by(publication, self.ca, self.clock.time(), None, self.revocations)
        except Refusal as refusal:
            return f"access denied: {refusal.reason}"
        if asker.name != query.asker:
            return f"access denied: {asker} signed a query of {query.asker or 'nobody'}"
        reason = self.policy.may_subscribe(asker.name, asker.role, query.filter)
        if reason is not None:
            return f"access denied: {asker} may not read {query.filter}: {reason}"
        return None

    def _done(self, asked: str) -> None:
        self._answering.discard(asked)
        self._answered.add(asked)

    async def _run_query(self, query: Query) -> None:
        loop = asyncio.get_running_loop()

        def work() -> tuple[int, str]:
            sent: list[tuple[int, str, float, Publication]] = []
            for stored in self.store().query(query.filter, query.since, query.until):
                sent.append((len(sent) + 1, stored.id, stored.time, stored.publication))
                result = result_publication(query.id, *sent[-1])
                loop.call_soon_threadsafe(self._send, result, query.asker)
            return len(sent), result_digest(sent)

        running = in_daemon_thread(work, f"query {query.id}")
        while not running.done():  # accepted at once, then a heartbeat until the answer is complete
            self._send(accepted_publication(query.id), query.asker)
            await asyncio.wait({running}, timeout=self.heartbeat)
        try:
            count, digest = running.result()
        except Exception as error:  # Spark's errors: the asker gets one line
            self._send(final_publication(query.id, 0, f"query failed: {first_line(error)}"), query.asker)
            return
        self._send(final_publication(query.id, count, digest=digest), query.asker)

    def _send(self, answer: Publication, asker: str) -> None:
        """Publish through the client, which re-sends it after a reconnection; an answer lost all
        the same (the client closed) is asked again. Each one says who answers and to whom; a
        final marker is signed (with TLS)."""
        client = self.client
        if client is None:
            return
        answer = attributed(answer, self.identity, asker)
        if self.author is not None and "last" in answer:
            answer = self.author.sign_publication(answer)
        with contextlib.suppress(LinkClosed, TooManyUnacknowledged):
            client.publish_nowait(answer)

    # connection -----------------------------------------------------------------------------

    async def _keep_connected(self) -> None:
        """Connect (until a broker answers) and land what arrives; the client reconnects by itself
        and re-sends the subscriptions and the advertisement."""
        client = await self._connect()
        log.info("historian connected to %s, keeping %s", client.broker_id, ", ".join(self.keep))
        async for delivery in client:
            if delivery.subscription in self.queries:
                self._answer(delivery)
            else:
                self._land(delivery)
        self.landing.flush()

    async def _connect(self) -> Client:
        client = await Client.connect(
            self.uri, f"{self.name}-1", retry_on_failed_connect=True, backoff=DAEMON_BACKOFF
        )
        try:
            for cls in self.keep:
                await client.subscribe(Filter(cls), own_queue=False)
            await client.advertise(result_advertisement())
            self.queries = {(await client.subscribe(query_subscription(), own_queue=False)).id}
        except BaseException as error:
            await client.close()
            if isinstance(error, RefusedError):  # say whose requests, not only the broker's reason
                raise RefusedError(
                    f"broker {client.broker_id} refused historian {self.name}'s requests: {error}"
                ) from None
            raise
        self.client = client
        return client
