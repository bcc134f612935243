"""Which of a flood of similar events to log: pure, no clock of its own, so a sans-IO core (the
agent's refusals) and an adapter (the broker's bad frames and refused peers) share it."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["LogThrottle"]


@dataclass(slots=True)
class _Flood:
    events: int = 0
    unlogged: int = 0
    logged_at: float = -math.inf


class LogThrottle:
    """Which of a flood of similar events to log: the first ``burst`` from each peer, then one each
    ``interval`` seconds saying how many went unlogged since. A hostile or broken peer would
    otherwise write a log line per frame (megabytes per fuzz run); the counters see every one.
    At most ``peers`` are remembered, the longest unheard forgotten first."""

    def __init__(self, burst: int = 5, interval: float = 60.0, peers: int = 1024) -> None:
        self.burst = burst
        self.interval = interval
        self.peers = peers
        self._floods: OrderedDict[str, _Flood] = OrderedDict()

    def admit(self, peer: str, now: float) -> int | None:
        """None: do not log this event; else log it, with the number not logged since the last."""
        flood = self._floods.pop(peer, None) or _Flood()
        self._floods[peer] = flood
        if len(self._floods) > self.peers:
            self._floods.popitem(last=False)
        flood.events += 1
        if flood.events > self.burst and now - flood.logged_at < self.interval:
            flood.unlogged += 1
            return None
        unlogged, flood.unlogged, flood.logged_at = flood.unlogged, 0, now
        return unlogged
