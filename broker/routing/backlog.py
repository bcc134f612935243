"""What waits on a channel for room to be carried: data by priority, routing state behind it.

A channel carries at most ``WINDOW`` messages (about ``WINDOW_BYTES`` of publications) that its
peer has not taken yet (see ``custody``); what else the router sends it meanwhile waits here,
in the broker's custody like what is held. Bounding what is in flight is what lets an urgent
message overtake: once a message has its seq and is written into a socket it cannot be
overtaken, so the window is kept small and the choice of what goes next is made here, when the
peer's ``Took`` makes room.

Data (publications, deliveries, firings, retained copies) waits in one lane per priority
(``Qos.priority``, 0-9; a firing's is its composite subscription's, ``Notify.priority``), first
come first out within a lane, so one publisher's publications of one priority keep their
order. Each time room is made the highest lane goes first, except one turn in ``FAIR_EVERY``,
which goes to the message that has waited longest whatever its priority: a steady flood of
urgent messages takes at most nine tenths of a congested link, and the rest still moves, oldest
first. Under ``Ordering TOTAL`` every turn is such a turn (``prioritised`` off): the overlay
promises every subscriber the same order, and a reordering on one link would break it.

Routing state (advertisements, subscriptions, withdrawals, cancellations) never overtakes data
that waits before it, nor data after it: it is a barrier between two ``Lanes``. A withdrawal
that overtook the publications it covered would make the peer drop them as unadvertised, a
cancellation that overtook the retained copy it cancels would miss it.

Pure state: part of the router's custody, replayed from its write-ahead log like the rest.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from mypy_extensions import mypyc_attr

from broker.messages import Message
from broker.records import Slotted
from broker.routing.snapshots import restore_slots

__all__ = ["FAIR_EVERY", "WINDOW", "WINDOW_BYTES", "Lanes"]

WINDOW = 256  # messages carried to one peer and not taken yet: what an urgent one waits behind
WINDOW_BYTES = 1 << 20  # about that much publication content carried and not taken, per peer
FAIR_EVERY = 10  # one turn in this many goes to the message waiting longest, whatever its priority


@mypyc_attr(serializable=True)  # unpickled without its __init__, as in Python
@dataclass(slots=True)
class Lanes(Slotted):
    """Data waiting between two barriers: priority -> ticket -> (message, weight), each lane in
    ticket order (tickets count the channel's arrivals, so the lowest is the oldest). Only
    lanes with something in them are kept."""

    lanes: dict[int, OrderedDict[int, tuple[Message, int]]] = field(default_factory=dict)

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        """Lanes pickled while they kept a count of their own (the channel counts what waits)
        come back without it."""
        restore_slots(self, state)

    def add(self, priority: int, ticket: int, message: Message, weight: int) -> None:
        lane = self.lanes.get(priority)
        if lane is None:
            lane = self.lanes[priority] = OrderedDict()
        lane[ticket] = (message, weight)

    def take(self, oldest: bool) -> tuple[Message, int]:
        """The next to go: the first of the highest lane, or the ``oldest`` of all."""
        lanes = self.lanes
        oldest_first = oldest and len(lanes) > 1
        priority = min(lanes, key=lambda p: next(iter(lanes[p]))) if oldest_first else max(lanes)
        lane = lanes[priority]
        _, item = lane.popitem(last=False)
        if not lane:
            del lanes[priority]
        return item

    def remove(self, priority: int, ticket: int) -> tuple[Message, int] | None:
        """Take out one that expired while it waited; None if it is not here (it went)."""
        lane = self.lanes.get(priority)
        item = None if lane is None else lane.pop(ticket, None)
        if item is not None and not lane:
            del self.lanes[priority]
        return item

    def messages(self) -> list[tuple[Message, int]]:
        """Every message waiting here, oldest first."""
        tickets = sorted((ticket, priority) for priority, lane in self.lanes.items() for ticket in lane)
        return [self.lanes[priority][ticket] for ticket, priority in tickets]
