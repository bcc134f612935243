"""``wfm workflows``, ``wfm runs``, ``wfm logs``, ``wfm cancel`` and ``wfm rerun``: thin commands over
:class:`wfm.operations.Session`. A timeout (an agent that did not answer) exits with status 3."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource
from rich.console import Console
from rich.live import Live
from rich.table import Table

from broker.client import Brokers
from wfm.cli.options import broker_option, broker_uri_option, checked, output_option, params_option
from wfm.cli.workflow import signing_options
from wfm.monitor import Monitor
from wfm.operations import BadParams, NoReply, Session, generation_record, newest, stored_runs
from wfm.signing import Deployer
from wfm.triggers import check_gid, check_workflow, default_outbox
from workflow_messages import APPL_END

T = TypeVar("T")
TIMED_OUT = 3

workflow_argument = click.argument("workflow", callback=checked(check_workflow))
gid_option = click.option("--gid", required=True, callback=checked(check_gid), help="The generation.")


def timeout_option(default: float) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--timeout",
        type=click.FloatRange(0.1, 3600),
        default=default,
        show_default=True,
        help="Seconds to wait for the agents' answers (exit status 3 after it).",
    )


def _session(uri: Brokers, timeout: float, use: Callable[[Session], Awaitable[T]]) -> T:
    """Run ``use`` on a session; a NoReply is the one-line error of a timeout, exit status 3. An
    agent's answer cut to fit in a message is said on stderr."""

    async def main() -> T:
        async with Session.connect(uri, timeout) as session:
            try:
                return await use(session)
            finally:
                for agent in sorted(session.truncated):
                    click.echo(f"wfm: warning: {agent} left out what does not fit in one answer", err=True)

    try:
        return asyncio.run(main())
    except NoReply as error:
        click.echo(f"wfm: error: {error}", err=True)
        raise click.exceptions.Exit(TIMED_OUT) from None


def _json(record: dict[str, Any]) -> None:
    click.echo(json.dumps(record, ensure_ascii=False))


@click.command()
@broker_option
@timeout_option(5.0)
@output_option
def workflows(broker_uri: Brokers, timeout: float, output: str) -> None:
    """What is deployed: each workflow with its version, agents and jobs, as its agents say."""
    found, agents = _session(broker_uri, timeout, lambda session: session.workflows())
    if output == "json":
        for workflow in found:
            _json(workflow.record())
        return
    table = Table(
        "workflow",
        "version",
        "coordinator",
        "agents (jobs)",
        "older versions (held by)",
        "on hold (wfm hold)",
    )
    for workflow in found:
        jobs = "; ".join(f"{agent} ({', '.join(jobs)})" for agent, jobs in workflow.agents.items())
        older = ", ".join(
            f"{version} ({', '.join(a for a, held in sorted(workflow.held.items()) if version in held)})"
            for version in sorted(workflow.versions - {workflow.version})
        )  # who still has each: a retired agent finishing its generations, say
        holds = "; ".join(workflow.on_hold())
        table.add_row(workflow.workflow, workflow.version, workflow.coordinator or "?", jobs, older, holds)
    Console().print(table)
    click.echo(f"{len(agents)} agents answered: {', '.join(agents)}", err=True)


