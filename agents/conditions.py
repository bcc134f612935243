"""A job's conditions on other workflows and on events (:mod:`workflow_messages.conditions`), on
its agent: the facts that satisfy them, and the runs held until they do.

Each condition is a plain subscription of the job (:mod:`agents.condition_keys`, made with its DEPLOY,
so it is in place before the deployer asks the history: ``wfm deploy`` then sends what the
historians kept in a FACTS envelope, :func:`remembered`). What it delivers is kept as a *fact*,
per subscription, whether or not a generation waits for it yet: a status published before the
waiting generation was triggered must still satisfy it. When the job's own condition fires and
it would run (``agents.firing``), :func:`queue` runs it if its conditions hold for the
generation's date, else holds it (job state ``held``); each new fact releases the held runs it
completes. An event is used up by the one generation of the job it lets through.

Everything here is decided on events the journal keeps (a delivery, an envelope, a firing), so
a restarted agent replays the same facts, holds and releases: a run released once is queued once,
and from then on it is the run queue's (started once, its status published once).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any

from agents import condition_keys, publishing, refusals, run_queue
from agents.commands import Facts
from agents.envelope import JobInfo
from agents.events import Effect, Result, Run
from agents.generations import NOT_RUN
from agents.run_queue import Pending
from broker.language import Publication, parse_publication
from workflow_messages import NORUN
from workflow_messages.conditions import Condition, Event, satisfies, subscription

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = [
    "HELD",
    "MAX_FACTS",
    "Fact",
    "arrived",
    "facts_command",
    "queue",
    "release_cancelled",
    "remembered",
    "restore",
    "snapshot",
    "waiting_for",
]

log = logging.getLogger(__name__)

HELD = "held"  # the job state of a run whose conditions do not hold yet
MAX_FACTS = 1000  # kept per subscription, the oldest dropped first: a daily status, for years


@dataclass
class Fact:
    """A publication delivered for a condition's subscription; ``used`` names the generations of
    jobs (``W J GID``) an event let through: it lets no other generation of them through."""

    publication: Publication
    used: set[str] = field(default_factory=set)


def arrived(agent: Agent, key: str, publications: tuple[Publication, ...], now: float) -> list[Effect]:
    """A delivery for a condition's subscription: keep it, and release what it completes."""
    registration = agent.wanted[key]
    assert registration.filter is not None
    return remembered(agent, [(str(registration.filter), p) for p in publications], now)


def remembered(agent: Agent, facts: list[tuple[str, Publication]], now: float) -> list[Effect]:
    """Keep each (subscription text, publication) not kept yet, unless it is a status not signed
    by the agent it names (with TLS: anyone may publish, a broker may make one up), and release
    the held runs they complete."""
    for text, publication in facts:
        kept = agent.facts.setdefault(text, [])
        if any(fact.publication == publication for fact in kept):
            continue  # delivered live and by the history, or again after a reconnection
        refusal = refusals.unsigned(agent, (publication,), {}, now)
        if refusal is not None:
            refusals.ignore(agent, "fact", text, refusal.reason, now, refusal.who)
            continue
        kept.append(Fact(publication))
        del kept[:-MAX_FACTS]
    return _release(agent, now)


def facts_command(agent: Agent, command: Facts, now: float) -> tuple[str, str, list[Effect]]:
    """A FACTS envelope: keep what the history kept for the conditions' subscriptions deployed
    here (any other is no condition of this agent's and is left out)."""
    subscribed = {str(agent.wanted[key].filter) for key in agent.wanted if condition_keys.is_condition(key)}
    facts = [(text, publication) for text, publication in command.facts if text in subscribed]
    before = sum(map(len, agent.facts.values()))
    effects = remembered(agent, facts, now)
    added = sum(map(len, agent.facts.values())) - before
    return ("OK" if added else "UNCHANGED"), f"{added} of {len(command.facts)} facts kept", effects


