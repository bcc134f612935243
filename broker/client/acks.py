"""Acknowledgements and receipts (the alert server's, seed 001), as messages others can subscribe to.

A publication whose quality of service asks ``ack=receipt`` is acknowledged by each subscriber's
client library as soon as that client has it; one that asks ``ack=client``, when the
subscriber's application says so (``client.ack(delivery)``). Either way the acknowledgement is a
publication of class ``ACK``: ``id`` the acknowledged publication's overlay-wide id, ``mid`` its
publisher's own id for it, ``kind`` (``receipt`` or ``client``) and ``publisher`` (the client that
published it). So it travels in custody like any publication, and an operator's console can
subscribe to the acks of a job's alerts as to anything else. Who acknowledged is the ACK's own
publisher as its edge broker named it (in the ACK's id), never an attribute it claims.

A publisher that asks for acks subscribes to those of its own publications before the first such
publication goes (``watch``); ``receipt(pub_id, timeout)`` returns the first that came.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.client.streams import Delivery, Subscription
from broker.language import Publication
from broker.messages import publisher_of

if TYPE_CHECKING:
    from broker.client.client import Client

__all__ = ["ACK_ADVERTISEMENT", "ACK_CLASS", "Acks", "Receipt"]

log = logging.getLogger(__name__)

ACK_CLASS = "ACK"
ACK_ADVERTISEMENT = (
    "[class,eq,'ACK'],[id,isPresent,''],[mid,isPresent,''],[kind,isPresent,''],[publisher,isPresent,'']"
)
KEPT = 10_000  # acks remembered for a later ``receipt`` call, the latest


@dataclass(frozen=True, slots=True)
class Receipt:
    """An acknowledgement of one of our publications: ``kind`` ``receipt`` or ``client``, and
    ``by`` the client that acknowledged it."""

    id: str
    mid: str
    kind: str
    by: str


class Acks:
    """One client's acknowledgements: those it sends, and those it waits for."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.got: OrderedDict[str, Receipt] = OrderedDict()  # publication id -> its first ack
        self._waiting: dict[str, list[asyncio.Future[Receipt]]] = {}
        self._advertised: asyncio.Future[None] | None = None
        self._watching: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # sending ------------------------------------------------------------------------------------

    def received(self, delivery: Delivery) -> None:
        """The client has ``delivery``: its automatic receipt goes, if its publisher asked."""
        if delivery.qos.ack == "receipt":
            task = asyncio.get_running_loop().create_task(self._send(delivery, "receipt"))
            self._tasks.add(task)
            task.add_done_callback(self._sent)

    async def ack(self, delivery: Delivery) -> None:
        """The application's acknowledgement of ``delivery``, whose publisher asked for one."""
        if delivery.qos.ack != "client":
            raise ValueError(f"the publisher of {delivery.id} asked for no client acknowledgement")
        await self._send(delivery, "client")

    async def _send(self, delivery: Delivery, kind: str) -> None:
        if self._advertised is None:
            self._advertised = asyncio.ensure_future(self._advertise())
        await asyncio.shield(self._advertised)
        attributes = {"id": delivery.id, "mid": delivery.qos.mid, "kind": kind}
        await self.client.publish(
            Publication(ACK_CLASS, attributes | {"publisher": publisher_of(delivery.id)})
        )

    async def _advertise(self) -> None:
        await self.client.advertise(ACK_ADVERTISEMENT)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            self.client.counters["lost.receipts"] += 1
            log.warning("client %s: a receipt was not sent: %s", self.client.id, error)

    # waiting ------------------------------------------------------------------------------------

    async def watch(self) -> None:
        """Subscribe to the acks of this client's publications (once): before the first
        publication that asks for them goes, so none comes before we listen."""
        if self._watching is None:
            self._watching = asyncio.ensure_future(self._subscribe())
        await asyncio.shield(self._watching)

    @property
    def watching(self) -> bool:
        return self._watching is not None and self._watching.done() and not self._watching.exception()

    async def _subscribe(self) -> None:
        mine = f"[class,eq,'{ACK_CLASS}'],[publisher,eq,'{self.client.id}']"
        subscription = await self.client.subscribe(mine)
        task = asyncio.get_running_loop().create_task(self._read(subscription))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read(self, subscription: Subscription) -> None:
        async for delivery in subscription:
            fields = delivery.publication
            receipt = Receipt(
                str(fields["id"]), str(fields["mid"]), str(fields["kind"]), publisher_of(delivery.id)
            )
            self.got.setdefault(receipt.id, receipt)
            while len(self.got) > KEPT:
                self.got.popitem(last=False)
            for waiter in self._waiting.pop(receipt.id, []):
                if not waiter.done():
                    waiter.set_result(receipt)

    async def receipt(self, publication_id: str, timeout: float) -> Receipt:
        """The first acknowledgement of our publication ``publication_id`` (``publish``'s
        answer); TimeoutError if none comes within ``timeout`` seconds."""
        if (got := self.got.get(publication_id)) is not None:
            return got
        waiter: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(publication_id, []).append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await waiter
        finally:
            waiters = self._waiting.get(publication_id, [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._waiting.pop(publication_id, None)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
