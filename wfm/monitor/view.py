"""How the monitor is shown: one rich table per generation. Pure (returns renderables)."""

from __future__ import annotations

import time

from rich.console import Group
from rich.table import Table
from rich.text import Text

from wfm.monitor.model import SKIPPED, Generation, Monitor
from workflow_messages import APPL_START, FAILURE, NORUN, SUCCESS

__all__ = ["STYLES", "render"]

STYLES = {SUCCESS: "green", FAILURE: "bold red", NORUN: "dim", SKIPPED: "yellow"}


def render(monitor: Monitor) -> Group:
    """Every generation seen, oldest first (nothing before the first: data only, the command says
    on stderr what it waits for)."""
    return Group(*(section(g) for g in monitor.generations.values()))


def section(generation: Generation) -> Group:
    """A heading (workflow, gid, date, whether it is over) over a table of job, state (coloured),
    start, duration and detail. The heading is not the table's title: a title wraps at the width
    of the table, and APPL_END's detail can be longer."""
    if generation.end is None:
        state = Text("running", style="cyan")
    else:
        state = Text(generation.end.status, style=STYLES.get(generation.end.status, ""))
        if generation.end.detail:
            state.append(f" ({generation.end.detail})")
    heading = Text(f"{generation.workflow}  {generation.gid}  {generation.date or ''}  ", style="bold")
    result = Table(expand=False)
    for column in ("job", "state", "start", "duration", "detail"):
        result.add_column(column, no_wrap=column != "detail")
    # APPL_START first: it says when the generation started; the others in arrival order
    for job, job_state in sorted(generation.jobs.items(), key=lambda item: item[0] != APPL_START):
        result.add_row(
            job,
            Text(job_state.status, style=STYLES.get(job_state.status, "")),
            _clock(job_state.started),
            "" if job_state.duration is None else f"{job_state.duration:.1f}s",
            job_state.detail,
        )
    return Group(heading + state, result)


def _clock(epoch: float | None) -> str:
    return "" if epoch is None else time.strftime("%H:%M:%S", time.localtime(epoch))
