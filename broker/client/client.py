"""The async client: ``client = await Client.connect(uri)``, then advertise, subscribe, publish.

Every request returns once the edge broker has accepted it (with the overlay-wide id it got) or
raises ``RefusedError`` with the broker's reason. Each delivery lands on exactly one bounded
queue: its subscription's own (``async for delivery in sub``, the default) or, for subscriptions
made with ``own_queue=False``, the client's merged stream (``async for delivery in client``). A
consumer that falls behind by more than ``queue_limit`` deliveries loses the oldest, counted in
``client.dropped`` and logged, rather than growing without bound.

``publish_nowait`` pipelines publications without waiting for each acknowledgement, for
throughput; a refusal of one of them is logged and kept in ``client.refusals``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from broker.errors import BadMessage, ConnectError, LinkClosed, NoAnswer, RefusedError
from broker.language import Composite, Filter, Publication, parse_composite, parse_filter, parse_publication
from broker.routing import (
    Ack,
    Advertise,
    CompositeSubscribe,
    Deliver,
    Notify,
    Publish,
    Refuse,
    StatusReply,
    StatusRequest,
    Subscribe,
    Unadvertise,
    Unsubscribe,
)
from broker.transport.codec import Hello, Ping, Pong
from broker.transport.link import Link
from broker.transport.uri import BrokerURI

__all__ = ["Client", "ConnectError", "Delivery", "RefusedError", "Subscription"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Delivery:
    """A publication for a subscription; for a composite subscription, ``publications`` holds
    every publication of the firing and ``publication`` is the first of them."""

    subscription: str
    publication: Publication
    publications: tuple[Publication, ...] = ()
    id: str = ""  # the publication's overlay-wide id (who published it), for a plain delivery
    time: float = 0.0  # when its edge broker accepted it


class _Queue:
    """A bounded delivery queue that drops the oldest entry when full."""

    def __init__(self, limit: int, owner: Client) -> None:
        self.queue: asyncio.Queue[Delivery | None] = asyncio.Queue()
        self.limit = limit
        self.owner = owner

    def put(self, item: Delivery | None) -> None:
        if item is not None and self.queue.qsize() >= self.limit:
            self.queue.get_nowait()
            self.owner.dropped += 1
            if self.owner.dropped in (1, 10, 100) or self.owner.dropped % 1000 == 0:
                log.warning("slow consumer: %d deliveries dropped so far", self.owner.dropped)
        self.queue.put_nowait(item)

    async def get(self, timeout: float | None) -> Delivery | None:
        if not self.queue.empty():  # no timer, no task: wait_for costs more than the delivery
            return self.queue.get_nowait()
        if timeout is None:
            return await self.queue.get()
        return await asyncio.wait_for(self.queue.get(), timeout)


class _Stream:
    """Deliveries from one queue: ``await next(timeout)`` or ``async for``; ends at disconnect."""

    _queue: _Queue

    async def next(self, timeout: float | None = None) -> Delivery:
        """The next delivery; ``TimeoutError`` after ``timeout`` seconds, ``LinkClosed`` at the end."""
        item = await self._queue.get(timeout)
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


class Subscription(_Stream):
    """A live subscription: its overlay-wide id and its own stream of deliveries."""

    def __init__(
        self, client: Client, sub_id: str, request: Subscribe | CompositeSubscribe, queue: _Queue
    ) -> None:
        self.client = client
        self.id = sub_id
        self.request = request  # what was asked for: its filter or composite
        self._queue = queue

    async def next(self, timeout: float | None = None) -> Delivery:
        if self._queue is self.client._queue:
            raise RuntimeError("this subscription delivers to the client's merged stream: use client.next()")
        return await super().next(timeout)

    async def unsubscribe(self) -> None:
        await self.client.unsubscribe(self.id)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.client.connected:
            await self.unsubscribe()


class Client(_Stream):
    def __init__(
        self, link: Link, client_id: str, broker_id: str, queue_limit: int, request_timeout: float = 30.0
    ) -> None:
        self.link = link
        self.id = client_id
        self.broker_id = broker_id
        self.queue_limit = queue_limit
        self.request_timeout = request_timeout  # seconds to wait for the broker to answer a request
        self.dropped = 0
        self.refusals: list[Refuse] = []
        self.subscriptions: dict[str, Subscription] = {}
        self._queue = _Queue(queue_limit, self)
        self._pending: dict[str, asyncio.Future[object]] = {}
        self._awaiting_ack: dict[str, Subscription] = {}
        self._refs = itertools.count(1)
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(
        cls,
        uri: BrokerURI | str,
        client_id: str | None = None,
        queue_limit: int = 100_000,
        timeout: float = 10.0,
        request_timeout: float = 30.0,
    ) -> Client:
        """Connect within ``timeout`` seconds; afterwards each request (advertise, subscribe,
        publish, status...) raises ``NoAnswer`` if the broker has not answered it within
        ``request_timeout`` seconds."""
        target = BrokerURI.parse(uri) if isinstance(uri, str) else uri
        name = client_id or f"c-{uuid.uuid4().hex[:10]}"
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(target.host, target.port), timeout
            )
        except (OSError, TimeoutError) as error:
            raise ConnectError(f"cannot connect to {target}: {error or 'timed out'}") from None
        link = Link(reader, writer, target.id)
        link.send(Hello("client", name))
        try:
            items = await asyncio.wait_for(link.receive(), timeout)
        except (TimeoutError, LinkClosed) as error:
            await link.wait_closed()
            raise ConnectError(f"{target} did not answer the handshake: {error or 'timed out'}") from None
        first = items[0]
        if isinstance(first, Refuse):
            await link.wait_closed()
            raise ConnectError(f"{target} refused the connection: {first.reason}")
        if not isinstance(first, Hello) or first.id != target.id:
            await link.wait_closed()
            raise ConnectError(f"{target} answered as {getattr(first, 'id', first)!r}, not {target.id!r}")
        client = cls(link, name, first.id, queue_limit, request_timeout)
        for item in items[1:]:
            client._handle(item)
        return client

    @property
    def connected(self) -> bool:
        return self.link.closed is None

    # requests -----------------------------------------------------------------------------------

    async def _request(self, message: object, ref: str) -> object:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._pending[ref] = future
        if not self.link.send(message):  # type: ignore[arg-type]
            self._pending.pop(ref, None)
            raise LinkClosed(self.link.closed or "connection closed")
        try:
            return await asyncio.wait_for(future, self.request_timeout)
        except TimeoutError:
            self._pending.pop(ref, None)
            what = f"{type(message).__name__} {ref} within {self.request_timeout:g} s"
            raise NoAnswer(f"{self.broker_id} did not answer {what}") from None

    async def advertise(self, advertisement: Filter | str) -> str:
        ref = str(next(self._refs))
        return str(await self._request(Advertise(ref, _filter(advertisement)), ref))

    async def unadvertise(self, adv_id: str) -> None:
        await self._request(Unadvertise(adv_id), adv_id)

    async def subscribe(self, subscription: Filter | str, own_queue: bool = True) -> Subscription:
        """Subscribe; deliveries go to the returned subscription's queue, or with
        ``own_queue=False`` to the client's merged stream."""
        parsed = _filter(subscription)
        return await self._subscribe(lambda ref: Subscribe(ref, parsed), own_queue)

    async def _subscribe(
        self, request: Callable[[str], Subscribe | CompositeSubscribe], own_queue: bool
    ) -> Subscription:
        ref = str(next(self._refs))
        message = request(ref)
        queue = _Queue(self.queue_limit, self) if own_queue else self._queue
        sub = Subscription(self, "", message, queue)
        # Registered when the ack is read, not when this coroutine resumes: deliveries that came
        # in the same read as the ack must already find their subscription.
        self._awaiting_ack[ref] = sub
        try:
            await self._request(message, ref)
        finally:
            self._awaiting_ack.pop(ref, None)
        return sub

    async def subscribe_composite(
        self, composite: Composite | str, clear: Filter | str | None = None, own_queue: bool = True
    ) -> Subscription:
        """A composite subscription; each firing is one Delivery with all its publications.
        ``clear`` (a filter that may use the composite's variables) drops waiting state under the
        bindings of each publication it matches."""
        parsed = parse_composite(composite) if isinstance(composite, str) else composite
        condition = parse_filter(clear, allow_variables=True) if isinstance(clear, str) else clear
        return await self._subscribe(lambda ref: CompositeSubscribe(ref, parsed, condition), own_queue)

    async def unsubscribe(self, sub_id: str) -> None:
        await self._request(Unsubscribe(sub_id), sub_id)
        self.subscriptions.pop(sub_id, None)

    async def publish(self, publication: Publication | str) -> str:
        ref = str(next(self._refs))
        return str(await self._request(Publish(ref, _publication(publication)), ref))

    def publish_nowait(self, publication: Publication | str) -> None:
        ref = f"n{next(self._refs)}"
        if not self.link.send(Publish(ref, _publication(publication), ack=False)):
            raise LinkClosed(self.link.closed or "connection closed")

    async def status(self) -> dict[str, object]:
        ref = str(next(self._refs))
        reply = await self._request(StatusRequest(ref), ref)
        assert isinstance(reply, dict)
        return reply

    # deliveries ---------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        try:
            while True:
                for item in await self.link.receive():
                    self._handle(item)
        except (LinkClosed, ValueError) as error:
            self.link.close(str(error) or "closed")
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(LinkClosed(self.link.closed or "connection closed"))
            self._pending.clear()
            self._queue.put(None)
            for sub in self.subscriptions.values():
                if sub._queue is not self._queue:
                    sub._queue.put(None)

    def _handle(self, item: object) -> None:
        if isinstance(item, Deliver):
            for sub_id in item.subscriptions:
                sub = self.subscriptions.get(sub_id)
                delivery = Delivery(sub_id, item.publication, (), item.id, item.time)
                (sub._queue if sub is not None else self._queue).put(delivery)
        elif isinstance(item, Notify):
            sub = self.subscriptions.get(item.subscription)
            delivery = Delivery(item.subscription, item.publications[0], item.publications)
            (sub._queue if sub is not None else self._queue).put(delivery)
        elif isinstance(item, Ack | StatusReply):
            sub = self._awaiting_ack.pop(item.ref, None)
            if sub is not None and isinstance(item, Ack):
                sub.id = item.id
                self.subscriptions[item.id] = sub
            future = self._pending.pop(item.ref, None)
            if future is not None and not future.done():
                future.set_result(item.id if isinstance(item, Ack) else item.status)
        elif isinstance(item, Refuse):
            future = self._pending.pop(item.ref, None)
            if future is not None and not future.done():
                future.set_exception(RefusedError(item.reason))
            else:
                self.refusals.append(item)
                log.warning("broker refused %s: %s", item.ref or "a message", item.reason)
        elif isinstance(item, Ping):
            self.link.send(Pong())
        elif isinstance(item, BadMessage):
            log.warning("bad message from the broker: %s", item)

    async def close(self) -> None:
        self.link.close("client closed")
        await self.link.wait_closed()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _filter(value: Filter | str) -> Filter:
    return parse_filter(value) if isinstance(value, str) else value


def _publication(value: Publication | str) -> Publication:
    return parse_publication(value) if isinstance(value, str) else value
