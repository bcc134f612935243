"""Running one attempt of a job: ``/bin/sh -c COMMAND`` as a subprocess with a timeout.

The process gets its own process group so a timeout kills the whole pipeline the command started,
not only the shell. Output goes to a per-run log file, not to the agent's stderr: many generations
run at once, and a user reading why JobB failed wants that run's output only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

from agents.state import Result, Run

__all__ = ["execute", "log_path"]


def log_path(state_dir: Path, run: Run) -> Path:
    """``logs/W/GID/JOB.ATTEMPT.log`` under the agent's state directory."""
    return state_dir / "logs" / run.workflow / run.gid / f"{run.job}.{run.attempt}.log"


async def execute(run: Run, state_dir: Path, default_cwd: Path) -> Result:
    """Run ``run`` to its end; the detail says exit status or timeout, duration and log file."""
    log = log_path(state_dir, run)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "WFM_WORKFLOW": run.workflow,
        "WFM_JOB": run.job,
        "WFM_GID": run.gid,
        "WFM_DATE": run.date,
    }
    started, clock = time.time(), time.monotonic()
    with log.open("wb") as output:
        try:
            process = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                run.command,
                cwd=run.cwd or default_cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                start_new_session=True,
            )
        except OSError as error:
            return Result(
                False, f"cannot start: {error.strerror} (cwd {run.cwd or default_cwd})", started, 0.0
            )
        try:
            code = await asyncio.wait_for(process.wait(), run.timeout)
        except TimeoutError:
            _kill_group(process.pid)
            await process.wait()
            duration = time.monotonic() - clock
            return Result(False, f"timed out after {run.timeout:g} s; log {log}", started, duration)
        except asyncio.CancelledError:
            _kill_group(process.pid)
            raise
    duration = time.monotonic() - clock
    return Result(code == 0, f"exit {code} after {duration:.3f} s; log {log}", started, duration)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.killpg(pid, signal.SIGKILL)
