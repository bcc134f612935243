"""How the monitor is shown: one rich table per generation. Pure (returns renderables)."""

from __future__ import annotations

import time

from rich.console import Group
from rich.table import Table
from rich.text import Text

from wfm.monitor.model import Generation, JobState, Monitor
from workflow_messages import APPL_END, APPL_START, EXPIRED, FAILURE, NORUN, SUCCESS
from workflow_messages.jobstate import AWAITING, HELD, QUEUED, RUNNING, WAITING
from workflow_messages.overlap import SKIPPED

__all__ = ["STYLES", "render"]

# EXPIRED: APPL_END of a generation whose Trigger came too late to start it (nothing ran);
# SKIPPED: of one beyond its workflow's max-active, with overlap="skip" (nothing ran either)
STYLES = {SUCCESS: "green", FAILURE: "bold red", NORUN: "dim", EXPIRED: "magenta", SKIPPED: "magenta"}
# the states of jobs not ended that their agents publish (JOBSTATE): what waits for someone stands out
STYLES |= {HELD: "bold yellow", AWAITING: "bold yellow", WAITING: "cyan", QUEUED: "cyan", RUNNING: "cyan"}
SKIPPED_STYLE = "yellow"  # a NORUN on a branch not taken (its detail says why)
MISSED_STYLE = "bold magenta"  # a job (or the generation) past its deadline


def render(monitor: Monitor) -> Group:
    """Every generation seen, oldest first (nothing before the first: data only, the command says
    on stderr what it waits for)."""
    return Group(*(section(g) for g in monitor.generations.values()))


def section(generation: Generation) -> Group:
    """A heading (workflow, gid, date, whether it is over; a line of run parameters) over a table
    of job, state (coloured), start, duration and detail. The heading is not the table's title: a
    title wraps at the width of the table, and APPL_END's detail can be longer. A detail too long
    for its column is folded, never cut: it ends with the path of the job's log."""
    start = generation.jobs.get(APPL_START)
    if generation.end is None and start is not None and start.live and start.status == QUEUED:
        state = Text("queued", style="cyan")  # behind its workflow's max-active (APPL_START's reason)
    elif generation.end is None:
        state = Text("running", style="cyan")
    else:
        state = Text(generation.end.status, style=STYLES.get(generation.end.status, ""))
        if generation.end.detail:
            state.append(f" ({generation.end.detail})")
    heading = Text(f"{generation.workflow}  {generation.gid}  {generation.date or ''}  ", style="bold")
    heading += state
    if generation.missed:  # alerts of missed deadlines (wfm alerts lists them)
        names = ", ".join("the generation" if job == APPL_END else job for job in generation.missed)
        heading.append(f"  deadline missed: {names}", style=MISSED_STYLE)
    if generation.params:  # the run parameters, a line of their own: params: KEY=VALUE ...
        shown = "  ".join(f"{key}={value}" for key, value in generation.params.items())
        heading.append(f"\nparams: {shown}", style="dim")
    return Group(heading, _table(generation))


def _table(generation: Generation) -> Table:
    result = Table(expand=False)
    for column in ("job", "state", "start", "duration"):
        result.add_column(column, no_wrap=True)
    result.add_column("detail", overflow="fold")
    # APPL_START first: it says when the generation started; the others in arrival order
    for job, job_state in sorted(generation.jobs.items(), key=lambda item: item[0] != APPL_START):
        result.add_row(
            job,
            Text(
                job_state.status,
                style=SKIPPED_STYLE if job_state.skipped else STYLES.get(job_state.status, ""),
            ),
            _clock(job_state.started),
            f"{_duration(job_state)} late".strip() if job in generation.missed else _duration(job_state),
            job_state.detail,
        )
    return result


def _duration(state: JobState) -> str:
    """How long the job ran: blank for a status published without running anything (attempt 0:
    APPL_START, a NORUN, a skip), which carries duration 0; milliseconds under a second."""
    seconds = state.duration
    if seconds is None or (state.attempt <= 0 and not seconds):
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms" if seconds >= 0.0005 else "<1ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def _clock(epoch: float | None) -> str:
    return "" if epoch is None else time.strftime("%H:%M:%S", time.localtime(epoch))
