"""The async client: ``client = await Client.connect(uri)``, then advertise, subscribe, publish.

Every request returns once the edge broker has accepted it (with the overlay-wide id it got) or
raises ``RefusedError`` with the broker's reason. Each delivery lands on exactly one bounded
queue: its subscription's own (``async for delivery in sub``, the default) or, for subscriptions
made with ``own_queue=False``, the client's merged stream (``async for delivery in client``). A
consumer that falls behind stops the client reading its socket (back-pressure, see ``queues``);
a subscription made with ``lossy=True`` drops its oldest deliveries instead, counted and logged.
``client.stats()`` counts everything the client dropped, refused or re-sent.

The client reconnects by itself (see ``reconnect``): when the link drops it dials its brokers
again with backoff, re-sends every live advertisement, subscription and composite subscription,
then every request not yet answered, publications included. The caller's ids stay valid across a
reconnection, even to another broker: a subscription keeps the id it got first, and the client
translates. Publications carry a session the client chose itself (``<n>@<session>``, a
``ClientRef``), so a re-sent publication keeps its overlay-wide id: its edge broker,
or the subscriber's client after a failover, drops the copy that got through twice. The broker
keeps each delivery in custody until the client has taken it (``receipts``): one in flight when
the link dropped comes again after the reconnection, from a broker that kept the session.

``publish_nowait`` pipelines publications without waiting for each acknowledgement, for
throughput; they are kept and re-sent like the others, and a refusal of one of them is logged
and kept in ``client.refusals`` (the last REFUSALS_KEPT; all are counted).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

from broker.client.acks import Acks, Receipt
from broker.client.asking import Asking
from broker.client.connection import Connection, Dialling
from broker.client.deliveries import Deliveries
from broker.client.outbox import Outbox, OutboxError
from broker.client.queues import DeliveryQueue
from broker.client.receipts import Receipts
from broker.client.reconnect import JITTER, Backoff, Brokers, ConnectionEvent, brokers
from broker.client.requests import Refs
from broker.client.streams import Delivery, Queue, Stream, Subscription
from broker.clock import SYSTEM, Clock
from broker.errors import BadMessage, ConnectError, LinkClosed, LocalError, RefusedError
from broker.language import (
    Composite,
    Filter,
    Policy,
    Publication,
    parse_composite,
    parse_filter,
    parse_publication,
)
from broker.messages import (
    DEFAULT_QOS,
    MAX_PULL,
    Ack,
    Advertise,
    Bye,
    Cancel,
    Carry,
    CompositeSubscribe,
    Deliver,
    Notify,
    Ping,
    Pong,
    Publish,
    Pull,
    Qos,
    Refuse,
    Renew,
    Standby,
    StatusReply,
    StatusRequest,
    Subscribe,
    TakeOver,
    Took,
    Unadvertise,
    Unsubscribe,
    WireMessage,
    client_session,
)
from broker.transport.cancels import signed
from broker.transport.link import Link
from broker.transport.tls import Identity
from broker.transport.tls import client_id as client_id_of
from broker.transport.uri import BrokerURI

__all__ = [
    "Client",
    "ConnectError",
    "Delivery",
    "OutboxError",
    "RefusedError",
    "Subscription",
    "TooManyUnacknowledged",
]

log = logging.getLogger(__name__)

DEFAULT_BACKOFF = Backoff()
MIN_LEASE = 1.0  # seconds: the shortest lease a broker grants (``Subscribe.lease``)

STATS = (
    "dropped.lossy",
    "dropped.duplicates",
    "reconnects",
    "resent.requests",
    "resent.publications",
    "refusals",
    "heartbeat_timeouts",
)


class TooManyUnacknowledged(LocalError):
    """``publish_nowait`` while ``max_unacked`` publications wait for their acknowledgement:
    the broker is away or slower than the producer (``publish`` waits instead)."""

    def __init__(self, count: int) -> None:
        self.count = count
        super().__init__(f"{count} publications are waiting for the broker's acknowledgement")


class Client(Stream):
    """A connection to the overlay through one broker at a time (see the module's docstring);
    made by :meth:`connect`. Its parts: ``connection`` (the link), ``asking`` (requests and
    their answers, over the pure ``requests``), ``deliveries`` (what the broker delivers)."""

    def __init__(
        self,
        targets: tuple[BrokerURI, ...],
        client_id: str | None,
        queue_limit: int = 100_000,
        timeout: float = 10.0,
        backoff: Backoff = DEFAULT_BACKOFF,
        on_event: Callable[[ConnectionEvent], object] | None = None,
        heartbeat: float = 1.0,
        dead_after: float = 10.0,
        max_unacked: int = 65_536,
        rng: Callable[[], float] = JITTER.random,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        request_timeout: float = 30.0,
        manual_done: bool = False,
        outbox: Path | None = None,
        tls: Identity | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        # publications kept on disk until acknowledged, across restarts of this process
        self._outbox = None if outbox is None else Outbox(outbox, client_id)
        self.id = self._outbox.client if self._outbox else client_id or f"c-{uuid.uuid4().hex[:10]}"
        self.tls = tls
        if tls is not None:  # the broker takes no id but the certificate's name, or NAME:SUFFIX
            self.id = client_id_of(tls.name, self.id)
        self.queue_limit, self.max_unacked = queue_limit, max_unacked
        self.manual_done = manual_done  # deliveries are done when the application says (``done``)
        self.counters: Counter[str] = Counter()
        self.clock = clock
        self._full: set[Queue] = set()  # queues the reader waits on before reading on
        self._queue: Queue = self._new_queue(lossy=False)
        self._client = self
        self._closing = False
        receipts = Receipts()
        dialling = Dialling(targets, self.id, timeout, backoff, rng, sleep, tls)
        self.connection = Connection(
            dialling, receipts.greeting, heartbeat, dead_after, clock, self.counters, self._full, on_event
        )
        self.asking = Asking(
            self.id, self.connection, self.counters, request_timeout, lambda: self._closing, self._outbox
        )
        self.requests = self.asking.requests
        self.refusals = self.asking.refusals  # the last REFUSALS_KEPT, counted in full in counters
        self.acks = Acks(self)  # the acknowledgements it sends and those it waits for
        self.deliveries = Deliveries(
            self.requests, receipts, self._queue, self.counters, self._took, self.acks.received
        )
        # a session of our own: publication ids survive a reconnection (see docs/overlay.md), and
        # with an outbox a restart too
        volatile = client_session(clock.time(), JITTER.getrandbits(32))
        box = self._outbox
        self.refs = Refs(box.next, box.session, volatile) if box else Refs(1, volatile, volatile)
        self._tasks: list[asyncio.Task[None]] = []
        self._renewing: asyncio.Task[None] | None = None  # renews the leased subscriptions
        # pulling: deliveries asked for that have not come yet; None: pushed (``pull``)
        self._owed: int | None = None

    @classmethod
    async def connect(
        cls,
        uri: Brokers,
        client_id: str | None = None,
        queue_limit: int = 100_000,
        timeout: float = 10.0,
        *,
        retry_on_failed_connect: bool = False,
        created: Callable[[Client], object] | None = None,
        **options: object,
    ) -> Client:
        """Connect to the first of ``uri`` (one broker, or a list to fail over along) that
        answers. ConnectError if none does; with ``retry_on_failed_connect``, keeps trying as
        after a lost link (``backoff.attempts``). ``options`` are those of ``Client``; with
        ``request_timeout`` (30 s), each request raises ``NoAnswer`` if the broker has not
        answered it in time, a wait for a reconnection included. With ``outbox`` (a directory),
        publications are kept on disk until acknowledged (see ``outbox``); ``client_id`` is then
        the outbox's by default. With ``tls`` (an ``Identity``; by default ``uri``'s, if it is a
        ``BrokerList`` that has one), every link is mutual TLS and the id is scoped by the
        identity's name (``NAME:ID``). ``created`` is given the client before its first dial (to
        set what its hello says, ``connection.noted``, and to find it from ``on_event``)."""
        targets = brokers(uri)
        options.setdefault("tls", targets.tls)
        client = cls(targets, client_id, queue_limit, timeout, **options)  # type: ignore[arg-type]
        if created is not None:
            created(client)
        backoff = client.connection.dialling.backoff
        first = backoff if retry_on_failed_connect else dataclasses.replace(backoff, attempts=len(targets))
        try:
            index, link, leftovers = await client.connection.dial(first)
        except BaseException:
            if client._outbox is not None:
                await client._outbox.close()
            raise
        client.connection.take(index, link)
        client._adopt(link, leftovers)
        loop = asyncio.get_running_loop()
        client._tasks = [
            loop.create_task(client.connection.run(client)),
            loop.create_task(client.connection.watch()),
        ]
        return client

    @property
    def connected(self) -> bool:
        """Whether the link is up now; requests made while it is down wait for the reconnection."""
        return self.connection.up and not self._closing

    @property
    def link(self) -> Link | None:
        return self.connection.link

    @property
    def broker_id(self) -> str:
        """The id of the broker the link is to (or was, the last)."""
        return self.connection.broker_id

    @property
    def closed(self) -> bool:
        """Closed by the caller, or given up reconnecting: requests raise LinkClosed."""
        return self._closing

    @property
    def dropped(self) -> int:
        """Deliveries dropped by lossy subscriptions."""
        return self.counters["dropped.lossy"]

    def stats(self) -> dict[str, int]:
        """What the client counted: drops (lossy queues), duplicates dropped, reconnections,
        requests re-sent, refusals, bad frames, and what waits now."""
        return {
            **dict.fromkeys(STATS, 0),
            **self.counters,
            "unacknowledged": self.requests.unacked,
            "pending": len(self.requests.pending),
            "outbox": len(self._outbox.pending) if self._outbox else 0,
            "queued": self._queue.queue.qsize() + sum(s._queue.queue.qsize() for s in self._own_queues()),
        }

    @property
    def subscriptions(self) -> dict[str, Subscription]:
        """The live subscriptions, by the id the caller knows."""
        return self.requests.subscriptions

    def _own_queues(self) -> list[Subscription]:
        return [s for s in self.subscriptions.values() if s._queue is not self._queue]

    def _new_queue(self, lossy: bool, name: str = "") -> Queue:
        return DeliveryQueue(
            self.queue_limit,
            self.counters,
            self._full.add,
            lossy,
            name,
            on_drop=self._dropped,
            priority=_priority,
            expires=_expires,
            dates=self.clock.time,
        )

    def _dropped(self, delivery: Delivery, caught_up: bool) -> None:
        """A queue dropped ``delivery`` (lossy and full, or it expired): done with, for its broker."""
        self.deliveries.done(delivery, caught_up)

    # requests -----------------------------------------------------------------------------------

    async def advertise(self, advertisement: Filter | str, name: str | None = None) -> str:
        ref = self.refs.next(name)
        message = Advertise(ref, _filter(advertisement))
        self.requests.make(ref, message)
        return str(await self.asking.ask(message, ref))

    async def unadvertise(self, adv_id: str) -> None:
        await self._withdraw(adv_id, Unadvertise)

    async def _withdraw(self, known_id: str, kind: type[Unadvertise] | type[Unsubscribe]) -> None:
        live = self.requests.withdraw(known_id)
        current = live.current if live is not None else known_id
        try:
            if live is None or self.connected or self._closing:  # else the next session never hears of it
                await self.asking.ask(kind(current), current)
        finally:
            sub = live.subscription if live is not None else None
            if sub is not None:  # what came before the answer still went to its queue
                self.requests.withdrawn(current, known_id)
                self._full.discard(sub._queue)
                sub._queue.space.set()  # nobody may read it any more: the reader must not wait on it

    async def subscribe(
        self,
        subscription: Filter | str,
        own_queue: bool = True,
        lossy: bool = False,
        name: str | None = None,
        lease: float = 0.0,
    ) -> Subscription:
        """Subscribe; deliveries go to the returned subscription's queue, or with
        ``own_queue=False`` to the client's merged stream. A ``lossy`` subscription's own queue
        drops its oldest deliveries when its consumer falls behind, instead of back-pressure. A
        ``lease`` (seconds) ends the subscription at the broker unless renewed within it: this
        client renews it by itself (every third of the shortest lease) while it runs, so a
        process that hangs or vanishes loses it then, not at the end of its session's grace."""
        parsed = _filter(subscription)
        made = await self._subscribe(lambda ref: Subscribe(ref, parsed, lease=lease), own_queue, lossy, name)
        if lease and self._renewing is None:
            self._renewing = asyncio.get_running_loop().create_task(self._renew())
            self._tasks.append(self._renewing)
        return made

    async def _subscribe(
        self,
        request: Callable[[str], Subscribe | CompositeSubscribe],
        own_queue: bool,
        lossy: bool,
        name: str | None = None,
    ) -> Subscription:
        if lossy and not own_queue:
            raise ValueError("a lossy subscription needs its own queue: the merged stream never drops")
        ref = self.refs.next(name)
        message = request(ref)
        queue = self._new_queue(lossy, f"{self.id}:{ref}") if own_queue else self._queue
        sub = Subscription(self, "", message, queue)
        # registered when the ack is read, not when this coroutine resumes: deliveries that came
        # in the same read as the ack must already find their subscription
        self.requests.make(ref, message, sub)
        await self.asking.ask(message, ref)
        return sub

    async def subscribe_composite(
        self,
        composite: Composite | str,
        clear: Filter | str | None = None,
        own_queue: bool = True,
        lossy: bool = False,
        name: str | None = None,
        policy: Policy | str = Policy.CHRONICLE,
        priority: int = 4,
    ) -> Subscription:
        """A composite subscription; each firing is one Delivery with all its publications.
        ``clear`` (a filter that may use the composite's variables) drops waiting state under the
        bindings of each publication it matches; ``policy`` (or its name) says which waiting
        publications a firing uses and consumes; ``priority`` (0-9) is its firings' on their way."""
        parsed = parse_composite(composite) if isinstance(composite, str) else composite
        condition = parse_filter(clear, allow_variables=True) if isinstance(clear, str) else clear
        chosen = policy if isinstance(policy, Policy) else Policy.named(policy)
        return await self._subscribe(
            lambda ref: CompositeSubscribe(ref, parsed, condition, policy=chosen, priority=priority),
            own_queue,
            lossy,
            name,
        )

    async def unsubscribe(self, sub_id: str) -> None:
        await self._withdraw(sub_id, Unsubscribe)

    async def withdraw(self, known_id: str) -> None:
        """Unadvertise or unsubscribe ``known_id``, whichever this client made it as."""
        name = self.requests.name_of(known_id)
        live = None if name is None else self.requests.live.get(name)
        advertised = live is not None and isinstance(live.message, Advertise)
        await self._withdraw(known_id, Unadvertise if advertised else Unsubscribe)

    def name_of(self, known_id: str) -> str | None:
        """The ref (the ``name`` it was given, or its number) of the live advertisement or
        subscription known as ``known_id``; known from its Ack on, before its request returns."""
        return self.requests.name_of(known_id)

    def known_id(self, name: str) -> str | None:
        """The id of the live advertisement or subscription made under ``name``, once acknowledged."""
        live = self.requests.live.get(name)
        return live.first if live is not None and live.first else None

    async def publish(self, publication: Publication | str, qos: Qos = DEFAULT_QOS) -> str:
        """Publish and wait for the broker's acknowledgement (through reconnections); waits
        first while ``max_unacked`` publications are unacknowledged. With an outbox, it is on
        disk before it is sent (``OutboxError`` if the disk refuses), and stays there until
        acknowledged or refused, even if this wait ends first. ``qos``: its priority, time to
        live and the rest (``Qos``); one that asks for acks subscribes to them first (``receipt``
        waits for one). Returns the publication's overlay-wide id, or for a repeat of a
        message id (``qos.mid``) that its broker remembers, the first's: the broker routes it
        no further (docs/qos.md, Idempotent publishing). A non-persistent one
        (``persistent=False``) returns at once, with its ref (``_publish_bare``)."""
        parsed, qos = _publication(publication), _offered(qos)  # bad input fails before any wait
        if not qos.persistent:
            return self._publish_bare(parsed, qos)
        if qos.ack != "none":
            await self.acks.watch()
        while self.asking.unacknowledged >= self.max_unacked and not self._closing:
            self.asking.acked.clear()
            await self.asking.acked.wait()
        ref = self.refs.publication()
        return str(await self.asking.ask(Publish(ref, parsed, qos=qos), ref))

    def publish_nowait(
        self, publication: Publication | str, durable: bool = True, qos: Qos = DEFAULT_QOS
    ) -> None:
        """Publish without waiting: kept until acknowledged and re-sent after a reconnection.
        TooManyUnacknowledged when ``max_unacked`` publications already wait. With an outbox,
        it is sent once on disk, in a group commit with those made meanwhile; a disk that
        refuses it is logged and counted (``lost.outbox``). Not ``durable``: past the outbox,
        kept in memory only (an answer its asker asks again for if this process ends). A
        publication that asks for acks does not subscribe to them here: ``await
        client.acks.watch()`` first for ``receipt`` to see them."""
        if not qos.persistent:
            self._publish_bare(_publication(publication), _offered(qos))
            return
        if self.asking.unacknowledged >= self.max_unacked:
            self.counters["refused.unacknowledged"] += 1
            raise TooManyUnacknowledged(self.asking.unacknowledged)
        message = Publish(self.refs.publication(durable), _publication(publication), qos=_offered(qos))
        storing = self.asking.storing
        if storing is not None and durable:
            storing.store(message, None)
        else:
            self.asking.send(message.id, message, None)

    def _publish_bare(self, publication: Publication, qos: Qos) -> str:
        """A non-persistent publication: sent once, bare, if the link is up, else dropped
        (counted ``dropped.nonpersistent``); never kept, never sent again, not acknowledged (a
        refusal is logged and kept in ``refusals``). Its ref, under this run's own session (the
        outbox does not count it), stands for its overlay-wide id, which only an answer would
        tell."""
        if self._closing:
            raise LinkClosed("client closed")
        ref = self.refs.publication(durable=False)
        link = self.connection.link
        if (
            link is not None
            and self.connection.up
            and link.send(Publish(ref, publication, ack=False, qos=qos))
        ):
            self.counters["published.nonpersistent"] += 1
        else:
            self.counters["dropped.nonpersistent"] += 1
        return ref

    async def _renew(self) -> None:
        """Renew every leased subscription, every third of the shortest lease, while linked."""
        while True:
            leased = [
                (live.message.lease, live.current)
                for live in self.requests.live.values()
                if type(live.message) is Subscribe and live.message.lease and live.current
            ]
            await asyncio.sleep(min((lease for lease, _ in leased), default=MIN_LEASE) / 3)
            link = self.link
            if leased and link is not None and self.connection.up:
                link.send(Renew(tuple(current for _, current in leased)))

    async def cancel(self, mid: str) -> str:
        """Cancel the retained publication ``mid`` names (its publisher's id for it, or its
        publication id) wherever it is kept, if its cancel policy lets this client's identity;
        returns the cancel's id once the broker took it (not whether anything was kept). With
        TLS the cancel is signed with the identity's key (``broker.transport.cancels``), which
        is how every broker knows who cancels."""
        ref = self.refs.next()
        cancel = Cancel(ref, mid) if self.tls is None else signed(self.tls, ref, mid, self.clock.time())
        return str(await self.asking.ask(cancel, ref))

    async def ack(self, delivery: Delivery) -> None:
        """Acknowledge ``delivery``, whose publisher asked for it (``ack=client``): an ``ACK``
        publication its publisher, and anyone else, may subscribe to (``broker.client.acks``)."""
        await self.acks.ack(delivery)

    def pull(self, more: int) -> None:
        """Pull instead of being pushed to: the broker sends ``more`` deliveries as they match
        (this call and the earlier ones add up) and keeps the rest in its custody for this
        session until asked again (``fetch`` asks for what a batch needs). Whatever the client
        holds already stays; nothing is lost or repeated."""
        if type(more) is not int or not 0 <= more <= MAX_PULL:
            raise ValueError(f"pull takes 0 to {MAX_PULL} messages, not {more!r}")
        self._owed = (self._owed or 0) + more
        self._send_pull(more)

    def ask_for(self, wanted: int) -> None:
        """Pulling, that ``wanted`` deliveries come: asked for, beyond those asked for before that
        have not come yet."""
        owed = self._owed or 0
        more = max(0, wanted - owed)
        if more or self._owed is None:
            self._owed = owed + more
            self._send_pull(more)

    def push(self) -> None:
        """Be pushed to again: the broker sends what it kept, and every delivery as it matches."""
        self._owed = None
        self._send_pull(None)

    def _send_pull(self, more: int | None) -> None:
        if self.connected:  # else said at the reconnection (``_adopt``)
            assert self.link is not None
            self.link.send(Pull(more))

    async def receipt(self, publication_id: str, timeout: float = 10.0) -> Receipt:
        """The first acknowledgement (a receipt or a client's ack) of our publication
        ``publication_id``; TimeoutError after ``timeout`` seconds."""
        return await self.acks.receipt(publication_id, timeout)

    async def stored(self) -> None:
        """Until every publication made so far is on disk in the outbox (nothing without one)."""
        if self.asking.storing is not None:
            await self.asking.storing.stored()

    def resend_outbox(self) -> int:
        """Send what an earlier run of this client left unacknowledged in its outbox, under the
        ids it had (a broker or subscriber drops the copies that got through): call it once the
        advertisements they fit are made again. The first publication of this run sends them
        first otherwise. Returns how many."""
        return 0 if self.asking.storing is None else self.asking.storing.resend()

    async def declare_standbys(self, keys: dict[str, tuple[tuple[str, ...], float]]) -> str:
        """Tell the broker who may take which keys of this client's session over, and after how
        many seconds of its link being down (``Standby``; replaces what was declared). Returns
        once the broker has it; RefusedError otherwise."""
        ref = self.refs.next()
        declared = tuple((key, tuple(who), float(after)) for key, (who, after) in sorted(keys.items()))
        return str(await self.asking.ask(Standby(ref, declared), ref))

    async def take_over(self, primary: str, key: str) -> str:
        """Ask the broker for ``key`` of client ``primary``'s session (``TakeOver``): returns
        once granted; RefusedError with the broker's reason otherwise (not yet, or not you)."""
        ref = self.refs.next()
        return str(await self.asking.ask(TakeOver(ref, primary, key), ref))

    def discard(self, unwanted: Callable[[Publication], bool]) -> list[Publication]:
        """Take every publication not yet acknowledged that ``unwanted`` names out of what this
        client would send or send again (its outbox included): its user knows it must not go
        (a standby took over the runs whose statuses they are). Returns them."""
        dropped: list[Publication] = []
        for ref, pending in list(self.requests.pending.items()):
            if isinstance(pending.message, Publish) and unwanted(pending.message.publication):
                dropped.append(pending.message.publication)
                self.asking.answered(ref, None)  # out of the outbox too
        storing = self.asking.storing
        if storing is not None:
            dropped += storing.discard(unwanted)
        return dropped

    async def status(self, detail: bool = False) -> dict[str, object]:
        """The broker's status; with ``detail``, its routing tables too (see ``Router.status``)."""
        ref = self.refs.next()
        reply = await self.asking.ask(StatusRequest(ref, detail), ref)
        assert isinstance(reply, dict)
        return reply

    # the connection -----------------------------------------------------------------------------

    def _adopt(self, link: Link, leftovers: list[WireMessage]) -> None:
        """Take a fresh link: re-send what is live, then what is unanswered, in order."""
        self.deliveries.receipts.start(self.broker_id, link.peer.epoch if link.peer is not None else "")
        self.asking.resend(link)
        if self._owed is not None:  # pulling: a broker new to the session would push; what
            # was asked before and has not come is asked again at the next fetch
            self._owed = 0
            link.send(Pull(0))
        for item in leftovers:
            self._handle(item)

    def _lost(self, reason: str) -> None:
        """The link ended: withdrawals in flight are done (the next session never hears of what
        they withdraw); everything else waits for the reconnection."""
        self.connection.event(ConnectionEvent("disconnected", self.broker_id, reason))
        self.asking.lost()

    def _end(self, reason: str) -> None:
        self._closing = True
        self.asking.end(reason)
        self._queue.put(None)
        for sub in self._own_queues():
            sub._queue.put(None)

    # what the broker sends ----------------------------------------------------------------------

    def _handle(self, item: object) -> None:
        if isinstance(item, Carry):
            self.deliveries.carried(item)
            if self._owed:
                self._owed -= 1
        elif isinstance(item, Deliver | Notify):
            self.deliveries.deliver(item)
        elif isinstance(item, Ack):
            self.asking.answered(item.ref, self.requests.acknowledged(item.ref, item.id))
        elif isinstance(item, StatusReply):
            self.asking.answered(item.ref, item.status)
        elif isinstance(item, Refuse):
            self.asking.refused(item)
        elif isinstance(item, Ping):
            if self.link is not None:
                self.link.send(Pong())
        elif isinstance(item, BadMessage):
            self.counters["bad_messages"] += 1
            log.warning("bad message from the broker: %s", item)

    def done(self, delivery: Delivery) -> None:
        """With ``manual_done``: the application is done with ``delivery`` (say, it is in its own
        journal), so its broker may forget it. Without, asking for the next delivery of a stream
        says so for the last one. In the client's event loop, like every other call."""
        self.deliveries.done(delivery, self._queue.queue.empty())

    def _took(self, seq: int) -> None:
        if self.connected:
            assert self.link is not None
            self.link.send(Took(seq))

    async def close(self, bye: bool = True) -> None:
        """Say goodbye (the broker then ends this client's session at once instead of keeping it
        for a reconnection) and close. ``bye=False``: a process that stops to start again (an
        agent restarted) leaves its session to its broker for the grace period."""
        self.deliveries.took_now()  # a Took waiting: the broker must have it before the Bye
        self._closing = True
        if self.link is not None:
            if self.link.closed is None and (not bye or self.link.send(Bye())):
                await self.link.flush_and_close("client closed")
            self.link.close("client closed")
            await self.link.wait_closed()
        self.acks.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if not self._tasks:
            self._end("client closed")
        if self.asking.storing is not None:
            await self.asking.storing.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _priority(delivery: Delivery) -> int:
    return delivery.qos.priority


def _expires(delivery: Delivery) -> float | None:
    return delivery.qos.expires


def _filter(value: Filter | str) -> Filter:
    return parse_filter(value) if isinstance(value, str) else value


def _publication(value: Publication | str) -> Publication:
    return parse_publication(value) if isinstance(value, str) else value


def _offered(qos: Qos) -> Qos:
    """``qos`` if the overlay does what it asks; ValueError naming what it does not do yet."""
    if qos.expires is not None:
        raise ValueError("a publisher gives a ttl; its broker sets when it expires")
    if not qos.persistent and qos.retain:
        raise ValueError("a retained publication must be persistent: retain with persistent=false")
    if not qos.persistent and qos.ack != "none":
        raise ValueError(
            f"an acknowledged publication must be persistent: ack={qos.ack} with persistent=false"
        )
    return qos
