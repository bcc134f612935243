"""The subprocess runner and the journal, without a broker."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

from agents.journal import Journal
from agents.runner import execute, log_path
from agents.state import Finished, Result, Run, Tick
from tests.processes import WFM


def run(command: str, timeout: float | None = None, cwd: str | None = None) -> Run:
    return Run("W", "v1", "g1", "Job", 1, command, cwd, "2026-11-23", timeout)


def test_a_run_gets_its_environment_and_a_log(tmp_path: Path) -> None:
    job = run('echo "$WFM_WORKFLOW $WFM_JOB $WFM_GID $WFM_DATE $(pwd)"; echo oops >&2', cwd=str(tmp_path))
    result = asyncio.run(execute(job, tmp_path / "state", Path("/")))
    assert result.ok and result.detail.startswith("exit 0 after ")
    log = log_path(tmp_path / "state", job)
    assert log == tmp_path / "state" / "logs" / "W" / "g1" / "Job.1.log"
    assert log.read_text() == f"W Job g1 2026-11-23 {tmp_path}\noops\n"


def test_an_exit_status_is_a_failure(tmp_path: Path) -> None:
    result = asyncio.run(execute(run("exit 3"), tmp_path, tmp_path))
    assert not result.ok and result.detail.startswith("exit 3 after ")


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "late"
    began = time.monotonic()
    result = asyncio.run(
        execute(run(f"(sleep 2; touch {marker}) & sleep 30", timeout=0.5), tmp_path, tmp_path)
    )
    assert not result.ok and result.detail.startswith("timed out after 0.5 s")
    assert time.monotonic() - began < 5
    time.sleep(2.5)
    assert not marker.exists()  # the background child was killed too


def test_a_missing_directory_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    result = asyncio.run(execute(run("true", cwd=str(tmp_path / "nowhere")), tmp_path, tmp_path))
    assert not result.ok and result.detail.startswith("cannot start:")


def test_the_journal_round_trips_and_skips_a_torn_line(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    event = Finished(run("true"), Result(True, "exit 0 after 0.010 s", 1.5, 0.01))
    journal.write(event, 2.0)
    journal.write(Tick(), 3.0)
    journal.sync()  # one fsync for both
    journal.close()
    with (tmp_path / "journal.jsonl").open("a") as torn:
        torn.write('{"t": 4.0, "event": "deliv')
    reopened = Journal(tmp_path)
    assert list(reopened.read()) == [(event, 2.0), (Tick(), 3.0)]
    reopened.close()


def test_agent_usage_errors_are_one_line() -> None:
    done = subprocess.run(
        [WFM, "agent", "--name", "", "--broker", "socket://127.0.0.1:1/B1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "an agent name cannot be empty" in done.stderr
