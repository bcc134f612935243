"""POOL: the messages by which jobs of a pool (``<pool name slots>``, ``pool=`` on jobs) take and
give back its slots, and the declaration of a pool its agents get in their DEPLOY.

A pool's slots are counted by one agent, its *keeper*; every message goes between a holder (the
agent of a job in the pool) and the keeper, addressed by ``to`` and signed by its sender, whose
name is ``agentname`` (so an agent checks it as it checks a status: :meth:`agents.trust.Trust.admit_status`).

========  ==============  ====================================================================
op        from -> to      meaning
========  ==============  ====================================================================
acquire   holder->keeper  the job's run is due: give it a slot
renew     holder->keeper  the job holds its slot still (a heartbeat, while it is granted)
release   holder->keeper  a slot granted that the holder does not want (its run is over)
grant     keeper->holder  the slot is the job's; ``asked`` echoes the acquire's or renew's
renewed   keeper->holder  the hold is renewed; ``asked`` echoes the renew's
revoked   keeper->holder  the keeper holds no slot for the job (it let the lease lapse)
========  ==============  ====================================================================

``asked`` is the holder's clock when it sent the acquire or renew: echoed back, it tells the holder
from when its lease runs, measured on its own clock (docs/workflows.md, Pools). A hold is named by
pool, workflow, generation and job; its final JOBSTATUS gives the slot back. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from broker.language import Filter, Publication, Value
from workflow_messages._build import filter_of
from workflow_messages.names import JOBSTATUS, check_name

__all__ = [
    "DEFAULT_LEASE",
    "HOLDER_OPS",
    "KEEPER_OPS",
    "LEASE_RULE",
    "MAX_LEASE",
    "MAX_SLOTS",
    "MIN_LEASE",
    "POOL",
    "SLOTS_RULE",
    "PoolDeclaration",
    "PoolMessage",
    "is_lease",
    "parse_pool_message",
    "pool_advertisement",
    "pool_message",
    "pool_subscription",
    "read_declarations",
    "release_subscription",
]

POOL = "POOL"
HOLDER_OPS = ("acquire", "renew", "release")  # what holders send to keepers
KEEPER_OPS = ("grant", "renewed", "revoked")  # what keepers send to holders
DEFAULT_LEASE = 60.0  # seconds a keeper keeps a slot whose holder has gone silent
MIN_LEASE, MAX_LEASE = 1.0, 86_400.0
LEASE_RULE = f"lease must be a number of seconds from {MIN_LEASE:g} to {MAX_LEASE:g}"
MAX_SLOTS = 1_000_000
SLOTS_RULE = f"slots must be an integer from 1 to {MAX_SLOTS}"
_STRINGS = ("op", "to", "pool", "applname", "version", "jobname", "GID", "signer", "signature")
_NUMBERS = ("asked", "priority", "sequence")


@dataclass(frozen=True, slots=True)
class PoolDeclaration:
    """A pool as the agents of a workflow get it: ``jobs`` maps each job in it to its agent."""

    name: str
    slots: int
    keeper: str
    lease: float = DEFAULT_LEASE
    jobs: dict[str, str] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """JSON-ready, for a DEPLOY (and the workflow's version)."""
        return {
            "pool": self.name,
            "slots": self.slots,
            "keeper": self.keeper,
            "lease": float(self.lease),
            "jobs": dict(sorted(self.jobs.items())),
        }

    def same_limit(self, other: PoolDeclaration) -> bool:
        """Whether ``other`` (another workflow's declaration of the pool) counts the same slots."""
        return (self.slots, self.keeper, self.lease) == (other.slots, other.keeper, other.lease)


def read_declarations(data: object) -> tuple[PoolDeclaration, ...]:
    """The ``pools`` of a DEPLOY (absent: none); ValueError (one line) for anything else."""
    if data is None:
        return ()
    if not isinstance(data, list) or not all(isinstance(entry, dict) for entry in data):
        raise ValueError("DEPLOY pools must be a list of pool objects")
    declared: list[PoolDeclaration] = []
    for entry in data:
        name = check_name(entry.get("pool"), "DEPLOY: pool name")
        slots, keeper, lease, jobs = (entry.get(key) for key in ("slots", "keeper", "lease", "jobs"))
        if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= MAX_SLOTS:
            raise ValueError(f"DEPLOY pool {name!r}: {SLOTS_RULE}, not {slots!r}")
        check_name(keeper, f"DEPLOY pool {name!r}: keeper")
        if not is_lease(lease):
            raise ValueError(f"DEPLOY pool {name!r}: {LEASE_RULE}, not {lease!r}")
        if not isinstance(jobs, dict) or not jobs:
            raise ValueError(f"DEPLOY pool {name!r}: jobs must map its jobs to their agents")
        for job, agent in jobs.items():
            check_name(job, f"DEPLOY pool {name!r}: job")
            check_name(agent, f"DEPLOY pool {name!r}: agent")
        if name in (d.name for d in declared):
            raise ValueError(f"DEPLOY declares pool {name!r} twice")
        declared.append(PoolDeclaration(name, slots, str(keeper), float(lease), dict(jobs)))  # type: ignore[arg-type]
    return tuple(declared)


def is_lease(lease: object) -> bool:
    return (
        isinstance(lease, int | float)
        and not isinstance(lease, bool)
        and math.isfinite(lease)
        and MIN_LEASE <= lease <= MAX_LEASE
    )


@dataclass(frozen=True, slots=True)
class PoolMessage:
    """A POOL publication read: ``sender`` is its ``agentname``, ``to`` its addressee."""

    op: str
    sender: str
    to: str
    pool: str
    workflow: str
    version: str
    job: str
    gid: str
    asked: float
    priority: int = 4

    @property
    def hold(self) -> tuple[str, str, str, str]:
        """The hold it is about: pool, workflow, generation, job."""
        return (self.pool, self.workflow, self.gid, self.job)


def pool_message(
    op: str,
    sender: str,
    to: str,
    hold: tuple[str, str, str, str],
    version: str,
    asked: float,
    priority: int = 4,
) -> Publication:
    """A POOL publication from ``sender`` to ``to`` about ``hold`` (pool, workflow, gid, job),
    fitting :func:`pool_advertisement`."""
    pool, workflow, gid, job = hold
    values: dict[str, Value] = {
        "op": op,
        "agentname": sender,
        "to": to,
        "pool": pool,
        "applname": workflow,
        "version": version,
        "jobname": job,
        "GID": gid,
        "asked": float(asked),
        "priority": priority,
    }
    return Publication(POOL, values)


def parse_pool_message(publication: Publication) -> PoolMessage:
    """A POOL publication checked field by field; ValueError (one line) naming what is wrong."""
    if publication.cls != POOL:
        raise ValueError(f"not a POOL message: class {publication.cls}")
    text: dict[str, str] = {}
    for name in ("op", "agentname", "to", "pool", "applname", "version", "jobname", "GID"):
        value = publication.get(name)
        if not isinstance(value, str) or not value:
            raise ValueError(f"a POOL message needs a non-empty string {name}")
        text[name] = value
    if text["op"] not in HOLDER_OPS + KEEPER_OPS:
        raise ValueError(f"POOL op {text['op']!r} is not one of {', '.join(HOLDER_OPS + KEEPER_OPS)}")
    asked, priority = publication.get("asked"), publication.get("priority", 4)
    if isinstance(asked, bool) or not isinstance(asked, int | float) or not math.isfinite(asked):
        raise ValueError(f"POOL asked must be a finite number, not {asked!r}")
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        raise ValueError(f"POOL priority must be an integer from 0 to 9, not {priority!r}")
    return PoolMessage(
        text["op"],
        text["agentname"],
        text["to"],
        text["pool"],
        text["applname"],
        text["version"],
        text["jobname"],
        text["GID"],
        float(asked),
        priority,
    )


def pool_advertisement(agent: str) -> Filter:
    """What ``agent`` advertises to send POOL messages (signed, with TLS)."""
    return filter_of(POOL, {"agentname": agent}, present=_STRINGS, numbers=_NUMBERS)


def pool_subscription(agent: str) -> Filter:
    """Every POOL message addressed to ``agent``: requests if it keeps a pool, answers if it holds."""
    return filter_of(POOL, {"to": agent})


def release_subscription(workflow: str, job: str) -> Filter:
    """The statuses of a job in a pool this agent keeps: its final status gives its slot back."""
    return filter_of(JOBSTATUS, {"applname": workflow, "jobname": job})
