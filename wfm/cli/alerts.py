"""``wfm alerts`` and ``wfm alerts ack ID``: the alerts of failed jobs that no operator has
acknowledged yet (``workflow_messages.alerts``), from whichever broker the operator connects to.

An alert is retained by the overlay, so subscribing to alerts returns every one still kept; the
list is complete once none has come for ``--wait`` seconds. Acknowledging one sends its ack (an
``ACK`` publication, which its agent and anyone else may subscribe to) and cancels it, so it
disappears for every operator.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from broker.client import Brokers, Client, Delivery
from wfm.cli.options import broker_option, output_option
from workflow_messages.alerts import ALERT

QUIET = 1.0  # seconds without a new alert after which the list is complete

wait_option = click.option(
    "--wait",
    type=click.FloatRange(0.1, 60),
    default=QUIET,
    show_default=True,
    help="Seconds without a new alert after which the list is complete.",
)


async def _waiting(client: Client, quiet: float) -> list[Delivery]:
    """The alerts the overlay keeps, each once."""
    stream = await client.subscribe(f"[class,eq,{ALERT}]")
    found: dict[str, Delivery] = {}
    while True:
        try:
            delivery = await stream.next(timeout=quiet)
        except TimeoutError:
            return list(found.values())
        found.setdefault(delivery.id, delivery)


def _record(delivery: Delivery) -> dict[str, Any]:
    fields = delivery.publication
    return {
        "id": delivery.qos.mid or delivery.id,
        "workflow": fields.get("applname"),
        "job": fields.get("jobname"),
        "gid": fields.get("GID"),
        "status": fields.get("status"),
        "detail": fields.get("detail"),
        "agent": fields.get("agentname"),
        "time": delivery.time,
        "priority": delivery.qos.priority,
        "publication_id": delivery.id,
    }


@click.command()
@click.argument("action", required=False, type=click.Choice(["ack"]))
@click.argument("alert_id", metavar="[ID]", required=False)
@broker_option
@wait_option
@output_option
def alerts(action: str | None, alert_id: str | None, broker_uri: Brokers, wait: float, output: str) -> None:
    """The alerts of failed jobs not acknowledged yet, the newest first; ``ack ID`` acknowledges
    alert ID (as listed): its ack goes out, and it is gone for every operator."""
    if action == "ack":
        if not alert_id:
            raise click.UsageError("ack needs the ID of an alert (wfm alerts lists them)")
        _acknowledge(broker_uri, wait, alert_id)
        return
    if alert_id:
        raise click.UsageError(f"unexpected {alert_id!r}: wfm alerts [ack ID]")

    async def main() -> list[Delivery]:
        async with await Client.connect(broker_uri) as client:
            return await _waiting(client, wait)

    records = sorted((_record(d) for d in asyncio.run(main())), key=lambda r: -float(r["time"]))
    if output == "json":
        for record in records:
            click.echo(json.dumps(record, ensure_ascii=False))
        return
    table = Table("id", "workflow", "job", "gid", "status", "age", "detail")
    now = time.time()
    for r in records:
        age = f"{max(0.0, now - float(r['time'])):.0f} s"
        table.add_row(r["id"], r["workflow"], r["job"], r["gid"], r["status"], age, str(r["detail"] or ""))
    Console().print(table)
    click.echo(f"{len(records)} alerts wait for an acknowledgement", err=True)


def _acknowledge(broker_uri: Brokers, wait: float, alert_id: str) -> None:
    async def main() -> bool:
        async with await Client.connect(broker_uri) as client:
            for delivery in await _waiting(client, wait):
                if alert_id in (delivery.qos.mid, delivery.id):
                    await client.ack(delivery)
                    await client.cancel(alert_id)
                    return True
            return False

    if not asyncio.run(main()):
        raise click.ClickException(
            f"no alert {alert_id} waits for an acknowledgement (wfm alerts lists them)"
        )
    click.echo(f"acknowledged {alert_id}", err=True)