@click.command()
@workflow_argument
@broker_uri_option("Broker to connect to (required unless --store)")
@click.option(
    "--limit", type=click.IntRange(1, 200), default=20, show_default=True, help="Generations shown."
)
@click.option("--watch", is_flag=True, help="Then follow new statuses live until Ctrl-C.")
@click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    help="Read the generations from this history store instead of asking the agents (older ones).",
)
@timeout_option(5.0)
@output_option
@click.pass_context
def runs(
    ctx: click.Context,
    workflow: str,
    broker_uri: Brokers | None,
    limit: int,
    watch: bool,
    store: Path | None,
    timeout: float,
    output: str,
) -> None:
    """Recent generations of WORKFLOW: outcome, start, duration and job states, from what its
    agents keep (their last 500 generations), or with --store from the history store (every
    generation the historian recorded; Spark starts only if the store has a compacted table).
    -o json: one object per generation; with --watch, one more each time a generation changes."""
    if store is not None:
        if watch or ctx.get_parameter_source("broker_uri") == ParameterSource.COMMANDLINE:
            raise click.UsageError("--store reads the store only: give it without --broker and --watch")
        _show(_stored(store, workflow), set(), limit, output)
        return
    if broker_uri is None:
        raise click.UsageError("give --broker URI (or $WFM_BROKER), or --store DIR")

    async def use(session: Session) -> None:
        if watch:
            await session.follow(workflow)
        monitor = await session.runs(workflow, limit)
        if not watch:
            _show(monitor, session.cancelled, limit, output)
            return
        if output == "json":
            _show(monitor, session.cancelled, limit, output)
            seen = {(r["gid"], json.dumps(r)) for r in _records(session.cancelled, monitor, limit)}
            await session.watch(monitor, lambda: _changed(session, monitor, limit, seen))
            return
        table = _table(_records(session.cancelled, monitor, limit))
        with Live(table, console=Console(), auto_refresh=False) as live:
            await session.watch(
                monitor,
                lambda: live.update(_table(_records(session.cancelled, monitor, limit)), refresh=True),
            )

    _session(broker_uri, timeout, use)


def _stored(path: Path, workflow: str) -> Monitor:
    """``workflow``'s generations in the store at ``path``, saying on stderr when Spark starts."""
    from wfm.history.queries import open_store  # Spark: only for --store
    from wfm.history.store import HistoryStore, require_store

    path = path.absolute()
    require_store(path)

    def spark() -> Any:
        click.echo(
            f"wfm: starting Spark to read the table of {path} (the first query takes a while) ...", err=True
        )
        return open_store(path, None).spark

    found = stored_runs(HistoryStore(path, spark), workflow)
    click.echo(f"wfm: {len(found.generations)} generations of {workflow} in {path}", err=True)
    return found


def _show(monitor: Monitor, cancelled: set[tuple[str, str]], limit: int, output: str) -> None:
    records = _records(cancelled, monitor, limit)
    if output == "json":
        for record in records:
            _json(record)
    else:
        Console().print(_table(records))


