"""The supervisor of one job attempt: runs it and records how it ended, outliving its agent.

Usage (by :func:`agents.runner.supervise`, never by hand)::

    python -S -I supervisor.py CWD TIMEOUT|- LOCK LOG STATUS COMMAND

The agent starts this process in its own session, so a SIGKILL of the agent (or a Ctrl-C sent to
its terminal's process group) leaves it running. It runs ``/bin/sh -c COMMAND`` in CWD in its own
process group (a timeout kills the whole pipeline, not only the shell), waits at most TIMEOUT
seconds, and writes the outcome atomically (temporary file, fsync, rename, fsync of the folder) to
STATUS: a restarted agent either finds that file or, while this process lives, the run's lock held
(:func:`agents.runner.supervise`). The lock is an open file description inherited from the agent,
not a pid, so a reused pid can never be mistaken for a live supervisor.

LOCK is the number of that inherited descriptor: it is made non-inheritable before the command
starts, or a command that leaves a process behind (``sleep 60 &``) would hold the lock after the
supervisor ended, and a restarted agent would wait for it for ever.

The command's process group id goes to ``JOB.ATTEMPT.pid`` beside the log once it started, so
that ``wfm cancel`` can stop it (:func:`agents.runner.stop`).

The log file is created before the command starts: a free lock, no status and no log mean the
command never started, which is the only case in which the agent may launch it again.

One of these starts for every job attempt, so it must start in milliseconds: it is run as a file
with ``-S -I`` (no site packages, no environment), imports only a few built-in modules (no
argparse, subprocess or pathlib: they cost more than the rest of the start together), and spawns
the shell with ``posix_spawn``. Measured: about 10 ms from exec to the shell's start, against
about 40 ms for ``python -m`` with argparse and subprocess.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

__all__ = ["MAX_TIMEOUT", "main", "write_atomically"]

MAX_TIMEOUT = 1e9  # seconds (31 years); select() overflows past about 9.2e9


def write_atomically(path: str | os.PathLike[str], data: dict[str, object]) -> None:
    """``path`` holds either nothing or all of ``data``, whenever the machine stops."""
    path = os.fspath(path)
    temporary = path + ".tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, json.dumps(data).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def run(command: str, cwd: str, timeout: float | None, log: str) -> dict[str, object]:
    """Run ``command`` to its end; the outcome as the status file records it."""
    started, clock = time.time(), time.monotonic()
    output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.chdir(cwd)
        pid = os.posix_spawn(
            "/bin/sh",
            ["/bin/sh", "-c", command],
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, output, 1),
                (os.POSIX_SPAWN_DUP2, output, 2),
            ],
            setsid=True,
        )
    except OSError as error:
        return {"started": started, "duration": 0.0, "error": f"cannot start: {error.strerror} (cwd {cwd})"}
    finally:
        os.close(output)
    with open(os.path.splitext(log)[0] + ".pid", "w") as group:  # so a cancellation can stop it (runner.stop)
        group.write(str(pid))
    code: int | None = _wait(pid, timeout)
    return {"started": started, "duration": time.monotonic() - clock, "code": code, "timeout": timeout}


def _wait(pid: int, timeout: float | None) -> int | None:
    """The command's exit code (negative: killed by that signal), or None if it timed out (its
    whole process group is then killed)."""
    pidfd = os.pidfd_open(pid)
    try:
        ended, _, _ = select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    if not ended:
        try:  # noqa: SIM105 (contextlib.suppress would import contextlib, costing start-up time)
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended meanwhile
            pass
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if ended else None


def main(argv: list[str]) -> int:
    if len(argv) != 6:
        print("usage: supervisor.py CWD TIMEOUT|- LOCK LOG STATUS COMMAND", file=sys.stderr)
        return 2
    cwd, timeout, lock, log, status, command = argv
    os.set_inheritable(int(lock), False)  # held by this process alone, not by what the command leaves
    seconds = None if timeout == "-" else float(timeout)
    if seconds is not None and not 0 < seconds < MAX_TIMEOUT:
        seconds = None  # select() cannot wait that long: as good as no timeout
    write_atomically(status, run(command, cwd, seconds, log))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
