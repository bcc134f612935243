"""The ``wfm`` command line: each command is a few lines over library code.

Data goes to stdout, logs and errors to stderr. Every error is one line, ``wfm: error: ...``,
with a non-zero exit status; bad input never shows a traceback.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from collections.abc import Callable

import click

from broker.language import ParseError, parse_composite, parse_filter, parse_publication
from broker.language.model import Publication
from wfm import __version__

PARSERS: dict[str, Callable[[str], object]] = {
    "publication": parse_publication,
    "filter": parse_filter,
    "composite": parse_composite,
}


# Each command's module is imported only when that command is used: ``wfm agent`` must not load
# lxml (the XML loader of ``wfm deploy``), Spark (``wfm history``) or APScheduler (``wfm schedule``).
COMMANDS = {
    "broker": "wfm.overlay_cli",
    "status": "wfm.overlay_cli",
    "client": "wfm.overlay_cli",
    "validate": "wfm.workflow_cli",
    "deploy": "wfm.workflow_cli",
    "undeploy": "wfm.workflow_cli",
    "agent": "wfm.agent_cli",
    "trigger": "wfm.run_cli",
    "schedule": "wfm.run_cli",
    "monitor": "wfm.run_cli",
    "up": "wfm.run_cli",
    "history": "wfm.history_cli",
    "historian": "wfm.historian_cli",
    "compact": "wfm.history_cli",
    "report": "wfm.history_cli",
}


class LazyGroup(click.Group):
    """A group that imports the module of a command in :data:`COMMANDS` when it is looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        command = getattr(importlib.import_module(COMMANDS[cmd_name]), cmd_name)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
