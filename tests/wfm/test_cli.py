"""The ``wfm`` command line: help, data on stdout, one-line errors with a non-zero status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wfm.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "parse" in out and "Commands" in out


def test_parse_prints_canonical_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "parse", "filter", "[class,eq,'stock'],[price,>,100.0]")
    assert (code, out, err) == (0, "[class,eq,stock],[price,>,100]\n", "")


def test_parse_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "parse", "publication", "[class,a],[x,1.5],[s,'t u']", "-o", "json")
    assert code == 0
    assert json.loads(out) == {
        "kind": "publication",
        "canonical": "[class,a],[s,'t u'],[x,1.5]",
        "attributes": {"class": "a", "s": "t u", "x": 1.5},
    }


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["parse", "filter", "[class,eq,stock],[price,100]"], "expected an operator after 'price'"),
        (["parse", "pub", "x"], "'pub' is not one of"),
        (["nope"], "No such command"),
        (["parse", "composite"], "Missing argument"),
    ],
)
def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code != 0
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("wfm: error: ") and fragment in err


def test_console_script_is_installed() -> None:
    wfm = Path(sys.executable).with_name("wfm")  # installed beside the interpreter running the tests
    assert wfm.exists(), f"no console script at {wfm}"
    done = subprocess.run(
        [str(wfm), "parse", "filter", "[price,>,1]"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        == "wfm: error: invalid filter: the first attribute must be 'class', not 'price' at column 2"
    )
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("command", "unused"),
    [
        ("broker", ("lxml", "pyspark", "wfm.history", "wfm.workflow")),
        ("agent", ("lxml", "pyspark", "wfm.history", "wfm.workflow")),
        ("status", ("lxml", "pyspark", "wfm.history", "wfm.workflow")),
    ],
)
def test_a_command_loads_only_its_own_modules(command: str, unused: tuple[str, ...]) -> None:
    """The group imports a command's module on demand: a broker or an agent process loads no lxml
    (the XML loader of deploy), no Spark and no history code; fails if anything imports them eagerly."""
    code = f"import sys; from wfm.cli import main; main([{command!r}, '--help']); print(*sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.splitlines()[-1].split())
    assert {m for m in loaded if any(m == u or m.startswith(f"{u}.") for u in unused)} == set()
