"""``wfm historian`` and the overlay side of ``wfm history --broker``."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from broker.client import Client, ConnectError
from broker.language import Atom, Filter
from broker.language.values import check_string
from broker.transport.link import LinkClosed
from broker.transport.uri import BrokerURI
from wfm.history.asker import Answers, HistoryError, Result, Seam, ask, without_time
from wfm.history.groups import join
from wfm.history.historian import DEFAULT_CLASSES, Historian
from wfm.history.spark import MASTER_ENV
from wfm.overlay_cli import broker_option
from wfm.triggers import ADVERTISEMENT_SETTLE

__all__ = ["historian", "overlay_composite_history", "overlay_history"]

LATE = 0.5


def _classes(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    for cls in value:
        try:
            Filter(check_string(cls))
        except ValueError as error:
            raise click.BadParameter(f"{cls!r}: {error}") from None
    return value or DEFAULT_CLASSES


@click.command()
@broker_option
@click.option("--store", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="History store directory (created if missing).")  # fmt: skip
@click.option("--keep", multiple=True, callback=_classes, metavar="CLASS",
              help="A class to keep (repeatable; default: Trigger, JOBSTATUS, AGENT_CTL).")  # fmt: skip
@click.option("--spark-master", envvar=MASTER_ENV, default=None,
              help="Spark master for compaction and queries (default local[*]).")  # fmt: skip
@click.option("--compact-every", type=click.FloatRange(0), default=300.0, show_default=True,
              help="Seconds between compactions of the landing log (0: never).")  # fmt: skip
def historian(broker_uri: BrokerURI, store: Path, keep: tuple[str, ...], spark_master: str | None,
              compact_every: float) -> None:  # fmt: skip
    """Keep every publication of the kept classes and answer historic queries, until SIGINT/SIGTERM."""
    try:
        store.mkdir(parents=True, exist_ok=True)
        worker = Historian(broker_uri, store.absolute(), keep, spark_master, compact_every)
    except OSError as error:
        raise click.ClickException(f"cannot use the store {store}: {error.strerror or error}") from None
    asyncio.run(_serve(worker))


async def _serve(worker: Historian) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, worker.stop)
    await worker.run()


async def overlay_history(
    uri: BrokerURI,
    window: Filter,
    since: float | None,
    until: float | None,
    timeout: float,
    emit: Callable[[str, Result], None],
    now: float,
) -> None:
    """Print the historians' answer (and a warning line for each historian that stopped answering),
    then, if ``until`` is later than ``now``, live publications until then or SIGINT/SIGTERM.
    HistoryError (one line) if the broker or every historian fails."""
    query_id = uuid.uuid4().hex
    try:
        client = await Client.connect(uri)
    except ConnectError as error:
        raise HistoryError(str(error)) from None
    try:
        # the live subscription is made first and given time to reach the publishers' brokers, so
        # what they publish from the query on is delivered live or already in the answer
        live = await client.subscribe(without_time(window)) if until is not None and until > now else None
        if live is not None:
            await asyncio.sleep(ADVERTISEMENT_SETTLE)
        seam = Seam(window, since, until)
        answers = await ask(client, query_id, window, since, until, timeout)
        for warning in answers.warnings():
            click.echo(f"wfm: warning: {warning}", err=True)
        for result in seam.history(answers):
            emit(query_id, result)
        if live is None or until is None:
            return
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        # what was held while history arrived is shown even if ``until`` has passed meanwhile, and
        # a publication accepted just before ``until`` gets LATE seconds to arrive
        while not stop.is_set():
            remaining = until + LATE - time.time()
            try:
                delivery = await live.next(min(0.2, max(0.0, remaining)))
            except TimeoutError:
                if remaining <= 0:
                    break
                continue
            shown = seam.live(delivery)
            if shown is not None:
                emit(query_id, shown)
    except LinkClosed as error:
        raise HistoryError(f"lost the connection to {uri}: {error}") from None
    finally:
        await client.close()


async def overlay_composite_history(
    uri: BrokerURI,
    atoms: Sequence[Atom],
    windows: Sequence[tuple[Filter, float | None, float | None]],
    timeout: float,
) -> list[tuple[Result, ...]]:
    """The groups of stored publications that complete an & of ``atoms``: each atom is asked at
    once as the plain filter of ``windows`` (filter, since, until), and the answers are joined on
    the variables here, so historians that keep different classes still join. A warning line for
    each historian that stopped answering; HistoryError (one line) if the broker fails or no
    historian answers an atom."""
    try:
        client = await Client.connect(uri)
    except ConnectError as error:
        raise HistoryError(str(error)) from None
    try:
        asked = [
            ask(client, uuid.uuid4().hex, window, since, until, timeout) for window, since, until in windows
        ]
        outcomes = await asyncio.gather(*asked, return_exceptions=True)
    finally:
        await client.close()
    answers: list[Answers] = []
    for outcome in outcomes:
        if isinstance(outcome, LinkClosed):
            raise HistoryError(f"lost the connection to {uri}: {outcome}")
        if isinstance(outcome, BaseException):
            raise outcome
        answers.append(outcome)
    for warning in dict.fromkeys(w for answer in answers for w in answer.warnings()):
        click.echo(f"wfm: warning: {warning}", err=True)
    rows = [answer.in_time_order() for answer in answers]
    return join(atoms, rows, lambda result: result.publication, lambda result: (result.time, result.id))
