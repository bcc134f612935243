"""The monitor's I/O: subscribe, feed deliveries to the :class:`Monitor`, decide when to stop.

Showing is the caller's: it is called back after each delivery and reads ``service.monitor``.
A monitor sees only what is published after it subscribes; for generations named by gid,
:meth:`MonitorService.catch_up` asks the historians what they already hold, so ``wfm trigger``
followed by ``wfm monitor --gid G`` shows the whole generation even if it has ended meanwhile.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from broker.client import Brokers, Client
from broker.clock import SYSTEM, Clock
from broker.errors import LinkClosed
from broker.language import Filter
from wfm.history.asker import HistoryError, ask
from wfm.monitor.model import Monitor, StatusEvent
from workflow_messages import monitor_subscriptions

__all__ = ["MonitorService"]
# After the watched generations end, statuses that took a longer path through the overlay may
# still be on their way (APPL_END can overtake them): wait this long for them before the last render.
SETTLE = 0.3
TICK = 0.2  # seconds between two looks at whether the history has ended the watched generations


class MonitorService:
    """A :class:`Monitor` fed by one connection subscribed to a workflow's (or every workflow's)
    Triggers and job statuses. Open it with :meth:`connect`."""

    def __init__(self, client: Client, uri: Brokers, gids: Sequence[str], clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.client = client
        self.uri = uri
        self.monitor = Monitor(gids)
        self.subscriptions: list[Filter] = []

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, uri: Brokers, workflow: str | None, gids: Sequence[str]
    ) -> AsyncIterator[MonitorService]:
        """Subscribed and ready; ConnectError when the broker cannot be reached."""
        async with await Client.connect(uri) as client:
            service = cls(client, uri, gids)
            service.subscriptions = monitor_subscriptions(workflow, gids)
            for subscription in service.subscriptions:
                await client.subscribe(subscription, own_queue=False)
            yield service

    async def catch_up(self, timeout: float, received: Callable[[StatusEvent | None], None]) -> str | None:
        """Feed the monitor what the historians hold of its subscriptions, calling ``received`` as
        :meth:`run` does. Run it beside :meth:`run` (a historian whose Spark is still starting
        may take long, and live statuses are shown meanwhile): what is published after the
        subscriptions comes live, and a status received twice changes nothing. None, or a line
        saying why the past is missing (no historian answered within ``timeout``)."""
        asked = [
            ask(self.client, uuid.uuid4().hex, wanted, None, self.clock.time(), timeout)
            for wanted in self.subscriptions
        ]
        try:
            answers = await asyncio.gather(*asked)
        except HistoryError as error:
            return f"no history of earlier statuses ({error}): showing what is published from now on"
        results = sorted(
            (r for answer in answers for r in answer.in_time_order()), key=lambda r: (r.time, r.id)
        )
        for result in results:
            received(self.monitor.receive(dict(result.publication)))
        return None

    async def run(
        self, forever: bool, timeout: float | None, received: Callable[[StatusEvent | None], None]
    ) -> int:
        """Follow generations until the watched ones end (or forever), calling ``received`` after
        each delivery with the job status it carried (None for a Trigger or anything else): their
        exit status (0 or 1). TimeoutError after ``timeout`` seconds; ConnectionError when the
        broker goes away."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        settled: float | None = None  # when to stop, once the watched generations have ended
        while True:
            now = loop.time()
            if not forever and settled is None and self.monitor.done:  # live, or from the history
                settled = now + SETTLE
            if settled is not None and now >= settled:
                return self.monitor.exit_status()
            if deadline is not None and now >= deadline:
                raise TimeoutError(f"timed out after {timeout:g} s")
            limits = [t - now for t in (deadline, settled) if t is not None]
            try:
                delivery = await self.client.next(min([*limits, TICK]))
            except TimeoutError:
                continue
            except LinkClosed as error:
                raise ConnectionError(f"connection to {self.uri} lost: {error}") from None
            received(self.monitor.receive(dict(delivery.publication)))
