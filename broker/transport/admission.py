"""How many connections may be in handshake at once, in all and from one address (no I/O).

A handshake on a LAN takes milliseconds; an attacker's half-open connections would each hold a
task and a socket for the handshake timeout. Past ``per_address`` from one address the newcomer
is turned away; past ``limit`` in all the oldest connection of the address that holds the most
makes room, so a client whose handshake is quick gets in while half-open connections hold the
rest. The adapter closes what this says to close.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["MAX_HANDSHAKES", "MAX_HANDSHAKES_PER_ADDRESS", "Admission", "Admitted"]

# 64 is far more than a broker's clients have in handshake at once, even all reconnecting after a
# restart (one closed retries with backoff); 16 per address keeps one host from taking them all.
MAX_HANDSHAKES = 64
MAX_HANDSHAKES_PER_ADDRESS = 16

T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Admitted(Generic[T]):
    """The verdict on a newcomer: whether it may shake hands, the connection that must go to make
    room for it (None: none), and why one is turned away."""

    admitted: bool
    evicted: T | None = None
    reason: str = ""


class Admission(Generic[T]):
    def __init__(self, limit: int = MAX_HANDSHAKES, per_address: int = MAX_HANDSHAKES_PER_ADDRESS) -> None:
        self.limit = limit
        self.per_address = per_address
        self.by_address: dict[str, dict[T, None]] = {}  # oldest first
        self.count = 0
        self._address: dict[T, str] = {}

    def begin(self, address: str, connection: T) -> Admitted[T]:
        """Room for ``connection`` from ``address`` in handshake, perhaps at another's expense."""
        mine = self.by_address.get(address, {})
        if len(mine) >= self.per_address:
            return Admitted(False, reason=f"{len(mine)} connections from there in handshake already")
        evicted: T | None = None
        reason = ""
        if self.count >= self.limit:
            busiest = max(self.by_address.values(), key=len)
            evicted = next(iter(busiest))
            self.end(evicted)
            reason = f"{self.limit} connections in handshake: closed the oldest of the busiest address"
        self.by_address.setdefault(address, {})[connection] = None
        self._address[connection] = address
        self.count += 1
        return Admitted(True, evicted, reason)

    def end(self, connection: T) -> None:
        """``connection`` is out of its handshake (through, failed or evicted); again is harmless."""
        address = self._address.pop(connection, None)
        if address is None:
            return
        mine = self.by_address[address]
        del mine[connection]
        self.count -= 1
        if not mine:
            del self.by_address[address]
