"""The dashboard's Alerts page: the alerts of failed jobs no operator has acknowledged yet
(``wfm.alerts``), kept by one subscription to them (the overlay retains them, so it brings every
one still kept) and one to their acks (an alert acknowledged anywhere leaves the page), and the
Acknowledge button."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.client import Client, ConnectError, Delivery, Subscription
from broker.client.acks import ACK_CLASS
from broker.client.reconnect import BrokerList
from broker.errors import LinkClosed, WfmError
from wfm.alerts import ALERTS, acknowledge, named, record

__all__ = ["AlertBoard"]

RECONNECT_AFTER = 1.0  # seconds before the subscriptions are tried again


@dataclass
class AlertBoard:
    alerts: dict[str, Delivery] = field(default_factory=dict)  # publication id -> the alert
    error: str | None = "connecting ..."
    client: Client | None = None

    async def follow(self, brokers: BrokerList, changed: Callable[[], None]) -> None:
        """The two subscriptions, for ever (again after a connection is lost for good)."""
        while True:
            try:
                async with await Client.connect(brokers) as client:
                    alerts = await client.subscribe(ALERTS)
                    acks = await client.subscribe(f"[class,eq,{ACK_CLASS}]")
                    self.client, self.error = client, None
                    changed()
                    await asyncio.gather(self._take(alerts, changed), self._drop(acks, changed))
            except (WfmError, ConnectError, ConnectionError, OSError, LinkClosed) as error:
                self.error = f"not subscribed to alerts: {error}"
            self.client = None
            changed()
            await asyncio.sleep(RECONNECT_AFTER)

    async def _take(self, stream: Subscription, changed: Callable[[], None]) -> None:
        async for delivery in stream:
            self.alerts[delivery.id] = delivery
            changed()

    async def _drop(self, stream: Subscription, changed: Callable[[], None]) -> None:
        async for ack in stream:
            if self.alerts.pop(str(ack.publication.get("id")), None) is not None:
                changed()

    def records(self, now: float | None = None) -> list[dict[str, Any]]:
        """The alerts, the newest first; one whose time to live has run out (the overlay no longer
        keeps it, and it would be delivered to no one) is forgotten, not shown."""
        now = time.time() if now is None else now
        for gone in [pub_id for pub_id, d in self.alerts.items() if d.qos.expired(now)]:
            del self.alerts[gone]
        return sorted((record(d) for d in self.alerts.values()), key=lambda r: -float(r["time"]))

    async def acknowledge(self, wanted: str) -> dict[str, Any]:
        """Acknowledge the alert ``wanted`` names (as listed); ValueError if none waits."""
        client = self.client
        if client is None:
            raise ConnectError(self.error or "not subscribed to alerts")
        found = named(self.alerts.values(), wanted)
        if found is None:
            raise ValueError(f"no alert {wanted} waits for an acknowledgement")
        await acknowledge(client, found)
        self.alerts.pop(found.id, None)
        return record(found)
