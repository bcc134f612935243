"""Running the attempts of jobs under the agent's supervisor, re-attaching to them after a
restart, pruning logs.

Every attempt runs under the supervisor daemon of the agent's state directory
(:mod:`agents.supervisor`), in its own session so it outlives the agent: it runs the command with
its timeout, environment and log, and records its process group and its outcome in the
generation folder's ``runs.jsonl``.
:class:`SupervisorClient` is the agent's one connection to it (the daemon is started on first
need); :meth:`SupervisorClient.supervise` serves a new run and a run found unfinished after a
restart alike, since the daemon answers from what it runs and what the files say:

* running under the daemon: it waits for the end (re-attached);
* an outcome recorded: the run ended (perhaps while no agent was there); its outcome, which the
  answer carries;
* a log but no outcome: a supervisor died after starting the command; the run is **lost**
  (``None``), and is never started again, since the command may have run;
* nothing: the command never started (the agent died between journaling the start and asking for
  it, or this is a new run); the daemon starts it.

If the daemon dies (kill -9), the connection breaks and every run waiting on it is asked again of
a new daemon, which answers from the files: ended, lost, or started if it never was.

Output goes to a per-run log file, not to the agent's stderr: many generations run at once, and a
user reading why JobB failed wants that run's output only. Every file of a generation lives in one
folder, ``logs/W/GID``, which :func:`prune` deletes as a whole once its retention is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import glob
import itertools
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import supervisor
from agents.events import Result, Run
from agents.forgetting import DAY, FORGET_AFTER
from broker.durable.log import private_directory
from workflow_messages.params import decode_params, param_environment

__all__ = [
    "KEEP_DAYS",
    "KEEP_RUNS",
    "LOG_TAIL",
    "Retention",
    "SupervisorClient",
    "SupervisorError",
    "log_path",
    "log_tail",
    "prune",
    "stop",
    "write_lease",
]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0  # seconds to reach the supervisor, starting it while none listens
ASKS = 10  # times a run is asked of a supervisor that goes away before answering
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
    """``logs/W/GID/JOB.ATTEMPT.log`` under the agent's state directory. The generation's folder
    is checked once for all its runs (resolving both paths for every run was a fifteenth of a
    busy agent's time); the file's name is one component, which the supervisor creates with
    ``O_EXCL``, so it cannot be a link either."""
    name = f"{run.job}.{run.attempt}.log"
    if os.sep in name:
        raise ValueError(f"log name {name!r} is not a file name")
    return _generation_folder(state_dir, run.workflow, run.gid) / name


@functools.lru_cache(maxsize=256)
def write_lease(state_dir: Path, run: Run, until: float) -> None:
    """Tell ``run``'s supervisor to kill it at ``until`` (epoch seconds) unless told a later time
    first (:func:`agents.supervisor.read_lease`): the ``.lease`` file beside its log, replaced
    whole. Not synced: it matters while the machine is up. A file that cannot be written leaves
    the one before, which lets the run go on for less time, not more."""
    path = log_path(state_dir, run).with_suffix(".lease")
    written = path.with_name(path.name + ".new")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        written.write_text(repr(until))
        os.replace(written, path)
    except OSError as error:
        log.warning("%s: cannot renew its lease file %s: %s", run.label, path, error)


def _generation_folder(state_dir: Path, workflow: str, gid: str) -> Path:
    return _inside_logs(state_dir, generation_dir(state_dir, workflow, gid))


class SupervisorError(OSError):
    """The supervisor cannot be reached, or could not start a run (which then never started)."""


class SupervisorClient:
    """The agent's connection to the supervisor daemon of ``state_dir`` (:mod:`agents.supervisor`),
    shared by all its runs: opened on first need, starting the daemon if none listens, and opened
    again if it breaks."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir.absolute()  # the daemon works in /
        self._link: _Link | None = None
        self._linking = asyncio.Lock()

    async def supervise(self, run: Run, default_cwd: Path) -> Result | None:
        """The outcome of ``run``, starting it only if it never started; ``None`` if it is lost.
        SupervisorError if no supervisor can be reached or it could not start the run."""
        log_file = log_path(self.state_dir, run)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        request: dict[str, object] = {
            "log": str(log_file),
            "command": run.command,
            "cwd": os.path.join(os.getcwd(), run.cwd or default_cwd),  # relative: to the agent's
            "timeout": run.timeout,
            "env": {
                "WFM_WORKFLOW": run.workflow,
                "WFM_JOB": run.job,
                "WFM_GID": run.gid,
                "WFM_DATE": run.date,
                **param_environment(decode_params(run.params) if run.params else {}),
            },
        }
        for _ in range(ASKS):
            link = await self._connected()
            with contextlib.suppress(ConnectionError):  # it went away: the next one answers from the files
                answer = await link.ask(request)
                break
        else:
            raise SupervisorError(f"the supervisor of {self.state_dir} went away {ASKS} times")
        if "error" in answer:
            raise SupervisorError(f"the supervisor did not start {run.label}: {answer['error']}")
        if answer["run"] == "lost":
            return None
        outcome = answer.get("outcome")
        if outcome is None:  # a daemon of the per-run layout, still running its commands
            outcome = supervisor.recorded(str(log_file)).outcome
        return None if outcome is None else _outcome(outcome, log_file)

    async def close(self) -> None:
        """Close the connection; runs still waiting on it are cancelled. The daemon's commands run
        on: a restarted agent re-attaches to them."""
        link, self._link = self._link, None
        if link is not None:
            await link.close()

    async def _connected(self) -> _Link:
        async with self._linking:
            if self._link is not None and self._link.broken:
                await self._link.close()
                self._link = None
            if self._link is None:
                self._link = await self._connect()
            return self._link

    async def _connect(self) -> _Link:
        """A connection to the daemon. While none listens, start one, again and again for
        CONNECT_TIMEOUT: the start ends at once if another holds the lock, and that one may be
        about to exit (idle) or to listen."""
        private_directory(self.state_dir)  # as the journal makes it: a runner may come first
        deadline = time.monotonic() + CONNECT_TIMEOUT
        attempt = 0
        while True:
            with contextlib.suppress(ConnectionRefusedError):
                return await self._dial()
            if time.monotonic() > deadline:
                raise SupervisorError(
                    f"no supervisor listens for {self.state_dir} (see {self.state_dir / 'supervisor.log'})"
                )
            if attempt:
                await asyncio.sleep(min(0.5, 0.01 * 2**attempt))
            await self._start()
            attempt += 1

    async def _dial(self) -> _Link:
        """Connect, check that the daemon is our own user's, send the environment its commands get."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, supervisor.address(self.state_dir))
            uid = supervisor.foreign(supervisor.peer_credentials(sock))
            if uid is not None:
                raise SupervisorError(f"the supervisor socket of {self.state_dir} is held by uid {uid}")
            reader, writer = await asyncio.open_unix_connection(sock=sock)
        except BaseException:
            sock.close()
            raise
        writer.write(supervisor.encode({"env": dict(os.environ)}))
        return _Link(reader, writer)

    async def _start(self) -> None:
        """Run ``supervisor.py``, which returns once its daemon listens (or another holds the lock)."""
        errors = self.state_dir / "supervisor.log"  # the daemon's complaints
        with open(os.open(errors, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as stderr:
            starter = await asyncio.create_subprocess_exec(
                *(sys.executable, "-S", "-I", supervisor.__file__, str(self.state_dir)),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                cwd="/",
            )
        code = await starter.wait()
        if code != 0:
            raise SupervisorError(
                f"the supervisor of {self.state_dir} did not start (exit {code}); see {errors}"
            )


class _Link:
    """One connection to the daemon: requests written as they come, answers matched to them by id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.ids = itertools.count(1)
        self.reading = asyncio.create_task(self._read())

    @property
    def broken(self) -> bool:
        return self.reading.done()

    async def ask(self, request: dict[str, object]) -> dict[str, Any]:
        """The daemon's answer to ``request``; ConnectionError if it goes away before answering."""
        if self.broken:
            raise ConnectionError("the supervisor went away")
        number = next(self.ids)
        self.waiting[number] = answer = asyncio.get_running_loop().create_future()
        try:
            self.writer.write(supervisor.encode({"id": number, **request}))
            return await answer
        finally:
            del self.waiting[number]

    async def close(self) -> None:
        for answer in self.waiting.values():
            answer.cancel()
        self.writer.close()
        self.reading.cancel()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()
        await asyncio.wait([self.reading])

    async def _read(self) -> None:
        try:
            while line := await self.reader.readline():
                number, answer = _answer(line)
                waiting = self.waiting.get(number)
                if waiting is not None and not waiting.done():
                    waiting.set_result(answer)
        except (OSError, ValueError) as error:
            log.error("connection to the supervisor broken: %s", error)
        finally:
            unanswered = [waiting for waiting in self.waiting.values() if not waiting.done()]
            if unanswered:
                log.warning("the supervisor went away: asking a new one about %d runs", len(unanswered))
            for waiting in unanswered:
                waiting.set_exception(ConnectionError("the supervisor went away"))


def _answer(line: bytes) -> tuple[int, dict[str, Any]]:
    """The id and the answer in a line from the daemon; ValueError if it is not one."""
    answer = json.loads(line)
    if not isinstance(answer, dict) or type(answer.get("id")) is not int:
        raise ValueError(f"not an answer: {line[:200]!r}")
    number = answer.pop("id")
    if not (_ran(answer) or (answer.keys() == {"error"} and isinstance(answer["error"], str))):
        raise ValueError(f"not an answer: {line[:200]!r}")
    return number, answer


def _ran(answer: dict[str, Any]) -> bool:
    """Lost, or ended with its outcome (or without: a daemon of the per-run layout)."""
    if answer in ({"run": "ended"}, {"run": "lost"}):
        return True
    return (
        answer.keys() == {"run", "outcome"}
        and answer["run"] == "ended"
        and isinstance(answer["outcome"], dict)
    )


def stop(run: Run, state_dir: Path, signal_number: int) -> bool:
    """Send ``signal_number`` to the process group of ``run``'s command (its supervisor recorded
    the group's id when it started it); False if it has not started or has ended.

    The id is used only while the run has no outcome recorded, i.e. while its supervisor has not
    reaped the command, and only in the boot of the machine it was recorded in, so it names the
    command's group and not a process that reused the number (but for the instant between the
    reaping and the record)."""
    try:
        group, outcome, _ = supervisor.recorded(str(log_path(state_dir, run)))
        if outcome is not None or type(group) is not int:
            return False
        os.killpg(group, signal_number)
    except (ValueError, ProcessLookupError, PermissionError):  # PermissionError: not ours
        return False
    return True


def log_tail(
    state_dir: Path, workflow: str, gid: str, job: str, attempt: int, limit: int = LOG_TAIL
) -> dict[str, object]:
    """The last ``limit`` bytes of the log of ``job``'s ``attempt`` (0: the latest) in generation
    ``gid``, as text (bytes that are not UTF-8 replaced), with the attempts there are, the log's
    size, whether it was cut and when it started (None if not recorded). ValueError (one line) if
    there is no such log."""
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
        **_ended_and_started(str(path)),
        "text": data.decode("utf-8", errors="replace"),
    }


def _ended_and_started(log: str) -> dict[str, object]:
    """Whether the run of ``log`` ended (its outcome is recorded; one that cannot be read is of a
    run that ended lost), and when it started (None if not recorded)."""
    try:
        record = supervisor.recorded(log)
    except ValueError:
        return {"ended": True, "started": None}
    return {"ended": record.outcome is not None, "started": record.started}


def _outcome(data: dict[str, Any], log_file: Path) -> Result:
    """The result in a recorded outcome; ValueError if it is not one."""
    try:
        started, duration = float(data["started"]), float(data["duration"])
        if "error" in data:
            return Result(False, str(data["error"]), started, duration)
        if data.get("fenced") is True:
            detail = (
                f"killed by its supervisor after {duration:.3f} s: its pool slot's lease ran out, or its"
                " agent's link to its broker (a job with standby agents)"
            )
            return Result(False, f"{detail}; log {log_file}", started, duration)
        code = data["code"]
        if code is None:
            timeout = float(data["timeout"])
            return Result(False, f"timed out after {timeout:g} s; log {log_file}", started, duration)
        if type(code) is not int:
            raise TypeError("code is not an integer")
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"the outcome of {log_file} is not one: {error}") from None
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
