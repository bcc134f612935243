"""The supervised runner, re-attaching after a kill -9, pruning, and the journal, without a broker."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.journal import Journal
from agents.runner import Retention, log_path, prune, supervise
from agents.state import Agent, Finished, Result, Run, Tick
from tests.processes import WFM, wait_for


def run(command: str, timeout: float | None = None, cwd: str | None = None) -> Run:
    return Run("W", "v1", "g1", "Job", 1, command, cwd, "2026-11-23", timeout)


def supervised(job: Run, state: Path, cwd: Path) -> Result | None:
    return asyncio.run(supervise(job, state, cwd))


def test_a_run_gets_its_environment_and_a_log(tmp_path: Path) -> None:
    job = run('echo "$WFM_WORKFLOW $WFM_JOB $WFM_GID $WFM_DATE $(pwd)"; echo oops >&2', cwd=str(tmp_path))
    result = supervised(job, tmp_path / "state", Path("/"))
    assert result is not None and result.ok and result.detail.startswith("exit 0 after ")
    log = log_path(tmp_path / "state", job)
    assert log == tmp_path / "state" / "logs" / "W" / "g1" / "Job.1.log"
    assert log.read_text() == f"W Job g1 2026-11-23 {tmp_path}\noops\n"


def test_an_exit_status_is_a_failure(tmp_path: Path) -> None:
    result = supervised(run("exit 3"), tmp_path, tmp_path)
    assert result is not None and not result.ok and result.detail.startswith("exit 3 after ")


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "late"
    began = time.monotonic()
    result = supervised(run(f"(sleep 2; touch {marker}) & sleep 30", timeout=0.5), tmp_path, tmp_path)
    assert result is not None and not result.ok and result.detail.startswith("timed out after 0.5 s")
    assert time.monotonic() - began < 5
    time.sleep(2.5)
    assert not marker.exists()  # the background child was killed too


def test_a_missing_directory_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    result = supervised(run("true", cwd=str(tmp_path / "nowhere")), tmp_path, tmp_path)
    assert result is not None and not result.ok and result.detail.startswith("cannot start:")


def test_a_process_the_job_leaves_behind_does_not_hold_the_run_lock(tmp_path: Path) -> None:
    """A job that leaves a background process: the run ended, so supervising it again (as an
    agent restarted meanwhile would) reads the outcome at once, instead of waiting for the lock."""
    job = run("sleep 5 >/dev/null 2>&1 &")
    first = supervised(job, tmp_path, tmp_path)
    assert first is not None and first.ok
    status = log_path(tmp_path, job).with_suffix(".status")
    status.unlink()  # as if the agent had died before reading it: only the lock can tell
    began = time.monotonic()
    again = supervised(job, tmp_path, tmp_path)
    assert again is None  # no status, the lock free: lost (it never reran), not a 5 s wait
    assert time.monotonic() - began < 2


def test_a_huge_timeout_is_no_timeout(tmp_path: Path) -> None:
    result = supervised(run("true", timeout=1e300), tmp_path, tmp_path)
    assert result is not None and result.ok


def test_a_run_outlives_its_agent_and_is_re_attached_not_rerun(tmp_path: Path) -> None:
    """An "agent" process starts the run and is killed -9 mid-run; supervising the same run again
    waits for the surviving supervisor, then (a third time) reads the recorded outcome."""
    count, started = tmp_path / "count", tmp_path / "started"
    job = run(f"touch {started}; sleep 1.5; echo once >> {count}", cwd=str(tmp_path))
    script = (
        "import asyncio, pickle, sys; from pathlib import Path; from agents.runner import supervise; "
        "asyncio.run(supervise(pickle.loads(bytes.fromhex(sys.argv[1])), Path(sys.argv[2]), Path('/')))"
    )
    agent = subprocess.Popen([sys.executable, "-c", script, pickle.dumps(job).hex(), str(tmp_path / "s")])
    wait_for(started.exists, "the job started")
    agent.send_signal(signal.SIGKILL)
    agent.wait(5)
    assert not count.exists()
    began = time.monotonic()
    result = supervised(job, tmp_path / "s", tmp_path)
    assert time.monotonic() - began > 0.5  # it waited for the surviving run
    assert result is not None and result.ok and count.read_text() == "once\n"
    again = supervised(job, tmp_path / "s", tmp_path)
    assert again is not None and again.detail == result.detail and count.read_text() == "once\n"


def supervisor_of(job: Run, state: Path) -> int:
    """The pid of the supervisor process running ``job`` (its arguments name the run's log)."""
    log = str(log_path(state, job)).encode()
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if log in argv and any(arg.endswith(b"supervisor.py") for arg in argv):
            return int(entry.name)
    raise AssertionError(f"no supervisor runs {job.label}")


def test_a_frozen_supervisor_is_waited_for_not_declared_lost_or_rerun(tmp_path: Path) -> None:
    """SIGSTOP of a run's supervisor past its job's end: the agent that started it waits, an agent
    restarted meanwhile re-attaches (the frozen supervisor holds the lock), and once it is
    continued both get its outcome; the job ran once."""
    count, started = tmp_path / "count", tmp_path / "started"
    job = run(f"touch {started}; sleep 0.5; echo once >> {count}", cwd=str(tmp_path))
    state = tmp_path / "s"

    async def scenario() -> list[Result | None]:
        first = asyncio.create_task(supervise(job, state, tmp_path))
        while not started.exists():
            await asyncio.sleep(0.02)
        pid = supervisor_of(job, state)
        os.kill(pid, signal.SIGSTOP)
        try:
            again = asyncio.create_task(supervise(job, state, tmp_path))
            await asyncio.sleep(1.5)  # the job ended meanwhile; its supervisor cannot say so
            assert count.read_text() == "once\n" and not first.done() and not again.done()
        finally:
            os.kill(pid, signal.SIGCONT)
        return await asyncio.wait_for(asyncio.gather(first, again), 10)

    results = asyncio.run(scenario())
    assert all(r is not None and r.ok for r in results) and count.read_text() == "once\n"


def test_a_run_whose_supervisor_died_is_lost_not_rerun(tmp_path: Path) -> None:
    job = run(f"echo ran >> {tmp_path / 'count'}")
    log = log_path(tmp_path / "s", job)
    log.parent.mkdir(parents=True)
    log.touch()  # the supervisor started the command, and died before recording its end
    assert supervised(job, tmp_path / "s", tmp_path) is None
    assert not (tmp_path / "count").exists()


def generations(root: Path, workflow: str, count: int, now: float) -> None:
    """``count`` generation folders g0 (oldest, ``count`` days ago) .. g{count-1} (newest)."""
    for n in range(count):
        folder = root / "logs" / workflow / f"g{n}"
        folder.mkdir(parents=True)
        (folder / "Job.1.log").touch()
        age = now - (count - n) * 86400
        os.utime(folder, (age, age))


def test_pruning_keeps_the_newest_runs_and_every_generation_in_progress(tmp_path: Path) -> None:
    now = time.time()
    generations(tmp_path, "W", 10, now)
    generations(tmp_path, "V", 2, now)
    busy = {("W", "g0")}
    assert prune(tmp_path, Retention(runs=3, days=None), busy, now) == 6
    kept = sorted(p.name for p in (tmp_path / "logs" / "W").iterdir())
    assert kept == ["g0", "g7", "g8", "g9"]
    assert len(list((tmp_path / "logs" / "V").iterdir())) == 2  # per workflow
    assert prune(tmp_path, Retention(runs=3, days=1.5), busy, now) == 3  # 2 days old or more
    assert sorted(p.name for p in (tmp_path / "logs" / "W").iterdir()) == ["g0", "g9"]
    assert [p.name for p in (tmp_path / "logs" / "V").iterdir()] == ["g1"]


def test_the_journal_round_trips_and_cuts_a_torn_line(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    event = Finished(run("true"), Result(True, "exit 0 after 0.010 s", 1.5, 0.01))
    journal.write(event, 2.0)
    journal.write(Tick(), 3.0)
    journal.sync()  # one fsync for both
    journal.close()
    with (tmp_path / "journal.jsonl").open("a") as torn:
        torn.write('{"t": 4.0, "event": "deliv')
    seen: list[object] = []
    agent = Agent("agentB")
    agent.handle = lambda event, now: seen.append((event, now)) or []  # type: ignore[method-assign]
    reopened = Journal(tmp_path)
    assert reopened.recover(agent) == 2
    assert seen == [(event, 2.0), (Tick(), 3.0)]
    reopened.write(Tick(), 5.0)  # on a line of its own, not glued to the torn one
    reopened.sync()
    reopened.close()
    last = Journal(tmp_path)
    assert last.recover(agent) == 3
    last.close()


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        (["--name", ""], "an agent name cannot be empty"),
        (["--name", "a", "--keep-runs", "0"], "--keep-runs"),
        (["--name", "a", "--keep-days", "0"], "--keep-days"),
    ],
)
def test_agent_usage_errors_are_one_line(arguments: list[str], fragment: str) -> None:
    done = subprocess.run(
        [WFM, "agent", *arguments, "--broker", "socket://127.0.0.1:1/B1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert fragment in done.stderr
