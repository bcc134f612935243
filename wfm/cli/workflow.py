"""``wfm validate``, ``wfm deploy`` and ``wfm undeploy``: thin commands over :mod:`wfm.workflow`
and :mod:`wfm.deploy`."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from broker.client import Brokers, ConnectError, RefusedError
from broker.client.reconnect import BrokerList
from broker.errors import LinkClosed
from broker.language import Filter, Publication
from broker.transport.tls import Identity
from wfm import facts
from wfm.cli import TimedOut
from wfm.cli.options import broker_uri_option, output_option
from wfm.cli.progress import progress
from wfm.deploy import AgentReport, ordered_batches, silent_agents, undeploy_publications, withdraw
from wfm.deploy import deploy as deploy_plan
from wfm.history.asker import HistoryError
from wfm.operations import Deployed, NoReply, Session
from wfm.signing import Deployer, signer_of
from wfm.triggers import check_workflow
from wfm.workflow import DefinitionError, Plan, Problem, Workflow, calendars, load, overlap, translate

Sign = Callable[[Publication], Publication]

workflow_file = click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
timeout_option = click.option(
    "--timeout",
    type=click.FloatRange(0.1, 3600),
    default=10.0,
    show_default=True,
    help="Seconds to wait for every agent's acknowledgement.",
)


@click.command()
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@output_option
def validate(files: tuple[Path, ...], output: str) -> None:
    """Check workflow definitions: every problem is printed as FILE:LINE: message on stderr, and
    exit status 1 if any file has one. -o json: one object per file on stdout, {"file", "ok",
    "workflow", "jobs", "agents", "problems": [{"line", "message"}]}, with "calendars" and
    "overlap" ({"max_active", "policy"}) for a workflow that declares them."""
    failed = False
    for file in files:
        try:
            workflow = _read(file)
        except DefinitionError as error:
            failed = True
            if output == "json":
                problems = [{"line": p.line, "message": p.message} for p in error.problems]
                click.echo(json.dumps({"file": str(file), "ok": False, "problems": problems}))
            for problem in error.problems:
                click.echo(_located(file, problem), err=True)
            continue
        if output == "json":
            record = {"file": str(file), "ok": True, "workflow": workflow.name, "jobs": len(workflow.jobs)}
            if workflow.calendars:  # only when declared: the same answer as before for the others
                record["calendars"] = calendars.listing(workflow)
            if workflow.overlap is not None:  # likewise
                record["overlap"] = overlap.listing(workflow)
            click.echo(json.dumps({**record, "agents": list(workflow.agents), "problems": []}))
        else:
            click.echo(f"{file}: ok ({len(workflow.jobs)} jobs, agents {', '.join(workflow.agents)})")
            if workflow.overlap is not None:
                click.echo(f"  {workflow.overlap.describe()}")
            for line in calendars.lines(workflow):
                click.echo(f"  {line}")
    if failed:
        raise click.exceptions.Exit(1)


def signing_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The ``deployer`` parameter, a function giving the :class:`Deployer` that signs the envelopes:
    with ``--tls DIR --identity NAME`` (which come with ``--broker``) the identity's deployer
    certificate, else ``--key FILE``. A function: ``--dry-run`` without ``-o json`` signs
    nothing, and makes no key."""

    @functools.wraps(command)
    def with_deployer(*args: Any, key: Path | None, **kwargs: Any) -> Any:
        brokers = kwargs.get("broker_uri")
        tls = brokers.tls if isinstance(brokers, BrokerList) else None
        return command(*args, deployer=lambda: _deployer(tls, key), **kwargs)

    return click.option(
        "--key",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Without --tls: the deployer's private key, made on first use "
        "(default: $XDG_STATE_HOME/wfm/deployer.key).",
    )(with_deployer)


def _deployer(tls: Identity | None, key: Path | None) -> Deployer:
    if tls is not None and key is not None:
        raise click.UsageError("--key is for deploying without --tls")
    return signer_of(tls, key)


@click.command()
@workflow_file
@broker_uri_option("Broker to deploy through")
@click.option("--dry-run", is_flag=True, help="Print the plan and send nothing.")
@output_option
@timeout_option
@signing_options
def deploy(
    file: Path,
    broker_uri: Brokers | None,
    dry_run: bool,
    output: str,
    timeout: float,
    deployer: Callable[[], Deployer],
) -> None:
    """Deploy a workflow: publish its signed AGENT_CTL envelopes and wait for every agent's
    acknowledgement, showing progress on stderr (exit status 1 naming the agents that failed or
    refused, 3 naming those that did not answer). First every agent the file names is asked
    whether it is up: if one does not answer within --timeout, nothing is sent (exit status 3,
    naming it), so no workflow is left half-deployed. If one fails or stops answering once
    envelopes are out, the new version is withdrawn from the agents that installed it (rolled
    back: the version deployed before goes on), and the error says so. Agents that hold the
    workflow but are not in the new version are then retired: they finish the generations they
    are in and start none.
    --dry-run prints the plan (-o json: the envelopes as signed now)."""
    workflow = load_workflow(file)
    plan = translate(workflow)
    if dry_run:
        click.echo(plan.to_json(deployer().sign) if output == "json" else _listing(workflow, plan))
        return
    batches = ordered_batches(plan, workflow.coordinator)
    _send(broker_uri, plan, batches, timeout, output, deployer, replace=True)
    if filters := facts.wanted(workflow):
        _send_facts(_needed(broker_uri), plan, filters, timeout, deployer().sign)


