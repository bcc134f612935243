"""A client's link to one of its brokers at a time: dialled, read, kept alive, dialled again.

The reader hands each message to the client and stops reading while a delivery queue is full
(back-pressure, see ``queues``); a watcher pings a quiet broker and closes a link on which the
broker fell silent, so that the reconnection starts. When the link ends, the client hears of it
(``lost``), the brokers are dialled again with backoff (see ``reconnect``) and the client takes
the new link (``adopt``); when the client closes, or no broker answers, it hears that it ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from broker.client.queues import DeliveryQueue
from broker.client.reconnect import Backoff, ConnectionEvent, Greeting, dial_any
from broker.clock import Clock
from broker.errors import ConnectError, LinkClosed
from broker.messages import Ping, WireMessage
from broker.transport.handshake import HandedOver
from broker.transport.link import Link
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI

__all__ = ["Connection", "Dialling", "LinkUser"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Dialling:
    """Whom a client dials, as whom, and how: ``timeout`` for each attempt, ``backoff`` between
    them (``rng`` its jitter, ``sleep`` its wait), ``tls`` for a mutual TLS link."""

    targets: tuple[BrokerURI, ...]
    name: str
    timeout: float
    backoff: Backoff
    rng: Callable[[], float]
    sleep: Callable[[float], Awaitable[None]]
    tls: Identity | None


# Seconds of silence after which a broker of a replicated site is taken for frozen: it pings a
# quiet link every second, and another broker of its site takes over our session at once.
SITE_DEAD_AFTER = 3.0
HANDED_OVER_RETRY = 0.2  # seconds between hellos refused as handed over, while our user takes note


class LinkUser(Protocol):
    """The client as its connection sees it: it takes a fresh link (with what came in its
    handshake), handles each message, hears of a link lost and of the end (with why)."""

    @property
    def closed(self) -> bool: ...

    def _adopt(self, link: Link, leftovers: list[WireMessage]) -> None: ...

    def _handle(self, item: object) -> None: ...

    def _lost(self, reason: str) -> None: ...

    def _end(self, reason: str) -> None: ...


class Connection:
    """The link of the client ``dialling.name``; ``full`` holds the queues the reader waits on."""

    def __init__(
        self,
        dialling: Dialling,
        greeting: Greeting,
        heartbeat: float,
        dead_after: float,
        clock: Clock,
        counters: Counter[str],
        full: set[DeliveryQueue[Any]],
        on_event: Callable[[ConnectionEvent], object] | None,
    ) -> None:
        self.dialling, self.greeting = dialling, greeting
        self.heartbeat, self.dead_after, self.clock = heartbeat, dead_after, clock
        self.counters, self.full, self.on_event = counters, full, on_event
        self.index = 0
        self.link: Link | None = None
        self.broker_id = ""
        self.paused = False
        self.noted = ""  # the keys of our session we know were taken over (``Hello.noted``)

    @property
    def up(self) -> bool:
        return self.link is not None and self.link.closed is None

    async def dial(self, backoff: Backoff, stay: float = 0.0) -> tuple[int, Link, list[WireMessage]]:
        """Dial the brokers from the current one on (see ``reconnect.dial_any``)."""
        d = self.dialling
        while True:
            tls = None if d.tls is None else d.tls.client  # as of now: each dial sees the latest revocations
            try:
                return await dial_any(
                    d.targets,
                    d.name,
                    d.timeout,
                    backoff,
                    self.index,
                    d.rng,
                    d.sleep,
                    self.greeting,
                    stay,
                    tls,
                    self.clock,
                    lambda: self.noted,
                )
            except HandedOver as error:
                # a standby took keys of our session over: our user must take note (and drop what
                # it would re-send of them) before we link again, saying so (``noted``)
                if self.on_event is None:
                    raise
                self.event(ConnectionEvent("handed over", self.dialling.targets[self.index].id, str(error)))
                await d.sleep(HANDED_OVER_RETRY)

    def take(self, index: int, link: Link) -> None:
        self.index, self.link, self.broker_id = index, link, self.dialling.targets[index].id

    async def run(self, user: LinkUser) -> None:
        """Read the link; when it ends, reconnect (or give up), until the client is closed."""
        backoff = self.dialling.backoff
        try:
            while True:
                assert self.link is not None
                await self._read(self.link, user)
                if user.closed:
                    return
                user._lost(self.link.closed or "closed")
                # the brokers of a site share its sessions: the next one serves us at once (and
                # the one lost may be frozen: its handshake would take the whole timeout)
                lost = self.link.peer
                stay = backoff.failover_after
                if lost is not None and lost.site:
                    stay, self.index = 0.0, (self.index + 1) % len(self.dialling.targets)
                try:
                    index, link, leftovers = await self.dial(backoff, stay)
                except ConnectError as error:
                    self.event(ConnectionEvent("closed", self.broker_id, str(error)))
                    return
                if user.closed:
                    await link.wait_closed()
                    return
                self.counters["reconnects"] += 1
                self.take(index, link)
                user._adopt(link, leftovers)
                self.event(ConnectionEvent("reconnected", self.broker_id))
        finally:
            user._end("client closed" if user.closed else "gave up reconnecting")

    async def _read(self, link: Link, user: LinkUser) -> None:
        try:
            while True:
                for item in await link.receive():
                    user._handle(item)
                while self.full:  # back-pressure: read on when every full queue has room again
                    self.paused = True
                    queue = self.full.pop()
                    await queue.space.wait()
                self.paused = False
        except (LinkClosed, ValueError) as error:
            link.close(str(error) or "closed")

    async def watch(self) -> None:
        """Keep a paused link alive (the broker hears from us though we read nothing), ask a quiet
        broker for a sign of life (its own heartbeat may be slower than ``dead_after``), and close
        a link on which the broker fell silent, so that the reconnection starts."""
        while True:
            await asyncio.sleep(self.heartbeat)
            link = self.link
            if link is None or link.closed is not None:
                continue
            silent = self.clock.monotonic() - link.last_received
            dead_after = self.dead_after
            if link.peer is not None and link.peer.site:  # another broker of the site serves at once
                dead_after = min(dead_after, SITE_DEAD_AFTER)
            if self.paused or silent > dead_after / 2:
                link.send(Ping())  # answered by a Pong
            if not self.paused and silent > dead_after:
                self.counters["heartbeat_timeouts"] += 1
                link.close(f"no traffic from {self.broker_id} for {dead_after:g} s", abort=True)

    def event(self, event: ConnectionEvent) -> None:
        """Log ``event`` and tell the client's caller."""
        level = logging.INFO if event.kind == "reconnected" else logging.WARNING
        log.log(
            level,
            "client %s %s %s%s",
            self.dialling.name,
            event.kind,
            event.broker,
            f": {event.reason}" * bool(event.reason),
        )
        self.tell(event)

    def tell(self, event: ConnectionEvent) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:  # the caller's logging must not stop the reconnections
                log.exception("connection event callback failed")
