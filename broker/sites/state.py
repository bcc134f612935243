"""A site's routing state: one router for the whole site, applied from the site's log.

Every member of a site applies the same committed inputs (``broker.sites.inputs``) in the same
order to its own ``SiteState``, so every member holds the same routing tables, client sessions,
composite join state, custody and duplicate filters: any of them can take over any client or
site link. The router sees the site as one broker; the state also knows which member each hop is
attached to, which is what turns one router's output into each member's share of it
(:meth:`SiteState.mine`).

A hop moves between members (a client failing over, a site link taken over by a new leader): a
``LinkUp`` through a new member ends the old attachment first (the router sees the link go down
and come back up, and resumes custody from what the hello said was taken), and what the old
member still proposes for that hop afterwards (its late ``LinkDown``, a message it had read off
the old link) is stale and dropped: only the member a hop is attached to speaks for it.
"""

from __future__ import annotations

from typing import Any

from broker.messages import LinkDown, LinkUp, Tick
from broker.routing.router import Output, Router
from broker.sites.inputs import Input, MemberDown, decode_input
from broker.transport.persistence import dump_state, load_state

__all__ = ["SiteState"]


class SiteState:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.attached: dict[str, str] = {}  # hop -> the member it is attached to
        self.stale = 0  # inputs dropped for coming through a member the hop had left

    def apply(self, entry: bytes) -> Output:
        """One committed entry of the site's log: what the site sends where (every member
        computes the same; each sends :meth:`mine`). An entry that is not an input is counted and
        skipped on every member alike; an empty one is a new leader's no-op."""
        if not entry:
            return []
        try:
            item = decode_input(entry)
        except ValueError:
            self.router.counters["site.bad_entries"] += 1
            return []
        return self.take(item)

    def take(self, item: Input) -> Output:
        message, hop, now = item.message, item.hop, item.now
        if isinstance(message, MemberDown):
            gone = [h for h, member in self.attached.items() if member == message.member]
            out: Output = []
            for lost in gone:
                del self.attached[lost]
                out += self.router.handle(LinkDown(), lost, now)
            return out
        if isinstance(message, Tick):
            return self.router.handle(message, hop, now)
        if isinstance(message, LinkUp):
            out = []
            if hop in self.attached:  # it moved: the old link is gone first
                out += self.router.handle(LinkDown(), hop, now)
            self.attached[hop] = item.member
            return out + self.router.handle(message, hop, now)
        if self.attached.get(hop) != item.member:
            self.stale += 1
            self.router.counters["site.stale_inputs"] += 1
            return []
        if isinstance(message, LinkDown):
            del self.attached[hop]
        return self.router.handle(message, hop, now)

    def snapshot(self) -> bytes:
        """The whole state, for the site's log to stand for the entries applied so far."""
        return dump_state((self.router.snapshot(), self.attached, self.stale))

    def restore(self, data: bytes) -> None:
        """The state a :meth:`snapshot` holds (this member's own, or its leader's); ValueError
        if ``data`` is not one. The router is a new object: whoever holds the old one must take
        ``self.router`` again."""
        state: Any = load_state(data)
        router, attached, stale = state
        self.router = Router.restore(router)
        self.attached, self.stale = dict(attached), int(stale)

    def mine(self, output: Output, member: str) -> Output:
        """The part of ``output`` that ``member`` sends: to the hops attached to it (its clients,
        and the site links it holds as the site's leader)."""
        attached = self.attached
        return [(target, m) for target, m in output if attached.get(target) == member]