def _send_facts(
    uri: Brokers, plan: Plan, filters: dict[str, list[Filter]], timeout: float, sign: Sign
) -> None:
    """History, then live, for the workflow's conditions (:mod:`wfm.facts`): what the historians
    kept for them goes to the waiting jobs' agents. Its problems are warnings on stderr: the
    deployment is done, and its conditions go on live."""

    def warn(problem: str) -> None:
        click.echo(f"wfm: warning: {plan.workflow} {plan.version}: {problem}", err=True)

    try:
        with progress(f"asking the history for the conditions of {plan.workflow}") as say:
            found, warnings = asyncio.run(
                facts.ask_past(uri, (f for fs in filters.values() for f in fs), timeout)
            )
            envelopes = facts.facts_publications(plan, filters, found)
            reports = (
                asyncio.run(deploy_plan(uri, plan, [envelopes], timeout, sign, say)) if envelopes else []
            )
    except (ConnectError, OSError, RefusedError, LinkClosed, HistoryError) as error:
        warn(f"cannot ask the history ({error}): its conditions see only what is published from now on")
        return
    for problem in warnings:
        warn(problem)
    for report in reports:
        for problem in report.errors:
            warn(f"{report.agent}: {problem}")
        if report.missing:
            warn(f"{report.agent} did not acknowledge {report.missing} FACTS envelopes")


@click.command()
@click.argument("target", metavar="WORKFLOW|FILE.xml")
@broker_uri_option("Broker to send through")
@timeout_option
@output_option
@signing_options
def undeploy(
    target: str, broker_uri: Brokers | None, timeout: float, output: str, deployer: Callable[[], Deployer]
) -> None:
    """Remove a workflow (every version of it): given its name, from every agent that has it
    (as they answer, like wfm workflows); given its FILE.xml, from the agents the file names."""
    broker_uri = _needed(broker_uri)
    path = Path(target)
    if target.endswith(".xml") or path.exists():
        if not path.is_file():
            raise click.UsageError(f"no file {target} (give a workflow's name or its FILE.xml)")
        plan = translate(load_workflow(path))
        publications = undeploy_publications(plan)
    else:
        try:
            check_workflow(target)
        except ValueError as error:
            raise click.UsageError(f"{error}, and no file {target}") from None
        plan, publications = _holders(broker_uri, target, timeout)
    _send(broker_uri, plan, [publications], timeout, output, deployer, verb="undeploy")


def _holders(uri: Brokers, workflow: str, timeout: float) -> tuple[Plan, list[Publication]]:
    """The UNDEPLOY envelopes of ``workflow`` for every agent that says it has a version of it,
    under its current version (any version does: an UNDEPLOY without content removes them all)."""

    async def ask() -> Deployed:
        async with Session.connect(uri, timeout) as session:
            return await session.describe(workflow)

    try:
        deployed = asyncio.run(ask())
    except NoReply as error:  # a TimeoutError, hence an OSError: before those
        raise TimedOut(f"cannot undeploy {workflow}: {error}") from None
    except (ConnectError, OSError, RefusedError, LinkClosed) as error:
        raise click.ClickException(f"cannot undeploy through {uri}: {error}") from None
    if not deployed.held:
        raise click.ClickException(f"no agent that answered has workflow {workflow} deployed")
    plan = Plan(workflow, deployed.version or min(deployed.versions), ())
    return plan, undeploy_publications(plan, deployed.held)


def _needed(broker_uri: Brokers | None) -> Brokers:
    if broker_uri is None:
        raise click.ClickException("no broker: give --broker or set WFM_BROKER")
    return broker_uri


