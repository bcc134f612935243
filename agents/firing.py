"""Firings: the publications delivered for a job's condition (its Trigger and its predecessors'
statuses, joined by the brokers), and what the job does about them: run (queued), or publish a
status decided without running (:func:`_report`: a skip, NORUN, a bad trigger, APPL_START,
APPL_END). Deliveries for plain subscriptions are statuses, the :mod:`agents.coordinator`'s to follow.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from agents import (
    approvals,
    condition_keys,
    conditions,
    coordinator,
    overlap,
    publishing,
    refusals,
    run_queue,
    standby,
    unstarted,
)
from agents.envelope import JobInfo, firing_date
from agents.events import Delivered, Effect, Emit, Run
from agents.generations import NOT_RUN, GenerationState
from broker.language import Publication
from workflow_messages import (
    APPL_END,
    APPL_START,
    CANCELLED,
    EXPIRED,
    FAILURE,
    JOBSTATUS,
    NORUN,
    SUCCESS,
    TRIGGER,
    blocked,
    check_gid,
    end_of,
    expired,
    failures,
    trigger_expiry,
)
from workflow_messages.named_calendars import excluded
from workflow_messages.params import encode_params, resolve, trigger_params

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["begin", "delivered", "fire"]

log = logging.getLogger(__name__)


def delivered(agent: Agent, event: Delivered, now: float) -> list[Effect]:
    """What was delivered for a registration: the firing of a job's condition, or statuses."""
    owner = agent.owners.get(event.key)
    if owner is None:
        return []  # withdrawn meanwhile
    if condition_keys.is_condition(event.key):
        return conditions.arrived(agent, event.key, event.publications, now)
    if agent.wanted[event.key].command == "SUBSCRIBE":
        return [e for p in event.publications for e in coordinator.status(agent, p, now)]
    info = agent.deployments[owner.workflow, owner.version].jobs.get(owner.job)
    if info is None:
        log.warning("%s %s fired before its JOBINFO arrived: ignored", owner.workflow, owner.job)
        return []
    return _fired(agent, info, event.publications, now)


def fire(agent: Agent, info: JobInfo, publications: tuple[Publication, ...], now: float) -> list[Effect]:
    """The firing of ``info``'s condition, decided as it came (a standby's held one, once it took
    the job over: :mod:`agents.standby`)."""
    return _fired(agent, info, publications, now)


