"""What has been forwarded to each neighbour, under a covering policy.

Used twice by the router: for subscriptions (covering off, lazy or active) and for
advertisements (covering on = lazy, or off). An entry is *wanted* at a hop when routing says it
should go there; it is *sent* if it went, or *held* if a sent entry covers it, so sending it
would add nothing. The table turns want/unwant into the messages that keep the neighbour right:

* lazy: a new entry covered by a sent one is held;
* active: in addition, a new entry retracts the sent entries it covers;
* either way, withdrawing a sent entry re-sends the held ones it alone covered (first).

Subscriptions without covering still hold back *equal* entries (``Twins``): one look-up by hash
instead of a covering scan over everything sent. Every job of a workflow subscribes the same
trigger atom, and without this a trigger publisher that advertised drew a thousand equal
subscriptions towards it, one message each across every link, and as many withdrawals when it
left (the first 1,000-job generation paid both).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Literal

from broker.language.model import Filter

__all__ = ["COVERING_MODES", "ROUTING_MODES", "Forwarding", "Twins"]

COVERING_MODES = ("off", "lazy", "active")
# SESDAD's RoutingPolicy (``Tables``): "filter" forwards a publication towards the subscriptions it
# matches; "flooding" forwards it to every neighbour, and no subscription is forwarded at all
ROUTING_MODES = ("filter", "flooding")
Action = tuple[Literal["send", "retract"], str, Filter]


class Forwarding:
    def __init__(self, mode: str, covers: Callable[[Filter, Filter], bool]) -> None:
        if mode not in COVERING_MODES:
            raise ValueError(f"covering must be one of {', '.join(COVERING_MODES)}, not {mode!r}")
        self.mode = mode
        self.covers = covers
        self.sent: dict[Hashable, dict[str, Filter]] = {}
        self.held: dict[Hashable, dict[str, Filter]] = {}

    def wants(self, hop: Hashable, entry: str) -> bool:
        return entry in self.sent.get(hop, {}) or entry in self.held.get(hop, {})

    def entries(self, hop: Hashable) -> list[str]:
        return [*self.sent.get(hop, {}), *self.held.get(hop, {})]

    def want(self, hop: Hashable, entry: str, value: Filter, apart: bool = False) -> list[Action]:
        """``apart``: a stand-in (see ``Twins.want``); covering takes it like any entry."""
        sent = self.sent.setdefault(hop, {})
        held = self.held.setdefault(hop, {})
        if entry in sent or entry in held:
            return []
        if self.mode != "off" and any(self.covers(other, value) for other in sent.values()):
            held[entry] = value
            return []
        sent[entry] = value
        actions: list[Action] = [("send", entry, value)]
        if self.mode == "active":
            for other_id, other in list(sent.items()):
                if other_id != entry and self.covers(value, other):
                    del sent[other_id]
                    held[other_id] = other
                    actions.append(("retract", other_id, other))
        return actions

    def unwant(self, hop: Hashable, entry: str) -> list[Action]:
        sent = self.sent.get(hop, {})
        held = self.held.get(hop, {})
        if held.pop(entry, None) is not None or entry not in sent:
            return []
        value = sent.pop(entry)
        actions: list[Action] = []
        for other_id, other in list(held.items()):
            if not any(self.covers(s, other) for s in sent.values()):
                del held[other_id]
                actions += self.want(hop, other_id, other)
        # the retraction last, as ``want`` sends before it retracts: the neighbour handles them
        # one by one, and what it routed between the two would miss what the entry covered
        return [*actions, ("retract", entry, value)]

    def forget(self, hop: Hashable) -> None:
        """The link is gone: nothing is at the other end any more."""
        self.sent.pop(hop, None)
        self.held.pop(hop, None)

    def sent_to(self, hop: Hashable) -> list[tuple[str, Filter, str]]:
        """What the neighbour should have of ours: (the id it went under, its filter, the entry
        whose ttl it carries), in the order sent."""
        return [(entry, value, entry) for entry, value in self.sent.get(hop, {}).items()]

    def held_count(self) -> int:
        return sum(map(len, self.held.values()))


class Twins:
    """Covering "off", except that entries with equal filters travel as one: the first goes under
    its own id, the wire id of the group, and those after it join the group silently. The group
    keeps its wire id while any member is left (the neighbour routes publications by filter, not
    by id), and only its last member's withdrawal retracts it, whatever the order they go in."""

    mode = "off"

    def __init__(self) -> None:
        # hop -> group -> (the id it travelled under, its members)
        self.groups: dict[Hashable, dict[Group, tuple[str, dict[str, None]]]] = {}
        self.member_of: dict[Hashable, dict[str, Group]] = {}
        self.wires: dict[Hashable, dict[str, Group]] = {}  # wire id -> its group

    def wants(self, hop: Hashable, entry: str) -> bool:
        return entry in self.member_of.get(hop, {})

    def want(self, hop: Hashable, entry: str, value: Filter, apart: bool = False) -> list[Action]:
        """``apart``: a stand-in (``Tables.stand_in``), grouped with equal stand-ins only. Its
        filter is an advertisement's class alone, which lasting subscriptions often are too;
        in their group, it could lend them its id for good (the group keeps its wire id while a
        member is left), and the neighbour would show a stand-in long after every one ended."""
        member_of = self.member_of.setdefault(hop, {})
        if entry in member_of:
            return []
        key: Group = StandInGroup(value) if apart else value
        member_of[entry] = key
        groups, wires = self.groups.setdefault(hop, {}), self.wires.setdefault(hop, {})
        group = groups.get(key)
        if group is not None:
            group[1][entry] = None
            return []
        # a group that went on under this id after the entry left it: renamed, the id is this one's
        actions = self._rename(hop, wires[entry]) if entry in wires else []
        groups[key] = (entry, {entry: None})
        wires[entry] = key
        return [*actions, ("send", entry, value)]

    def unwant(self, hop: Hashable, entry: str) -> list[Action]:
        key = self.member_of.get(hop, {}).pop(entry, None)
        if key is None:
            return []
        wire, members = self.groups[hop][key]
        del members[entry]
        if members:
            return []
        del self.groups[hop][key], self.wires[hop][wire]
        return [("retract", wire, _filter(key))]

    def forget(self, hop: Hashable) -> None:
        """The link is gone: nothing is at the other end any more."""
        for table in (self.groups, self.member_of, self.wires):
            table.pop(hop, None)

    def sent_to(self, hop: Hashable) -> list[tuple[str, Filter, str]]:
        """What the neighbour should have of ours: each group under its wire id, with a member
        whose ttl it carries (see ``Forwarding.sent_to``)."""
        groups = self.groups.get(hop, {})
        return [(wire, _filter(key), next(iter(members))) for key, (wire, members) in groups.items()]

    def held_count(self) -> int:
        return sum(len(members) - 1 for groups in self.groups.values() for _, members in groups.values())

    def _rename(self, hop: Hashable, key: Group) -> list[Action]:
        """The group under a member's own id, sent before its old id is retracted."""
        old, members = self.groups[hop][key]
        new = next(iter(members))
        self.groups[hop][key] = (new, members)
        del self.wires[hop][old]
        self.wires[hop][new] = key
        value = _filter(key)
        return [("send", new, value), ("retract", old, value)]


@dataclass(frozen=True, slots=True)
class StandInGroup:
    """The key of a group of stand-ins in ``Twins`` (a lasting subscription's group is keyed by
    its filter itself, as snapshots keep them)."""

    filter: Filter


Group = Filter | StandInGroup


def _filter(key: Group) -> Filter:
    return key.filter if isinstance(key, StandInGroup) else key
