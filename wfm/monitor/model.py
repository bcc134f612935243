"""What the monitor knows: per generation, the state of each job. Sans-IO: feed it the attributes
of each Trigger and JOBSTATUS publication, ask it what to show and whether it is done.

Publications can arrive in any order: they take different paths through the overlay, so a job's
status may come before its generation's Trigger, or after APPL_END. Any message creates its
generation; a retried job's later attempt wins over an earlier one whatever the arrival order; a
status arriving after APPL_END still updates its job. A job on a branch not taken publishes NORUN
with ``[skipped,1]``: its state is NORUN, as in the history and the reports, with ``skipped`` set
(and its detail says why); so are jobs named as skipped in APPL_END's detail (an agent of an older
version published nothing for them).

A job not ended may also have a state its agent published as a JOBSTATE
(:mod:`workflow_messages.jobstate`: HELD, AWAITING, WAITING, QUEUED, RUNNING), kept as the job's
state with ``live`` set until its status comes: any status supersedes it, it never supersedes a
status, and of two states the one that began later (``since``) wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from broker.language import Value
from workflow_messages import (
    APPL_END,
    JOBSTATUS,
    NORUN,
    PARAMS,
    SUCCESS,
    TRIGGER,
    decode_params,
    parse_job_status,
    skipped_jobs,
    trigger_date,
)
from workflow_messages.alerts import ALERT
from workflow_messages.deadlines import DEADLINE
from workflow_messages.jobstate import JOBSTATE, LIVE, parse_job_state

__all__ = ["Generation", "JobState", "Monitor", "StatusEvent"]

_CORE = ("class", "applname", "jobname", "GID", "status", "detail")  # the rest are extras
_LIVE_CORE = ("class", "applname", "jobname", "GID", "state", "reason")
LIVE_ATTEMPT = -2  # a live state's attempt: below every status's (a named skip's -1 included)


@dataclass
class JobState:
    """The latest status of one job in one generation (``started``/``duration`` when the agent
    says; ``attempt`` orders retries, 0 for a status published without running anything;
    ``skipped``: a NORUN on a branch not taken)."""

    status: str
    detail: str = ""
    started: float | None = None
    duration: float | None = None
    attempt: int = 0
    skipped: bool = False
    live: bool = False  # a JOBSTATE's (``started``: since when), not a status: the job has not ended

    @property
    def ended(self) -> bool:
        """Whether this is a job's end (a status), not a state on the way there."""
        return not self.live and not _unended(self.status)


def _unended(status: str) -> bool:
    """The words of a job not ended: a JOBSTATE's, or the agents' answer to RUNS as wfm runs feeds
    it in (``WAITING FOR POOL DB``)."""
    return status in LIVE or status.startswith("WAITING ")


@dataclass
class Generation:
    """One run of a workflow: its date (from the Trigger, when seen), its jobs, and its end."""

    workflow: str
    gid: str
    date: str | None = None
    jobs: dict[str, JobState] = field(default_factory=dict)
    # the run parameters its Trigger carried (None: no Trigger seen yet; {}: none); one that cannot
    # be read is shown as it came, under "?"
    params: dict[str, str] | None = None
    end: JobState | None = None  # APPL_END's status, once seen
    # the jobs whose deadline's alert came (APPL_END: the generation's), in arrival order
    missed: list[str] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.end is not None


@dataclass(frozen=True)
class StatusEvent:
    """One job status as received: what ``-o json`` prints."""

    workflow: str
    gid: str
    job: str
    status: str
    detail: str
    extras: Mapping[str, Value]
    params: Mapping[str, str] | None = None  # the generation's run parameters, once its Trigger came

    def record(self) -> dict[str, object]:
        return {
            "workflow": self.workflow,
            "gid": self.gid,
            "job": self.job,
            "status": self.status,
            "detail": self.detail,
            **self.extras,
            **({} if self.params is None else {PARAMS: dict(self.params)}),
        }


def _params(value: Value | None) -> dict[str, str]:
    if value is None:
        return {}
    try:
        return decode_params(value)
    except ValueError:
        return {"?": str(value)[:200]}


