"""Blocking disk calls (a commit's write and fsync) from an event loop: on the loop while they are
fast, in a thread once one is slow.

A thread's hand-over is not free: the loop wakes a worker (a futex), the worker wakes the loop
back (its self-pipe), and each side takes the GIL from the other. With a commit every few hundred
microseconds, as a workflow's chain of small messages makes, that hand-over can cost more CPU
than the sub-millisecond fsync it carries, so fast commits stay on the loop (figures:
docs/performance.md, Workflows). An fsync of a fraction of a millisecond blocks the loop for no
longer than decoding a few frames does, and what arrives meanwhile waits in the socket's buffer
for the next group commit, as it would wait for the commit in the thread.

A disk that turns slow (a busy or failing device, a full journal) must not freeze the loop: its
links would stop answering pings and its peers would drop them. So the calls go to a thread while
their recent average exceeds ``fast``, or for ``calm`` seconds after one took longer than
``stall``, twice as long after each further stall (up to ``MAX_CALM``): a disk that stalls now and
then soon stays in the thread. A single call made slow by the machine's load (a preempted
process: one in ten here when every core is busy) moves nothing. The one call that tells a hang
is paid on the loop: a disk that hangs for longer than a heartbeat's dead time costs the links
(custody re-sends what they carried), never data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from broker.clock import SYSTEM, Clock

__all__ = ["Offload"]

T = TypeVar("T")

FAST = 0.002  # seconds: calls this quick on average stay on the loop (a local SSD's fsync is well under it)
STALL = 0.1  # seconds: one call this slow sends the next ones to a thread at once...
CALM = 5.0  # ...for this long, doubled at each further stall...
MAX_CALM = 3600.0  # ...up to this
WEIGHT = 0.2  # of the newest call in the average


class Offload:
    """Where one owner's blocking disk calls run."""

    def __init__(
        self, fast: float = FAST, stall: float = STALL, calm: float = CALM, clock: Clock = SYSTEM
    ) -> None:
        self.clock = clock
        self.fast = fast
        self.stall = stall
        self.calm = calm
        self.average = 0.0  # seconds a call took, recent ones weighing most
        self._threaded_until = 0.0
        self.threaded = 0  # calls run in a thread (a counter for tests)

    async def run(self, call: Callable[[], T]) -> T:
        """``call()``, on the loop or in a thread; its exception is raised here either way."""
        if self.average > self.fast or self.clock.monotonic() < self._threaded_until:
            self.threaded += 1
            return await asyncio.to_thread(self._timed, call)
        return self._timed(call)

    def _timed(self, call: Callable[[], T]) -> T:
        """The call's own time decides, not the thread's hand-over (which load lengthens)."""
        start = self.clock.monotonic()
        try:
            return call()
        finally:
            end = self.clock.monotonic()
            self.average += WEIGHT * (end - start - self.average)
            if end - start > self.stall:
                self._threaded_until = max(self._threaded_until, end + self.calm)
                self.calm = min(2 * self.calm, MAX_CALM)
