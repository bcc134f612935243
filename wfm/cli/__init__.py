"""The ``wfm`` command line: each command is a few lines over library code.

Data goes to stdout; logs, progress and errors to stderr. Every error is one line, ``wfm: error:
...``, with a non-zero exit status; bad input never shows a traceback. :func:`main` is the one
place that turns what a command raised into its exit status (:data:`EXIT_STATUSES`).

One module per group of commands; the group imports a command's module only when that command
runs (or ``--help`` lists it), so ``wfm broker`` and ``wfm agent`` start without loading lxml,
Spark or the history code they never use.
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from broker.errors import WfmError
from wfm import __version__
from wfm.cli.serving import INTERRUPTED

__all__ = ["COMMANDS", "EXIT_STATUSES", "TIMED_OUT", "TimedOut", "cli", "main"]

TIMED_OUT = 3
EXIT_STATUSES = {
    0: "ok",
    1: "failure (the error says what failed)",
    2: "usage error (a bad option or argument)",
    TIMED_OUT: "timeout (an answer or an end did not come in time)",
    130: "interrupted (Ctrl-C)",
}

# command name -> the module of wfm.cli that defines it (as a function of the same name)
COMMANDS = {
    "parse": "parse",
    "broker": "overlay",
    "status": "overlay",
    "client": "overlay",
    "validate": "workflow",
    "deploy": "workflow",
    "undeploy": "workflow",
    "agent": "agent",
    "trigger": "run",
    "schedule": "run",
    "backfill": "backfill",
    "monitor": "run",
    "up": "run",
    "history": "history",
    "compact": "history",
    "report": "history",
    "historian": "historian",
    "spark-connect": "spark",
    "puppet": "puppet",
    "certs": "certs",
    "web": "web",
    "workflows": "operations",
    "runs": "operations",
    "logs": "operations",
    "cancel": "operations",
    "rerun": "operations",
    "hold": "holds",
    "release": "holds",
    "approve": "holds",
    "alerts": "alerts",
}


class TimedOut(click.ClickException):
    """A wait that ended without its answer: exit status 3, whatever the command."""

    exit_code = TIMED_OUT


class LazyGroup(click.Group):
    """A group whose commands are named in :data:`COMMANDS` and imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module = importlib.import_module(f"{__name__}.{COMMANDS[cmd_name]}")
        command: click.Command = getattr(module, cmd_name.replace("-", "_"))
        return command

    def invoke(self, ctx: click.Context) -> object:
        """The one boundary where the library's errors (one line each) become the command's error."""
        try:
            return super().invoke(ctx)
        except TimeoutError as error:  # NoAnswer among them: a peer that did not answer in time
            raise TimedOut(str(error) or "timed out") from None
        except WfmError as error:
            raise click.ClickException(str(error)) from None


EPILOG = "\b\nExit status:\n" + "\n".join(f"  {code:<4} {what}" for code, what in EXIT_STATUSES.items())
EPILOG += '\n\nShell completion (bash; zsh and fish alike): eval "$(_WFM_COMPLETE=bash_source wfm)"'


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.version_option(__version__, prog_name="wfm")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
def cli(verbose: int) -> None:
    """A decentralised workflow manager on a content-based publish/subscribe overlay."""
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )


def main(argv: list[str] | None = None) -> int:
    """Console entry point: click's errors become one line on stderr, and Ctrl-C exit status 130
    whether it came as KeyboardInterrupt or to a command that stopped cleanly on SIGINT."""
    INTERRUPTED.clear()
    try:
        # without standalone mode, click returns the status of ctx.exit(N) / raise Exit(N)
        status = cli.main(args=argv, prog_name="wfm", standalone_mode=False)
    except click.exceptions.Exit as done:
        status = done.exit_code
    except click.exceptions.Abort:  # click's name for KeyboardInterrupt
        INTERRUPTED.set()
    except click.ClickException as error:
        if not INTERRUPTED.is_set():
            click.echo(f"wfm: error: {error.format_message()}", err=True)
        status = error.exit_code
    if INTERRUPTED.is_set():
        click.echo("wfm: interrupted", err=True)
        return 130
    return status if isinstance(status, int) else 0
