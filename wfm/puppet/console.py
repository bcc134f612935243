"""The PuppetMaster's console (SESDAD, seed 002 section 5: "a simple console where an human
operator may type the commands"): commands read one at a time and carried out as they come.

The words and the checks are a script's (:func:`.script.parse_line`, :func:`.script.check_command`),
but a bad line does not end the run: the operator sees one line saying what is wrong, with its
line number, and types the next. The end of input ends the console; the caller then drains and
checks as after a script. Reading is kept apart from doing (``Obeys``), so the loop is tested with
a list of lines and a recorder, without processes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TextIO

from wfm.puppet.script import Command, ScriptError, check_command, parse_line
from wfm.topology import Topology

__all__ = ["PROMPT", "Obeys", "console"]

PROMPT = "puppet> "


class Obeys(Protocol):
    """What carries out a command (``Puppet``, or a recorder in tests)."""

    def do(self, command: Command) -> None: ...


def console(
    puppet: Obeys,
    topology: Topology,
    lines: TextIO,
    error: Callable[[str], None],
    prompt: Callable[[], None] | None = None,
    source: str = "<stdin>",
) -> int:
    """Carry out each command read from ``lines`` until its end; ``error`` gets one line per bad
    command (``SOURCE:LINE: what is wrong``), ``prompt`` (if any) is called before each read.
    Returns the number of commands carried out."""
    done = number = 0
    while True:
        if prompt is not None:
            prompt()
        raw = lines.readline()
        if not raw:
            return done
        number += 1
        try:
            command = parse_line(raw, number, source)
            if command is None:
                continue
            check_command(command, topology, source)
        except ScriptError as problem:
            error(str(problem))
            continue
        puppet.do(command)
        done += 1