def queue(agent: Agent, info: JobInfo, run: Run, now: float) -> list[Effect]:
    """Queue ``run`` if the job's conditions hold for its date, else hold it."""
    if _take(agent, info, run):
        agent.pending.append(Pending(run))
        return run_queue.pump(agent, now)
    agent.held.append(run)
    publishing.mark(agent, run, HELD)
    log.info(
        "%s %s %s held: waiting for %s", run.workflow, run.gid, run.job, ", ".join(waiting_for(agent, run))
    )
    return []


def waiting_for(agent: Agent, run: Run) -> list[str]:
    """The conditions of ``run``'s job that do not hold for its date (``LEDGER.Close``,
    ``event [class,eq,...]``): what a held run waits for."""
    info = _info(agent, run)
    day = date.fromisoformat(run.date)
    return [str(c) for c in (info.conditions if info else ()) if _fact(agent, c, day, run) is None]


def release_cancelled(agent: Agent, workflow: str, gid: str, now: float) -> list[Effect]:
    """A cancelled generation's held runs end NORUN, as its queued ones do."""
    dropped = [run for run in agent.held if (run.workflow, run.gid) == (workflow, gid)]
    agent.held = [run for run in agent.held if run not in dropped]
    return [
        e
        for run in dropped
        for e in publishing.done(agent, run, NORUN, Result(False, NOT_RUN, now, 0.0), now)
    ]


def _release(agent: Agent, now: float) -> list[Effect]:
    released = [run for run in agent.held if _take(agent, _info(agent, run), run)]
    if not released:
        return []
    agent.held = [run for run in agent.held if run not in released]
    for run in released:
        log.info("%s %s %s released: its conditions hold", run.workflow, run.gid, run.job)
        agent.pending.append(Pending(run))
        publishing.mark(agent, run, "queued")
    return run_queue.pump(agent, now)


def _take(agent: Agent, info: JobInfo | None, run: Run) -> bool:
    """Whether every condition of the job holds for ``run``'s date; if so, the events that made
    them hold are used up by it."""
    if info is None:  # its version was removed meanwhile: it waits for nothing more
        return True
    day = date.fromisoformat(run.date)
    found = [_fact(agent, condition, day, run) for condition in info.conditions]
    if any(fact is None for fact in found):
        return False
    for condition, fact in zip(info.conditions, found, strict=True):
        if isinstance(condition, Event) and fact is not None:
            fact.used.add(f"{run.workflow} {run.job} {run.gid}")
    return True


def _fact(agent: Agent, condition: Condition, day: date, run: Run) -> Fact | None:
    """The oldest fact that satisfies ``condition`` for ``run``'s job and ``day``; an event's
    only if no other generation of the job used it up (a rerun, ``wfm rerun``, may use its
    original's again). None if there is none."""
    generation = agent.generations.get((run.workflow, run.gid))
    own = {run.gid, *([generation.rerun_of] if generation and generation.rerun_of else [])}
    job = f"{run.workflow} {run.job} "
    for fact in agent.facts.get(str(subscription(condition)), ()):
        if not satisfies(condition, fact.publication, day):
            continue
        if isinstance(condition, Event) and any(
            user.startswith(job) and user.removeprefix(job) not in own for user in fact.used
        ):
            continue
        return fact
    return None


def _info(agent: Agent, run: Run) -> JobInfo | None:
    deployment = agent.deployments.get((run.workflow, run.version))
    return deployment.jobs.get(run.job) if deployment else None


def snapshot(agent: Agent) -> dict[str, Any]:
    """The facts and held runs, for the agent's snapshot (left out when there are none, so an
    agent without conditions writes the snapshot it wrote before them)."""
    saved: dict[str, Any] = {}
    if agent.facts:
        saved["facts"] = [
            [text, [[str(fact.publication), sorted(fact.used)] for fact in facts]]
            for text, facts in agent.facts.items()
        ]
    if agent.held:
        saved["held"] = [asdict(run) for run in agent.held]
    return saved


def restore(agent: Agent, saved: dict[str, Any]) -> None:
    """Take :func:`snapshot`'s data (absent from an older agent's snapshot: nothing kept)."""
    agent.facts = {
        text: [Fact(parse_publication(publication), set(used)) for publication, used in facts]
        for text, facts in saved.get("facts", [])
    }
    agent.held = [Run(**run) for run in saved.get("held", [])]
