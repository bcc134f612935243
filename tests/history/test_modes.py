"""Files at rest: the history store holds every envelope the historian keeps (commands included),
so it is its user's only whatever the umask: the store 0700 (made so, or narrowed if it was open),
and the landing log's segments 0600 wherever they are."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker.client import BlockingClient
from broker.language import Publication
from tests.history.test_historian import start_historian, stop, subscribed
from tests.modes import mode
from tests.processes import brokers
from wfm.history.historian import RecorderService
from wfm.history.landing import Landing, segments


def test_the_landing_log_is_private_wherever_it_is(tmp_path: Path, umask_zero: None) -> None:
    with Landing(tmp_path / "landing", segment_bytes=1) as landing:
        for n in range(2):  # two segments: each one made as the first
            landing.append(Publication("AGENT_CTL", {"content": "echo secret"}), 1.0, "deployer", f"b1-{n}")
            landing.flush()
    found = segments(tmp_path / "landing")
    assert len(found) == 2
    assert mode(tmp_path / "landing") == 0o700
    assert [mode(path) for path in found] == [0o600, 0o600]


def test_a_historian_narrows_a_store_open_to_others(
    tmp_path: Path, umask_zero: None, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "history"
    store.mkdir(mode=0o755)
    with caplog.at_level(logging.INFO, logger="broker.durable.log"):
        service = RecorderService("socket://127.0.0.1:1/B1", store)  # not run: nothing connects
    service.landing.close()
    assert mode(store) == 0o700 and mode(store / "landing") == 0o700
    assert [r.getMessage() for r in caplog.records] == [
        f"{store} was open to other users (mode 0755): now 0700, owner only"
    ]


def test_wfm_historian_keeps_its_store_private(tmp_path: Path, umask_zero: None) -> None:
    """``wfm historian --store DIR`` under umask 0 (the process inherits it), DIR new: what it
    lands is its user's only."""
    store = tmp_path / "history"
    with brokers({"B1": []}, heartbeat=1.0) as uris:
        historian = start_historian(uris["B1"], store)
        try:
            with BlockingClient(uris["B1"], "publisher") as client:
                client.advertise("[class,eq,JOBSTATUS],[n,isPresent,0],[note,isPresent,'']")
                subscribed(client, store)  # a publication landed
        finally:
            stop(historian)
    found = segments(store / "landing")
    assert found
    assert {mode(store), mode(store / "landing")} == {0o700}
    assert {mode(path) for path in found} == {0o600}
