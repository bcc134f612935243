"""PuppetMaster scripts (SESDAD, seed 002 section 5), plus ``Restart NAME``:

```
Subscriber NAME Subscribe TOPIC
Subscriber NAME Unsubscribe TOPIC
Publisher NAME Publish N Ontopic TOPIC Interval MS [ms]
Status
Crash NAME        # SIGKILL
Freeze NAME       # SIGSTOP
Unfreeze NAME     # SIGCONT
Restart NAME      # start it again, same arguments and state directory
Wait MS [ms]
```

These are the seed's words, as it spells them (``Interval x ms`` and ``Wait x ms`` with or without
the ``ms``). Keywords are case-insensitive; ``#`` starts a comment. :func:`parse_script` turns the
text into commands that remember their line, and :func:`check_script` checks them against a
topology (the names exist and have the right role), so that a script with a typo on line 40 fails
before anything starts, naming that line; the console does the same one line at a time
(:func:`parse_line`, :func:`check_command`). ``str(command)`` is the command as the log shows it:
the script's own syntax, canonically spelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from broker.errors import LocalError
from wfm.puppet.topics import check_topic
from wfm.topology import Topology

__all__ = [
    "Command",
    "Publish",
    "ScriptError",
    "Signal",
    "Status",
    "Subscribe",
    "Wait",
    "check_command",
    "check_script",
    "load_script",
    "parse_line",
    "parse_script",
]

MAX_EVENTS = 10_000_000
MAX_MS = 86_400_000  # a day


class ScriptError(LocalError):
    """``SCRIPT:LINE: what is wrong``."""


@dataclass(frozen=True, slots=True)
class Subscribe:
    """``Subscriber NAME Subscribe|Unsubscribe TOPIC``."""

    name: str
    topic: str
    subscribe: bool = True
    line: int = 0

    def __str__(self) -> str:
        return f"Subscriber {self.name} {'Subscribe' if self.subscribe else 'Unsubscribe'} {self.topic}"


@dataclass(frozen=True, slots=True)
class Publish:
    name: str
    count: int
    topic: str
    interval_ms: int
    line: int = 0

    def __str__(self) -> str:
        return f"Publisher {self.name} Publish {self.count} Ontopic {self.topic} Interval {self.interval_ms}"


@dataclass(frozen=True, slots=True)
class Signal:
    """``Crash``, ``Freeze``, ``Unfreeze`` or ``Restart`` of a process; of a replicated site's
    name, of the broker that leads it then (``Crash``, ``Freeze``) or that the last such command
    hit (``Restart``, ``Unfreeze``)."""

    action: str
    name: str
    line: int = 0

    def __str__(self) -> str:
        return f"{self.action} {self.name}"


@dataclass(frozen=True, slots=True)
class Wait:
    ms: int
    line: int = 0

    def __str__(self) -> str:
        return f"Wait {self.ms}"


@dataclass(frozen=True, slots=True)
class Status:
    line: int = 0

    def __str__(self) -> str:
        return "Status"


Command = Subscribe | Publish | Signal | Wait | Status
SIGNALS = ("Crash", "Freeze", "Unfreeze", "Restart")
ROLE_OF = {"Subscriber": "subscriber", "Publisher": "publisher"}


def load_script(path: str | Path) -> list[Command]:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ScriptError(f"cannot read script {file}: {getattr(error, 'strerror', None) or error}") from None
    return parse_script(text, str(file))


def parse_script(text: str, source: str = "<script>") -> list[Command]:
    """Every command of ``text``; ScriptError naming the first bad line."""
    commands = (parse_line(raw, number, source) for number, raw in enumerate(text.splitlines(), 1))
    return [command for command in commands if command is not None]


def parse_line(raw: str, number: int, source: str = "<script>") -> Command | None:
    """One line's command (None for a blank line or a comment), so that the console can take
    commands one at a time with the same words and errors as a script file."""
    words = raw.split("#", 1)[0].split()
    if not words:
        return None
    try:
        return _command(words, number)
    except ValueError as error:
        raise ScriptError(f"{source}:{number}: {error}") from None


def _command(words: list[str], line: int) -> Command:
    keyword = _keyword(words[0], ("Subscriber", "Publisher", "Status", "Wait", *SIGNALS))
    if keyword == "Status":
        _arity(words, 1, "Status")
        return Status(line)
    if keyword in SIGNALS:
        _arity(words, 2, f"{keyword} NAME")
        return Signal(keyword, words[1], line)
    if keyword == "Wait":
        if len(words) == 3 and words[2].lower() == "ms":
            words = words[:2]
        _arity(words, 2, "Wait MS")
        return Wait(_number(words[1], "milliseconds", 0, MAX_MS), line)
    if keyword == "Subscriber":
        _arity(words, 4, "Subscriber NAME Subscribe|Unsubscribe TOPIC")
        action = _keyword(words[2], ("Subscribe", "Unsubscribe"))
        return Subscribe(words[1], check_topic(words[3], pattern=True), action == "Subscribe", line)
    if len(words) == 9 and words[8].lower() == "ms":
        words = words[:8]
    usage = "Publisher NAME Publish N Ontopic TOPIC Interval MS"
    _arity(words, 8, usage)
    if [w.lower() for w in words[2:7:2]] != ["publish", "ontopic", "interval"]:
        raise ValueError(f"expected: {usage}")
    return Publish(
        words[1],
        _number(words[3], "number of events", 1, MAX_EVENTS),
        check_topic(words[5]),
        _number(words[7], "interval", 0, MAX_MS),
        line,
    )


def _keyword(word: str, choices: tuple[str, ...]) -> str:
    for choice in choices:
        if word.lower() == choice.lower():
            return choice
    raise ValueError(f"unknown command {word!r} (expected {', '.join(choices)})")


def _arity(words: list[str], count: int, usage: str) -> None:
    if len(words) != count:
        raise ValueError(f"expected: {usage}")


def _number(word: str, what: str, low: int, high: int) -> int:
    if not word.isdigit() or not low <= int(word) <= high:
        raise ValueError(f"bad {what} {word!r} (expected a whole number from {low} to {high})")
    return int(word)


def check_script(commands: list[Command], topology: Topology, source: str = "<script>") -> None:
    """ScriptError naming the first command that names no process of ``topology``, or one of the
    wrong role (``Subscriber`` of a publisher)."""
    for command in commands:
        check_command(command, topology, source)


def check_command(command: Command, topology: Topology, source: str = "<script>") -> None:
    """:func:`check_script` for one command (the console checks each as it comes)."""
    if isinstance(command, Wait | Status):
        return
    if (
        isinstance(command, Signal)
        and command.name in topology.routers()
        and len(topology.routers()[command.name][0]) > 1
    ):
        return  # a replicated site: its leader then (Crash, Freeze), the one so hit (Restart, Unfreeze)
    process = next((p for p in topology.processes if p.name == command.name), None)
    if process is None:
        raise ScriptError(f"{source}:{command.line}: no process {command.name!r} in {topology.source}")
    wanted = ROLE_OF.get(str(command).split()[0])
    if wanted is not None and process.role != wanted:
        raise ScriptError(f"{source}:{command.line}: {command.name} is a {process.role}, not a {wanted}")
