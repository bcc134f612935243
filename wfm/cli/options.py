"""Options and parameter types that several commands share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from broker.client.reconnect import BrokerList, brokers
from broker.transport.uri import BrokerURI

__all__ = [
    "BROKERS",
    "URI",
    "BrokersType",
    "URIType",
    "broker_option",
    "broker_uri_option",
    "checked",
    "output_option",
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


def broker_uri_option(
    what: str, required: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--broker URI[,URI...]`` (or ``$WFM_BROKER``) as the ``broker_uri`` parameter, a
    ``BrokerList``: the client fails over along it. ``what`` starts its help."""
    return click.option(
        "--broker",
        "broker_uri",
        type=BROKERS,
        envvar="WFM_BROKER",
        required=required,
        help=f"{what}: socket://HOST:PORT/ID, or several comma-separated to fail over along"
        " (default: $WFM_BROKER).",
    )


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