def _fired(agent: Agent, info: JobInfo, publications: tuple[Publication, ...], now: float) -> list[Effect]:
    if standby.ignored(agent, info):
        return []  # handed over to a standby: it runs the job now
    gid = next((p.get("GID") for p in publications), None)
    if not isinstance(gid, str) or (info.workflow, gid) in agent.ended:
        return []
    try:
        check_gid(gid)  # it names the folder of the run logs; anyone may publish a Trigger
    except ValueError as error:
        refusals.refuse_firing(agent, info, str(error), now)
        return []
    misshapen = _misshapen(info, gid, publications)
    if misshapen is not None:
        refusals.refuse_firing(agent, info, misshapen, now)
        return []
    unsigned = refusals.unsigned(agent, publications, info.agents, now)
    if unsigned is not None:
        refusals.refuse_firing(agent, info, unsigned.reason, now, unsigned.who)
        return []
    versions = {p.get("version") for p in publications if p.cls == JOBSTATUS}
    expires = None
    if info.job == APPL_START:
        if info.version != agent.current(info.workflow):
            return []  # a generation starts on the latest version only
        try:  # a Trigger whose expiry cannot be read: neither run late nor guess
            expires = trigger_expiry(next(p for p in publications if p.cls == TRIGGER))
        except ValueError as error:
            refusals.refuse_firing(agent, info, str(error), now)
            return []
    elif versions != {info.version}:
        return []  # this generation runs on another version
    elif not (deployment := agent.deployments[info.workflow, info.version]).complete:
        parts = f"{len(deployment.parts_in)} of its {deployment.parts} parts"
        refusals.refuse_firing(agent, info, f"version {info.version} has only {parts} here", now)
        return []
    try:  # parameters that do not fit the declarations: neither run with them nor guess
        params = _params(agent, info, publications)
    except ValueError as error:
        refusals.refuse_firing(agent, info, str(error), now)
        return []
    generation = agent.generations.setdefault((info.workflow, gid), GenerationState(info.version, since=now))
    if generation.version is None:
        generation.version = info.version
    if info.job in generation.jobs:
        return []  # a duplicate firing
    if standby.passive(agent, info):  # a standby's copy: held until taken over, or answered
        return standby.hold(agent, info, gid, publications, now)
    if expires is not None and expired(expires, now):
        return _expire(agent, info, gid, expires, publications, now)
    if info.job == APPL_START:  # unless the workflow's limit on generations at once holds it
        held = overlap.admit(agent, info, gid, publications, params, now)
        return begin(agent, info, gid, publications, params, now) if held is None else held
    statuses = {str(p.get("jobname")): p for p in publications if p.cls == JOBSTATUS}
    generation.cancelled_upstream |= any(p.get("cancelled") == 1 for p in statuses.values())
    upstream = failures(statuses.values())
    if info.job == APPL_END:  # DEPLOY's: the end jobs' statuses came
        assert info.graph is not None
        status, detail = end_of(info.graph, upstream)
        if generation.halted:
            status, detail = CANCELLED, "; ".join(part for part in (NOT_RUN, detail) if part)
        generation.ended = True
        return _report(agent, info, gid, status, detail, now)
    reason = blocked(info.after, statuses)
    if reason is not None:
        return _report(agent, info, gid, NORUN, f"skipped: {reason}", now, upstream, skipped=True)
    try:
        date = firing_date(publications)
    except ValueError as error:
        return _report(agent, info, gid, FAILURE, str(error), now, upstream)
    _record(agent, info.workflow, gid, date.isoformat(), params)
    # every status carries on the failures before it: APPL_END knows of them only that way
    if generation.halted:
        return _report(agent, info, gid, NORUN, NOT_RUN, now, upstream)
    if info.job in generation.reused:
        status, detail = generation.reused[info.job]
        return _report(agent, info, gid, status, detail, now, upstream)
    if not info.calendar.allows(date):
        detail = f"not scheduled on {date.strftime('%A')} {date}"
        return _report(agent, info, gid, NORUN, detail, now, upstream)
    if info.named is not None and (why := excluded(info.named, date)) is not None:
        return _report(agent, info, gid, NORUN, why, now, upstream)  # its definition's calendar
    generation.jobs[info.job] = "queued"
    run = Run(
        info.workflow,
        info.version,
        gid,
        info.job,
        1,
        info.command,
        info.cwd,
        date.isoformat(),
        info.timeout,
        " ".join(sorted(upstream)),
        encode_params(params) if params else "",
    )
    if info.conditions:  # on other workflows or events: held until they hold
        return conditions.queue(agent, info, run, now)
    if info.approval:  # an approval step runs nothing: it waits for wfm approve
        return approvals.await_approval(agent, run, now)
    agent.pending.append(run_queue.Pending(run))
    return run_queue.pump(agent, now)


def begin(
    agent: Agent,
    info: JobInfo,
    gid: str,
    publications: tuple[Publication, ...],
    params: dict[str, str],
    now: float,
) -> list[Effect]:
    """APPL_START (``info``): the generation starts now, on the Trigger among ``publications``
    (at its firing, or when its turn came: :mod:`agents.overlap`)."""
    try:
        date = firing_date(publications)
    except ValueError as error:
        return _report(agent, info, gid, FAILURE, str(error), now)
    _record(agent, info.workflow, gid, date.isoformat(), params)
    return _report(agent, info, gid, SUCCESS, f"trigger for {date.isoformat()}", now)


