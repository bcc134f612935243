"""Where a client's deliveries wait for their consumer, and what it counts instead of losing.

A queue hands out what it holds highest priority first (``Qos.priority`` of a delivery), in
arrival order within a priority: an urgent delivery overtakes those already waiting for a busy
consumer, as it overtook them at every broker on the way. A queue never drops by default: when it
holds ``limit`` deliveries it is *full*, and the client's reader stops reading the socket until
the consumer has taken one. The broker carries only a window of deliveries the client has not
taken (``broker.routing.backlog``) and keeps the rest in its custody. A subscription made with
``lossy=True`` asks instead for the newest deliveries: a full lossy queue drops its oldest of the
lowest priority, counts it and logs it (at most every few seconds). A delivery that expires
(``Qos.expires``) while it waits is taken out then, wherever it is in the queue, and counted
(``expired``): a slow consumer is not handed it, and it does not hold room meanwhile.

The client also drops duplicates: a publication re-sent after a reconnection may reach a
subscriber twice (its first copy got through, its acknowledgement did not). ``Seen`` remembers the
recent ids, keyed so that the copy routed by another broker after a failover is recognised too.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from typing import Generic, TypeVar

from broker.messages import ClientRef

__all__ = ["DeliveryQueue", "Seen", "dedup_key"]

log = logging.getLogger("broker.client")

T = TypeVar("T")
LOG_EVERY = 5.0  # seconds between two warnings about drops of one queue
SEEN = 65536  # publication ids a client remembers to drop a duplicate


END = -1  # the end marker's lane: below every priority, so what came before it goes first
GONE_AT = 64  # items taken out where they waited, kept marked in their lanes, before a sweep
REINDEX_AT = 1024  # expiries kept before the first look for those of items already taken


def _never(item: object) -> float | None:
    return None


class Lanes(asyncio.Queue[T | None]):
    """An asyncio queue that gets the first of its highest lane (``level`` of an item), the end
    marker (None) last; only lanes with something in them are kept.

    ``expire`` takes out the items whose expiry (``expires`` of an item: epoch seconds, or
    None) has come, wherever they wait: each is marked gone in its lane (a deque cannot lose
    an entry from its middle cheaply) and no longer counted, skipped when its lane reaches
    it, and swept out once the gone outnumber the rest. A heap of expiries finds them."""

    def __init__(self, level: Callable[[T], int], expires: Callable[[T], float | None] = _never) -> None:
        super().__init__()
        self._level = level
        self._expires = expires

    def _init(self, maxsize: int) -> None:
        self._lanes: dict[int, deque[tuple[int, T | None]]] = {}  # level -> (ticket, item), in order
        self._size = 0
        self._tickets = 0  # items put so far: an item's ticket is its number
        self._expiring: list[tuple[float, int]] = []  # (expires, ticket), the soonest first
        self._due: dict[int, tuple[float, T]] = {}  # ticket -> an item that expires, while it waits
        self._gone: set[int] = set()  # tickets of items expired and still in their lanes

    def qsize(self) -> int:  # asyncio.Queue's looks at its own ``_queue``
        return self._size

    def empty(self) -> bool:
        return not self._size

    @property
    def expiring(self) -> bool:
        """Whether an item that expires waits."""
        return bool(self._due)

    def _put(self, item: T | None) -> None:
        level = END if item is None else self._level(item)
        lane = self._lanes.get(level)
        if lane is None:
            lane = self._lanes[level] = deque()
        self._tickets += 1
        lane.append((self._tickets, item))
        self._size += 1
        if item is not None and (expires := self._expires(item)) is not None:
            self._due[self._tickets] = (expires, item)
            heapq.heappush(self._expiring, (expires, self._tickets))
            if len(self._expiring) > max(REINDEX_AT, 2 * len(self._due)):  # most of them taken
                self._expiring = [(expires, ticket) for ticket, (expires, _) in self._due.items()]
                heapq.heapify(self._expiring)

    def _get(self) -> T | None:
        return self._take(highest=True)

    def drop(self) -> T | None:
        """The first of the lowest lane, out (a lossy queue's oldest of what matters least)."""
        return self._take(highest=False)

    def _take(self, highest: bool) -> T | None:
        while True:
            if highest:
                level = max(self._lanes)
            else:
                level = min((level for level in self._lanes if level != END), default=END)
            lane = self._lanes[level]
            ticket, item = lane.popleft()
            if not lane:
                del self._lanes[level]
            if ticket in self._gone:  # expired where it waited: counted out then
                self._gone.discard(ticket)
                continue
            self._due.pop(ticket, None)
            self._size -= 1
            return item

    def expire(self, now: float) -> list[T]:
        """Take out the items whose expiry is ``now`` or before."""
        gone: list[T] = []
        while self._expiring and self._expiring[0][0] <= now:
            _, ticket = heapq.heappop(self._expiring)
            due = self._due.pop(ticket, None)
            if due is None:  # taken before it expired
                continue
            self._gone.add(ticket)
            self._size -= 1
            gone.append(due[1])
        if len(self._gone) > max(GONE_AT, self._size):
            for level, lane in list(self._lanes.items()):
                kept = deque(entry for entry in lane if entry[0] not in self._gone)
                if kept:
                    self._lanes[level] = kept
                else:
                    del self._lanes[level]
            self._gone.clear()
        return gone

    def soonest(self) -> float | None:
        """When the first item still waiting expires, if one does."""
        while self._expiring and self._expiring[0][1] not in self._due:
            heapq.heappop(self._expiring)
        return self._expiring[0][0] if self._expiring else None


def _same(item: object) -> int:
    return 0


class DeliveryQueue(Generic[T]):
    """A delivery queue of at most ``limit`` entries (back-pressure) or, ``lossy``, that drops its
    oldest entry of the lowest ``priority`` when full; the highest priority goes first.
    ``None`` is the end marker: it is never counted or dropped.

    An entry whose expiry (``expires``, compared with ``dates``: epoch seconds) comes while it
    waits is taken out then, wherever it is in the queue, and counted (``expired``): it is
    never handed out, and it holds no room meanwhile. A timer is set for the soonest expiry,
    and the queue looks again at each put and get (a wall clock may jump past a timer).
    ``on_drop`` is given each entry dropped or expired, and whether the queue is empty now."""

    def __init__(
        self,
        limit: int,
        counters: Counter[str],
        on_full: Callable[[DeliveryQueue[T]], None],
        lossy: bool = False,
        name: str = "",
        clock: Callable[[], float] = time.monotonic,
        on_drop: Callable[[T, bool], None] | None = None,
        priority: Callable[[T], int] = _same,
        expires: Callable[[T], float | None] = _never,
        dates: Callable[[], float] = time.time,
    ) -> None:
        if limit < 1:
            raise ValueError(f"a queue limit must be at least 1, not {limit}")
        self.queue: Lanes[T] = Lanes(priority, expires)
        self.limit, self.lossy, self.name = limit, lossy, name
        self.dropped = 0
        self.counters = counters
        self.space = asyncio.Event()
        self.space.set()
        self._on_full = on_full
        self._on_drop = on_drop
        self._clock = clock
        self._dates = dates
        self._timer: asyncio.TimerHandle | None = None  # rings at the soonest expiry
        self._timer_at = 0.0  # the expiry it rings for
        self._logged_at: float | None = None
        self._logged_count = 0

    @property
    def full(self) -> bool:
        return self.queue.qsize() >= self.limit

    def put(self, item: T | None) -> None:
        if item is not None and self.lossy and self.full:
            dropped = self.queue.drop()
            if self._on_drop is not None and dropped is not None:
                self._on_drop(dropped, False)
            self.dropped += 1
            self.counters["dropped.lossy"] += 1
            self._log_drop()
        self.queue.put_nowait(item)
        if self.queue.expiring:  # this one may have expired on the way
            self.expire()
        if not self.lossy and self.full:
            self.space.clear()
            self._on_full(self)

    def expire(self) -> None:
        """Take out what expired by now, wherever it waits, and set the timer for what expires
        next."""
        now = self._dates()
        gone = self.queue.expire(now)
        if gone:
            self.counters["expired"] += len(gone)
            if self._on_drop is not None:
                for item in gone:
                    self._on_drop(item, self.queue.empty())
            self._taken()
        soonest = self.queue.soonest()
        if self._timer is not None and (soonest is None or soonest < self._timer_at):
            self._timer.cancel()
            self._timer = None
        if soonest is not None and self._timer is None:
            self._timer_at = soonest
            self._timer = asyncio.get_running_loop().call_later(soonest - now, self._ring)

    def _ring(self) -> None:
        self._timer = None
        self.expire()

    def _log_drop(self) -> None:
        now = self._clock()
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            log.warning(
                "lossy subscription %s: %d deliveries dropped (%d since the last warning)",
                self.name or "(merged)",
                self.dropped,
                self.dropped - self._logged_count,
            )
            self._logged_at, self._logged_count = now, self.dropped

    def _taken(self) -> None:
        if not self.full:
            self.space.set()

    async def get(self, timeout: float | None) -> T | None:
        if self.queue.expiring:
            self.expire()
        if not self.queue.empty():  # no timer: it costs more than the delivery
            item = self.queue.get_nowait()
        else:  # not wait_for: a delivery racing a cancellation swallowed the cancellation
            async with asyncio.timeout(timeout):  # None: no limit
                item = await self.queue.get()
        self._taken()
        return item


def dedup_key(publication_id: str) -> str:
    """What identifies a publication across brokers. An id in a session the client named itself
    (``<broker>/<client>/<n>@<client_session>``) is the same whichever broker routed it, so the
    broker part is left out; any other id is kept whole."""
    _, _, rest = publication_id.partition("/")
    return rest if ClientRef.parse(publication_id.rpartition("/")[2]).named_by_client else publication_id


class Seen:
    """The last ``limit`` publication ids delivered, to drop one that comes again."""

    def __init__(self, limit: int = SEEN) -> None:
        self.limit = limit
        self._ids: OrderedDict[str, None] = OrderedDict()

    def again(self, publication_id: str) -> bool:
        """True if this publication was seen already; otherwise remembers it."""
        if not publication_id:
            return False
        key = dedup_key(publication_id)
        if key in self._ids:
            return True
        self._ids[key] = None
        if len(self._ids) > self.limit:
            self._ids.popitem(last=False)
        return False