class Monitor:
    """Generations in the order first seen. ``watched`` gids (or, if none, the first generation
    seen) decide when a monitor without ``--watch`` is done, and its exit status."""

    def __init__(self, gids: Iterable[str] = ()) -> None:
        self.generations: dict[tuple[str, str], Generation] = {}
        self._watched = set(gids)

    def receive(self, attributes: Mapping[str, Value]) -> StatusEvent | None:
        """Take one publication's attributes; a StatusEvent for a job status, None for a Trigger, a
        status already taken, or anything that is not a well-formed workflow message (the monitor
        ignores those)."""
        workflow, gid = attributes.get("applname"), attributes.get("GID")
        if not isinstance(workflow, str) or not isinstance(gid, str):
            return None
        if attributes.get("class") == TRIGGER:
            generation = self._generation(workflow, gid)
            self._trigger(generation, attributes.get("schedule"))
            generation.params = _params(attributes.get(PARAMS))
            return None
        if attributes.get("class") == ALERT:  # a missed deadline (workflow_messages.deadlines)
            job = attributes.get("jobname")
            if attributes.get("status") == DEADLINE and isinstance(job, str):
                missed = self._generation(workflow, gid).missed
                if job not in missed:
                    missed.append(job)
            return None
        if attributes.get("class") == JOBSTATE:
            return self._live(workflow, gid, attributes)
        parsed = parse_job_status(attributes)
        if attributes.get("class") != JOBSTATUS or parsed is None:
            return None
        state = JobState(
            parsed.status,
            parsed.detail,
            parsed.started,
            parsed.duration,
            parsed.attempt,
            parsed.status == NORUN and parsed.skipped,  # a branch not taken says so
        )
        if not self._status(self._generation(workflow, gid), parsed.job, state):
            return None
        extras = {k: v for k, v in attributes.items() if k not in _CORE}
        params = self.generations[workflow, gid].params or None
        return StatusEvent(workflow, gid, parsed.job, parsed.status, parsed.detail, extras, params)

    def _live(self, workflow: str, gid: str, attributes: Mapping[str, Value]) -> StatusEvent | None:
        """A JOBSTATE: the job's state until its status comes."""
        parsed = parse_job_state(attributes)
        if parsed is None or parsed.job == APPL_END:  # (a generation's end is a status only)
            return None
        generation = self._generation(workflow, gid)
        state = JobState(parsed.state, parsed.reason, parsed.since, attempt=LIVE_ATTEMPT, live=True)
        known = generation.jobs.get(parsed.job)
        if known == state or (known is not None and known.ended):
            return None
        before = known.started if known is not None and known.live else None
        if parsed.since is not None and before is not None and parsed.since < before:
            return None  # an earlier state that took a longer way
        generation.jobs[parsed.job] = state
        extras = {**{k: v for k, v in attributes.items() if k not in _LIVE_CORE}, "live": True}
        params = generation.params or None
        return StatusEvent(workflow, gid, parsed.job, parsed.state, parsed.reason, extras, params)

    def _generation(self, workflow: str, gid: str) -> Generation:
        key = (workflow, gid)
        if key not in self.generations:
            self.generations[key] = Generation(workflow, gid)
            if not self._watched:
                self._watched.add(gid)
        return self.generations[key]

    @staticmethod
    def _trigger(generation: Generation, day: Value | None) -> None:
        try:
            generation.date = trigger_date(str(day)).isoformat()
        except ValueError:
            generation.date = str(day)

    @staticmethod
    def _status(generation: Generation, job: str, state: JobState) -> bool:
        """Record a job's status; False if it is one already recorded (the same status from the
        history and live, when the monitor catches up)."""
        if job == APPL_END:
            if generation.end == state:
                return False
            generation.end = state
            for name in skipped_jobs(state.detail):
                generation.jobs.setdefault(name, JobState(NORUN, "skipped", skipped=True, attempt=-1))
            return True
        known = generation.jobs.get(job)
        if known == state:
            return False
        if known is None or state.attempt >= known.attempt:  # a named skip (-1) yields to any
            generation.jobs[job] = state
        return True

    def watched(self) -> list[Generation]:
        """The watched generations seen so far."""
        return [g for g in self.generations.values() if g.gid in self._watched]

    @property
    def done(self) -> bool:
        """Every watched gid has a generation, and each has ended."""
        seen = self.watched()
        return bool(seen) and {g.gid for g in seen} >= self._watched and all(g.ended for g in seen)

    def exit_status(self) -> int:
        """0 if every watched generation ended SUCCESS, 1 if one did not (FAILURE, CANCELLED: a
        script waiting on a generation must not go on as if it ran); call when done."""
        return 1 if self.unsuccessful() else 0

    def unsuccessful(self) -> list[str]:
        """Why: each watched generation that ended other than SUCCESS, with APPL_END's detail."""
        return [
            f"{g.workflow} {g.gid} ended {g.end.status}" + (f": {g.end.detail}" if g.end.detail else "")
            for g in self.watched()
            if g.end is not None and g.end.status != SUCCESS
        ]
