"""``wfm agent``: one agent daemon, until SIGINT or SIGTERM."""

from __future__ import annotations

from pathlib import Path

import click

from agents.forgetting import DAY
from agents.runner import KEEP_DAYS, KEEP_RUNS, Retention
from agents.service import AgentService
from agents.state import Agent
from agents.trust import Trust, identity_author, load_ca, load_public_key
from broker.client import Brokers
from broker.client.reconnect import BrokerList
from broker.language.values import check_string
from broker.transport.revocation import Revocations
from broker.transport.tls import Identity
from wfm.cli.options import broker_option, metrics_option
from wfm.cli.serving import exposed, serve
from wfm.metrics import Address
from workflow_messages.signature import Author


def _name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        check_string(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    if not value.strip():
        raise click.BadParameter("an agent name cannot be empty")
    return value


@click.command()
@click.option("--name", required=True, callback=_name, help="The agent name the workflows use.")
@broker_option
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Journal and run logs (default: ./.wfm/agents/NAME).",
)
@click.option(
    "--max-jobs",
    type=click.IntRange(1, 10_000),
    default=4,
    show_default=True,
    help="Jobs run at once; more wait in a queue.",
)
@click.option(
    "--retry-backoff",
    type=click.FloatRange(0, 3600),
    default=1.0,
    show_default=True,
    help="Seconds before the first retry of a failed job, doubling per attempt.",
)
@click.option(
    "--keep-runs",
    type=click.IntRange(1),
    default=KEEP_RUNS,
    show_default=True,
    help="Run logs kept: those of the newest N generations of each workflow.",
)
@click.option(
    "--keep-days",
    type=click.FloatRange(0, min_open=True),
    default=KEEP_DAYS,
    show_default=True,
    help="Run logs older than D days are deleted, even among the newest N; a generation not seen "
    "to end (APPL_END lost) within D days is forgotten.",
)
@click.option(
    "--trust",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="KEYFILE",
    help="Without --tls: take envelopes only from this deployer public key (PEM, the .pub beside "
    "the key wfm deploy made); by default the first key seen is pinned.",
)
@metrics_option
def agent(
    name: str,
    broker_uri: Brokers,
    state_dir: Path | None,
    max_jobs: int,
    retry_backoff: float,
    keep_runs: int,
    keep_days: float,
    trust: Path | None,
    metrics: Address | None,
) -> None:
    """Run an agent: install the AGENT_CTL envelopes addressed to NAME, if signed by a deployer it
    trusts, and run their jobs."""
    tls = broker_uri.tls if isinstance(broker_uri, BrokerList) else None
    if tls is not None and trust is not None:
        raise click.UsageError("--trust is for agents without --tls (with it, the CA says who deploys)")
    directory = (state_dir or Path(".wfm", "agents", name)).absolute()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise click.ClickException(
            f"cannot create the state directory {directory}: {error.strerror}"
        ) from None
    retention = Retention(keep_runs, keep_days)
    policy = Trust(
        ca=None if tls is None else load_ca(tls.directory),  # deployers are who its CA says
        revocations=None if tls is None else Revocations(tls.directory),
        trusted=None if trust is None else load_public_key(trust),
    )
    agent_ = Agent(name, max_jobs, retry_backoff, keep_days * DAY, policy)
    author = None if tls is None else _author(tls, name)
    service = AgentService(agent_, broker_uri, directory, Path.cwd(), retention, author)
    served = None
    if metrics is not None:
        from wfm.metrics.families import agent_metrics

        served = exposed(metrics, agent_metrics(service))
    serve(service, served)


def _author(tls: Identity, name: str) -> Author:
    """Who signs the agent's job statuses: its TLS identity, which must be the agent's name (the
    brokers take its statuses under that name only, and agents check the signer is it)."""
    if tls.name != name:
        raise click.UsageError(f"--identity {tls.name} is not the agent's --name {name}")
    return identity_author(tls.directory, name)
