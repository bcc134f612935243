"""Running one attempt of a job under a supervisor, re-attaching to it after a restart, pruning logs.

Each attempt runs under a supervisor process (:mod:`agents.supervisor`), in its own
session so it outlives the agent: it runs the command with its timeout, environment and log, and
writes the outcome atomically into the run's status file. The agent starts the supervisor with the
run's lock held (``flock`` on ``JOB.ATTEMPT.lock``) and hands the lock down to it, so "the lock is
held" means exactly "a supervisor of this run is alive", whatever became of the agent and of pids.

:func:`supervise` serves a new run and a run found unfinished after a restart alike:

* lock held: a supervisor from before the restart still runs it; wait for the lock, read the status;
* a status file: the run ended (perhaps while no agent was there); its outcome;
* a log but no status: the supervisor died after starting the command; the run is **lost**
  (``None``), and is never started again, since the command may have run;
* nothing: the command never started (the agent died between journaling the start and launching
  it, or this is a new run); start it.

Output goes to a per-run log file, not to the agent's stderr: many generations run at once, and a
user reading why JobB failed wants that run's output only. Every file of a generation lives in one
folder, ``logs/W/GID``, which :func:`prune` deletes as a whole once its retention is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agents import supervisor
from agents.state import DAY, FORGET_AFTER, Result, Run

__all__ = [
    "KEEP_DAYS",
    "KEEP_RUNS",
    "LOG_TAIL",
    "Retention",
    "log_path",
    "log_tail",
    "prune",
    "stop",
    "supervise",
]

log = logging.getLogger(__name__)

REATTACH_POLL = 0.2  # seconds between looks at the lock of a supervisor this agent did not start
KEEP_RUNS = 1000  # generations of run logs kept per workflow, by default
KEEP_DAYS = FORGET_AFTER / DAY  # days run logs (and generations the agent saw no end of) are kept
# bytes of a log's end a LOGS answer carries: JSON-escaped, at most six times as many, well inside a frame
LOG_TAIL = 64 << 10


def generation_dir(state_dir: Path, workflow: str, gid: str) -> Path:
    return state_dir / "logs" / workflow / gid


def _inside_logs(state_dir: Path, path: Path) -> Path:
    """``path``, once resolved inside ``logs/`` of the state directory; ValueError otherwise. Names
    and gids are checked where they come in, and this last look makes sure no name (an absolute
    one, ``..``, a symbolic link) leads a run's log, or a LOGS query, out of it."""
    logs = (state_dir / "logs").resolve()
    if not path.resolve().is_relative_to(logs):
        raise ValueError(f"log path {path} is outside {logs}")
    return path


def log_path(state_dir: Path, run: Run) -> Path:
    """``logs/W/GID/JOB.ATTEMPT.log`` under the agent's state directory."""
    folder = generation_dir(state_dir, run.workflow, run.gid)
    return _inside_logs(state_dir, folder / f"{run.job}.{run.attempt}.log")


