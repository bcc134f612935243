"""What a client hands its caller: deliveries, and the streams they are read from.

Each delivery lands on exactly one bounded queue: its subscription's own (``async for delivery in
sub``) or the client's merged stream (``async for delivery in client``). Asking a stream for its
next delivery says the consumer is done with the last one, which lets its broker forget it (see
``receipts``), unless the client was made with ``manual_done``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.client.queues import DeliveryQueue
from broker.errors import LinkClosed
from broker.language import Publication
from broker.messages import DEFAULT_QOS, MAX_PULL, CompositeSubscribe, Qos, Subscribe

if TYPE_CHECKING:
    from broker.client.client import Client

__all__ = ["Delivery", "Queue", "Stream", "Subscription"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """A publication for a subscription; for a composite subscription, ``publications`` holds
    every publication of the firing and ``publication`` is the first of them."""

    subscription: str
    publication: Publication
    publications: tuple[Publication, ...] = ()
    id: str = ""  # the publication's overlay-wide id (who published it), for a plain delivery
    time: float = 0.0  # when its edge broker accepted it
    qos: Qos = DEFAULT_QOS  # its priority, expiry and the rest, as its publisher asked
    seq: int = dataclasses.field(default=0, compare=False, repr=False)  # in the broker's custody
    channel: str = dataclasses.field(default="", compare=False, repr=False)  # whose seq it is


Queue = DeliveryQueue[Delivery]


class Stream:
    """Deliveries from one queue: ``await next(timeout)`` or ``async for``, pushed as they come;
    or ``fetch``, pulled. Ends when the client is closed or gives up reconnecting."""

    _queue: Queue
    _client: Client
    _handling: tuple[Delivery, ...] = ()  # the deliveries last returned: done when more are asked for

    async def next(self, timeout: float | None = None) -> Delivery:
        """The next delivery; ``TimeoutError`` after ``timeout`` seconds, ``LinkClosed`` at the end.
        One that expired while it waited in the queue is never handed out (counted ``expired``)."""
        self._done()
        loop = asyncio.get_running_loop()
        item = await self._take(None if timeout is None else loop.time() + timeout)
        self._handling = (item,)
        return item

    async def fetch(self, max_messages: int, timeout: float) -> list[Delivery]:
        """Pull: up to ``max_messages`` deliveries, those that arrive within ``timeout`` seconds
        (none is no error). The client's session turns to pulling (``Client.pull``): its broker
        keeps what matches, in its custody, until the client asks, and asks only for what this
        stream does not hold yet. ``Client.push`` turns it back; nothing is lost or repeated
        either way. The deliveries are done (their broker may forget them) at the next call."""
        if type(max_messages) is not int or not 0 < max_messages <= MAX_PULL:
            raise ValueError(f"fetch takes 1 to {MAX_PULL} messages, not {max_messages!r}")
        self._done()
        client = self._client
        client.ask_for(max_messages - self._queue.queue.qsize())
        deadline = asyncio.get_running_loop().time() + timeout
        got: list[Delivery] = []
        while len(got) < max_messages:
            try:
                got.append(await self._take(deadline))
            except TimeoutError:
                break
            except LinkClosed:
                if not got:
                    raise
                break
        self._handling = tuple(got)
        return got

    def _done(self) -> None:
        """The consumer is done with what it was given last (unless it says so itself)."""
        if self._handling and not self._client.manual_done:
            for item in self._handling:
                self._client.deliveries.done(item, self._queue.queue.empty())
        self._handling = ()

    async def _take(self, deadline: float | None) -> Delivery:
        """The next delivery, by ``deadline`` (the loop's time): never one that expired, which
        its queue takes out at its expiry (``DeliveryQueue``)."""
        loop = asyncio.get_running_loop()
        item = await self._queue.get(None if deadline is None else max(0.0, deadline - loop.time()))
        if item is None:
            self._queue.put(None)  # the end marker stays for every later reader
            raise LinkClosed("connection closed")
        return item

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Delivery]:
        while True:
            try:
                yield await self.next()
            except LinkClosed:
                return


class Subscription(Stream):
    """A live subscription: its overlay-wide id (the first it got: it stays valid across
    reconnections) and its own stream of deliveries."""

    def __init__(
        self, client: Client, sub_id: str, request: Subscribe | CompositeSubscribe, queue: Queue
    ) -> None:
        self.client = self._client = client
        self.id = sub_id
        self.request = request  # what was asked for: its filter or composite
        self._queue = queue

    @property
    def dropped(self) -> int:
        """Deliveries this (lossy) subscription dropped for a consumer that fell behind."""
        return self._queue.dropped

    async def next(self, timeout: float | None = None) -> Delivery:
        if self._queue is self.client._queue:
            raise RuntimeError("this subscription delivers to the client's merged stream: use client.next()")
        return await super().next(timeout)

    async def unsubscribe(self) -> None:
        await self.client.unsubscribe(self.id)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.client.closed:
            await self.unsubscribe()
