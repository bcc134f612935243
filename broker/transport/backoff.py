"""How long to wait before dialling again: one schedule for clients and for neighbour brokers.

Exponential, capped, with jitter so that peers cut off together do not all come back in the same
instant. The randomness is a parameter, so tests check the schedule without waiting; ``JITTER``
is our own generator, so dialling never touches the :mod:`random` module's state.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["JITTER", "Backoff"]

JITTER = random.Random()


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between connection attempts: ``first * factor**n`` for the n-th consecutive failure,
    at most ``cap``, each scaled by a random factor in ``[1 - jitter, 1 + jitter]`` and then capped
    again, so no wait ever exceeds ``cap``. ``attempts`` bounds the attempts of one reconnection
    (None: keep trying, as a daemon or a broker must).

    A reconnection keeps trying the broker it lost until it has waited ``failover_after``
    seconds in all, then fails over: that broker keeps the client's session (a subscriber that
    moves leaves what is held for it there), and a broker restarted from its log is back within
    a second or two. A publisher that moves at once is acknowledged by a broker whose part of
    the overlay may not yet know the subscriptions beyond the one that went down, and what it
    publishes there in the meantime reaches no one."""

    first: float = 0.1
    factor: float = 2.0
    cap: float = 5.0
    jitter: float = 0.5
    attempts: int | None = 60
    failover_after: float = 3.0

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.cap or self.factor < 1 or not 0 <= self.jitter <= 1:
            raise ValueError("backoff needs 0 < first <= cap, factor >= 1 and 0 <= jitter <= 1")
        if self.failover_after < 0:
            raise ValueError("failover_after must not be negative")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError("backoff attempts must be at least 1, or None for no limit")

    def delay(self, failures: int, rng: Callable[[], float] = JITTER.random) -> float:
        """Seconds to wait after ``failures`` consecutive failed attempts (the first wait is 0)."""
        if failures <= 0:
            return 0.0
        base = min(self.cap, self.first * self.factor ** min(failures - 1, 64))
        return min(self.cap, base * (1 - self.jitter + 2 * self.jitter * rng()))
