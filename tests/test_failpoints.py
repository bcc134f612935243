"""Failpoints: how WFM_FAILPOINTS is read, and that an armed point kills on the pass it names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from broker.failpoints import armed


def test_names_and_passes_are_read_and_a_malformed_entry_is_ignored(caplog: pytest.LogCaptureFixture) -> None:
    assert armed("") == {}
    assert armed("wal.checkpoint.log, outbox.stored:3,agent.journaled.DEPLOY:1") == {
        "wal.checkpoint.log": 1,
        "outbox.stored": 3,
        "agent.journaled.DEPLOY": 1,
    }
    assert armed("bad name,x:0,y:-1,z:1:2,ok") == {"ok": 1}
    assert caplog.text.count("WFM_FAILPOINTS: ignored") == 4


def test_an_armed_point_kills_the_process_on_its_pass_and_not_before() -> None:
    script = "from broker import failpoints\nfor n in range(5):\n    print(n, flush=True)\n"
    script += "    failpoints.reach('here')\n"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "WFM_FAILPOINTS": "here:3"},
    )
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split() == ["0", "1", "2"]
    assert "failpoint here (pass 3): killed" in done.stderr
