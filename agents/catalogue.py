"""The deployment catalogue: which versions of which workflows are deployed here, their jobs, and
the registrations (advertisements and subscriptions) they want at the broker.

Registrations are kept as a wanted set (:attr:`Agent.wanted <agents.state.Agent.wanted>`, key ->
registration) rather than only emitted once, so the adapter can re-issue all of them after a
restart or a reconnection. A key is the name the adapter registers under (hashed into the broker's
ref, journaled with each delivery: the same in every run of the agent); what it is for is its
:class:`Owner`, kept beside it, so that nothing reads a key back apart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from agents import condition_keys, pools, standby
from agents.commands import DefineJob, Deploy, DeploymentCommand, Undeploy, WantRegistration
from agents.envelope import Control, JobInfo, Registration, registrations
from agents.events import Effect, Register, Withdraw
from workflow_messages import APPL_END, APPL_START, digest, start_subscription
from workflow_messages.params import Param
from workflow_messages.pools import PoolDeclaration

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["Deployment", "Owner", "apply", "collect", "current", "retiring"]

log = logging.getLogger(__name__)

Applied = tuple[str, list[Effect]]  # the acknowledgement's result, and the effects


class Owner(NamedTuple):
    """What a registration key is for: a job of a version of a workflow, or (``version`` "") the
    workflow's APPL_START subscription, which all its versions share."""

    workflow: str
    version: str
    job: str

    def key(self, command: str, content: str | None = None) -> str:
        """The key of this owner's ``command`` registration: the envelope's ``content`` is part of
        it for the per-job commands (a job may have several), not for a DEPLOY's (one each)."""
        if not self.version:
            return f"{self.workflow} starts"
        return " ".join(
            (self.workflow, self.version, command, self.job, *([] if content is None else [content]))
        )


@dataclass
class Deployment:
    """One version of a workflow on this agent: its jobs and the keys of its registrations."""

    workflow: str
    version: str
    order: int  # install order: the latest deployed version of a workflow starts new generations
    jobs: dict[str, JobInfo] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)
    envelopes: dict[str, Control] = field(default_factory=dict)  # what built it, for a snapshot
    ended: bool = False  # a generation of this version has ended: older ones start no more
    # deployed by DEPLOY: no APPL_END comes here, a generation is over once each job here published
    ends_here: bool = False
    parts: int = 0  # the DEPLOY envelopes its jobs come in (0: deployed by the per-job commands)
    parts_in: set[int] = field(default_factory=set)  # the numbers of those that arrived
    split: str = ""  # which jobs went in which part (``DeployPart.split``)
    signers: dict[str, str] = field(default_factory=dict)  # job -> the agent whose statuses it signs
    # the run parameters its DEPLOY declares: a firing's Trigger is checked against them, and
    # their defaults filled in (none for one deployed by the per-job commands)
    params: tuple[Param, ...] = ()
    pools: tuple[PoolDeclaration, ...] = ()  # the pools its DEPLOY declares (:mod:`agents.pools`)

    def add(self, info: JobInfo) -> None:
        self.jobs[info.job] = info
        self.signers.update(info.agents)

    @property
    def complete(self) -> bool:
        """Whether every part arrived: only then are its jobs all known, so that a generation may
        start on it, its jobs fire and a generation be over here once each of them published."""
        return len(self.parts_in) >= self.parts


def apply(agent: Agent, command: DeploymentCommand) -> Applied:
    """Change the catalogue as ``command`` says: the acknowledgement's result, and the effects.
    Raises ``ValueError`` (ERROR) before it changes anything."""
    result, effects = _APPLY[type(command)](agent, command)
    if not isinstance(command, Undeploy):
        agent.retired.discard((command.control.workflow, command.control.version))  # deployed here again
    return result, effects + pools.sync(agent) + standby.sync(agent)


def _define_job(agent: Agent, command: DefineJob) -> Applied:
    control, info = command.control, command.info
    deployment = _deployment_of(agent, control.workflow, control.version)
    if deployment.jobs.get(control.job) == info:
        return "UNCHANGED", []
    deployment.add(info)
    deployment.envelopes[f"JOBINFO {control.job}"] = control
    return "OK", _starts(agent, control.workflow)


