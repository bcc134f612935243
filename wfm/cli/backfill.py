"""``wfm backfill``: one generation per date a workflow's calendar allows, a few at a time, with a
progress bar; rerunning it resumes. A thin command over :mod:`wfm.backfill`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime, time, timedelta
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from tzlocal import get_localzone

from broker.client import Brokers, ConnectError, RefusedError, brokers
from wfm import backfill as backfilling
from wfm.backfill import ENDED, NOT_STARTED, Outcome, backfill_dates
from wfm.cli import TimedOut
from wfm.cli.options import broker_option, checked, output_option, params_option
from wfm.operations import BadParams
from wfm.signing import signer_of
from wfm.slots import slot_gid
from wfm.timetable import Entry, fires, load_config, parse_holidays
from wfm.triggers import check_workflow, parse_date
from workflow_messages import SUCCESS, Calendar, check_gid, parse_weekdays

__all__ = ["backfill"]

ASK_TIMEOUT = 5.0  # seconds the agents have to say what is deployed and what ran


@click.command("backfill")
@click.argument("workflow", callback=checked(check_workflow))
@click.option("--from", "first", required=True, callback=checked(parse_date), help="First date, YYYY-MM-DD.")
@click.option("--to", "last", required=True, callback=checked(parse_date), help="Last date, YYYY-MM-DD.")
@click.option(
    "--schedule",
    "schedule_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Take WORKFLOW's calendar (weekdays and holidays) from this wfm schedule config.",
)
@click.option(
    "--calendar",
    help="The dates to run: schedule words as in the XML (workdays, mon,fri ...) [default: daily].",
)
@click.option(
    "--holidays",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Dates not to run: one YYYY-MM-DD a line, as in a schedule config.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Generations running at once.",
)
@click.option(
    "--tag",
    default="backfill",
    show_default=True,
    help="The gids are DATE-TAG (20261101-backfill): another tag runs the dates again.",
)
@click.option(
    "--timeout", type=click.FloatRange(0, min_open=True), help="Give up after S seconds (exit status 3)."
)
@params_option
@broker_option
@output_option
def backfill(
    workflow: str,
    first: date,
    last: date,
    schedule_file: Path | None,
    calendar: str | None,
    holidays: Path | None,
    concurrency: int,
    tag: str,
    timeout: float | None,
    params: dict[str, str],
    broker_uri: Brokers,
    output: str,
) -> None:
    """Start one generation of WORKFLOW per date from --from to --to that its calendar allows,
    at most --concurrency at once, each waited for to its end; prints "DATE GID STATUS" per date
    (-o json: {"workflow", "date", "gid", "status", "earlier"}), a progress bar on stderr.

    The calendar is that of WORKFLOW in a wfm schedule config (--schedule), or --calendar and
    --holidays, else every date. A date's generation is DATE-TAG: run again, the same backfill
    skips the dates whose generation ended (shown as before, "earlier"), waits for those still
    running and starts the others, never one twice. With --schedule, a date that schedule
    already ran (a generation of one of its slots that day) is that generation's, not run again.
    Run parameters: --param KEY=VALUE (checked against the workflow's declarations: exit status
    2), else the schedule's params, else the declared defaults. Ctrl-C (exit status 130) leaves the
    generations already started running; the next run picks them up. Exit status 1 if a
    generation ended other than SUCCESS (ENDED: before, its outcome no longer listed, is done)
    or did not start (NOT_STARTED: its coordinator answered none of 3 Triggers)."""
    try:
        check_gid(f"20261101-{tag}")
    except ValueError:
        raise click.BadParameter(f"{tag!r}: letters, digits and _ . : - only", param_hint="--tag") from None
    entry = _entry(workflow, schedule_file) if schedule_file is not None else None
    if entry is not None and (calendar is not None or holidays is not None):
        raise click.UsageError("--schedule gives the calendar: not with --calendar or --holidays")
    try:
        days = backfill_dates(first, last, entry.calendar if entry else _calendar(calendar, holidays))
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    if not days:
        raise click.ClickException(f"the calendar allows no date from {first} to {last}")
    sign = signer_of(brokers(broker_uri).tls)
    as_json = output == "json"

    def show(outcome: Outcome) -> None:
        if as_json:
            click.echo(json.dumps(outcome.record(workflow)))
        else:
            earlier = " (earlier)" if outcome.earlier else ""
            click.echo(f"{outcome.day.isoformat()} {outcome.gid} {outcome.status}{earlier}")

    async def run(planned: Callable[[int, int], None], ended: Callable[[Outcome], None]) -> list[Outcome]:
        from wfm.operations import Session

        async with Session.connect(broker_uri, ASK_TIMEOUT) as session:
            work = backfilling.backfill(
                session,
                workflow,
                days,
                sign,
                concurrency,
                tag,
                planned,
                ended,
                params or (entry.params if entry else {}),
                _slots(entry) if entry else lambda day: (),
            )
            return await asyncio.wait_for(work, timeout)

    try:
        with _progress(workflow) as (planned, advance):

            def ended(outcome: Outcome) -> None:
                show(outcome)
                advance(outcome)

            outcomes = asyncio.run(run(planned, ended))
    except BadParams as error:
        raise click.UsageError(f"{error}; nothing started") from None
    except RefusedError as error:
        raise click.ClickException(
            f"cannot backfill {workflow}: {error} (asking the agents what ran needs an operator's "
            "or a deployer's identity)"
        ) from None
    except (ConnectError, ConnectionError) as error:
        raise click.ClickException(f"cannot backfill {workflow}: {error}") from None
    except TimeoutError as error:  # NoReply among them
        raise TimedOut(f"cannot backfill {workflow}: {error or f'timed out after {timeout:g} s'}") from None
    failed = [o for o in outcomes if o.status not in (SUCCESS, ENDED)]
    if any(o.status == NOT_STARTED for o in outcomes):
        click.echo(
            f"wfm: the coordinator of {workflow} started none of the Triggers of the dates NOT_STARTED"
            " (is it running? does it accept this identity's Triggers?); run the backfill again",
            err=True,
        )
    if failed:
        click.echo(f"wfm: {len(failed)} of {len(outcomes)} dates did not end SUCCESS", err=True)
        raise click.exceptions.Exit(1)


def _entry(workflow: str, schedule_file: Path) -> Entry:
    """WORKFLOW's table of a wfm schedule config: its calendar, slots and run parameters."""
    try:
        entries = load_config(schedule_file, get_localzone())
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    entry = next((e for e in entries if e.workflow == workflow), None)
    if entry is None:
        raise click.ClickException(f"{schedule_file} has no [workflows.{workflow}]")
    return entry


