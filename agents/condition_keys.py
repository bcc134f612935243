"""The subscriptions of a job's conditions on other workflows and on events, and their keys
(:mod:`agents.conditions` keeps what they deliver). Apart from it so that the catalogue, which
registers them with the job's DEPLOY, needs nothing of the run queue."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.envelope import JobInfo, Registration
from workflow_messages.conditions import subscription

if TYPE_CHECKING:
    from agents.catalogue import Owner
    from agents.state import Agent

__all__ = ["drop_unsubscribed", "is_condition", "registrations"]

_COMMAND = "CONDITION"  # in the registration's key: what tells its deliveries apart


def registrations(owner: Owner, info: JobInfo) -> list[tuple[str, Registration]]:
    """The key and subscription of each of the job's conditions, in the order of its definition."""
    return [
        (owner.key(_COMMAND, str(n)), Registration("SUBSCRIBE", filter=subscription(condition)))
        for n, condition in enumerate(info.conditions)
    ]


def is_condition(key: str) -> bool:
    """Whether ``key`` names a condition's subscription (:func:`registrations`)."""
    parts = key.split(" ")
    return len(parts) == 5 and parts[2] == _COMMAND


def drop_unsubscribed(agent: Agent) -> None:
    """Forget the facts (:mod:`agents.conditions`) of subscriptions no deployed job has any
    more: a version removed takes its conditions' memory along, unless another keeps them."""
    subscribed = {str(agent.wanted[key].filter) for key in agent.wanted if is_condition(key)}
    for text in [text for text in agent.facts if text not in subscribed]:
        del agent.facts[text]
