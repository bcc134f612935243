"""The ``wfm`` command line: each command is a few lines over library code.

Data goes to stdout, logs and errors to stderr. Every error is one line, ``wfm: error: ...``,
with a non-zero exit status; bad input never shows a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable

import click

from broker.language import ParseError, parse_composite, parse_filter, parse_publication
from broker.language.model import Publication
from wfm import __version__, agent_cli, historian_cli, history_cli, overlay_cli, run_cli, workflow_cli

PARSERS: dict[str, Callable[[str], object]] = {
    "publication": parse_publication,
    "filter": parse_filter,
    "composite": parse_composite,
}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wfm")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
def cli(verbose: int) -> None:
    """A decentralised workflow manager on a content-based publish/subscribe overlay."""
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )


@cli.command()
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


cli.add_command(overlay_cli.broker)
cli.add_command(overlay_cli.status)
cli.add_command(overlay_cli.client)
cli.add_command(workflow_cli.validate)
cli.add_command(workflow_cli.deploy)
cli.add_command(workflow_cli.undeploy)
cli.add_command(agent_cli.agent)
for command in (run_cli.trigger, run_cli.schedule, run_cli.monitor, run_cli.up):
    cli.add_command(command)
cli.add_command(history_cli.history)
cli.add_command(historian_cli.historian)
cli.add_command(history_cli.compact)
cli.add_command(history_cli.report)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: click's errors become one line on stderr."""
    try:
        # without standalone mode, click returns the status of ctx.exit(N) / raise Exit(N)
        status = cli.main(args=argv, prog_name="wfm", standalone_mode=False)
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.exceptions.Abort:
        click.echo("wfm: interrupted", err=True)
        return 130
    except click.ClickException as error:
        click.echo(f"wfm: error: {error.format_message()}", err=True)
        return error.exit_code
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
