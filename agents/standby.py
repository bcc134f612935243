"""Standby agents: a job's passive copies, and the takeover of the job when its agent is gone.
Pure, like the rest of the state machine (docs/workflows.md, "Standby agents").

A job with ``standby`` agents is deployed on each of them too, marked with its ``primary`` (the
job's own agent). On a standby:

* **Held for takeover.** The copy's condition fires as the primary's does, and the firing is kept
  (:func:`hold`, ``Agent.standing_by``) instead of run; the copy also follows the job's statuses
  (a plain subscription, :func:`sync`) and forgets a held firing once the primary's status of that
  generation came (:func:`followed`): every job publishes one status per generation, its final one.
* **Asking.** A firing held longer than the job's ``takeover`` makes the adapter ask its broker for
  the job (:func:`wanted`): the broker, which holds the primary's session, grants it only once the
  primary's link has been down that long by its own clock (``broker.routing.sessions``).
* **Taken over** (:func:`taken`, a journaled event): the standby runs the job from then on, as its
  own; first every held firing, which no final status of the primary's answered. The primary's
  statuses that reached the broker before the grant reached the standby before it (the adapter
  hands the grant in once the deliveries read before it are in), so none of those runs twice.

On the primary:

* **Declared.** It tells its broker which keys of its session (one per job, ``W J``) its standbys
  may take over, and after how long (:func:`declarations`); the adapter fences the runs of those
  jobs with the supervisor's ``.lease`` file, so they stop before the broker may grant.
* **Handed over** (:func:`handed_over`, a journaled event): its broker refused its hello, naming
  what was taken over. It drops the unfinished runs of those jobs without a status (the adapter
  took their statuses out of its outbox first), withdraws their registrations, ignores their
  firings, and serves its other jobs on a fresh session, until a new deployment of the workflow.

The coordinator's virtual jobs go with its first start job (``JobInfo.goes_with``, :func:`keyed`):
the standbys of that job hold APPL_START's firings (Triggers) and APPL_END's too, under that job's
key; a standby granted it starts and ends those generations and is the coordinator from then on;
the primary handed over publishes neither any more.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from agents import forgetting, publishing, refusals
from agents.envelope import JobInfo, Registration
from agents.events import Effect, HandedOver, Stop, TakenOver, Withdraw
from agents.generations import GenerationState
from agents.wanted import reconcile
from broker.language import Filter, Publication, Value, Var
from workflow_messages import APPL_END, APPL_START, JOBSTATUS, parse_job_status
from workflow_messages._build import filter_of
from workflow_messages.alerts import ALERT
from workflow_messages.deadlines import deadline_filter
from workflow_messages.standby import key, parse_key

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = [
    "KEY",
    "declarations",
    "delivered",
    "forget",
    "handed_jobs",
    "handed_over",
    "hold",
    "ignored",
    "keyed",
    "passive",
    "restore",
    "snapshot",
    "sync",
    "taken",
    "wanted",
]

log = logging.getLogger(__name__)

KEY = "\0standby "  # the prefix of the registration keys of the statuses a standby follows
HELD = "standby"  # a held job's state in its generation (``GenerationState.jobs``)

Held = tuple[str, tuple[Publication, ...], float]  # version, the firing, when it was held


def passive(agent: Agent, info: JobInfo) -> bool:
    """Whether ``info`` is a standby's copy of a job it has not taken over."""
    return info.primary is not None and (info.workflow, keyed(info)) not in agent.took_over


def ignored(agent: Agent, info: JobInfo) -> bool:
    """Whether ``info``'s job was handed over from here: its firings start nothing."""
    return (info.workflow, keyed(info)) in agent.handed


def keyed(info: JobInfo) -> str:
    """The job whose key at the broker ``info``'s takeover is: its own, or for the coordinator's
    virtual jobs (APPL_START, APPL_END), the first start job's they go with (``goes_with``)."""
    return info.goes_with or info.job


def _keyed(agent: Agent, workflow: str, job: str) -> str:
    """:func:`keyed` of ``job`` of ``workflow`` as deployed here (itself if not deployed)."""
    for (w, _), deployment in agent.deployments.items():
        info = deployment.jobs.get(job)
        if w == workflow and info is not None:
            return keyed(info)
    return job


