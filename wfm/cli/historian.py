"""``wfm historian``: keep publications and answer historic queries, until SIGINT or SIGTERM."""

from __future__ import annotations

from pathlib import Path

import click

from broker.client import Brokers
from broker.language import Filter
from broker.language.values import check_string
from wfm.cli.options import acl_option, broker_option, metrics_option
from wfm.cli.serving import exposed, serve
from wfm.history.historian import DEFAULT_CLASSES, RecorderService
from wfm.history.spark import MASTER_ENV
from wfm.metrics import Address
from wfm.security.acl import load_policy


def _classes(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    for cls in value:
        try:
            Filter(check_string(cls))
        except ValueError as error:
            raise click.BadParameter(f"{cls!r}: {error}") from None
    return value or DEFAULT_CLASSES


@click.command()
@broker_option
@click.option(
    "--store",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="History store directory (created if missing).",
)
@click.option(
    "--keep",
    multiple=True,
    callback=_classes,
    metavar="CLASS",
    help="A class to keep (repeatable; default: Trigger, JOBSTATUS, AGENT_CTL, ALERT, JOBSTATE).",
)
@click.option(
    "--spark-master",
    envvar=MASTER_ENV,
    default=None,
    help="Spark master for compaction and queries (default: the store's warm Spark Connect server, with"
    " its token, else local[*]; another sc:// URL names its token file: sc://HOST:PORT/;token_file=FILE).",
)
@click.option(
    "--compact-every",
    type=click.FloatRange(0),
    default=300.0,
    show_default=True,
    help="Seconds between compactions of the landing log (0: never).",
)
@acl_option
@metrics_option
def historian(
    broker_uri: Brokers,
    store: Path,
    keep: tuple[str, ...],
    spark_master: str | None,
    compact_every: float,
    acl: Path | None,
    metrics: Address | None,
) -> None:
    """Keep every publication of the kept classes and answer historic queries, until SIGINT/SIGTERM.

    With TLS, a query is answered only if signed by its asker, and only if the asker may subscribe
    to its filter under the brokers' access rules (the defaults, or --acl as the brokers have it)."""
    try:
        store.mkdir(mode=0o700, parents=True, exist_ok=True)
        service = RecorderService(
            broker_uri, store.absolute(), keep, spark_master, compact_every, policy=load_policy(acl)
        )
    except OSError as error:
        raise click.ClickException(f"cannot use the store {store}: {error.strerror or error}") from None
    served = None
    if metrics is not None:
        from wfm.metrics.families import historian_metrics

        served = exposed(metrics, historian_metrics(service))
    serve(service, served)
