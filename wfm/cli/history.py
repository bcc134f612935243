"""``wfm history``, ``wfm compact`` and ``wfm report``: thin commands over ``wfm.history``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from broker.client import Brokers
from broker.language import Atom, Composite, Filter, ParseError, TimeRef, parse_composite, parse_filter
from wfm.cli.options import broker_uri_option, output_option
from wfm.cli.progress import progress
from wfm.cli.serving import on_signals
from wfm.history.asker import Result
from wfm.history.groups import joinable_atoms
from wfm.history.html import render_html
from wfm.history.joins import query_composite
from wfm.history.landing import StoredPublication
from wfm.history.overlay import ask_composite, ask_filter, connection
from wfm.history.queries import open_store
from wfm.history.report import HEADERS, job_report
from wfm.history.spark import MASTER_ENV
from wfm.history.store import HistoryStore
from wfm.history.windows import composite_windows, window

Stored = Result | StoredPublication
T = TypeVar("T")

store_option = click.option(
    "--store", type=click.Path(file_okay=False, path_type=Path), help="History store directory."
)
master_option = click.option(
    "--spark-master",
    envvar=MASTER_ENV,
    default=None,
    help="Spark master: local[*] (default), spark://HOST:PORT, yarn or sc://HOST:PORT (Spark Connect;"
    " sc://HOST:PORT/;token_file=FILE presents the token in FILE, the store's own server its token).",
)


class TimeType(click.ParamType):
    """now, now-2h, now+30m (s m h d) or an ISO-8601 timestamp, as epoch seconds."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return TimeRef.parse(value).resolve(time.time())
        except ValueError as error:
            self.fail(str(error), param, ctx)


TIME = TimeType()


def _open_store(store: Path | None, master: str | None) -> HistoryStore:
    if store is None:
        raise click.ClickException("give --store DIR")
    return open_store(store, master)


@click.command()
@click.argument("subscription", metavar="FILTER")
@broker_uri_option("Ask the historians through the overlay")
@store_option
@click.option("--since", type=TIME, help="From this time on (inclusive).")
@click.option(
    "--until",
    type=TIME,
    help="Up to this time (exclusive); later than now: live publications follow until then.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.1, 3600),
    default=10.0,
    show_default=True,
    help="With --broker: seconds to wait for a historian to accept the query (one that has accepted is "
    "waited for as long as it keeps saying it is answering).",
)
@master_option
@output_option
def history(
    subscription: str,
    broker_uri: Brokers | None,
    store: Path | None,
    since: float | None,
    until: float | None,
    timeout: float,
    spark_master: str | None,
    output: str,
) -> None:
    """Stored publications matching FILTER, in time order, from the historians (--broker) or
    straight from a store (--store, Spark).

    \b
    wfm history "[class,eq,JOBSTATUS],[status,eq,FAILURE],[time,>,now-7d]" --store DIR

    Through the overlay, a range that ends in the future (--until, or a time predicate with < or
    <=) is followed by live publications until it ends or Ctrl-C, each publication once.

    FILTER may also be a composite: an & of atoms whose variables join them, one group of
    publications per line, e.g. every Trigger with the JOBSTATUS of its generation:

    \b
    wfm history "{[class,eq,Trigger],[GID,eq,$S$X]}&{[class,eq,JOBSTATUS],[GID,eq,$S$X]}" --store DIR

    A composite covers the past only; through the overlay each atom is asked as a filter and the
    answers are joined here.
    """
    broker_uri = _one_source(broker_uri, store)
    if subscription.lstrip().startswith("{"):
        composite, atoms = _composite(subscription)
        groups: Iterable[tuple[Stored, ...]]
        if broker_uri is None:
            groups = _first_from_spark(
                query_composite(_open_store(store, spark_master), composite, since, until)
            )
        else:
            groups = asyncio.run(_composite_from_overlay(broker_uri, atoms, since, until, timeout))
        for group in groups:
            _show_group(group, output)
        return
    try:
        wanted = parse_filter(subscription)
    except ParseError as error:
        raise click.ClickException(f"invalid filter: {error}") from None
    if broker_uri is None:
        for stored in _first_from_spark(_open_store(store, spark_master).query(wanted, since, until)):
            _show("history", stored, output)
        return
    asyncio.run(_from_overlay(broker_uri, wanted, since, until, timeout, output))


def _first_from_spark(rows: Iterable[T]) -> Iterator[T]:
    """``rows``, the wait for the first shown as progress: Spark may be starting (seconds)."""
    with progress("querying the store with Spark") as say:
        say("waiting for the first row")
        rows = iter(rows)
        first = next(rows, None)
    if first is not None:
        yield first
        yield from rows