def _slots(entry: Entry) -> Callable[[date], list[str]]:
    """The gids wfm schedule gives a date: those of its slots that day (in the schedule's zone)."""

    def of(day: date) -> list[str]:
        start = datetime.combine(day, time(), entry.cron.timezone)
        return [slot_gid(entry.workflow, at) for at, _, _ in fires([entry], start, start + timedelta(days=1))]

    return of


def _calendar(words: str | None, holidays: Path | None) -> Calendar:
    try:
        weekdays = parse_weekdays(words or "daily")
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--calendar") from None
    days: frozenset[date] = frozenset()
    if holidays is not None:
        try:
            days = parse_holidays(holidays.read_text(encoding="utf-8"), str(holidays))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise click.ClickException(str(error)) from None
    return Calendar(weekdays, days)


@contextmanager
def _progress(
    workflow: str,
) -> Iterator[tuple[Callable[[int, int], None], Callable[[Outcome], None]]]:
    """A bar on a terminal's stderr, else a ``wfm: backfill W: N/M ...`` line per date."""
    console = Console(stderr=True)
    count = [0, 0]  # done, total
    if console.is_terminal:
        columns = (
            TextColumn(f"backfill {workflow}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("backfill", total=None)

            def planned(total: int, earlier: int) -> None:
                bar.update(task, total=total)

            yield planned, lambda _: bar.advance(task)
        return

    def plan(total: int, earlier: int) -> None:
        count[1] = total
        click.echo(f"wfm: backfill {workflow}: {total} dates, {earlier} done before", err=True)

    def line(outcome: Outcome) -> None:
        count[0] += 1
        click.echo(
            f"wfm: backfill {workflow}: {count[0]}/{count[1]} ({outcome.day} {outcome.status})", err=True
        )

    yield plan, line
