"""The monitor's I/O: subscribe, feed deliveries to the model, show it, decide the exit status."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from contextlib import nullcontext

from rich.console import Console
from rich.live import Live

from broker.client import Client
from broker.transport.link import LinkClosed
from broker.transport.uri import BrokerURI
from wfm.monitor.model import Model
from wfm.monitor.view import render
from workflow_messages import monitor_subscriptions

__all__ = ["TIMED_OUT", "monitor"]

TIMED_OUT = 2
# After the watched generations end, statuses that took a longer path through the overlay may
# still be on their way (APPL_END can overtake them): wait this long for them before the last render.
SETTLE = 0.3


async def monitor(
    uri: BrokerURI,
    workflow: str | None,
    gids: Sequence[str],
    forever: bool,
    as_json: bool,
    timeout: float | None,
) -> int:
    """Follow generations until the watched ones end (or forever): their exit status (0 or 1), or
    TIMED_OUT. ConnectError / ConnectionError when the broker cannot be reached or goes away."""
    async with await Client.connect(uri) as client:
        for subscription in monitor_subscriptions(workflow, gids):
            await client.subscribe(subscription, own_queue=False)
        model = Model(gids)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        settled: float | None = None  # when to stop, once the watched generations have ended
        live = nullcontext() if as_json else Live(render(model), console=Console(), auto_refresh=False)
        with live:
            while True:
                now = loop.time()
                if settled is not None and now >= settled:
                    return model.exit_status()
                if deadline is not None and now >= deadline:
                    return TIMED_OUT
                limits = [t - now for t in (deadline, settled) if t is not None]
                try:
                    delivery = await client.next(min(limits) if limits else None)
                except TimeoutError:
                    continue
                except LinkClosed as error:
                    raise ConnectionError(f"connection to {uri} lost: {error}") from None
                event = model.receive(dict(delivery.publication))
                if as_json and event is not None:
                    print(json.dumps(event.record(), ensure_ascii=False), flush=True)
                if isinstance(live, Live):
                    live.update(render(model), refresh=True)
                if not forever and settled is None and model.done:
                    settled = loop.time() + SETTLE