def _one_source(broker_uri: Brokers | None, store: Path | None) -> Brokers | None:
    """The broker to ask, or None to read ``store``: a usage error unless exactly one is given
    (``$WFM_BROKER``, which wfm up tells users to export, gives way to --store)."""
    if store is None and broker_uri is None:
        raise click.UsageError("give --broker URI or --store DIR (or set $WFM_BROKER)")
    if store is None:
        return broker_uri
    source = click.get_current_context().get_parameter_source("broker_uri")
    if broker_uri is not None and source == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("give --broker URI or --store DIR, not both")
    return None


def _composite(text: str) -> tuple[Composite, list[Atom]]:
    """The composite and its atoms; one line if it is not an & of atoms."""
    try:
        composite = parse_composite(text)
        return composite, joinable_atoms(composite)
    except (ParseError, ValueError) as error:
        raise click.ClickException(f"invalid composite: {error}") from None


async def _from_overlay(
    uri: Brokers, wanted: Filter, since: float | None, until: float | None, timeout: float, output: str
) -> None:
    """The historians' answer, then live publications until the window ends or SIGINT/SIGTERM."""
    now = time.time()
    asked_for = window(wanted, now, since, until)
    async with connection(uri) as client:
        asked = await ask_filter(client, asked_for, now, timeout)
        _warn(asked.warnings())
        for result in asked.history():
            _show(asked.id, result, output)
        stop = asyncio.Event()
        on_signals(stop.set)
        async for result in asked.follow(stop):
            _show(asked.id, result, output)


async def _composite_from_overlay(
    uri: Brokers, atoms: Sequence[Atom], since: float | None, until: float | None, timeout: float
) -> list[tuple[Result, ...]]:
    windows = composite_windows(atoms, time.time(), since, until)
    async with connection(uri) as client:
        groups, warnings = await ask_composite(client, atoms, windows, timeout)
    _warn(warnings)
    return groups


def _warn(warnings: Iterable[str]) -> None:
    for warning in warnings:
        click.echo(f"wfm: warning: {warning}", err=True)


def _show_group(group: tuple[Stored, ...], output: str) -> None:
    if output == "json":
        record = {"subscription": "history", "publications": [_delivered(s) for s in group]}
        click.echo(json.dumps(record, ensure_ascii=False))
    else:
        click.echo("  &  ".join(map(_line, group)))


def _show(subscription: str, stored: Stored, output: str) -> None:
    if output == "json":
        click.echo(json.dumps({"subscription": subscription, **_delivered(stored)}, ensure_ascii=False))
    else:
        click.echo(_line(stored))


def _delivered(stored: Stored) -> dict[str, object]:
    """A stored publication as ``wfm client -o json`` shows a delivery (README), with its broker time."""
    return {
        "publication": str(stored.publication),
        "attributes": dict(stored.publication),
        "time": stored.time,
    }


def _line(stored: Stored) -> str:
    return f"{datetime.fromtimestamp(stored.time, UTC).isoformat()} {stored.publication}"


@click.command()
@store_option
@master_option
@output_option
def compact(store: Path | None, spark_master: str | None, output: str) -> None:
    """Move the sealed landing segments of a store into its Parquet table (-o json:
    {"segments": N} on stdout)."""
    with progress(f"compacting {store}") as say:
        say("Spark writes the Parquet table")
        count = _open_store(store, spark_master).compact()
    if output == "json":
        click.echo(json.dumps({"segments": count}))
    else:
        click.echo(f"compacted {count} segment{'s' * (count != 1)}", err=True)


@click.command()
@click.argument("workflow", required=False)
@store_option
@click.option("--since", type=TIME, help="Only runs from this time on.")
@click.option("--by", type=click.Choice(["day", "week"]), default="day", show_default=True)
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a page with a chart of duration per job over time.",
)
@master_option
@output_option
def report(
    workflow: str | None,
    store: Path | None,
    since: float | None,
    by: str,
    html_file: Path | None,
    spark_master: str | None,
    output: str,
) -> None:
    """Per job and day (or week): runs, failures, NORUNs, mean and p95 duration, slowest generations."""
    with progress("reporting from the store with Spark") as say:
        say("Spark computes the report")
        rows = job_report(_open_store(store, spark_master), workflow, since, by)
    if html_file is not None:
        html_file.write_text(render_html(rows, f"wfm report {workflow or 'all workflows'} by {by}"))
    if output == "json":
        for row in rows:
            click.echo(json.dumps(row.to_json(), ensure_ascii=False))
        return
    table = Table(*HEADERS)
    for row in rows:
        table.add_row(*row.cells())
    Console().print(table)
