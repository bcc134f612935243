"""Progress of a slow step on stderr, so stdout keeps only data: a rich spinner with a live
status on a terminal, plain ``wfm: ...`` lines otherwise (a log file or a CI job reads those;
a spinner there would be noise). Plain lines start only once the step has taken QUIET seconds:
a step that is quick, or fails at once with its one-line error, leaves nothing else behind."""

from __future__ import annotations

import threading
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
    on a terminal a spinner (cleared at the end), else a line per new phrase, from QUIET seconds on."""
    console = console or Console(stderr=True)
    if console.is_terminal:
        with console.status(f"{what} ...") as status:
            yield lambda phrase: status.update(f"{what}: {phrase}")
        return
    latest, shown = [""], [""]
    lock = threading.Lock()

    def show() -> None:
        with lock:
            if latest[0] != shown[0]:
                shown[0] = latest[0]
                click.echo(f"wfm: {what}: {latest[0]}", err=True)

    def line(phrase: str) -> None:
        latest[0] = phrase
        if over.is_set():
            show()

    def end_of_quiet() -> None:  # a phrase said in the quiet start is shown at its end
        over.set()
        show()

    over = threading.Event()
    quiet = threading.Timer(QUIET, end_of_quiet)
    quiet.daemon = True
    quiet.start()
    try:
        yield line
    finally:
        quiet.cancel()
