"""Durable sessions: a client or a neighbour whose link goes down keeps its place for a grace period.

Withdrawing everything a client owned the moment its link drops throws away the join state of
its composite subscriptions: a detector waiting for the second atom of a generation forgets the
first, and an agent that reconnects a second later has lost that generation's jobs. Withdrawing
what a neighbour advertised and subscribed the moment its link flaps does the same to a whole
branch of the overlay. So the router keeps a departed peer's entries in place, with their ids and
their detectors; what it sends the peer meanwhile is held in the peer's custody channel
(``custody``), bounded and in order. If the peer comes back within the grace period it gets what
was held, then live traffic; if not, its entries are withdrawn as they were at once before. A
neighbour that comes back naming a channel we do not know (it restarted without its log, or it
forgot us) is taken for a new neighbour. A session whose grace is over is withdrawn before its
peer's link is taken (``ends_by``), so the peer's next hello finds a new channel; one marked to
be told again (after an upgrade, ``Custody.reannounce_all``) is, as it resumes. The router has
no clock: ``expire(now)`` runs on every message it handles, and the adapter sends ``Tick`` so
that a quiet broker expires sessions too.

A client may also declare who may take its session over (``Standby``, ``TakeOver``: the standby
agents of ``docs/workflows.md``). What it declared (:class:`Declared`) outlives its session: the
link's going down is the clock of a takeover, and a grant stays as a tombstone, so that the
client's next hello is refused until it says it knows (``Hello.noted``,
:meth:`Sessions.handed_over`). The grant leaves the session itself for its grace period: what it
holds for the client's other keys is delivered if the client comes back in time. Nothing here is
looked at on a publication's way.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from broker.messages import Advertise, CompositeSubscribe, LinkUp, Subscribe
from broker.routing.composites import Composites
from broker.routing.custody import Custody
from broker.routing.leases import Leases
from broker.routing.retained import identity
from broker.routing.snapshots import Stateful
from broker.routing.tables import Output, Tables

__all__ = ["HANDED_OVER", "Declared", "RequestKey", "Sessions", "request_key"]

log = logging.getLogger(__name__)

RequestKey = tuple[object, ...]
# How a refusal of a client's hello begins whose session was handed over (``handed_over``); the
# client's side reads it (``broker.transport.handshake.HandedOver``)
HANDED_OVER = "handed over: "


@dataclass(slots=True)
class Declared:
    """What a client declared may be taken over: key -> (identities, takeover seconds); ``left``
    when its link went down (None while it is up); ``grants``, key -> (who, when), what was
    taken over."""

    keys: dict[str, tuple[tuple[str, ...], float]]
    left: float | None = None
    grants: dict[str, tuple[str, float]] = field(default_factory=dict)


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def request_key(message: Advertise | Subscribe | CompositeSubscribe) -> RequestKey:
    """What makes a re-sent request the same one: everything but its ref. A client re-sends its
    live requests after a reconnection with their refs; one that matches is acknowledged again."""
    if isinstance(message, CompositeSubscribe):
        return (CompositeSubscribe, message.composite, message.clear, message.policy)
    return (type(message), message.filter)


class Sessions(Stateful):
    """The router's clients, what each owns and asked for, and the peers (clients and
    neighbours) whose link is down and whose grace period is not over. ``grace`` 0 means none:
    a peer's entries are withdrawn as soon as its link goes."""

    STATE = ("owned", "requests", "started", "away", "peers", "declared")

    def __init__(
        self,
        tables: Tables,
        composites: Composites,
        custody: Custody,
        counters: Counter[str],
        grace: float,
        leases: Leases,
    ) -> None:
        self.tables = tables
        self.composites = composites
        self.custody = custody
        self.leases = leases  # a subscription's lease ends with it, however it goes
        self.counters = counters
        self.grace = grace
        self.owned: dict[str, set[str]] = {}  # client hop -> ids of its advertisements and subscriptions
        self.requests: dict[str, RequestKey] = {}  # id of a client's entry -> what it asked for
        self.started: dict[str, str] = {}  # client hop -> when it connected (ms, hex): see PublicationId
        self.away: dict[str, float] = {}  # hop -> when its grace period ends, in the order they left
        self.peers: dict[str, tuple[str, str]] = {}  # client hop -> identity, role (its certificate's)
        self.declared: dict[str, Declared] = {}  # client hop -> what may be taken over (``Standby``)

    def restore(self, state: dict[str, Any]) -> None:
        """A state from before standbys has no ``declared``: nothing was."""
        super().restore({"declared": {}, **state})

    def connect(self, hop: str, now: float, up: LinkUp, peer: tuple[str, str] = ("", "")) -> Output:
        """A client's link is up: a new session, or the one kept for it, with what was held."""
        declared = self.declared.get(hop)
        if hop in self.tables.clients:
            self.peers[hop] = peer
            self.away.pop(hop, None)
            if declared is not None:
                declared.left = None
                if declared.grants:  # back, having noted the handover (the adapter let it in
                    del self.declared[hop]  # only then): the tombstone goes, it declares again
            log.info("client %s came back", hop)
            return self.custody.resume(hop, up.resume)
        if declared is not None:  # a new session: it declares again (the adapter let it in only
            del self.declared[hop]  # if its hello noted what was handed over)
        if hop not in self.tables.neighbors:
            self.tables.add_client(hop)
            self.peers[hop] = peer
            self.started[hop] = format(round(now * 1000), "x")
            self.owned[hop] = set()
            self.custody.open(hop, client=True, name=up.name)
        return []

    def neighbor_up(self, hop: str, up: LinkUp) -> Output:
        """A neighbour's link is up: in step again if it is the one we knew, else a new one."""
        out: Output = []
        stranded: Output = []
        if hop in self.tables.neighbors:
            self.away.pop(hop, None)
            if self.custody.peer_epoch(hop) == up.epoch:
                out = self.custody.resume(hop, up.resume)
                if self.custody.reannouncing(hop):  # after an upgrade: see ``Custody.reannounce_all``
                    out += self.tables.announced(hop) + self.composites.announced(hop)
                return out
            stranded = self.custody.stranded(hop, partial(self.tables.advertised_to, hop))
            log.warning(
                "neighbour %s is back on a new channel (it restarted without its state, or forgot us): "
                "what each side had of the other is forgotten, but for %d publications held for it",
                hop,
                len(stranded),
            )
            out = self._drop_neighbor(hop)
        self.custody.open(hop, up.epoch, name=up.name)
        return out + self.tables.add_neighbor(hop) + stranded

    def disconnect(self, hop: str, now: float) -> Output:
        """A peer's link went down: its session is kept for the grace period, or withdrawn now."""
        if hop in self.away or (hop not in self.tables.clients and hop not in self.tables.neighbors):
            return []
        declared = self.declared.get(hop)
        if declared is not None:
            declared.left = now
        if self.grace <= 0 or self.owned.get(hop) == set():  # nothing to keep (``wfm status``, say)
            return self._drop(hop)
        self.away[hop] = now + self.grace
        self.custody.down(hop)
        log.info("%s left: its session is kept for %g s", hop, self.grace)
        return []

    def leave(self, hop: str) -> Output:
        """A client said it leaves for good: withdrawn now, the link's going down then changes
        nothing."""
        if hop not in self.tables.clients or hop in self.away:
            return []
        log.info("client %s left for good", hop)
        self.declared.pop(hop, None)  # gone on purpose: nothing to take over
        return self._withdraw_client(hop)

    def expire(self, now: float) -> Output:
        """Withdraw the peers whose grace period is over. Runs on every message, so it looks
        at the oldest session only: they left in order, with the same grace."""
        out: Output = []
        while self.away:
            hop, deadline = next(iter(self.away.items()))
            if deadline > now:
                break
            del self.away[hop]
            self.counters["sessions_expired"] += 1
            log.warning("%s did not come back in %g s: withdrawn", hop, self.grace)
            out += self._drop(hop)
        return out

    def ends_by(self, hop: str, now: float) -> bool:
        """Whether ``hop`` is away and its grace period is over by ``now``. An adapter asks
        before it takes a peer's link: a session that ends as the peer comes back must be
        withdrawn first (a ``Tick``), for the hellos already named the kept channel, and the
        ``LinkUp`` that withdrew it would open a channel of that name with its seqs starting
        again at 1: the peer, resuming, would drop them as taken before and keep everything
        it had sent us, which we forgot (see ``broker.transport.peers``)."""
        return self.away.get(hop, float("inf")) <= now

    def own(self, hop: str, entry_id: str, request: RequestKey) -> None:
        self.requests[entry_id] = request
        self.owned[hop].add(entry_id)

    def withdraw(self, hop: str, entry_id: str) -> Output:
        """One of a client's entries, which it withdrew or which goes with its session."""
        self.owned.get(hop, set()).discard(entry_id)
        del self.requests[entry_id]
        self.leases.end(entry_id)
        if self.composites.asked((hop, entry_id)):
            return self.composites.release((hop, entry_id))
        return self.tables.withdraw(entry_id)

    def undo(self, hop: str, entry_id: str) -> None:
        """Take out what a request that failed half-way put in the tables. What it would have
        sent was never sent, and what taking it out would send is not sent either, so the tables
        and what the neighbours were told agree again."""
        try:
            if self.composites.asked((hop, entry_id)):
                self.composites.release((hop, entry_id))
            elif self.tables.knows(entry_id):
                self.tables.withdraw(entry_id)
        except Exception:  # the router answers the request with a refusal all the same
            log.exception("could not take out what failed request %s of %s left", entry_id, hop)

    def _drop(self, hop: str) -> Output:
        return self._withdraw_client(hop) if hop in self.tables.clients else self._drop_neighbor(hop)

    def _drop_neighbor(self, hop: str) -> Output:
        self.custody.close(hop)
        return [*self.tables.remove_neighbor(hop), *self.composites.link_down(hop)]

    def _withdraw_client(self, hop: str) -> Output:
        out = [sent for entry_id in sorted(self.owned.pop(hop)) for sent in self.withdraw(hop, entry_id)]
        self.tables.remove_client(hop)
        self.custody.close(hop)
        del self.started[hop], self.peers[hop]
        return out

    # standbys ---------------------------------------------------------------------------------

    def declare(self, hop: str, keys: tuple[tuple[str, tuple[str, ...], float], ...]) -> None:
        """What client ``hop`` (connected) may have taken over from now on, replacing what it
        declared before."""
        if keys:
            self.declared[hop] = Declared({key: (who, float(after)) for key, who, after in keys})
        else:
            self.declared.pop(hop, None)

    def take_over(self, hop: str, primary: str, key: str, now: float) -> tuple[str | None, Output]:
        """Client ``hop`` asks to take ``key`` of client ``primary`` over: (why not, nothing), or
        (None, what ending the primary's session sends). Granted only to an identity the primary
        declared for ``key``, once the primary's link has been down its ``takeover`` by this
        clock (or again to whom it was granted), and only while nothing waits to be sent to the
        asker (its deliveries then all precede the answer on its link: it has every status the
        primary got to this broker before it acts on the grant)."""
        who = self.peers[hop][0] or identity(hop)
        declared = self.declared.get(primary)
        if declared is None or key not in declared.keys:
            return f"{primary} declared no takeover of {key} here", []
        allowed, after = declared.keys[key]
        if who not in allowed:
            return f"{who} may not take {key} of {primary} over: only {', '.join(allowed)} may", []
        granted = declared.grants.get(key)
        if granted is not None and granted[0] != who:
            return f"{key} of {primary} was handed over to {granted[0]} at {_when(granted[1])}", []
        if granted is None:
            if declared.left is None:
                return f"{primary} is connected", []
            down = now - declared.left
            if down < after:
                return (
                    f"{primary}'s link has been down {down:.1f} s, less than the {after:g} s after which"
                    f" {key} may be taken over",
                    [],
                )
        channel = self.custody.channels.get(hop)
        if channel is not None and channel.backlog:
            return "deliveries for you wait here: ask again once they are sent", []
        if granted is not None:
            return None, []
        declared.grants[key] = (who, now)
        self.counters["sessions_handed_over"] += 1
        log.warning(
            "%s handed over to %s at %s: %s's link down for %.1f s (takeover %g s)",
            key,
            who,
            _when(now),
            primary,
            now - (declared.left or now),
            after,
        )
        return None, []  # its session stays for its grace: what it holds for the primary's other
        # keys (and for those of this key, which it drops) is delivered if it comes back in time

    def handed_over(self, hop: str, noted: str) -> str | None:
        """Why client ``hop``'s hello is refused, if it is: its session was handed over and the
        hello's ``noted`` does not name every key taken over. The adapter asks before it takes
        a client's link, so a client that does not know yet re-sends nothing (its outbox holds
        statuses of runs another now runs), and it then starts a new session."""
        declared = self.declared.get(hop)
        if declared is None or not declared.grants:
            return None
        known = set(noted.split(",")) if noted else set()
        if declared.grants.keys() <= known:
            return None
        said = "; ".join(f"{key} to {who} at {at!r}" for key, (who, at) in sorted(declared.grants.items()))
        return f"{HANDED_OVER}{said}"

    def status(self) -> dict[str, Any]:
        return {
            "session_grace": self.grace,
            "sessions_waiting": len(self.away),
            **self.custody.status(),
        }
