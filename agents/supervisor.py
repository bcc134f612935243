"""``python -m agents.supervisor``: runs one job attempt and records how it ended, outliving its agent.

The agent starts this process in its own session, so a SIGKILL of the agent (or a Ctrl-C sent to
its terminal's process group) leaves it running. It runs ``/bin/sh -c COMMAND`` in its own process
group (a timeout kills the whole pipeline, not only the shell), waits at most ``--timeout`` seconds,
and writes the outcome atomically (temporary file, fsync, rename, fsync of the folder) to
``--status``: a restarted agent either finds that file or, while this process lives, the run's lock
held (:func:`agents.runner.supervise`). The lock is an open file description inherited from the
agent, not a pid, so a reused pid can never be mistaken for a live supervisor.

The log file is created before the command starts: a free lock, no status and no log mean the
command never started, which is the only case in which the agent may launch it again.

It imports nothing but the standard library: it starts once per run, and must start fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "write_atomically"]


def write_atomically(path: Path, data: dict[str, Any]) -> None:
    """``path`` holds either nothing or all of ``data``, whenever the machine stops."""
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8") as file:
        json.dump(data, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def run(command: str, cwd: str, timeout: float | None, log: Path) -> dict[str, Any]:
    """Run ``command`` to its end; the outcome as the status file records it."""
    started, clock = time.time(), time.monotonic()
    with log.open("wb") as output:
        try:
            process = subprocess.Popen(
                ["/bin/sh", "-c", command],
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=True,
            )
        except OSError as error:
            return {
                "started": started,
                "duration": 0.0,
                "error": f"cannot start: {error.strerror} (cwd {cwd})",
            }
        try:
            code: int | None = process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = None
    return {"started": started, "duration": time.monotonic() - clock, "code": code, "timeout": timeout}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agents.supervisor", description=__doc__)
    parser.add_argument("--cwd", required=True)
    parser.add_argument("--timeout", type=float)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--status", type=Path, required=True)
    parser.add_argument("command")
    args = parser.parse_args(argv)
    write_atomically(args.status, run(args.command, args.cwd, args.timeout, args.log))


if __name__ == "__main__":
    main()