def _record(agent: Agent, workflow: str, gid: str, date: str, params: dict[str, str]) -> None:
    """The generation's date and run parameters, in the outcome ``wfm runs`` is answered."""
    recorded = publishing.outcome(agent, workflow, gid)
    recorded["date"] = date
    if params:  # only when there are: a record per generation for 500 generations
        recorded["params"] = params


def _report(
    agent: Agent,
    info: JobInfo,
    gid: str,
    status: str,
    detail: str,
    now: float,
    upstream: Iterable[str] = (),
    skipped: bool = False,
) -> list[Effect]:
    """A status decided without running anything: APPL_START, APPL_END, NORUN, a skip, a bad
    trigger. ``upstream``: the failures the predecessors' statuses named."""
    generation = agent.generations[info.workflow, gid]
    generation.jobs[info.job] = "done"
    failed = [*upstream, *([info.job] if status == FAILURE and info.job != APPL_END else [])]
    emitted = publishing.publication(
        agent,
        info.workflow,
        info.version,
        info.job,
        gid,
        status,
        detail,
        started=now,
        skipped=skipped,
        failed=failed,
    )
    if info.job == APPL_START:
        generation.statuses[APPL_START] = status
        return [Emit(emitted), *coordinator.end_if_over(agent, info.workflow, gid, generation, now)]
    return [Emit(emitted), *publishing.over_here(agent, info.workflow, gid, now)]


def _expire(
    agent: Agent, info: JobInfo, gid: str, expires: float, publications: tuple[Publication, ...], now: float
) -> list[Effect]:
    """APPL_START fired after its Trigger expired: the generation does not start
    (:func:`agents.unstarted.end`, status EXPIRED), as is one of a generation that started on
    time and whose Trigger is delivered again after its expiry."""
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
    late = f"{now - expires:.3f} s after its expiry ({at})"
    detail = f"expired: the Trigger reached {agent.name} {late}; nothing ran"
    log.warning("%s %s not started: %s", info.workflow, gid, detail)
    return unstarted.end(agent, info.workflow, info.version, gid, EXPIRED, detail, publications, now)


def _params(agent: Agent, info: JobInfo, publications: tuple[Publication, ...]) -> dict[str, str]:
    """The run parameters of the firing's Trigger, checked against those the job's version
    declares, the defaults filled in (a Trigger from an issuer older than parameters has none);
    {} for APPL_END, whose firing holds no Trigger. ValueError (one line) if they do not fit:
    without TLS anyone may publish a Trigger, and an issuer that could not ask what is deployed
    publishes them unchecked."""
    trigger = next((p for p in publications if p.cls == TRIGGER), None)
    if trigger is None:
        return {}
    declared = agent.deployments[info.workflow, info.version].params
    try:
        return resolve(declared, trigger_params(trigger))
    except ValueError as error:
        raise ValueError(f"the trigger's params do not fit version {info.version}: {error}") from None


def _misshapen(info: JobInfo, gid: str, publications: tuple[Publication, ...]) -> str | None:
    """Why a firing is not what the job's condition asks for, or None: every publication of the
    job's workflow and generation, one Trigger (none for APPL_END, which fires on the end jobs),
    and one status of each job it waits for, no more. Brokers join the condition; one that makes
    up a firing (a job's status left out, another generation's, another workflow's Trigger) must
    not make a job run early, whatever each publication's signature."""
    for publication in publications:
        if publication.get("applname") != info.workflow or publication.get("GID") != gid:
            return f"a {publication.cls} of {publication.get('applname')} {publication.get('GID')} in it"
    triggers = sum(p.cls == TRIGGER for p in publications)
    statuses = sorted(str(p.get("jobname")) for p in publications if p.cls == JOBSTATUS)
    if triggers + len(statuses) != len(publications):
        return "a publication that is neither a Trigger nor a status in it"
    if triggers != (0 if info.job == APPL_END else 1):
        return f"{triggers} Triggers in it"
    wanted = sorted(job for job, _ in info.after)
    if statuses != wanted:
        return f"the statuses of {', '.join(statuses) or 'no job'}, not of {', '.join(wanted) or 'none'}"
    return None
