"""The supervised runner and its supervisor daemon (re-attaching after a kill -9, exactly-once
starts, its socket's checks, its idle exit), pruning, and the journal, without a broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from agents import runner, supervisor
from agents.events import Finished, Result, Run, TimePassed
from agents.journal import Journal
from agents.runner import Retention, SupervisorClient, generation_dir, log_path, log_tail, prune
from agents.state import Agent
from tests.processes import WFM, wait_for

# an agent process that asks for one run (a pickled Run) in a state dir, for tests that kill it
AGENT = (
    "import asyncio, pickle, sys; from pathlib import Path; from agents.runner import SupervisorClient; "
    "asyncio.run(SupervisorClient(Path(sys.argv[2])).supervise(pickle.loads(bytes.fromhex(sys.argv[1])), "
    "Path('/')))"
)


def run(command: str, timeout: float | None = None, cwd: str | None = None, job: str = "Job") -> Run:
    return Run("W", "v1", "g1", job, 1, command, cwd, "2026-11-23", timeout)


async def once(job: Run, state: Path, cwd: Path) -> Result | None:
    """``job`` through a connection of its own, as one agent would."""
    client = SupervisorClient(state)
    try:
        return await client.supervise(job, cwd)
    finally:
        await client.close()


def supervised(job: Run, state: Path, cwd: Path) -> Result | None:
    return asyncio.run(once(job, state, cwd))


def start_agent(job: Run, state: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", AGENT, pickle.dumps(job).hex(), str(state)])


def daemon_of(state: Path) -> int:
    """The pid of the supervisor daemon of ``state`` (it writes it into its lock file once forked,
    which may be after its starter returned: on a busy machine the file was still empty)."""
    lock = state / "supervisor.lock"
    wait_for(lambda: lock.read_text().strip(), "the daemon's pid in its lock file")
    return int(lock.read_text())


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def start_daemon(state: Path) -> subprocess.CompletedProcess[str]:
    """Run ``supervisor.py`` as the agent does; it returns once its daemon listens."""
    state.mkdir(parents=True, exist_ok=True)
    with (state / "supervisor.log").open("a") as errors:  # not a pipe: the daemon keeps it
        return subprocess.run(
            [sys.executable, "-S", "-I", supervisor.__file__, str(state)],
            stdout=subprocess.DEVNULL,
            stderr=errors,
            text=True,
            timeout=30,
        )


def dial(state: Path) -> socket.socket:
    """A raw connection to the daemon of ``state``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(supervisor.address(state))
    return sock


def request(state: Path, job: Run, number: int = 1) -> dict[str, object]:
    """The request an agent sends for ``job``."""
    return {
        "id": number,
        "log": str(log_path(state, job)),
        "command": job.command,
        "cwd": "/",
        "timeout": job.timeout,
        "env": {},
    }


def lines(*messages: object) -> bytes:
    return b"".join(json.dumps(message).encode() + b"\n" for message in messages)


async def started_once(
    supervising: Coroutine[Any, Any, Result | None], marker: Path
) -> asyncio.Task[Result | None]:
    """``supervising`` under way, once its command has started (it touches ``marker``)."""
    task = asyncio.create_task(supervising)
    while not marker.exists():
        await asyncio.sleep(0.02)
    return task


def test_a_run_gets_its_environment_and_a_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_VARIABLE", "passed on")  # the agent's environment, sent per connection
    job = run(
        'echo "$WFM_WORKFLOW $WFM_JOB $WFM_GID $WFM_DATE $(pwd) $AGENT_VARIABLE"; echo oops >&2',
        cwd=str(tmp_path),
    )
    before = time.time()
    result = supervised(job, tmp_path / "state", Path("/"))
    assert result is not None and result.ok and result.detail.startswith("exit 0 after ")
    log = log_path(tmp_path / "state", job)
    started = log_tail(tmp_path / "state", "W", "g1", "Job", 0)["started"]  # what a dashboard asks
    assert isinstance(started, float) and before - 0.001 <= started <= time.time()
    assert log == tmp_path / "state" / "logs" / "W" / "g1" / "Job.1.log"
    assert log.read_text() == f"W Job g1 2026-11-23 {tmp_path} passed on\noops\n"
    assert supervisor.recorded(str(log)).outcome["code"] == 0  # type: ignore[index]


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
    assert supervised(run("true", job="Next"), tmp_path, tmp_path) is not None  # the daemon lives on


