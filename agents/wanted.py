"""Registrations a module keeps under a key prefix of its own, brought in line with what it
wants after every change (pools, standbys): what it no longer wants is withdrawn, what is new or
changed is registered, nothing else is sent."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents.envelope import Registration
from agents.events import Effect, Register, Withdraw

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["reconcile"]


def reconcile(agent: Agent, prefix: str, wanted: dict[str, Registration]) -> list[Effect]:
    """``agent.wanted``'s keys under ``prefix`` made ``wanted``: the effects that do it."""
    effects: list[Effect] = []
    for key in [k for k in agent.wanted if k.startswith(prefix) and k not in wanted]:
        del agent.wanted[key]
        effects.append(Withdraw(key))
    for key, registration in wanted.items():
        if agent.wanted.get(key) != registration:
            agent.wanted[key] = registration
            effects.append(Register(key, registration))
    return effects
