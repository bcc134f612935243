"""Files at rest: a write-ahead log's directory, and a broker's ``--data`` (every publication it
handled), are its owner's only, whatever the umask and however the directory was made before."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from broker.durable.log import WriteAheadLog, private_directory
from broker.transport.uri import BrokerURI
from tests.modes import mode
from tests.processes import WFM, status, wait_for
from tests.transport.harness import free_port


def test_a_new_directory_is_0700_and_its_parents_follow_the_umask(tmp_path: Path, umask_zero: None) -> None:
    made = private_directory(tmp_path / "parent" / "data")
    assert mode(made) == 0o700
    assert mode(tmp_path / "parent") == 0o777  # not ours to narrow: only the directory we own


def test_an_open_directory_is_narrowed_once_and_says_so(
    tmp_path: Path, umask_zero: None, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "old").write_bytes(b"x")  # 0666: unreachable through the directory from now on
    with caplog.at_level(logging.INFO, logger="broker.durable.log"):
        private_directory(data)
        private_directory(data)
    assert mode(data) == 0o700
    assert [r.getMessage() for r in caplog.records] == [
        f"{data} was open to other users (mode 0755): now 0700, owner only"
    ]


def test_a_directory_not_ours_to_narrow_is_used_with_a_warning(
    tmp_path: Path, umask_zero: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o750)

    def refused(self: Path, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(Path, "chmod", refused)  # as for a user who is not its owner
    private_directory(data)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"{data} is open to other users (mode 0750) and not ours to narrow")
    ]


def test_a_log_in_an_open_directory_is_private(tmp_path: Path, umask_zero: None) -> None:
    directory = tmp_path / "wal"
    directory.mkdir(mode=0o755)
    wal = WriteAheadLog(directory)
    wal.recover()
    wal.append(b"a command")
    wal.commit()
    wal.checkpoint(b"snapshot")
    wal.close()
    assert mode(directory) == 0o700
    assert {p.name: mode(p) for p in directory.iterdir()} == {
        "lock": 0o600,
        "log-0": 0o600,
        "log-1": 0o600,
        "snap-1": 0o600,
    }


@pytest.mark.parametrize("made", [False, True], ids=["new", "made-0755-before"])
def test_a_brokers_data_directory_is_private(tmp_path: Path, umask_zero: None, made: bool) -> None:
    """``wfm broker --data DIR`` (the process inherits the umask 0): DIR and its files are the
    broker's user's only, whether the broker made DIR or found it open to everyone."""
    data = tmp_path / "B1"
    if made:
        data.mkdir(mode=0o755)
    address = BrokerURI("127.0.0.1", free_port(), "B1")
    broker = subprocess.Popen(
        [WFM, "broker", "--uri", str(address), "--data", str(data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: status(address).get("id") == "B1", "the broker")
        assert mode(data) == 0o700
        files = {p.name: mode(p) for p in data.iterdir()}
        assert files and set(files.values()) == {0o600}, files
    finally:
        broker.terminate()
        _, err = broker.communicate(timeout=10)
    assert broker.returncode == 0, err
