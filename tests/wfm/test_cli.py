"""The ``wfm`` command line: help, data on stdout, one-line errors with a non-zero status."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.errors import NoAnswer
from broker.transport.uri import BrokerURI
from tests.processes import WFM, brokers, status, wait_for
from tests.transport.harness import free_port
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


def test_help_documents_exit_statuses_and_completion(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for line in ("0    ok", "1    failure", "2    usage error", "3    timeout", "130  interrupted"):
        assert line in out
    assert "_WFM_COMPLETE=bash_source wfm" in out


def test_a_timeout_anywhere_is_exit_status_3(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import wfm.cli.overlay

    async def mute(uri: object) -> dict[str, object]:
        raise NoAnswer("B1 did not answer StatusRequest 1 within 0.2 s")

    monkeypatch.setattr(wfm.cli.overlay, "_status", mute)
    code, out, err = run(capsys, "status", "--broker", "socket://127.0.0.1:1/B1")
    assert (code, out, err) == (3, "", "wfm: error: B1 did not answer StatusRequest 1 within 0.2 s\n")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_ctrl_c_is_130_and_sigterm_0_for_a_daemon_that_stops_cleanly(sig: signal.Signals, code: int) -> None:
    uri = BrokerURI("127.0.0.1", free_port(), "B1")
    broker = subprocess.Popen(
        [WFM, "broker", "--uri", str(uri), "--memory"], stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: status(uri).get("id") == "B1", "the broker")
        broker.send_signal(sig)
    finally:
        _, err = broker.communicate(timeout=20)
    assert broker.returncode == code, err
    assert "Traceback" not in err
    assert err.endswith("wfm: interrupted\n") == (code == 130)


def test_ctrl_c_is_130_for_a_command_interrupted_in_the_middle() -> None:
    """KeyboardInterrupt (click's Abort) in a command that does not catch signals: wfm client."""
    with brokers({"B1": []}) as uris:
        client = subprocess.Popen(
            [WFM, "client", "--broker", str(uris["B1"])],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.0)  # connected, reading stdin
        client.send_signal(signal.SIGINT)
        _, err = client.communicate(timeout=20)
    assert client.returncode == 130, err
    assert err.strip().splitlines() == ["wfm: interrupted"]
