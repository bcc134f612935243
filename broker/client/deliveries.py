"""What a client's broker delivers: into the queue of each delivery's subscription, dropped when it
comes twice, and what the client tells the broker it took.

Deliveries name their subscription by its id at the current broker; each is handed to the caller
under the id the caller knows (see ``requests``). A subscription the client no longer knows (one
just withdrawn) delivers to the merged stream. A delivery the broker carried in custody counts
until its consumer is done with it (see ``receipts``); the Took that says so waits a little when
the consumer has caught up, to cover what it takes meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

from broker.client.queues import Seen
from broker.client.receipts import DELAY, Receipts
from broker.client.requests import Requests
from broker.client.streams import Delivery, Queue, Subscription
from broker.messages import DEFAULT_QOS, Carry, Deliver, Notify, Qos

__all__ = ["Deliveries"]

log = logging.getLogger(__name__)


class Deliveries:
    """The deliveries of one client: ``merged`` takes those of subscriptions without a queue of
    their own; ``took`` tells the broker the last seq taken (when a link is up)."""

    def __init__(
        self,
        requests: Requests[asyncio.Future[object], Subscription],
        receipts: Receipts,
        merged: Queue,
        counters: Counter[str],
        took: Callable[[int], None],
        received: Callable[[Delivery], None],
    ) -> None:
        self.requests, self.merged, self.counters = requests, merged, counters
        self.receipts = receipts
        self._took = took
        self._received = received  # a publication arrived (once, whatever its subscriptions)
        self._seen = Seen()
        self._took_timer: asyncio.TimerHandle | None = None  # a Took is due when it fires

    def carried(self, item: Carry) -> None:
        """A message the broker keeps in custody until told it was taken."""
        if item.seq <= self.receipts.received:  # sent again: our Took was lost on the way
            self.counters["dropped.resent"] += 1
            self.receipts.again()
            self._say_took(True)
        elif isinstance(item.message, Deliver | Notify):
            self.receipts.arrived(item.seq, self.deliver(item.message, item.seq))
            self._say_took(False)
        else:
            self.counters["bad_messages"] += 1
            log.warning("the broker carried a %s to a client", type(item.message).__name__)

    def deliver(self, item: Deliver | Notify, seq: int = 0) -> int:
        """Into the queues of its subscriptions: how many deliveries it made."""
        channel = self.receipts.channel if seq else ""
        if isinstance(item, Notify):
            sub = self.requests.subscription(item.subscription)
            name = sub.id if sub else item.subscription
            qos = DEFAULT_QOS if item.priority == DEFAULT_QOS.priority else Qos(priority=item.priority)
            delivery = Delivery(
                name, item.publications[0], item.publications, qos=qos, seq=seq, channel=channel
            )
            (sub._queue if sub is not None else self.merged).put(delivery)
            return 1
        if self._seen.again(item.id):
            self.counters["dropped.duplicates"] += 1
            return 0
        for sub_id in item.subscriptions:
            sub = self.requests.subscription(sub_id)
            delivery = Delivery(
                sub.id if sub else sub_id, item.publication, (), item.id, item.time, item.qos, seq, channel
            )
            (sub._queue if sub is not None else self.merged).put(delivery)
        self._received(delivery)
        return len(item.subscriptions)

    def done(self, delivery: Delivery, caught_up: bool) -> None:
        """A consumer is done with a delivery (or a lossy queue dropped it)."""
        if delivery.seq:
            self.receipts.done(delivery.channel, delivery.seq)
            self._say_took(caught_up)

    def _say_took(self, caught_up: bool) -> None:
        """Took, now (every ``BATCH`` deliveries) or, caught up, ``DELAY`` later: a consumer is
        caught up after nearly every delivery of a steady stream, and one Took covers all it
        took meanwhile (it is cumulative; one per delivery cost the broker a message each, see
        ``receipts``). Never more than ``BATCH`` untold, caught up or not: the broker carries
        only a window of deliveries before it hears (``broker.routing.backlog``)."""
        taken = self.receipts.due(False)
        if taken is not None:
            self._took(taken)
        elif caught_up and self._took_timer is None:
            self._took_timer = asyncio.get_running_loop().call_later(DELAY, self.took_now)

    def took_now(self) -> None:
        """Send the Took that waits, if one does (the broker must have it before a Bye)."""
        if self._took_timer is not None:
            self._took_timer.cancel()
            self._took_timer = None
        self._send_took(self.receipts.due(True))

    def _send_took(self, taken: int | None) -> None:
        if taken is not None:
            self._took(taken)
