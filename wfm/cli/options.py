"""Options and parameter types that several commands share."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from broker.client.reconnect import BrokerList, brokers
from broker.errors import LocalError
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI
from wfm.metrics import Address
from workflow_messages.params import parse_assignment

__all__ = [
    "BROKERS",
    "METRICS",
    "URI",
    "AddressType",
    "BrokersType",
    "URIType",
    "broker_option",
    "broker_uri_option",
    "checked",
    "metrics_option",
    "output_option",
    "params_option",
    "tls_options",
]


class URIType(click.ParamType):
    """socket://HOST:PORT/ID as a BrokerURI; a malformed one is a usage error naming the option."""

    name = "URI"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> BrokerURI:
        if isinstance(value, BrokerURI):
            return value
        try:
            return BrokerURI.parse(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


URI = URIType()


class BrokersType(click.ParamType):
    """One broker URI or several, comma-separated, to fail over along; a malformed one is a
    usage error naming the option."""

    name = "URI[,URI...]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> BrokerList:
        try:
            return brokers(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


BROKERS = BrokersType()


class AddressType(click.ParamType):
    """HOST:PORT as an ``Address``; anything else is a usage error naming the option."""

    name = "HOST:PORT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Address:
        if isinstance(value, Address):
            return value
        try:
            return Address.parse(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


METRICS = AddressType()

metrics_option = click.option(
    "--metrics",
    type=METRICS,
    default=None,
    help="Serve Prometheus metrics at http://HOST:PORT/metrics (docs/metrics.md).",
)


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def tls_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--tls DIR`` and ``--identity NAME`` (or ``$WFM_TLS``, ``$WFM_IDENTITY``) as the ``tls``
    parameter: the ``Identity`` loaded from them, or None when neither is given."""

    @functools.wraps(command)
    def with_identity(*args: Any, tls_dir: Path | None, identity: str | None, **kwargs: Any) -> Any:
        return command(*args, tls=_identity(tls_dir, identity), **kwargs)

    with_identity = click.option(
        "--identity",
        envvar="WFM_IDENTITY",
        metavar="NAME",
        help="This process's identity: DIR/NAME.crt and DIR/NAME.key (default: $WFM_IDENTITY).",
    )(with_identity)
    return click.option(
        "--tls",
        "tls_dir",
        envvar="WFM_TLS",
        type=click.Path(file_okay=False, path_type=Path),
        metavar="DIR",
        help="Mutual TLS on every link, with the certificates in DIR made by wfm certs (default: $WFM_TLS).",
    )(with_identity)


def _identity(directory: Path | None, name: str | None) -> Identity | None:
    if directory is None and name is None:
        return None
    if directory is None or name is None:
        if name is None:
            raise click.UsageError("--tls needs --identity NAME (or $WFM_IDENTITY)")
        raise click.UsageError("--identity needs --tls DIR (or $WFM_TLS)")
    try:
        return Identity(directory, name)
    except LocalError as error:
        raise click.BadParameter(str(error), param_hint="'--identity'") from None


def broker_uri_option(what: str, required: bool = False) -> Decorator:
    """``--broker URI[,URI...]`` (or ``$WFM_BROKER``) as the ``broker_uri`` parameter, a
    ``BrokerList``: the client fails over along it, with the identity of ``--tls`` and
    ``--identity`` (see :func:`tls_options`) if given. ``what`` starts its help."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def secured(*args: Any, broker_uri: BrokerList | None, tls: Identity | None, **kwargs: Any) -> Any:
            return command(*args, broker_uri=broker_uri and broker_uri.secured(tls), **kwargs)

        return click.option(
            "--broker",
            "broker_uri",
            type=BROKERS,
            envvar="WFM_BROKER",
            required=required,
            help=f"{what}: socket://HOST:PORT/ID, or several comma-separated to fail over along"
            " (default: $WFM_BROKER).",
        )(tls_options(secured))

    return decorate


broker_option = broker_uri_option("Broker to connect to", required=True)
output_option = click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", help="Output format."
)


def checked(check: Callable[[str], object]) -> Callable[[click.Context, click.Parameter, object], object]:
    """A click callback that turns a validator's ValueError into a one-line usage error."""

    def callback(ctx: click.Context, param: click.Parameter, value: object) -> object:
        try:
            if isinstance(value, tuple):
                return tuple(check(v) for v in value)
            return None if value is None else check(str(value))
        except ValueError as error:
            raise click.BadParameter(str(error), ctx, param) from None

    return callback


def _params(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, str]:
    found: dict[str, str] = {}
    for text in value:
        try:
            key, given = parse_assignment(text)
        except ValueError as error:
            raise click.BadParameter(str(error), ctx, param) from None
        if key in found:
            raise click.BadParameter(f"parameter {key} given twice", ctx, param)
        found[key] = given
    return found


params_option = click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_params,
    help="A run parameter the workflow declares (repeatable); its jobs see it as $WFM_PARAM_KEY.",
)


acl_option = click.option(
    "--acl",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="TOML file of access rules, in place of the defaults of the roles it names "
    "(docs/security.md); applied to clients with a TLS certificate.",
)
