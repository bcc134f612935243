"""The command of an AGENT_CTL envelope, read once, at the edge, into a typed record.

:func:`read_envelope` checks the envelope (:func:`agents.envelope.parse_control`), then its
content as its command says; the agent looks the record's type up in a table of handlers and acts
on it without reading the envelope again. Every record keeps the :class:`Control` it was read
from: a deployment is snapshot as the envelopes that built it (:mod:`agents.snapshot`), and
:func:`read_command` reads those again on a restore. Every check raises ``ValueError`` before the
agent changes anything, which acknowledges the envelope ERROR.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from agents.envelope import (
    Control,
    DeployPart,
    JobInfo,
    Registration,
    parse_control,
    parse_deploy,
    parse_jobinfo,
    parse_registration,
)
from broker.language import Publication
from workflow_messages import check_gid, check_name, undeploy_order
from workflow_messages.approvals import MAX_COMMENT
from workflow_messages.conditions import read_facts
from workflow_messages.operations import APPROVE, CANCEL, HOLD, RELEASE, RERUN, decode_content

__all__ = [
    "Approve",
    "Cancel",
    "Command",
    "DefineJob",
    "Deploy",
    "DeploymentCommand",
    "Facts",
    "Hold",
    "Rerun",
    "Undeploy",
    "WantRegistration",
    "read_command",
    "read_envelope",
]


@dataclass(frozen=True, slots=True)
class DefineJob:
    """JOBINFO: one job's definition (the per-job commands)."""

    control: Control
    info: JobInfo


@dataclass(frozen=True, slots=True)
class WantRegistration:
    """ADVERTISE, SUBSCRIBE or COMPOSITESUBSCRIBE: keep ``registration`` at the broker."""

    control: Control
    registration: Registration


@dataclass(frozen=True, slots=True)
class Deploy:
    """DEPLOY: one part of this agent's jobs of a version."""

    control: Control
    part: DeployPart


@dataclass(frozen=True, slots=True)
class Undeploy:
    """UNDEPLOY: remove every version now (``order`` None), retire the named versions and those
    installed before them (a tuple of versions), or withdraw the envelope's version (True)."""

    control: Control
    order: tuple[str, ...] | Literal[True] | None


@dataclass(frozen=True, slots=True)
class Cancel:
    """CANCEL generation ``gid``."""

    control: Control
    gid: str


@dataclass(frozen=True, slots=True)
class Rerun:
    """RERUN ``gid`` as generation ``new``, reusing the outcomes of the ``reuse`` jobs."""

    control: Control
    gid: str
    new: str
    reuse: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Facts:
    """FACTS: publications the history kept for conditions' subscriptions (subscription text,
    publication), sent by ``wfm deploy`` once the subscriptions are made."""

    control: Control
    facts: tuple[tuple[str, Publication], ...]


@dataclass(frozen=True, slots=True)
class Hold:
    """HOLD (or, ``release``, RELEASE) job ``job`` of the envelope's workflow in generation
    ``gid``; either may be ``*`` (every job, every generation, new ones included)."""

    control: Control
    job: str
    gid: str
    release: bool


@dataclass(frozen=True, slots=True)
class Approve:
    """APPROVE (or, not ``approved``, reject) the approval step ``job`` of generation ``gid``;
    ``signer`` is who signed the envelope, as the agent's trust names it."""

    control: Control
    gid: str
    job: str
    approved: bool
    comment: str
    signer: str = ""


DeploymentCommand = DefineJob | WantRegistration | Deploy | Undeploy  # what changes the catalogue
Command = DeploymentCommand | Cancel | Rerun | Facts | Hold | Approve


def read_envelope(publication: Publication, agent: str, signer: str = "") -> Command:
    """The command of an AGENT_CTL envelope addressed to ``agent``, its content checked;
    ``signer`` (who signed it) is kept in an APPROVE's record, whose job's status names it."""
    command = read_command(parse_control(publication, agent))
    return replace(command, signer=signer) if isinstance(command, Approve) else command


def read_command(control: Control) -> Command:
    """The command ``control`` carries, its content checked as its command says."""
    command = control.command
    if command == "JOBINFO":
        return DefineJob(control, parse_jobinfo(control))
    if command == "DEPLOY":
        return Deploy(control, parse_deploy(control))
    if command == "UNDEPLOY":
        return Undeploy(control, undeploy_order(control.content))
    if command in (CANCEL, RERUN):
        return _operation(control)
    if command == "FACTS":
        return Facts(control, tuple(read_facts(control.content)))
    if command in (HOLD, RELEASE):
        return _hold(control)
    if command == APPROVE:
        return _approve(control)
    return WantRegistration(control, parse_registration(control))


def _operation(control: Control) -> Cancel | Rerun:
    data = decode_content(control.content)
    gid = data.get("gid")
    if not isinstance(gid, str) or not gid:
        raise ValueError(f"{control.command} needs a gid")
    check_gid(gid)
    if control.command == CANCEL:
        return Cancel(control, gid)
    new, reuse = data.get("new"), data.get("reuse")
    if not isinstance(new, str) or not new or new == gid:
        raise ValueError("RERUN needs a new gid, other than the gid it reruns")
    check_gid(new)
    if not isinstance(reuse, list) or not all(isinstance(job, str) for job in reuse):
        raise ValueError("RERUN needs reuse, a list of job names")
    return Rerun(control, gid, new, tuple(reuse))


def _hold(control: Control) -> Hold:
    data = decode_content(control.content)
    job, gid = data.get("job", "*"), data.get("gid", "*")
    if not isinstance(job, str) or not isinstance(gid, str):
        raise ValueError(f"{control.command} needs a string job and gid (* for every one)")
    if job != "*":
        check_name(job, f"{control.command}: job name")
    if gid != "*":
        check_gid(gid)
    return Hold(control, job, gid, control.command == RELEASE)


def _approve(control: Control) -> Approve:
    data = decode_content(control.content)
    gid, job, verdict, comment = (
        data.get("gid"),
        data.get("job"),
        data.get("verdict"),
        data.get("comment", ""),
    )
    if not isinstance(gid, str) or not gid or not isinstance(job, str):
        raise ValueError("APPROVE needs a gid and a job")
    check_gid(gid)
    check_name(job, "APPROVE: job name")
    if verdict not in ("approve", "reject"):
        raise ValueError(f"APPROVE verdict {verdict!r}: it must be approve or reject")
    if not isinstance(comment, str) or len(comment) > MAX_COMMENT:
        raise ValueError(f"APPROVE comment must be a string of at most {MAX_COMMENT} characters")
    return Approve(control, gid, job, verdict == "approve", comment)
