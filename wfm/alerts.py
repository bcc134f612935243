"""The alerts of failed jobs (``workflow_messages.alerts``) as operators see them: ``wfm alerts``
and the dashboard's Alerts page.

Alerts are retained by the overlay, so a subscription to them returns every one still kept; an
acknowledgement sends the alert's ack (an ``ACK`` publication) and cancels it, so it is gone for
every operator.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from broker.client import Client, Delivery, Subscription
from workflow_messages.alerts import ALERT

__all__ = ["ALERTS", "acknowledge", "alert_id", "named", "record", "waiting"]

ALERTS = f"[class,eq,{ALERT}]"


def alert_id(delivery: Delivery) -> str:
    """The id an operator names an alert by: its own (``W.J.G``), else its publication id."""
    return delivery.qos.mid or delivery.id


def named(alerts: Iterable[Delivery], wanted: str) -> Delivery | None:
    """The alert ``wanted`` names: by its id as listed, or by its publication id."""
    return next((d for d in alerts if wanted in (alert_id(d), d.id)), None)


def record(delivery: Delivery) -> dict[str, Any]:
    """An alert as JSON-ready data."""
    fields = delivery.publication
    return {
        "id": alert_id(delivery),
        "workflow": fields.get("applname"),
        "job": fields.get("jobname"),
        "gid": fields.get("GID"),
        "status": fields.get("status"),
        "detail": fields.get("detail"),
        "agent": fields.get("agentname"),
        "time": delivery.time,
        "priority": delivery.qos.priority,
        "expires": delivery.qos.expires,  # None: it never expires
        "publication_id": delivery.id,
    }


async def waiting(stream: Subscription, quiet: float) -> list[Delivery]:
    """The alerts a fresh subscription to them brings, each once: complete when none came for
    ``quiet`` seconds."""
    found: dict[str, Delivery] = {}
    while True:
        try:
            delivery = await stream.next(timeout=quiet)
        except TimeoutError:
            return list(found.values())
        found.setdefault(delivery.id, delivery)


async def acknowledge(client: Client, delivery: Delivery) -> None:
    """The alert's ack goes out, and the alert is cancelled for everyone."""
    await client.ack(delivery)
    await client.cancel(alert_id(delivery))
