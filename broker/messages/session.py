"""The frames of a link's own session, below routing: who speaks, and whether it is alive.

Sent on every link and never handed to a router: ``Hello`` opens a link (both sides, see
``broker.transport.handshake``), ``Ping`` and ``Pong`` keep a quiet one proven alive.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.messages.consensus import ConsensusMessage, Piece
from broker.messages.ids import PEER_ID
from broker.messages.overlay import LinkMessage, Took

__all__ = ["Hello", "Ping", "Pong", "WireMessage"]


@dataclass(frozen=True, slots=True)
class Hello:
    """The first frame each side sends: who is speaking, so the adapter knows client from broker;
    and where custody stands (see ``broker.routing.custody``): the speaker's ``epoch`` (a
    client's is empty), the listener's epoch it knows (``peer_epoch``, empty if none) and the last
    seq it took from the listener in that epoch (``took``). A broker of a replicated site names
    its ``site``: its peers know it by the site's name, whichever of the site's brokers serves
    (``docs/sites.md``). A client names in ``noted`` (comma-separated) the keys of its session
    it knows were taken over (``Standby``, ``TakeOver``): its broker refuses the hello of a
    client whose session was handed over until it says it knows (``docs/workflows.md``,
    "Standby agents")."""

    kind: str
    id: str
    version: int = 1
    epoch: str = ""
    peer_epoch: str = ""
    took: int = 0
    site: str = ""
    noted: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("client", "broker"):
            raise ValueError(f"hello kind must be 'client' or 'broker', not {self.kind!r}")
        if not isinstance(self.id, str) or not PEER_ID.match(self.id):
            raise ValueError(f"{self.id!r} is not a valid peer id (1 to 64 of A-Z a-z 0-9 _ . : -)")
        version = self.version
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= 0xFFFF:
            raise ValueError(f"protocol version must be an integer from 1 to 65535, not {version!r}")
        for epoch in (self.epoch, self.peer_epoch):
            if not isinstance(epoch, str) or len(epoch) > 64:
                raise ValueError("an epoch must be a string of at most 64 characters")
        Took(self.took)  # the same range as a seq
        site = self.site
        if site and (self.kind != "broker" or not isinstance(site, str) or not PEER_ID.match(site)):
            raise ValueError(f"{site!r} is not a site name (a broker's: 1 to 64 of A-Z a-z 0-9 _ . : -)")
        noted = self.noted
        if noted and (self.kind != "client" or not isinstance(noted, str) or len(noted) > 65536):
            raise ValueError("noted is a client's, a string of at most 65536 characters")


@dataclass(frozen=True, slots=True)
class Ping:
    """Heartbeat: a link that carries no traffic still proves the peer is alive."""


@dataclass(frozen=True, slots=True)
class Pong:
    """The answer to ``Ping``."""


WireMessage = LinkMessage | Hello | Ping | Pong | ConsensusMessage | Piece
