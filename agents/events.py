"""What goes into the agent's state machine (events) and what comes out (effects).

The adapter (:mod:`agents.service`) turns deliveries, process ends and time into events, feeds
them to :meth:`agents.state.Agent.handle` and carries out the effects; the journal
(:mod:`agents.journal`) keeps the events, so that feeding them again rebuilds the same state.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.envelope import Registration
from broker.language import Publication

__all__ = [
    "Delivered",
    "Effect",
    "Emit",
    "Event",
    "Finished",
    "HandedOver",
    "Incoming",
    "Lost",
    "Register",
    "Result",
    "Run",
    "Start",
    "Stop",
    "TakenOver",
    "TimePassed",
    "Withdraw",
]


# events ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Incoming:
    """An AGENT_CTL publication addressed to this agent."""

    publication: Publication


@dataclass(frozen=True, slots=True)
class Delivered:
    """Publications delivered for the registration ``key`` (several for a composite firing): a
    :class:`broker.client.Delivery` named by the agent's own key, which outlives reconnections,
    instead of the broker's subscription id, which does not."""

    key: str
    publications: tuple[Publication, ...]


@dataclass(frozen=True, slots=True)
class Run:
    """One attempt at running a job of a generation."""

    workflow: str
    version: str
    gid: str
    job: str
    attempt: int
    command: str
    cwd: str | None
    date: str  # YYYY-MM-DD
    timeout: float | None
    upstream: str = ""  # the failed jobs its predecessors' statuses named, for its own status
    # the run parameters of its generation, canonical JSON (``workflow_messages.encode_params``):
    # text, so a run read back from the journal equals the one that started
    params: str = ""

    @property
    def label(self) -> str:
        """How logs name the run."""
        return f"{self.workflow} {self.gid} {self.job} attempt {self.attempt}"


@dataclass(frozen=True, slots=True)
class Result:
    """How a run ended: ``ok`` is exit status 0; ``detail`` says exit status or timeout, and duration."""

    ok: bool
    detail: str
    started: float
    duration: float


@dataclass(frozen=True, slots=True)
class Finished:
    run: Run
    result: Result


@dataclass(frozen=True, slots=True)
class Lost:
    """The run's supervisor died after starting its command and before recording how it ended: the
    command may have run, or be running still, so it is reported FAILURE (:data:`agents.run_queue.LOST`)
    and never retried, whatever its retries: running a job twice is worse than a failure someone
    can rerun."""

    run: Run


@dataclass(frozen=True, slots=True)
class TimePassed:
    """Time passed: retries whose backoff is over start (the router's ``Tick`` is another thing:
    a message of the broker's adapter)."""


@dataclass(frozen=True, slots=True)
class TakenOver:
    """This agent's broker granted it the job of standby key ``key`` (``WORKFLOW JOB``), whose
    agent ``primary`` was gone for the job's takeover (:mod:`agents.standby`); ``at``: the time
    the adapter had the grant."""

    key: str
    primary: str
    at: float


@dataclass(frozen=True, slots=True)
class HandedOver:
    """This agent's broker refused its hello: jobs of its were taken over by standbys. ``grants``:
    (key, who, when: the broker's clock) each."""

    grants: tuple[tuple[str, str, float], ...]


Event = Incoming | Delivered | Finished | Lost | TimePassed | TakenOver | HandedOver


# effects --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Register:
    """Advertise or (composite) subscribe ``registration`` under ``key``."""

    key: str
    registration: Registration


@dataclass(frozen=True, slots=True)
class Withdraw:
    """Undo the registration made under ``key``."""

    key: str


@dataclass(frozen=True, slots=True)
class Emit:
    """Publish ``publication`` (the broker's ``Publish`` is the message that carries one)."""

    publication: Publication


@dataclass(frozen=True, slots=True)
class Start:
    run: Run


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop ``run``, its generation was cancelled: a :class:`Finished` (or :class:`Lost`) follows.
    ``kill``: at once (SIGKILL), not after a grace: its pool slot may be given away (:mod:`agents.pools`)."""

    run: Run
    kill: bool = False


Effect = Register | Withdraw | Emit | Start | Stop
