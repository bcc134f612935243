"""The coordinator's limit on the generations of a workflow running at once, and its overlap
policy (``<workflow max-active="N" overlap="queue|skip|cancel">``, carried by APPL_START's
``JobInfo.overlap``; the words in :mod:`workflow_messages.overlap`).

For its coordinator, a generation runs from the APPL_START it published to its APPL_END. When
APPL_START fires (a Trigger came, not expired, not a duplicate) while N generations run,
:func:`admit` holds it by the policy:

* ``queue``: the generation waits: APPL_START is not published, so no job of it fires anywhere.
  Its firing is kept in the generation (``GenerationState.queued``, in the snapshot) and it is
  listed by ``wfm runs`` as queued (its APPL_START's state). :func:`check` starts it once one
  ends, waiting ones in the order the coordinator heard of them (its Trigger's arrival), and ends
  at once one whose Trigger expires while it waits (EXPIRED) or that ``wfm cancel`` cancelled
  (CANCELLED); nothing of either ran.
* ``skip``: the generation does not start; its APPL_END, status SKIPPED, goes out at once.
* ``cancel``: the oldest running generation not already being cancelled is cancelled here as
  ``wfm cancel`` does (:func:`agents.cancel_and_rerun.halt`), and the other agents are told by a
  second APPL_START of it, status CANCELLED, signed by the coordinator, which every agent of the
  workflow hears (:func:`replaced`); the new generation waits, as queued, until the cancelled one
  has ended (its stopped jobs reported), so never more than N run. If every running one is
  being cancelled already, the oldest waiting one is ended CANCELLED instead: the newest win.

Every decision is made on a journaled event: :func:`admit` on the APPL_START's firing,
:func:`check` after every event (the adapter journals a tick whose check did something, with its
time, as it does for deadlines), so a coordinator restarted from its journal holds, starts and
ends the same generations: none lost, none started twice.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from agents import cancel_and_rerun, publishing, unstarted
from agents.envelope import JobInfo, firing_date
from agents.events import Effect, Emit
from agents.generations import GenerationState
from broker.language import Publication, parse_publication
from workflow_messages import APPL_START, CANCELLED, EXPIRED, TRIGGER, expired
from workflow_messages.overlap import SKIPPED, skipped_detail
from workflow_messages.trigger import trigger_expiry

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["Begin", "admit", "check", "replaced", "running", "waiting"]

log = logging.getLogger(__name__)

# agents.firing.begin: start a generation on its APPL_START's firing (passed in: firing calls admit)
Begin = Callable[["Agent", JobInfo, str, tuple[Publication, ...], dict[str, str], float], list[Effect]]


def admit(
    agent: Agent,
    info: JobInfo,
    gid: str,
    publications: tuple[Publication, ...],
    params: dict[str, str],
    now: float,
) -> list[Effect] | None:
    """APPL_START (``info``) fired for ``gid``: None if the generation may start now, else what
    was done instead (it waits, or was skipped, or waits for the oldest to be cancelled)."""
    limit = info.overlap
    if limit is None:
        return None
    workflow = info.workflow
    active, queue = running(agent, workflow), waiting(agent, workflow)
    full = len(active) >= limit.max_active
    if limit.policy == "skip":
        if not full:
            return None
        detail = skipped_detail(active, limit.max_active)
        log.warning("%s %s not started: %s", workflow, gid, detail)
        return unstarted.end(agent, workflow, info.version, gid, SKIPPED, detail, publications, now)
    if not full and not queue:  # (those waiting go first: they wait for room only)
        return None
    effects = _replace(agent, info, gid, active, queue, now) if limit.policy == "cancel" and full else []
    generation = agent.generations[workflow, gid]
    generation.jobs[APPL_START] = "queued"
    generation.queued = [str(p) for p in publications]
    recorded = publishing.outcome(agent, workflow, gid)  # so that wfm runs lists it
    with contextlib.suppress(ValueError):  # a bad date is APPL_START's FAILURE when it starts
        recorded["date"] = firing_date(publications).isoformat()
    if params:
        recorded["params"] = params
    log.info("%s %s queued: %d running (limit %d)", workflow, gid, len(active), limit.max_active)
    return effects


def check(agent: Agent, now: float, begin: Begin) -> list[Effect]:
    """After every event: end the waiting generations that were cancelled or whose Trigger
    expired, then start waiting ones, oldest first, while the limit of their workflow's current
    version leaves room (any, if that version has no limit). A version that moved the
    coordinator to another agent ends those still waiting here: the new one never heard of them."""
    if not any(_limited(deployment.jobs.get(APPL_START)) for deployment in agent.deployments.values()):
        return []  # most agents, at most events: no scan of the generations
    held = {workflow for (workflow, _), generation in agent.generations.items() if generation.queued}
    effects: list[Effect] = []
    for workflow in sorted(held):
        for gid in waiting(agent, workflow):
            effects += _expire_or_drop(agent, workflow, gid, now)
        current = agent.current(workflow)
        info = None if current is None else agent.deployments[workflow, current].jobs.get(APPL_START)
        if info is None:
            effects += _moved(agent, workflow, current, now)
            continue
        limit = info.overlap
        room = None if limit is None else limit.max_active - len(running(agent, workflow))
        for gid in waiting(agent, workflow)[: None if room is None else max(room, 0)]:
            generation = agent.generations[workflow, gid]
            publications = _firing(generation)
            generation.queued = []
            del generation.jobs[APPL_START]
            generation.version = info.version
            generation.since = now  # it starts now: what its deadline counts from, as elsewhere
            log.info("%s %s starts: its turn came", workflow, gid)
            effects += begin(agent, info, gid, publications, {}, now)  # (its params are recorded)
    return effects


def _moved(agent: Agent, workflow: str, current: str | None, now: float) -> list[Effect]:
    """No version here starts generations of ``workflow`` any more: the waiting ones end."""
    where = (
        "no version here starts generations of it any more"
        if current is None
        else f"version {current} has another coordinator"
    )
    detail = f"cancelled while queued: {where}; nothing ran (trigger it again)"
    return [
        e
        for gid in waiting(agent, workflow)
        for e in _end_waiting(agent, workflow, gid, CANCELLED, detail, now)
    ]


def replaced(agent: Agent, workflow: str, version: str, gid: str, now: float) -> list[Effect]:
    """A second APPL_START of ``gid``, status CANCELLED, from the coordinator (signed by it, as
    every APPL_START is checked to be): the workflow's ``overlap="cancel"`` replaced it, and its
    jobs here stop and do not run, as on ``wfm cancel``."""
    generation = agent.generations.setdefault((workflow, gid), GenerationState(version, since=now))
    if generation.cancelled:
        return []  # (the coordinator hears its own)
    return cancel_and_rerun.halt(agent, generation, workflow, gid, now)[0]


def running(agent: Agent, workflow: str) -> list[str]:
    """The gids of ``workflow`` whose APPL_START went out and whose APPL_END did not, oldest first
    (on the coordinator: the generations that count against the limit)."""
    return _oldest_first(agent, workflow, lambda g: APPL_START in g.statuses and not g.ended and not g.queued)


def waiting(agent: Agent, workflow: str) -> list[str]:
    """The gids of ``workflow`` waiting their turn, in the order the coordinator heard of them."""
    return _oldest_first(agent, workflow, lambda g: bool(g.queued))


def _oldest_first(agent: Agent, workflow: str, kept: Callable[[GenerationState], bool]) -> list[str]:
    found = [(g.since or 0.0, gid) for (w, gid), g in agent.generations.items() if w == workflow and kept(g)]
    return [gid for _, gid in sorted(found, key=lambda pair: pair[0])]  # stable: ties as first heard of


def _limited(info: JobInfo | None) -> bool:
    return info is not None and info.overlap is not None


def _replace(
    agent: Agent, info: JobInfo, gid: str, active: list[str], queue: list[str], now: float
) -> list[Effect]:
    """``overlap="cancel"``: cancel the oldest running generation not being cancelled already
    (telling the other agents), or else end the oldest waiting one."""
    workflow = info.workflow
    assert info.overlap is not None
    reason = f"replaced by {gid} (overlap=cancel, limit {info.overlap.max_active})"
    for old in active:
        generation = agent.generations[workflow, old]
        if generation.halted:
            continue
        assert generation.version is not None
        effects = cancel_and_rerun.halt(agent, generation, workflow, old, now)[0]
        log.warning("%s %s cancelled: %s", workflow, old, reason)
        version, detail = generation.version, f"cancelled: {reason}"
        notice = publishing.publication(
            agent, workflow, version, APPL_START, old, CANCELLED, detail, started=now
        )
        return [Emit(notice), *effects]
    if queue:
        return _end_waiting(
            agent, workflow, queue[0], CANCELLED, f"cancelled while queued: {reason}; nothing ran", now
        )
    return []


def _expire_or_drop(agent: Agent, workflow: str, gid: str, now: float) -> list[Effect]:
    """End a waiting generation that was cancelled, or whose Trigger expired, while it waited."""
    generation = agent.generations[workflow, gid]
    if generation.halted:
        return _end_waiting(agent, workflow, gid, CANCELLED, "cancelled while queued; nothing ran", now)
    trigger = next(p for p in _firing(generation) if p.cls == TRIGGER)
    expires = trigger_expiry(trigger)  # read when it fired: it is an expiry
    if expires is None or not expired(expires, now):
        return []
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
    detail = f"expired while queued: its turn had not come by its expiry ({at}); nothing ran"
    log.warning("%s %s not started: %s", workflow, gid, detail)
    return _end_waiting(agent, workflow, gid, EXPIRED, detail, now)


def _end_waiting(agent: Agent, workflow: str, gid: str, status: str, detail: str, now: float) -> list[Effect]:
    generation = agent.generations[workflow, gid]
    publications = _firing(generation)
    generation.queued = []
    assert generation.version is not None
    return unstarted.end(agent, workflow, generation.version, gid, status, detail, publications, now)


def _firing(generation: GenerationState) -> tuple[Publication, ...]:
    """The publications of the firing a waiting generation holds (its Trigger), as they came."""
    return tuple(parse_publication(text) for text in generation.queued)
