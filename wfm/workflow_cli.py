"""``wfm validate`` and ``wfm deploy``: thin commands over :mod:`wfm.workflow`."""

from __future__ import annotations

from pathlib import Path

import click

from broker.transport.uri import BrokerURI
from wfm.overlay_cli import URI, output_option
from wfm.workflow import DefinitionError, Plan, Problem, Workflow, load, translate

workflow_file = click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))


@click.command()
@workflow_file
def validate(file: Path) -> None:
    """Check a workflow definition: every problem is printed as FILE:LINE: message (exit status 1)."""
    try:
        workflow = _read(file)
    except DefinitionError as error:
        for problem in error.problems:
            click.echo(_located(file, problem), err=True)
        raise click.exceptions.Exit(1) from None
    click.echo(f"{file}: ok ({len(workflow.jobs)} jobs, agents {', '.join(workflow.agents)})")


@click.command()
@workflow_file
@click.option("--broker", "broker_uri", type=URI, envvar="WFM_BROKER",
              help="Broker to deploy through, socket://HOST:PORT/ID (default: $WFM_BROKER).")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Print the plan and send nothing.")
@output_option
def deploy(file: Path, broker_uri: BrokerURI | None, dry_run: bool, output: str) -> None:
    """Translate a workflow into AGENT_CTL envelopes and deploy them (--dry-run: print them)."""
    workflow = _load(file)
    plan = translate(workflow)
    if not dry_run:
        raise click.ClickException("deploying needs --dry-run in this version")
    click.echo(plan.to_json() if output == "json" else _listing(workflow, plan))


def _load(file: Path) -> Workflow:
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
