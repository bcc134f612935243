"""Progress on stderr: plain lines off a terminal (none for a quick step), a spinner on one."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

import wfm.cli.progress
from wfm.cli.progress import progress


def test_plain_lines_once_per_new_phrase_after_the_quiet_start(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wfm.cli.progress, "QUIET", 0.05)
    with progress("deploying P", Console(file=io.StringIO())) as say:
        say("connecting")
        say("0/3 acknowledged")  # the last phrase of the quiet start is shown at its end
        time.sleep(0.5)
        for phrase in ("0/3 acknowledged", "2/3 acknowledged"):
            say(phrase)
    assert capsys.readouterr() == (
        "",
        "wfm: deploying P: 0/3 acknowledged\nwfm: deploying P: 2/3 acknowledged\n",
    )


def test_a_quick_step_says_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with progress("deploying P", Console(file=io.StringIO())) as say:
        say("0/3 acknowledged")
    assert capsys.readouterr() == ("", "")


def test_a_spinner_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    terminal = io.StringIO()
    with progress("starting", Console(file=terminal, force_terminal=True)) as say:
        say("brokers linked")
    assert "starting" in terminal.getvalue()
    assert capsys.readouterr() == ("", "")