def handed_jobs(agent: Agent) -> set[tuple[str, str]]:
    """``(workflow, job)`` of every job handed over from here, the coordinator's virtual jobs
    that went with one included: none of their statuses and alerts may leave this agent."""
    jobs = set(agent.handed)
    for (workflow, _), deployment in agent.deployments.items():
        for info in deployment.jobs.values():
            if info.goes_with is not None and (workflow, info.goes_with) in agent.handed:
                jobs.add((workflow, info.job))
    return jobs


# the standby ------------------------------------------------------------------------------------


def sync(agent: Agent) -> list[Effect]:
    """The status subscriptions of the passive copies deployed here, in line with the catalogue
    (not APPL_START's: every agent follows those already, ``agents.coordinator``), and those of
    the alerts of their deadlines: an alert the primary published is not published again here
    once the standby took the job over."""
    wanted: dict[str, Registration] = {}
    for (workflow, _), deployment in agent.deployments.items():
        for info in deployment.jobs.values():
            if info.primary is None:
                continue
            if info.job != APPL_START:
                wanted[f"{KEY}{workflow} {info.job}"] = Registration(
                    "SUBSCRIBE", filter=_followed(workflow, info.job)
                )
            if info.deadline is not None:
                scope: dict[str, Value | Var] = {"applname": workflow, "jobname": info.job}
                wanted[f"{KEY}{workflow} {info.job} deadline"] = Registration(
                    "SUBSCRIBE", filter=deadline_filter(scope)
                )
    return reconcile(agent, KEY, wanted)


def _followed(workflow: str, job: str) -> Filter:
    """The statuses of ``job``: the primary's final one of each generation, or a standby's."""
    return filter_of(JOBSTATUS, {"applname": workflow, "jobname": job})


def hold(
    agent: Agent, info: JobInfo, gid: str, publications: tuple[Publication, ...], now: float
) -> list[Effect]:
    """A passive copy fired: kept until the primary's status of the generation comes, or the
    job is taken over here."""
    generation = agent.generations[info.workflow, gid]
    generation.jobs[info.job] = HELD
    agent.standing_by[info.workflow, gid, info.job] = (info.version, publications, now)
    return []


def delivered(agent: Agent, publications: tuple[Publication, ...], now: float) -> list[Effect]:
    """Statuses of a job this agent is a standby of (:data:`KEY`)."""
    effects: list[Effect] = []
    for publication in publications:
        if publication.cls == ALERT:
            _alerted(agent, publication)
            continue
        status = parse_job_status(publication)
        if status is None:
            continue
        infos = [
            info
            for (workflow, _), d in agent.deployments.items()
            if workflow == status.workflow and (info := d.jobs.get(status.job)) is not None
        ]
        if not infos or infos[0].primary is None:
            continue
        signers = {status.job: " ".join((infos[0].primary, *infos[0].standby))}
        unsigned = refusals.unsigned(agent, (publication,), signers, now)
        if unsigned is not None:
            refusals.ignore(agent, "status", f"{status.workflow} {status.job}", unsigned.reason, now)
            continue
        effects += followed(
            agent, status.workflow, status.gid, status.job, str(publication.get("version")), now
        )
    return effects


def _alerted(agent: Agent, alert: Publication) -> None:
    """A deadline's alert of a job this agent is a standby of: the generation knows it was
    alerted (``missed``), so that once the job is taken over here no second alert goes out."""
    workflow, job, gid = (str(alert.get(name)) for name in ("applname", "jobname", "GID"))
    infos = [
        info
        for (w, _), d in agent.deployments.items()
        if w == workflow and (info := d.jobs.get(job)) is not None and info.primary is not None
    ]
    if not infos or alert.get("agentname") not in (infos[0].primary, *infos[0].standby):
        return  # (not the job's agent's, or a standby's: an alert nobody here would have made)
    generation = agent.generations.get((workflow, gid))
    if generation is not None and job not in generation.missed:
        generation.missed.append(job)


def followed(agent: Agent, workflow: str, gid: str, job: str, version: str, now: float) -> list[Effect]:
    """The final status of ``job`` in ``gid`` came: its held firing is forgotten; its generation
    knows the job is done (a firing delivered later is a duplicate). APPL_END's ends the
    generation here, and with it any firing still held of it (a Trigger the coordinator skipped,
    or that expired while it waited: no APPL_START came for it)."""
    if (workflow, _keyed(agent, workflow, job)) in agent.took_over:
        return []  # ours (it comes back to us), or the primary's from before the grant: decided
    agent.standing_by.pop((workflow, gid, job), None)
    if (workflow, gid) in agent.ended:
        return []
    if job == APPL_END:
        return forgetting.forget(agent, workflow, gid, version, now)
    generation = agent.generations.setdefault((workflow, gid), GenerationState(version, since=now))
    if generation.version is None:
        generation.version = version
    generation.jobs[job] = "done"
    return publishing.over_here(agent, workflow, gid, now)