def test_a_process_the_job_leaves_behind_blocks_nothing(tmp_path: Path) -> None:
    """A job that leaves a background process: the run ends with its shell, supervising it again
    (as an agent restarted meanwhile would) answers at once, and the daemon still exits when idle:
    the process holds none of its descriptors (lock, socket)."""
    job = run("sleep 30 >/dev/null 2>&1 &")
    began = time.monotonic()
    first = supervised(job, tmp_path, tmp_path)
    assert first is not None and first.ok and time.monotonic() - began < 5
    group = supervisor.recorded(str(log_path(tmp_path, job))).group
    assert type(group) is int
    try:
        daemon = daemon_of(tmp_path)
        wait_for(lambda: not alive(daemon), "the idle daemon exited", timeout=10)
        runs = log_path(tmp_path, job).parent / supervisor.RUNS  # as if its end were never recorded:
        runs.write_text(runs.read_text().splitlines(keepends=True)[0])  # only its start is
        began = time.monotonic()
        assert supervised(job, tmp_path, tmp_path) is None  # lost (it never reran), at once
        assert time.monotonic() - began < 5 and daemon_of(tmp_path) != daemon
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def test_an_outcome_a_crash_cut_short_answers_lost_and_the_answer_carries_the_outcome(tmp_path: Path) -> None:
    """The outcome travels in the answer: the agent reads no file. An outcome line that a daemon
    killed while writing it left cut is cut off the file (so the next line starts a line), and the
    run is lost, never started again; so is one whose outcome is not an object."""
    count = tmp_path / "count"
    job = run(f"echo ran >> {count}; exit 4")
    first = supervised(job, tmp_path, tmp_path)
    assert first is not None and not first.ok and first.detail.startswith("exit 4 after ")
    log = str(log_path(tmp_path, job))
    assert supervisor.recorded(log)[1]["code"] == 4  # type: ignore[index]
    again = supervised(job, tmp_path, tmp_path)  # answered from the record, with its outcome
    assert again is not None and again.detail.startswith("exit 4 after ")
    runs = log_path(tmp_path, job).parent / supervisor.RUNS
    started, _ = runs.read_bytes().splitlines(keepends=True)
    runs.write_bytes(started + b'{"log": "Job.1.log", "outcome": {"started": 1.5, "dur')
    assert supervised(job, tmp_path, tmp_path) is None
    assert runs.read_bytes() == started
    runs.write_bytes(started + b'{"log": "Job.1.log", "outcome": 4}\n')
    assert supervised(job, tmp_path, tmp_path) is None
    assert count.read_text() == "ran\n"
    complaints = (tmp_path / "supervisor.log").read_text()
    assert "a line cut short at offset" in complaints
    assert "answered lost: the outcome recorded for" in complaints


def test_the_files_of_the_version_before_are_read_when_the_runs_file_has_nothing(tmp_path: Path) -> None:
    """A folder written by a daemon of the version before: a status file per run (read, not
    started again; one cut short is lost) and a process group file (what ``stop`` signals)."""
    ended, cut, running = (run("exit 9", job=name) for name in ("Ended", "Cut", "Running"))
    old_status = b'{"started": 1.5, "duration": 0.5, "code": 3, "timeout": null}'
    for job, status in ((ended, old_status), (cut, b"{")):
        log = log_path(tmp_path, job)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_bytes(b"")
        log.with_suffix(".status").write_bytes(status)
    result = supervised(ended, tmp_path, tmp_path)
    assert result is not None and result.detail.startswith("exit 3 after 0.500 s")
    assert supervised(cut, tmp_path, tmp_path) is None
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        log_path(tmp_path, running).with_suffix(".pid").write_text(str(sleeper.pid))
        assert runner.stop(running, tmp_path, signal.SIGKILL)
        assert sleeper.wait(5) == -signal.SIGKILL
        assert not runner.stop(ended, tmp_path, signal.SIGKILL)  # it ended
    finally:
        sleeper.kill()


def test_a_runs_file_that_cannot_be_read_answers_its_run_lost_and_the_daemon_goes_on(tmp_path: Path) -> None:
    """An error reading one folder's file (here it is a folder) is that run's, not the daemon's:
    it died of it, and every run it was running ended lost with it."""
    blocked, other = (
        run("true", job="Blocked"),
        Run("W", "v1", "g2", "Other", 1, "true", None, "2026-11-23", None),
    )
    runs = log_path(tmp_path, blocked).parent / supervisor.RUNS
    runs.mkdir(parents=True)
    assert supervised(blocked, tmp_path, tmp_path) is None
    result = supervised(other, tmp_path, tmp_path)
    assert result is not None and result.ok
    assert "answered lost:" in (tmp_path / "supervisor.log").read_text()
    with pytest.raises(ValueError, match="cannot be read"):
        supervisor.recorded(str(log_path(tmp_path, blocked)))
    assert not runner.stop(blocked, tmp_path, signal.SIGKILL)
    log_path(tmp_path, blocked).write_bytes(b"")  # a log whose record cannot be read, asked for:
    tail = log_tail(tmp_path, "W", "g1", "Blocked", 0)  # a run that ended lost, its start unknown
    assert (tail["ended"], tail["started"]) == (True, None)