async def supervise(run: Run, state_dir: Path, default_cwd: Path) -> Result | None:
    """The outcome of ``run``, starting it only if it never started; ``None`` if it is lost."""
    log_file = log_path(state_dir, run)
    status = log_file.with_suffix(".status")
    log_file.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(log_file.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        # a status file means the run ended: whatever may still hold the lock is not its supervisor
        if not status.exists() and not _try_lock(lock):
            log.info("%s: re-attached to its running supervisor", run.label)
            while not _try_lock(lock) and not status.exists():
                await asyncio.sleep(REATTACH_POLL)
        elif not status.exists() and not log_file.exists():
            await _launch(run, lock, log_file, status, default_cwd)
    finally:
        os.close(lock)
    return _outcome(status, log_file)


def stop(run: Run, state_dir: Path, signal_number: int) -> bool:
    """Send ``signal_number`` to the process group of ``run``'s command (its supervisor wrote the
    group's id beside the log when it started it); False if it has not started or has ended.

    The id is read only while the run has no status file, i.e. while its supervisor has not reaped
    the command, so it names the command's group and not a process that reused the number (but
    for the instant between the reaping and the status write)."""
    try:
        log_file = log_path(state_dir, run)
        if log_file.with_suffix(".status").exists():
            return False
        group = int(log_file.with_suffix(".pid").read_text(encoding="ascii"))
        os.killpg(group, signal_number)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return False
    return True


def log_tail(
    state_dir: Path, workflow: str, gid: str, job: str, attempt: int, limit: int = LOG_TAIL
) -> dict[str, object]:
    """The last ``limit`` bytes of the log of ``job``'s ``attempt`` (0: the latest) in generation
    ``gid``, as text (bytes that are not UTF-8 replaced), with the attempts there are, the log's
    size and whether it was cut. ValueError (one line) if there is no such log."""
    folder = generation_dir(state_dir, workflow, gid)
    _inside_logs(state_dir, folder / job)
    attempts = sorted(
        int(number)
        for path in folder.glob(f"{glob.escape(job)}.*.log")
        if (number := path.name[len(job) + 1 : -len(".log")]).isdigit()
    )
    if not attempts:
        raise ValueError(f"no log of {job} in {gid} (it did not run here, or its log was pruned)")
    chosen = attempt or attempts[-1]
    if chosen not in attempts:
        raise ValueError(
            f"{job} has no attempt {chosen} in {gid} (attempts: {', '.join(map(str, attempts))})"
        )
    path = _inside_logs(state_dir, folder / f"{job}.{chosen}.log")
    with path.open("rb") as file:
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - limit))
        data = file.read(limit)
    return {
        "attempts": attempts,
        "attempt": chosen,
        "size": size,
        "truncated": size > limit,
        "ended": path.with_suffix(".status").exists(),
        "text": data.decode("utf-8", errors="replace"),
    }


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EACCES):
            return False
        raise
    return True


async def _launch(run: Run, lock: int, log_file: Path, status: Path, default_cwd: Path) -> None:
    """Start the supervisor, holding ``lock`` for it, and wait until it exits."""
    env = {
        **os.environ,
        "WFM_WORKFLOW": run.workflow,
        "WFM_JOB": run.job,
        "WFM_GID": run.gid,
        "WFM_DATE": run.date,
    }
    timeout = "-" if run.timeout is None else repr(run.timeout)
    command = [sys.executable, "-S", "-I", supervisor.__file__, run.cwd or str(default_cwd), timeout]
    command += [str(lock), str(log_file), str(status), run.command]
    with open(log_file.with_suffix(".supervisor"), "ab") as errors:  # its own failures, if any
        process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
            pass_fds=(lock,),
        )
    # Not an asyncio subprocess: its transport kills the child when the agent's loop closes, and
    # the supervisor must outlive the agent. A pidfd becomes readable when the process exits.
    pidfd = os.pidfd_open(process.pid)
    loop = asyncio.get_running_loop()
    exited = asyncio.Event()
    loop.add_reader(pidfd, exited.set)
    try:
        await exited.wait()
        process.wait()
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


def _outcome(status: Path, log_file: Path) -> Result | None:
    try:
        data = json.loads(status.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    started, duration = float(data["started"]), float(data["duration"])
    if "error" in data:
        return Result(False, str(data["error"]), started, duration)
    code = data["code"]
    if code is None:
        return Result(False, f"timed out after {data['timeout']:g} s; log {log_file}", started, duration)
    return Result(code == 0, f"exit {code} after {duration:.3f} s; log {log_file}", started, duration)


@dataclass(frozen=True, slots=True)
class Retention:
    """How long generation folders of run logs are kept: the newest ``runs`` per workflow, none
    older than ``days`` (``None``: no age limit). Either limit deletes."""

    runs: int = KEEP_RUNS
    days: float | None = KEEP_DAYS


def prune(state_dir: Path, retention: Retention, busy: set[tuple[str, str]], now: float) -> int:
    """Delete the generation folders past ``retention``, except those of ``busy`` (workflow, gid)
    pairs: generations still in progress here. Returns how many were deleted."""
    deleted = 0
    oldest = None if retention.days is None else now - retention.days * DAY
    for workflow in _folders(state_dir / "logs"):
        generations = sorted(_folders(workflow), key=_mtime, reverse=True)
        for rank, folder in enumerate(generations):
            if (workflow.name, folder.name) in busy:
                continue
            if rank >= retention.runs or (oldest is not None and _mtime(folder) < oldest):
                shutil.rmtree(folder, ignore_errors=True)
                deleted += 1
    return deleted


def _folders(directory: Path) -> list[Path]:
    with contextlib.suppress(FileNotFoundError):
        return [entry for entry in directory.iterdir() if entry.is_dir()]
    return []


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return time.time()
