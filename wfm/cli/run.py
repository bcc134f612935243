"""``wfm trigger``, ``wfm schedule``, ``wfm monitor`` and ``wfm up``: starting and watching
generations, thin commands over :mod:`wfm.triggers`, :mod:`wfm.scheduler`, :mod:`wfm.monitor`
and :mod:`wfm.up`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from tzlocal import get_localzone

from broker.client import Brokers, ConnectError, RefusedError
from broker.errors import RemoteError
from wfm.cli import TimedOut
from wfm.cli.options import METRICS, broker_option, broker_uri_option, checked, output_option, params_option
from wfm.cli.progress import progress
from wfm.cli.serving import stop_event
from wfm.cli.workflow import load_workflow
from wfm.metrics import Address
from wfm.monitor import MonitorService, StatusEvent, render
from wfm.operations import BadParams, Deployed, NoReply, Session, UnknownWorkflow
from wfm.scheduler import NEVER_STOPPED, fire, run_schedule
from wfm.slots import SlotState, default_state, parse_catch_up
from wfm.timetable import Entry, fires, load_config
from wfm.topology import load_topology
from wfm.triggers import (
    NotStarted,
    TriggerPublisher,
    check_gid,
    check_workflow,
    default_outbox,
    new_gid,
    parse_date,
    parse_ttl,
)
from wfm.up import Started, agent_names, serve
from workflow_messages import APPL_START

# seconds wfm monitor --gid waits for a historian to answer what it holds of the generation
CATCH_UP_TIMEOUT = 3.0
PIPED_WIDTH = 1000  # columns of wfm monitor's tables when its output is not a terminal
# seconds wfm trigger waits for the agents to say whether the workflow is deployed
CHECK_TIMEOUT = 5.0


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
@click.option(
    "--wait",
    type=click.FloatRange(0, 3600),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the workflow's coordinator to start the generation; 0: do not wait.",
)
@click.option(
    "--ttl",
    callback=checked(parse_ttl),
    metavar="DURATION",
    help="Time to live (30s, 5m, 2h, 1d; at most 365d): a Trigger that reaches the workflow's "
    "coordinator later (by its clock) starts nothing, and the generation ends EXPIRED "
    "[default: never expires].",
)
@click.option(
    "--check/--no-check",
    default=True,
    show_default=True,
    help=f"First ask the agents whether WORKFLOW is deployed (within {CHECK_TIMEOUT:g} s), "
    "and publish nothing if it is not (nor if the --param do not fit its declarations).",
)
@params_option
@output_option
def trigger(
    workflow: str,
    gid: str | None,
    day: date | None,
    broker_uri: Brokers,
    outbox: Path | None,
    wait: float,
    ttl: float | None,
    check: bool,
    params: dict[str, str],
    output: str,
) -> None:
    """Start one generation of WORKFLOW: publish a Trigger and print its gid.

    First asks the agents, as wfm workflows does: a workflow no agent has deployed is an error
    at once (exit status 1), and nothing is published. If no agent answers, or this identity may
    not ask (a scheduler's), it triggers unchecked. Then exits once the broker has acknowledged
    the Trigger and the workflow's coordinator has started the generation (its APPL_START): exit
    status 1 if none did within --wait seconds (its coordinator is not running), unless the
    coordinator holds it waiting its turn (the workflow's max-active, overlap="queue" or
    "cancel": said on stderr, exit status 0); one it skipped (overlap="skip") is exit status 1,
    saying why. A Trigger the
    broker did not acknowledge in time (exit status 3) stays in the outbox, and the next wfm
    trigger sends it first, under the same id: the overlay drops it if it got through after all.
    Triggers in the same outbox go one process at a time.

    With --ttl, the Trigger carries its expiry (this clock's now plus the ttl): a coordinator it
    reaches later starts nothing and ends the generation EXPIRED, which wfm monitor, wfm runs
    and the dashboard show (exit status 1 here if that happens within --wait). The coordinator
    decides by its own clock: if it runs S seconds ahead of this one, the Trigger expires S seconds
    early.

    --param KEY=VALUE (repeatable) gives a run parameter the workflow declares: checked against
    the declarations the agents describe (an unknown key, a value not of its type, a required one
    missing: exit status 2, nothing published), the defaults filled in, carried by the Trigger;
    each job sees them as WFM_PARAM_KEY. Unchecked (no agent answered, --no-check), they go out
    as given and the agents check them. -o json: {"workflow", "gid", "date"}, "params" when
    there are any, and "expires" (epoch seconds) with --ttl."""
    gid = gid or new_gid(datetime.now())
    day = day or date.today()
    deployed = _check_deployed(broker_uri, workflow) if check else None
    if deployed is not None:
        try:
            params = deployed.resolve(params)
        except BadParams as error:
            raise click.UsageError(f"{error}; nothing published") from None
    expires = None
    try:
        with TriggerPublisher(broker_uri, outbox=outbox or default_outbox()) as publisher:
            expires = publisher.publish(workflow, gid, day, started_within=wait, ttl=ttl, params=params)
    except NotStarted as error:  # (Expired and Skipped ended it: an error)
        if type(error) is not NotStarted or deployed is None or not _queued(broker_uri, deployed, gid):
            raise
        click.echo(
            f"wfm: {workflow} generation {gid} is queued: as many generations of {workflow} run as its"
            " max-active allows, and it starts when one ends (wfm runs lists it as QUEUED)",
            err=True,
        )
    except (ConnectError, OSError) as error:
        raise click.ClickException(f"cannot trigger {workflow}: {error}") from None
    except TimeoutError as error:
        raise TimedOut(f"cannot trigger {workflow}: {error or 'timed out'}") from None
    if publisher.resent:
        click.echo(
            f"wfm: sent again {publisher.resent} Trigger(s) an earlier run left unacknowledged", err=True
        )
    if output == "json":
        record: dict[str, object] = {"workflow": workflow, "gid": gid, "date": day.isoformat()}
        if params:
            record["params"] = params
        click.echo(json.dumps(record if expires is None else {**record, "expires": expires}))
    else:
        click.echo(gid)


def _queued(uri: Brokers, deployed: Deployed, gid: str) -> bool:
    """Whether the workflow's coordinator holds generation ``gid`` waiting its turn (the
    workflow's ``max-active``, docs/workflows.md): why its APPL_START may not have come."""
    coordinator = deployed.coordinator
    if coordinator is None:
        return False

    async def ask() -> dict[str, dict[str, Any]]:
        async with Session.connect(uri, CHECK_TIMEOUT) as session:
            content = {"workflow": deployed.workflow, "gid": gid, "limit": 1}
            return await session.ask("RUNS", content, [coordinator])

    try:
        answers = asyncio.run(ask())
    except (NoReply, RemoteError, ConnectError, OSError):
        return False  # then it did not start, as far as anyone can tell
    found = [g for answer in answers.values() for g in answer.get("generations", [])]
    return any(g.get("gid") == gid and g.get("busy", {}).get(APPL_START) == "queued" for g in found)


def _check_deployed(uri: Brokers, workflow: str) -> Deployed | None:
    """Refuse a workflow that no agent that answers has deployed, before anything is published:
    a Trigger of it would start nothing, and stay published. When no agent answers at all, or
    this identity may not ask, the Trigger goes out as it did before there was a question (a
    warning says why in the first case): None. Only ``wfm trigger`` asks; ``wfm schedule``
    publishes what its configuration names. The workflow as its agents describe it: the run
    parameters it declares."""

    async def ask() -> Deployed:
        async with Session.connect(uri, CHECK_TIMEOUT) as session:
            return await session.lookup(workflow)

    try:
        return asyncio.run(ask())
    except RefusedError:
        return None  # this identity may not ask the agents (a scheduler's): publish unchecked
    except UnknownWorkflow as error:
        raise click.ClickException(f"cannot trigger {workflow}: {error}; nothing published") from None
    except NoReply as error:  # a TimeoutError, hence an OSError: before those
        # nobody answered: publish anyway (a coordinator that is away may get it later)
        click.echo(f"wfm: warning: {error}: cannot tell whether {workflow} is deployed", err=True)
    except (ConnectError, OSError) as error:
        raise click.ClickException(f"cannot trigger {workflow}: {error}") from None
    return None


@click.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--dry-run", is_flag=True, help="Print the triggers of the next --days days and exit (no broker)."
)
@click.option(
    "--days", type=click.IntRange(1, 3660), default=7, show_default=True, help="Days --dry-run looks ahead."
)
@click.option(
    "--catch-up",
    callback=checked(parse_catch_up),
    metavar="DURATION",
    help="First fire the slots missed since the last one this scheduler fired (--state), at most "
    "DURATION back (30m, 6h, 2d; at most 7d) [default: none].",
)
@click.option(
    "--state",
    "state_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where the last slot fired per workflow is kept [default: $XDG_STATE_HOME/wfm/schedule.json].",
)
@broker_uri_option("Broker to publish through")
@output_option
def schedule(
    config: Path,
    dry_run: bool,
    days: int,
    catch_up: float | None,
    state_file: Path | None,
    broker_uri: Brokers | None,
    output: str,
) -> None:
    """Trigger workflows by cron expression and business calendar until SIGINT/SIGTERM.

    CONFIG is a TOML file with one [workflows.NAME] table each (cron, calendar, holidays, params; see
    docs/workflows.md). Each trigger prints "TIME WORKFLOW DATE GID" on stdout (-o json: one
    object {"time", "workflow", "date", "gid"}; --dry-run has no gid); TIME is the slot's.

    Leaderless: a slot's gid is derived from the workflow and the slot's time, so several
    schedulers with the same CONFIG (on different hosts, for availability) start each slot once:
    the workflow's coordinator runs a gid once however many Triggers of it come."""
    as_json = output == "json"
    timezone = get_localzone()
    try:
        entries = load_config(config, timezone)
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    if dry_run:
        now = datetime.now(timezone)
        for at, workflow, day in fires(entries, now, now + timedelta(days=days)):
            if as_json:
                click.echo(
                    json.dumps({"time": at.isoformat(), "workflow": workflow, "date": day.isoformat()})
                )
            else:
                click.echo(f"{at:%Y-%m-%d %H:%M %a} {workflow} {day.isoformat()}")
        return
    if broker_uri is None:
        raise click.UsageError("--broker (or $WFM_BROKER) is needed unless --dry-run")
    state = SlotState(state_file or default_state())
    if state.problem is not None:
        click.echo(f"wfm: warning: {state.problem}", err=True)
    lock = threading.Lock()  # one publisher, one thread per workflow

    with stop_event() as stop, TriggerPublisher(broker_uri) as publisher:  # SIGTERM handled from the start

        def job(entry: Entry, slot: datetime) -> None:
            with lock:
                _fire(entry, publisher, slot, stop.wait, as_json, state)

        run_schedule(entries, job, stop, catch_up, dict(state.last))


def _fire(
    entry: Entry,
    publisher: TriggerPublisher,
    slot: datetime,
    wait: Callable[[float], bool] = NEVER_STOPPED.wait,
    as_json: bool = False,
    state: SlotState | None = None,
) -> None:
    """One slot, shown on stdout and noted in ``state``. A broker that cannot take it is tried
    again for a few minutes with the same gid, then reported (the scheduler keeps running)."""
    try:
        gid = fire(entry, publisher, slot, wait)
    except (ConnectError, OSError, TimeoutError) as error:
        click.echo(f"wfm: error: cannot trigger {entry.workflow}: {error or 'timed out'}", err=True)
        return
    if state is not None:
        try:
            state.fired(entry.workflow, slot)
        except OSError as error:
            click.echo(f"wfm: warning: cannot note the slot in {state.path}: {error}", err=True)
    if gid is None:
        return
    if as_json:
        record = {"time": slot.isoformat(), "workflow": entry.workflow, "date": slot.date().isoformat()}
        click.echo(json.dumps({**record, "gid": gid}))
    else:
        click.echo(f"{slot:%Y-%m-%d %H:%M:%S} {entry.workflow} {slot.date().isoformat()} {gid}")


@click.command()
@click.argument("workflow", required=False, callback=checked(check_workflow))
@click.option(
    "--gid",
    "gids",
    multiple=True,
    callback=checked(check_gid),
    help="Watch this generation (repeatable), from its start even if that was earlier "
    "[default: the first one triggered from now on].",
)
@broker_option
@click.option("--watch", is_flag=True, help="Keep showing new generations until Ctrl-C.")
@output_option
@click.option(
    "--timeout", type=click.FloatRange(0, min_open=True), help="Give up after S seconds (exit status 3)."
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

    Without --gid it follows the generations triggered from now on: start it before wfm trigger.
    With --gid it first asks the historians (wfm up runs one) what they hold of those
    generations, so it may start after the trigger:

    \b
    wfm monitor PAYROLL --gid "$(wfm trigger PAYROLL)"

    -o json prints one line per job status. Without --watch it exits when the watched generations
    end: exit status 0 if all ended SUCCESS, 1 if one ended otherwise
    (FAILURE, CANCELLED: why, on stderr), 3 on --timeout."""
    try:
        status = asyncio.run(_monitor(broker_uri, workflow, gids, watch, output == "json", timeout))
    except (ConnectError, ConnectionError) as error:
        raise click.ClickException(str(error)) from None
    except TimeoutError:
        raise TimedOut(f"timed out after {timeout:g} s") from None
    raise click.exceptions.Exit(status)


async def _monitor(
    uri: Brokers,
    workflow: str | None,
    gids: Sequence[str],
    forever: bool,
    as_json: bool,
    timeout: float | None,
) -> int:
    """A JSON line per job status, or the tables redrawn after each delivery; what it waits for
    on stderr."""
    async with MonitorService.connect(uri, workflow, gids) as service, contextlib.AsyncExitStack() as stack:
        show: Callable[[StatusEvent | None], None] = _json_line
        if not as_json:
            console = Console()
            if not console.is_terminal:  # a pipe or a log: whole lines, not folded at 80 columns
                console = Console(width=PIPED_WIDTH)
            live = stack.enter_context(Live(render(service.monitor), console=console, auto_refresh=False))

            def show(_: StatusEvent | None) -> None:
                live.update(render(service.monitor), refresh=True)

        if gids:
            catching = asyncio.create_task(
                _catch_up(service, min(CATCH_UP_TIMEOUT, timeout or CATCH_UP_TIMEOUT), show)
            )
            stack.push_async_callback(_cancelled, catching)
        click.echo(f"wfm: {_waiting_for(workflow, gids, forever)}", err=True)
        status = await service.run(forever, timeout, show)
        for reason in service.monitor.unsuccessful():
            click.echo(f"wfm: {reason}", err=True)
        return status


async def _catch_up(
    service: MonitorService, timeout: float, show: Callable[[StatusEvent | None], None]
) -> None:
    problem = await service.catch_up(timeout, show)
    if problem is not None:
        click.echo(f"wfm: warning: {problem}", err=True)


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _waiting_for(workflow: str | None, gids: Sequence[str], forever: bool) -> str:
    """What the monitor waits for, so that one started after its trigger does not wait in silence."""
    of = f"of {workflow}" if workflow else "of any workflow"
    if gids:
        return f"waiting for generation {', '.join(gids)} {of} to end" + (" (then more)" * forever)
    which = "the generations" if forever else "the next generation"
    return f"waiting for {which} {of} triggered from now on (Ctrl-C to stop)"


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
@click.option(
    "--topology",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="A SESDAD configuration file (or its TOML form, docs/puppet.md): its brokers and links "
    "instead of the line, and its agents on their sites' brokers (PORT then only places Spark "
    "Connect and the dashboard).",
)
@click.option(
    "--metrics",
    type=METRICS,
    default=None,
    help="Prometheus metrics of every process started (not Spark Connect's): the first broker's at "
    "http://HOST:PORT/metrics, each next process's on the port after; printed once everything runs.",
)
@output_option
def up(
    directory: Path,
    port: int,
    spark_connect: bool,
    topology: Path | None,
    metrics: Address | None,
    output: str,
) -> None:
    """Run the embedded default until Ctrl-C: three brokers in a line (B1-B2-B3), or those of
    --topology, one agent per agent name in DIR/*.xml, every workflow deployed. Prints the broker
    addresses and what to try (-o json: one object) once everything runs; progress and warnings
    go to stderr. One wfm up per DIR: a second one fails, naming the first."""
    placed = None if topology is None else load_topology(topology)
    files = sorted(directory.glob("*.xml"))
    if not files:
        raise click.ClickException(f"no workflows (*.xml) in {directory}")
    workflows = [load_workflow(file) for file in files]
    named = [(workflow.name, file) for workflow, file in zip(workflows, files, strict=True)]
    spark_port = port + 3 if spark_connect else None

    with stop_event() as stop, contextlib.ExitStack() as starting:
        say = starting.enter_context(progress("starting"))

        def ready(started: Started) -> None:
            starting.close()  # the spinner ends where the data begins
            click.echo(json.dumps(started.record()) if output == "json" else "\n".join(started.lines()))

        serve(
            named,
            agent_names(workflows),
            directory / ".wfm",
            port,
            ready,
            stop,
            spark_port=spark_port,
            web_port=port + 4,
            say=say,
            warn=lambda line: click.echo(f"wfm: {line}", err=True),
            topology=placed,
            metrics=metrics,
        )