def test_a_process_group_recorded_in_another_boot_is_never_signalled(tmp_path: Path) -> None:
    """After a reboot the number may be anyone's: a run the journal still has running is not
    stopped through it."""
    job = run("sleep 30")
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        log = log_path(tmp_path, job)
        log.parent.mkdir(parents=True)
        record = {"log": log.name, "pid": sleeper.pid, "boot": "another boot"}
        (log.parent / supervisor.RUNS).write_bytes(supervisor.encode(record))
        assert supervisor.recorded(str(log)) == (None, None, None)
        assert not runner.stop(job, tmp_path, signal.SIGKILL)
        assert sleeper.poll() is None
        record["boot"] = supervisor.BOOT
        (log.parent / supervisor.RUNS).write_bytes(supervisor.encode(record))
        assert runner.stop(job, tmp_path, signal.SIGKILL)
        assert sleeper.wait(5) == -signal.SIGKILL
    finally:
        sleeper.kill()


def test_a_runs_file_another_daemon_wrote_is_synced_before_it_is_answered_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """That daemon may have died between its write and its sync: answered "ended" from the page
    cache, the run could be "lost" after a crash of the machine, two answers for one run."""
    runs = tmp_path / supervisor.RUNS
    runs.write_bytes(supervisor.encode({"log": "A.1.log", "outcome": {"code": 0}}))
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(os.fstat(fd).st_ino), real(fd))[1])
    records = supervisor.Records()
    assert records.outcome(str(tmp_path / "A.1.log")) == {"code": 0}
    assert records.outcome(str(tmp_path / "A.1.log")) == {"code": 0}  # from what it read
    assert synced == [runs.stat().st_ino]


def test_a_record_that_cannot_be_made_durable_leaves_the_runs_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = supervisor.Records()
    records.append(str(tmp_path), [{"log": "A.1.log", "pid": 7, "boot": supervisor.BOOT}], sync=False)
    before = (tmp_path / supervisor.RUNS).read_bytes()

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", full)
    with pytest.raises(OSError, match="No space"):
        records.append(str(tmp_path), [{"log": "A.1.log", "outcome": {"code": 0}}], sync=True)
    assert (tmp_path / supervisor.RUNS).read_bytes() == before
    assert records.outcome(str(tmp_path / "A.1.log")) is None
    monkeypatch.undo()
    records.append(str(tmp_path), [{"log": "A.1.log", "outcome": {"code": 0}}], sync=True)
    assert supervisor.recorded(str(tmp_path / "A.1.log")) == (7, {"code": 0}, None)


@pytest.mark.parametrize(
    ("line", "answer"),
    [
        (b'{"id": 1, "run": "lost"}', {"run": "lost"}),
        (b'{"id": 2, "run": "ended"}', {"run": "ended"}),  # a daemon of the version before
        (b'{"id": 3, "run": "ended", "outcome": {"code": 0}}', {"run": "ended", "outcome": {"code": 0}}),
        (b'{"id": 4, "error": "no"}', {"error": "no"}),
        (b'{"id": 5, "run": "lost", "outcome": {}}', None),
        (b'{"id": 6, "run": "ended", "outcome": 3}', None),
        (b'{"id": 7, "run": "started"}', None),
        (b'{"id": 8, "error": 1}', None),
        (b'{"id": 9, "error": "no", "run": "lost"}', None),
        (b'{"id": "10", "run": "lost"}', None),
        (b"[]", None),
    ],
)
def test_a_daemon_answer_is_checked(line: bytes, answer: dict[str, object] | None) -> None:
    if answer is None:
        with pytest.raises(ValueError, match="not an answer"):
            runner._answer(line)
    else:
        assert runner._answer(line)[1] == answer


