"""Leases on subscriptions (XEvents/XMessages, seed 004): a subscription made with a lease lives only
as long as its client renews it.

A client's session outlives its link for the grace period, so a client whose process hung, or
whose host vanished, keeps its subscriptions and has deliveries queued for it until then; a lease
bounds that by what the client itself asked: its library renews every leased subscription
(``Renew``) well within the lease while the client runs, and the broker ends one whose lease ran
out (withdrawn with its session state, counted ``leases.expired``; the client is told with a
``Refuse`` naming it). The router's clock ends them on any input, and the adapter ticks at the
soonest deadline (``Router.next_expiry``).
"""

from __future__ import annotations

import heapq
from typing import Any

from broker.routing.snapshots import Stateful

__all__ = ["MAX_LEASE", "Leases"]

MAX_LEASE = 86400.0  # seconds: a day
REINDEX_AT = 1024  # deadlines kept before the first look for those renewed or ended since


class Leases(Stateful):
    STATE = ("held",)

    def __init__(self) -> None:
        self.held: dict[str, tuple[str, float, float]] = {}  # subscription id -> (hop, lease, deadline)
        self.expiring: list[tuple[float, str]] = []  # (deadline, subscription id), the soonest first
        self._reindex_at = REINDEX_AT  # entries in ``expiring`` past which it is made afresh

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self._index()

    def _index(self) -> None:
        """``expiring`` made afresh from what is held: at a restore, and when it has doubled
        since (a renewal or an end leaves the entry of the deadline before, so a client that
        renews in a loop would grow it for as long as its lease)."""
        self.expiring = [(deadline, sub_id) for sub_id, (_, _, deadline) in self.held.items()]
        heapq.heapify(self.expiring)
        self._reindex_at = max(REINDEX_AT, 2 * len(self.expiring))

    def _deadline(self, deadline: float, sub_id: str) -> None:
        heapq.heappush(self.expiring, (deadline, sub_id))
        if len(self.expiring) > self._reindex_at:
            self._index()

    def grant(self, hop: str, sub_id: str, lease: float, now: float) -> None:
        self.held[sub_id] = (hop, lease, now + lease)
        self._deadline(now + lease, sub_id)

    def renew(self, hop: str, ids: tuple[str, ...], now: float) -> int:
        """Renew those of ``ids`` that ``hop`` holds; how many."""
        renewed = 0
        for sub_id in ids:
            held = self.held.get(sub_id)
            if held is not None and held[0] == hop:
                self.held[sub_id] = (hop, held[1], now + held[1])
                self._deadline(now + held[1], sub_id)
                renewed += 1
        return renewed

    def end(self, sub_id: str) -> None:
        """The subscription went (withdrawn by its client, or with its session)."""
        self.held.pop(sub_id, None)

    def expired(self, now: float) -> list[tuple[str, str]]:
        """The (hop, subscription id) whose lease ran out by ``now``, taken out."""
        out = []
        while self.expiring and self.expiring[0][0] <= now:
            _, sub_id = heapq.heappop(self.expiring)
            held = self.held.get(sub_id)
            if held is not None and held[2] <= now:  # not renewed since this entry
                del self.held[sub_id]
                out.append((held[0], sub_id))
        return out

    def next_deadline(self) -> float | None:
        return self.expiring[0][0] if self.expiring else None

    def status(self) -> dict[str, Any]:
        return {"leases": len(self.held)}
