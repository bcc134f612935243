"""The monitor's I/O: subscribe, feed deliveries to the :class:`Monitor`, decide when to stop.

Showing is the caller's: it is called back after each delivery and reads ``service.monitor``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from broker.client import Brokers, Client
from broker.errors import LinkClosed
from wfm.monitor.model import Monitor, StatusEvent
from workflow_messages import monitor_subscriptions

__all__ = ["TIMED_OUT", "MonitorService"]

TIMED_OUT = 2
# After the watched generations end, statuses that took a longer path through the overlay may
# still be on their way (APPL_END can overtake them): wait this long for them before the last render.
SETTLE = 0.3


class MonitorService:
    """A :class:`Monitor` fed by one connection subscribed to a workflow's (or every workflow's)
    Triggers and job statuses. Open it with :meth:`connect`."""

    def __init__(self, client: Client, uri: Brokers, gids: Sequence[str]) -> None:
        self.client = client
        self.uri = uri
        self.monitor = Monitor(gids)

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, uri: Brokers, workflow: str | None, gids: Sequence[str]
    ) -> AsyncIterator[MonitorService]:
        """Subscribed and ready; ConnectError when the broker cannot be reached."""
        async with await Client.connect(uri) as client:
            for subscription in monitor_subscriptions(workflow, gids):
                await client.subscribe(subscription, own_queue=False)
            yield cls(client, uri, gids)

    async def run(
        self, forever: bool, timeout: float | None, received: Callable[[StatusEvent | None], None]
    ) -> int:
        """Follow generations until the watched ones end (or forever), calling ``received`` after
        each delivery with the job status it carried (None for a Trigger or anything else): their
        exit status (0 or 1), or TIMED_OUT. ConnectionError when the broker goes away."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        settled: float | None = None  # when to stop, once the watched generations have ended
        while True:
            now = loop.time()
            if settled is not None and now >= settled:
                return self.monitor.exit_status()
            if deadline is not None and now >= deadline:
                return TIMED_OUT
            limits = [t - now for t in (deadline, settled) if t is not None]
            try:
                delivery = await self.client.next(min(limits) if limits else None)
            except TimeoutError:
                continue
            except LinkClosed as error:
                raise ConnectionError(f"connection to {self.uri} lost: {error}") from None
            received(self.monitor.receive(dict(delivery.publication)))
            if not forever and settled is None and self.monitor.done:
                settled = loop.time() + SETTLE