@pytest.mark.parametrize(
    "outcome",
    [
        {},
        {"started": 1, "duration": 0},
        {"started": "x", "duration": 0, "code": 0},
        {"started": 1, "duration": 0, "code": "0"},
        {"started": 1, "duration": 0, "code": None},
    ],
)
def test_an_outcome_that_is_not_one_is_an_error_not_a_crash(outcome: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="is not one"):
        runner._outcome(outcome, Path("/logs/W/g1/Job.1.log"))


def test_a_huge_timeout_is_no_timeout(tmp_path: Path) -> None:
    result = supervised(run("true", timeout=1e300), tmp_path, tmp_path)
    assert result is not None and result.ok


def test_a_run_outlives_its_agent_and_is_re_attached_not_rerun(tmp_path: Path) -> None:
    """An "agent" process starts the run and is killed -9 mid-run; supervising the same run again
    waits for the daemon still running it, then (a third time) reads the recorded outcome."""
    count, started = tmp_path / "count", tmp_path / "started"
    job = run(f"touch {started}; sleep 1.5; echo once >> {count}", cwd=str(tmp_path))
    agent = start_agent(job, tmp_path / "s")
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


def test_a_frozen_supervisor_is_waited_for_not_declared_lost_or_rerun(tmp_path: Path) -> None:
    """SIGSTOP of the daemon past its job's end: the agent that asked waits, an agent restarted
    meanwhile waits too (its connection queues), and once the daemon is continued both get the
    outcome; the job ran once."""
    count, started = tmp_path / "count", tmp_path / "started"
    job = run(f"touch {started}; sleep 0.5; echo once >> {count}", cwd=str(tmp_path))
    state = tmp_path / "s"

    async def scenario() -> list[Result | None]:
        first = await started_once(once(job, state, tmp_path), started)
        pid = daemon_of(state)
        os.kill(pid, signal.SIGSTOP)
        try:
            again = asyncio.create_task(once(job, state, tmp_path))
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
    log.touch()  # a supervisor started the command, and died before recording its end
    assert supervised(job, tmp_path / "s", tmp_path) is None
    assert not (tmp_path / "count").exists()


def test_a_killed_supervisor_s_run_is_lost_not_rerun_and_a_new_one_serves(tmp_path: Path) -> None:
    """kill -9 of the daemon mid-run: the waiting agent asks a new daemon, which finds the log and
    no status: lost; the command (its own session) ends once, and the next run is served."""
    count, started = tmp_path / "count", tmp_path / "started"
    job = run(f"touch {started}; sleep 1; echo once >> {count}")
    state = tmp_path / "s"

    async def scenario() -> tuple[Result | None, Result | None]:
        client = SupervisorClient(state)
        try:
            waiting = await started_once(client.supervise(job, tmp_path), started)
            killed = daemon_of(state)
            os.kill(killed, signal.SIGKILL)
            lost = await asyncio.wait_for(waiting, 10)
            assert daemon_of(state) != killed
            return lost, await client.supervise(run("true", job="Next"), tmp_path)
        finally:
            await client.close()

    lost, following = asyncio.run(scenario())
    assert lost is None and following is not None and following.ok
    wait_for(count.exists, "the orphaned command ended")
    time.sleep(0.2)
    assert count.read_text() == "once\n"


def test_two_agents_asking_for_the_same_run_get_one_command(tmp_path: Path) -> None:
    """Two connections (and two daemon starts, one of which finds the lock taken) ask for the same
    run at once: one command, the same outcome for both."""
    count = tmp_path / "count"
    job = run(f"sleep 0.3; echo once >> {count}")

    async def both() -> list[Result | None]:
        return list(await asyncio.gather(once(job, tmp_path, tmp_path), once(job, tmp_path, tmp_path)))

    first, second = asyncio.run(both())
    assert first is not None and second is not None and first.detail == second.detail
    assert count.read_text() == "once\n"


def test_a_second_supervisor_for_a_state_dir_exits_at_once(tmp_path: Path) -> None:
    assert start_daemon(tmp_path).returncode == 0
    daemon = daemon_of(tmp_path)
    with dial(tmp_path):  # keeps it from exiting idle
        began = time.monotonic()
        assert start_daemon(tmp_path).returncode == 0
        assert time.monotonic() - began < 5 and daemon_of(tmp_path) == daemon and alive(daemon)
    assert "another supervisor serves" in (tmp_path / "supervisor.log").read_text()


def test_the_supervisor_exits_when_idle(tmp_path: Path) -> None:
    assert start_daemon(tmp_path).returncode == 0
    daemon = daemon_of(tmp_path)
    assert alive(daemon)
    wait_for(lambda: not alive(daemon), "the idle daemon exited", timeout=supervisor.IDLE + 8)