def wanted(agent: Agent, now: float) -> dict[str, tuple[str, float]]:
    """The jobs to ask the broker for, by key: (their primary, their takeover): those with a
    firing held longer than their takeover (a primary that runs a job that long is asked about
    needlessly: the broker refuses while it is connected)."""
    asked: dict[str, tuple[str, float]] = {}
    for (workflow, gid, job), (version, _, since) in agent.standing_by.items():
        if (workflow, gid) not in agent.generations:
            continue  # forgotten (--keep-days): nothing of it is run any more
        deployment = agent.deployments.get((workflow, version))
        info = None if deployment is None else deployment.jobs.get(job)
        if info is None or info.primary is None or (workflow, keyed(info)) in agent.took_over:
            continue
        if now >= since + info.takeover:
            asked[key(workflow, keyed(info))] = (info.primary, info.takeover)
    return asked


def taken(agent: Agent, event: TakenOver, now: float) -> list[Effect]:
    """The broker granted ``event.key``: the job is this agent's now; its held firings run, in
    the order they were held. With it the coordinator's virtual jobs, if they go with it: held
    Triggers start their generations (as the primary would have: expired ones end EXPIRED, the
    workflow's limit on generations at once as this agent counts the running ones), held ends
    of generations publish their APPL_END."""
    from agents import firing  # (firing imports this module: a cycle)

    workflow, job = parse_key(event.key)
    if (workflow, job) in agent.took_over:
        return []
    agent.took_over[workflow, job] = (event.primary, event.at)
    held = [
        (k, v)
        for k, v in agent.standing_by.items()
        if k[0] == workflow and _keyed(agent, workflow, k[2]) == job
    ]
    log.warning(
        "took %s %s over from %s at %s: %d held runs of it start here",
        workflow,
        job,
        event.primary,
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(event.at)),
        len(held),
    )
    effects: list[Effect] = []
    for (_, gid, name), (version, publications, _) in held:
        if agent.standing_by.pop((workflow, gid, name), None) is None:
            continue  # (forgotten meanwhile: its generation ended as one before it fired)
        deployment = agent.deployments.get((workflow, version))
        info = None if deployment is None else deployment.jobs.get(name)
        generation = agent.generations.get((workflow, gid))
        if info is None or generation is None or generation.jobs.get(name) != HELD:
            continue
        del generation.jobs[name]  # fired again, as this agent's own job now
        effects += firing.fire(agent, info, publications, now)
    return effects


# the primary ------------------------------------------------------------------------------------


def declarations(agent: Agent) -> dict[str, tuple[tuple[str, ...], float]]:
    """What this agent's broker is to let its standbys take over: key -> (standbys, takeover),
    the jobs deployed here as its own with standbys, not handed over."""
    declared: dict[str, tuple[tuple[str, ...], float]] = {}
    for deployment in sorted(agent.deployments.values(), key=lambda d: d.order):
        for info in deployment.jobs.values():
            if info.virtual:
                continue  # (the coordinator's jobs go with its first start job's key)
            if info.standby and info.primary is None and (info.workflow, info.job) not in agent.handed:
                declared[key(info.workflow, info.job)] = (info.standby, info.takeover)
    return declared


def noted(agent: Agent) -> str:
    """What this agent's hello says it knows was handed over (``Hello.noted``)."""
    return ",".join(sorted(key(workflow, job) for workflow, job in agent.handed))


