"""``wfm spark-connect``: a warm Spark Connect server beside a history store, until SIGINT or SIGTERM."""

from __future__ import annotations

from pathlib import Path

import click

from wfm.cli.serving import stop_event
from wfm.history.connect import DEFAULT_PORT, TOKEN, serve_connect
from wfm.history.spark import DEFAULT_MASTER


@click.command("spark-connect")
@click.option(
    "--store",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="History store the server announces itself in (created if missing).",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port on 127.0.0.1 (loopback only; clients must present the store's token).",
)
@click.option(
    "--spark-master",
    default=DEFAULT_MASTER,
    show_default=True,
    help="Where the server runs its work: local[*], spark://HOST:PORT or yarn.",
)
@click.option(
    "--nice",
    type=click.IntRange(0, 19),
    default=0,
    show_default=True,
    help="Run the server's JVM N steps below normal CPU priority, as nice(1) does: a warm standby"
    " that gives way to brokers and agents on a busy machine (wfm up uses 10).",
)
def spark_connect(store: Path, port: int, spark_master: str, nice: int) -> None:
    """Keep Spark warm for a store: wfm history --store, report and compact use this server.

    \b
    Commands that open the store without --spark-master (and without $WFM_SPARK_MASTER) find the
    server's address in STORE/.spark-connect.json and answer without starting a JVM of their own.
    The server takes only clients that present its token, STORE/.spark-connect.token (mode 0600:
    only this user's commands can use the server). Its log is STORE/.spark-connect.log."""
    if spark_master.startswith("sc://"):
        raise click.BadParameter(
            "a Spark Connect server cannot drive another one", param_hint="--spark-master"
        )
    with stop_event() as stop:
        serve_connect(
            store.absolute(),
            port,
            spark_master,
            stop.wait,
            lambda url: click.echo(
                f"Spark Connect {url} for {store} (token in {store / TOKEN}; Ctrl-C stops it)"
            ),
            nice,
        )
