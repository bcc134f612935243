"""Files at rest: an agent's state directory (its journal, snapshot, supervisor's files and the
logs of its runs, which hold every envelope and what the commands printed) is its user's only,
whatever the umask; the files its jobs write are left to the umask, as in a shell."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from agents.events import TimePassed
from agents.journal import Journal
from agents.runner import log_path
from agents.state import Agent
from tests.agents.test_runner import run, supervised
from tests.modes import files, mode
from tests.processes import WFM, wait_for
from tests.transport.harness import free_port


def test_the_state_directory_journal_and_snapshot_are_private(tmp_path: Path, umask_zero: None) -> None:
    state = tmp_path / "agents" / "a1"
    journal = Journal(state)
    journal.write(TimePassed(), 1.0)
    journal.compact(Agent("a1").snapshot())  # the snapshot: written atomically through a temporary
    journal.write(TimePassed(), 2.0)
    journal.sync()
    journal.close()
    assert mode(state) == 0o700
    assert mode(state / "journal") == 0o700
    assert files(state) == {
        "journal/lock": 0o600,
        "journal/log-0": 0o600,
        "journal/log-1": 0o600,
        "journal/snap-1": 0o600,
    }


def test_a_jobs_log_and_the_supervisors_files_are_private_and_the_jobs_own_files_are_not_touched(
    tmp_path: Path, umask_zero: None
) -> None:
    """Under umask 0 the supervisor daemon (started by this process) and its job inherit it: the
    job's log and the daemon's files are 0600 all the same, and what the job itself creates gets
    0666, as the umask says: the daemon does not change its commands' umask."""
    state, work = tmp_path / "state", tmp_path / "work"
    work.mkdir()
    job = run("echo the secret; echo made > made.txt")
    result = supervised(job, state, work)
    assert result is not None and result.ok
    assert log_path(state, job).read_text() == "the secret\n"
    assert mode(state) == 0o700
    assert files(state) == {
        "logs/W/g1/Job.1.log": 0o600,
        "logs/W/g1/runs.jsonl": 0o600,
        "supervisor.lock": 0o600,
        "supervisor.log": 0o600,
    }
    assert mode(work / "made.txt") == 0o666  # the job's own file: its user's business


def test_a_wfm_agent_narrows_a_state_directory_open_to_others(tmp_path: Path, umask_zero: None) -> None:
    """``wfm agent --state-dir DIR`` where DIR was made 0755 with a 0644 journal in it (as every
    agent before this change left it): DIR becomes 0700, which the log says once at INFO, so
    nothing in it is reachable by another user."""
    state = tmp_path / "a1"
    state.mkdir(mode=0o755)
    (state / "journal.jsonl").touch(mode=0o644)
    nobody = f"socket://127.0.0.1:{free_port()}/B1"  # no broker: the agent keeps trying
    log = tmp_path / "agent.log"
    with log.open("w") as stderr:  # the child keeps its own descriptor
        agent = subprocess.Popen(
            [WFM, "-v", "agent", "--name", "a1", "--broker", nobody, "--state-dir", str(state)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        # its journal, recovered once it runs: SIGTERM then stops it cleanly (its journal's lock
        # is made before its SIGTERM handler, which killed an agent signalled in between)
        wait_for(lambda: "recovered its journal" in log.read_text(), "the agent's journal")
        assert (state / "journal" / "lock").exists() and mode(state) == 0o700
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(15)
    err = log.read_text()
    assert agent.returncode == 0, err
    assert err.count(f"{state} was open to other users (mode 0755): now 0700, owner only") == 1, err
