"""Progress of a slow step on stderr, so stdout keeps only data: a rich spinner with a live
status on a terminal, plain ``wfm: ...`` lines otherwise (a log file or a CI job reads those;
a spinner there would be noise). Plain lines start only once the step has taken QUIET seconds:
a step that is quick, or fails at once with its one-line error, leaves nothing else behind."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click
from rich.console import Console

__all__ = ["QUIET", "Say", "progress"]

QUIET = 1.0

Say = Callable[[str], None]  # how a step reports where it is: one short phrase


@contextmanager
def progress(what: str, console: Console | None = None) -> Iterator[Say]:
    """While the block runs, show ``what`` and the latest phrase given to the yielded function:
    on a terminal a spinner (cleared at the end), else a line per new phrase after QUIET seconds."""
    console = console or Console(stderr=True)
    if console.is_terminal:
        with console.status(f"{what} ...") as status:
            yield lambda phrase: status.update(f"{what}: {phrase}")
        return
    said = [""]
    quiet_until = time.monotonic() + QUIET

    def line(phrase: str) -> None:
        if phrase != said[0] and time.monotonic() >= quiet_until:
            said[0] = phrase
            click.echo(f"wfm: {what}: {phrase}", err=True)

    yield line
