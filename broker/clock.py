"""The one source of time for adapters: injected, so tests can drive it.

Pure code (the router, the matcher, the agent's state) takes time as a value; the adapters around it
(the broker's server, links, the client, the agent and historian services) read it from a ``Clock``
handed to them, never from :mod:`time` directly. ``SYSTEM`` is the real one; ``ManualClock`` is
trio.testing's virtual clock in miniature: time moves only when a test moves it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

__all__ = ["SYSTEM", "Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """Two readings: ``monotonic`` for intervals and deadlines, ``time`` for dates on the wire."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...


class SystemClock:
    """The process's clocks."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


@dataclass
class ManualClock:
    """A clock that stands still until ``advance`` moves both readings together."""

    now: float = 0.0
    wall: float = 1_700_000_000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.wall + self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} s)")
        self.now += seconds


SYSTEM: Clock = SystemClock()
