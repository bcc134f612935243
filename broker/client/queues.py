"""Where a client's deliveries wait for their consumer, and what it counts instead of losing.

A queue hands out what it holds highest priority first (``Qos.priority`` of a delivery), in
arrival order within a priority: an urgent delivery overtakes those already waiting for a busy
consumer, as it overtook them at every broker on the way. A queue never drops by default: when it
holds ``limit`` deliveries it is *full*, and the client's reader stops reading the socket until
the consumer has taken one. The broker carries only a window of deliveries the client has not
taken (``broker.routing.backlog``) and keeps the rest in its custody. A subscription made with
``lossy=True`` asks instead for the newest deliveries: a full lossy queue drops its oldest of the
lowest priority, counts it and logs it (at most every few seconds).

The client also drops duplicates: a publication re-sent after a reconnection may reach a
subscriber twice (its first copy got through, its acknowledgement did not). ``Seen`` remembers the
recent ids, keyed so that the copy routed by another broker after a failover is recognised too.
"""

from __future__ import annotations

import asyncio
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


class Lanes(asyncio.Queue[T | None]):
    """An asyncio queue that gets the first of its highest lane (``level`` of an item), the end
    marker (None) last; only lanes with something in them are kept."""

    def __init__(self, level: Callable[[T], int]) -> None:
        super().__init__()
        self._level = level

    def _init(self, maxsize: int) -> None:
        self._lanes: dict[int, deque[T | None]] = {}
        self._size = 0

    def qsize(self) -> int:  # asyncio.Queue's looks at its own ``_queue``
        return self._size

    def empty(self) -> bool:
        return not self._size

    def _put(self, item: T | None) -> None:
        level = END if item is None else self._level(item)
        lane = self._lanes.get(level)
        if lane is None:
            lane = self._lanes[level] = deque()
        lane.append(item)
        self._size += 1

    def _get(self) -> T | None:
        return self._take(max(self._lanes))

    def _take(self, level: int) -> T | None:
        lane = self._lanes[level]
        item = lane.popleft()
        if not lane:
            del self._lanes[level]
        self._size -= 1
        return item

    def drop(self) -> T | None:
        """The first of the lowest lane, out (a lossy queue's oldest of what matters least)."""
        return self._take(min((level for level in self._lanes if level != END), default=END))


def _same(item: object) -> int:
    return 0


class DeliveryQueue(Generic[T]):
    """A delivery queue of at most ``limit`` entries (back-pressure) or, ``lossy``, that drops its
    oldest entry of the lowest ``priority`` when full; the highest priority goes first.
    ``None`` is the end marker: it is never counted or dropped."""

    def __init__(
        self,
        limit: int,
        counters: Counter[str],
        on_full: Callable[[DeliveryQueue[T]], None],
        lossy: bool = False,
        name: str = "",
        clock: Callable[[], float] = time.monotonic,
        on_drop: Callable[[T], None] | None = None,
        priority: Callable[[T], int] = _same,
    ) -> None:
        if limit < 1:
            raise ValueError(f"a queue limit must be at least 1, not {limit}")
        self.queue: Lanes[T] = Lanes(priority)
        self.limit, self.lossy, self.name = limit, lossy, name
        self.dropped = 0
        self.counters = counters
        self.space = asyncio.Event()
        self.space.set()
        self._on_full = on_full
        self._on_drop = on_drop
        self._clock = clock
        self._logged_at: float | None = None
        self._logged_count = 0

    @property
    def full(self) -> bool:
        return self.queue.qsize() >= self.limit

    def put(self, item: T | None) -> None:
        if item is not None and self.lossy and self.full:
            dropped = self.queue.drop()
            if self._on_drop is not None and dropped is not None:
                self._on_drop(dropped)
            self.dropped += 1
            self.counters["dropped.lossy"] += 1
            self._log_drop()
        self.queue.put_nowait(item)
        if not self.lossy and self.full:
            self.space.clear()
            self._on_full(self)

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