def test_only_our_own_user_is_served() -> None:
    own, other = supervisor.CREDENTIALS.pack(1, os.geteuid(), 0), supervisor.CREDENTIALS.pack(1, 4242, 0)
    assert supervisor.foreign(own) is None
    assert supervisor.foreign(other) == (None if os.geteuid() == 4242 else 4242)


def connect_as(uid: int, state: Path, payload: bytes) -> bool:
    """Whether a process of ``uid`` that connects to the daemon of ``state`` and sends ``payload``
    finds its connection closed without an answer (a fork: no interpreter to exec as that user)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        closed = False
        try:
            os.setuid(uid)
            sock = dial(state)
            try:
                sock.sendall(payload)
                closed = sock.recv(100) == b""
            except (BrokenPipeError, ConnectionResetError):  # closed while sending
                closed = True
        finally:
            os._exit(0 if closed else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="connecting as another user takes root")
def test_a_connection_from_another_user_is_refused(tmp_path: Path) -> None:
    """The abstract socket has no permissions: the daemon checks SO_PEERCRED and closes the
    connection of another uid before reading a byte of it."""
    job = run(f"touch {tmp_path / 'ran'}")
    log_path(tmp_path, job).parent.mkdir(parents=True)
    assert start_daemon(tmp_path).returncode == 0
    with dial(tmp_path):
        assert connect_as(65534, tmp_path, lines({"env": {}}, request(tmp_path, job)))
    assert "refused a connection from uid 65534" in (tmp_path / "supervisor.log").read_text()
    assert not log_path(tmp_path, job).exists() and not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b'{"env": {"A=B": "c"}}',
        b'{"env": {}}\n[1, 2]',
        b'{"env": {}}\n{"id": 1}',
        b'{"env": {}}\n' + b"[" * 100_000 + b"]" * 100_000,
        b"x" * (supervisor.LINE_LIMIT + 10),
    ],
)
def test_a_malformed_line_closes_its_connection_not_the_supervisor(tmp_path: Path, line: bytes) -> None:
    assert start_daemon(tmp_path).returncode == 0
    daemon = daemon_of(tmp_path)
    with dial(tmp_path) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # closed while sending
            sock.sendall(line + b"\n")
        assert sock.recv(100) == b""
    assert "closed a connection" in (tmp_path / "supervisor.log").read_text()
    result = supervised(run("true"), tmp_path, tmp_path)
    assert result is not None and result.ok and daemon_of(tmp_path) == daemon


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"log": "relative/Job.1.log"}, "is not a .log file inside"),
        ({"log": "/etc/Job.1.log"}, "is not a .log file inside"),
        ({"log": "{logs}/../../Job.1.log"}, "is not a .log file inside"),
        ({"log": "{logs}/W/g1/Job.1.txt"}, "is not a .log file inside"),
        ({"id": "1"}, "id is not an integer"),
        ({"id": True}, "id is not an integer"),
        ({"timeout": "5"}, "timeout is not a number"),
        ({"command": "a\0b"}, "command is not a string without NUL"),
        ({"cwd": None}, "cwd is not a string"),
        ({"env": {"X": "\ud800"}}, "surrogates not allowed"),
        ({"extra": 1}, "exactly the fields"),
    ],
)
def test_a_request_is_checked(tmp_path: Path, change: dict[str, object], fragment: str) -> None:
    message = {**request(tmp_path, run("true")), **change}
    if isinstance(message["log"], str):
        message["log"] = message["log"].replace("{logs}", str(tmp_path / "logs"))
    with pytest.raises(ValueError, match="^.*" + fragment):
        supervisor.parse_request(message, str(tmp_path))


def test_answers_an_agent_reads_late_wait_for_it_none_lost(tmp_path: Path) -> None:
    """More answers than the socket holds (the agent reads none until it has sent every request):
    the daemon keeps reading, keeps the answers, and sends them as the socket drains, in order."""
    job, count = run("true"), 5_000
    assert supervised(job, tmp_path, tmp_path) is not None
    assert start_daemon(tmp_path).returncode == 0
    with dial(tmp_path) as sock:
        sock.sendall(lines({"env": {}}, *(request(tmp_path, job, number) for number in range(count))))
        time.sleep(0.5)  # the daemon handles them all meanwhile: only the socket's draining sends the rest
        received = bytearray()
        while received.count(b"\n") < count:
            data = sock.recv(1 << 16)
            assert data, "closed before every answer came"
            received += data
    answers = [json.loads(line) for line in received.splitlines()]
    assert [answer["id"] for answer in answers] == list(range(count))
    assert all(answer["run"] == "ended" and answer["outcome"]["code"] == 0 for answer in answers)


def test_a_request_whose_agent_died_right_after_sending_it_is_run(tmp_path: Path) -> None:
    """The daemon reads what a closed connection had sent: a request that was sent is run."""
    job = run(f"echo ran >> {tmp_path / 'count'}")
    log_path(tmp_path, job).parent.mkdir(parents=True)
    assert start_daemon(tmp_path).returncode == 0
    with dial(tmp_path) as sock:
        sock.sendall(lines({"env": {}}, request(tmp_path, job)) + b'{"id": 2, "log": ')  # and dies
    wait_for(lambda: supervisor.recorded(str(log_path(tmp_path, job)))[1] is not None, "the run ended")
    assert (tmp_path / "count").read_text() == "ran\n"


def test_a_terminated_supervisor_finishes_its_runs_and_the_next_one_starts_the_rest(tmp_path: Path) -> None:
    """SIGTERM: the daemon starts nothing more, records the run it has, exits; the agent asks the
    run it held of a new daemon, which starts it (it never started)."""
    count, started = tmp_path / "count", tmp_path / "started"
    running = run(f"touch {started}; sleep 0.5; echo running >> {count}")
    held = run(f"echo held >> {count}", job="Held")

    async def scenario() -> tuple[Result | None, Result | None, int]:
        client = SupervisorClient(tmp_path)
        try:
            first = await started_once(client.supervise(running, tmp_path), started)
            daemon = daemon_of(tmp_path)
            os.kill(daemon, signal.SIGTERM)
            second = asyncio.create_task(client.supervise(held, tmp_path))
            await asyncio.sleep(0.2)
            assert not log_path(tmp_path, held).exists()  # not started by the draining daemon
            results = await asyncio.wait_for(asyncio.gather(first, second), 15)
            return results[0], results[1], daemon
        finally:
            await client.close()

    first, second, daemon = asyncio.run(scenario())
    assert first is not None and first.ok and second is not None and second.ok
    assert count.read_text() == "running\nheld\n" and not alive(daemon)


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
    journal.write(TimePassed(), 3.0)
    journal.sync()  # one fsync for both
    journal.close()
    with (tmp_path / "journal" / "log-0").open("ab") as torn:
        torn.write(b'\x00\x00\x00\x30\x12\x34\x56\x78{"t": 4.0, "event": "deliv')
    seen: list[object] = []
    agent = Agent("agentB")
    agent.handle = lambda event, now: seen.append((event, now)) or []  # type: ignore[method-assign]
    reopened = Journal(tmp_path)
    assert reopened.recover(agent) == 2
    assert seen == [(event, 2.0), (TimePassed(), 3.0)]
    reopened.write(TimePassed(), 5.0)  # on a line of its own, not glued to the torn one
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


def test_a_run_log_is_inside_the_logs_folder_and_one_file_name(tmp_path: Path) -> None:
    """A generation folder that leads out of ``logs/`` (a link) is refused, and so is a job
    whose name would make the log's name more than one component."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    folder = generation_dir(tmp_path / "state", "W", "g1")
    folder.parent.mkdir(parents=True)
    folder.symlink_to(outside)
    with pytest.raises(ValueError, match="is outside"):
        log_path(tmp_path / "state", run("true"))
    with pytest.raises(ValueError, match="is not a file name"):
        log_path(tmp_path / "other", run("true", job="a/b"))
    inside = generation_dir(tmp_path / "other", "W", "g1") / "Job.1.log"
    assert log_path(tmp_path / "other", run("true")) == inside


def test_a_run_whose_lease_runs_out_is_killed_by_its_supervisor_not_before(tmp_path: Path) -> None:
    """A run in a pool whose agent is gone: its supervisor kills it when the lease its agent last
    wrote runs out; a renewal written meanwhile is honoured."""
    job = run("sleep 30")
    began = time.time()
    runner.write_lease(tmp_path, job, began + 1.0)
    renewal = threading.Timer(0.5, lambda: runner.write_lease(tmp_path, job, began + 2.0))
    renewal.start()
    result = supervised(job, tmp_path, tmp_path)
    renewal.join()
    assert result is not None and not result.ok
    assert result.detail.startswith("killed by its supervisor after ") and "lease ran out" in result.detail
    assert 1.8 <= time.time() - began < 6
