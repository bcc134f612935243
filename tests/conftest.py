"""Settings every test shares."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from wfm.certs import init, issue


@pytest.fixture(autouse=True)
def state_home(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """``wfm trigger`` keeps its outbox under ``$XDG_STATE_HOME``: a test's own, never the user's,
    and never one a Trigger left by another test waits in."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One CA for the whole run (made once: key generation is the slow part), with brokers B1-B5,
    a client ``alice``, a ``deployer``, an ``operator``, a ``scheduler``, a ``monitor``, a
    ``historian`` and agents ``agentA`` and ``agentB``."""
    directory = tmp_path_factory.mktemp("certs")
    init(directory)
    for name in ("B1", "B2", "B3", "B4", "B5"):
        issue(directory, name, "broker")
    for name, role in (
        ("alice", "client"),
        ("deployer", "deployer"),
        ("operator", "operator"),
        ("scheduler", "scheduler"),
        ("monitor", "monitor"),
        ("historian", "historian"),
        ("agentA", "agent"),
        ("agentB", "agent"),
    ):
        issue(directory, name, role)
    return directory


@pytest.fixture
def umask_zero() -> Iterator[None]:
    """The umask takes nothing away: every mode is what the code asked for."""
    before = os.umask(0)
    try:
        yield
    finally:
        os.umask(before)
