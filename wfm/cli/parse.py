"""``wfm parse``: check a message of the language and print its canonical text."""

from __future__ import annotations

import json
from collections.abc import Callable

import click

from broker.language import ParseError, parse_composite, parse_filter, parse_publication
from broker.language.model import Publication

PARSERS: dict[str, Callable[[str], object]] = {
    "publication": parse_publication,
    "filter": parse_filter,
    "composite": parse_composite,
}


@click.command()
@click.argument("kind", type=click.Choice(sorted(PARSERS)), metavar="KIND")
@click.argument("text")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", help="Output format.")
def parse(kind: str, text: str, output: str) -> None:
    """Check a message and print its canonical text.

    KIND is publication, filter (a subscription or advertisement) or composite. Example:

        wfm parse filter "[class,eq,stock],[price,>,100]"
    """
    try:
        message = PARSERS[kind](text)
    except ParseError as error:
        raise click.ClickException(f"invalid {kind}: {error}") from None
    if output == "text":
        click.echo(str(message))
        return
    record: dict[str, object] = {"kind": kind, "canonical": str(message)}
    if isinstance(message, Publication):
        record["attributes"] = dict(message)
    click.echo(json.dumps(record, ensure_ascii=False))
