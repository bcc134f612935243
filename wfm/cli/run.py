"""``wfm trigger``, ``wfm schedule``, ``wfm monitor`` and ``wfm up``: starting and watching
generations, thin commands over :mod:`wfm.triggers`, :mod:`wfm.scheduler`, :mod:`wfm.monitor`
and :mod:`wfm.up`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path

import click
from rich.console import Console
from rich.live import Live
from tzlocal import get_localzone

from broker.client import Brokers, ConnectError
from wfm.cli.options import broker_option, broker_uri_option, checked, output_option
from wfm.cli.serving import stop_event
from wfm.cli.workflow import load_workflow
from wfm.monitor import TIMED_OUT, MonitorService, StatusEvent, render
from wfm.scheduler import NEVER_STOPPED, fire, run_schedule
from wfm.timetable import Entry, fires, load_config
from wfm.triggers import TriggerPublisher, check_gid, check_workflow, default_outbox, new_gid, parse_date
from wfm.up import agent_names, serve


@click.command()
@click.argument("workflow", callback=checked(check_workflow))
@click.option(
    "--gid", callback=checked(check_gid), help="Generation id [default: new, e.g. 20261123-114523-3f9a]."
)
@click.option(
    "--date", "day", callback=checked(parse_date), help="The generation's date, YYYY-MM-DD [default: today]."
)
@broker_option
@click.option(
    "--outbox",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where Triggers wait until the broker acknowledges them [default: $XDG_STATE_HOME/wfm/trigger].",
)
def trigger(
    workflow: str, gid: str | None, day: date | None, broker_uri: Brokers, outbox: Path | None
) -> None:
    """Start one generation of WORKFLOW: publish a Trigger and print its gid.

    Exits once the broker has acknowledged the Trigger. One it did not acknowledge in time (exit
    status 1, saying so) stays in the outbox, and the next wfm trigger sends it first, under the
    same id: the overlay drops it if it got through after all. Triggers in the same outbox go one
    process at a time."""
    gid = gid or new_gid(datetime.now())
    try:
        with TriggerPublisher(broker_uri, outbox=outbox or default_outbox()) as publisher:
            publisher.publish(workflow, gid, day or date.today())
    except (ConnectError, OSError, TimeoutError) as error:
        raise click.ClickException(f"cannot trigger {workflow}: {error or 'timed out'}") from None
    if publisher.resent:
        click.echo(
            f"wfm: sent again {publisher.resent} Trigger(s) an earlier run left unacknowledged", err=True
        )
    click.echo(gid)


@click.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--dry-run", is_flag=True, help="Print the triggers of the next --days days and exit (no broker)."
)
@click.option(
    "--days", type=click.IntRange(1, 3660), default=7, show_default=True, help="Days --dry-run looks ahead."
)
@broker_uri_option("Broker to publish through")
def schedule(config: Path, dry_run: bool, days: int, broker_uri: Brokers | None) -> None:
    """Trigger workflows by cron expression and business calendar until SIGINT/SIGTERM.

    CONFIG is a TOML file with one [workflows.NAME] table each (cron, calendar, holidays; see
    docs/workflows.md). Each trigger prints "TIME WORKFLOW DATE GID" on stdout."""
    timezone = get_localzone()
    try:
        entries = load_config(config, timezone)
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    if dry_run:
        now = datetime.now(timezone)
        for at, workflow, day in fires(entries, now, now + timedelta(days=days)):
            click.echo(f"{at:%Y-%m-%d %H:%M %a} {workflow} {day.isoformat()}")
        return
    if broker_uri is None:
        raise click.UsageError("--broker (or $WFM_BROKER) is needed unless --dry-run")
    with TriggerPublisher(broker_uri) as publisher, stop_event() as stop:
        run_schedule(entries, timezone, lambda entry: _fire(entry, publisher, stop.wait), stop)


def _fire(
    entry: Entry, publisher: TriggerPublisher, wait: Callable[[float], bool] = NEVER_STOPPED.wait
) -> None:
    """One cron fire, shown on stdout. A broker that cannot take it is tried again for a few
    minutes with the same gid, then reported (the scheduler keeps running)."""
    now = datetime.now(entry.cron.timezone)
    try:
        gid = fire(entry, publisher, now, wait)
    except (ConnectError, OSError, TimeoutError) as error:
        click.echo(f"wfm: error: cannot trigger {entry.workflow}: {error or 'timed out'}", err=True)
        return
    if gid is not None:
        click.echo(f"{now:%Y-%m-%d %H:%M:%S} {entry.workflow} {now.date().isoformat()} {gid}")


@click.command()
@click.argument("workflow", required=False, callback=checked(check_workflow))
@click.option(
    "--gid",
    "gids",
    multiple=True,
    callback=checked(check_gid),
    help="Watch this generation (repeatable) [default: the first one seen].",
)
@broker_option
@click.option("--watch", is_flag=True, help="Keep showing new generations until Ctrl-C.")
@output_option
@click.option(
    "--timeout", type=click.FloatRange(0, min_open=True), help="Give up after S seconds (exit status 2)."
)
def monitor(
    workflow: str | None,
    gids: tuple[str, ...],
    broker_uri: Brokers,
    watch: bool,
    output: str,
    timeout: float | None,
) -> None:
    """Show job states per generation of WORKFLOW (or of every workflow), live.

    The monitor sees only what is published after it subscribes: start it before the trigger (the
    history of earlier generations comes with the historian). -o json prints one line per job
    status. Without --watch it exits when the watched generations end: exit status 0 if all
    ended SUCCESS, 1 if one ended otherwise
    (FAILURE, CANCELLED: why, on stderr), 2 on --timeout."""
    try:
        status = asyncio.run(_monitor(broker_uri, workflow, gids, watch, output == "json", timeout))
    except KeyboardInterrupt:
        if not watch:
            raise
        status = 0
    except (ConnectError, ConnectionError) as error:
        raise click.ClickException(str(error)) from None
    if status == TIMED_OUT:
        click.echo(f"wfm: timed out after {timeout:g} s", err=True)
    raise click.exceptions.Exit(status)


async def _monitor(
    uri: Brokers,
    workflow: str | None,
    gids: Sequence[str],
    forever: bool,
    as_json: bool,
    timeout: float | None,
) -> int:
    """A JSON line per job status, or the tables redrawn after each delivery."""
    async with MonitorService.connect(uri, workflow, gids) as service:
        if as_json:
            status = await service.run(forever, timeout, _json_line)
        else:
            with Live(render(service.monitor), console=Console(), auto_refresh=False) as live:
                status = await service.run(
                    forever, timeout, lambda _: live.update(render(service.monitor), refresh=True)
                )
        if status != TIMED_OUT:
            for reason in service.monitor.unsuccessful():
                click.echo(f"wfm: {reason}", err=True)
        return status


def _json_line(event: StatusEvent | None) -> None:
    if event is not None:
        click.echo(json.dumps(event.record(), ensure_ascii=False))


@click.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default="workflows",
    show_default=True,
    help="Workflows to deploy (*.xml); state goes to DIR/.wfm.",
)
@click.option(
    "--port",
    type=click.IntRange(1024, 65531),
    default=7100,
    show_default=True,
    help="Brokers listen on PORT, PORT+1, PORT+2; Spark Connect on PORT+3; the dashboard on PORT+4.",
)
@click.option(
    "--spark-connect/--no-spark-connect",
    default=True,
    show_default=True,
    help="Keep Spark warm for wfm history --store and wfm report (a JVM: about 1 GB).",
)
def up(directory: Path, port: int, spark_connect: bool) -> None:
    """Run the embedded default until Ctrl-C: three brokers in a line (B1-B2-B3), one agent per
    agent name in DIR/*.xml, every workflow deployed. Prints the broker addresses and what to try."""
    files = sorted(directory.glob("*.xml"))
    if not files:
        raise click.ClickException(f"no workflows (*.xml) in {directory}")
    workflows = [load_workflow(file) for file in files]
    named = [(workflow.name, file) for workflow, file in zip(workflows, files, strict=True)]
    spark_port = port + 3 if spark_connect else None
    with stop_event() as stop:
        serve(
            named,
            agent_names(workflows),
            directory / ".wfm",
            port,
            click.echo,
            stop,
            spark_port=spark_port,
            web_port=port + 4,
        )
