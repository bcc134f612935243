"""The PuppetMaster's console: commands one at a time, a bad one an error line and not the end,
a prompt only for a person; and once, ``wfm puppet -`` with real processes."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.puppet.test_chaos import LINE, strays
from wfm.cli import puppet as cli_puppet
from wfm.puppet.console import console
from wfm.puppet.script import Command, Publish, Signal, Subscribe, Wait
from wfm.topology import parse_topology

TOPOLOGY = parse_topology(LINE, "<line>")


class Recorder:
    def __init__(self) -> None:
        self.done: list[Command] = []

    def do(self, command: Command) -> None:
        self.done.append(command)


TYPED = """\
Subscriber subscriber0 Subscribe /a/*

# a comment
Explode broker0
Publisher publisher0 Publish 2 Ontopic /a/b Interval 5 ms
Subscriber publisher0 Subscribe /a
Wait
Crash broker1
Wait 10
"""


def test_each_good_command_is_done_in_turn_and_each_bad_one_is_one_error_line() -> None:
    recorder, errors, prompts = Recorder(), [], []
    done = console(recorder, TOPOLOGY, io.StringIO(TYPED), errors.append, lambda: prompts.append(1))
    assert recorder.done == [
        Subscribe("subscriber0", "/a/*", True, 1),
        Publish("publisher0", 2, "/a/b", 5, 5),
        Signal("Crash", "broker1", 8),
        Wait(10, 9),
    ]
    assert done == 4
    assert errors == [
        "<stdin>:4: unknown command 'Explode' (expected Subscriber, Publisher, Status, Wait, Crash, Freeze, "
        "Unfreeze, Restart)",
        "<stdin>:6: publisher0 is a publisher, not a subscriber",
        "<stdin>:7: expected: Wait MS",
    ]
    assert len(prompts) == 10  # before each of the nine lines, and before the end of input


def test_no_prompt_without_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert cli_puppet._prompt() is None

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal(""))
    assert cli_puppet._prompt() is not None


@pytest.mark.parametrize(
    ("argv", "message"),
    [([], "give a SCRIPT, or --console (or '-')"), (["s.txt", "--console"], "not both")],
)
def test_a_script_or_the_console(argv: list[str], message: str, tmp_path: Path) -> None:
    (tmp_path / "s.txt").write_text("Wait 1\n")
    result = CliRunner().invoke(cli_puppet.puppet, [str(tmp_path / a) if a == "s.txt" else a for a in argv])
    assert result.exit_code == 2 and message in result.output


@pytest.mark.chaos
def test_the_console_with_real_processes(tmp_path: Path) -> None:
    """``wfm puppet -`` fed on a pipe: the good commands run, the bad ones are one line each on
    stderr, no prompt, and the end of input ends the run with the summary (light logging: no
    BroEvent)."""
    (tmp_path / "line.txt").write_text(LINE)
    home = tmp_path / "run"
    typed = (
        "Subscriber subscriber0 Subscribe /a/*\n"
        "Crash nobody\n"
        "Publisher publisher0 Publish 4 Ontopic /a/b Interval 5 ms\n"  # advertised now, not before
        "Publisher publisher0 Publish 4 Ontopic /a/b Interval 5\n"
        "Wait 300\n"
    )
    argv = [sys.executable, "-m", "wfm.cli", "puppet", "-", "--topology", str(tmp_path / "line.txt")]
    argv += ["--dir", str(home), "--heartbeat", "0.2", "--settle", "0.2", "-o", "json"]
    done = subprocess.run(argv, input=typed, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"<stdin>:2: no process 'nobody' in {tmp_path / 'line.txt'}\n"
    objects = [json.loads(line) for line in done.stdout.splitlines()]
    entries, summary = objects[:-1], objects[-1]["summary"]
    assert [e["line"] for e in entries if e["event"] in ("Subscriber", "Publisher", "Wait")] == [
        "Subscriber subscriber0 Subscribe /a/*",
        "Publisher publisher0 Publish 4 Ontopic /a/b Interval 5",
        "Publisher publisher0 Publish 4 Ontopic /a/b Interval 5",
        "Wait 300",
    ]
    assert not any(e["event"] == "BroEvent" for e in entries)
    assert summary["ok"] and summary["pairs"][0]["received"] == 8 and summary["lost"] == 0
    assert strays(home) == []