def _records(cancelled: set[tuple[str, str]], monitor: Monitor, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` generations (by start; not started yet: first)."""
    return [
        generation_record(g, (g.workflow, g.gid) in cancelled)
        for g in newest(monitor.generations.values(), limit)
    ]


def _changed(session: Session, monitor: Monitor, limit: int, seen: set[tuple[str, str]]) -> None:
    for record in _records(session.cancelled, monitor, limit):
        key = (record["gid"], json.dumps(record))
        if key not in seen:
            seen.add(key)
            _json(record)


def _table(records: list[dict[str, Any]]) -> Table:
    table = Table("gid", "date", "status", "started", "duration", "jobs")
    for r in records:
        started = (
            "" if r["started"] is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started"]))
        )
        duration = "" if r["duration"] is None else f"{r['duration']:.1f}s"
        jobs = " ".join(f"{job}:{status}" for job, status in r["jobs"].items())
        if r.get("missed"):
            late = ", ".join("the generation" if job == APPL_END else job for job in r["missed"])
            jobs += f"  (deadline missed: {late})"
        for job, who in r.get("taken_over", {}).items():
            jobs += f"  ({job} taken over from {who})"
        table.add_row(r["gid"], r["date"] or "", r["status"], started, duration, jobs)
    return table


@click.command()
@workflow_argument
@click.argument("job")
@gid_option
@click.option("--attempt", type=click.IntRange(1), help="Which attempt [default: the latest].")
@broker_option
@timeout_option(5.0)
@output_option
def logs(
    workflow: str, job: str, gid: str, attempt: int | None, broker_uri: Brokers, timeout: float, output: str
) -> None:
    """What JOB printed (stdout and stderr) in generation GID, fetched from its agent: the last 64
    KiB of it, saying on stderr when the log is longer. A job that did not run (NORUN: not
    scheduled that day, skipped or cancelled) has no log, nor has an approval step: nothing on
    stdout, why on stderr (-o json: "status" and "detail" added)."""
    found = _session(broker_uri, timeout, lambda session: session.logs(workflow, job, gid, attempt or 0))
    if output == "json":
        _json(found)
        return
    if "status" in found:  # NORUN, or an approval step's end
        why = f": {found['detail']}" if found["detail"] else ""
        click.echo(f"wfm: {job} did not run in {gid} ({found['status']}{why}), so it has no log", err=True)
        return
    click.echo(found["text"], nl=False)
    attempts = ", ".join(map(str, found["attempts"]))
    cut = f"; the last {len(found['text'].encode())} of {found['size']} bytes" if found["truncated"] else ""
    running = "" if found["ended"] else "; still running"
    click.echo(
        f"wfm: {job} attempt {found['attempt']} (attempts {attempts}) on {found['agent']}{cut}{running}",
        err=True,
    )


def _answered(
    verb: str, workflow: str, acks: dict[str, tuple[str, str]], output: str, **record: str | bool | None
) -> None:
    """Each agent's acknowledgement on a line; exit status 1 if one did not take the envelope."""
    for agent, (result, detail) in sorted(acks.items()):
        if output == "json":
            _json({"agent": agent, "workflow": workflow, **record, "result": result, "detail": detail})
        else:
            click.echo(f"{agent}: {result} {detail}")
    refused = sorted(agent for agent, (result, _) in acks.items() if result not in ("OK", "UNCHANGED"))
    if refused:
        click.echo(f"wfm: error: {verb} refused by {', '.join(refused)}", err=True)
        raise click.exceptions.Exit(1)


@click.command()
@workflow_argument
@gid_option
@broker_option
@timeout_option(10.0)
@click.option(
    "--force",
    is_flag=True,
    help="Cancel GID even if no agent knows it (yet): its jobs will not run if it starts.",
)
@output_option
@signing_options
def cancel(
    workflow: str,
    gid: str,
    broker_uri: Brokers,
    timeout: float,
    force: bool,
    output: str,
    deployer: Callable[[], Deployer],
) -> None:
    """Cancel generation GID of WORKFLOW: its running jobs are stopped, the others publish NORUN
    (detail cancelled), and it ends with APPL_END CANCELLED. Needs a deployer's key (signed, like a
    deployment). Exit status 1 if no agent knows GID (a typo?; nothing is sent unless --force) or
    an agent refused."""
    sign = deployer().sign
    acks = _session(broker_uri, timeout, lambda session: session.cancel(workflow, gid, sign, force))
    _answered(f"cancel of {gid}", workflow, acks, output, gid=gid)


@click.command()
@workflow_argument
@gid_option
@click.option(
    "--from", "start", metavar="JOB", help="Rerun JOB and the jobs after it; the others keep GID's outcome."
)
@broker_option
@timeout_option(10.0)
@params_option
@output_option
@signing_options
def rerun(
    workflow: str,
    gid: str,
    start: str | None,
    broker_uri: Brokers,
    timeout: float,
    params: dict[str, str],
    output: str,
    deployer: Callable[[], Deployer],
) -> None:
    """Run generation GID of WORKFLOW again, on its date, as a new generation GID-rN (printed):
    every job, or with --from JOB that job and those after it (the other jobs republish their
    outcome in GID, detail "reused from GID", without running). It runs with GID's run
    parameters; --param KEY=VALUE overrides one (checked as wfm trigger checks them: exit
    status 2, nothing sent, if they do not fit)."""
    sign = deployer().sign
    try:
        new = _session(
            broker_uri,
            timeout,
            lambda session: session.rerun(workflow, gid, start, sign, default_outbox(), params),
        )
    except BadParams as error:
        raise click.UsageError(f"{error}; nothing sent") from None
    if output == "json":
        _json({"workflow": workflow, "gid": new, "rerun_of": gid, "from": start})
    else:
        click.echo(new)