def _want_registration(agent: Agent, command: WantRegistration) -> Applied:
    control = command.control
    owner = Owner(control.workflow, control.version, control.job)
    key = owner.key(control.command, control.content)
    if key in agent.wanted:
        return "UNCHANGED", []
    deployment = _deployment_of(agent, control.workflow, control.version)
    deployment.keys.add(key)
    deployment.envelopes[key] = control
    agent.wanted[key] = command.registration
    agent.owners[key] = owner
    return "OK", [Register(key, command.registration), *_starts(agent, control.workflow)]


def _undeploy(agent: Agent, command: Undeploy) -> Applied:
    """UNDEPLOY: with no content, remove every version of the workflow now. With ``{"retire":
    [V, ...]}`` (sent by a deployment of ``control.version`` that left this agent out, naming
    the versions this agent said it had), retire those and every version installed before
    them: start no generation on them and remove each once no generation here runs on it.
    The generations in flight finish, and an old coordinator left out of a plan does not go on
    starting generations of its old version beside the new one's. A version installed after
    the newest named one is not touched: that retirement is older than it."""
    control = command.control
    workflow = control.workflow
    versions = [v for (w, v) in agent.deployments if w == workflow]
    if command.order is None:
        agent.retired -= {(workflow, v) for v in versions}
        effects = [e for v in versions for e in _remove(agent, workflow, v)]
        return ("OK" if versions else "UNCHANGED"), effects
    if command.order is True:
        return _withdraw(agent, workflow, control.version)
    if control.version in versions:
        raise ValueError(f"{workflow} version {control.version} is deployed here: not retired by it")
    orders = [agent.deployments[workflow, v].order for v in command.order if v in versions]
    newest = max(orders, default=0)  # (orders count from 1)
    older = {(workflow, v) for v in versions if agent.deployments[workflow, v].order <= newest}
    newly = older - agent.retired
    if not newly:
        return "UNCHANGED", []
    agent.retired |= newly
    log.info(
        "retired %s version %s: left out of version %s",
        workflow,
        ", ".join(sorted(v for _, v in newly)),
        control.version,
    )
    return "OK", collect(agent, workflow)


def _withdraw(agent: Agent, workflow: str, version: str) -> Applied:
    """UNDEPLOY ``{"withdraw": true}``: a deployment of ``version`` that did not reach every agent
    takes it back from those it reached, so the versions deployed before go on as if it never
    came. Refused once a generation here runs on it: then it did start, and only a new
    deployment (or an UNDEPLOY of every version) may replace it."""
    if (workflow, version) not in agent.deployments:
        return "UNCHANGED", []
    if version in _in_use(agent, workflow):
        raise ValueError(f"{workflow} version {version} runs a generation here: not withdrawn")
    agent.retired.discard((workflow, version))
    log.info("withdrew %s version %s: its deployment did not complete", workflow, version)
    return "OK", _remove(agent, workflow, version)


def _deploy(agent: Agent, command: Deploy) -> Applied:
    """A DEPLOY envelope: its jobs, the advertisements of their statuses, then their conditions
    (in that order on the link, so a condition finds this agent's own statuses advertised).
    Everything is checked and built before anything changes: an envelope acknowledged ERROR
    leaves no trace (a half-installed one would be in the next snapshot, and fail again there)."""
    control, deploy = command.control, command.part
    pools.conflicts(agent, control.workflow, deploy.pools)
    built = [(info, registrations(info, deploy.coordinator)) for info in deploy.jobs]
    if (control.workflow, control.version) not in agent.deployments:
        standby.redeployed(agent, control.workflow)  # who runs which job: as it says now
    deployment = _deployment_of(agent, control.workflow, control.version)
    deployment.ends_here = True
    deployment.envelopes[f"DEPLOY {digest(control.content)}"] = control
    split = (deploy.parts, deploy.split)
    if (deployment.parts, deployment.split) != split and not (deployment.parts and deployment.complete):
        # split otherwise (a longer cwd) while incomplete: count the parts of this split
        deployment.parts, deployment.split, deployment.parts_in = *split, set()
    deployment.parts_in.add(deploy.part)
    deployment.params = deploy.params  # part of the version: every part says the same
    deployment.pools = deploy.pools  # likewise
    if deploy.coordinator:
        deployment.signers.update({APPL_START: deploy.coordinator, APPL_END: deploy.coordinator})
    changed = False
    registers: list[Register] = []
    for info, wanted in built:
        changed |= deployment.jobs.get(info.job) != info
        deployment.add(info)
        owner = Owner(info.workflow, info.version, info.job)
        keyed = [(owner.key(r.command), r) for r in wanted] + condition_keys.registrations(owner, info)
        for key, registration in keyed:
            if key not in agent.wanted:
                deployment.keys.add(key)
                agent.wanted[key] = registration
                agent.owners[key] = owner
                registers.append(Register(key, registration))
    registers.sort(key=lambda register: register.registration.command != "ADVERTISE")
    if not changed and not registers:
        return "UNCHANGED", []
    return "OK", [*registers, *_starts(agent, control.workflow)]


