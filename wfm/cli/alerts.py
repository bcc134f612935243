"""``wfm alerts`` and ``wfm alerts ack ID``: the alerts of failed jobs that no operator has
acknowledged yet (``wfm.alerts``), from whichever broker the operator connects to; complete once
none has come for ``--wait`` seconds."""

from __future__ import annotations

import asyncio
import json
import time

import click
from rich.console import Console
from rich.table import Table

from broker.client import Brokers, Client, Delivery
from wfm.alerts import ALERTS, acknowledge, named, record, waiting
from wfm.cli.options import broker_option, output_option

QUIET = 1.0  # seconds without a new alert after which the list is complete

wait_option = click.option(
    "--wait",
    type=click.FloatRange(0.1, 60),
    default=QUIET,
    show_default=True,
    help="Seconds without a new alert after which the list is complete.",
)


@click.command()
@click.argument("action", required=False, type=click.Choice(["ack"]))
@click.argument("wanted", metavar="[ID]", required=False)
@broker_option
@wait_option
@output_option
def alerts(action: str | None, wanted: str | None, broker_uri: Brokers, wait: float, output: str) -> None:
    """The alerts of failed jobs not acknowledged yet, the newest first; ``ack ID`` acknowledges
    alert ID (as listed): its ack goes out, and it is gone for every operator."""
    if action == "ack":
        if not wanted:
            raise click.UsageError("ack needs the ID of an alert (wfm alerts lists them)")
        _acknowledge(broker_uri, wait, wanted)
        return
    if wanted:
        raise click.UsageError(f"unexpected {wanted!r}: wfm alerts [ack ID]")

    async def main() -> list[Delivery]:
        async with await Client.connect(broker_uri) as client:
            return await waiting(await client.subscribe(ALERTS), wait)

    records = sorted((record(d) for d in asyncio.run(main())), key=lambda r: -float(r["time"]))
    if output == "json":
        for found in records:
            click.echo(json.dumps(found, ensure_ascii=False))
        return
    table = Table("id", "workflow", "job", "gid", "status", "age", "detail")
    now = time.time()
    for r in records:
        age = f"{max(0.0, now - float(r['time'])):.0f} s"
        table.add_row(r["id"], r["workflow"], r["job"], r["gid"], r["status"], age, str(r["detail"] or ""))
    Console().print(table)
    click.echo(f"{len(records)} alerts wait for an acknowledgement", err=True)


def _acknowledge(broker_uri: Brokers, wait: float, wanted: str) -> None:
    async def main() -> bool:
        async with await Client.connect(broker_uri) as client:
            found = named(await waiting(await client.subscribe(ALERTS), wait), wanted)
            if found is not None:
                await acknowledge(client, found)
            return found is not None

    if not asyncio.run(main()):
        raise click.ClickException(f"no alert {wanted} waits for an acknowledgement (wfm alerts lists them)")
    click.echo(f"acknowledged {wanted}", err=True)