def _send(
    broker_uri: Brokers | None,
    plan: Plan,
    batches: list[list[Publication]],
    timeout: float,
    output: str,
    deployer: Callable[[], Deployer],
    replace: bool = False,
    verb: str = "deploy",
) -> None:
    """Send ``batches`` and report each agent's answers. With ``replace`` (a deployment), first
    make sure every agent addressed answers, and retire the holders the plan leaves out."""
    uri = _needed(broker_uri)
    sign: Sign = deployer().sign
    what = f"{plan.workflow} {plan.version}"
    try:
        with progress(f"{verb}ing {what} through {uri}") as say:
            if replace:
                agents = list(dict.fromkeys(str(p["agentname"]) for batch in batches for p in batch))
                say(f"asking {', '.join(agents)} whether they are up")
                silent = asyncio.run(silent_agents(uri, agents, timeout))
                if silent:
                    raise TimedOut(
                        f"{what}: no answer within {timeout:g} s from {', '.join(silent)} (are they"
                        " running?): nothing sent, not deployed"
                    )
            retire = (lambda problem: click.echo(f"wfm: warning: {problem}", err=True)) if replace else None
            reports = asyncio.run(deploy_plan(uri, plan, batches, timeout, sign, say, retire))
    except (ConnectError, OSError, RefusedError, LinkClosed) as error:
        raise click.ClickException(f"cannot {verb} through {uri}: {error}") from None
    for report in reports:
        if output == "json":
            record = {
                "agent": report.agent,
                **{k.lower(): v for k, v in report.results.items()},
                "missing": report.missing,
                "unsent": report.unsent,
                "errors": report.errors,
                "retired": report.retired,
            }
            click.echo(json.dumps(record))
            continue
        counts = ", ".join(f"{n} {result}" for result, n in report.results.items() if n)
        missing = f", {report.missing} not acknowledged" if report.missing else ""
        unsent = f", {report.unsent} not sent (waiting for the others)" if report.unsent else ""
        retired = " (not in this version: retired, it finishes its generations in flight)" * report.retired
        click.echo(f"{report.agent}: {counts or 'nothing'}{missing}{unsent}{retired}")
        for problem in report.errors:
            click.echo(f"  {problem}")
    failed = [r.agent for r in reports if r.errors]
    silent = [r.agent for r in reports if r.missing]
    no_answer = f"no answer within {timeout:g} s from {', '.join(silent)}"
    rolled = _rolled_back(uri, plan, reports, silent, timeout, sign) if replace and (failed or silent) else ""
    if failed:
        also = f"; {no_answer}" if silent else ""
        raise click.ClickException(f"{what}: agents reported errors: {', '.join(failed)}{also}{rolled}")
    if silent:
        raise TimedOut(f"{what}: {no_answer} (are they running?){rolled}")


def _rolled_back(
    uri: Brokers, plan: Plan, reports: list[AgentReport], silent: list[str], timeout: float, sign: Sign
) -> str:
    """A deployment that did not complete is rolled back (``wfm.deploy.withdraw``): what became
    of it, as the end of the error's line (``silent``: the agents that did not answer)."""
    try:
        with progress(f"withdrawing {plan.workflow} {plan.version}") as say:
            answers = asyncio.run(withdraw(uri, plan, reports, timeout, sign, say))
    except (ConnectError, OSError, RefusedError, LinkClosed) as error:
        return f"; not rolled back ({error}): deploy again"
    if not answers:
        return "; nothing of it was installed elsewhere"
    withdrawn = [a.agent for a in answers if a.ok]
    kept = [a.agent for a in answers if not a.ok]
    said = f"; rolled back: withdrawn from {', '.join(withdrawn)}" if withdrawn else "; not rolled back"
    if kept:
        said += f" (not from {', '.join(kept)}, which did not withdraw it: deploy again)"
    if silent:
        said += f"; {', '.join(silent)} may hold part of it: deploy again once back"
    return said


def load_workflow(file: Path) -> Workflow:
    """The workflow, or one line naming its first problem (``wfm validate`` lists them all)."""
    try:
        return _read(file)
    except DefinitionError as error:
        more = len(error.problems) - 1
        hint = f" (and {more} more: wfm validate {file})" if more else ""
        raise click.ClickException(_located(file, error.problems[0]) + hint) from None


def _read(file: Path) -> Workflow:
    try:
        return load(file)
    except OSError as error:
        raise click.ClickException(f"cannot read {file}: {error.strerror}") from None


def _located(file: Path, problem: Problem) -> str:
    return f"{file}:{problem.line}: {problem.message}" if problem.line else f"{file}: {problem.message}"


def _listing(workflow: Workflow, plan: Plan) -> str:
    lines = [
        f"{plan.workflow} version {plan.version}: {len(workflow.jobs)} jobs, "
        f"coordinator {workflow.coordinator}",
        f"deployer advertises {plan.deployer_advertisement()}",
    ]
    for agent, envelopes in plan.by_agent().items():
        lines += ["", agent]
        lines += [f"  {e.command:<18} {e.job:<12} {e.content}" for e in envelopes]
    return "\n".join(lines)