def handed_over(agent: Agent, event: HandedOver, now: float) -> list[Effect]:
    """The broker says these jobs were taken over: their unfinished runs here go, with no status
    (the adapter then takes those it published out of its outbox: :func:`forget`), their
    registrations are withdrawn, their firings ignored. A coordinator's first start job takes
    APPL_START and APPL_END with it: the generations waiting their turn here (max-active) are
    dropped unstarted (the standby held their Triggers: it starts them), and no APPL_START or
    APPL_END goes out from here any more."""
    effects: list[Effect] = []
    touched: set[tuple[str, str]] = set()
    for name, who, at in event.grants:
        try:
            workflow, job = parse_key(name)
        except ValueError:
            continue
        if (workflow, job) in agent.handed:
            continue
        agent.handed[workflow, job] = (who, at)
        log.warning(
            "job %s %s handed over to %s at %s: its runs here are dropped, and it runs here no more",
            workflow,
            job,
            who,
            time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)),
        )
        jobs = {j for w, j in handed_jobs(agent) if w == workflow and _keyed(agent, w, j) == job}
        ours = [p for p in agent.pending if p.run.workflow == workflow and p.run.job in jobs]
        for pending in ours:
            agent.pending.remove(pending)
            _done(agent, workflow, pending.run.gid, pending.run.job, touched)
        for held in [r for r in agent.held if r.workflow == workflow and r.job in jobs]:
            agent.held.remove(held)
            _done(agent, workflow, held.gid, held.job, touched)
        for (w, gid, j), run in list(agent.running.items()):
            if w == workflow and j in jobs:
                del agent.running[w, gid, j]
                _done(agent, workflow, gid, j, touched)
                effects.append(Stop(run, kill=True))  # fenced by its lease already, unless it
                # ran in this process's own time: not a second longer
        if APPL_START in jobs:  # waiting their turn here: the standby holds their Triggers
            for (w, gid), generation in agent.generations.items():
                if w == workflow and generation.queued:
                    generation.queued = []
                    _done(agent, workflow, gid, APPL_START, touched)
        for owner_key, owner in list(agent.owners.items()):
            # (not the workflow's APPL_START subscription, version "": its other jobs need it)
            if owner.workflow == workflow and owner.job in jobs and owner.version:
                del agent.owners[owner_key]  # a late delivery for it finds no owner: dropped
                agent.wanted.pop(owner_key, None)
                for deployment in agent.deployments.values():
                    deployment.keys.discard(owner_key)
                effects.append(Withdraw(owner_key))
    for workflow, gid in sorted(touched):
        effects += publishing.over_here(agent, workflow, gid, now)
    return effects


def forget(agent: Agent, dropped: list[tuple[str, str, str]]) -> None:
    """The outcomes of statuses the adapter took out of its outbox (``(workflow, gid, job)``):
    never published, so not answered to ``wfm runs`` either."""
    for workflow, gid, job in dropped:
        record = agent.outcomes.get((workflow, gid))
        if record is not None:
            record["jobs"].pop(job, None)


def _done(agent: Agent, workflow: str, gid: str, job: str, touched: set[tuple[str, str]]) -> None:
    """The job is over here in ``gid`` (its standby runs it): the generation may end here."""
    generation = agent.generations.get((workflow, gid))
    if generation is not None:
        generation.jobs[job] = "done"
        touched.add((workflow, gid))


def redeployed(agent: Agent, workflow: str) -> None:
    """A new version of ``workflow`` came: who runs its jobs is what it says again."""
    for pair in [p for p in agent.handed if p[0] == workflow]:
        del agent.handed[pair]
    for pair in [p for p in agent.took_over if p[0] == workflow]:
        del agent.took_over[pair]


# snapshot ---------------------------------------------------------------------------------------


def snapshot(agent: Agent) -> dict[str, Any]:
    """``{"standby": state}``, or {} for an agent that never held, took or handed a job over."""
    if not (agent.standing_by or agent.took_over or agent.handed):
        return {}
    return {
        "standby": {
            "held": [
                [w, g, j, version, [[p.cls, dict(p.fields)] for p in publications], since]
                for (w, g, j), (version, publications, since) in agent.standing_by.items()
            ],
            "took": [[w, j, primary, at] for (w, j), (primary, at) in agent.took_over.items()],
            "handed": [[w, j, who, at] for (w, j), (who, at) in agent.handed.items()],
        }
    }


def restore(agent: Agent, saved: dict[str, Any] | None) -> None:
    if saved is None:
        return
    for w, g, j, version, publications, since in saved["held"]:
        firing_ = tuple(Publication(cls, fields) for cls, fields in publications)
        agent.standing_by[w, g, j] = (version, firing_, since)
    agent.took_over = {(w, j): (primary, at) for w, j, primary, at in saved["took"]}
    agent.handed = {(w, j): (who, at) for w, j, who, at in saved["handed"]}
