"""``wfm web``: the dashboard (``wfm.web``) served by uvicorn until SIGINT/SIGTERM."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from broker.client.reconnect import BrokerList
from broker.transport.tls import Identity
from wfm.cli.options import broker_uri_option, metrics_option
from wfm.cli.serving import exposed, serve
from wfm.metrics import Address

DEFAULT_PORT = 7180


@click.command()
@broker_uri_option("Brokers to watch (give every broker: see docs/web.md)", required=True)
@click.option("--store", type=click.Path(file_okay=False, path_type=Path), help="History store directory.")
@click.option(
    "--workflows",
    "workflow_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Workflow definitions (*.xml) to draw, as deployed.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--token",
    envvar="WFM_WEB_TOKEN",
    show_envvar=True,
    help="The token every request must carry (default: a new random one, printed in the URL).",
)
@metrics_option
def web(
    broker_uri: BrokerList,
    store: Path | None,
    workflow_dir: Path | None,
    port: int,
    host: str,
    token: str | None,
    metrics: Address | None,
) -> None:
    """Serve the dashboard (overlay, workflows, runs, history) on http://HOST:PORT/ until Ctrl-C.

    It acts with the identity of --tls/--identity: the Trigger button needs role deployer. Every
    request needs the token: open the printed URL (it sets a cookie), or send the header
    'Authorization: Bearer TOKEN'. A token given is not printed (the URL says where it came from)."""
    import uvicorn  # the web stack: loaded only by this command

    from wfm.web import Dashboard, create_app
    from wfm.web.guard import Guard, check_token, new_token

    try:
        secret = check_token(token) if token else new_token()
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--token / WFM_WEB_TOKEN") from None
    listener = _listen(host, port)
    tls: Identity | None = broker_uri.tls
    dashboard = Dashboard(broker_uri, tls, workflow_dir, store)
    bound = listener.getsockname()[1]
    guard = Guard.listening(host, bound, secret)
    login = " (open it with ?token=TOKEN, the token given)" if token else f"?token={secret}"
    click.echo(f"wfm: dashboard on http://{host}:{bound}/{login}", err=True)
    app: Any = create_app(dashboard, guard)
    served = None
    if metrics is not None:
        from wfm.metrics.families import CountRequests, web_metrics

        answered: dict[str, int] = {}
        app = CountRequests(app, answered)
        served = exposed(metrics, web_metrics(dashboard, answered))
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2, lifespan="on")

    class Server(uvicorn.Server):
        """SIGINT and SIGTERM are ours (``serve``): uvicorn's own handlers would raise the signal
        again once stopped, and the command would not exit 0 like the other long-lived ones."""

        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    server = Server(config)

    class Serving:
        async def run(self) -> None:
            await server.serve(sockets=[listener])

        def stop(self) -> None:
            server.should_exit = True
            dashboard.close_streams()  # open event streams would hold the shutdown up

    serve(Serving(), served)


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so a port in use is one line, not a uvicorn traceback."""
    try:
        return socket.create_server((host, port))
    except OSError as error:
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {os.strerror(error.errno) if error.errno else error}"
        ) from None