_APPLY: dict[type, Callable[[Agent, Any], Applied]] = {
    DefineJob: _define_job,
    WantRegistration: _want_registration,
    Deploy: _deploy,
    Undeploy: _undeploy,
}


def _deployment_of(agent: Agent, workflow: str, version: str) -> Deployment:
    """The deployment of (workflow, version), created when its first envelope arrives."""
    if (workflow, version) not in agent.deployments:
        agent.installs += 1
        agent.deployments[workflow, version] = Deployment(workflow, version, agent.installs)
    return agent.deployments[workflow, version]


def _remove(agent: Agent, workflow: str, version: str) -> list[Effect]:
    deployment = agent.deployments.pop((workflow, version))
    for key in deployment.keys:
        agent.wanted.pop(key, None)
        agent.owners.pop(key, None)
    condition_keys.drop_unsubscribed(agent)
    log.info("removed %s version %s", workflow, version)
    return (
        [Withdraw(key) for key in sorted(deployment.keys)]
        + _starts(agent, workflow)
        + pools.sync(agent)
        + standby.sync(agent)
    )


def _starts(agent: Agent, workflow: str) -> list[Effect]:
    """Keep the workflow's APPL_START subscription while any version of it is deployed."""
    owner = Owner(workflow, "", APPL_START)
    key = owner.key("SUBSCRIBE")
    deployed = any(w == workflow for w, _ in agent.deployments)
    if deployed and key not in agent.wanted:
        agent.wanted[key] = Registration("SUBSCRIBE", filter=start_subscription(workflow))
        agent.owners[key] = owner
        return [Register(key, agent.wanted[key])]
    if not deployed and key in agent.wanted:
        del agent.wanted[key], agent.owners[key]
        return [Withdraw(key)]
    return []


def current(agent: Agent, workflow: str) -> str | None:
    """The version new generations of ``workflow`` start on: the last one deployed here, all
    of its parts in. A DEPLOY's version is current even without APPL_START here: the agent was
    the coordinator of an older one, and the new version's coordinator starts generations now
    (both would, each on its version). Of versions deployed by the per-job commands, only one
    whose APPL_START is installed: the older version starts generations until then. Never a
    retired version; None when no other is deployed."""
    versions = [
        d
        for (w, v), d in agent.deployments.items()
        if w == workflow and d.complete and (w, v) not in agent.retired
    ]
    starting = [d for d in versions if d.ends_here or APPL_START in d.jobs] or versions
    return max(starting, key=lambda d: d.order).version if starting else None


def collect(agent: Agent, workflow: str) -> list[Effect]:
    """Drop the older versions of ``workflow`` that no unfinished generation runs on, and the
    retired ones (complete or not) once none runs on them.

    Called at APPL_END once a generation of the current version has ended: the coordinator
    published its APPL_START after those of every older generation, so by then this agent has
    seen (through its APPL_START subscription) every generation still running on an older one."""
    latest = current(agent, workflow)
    used = _in_use(agent, workflow)
    old = [
        v
        for (w, v), d in agent.deployments.items()
        if w == workflow and v != latest and v not in used and (d.complete or (w, v) in agent.retired)
    ]  # (not a newer one whose parts are still coming, unless retired)
    agent.retired -= {(workflow, v) for v in old}
    return [e for v in old for e in _remove(agent, workflow, v)] + _starts(agent, workflow)


def _in_use(agent: Agent, workflow: str) -> set[str | None]:
    """The versions of ``workflow`` a generation here runs on."""
    return {g.version for (w, _), g in agent.generations.items() if w == workflow}


def retiring(agent: Agent, workflow: str) -> bool:
    return any(w == workflow for w, _ in agent.retired)
