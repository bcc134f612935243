"""The way of a publication through a client's outbox: stored on disk first, then sent, in order.

Publications made meanwhile share one group commit (see ``outbox``). What an earlier run of the
client left in the outbox is sent before anything new, under the ids it had; what the disk refuses
is taken out of the outbox again (so a later commit does not bring it back) and its publisher is
told, or for ``publish_nowait`` the loss is logged and counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Callable

from broker import failpoints
from broker.client.outbox import Outbox, OutboxError
from broker.errors import LinkClosed
from broker.language import Publication
from broker.messages import Publish

__all__ = ["Send", "Storing"]

log = logging.getLogger(__name__)

Waiter = asyncio.Future[object]
Send = Callable[[Publish, "Waiter | None"], None]


class Storing:
    """Publications of client ``client_id`` on their way through ``outbox`` to ``send``, which
    puts one on the link (or keeps it for the next); ``closing`` says the client is ending."""

    def __init__(
        self, outbox: Outbox, client_id: str, send: Send, closing: Callable[[], bool], counters: Counter[str]
    ) -> None:
        self.outbox = outbox
        self.client_id = client_id
        self.counters = counters
        self._send, self._closing = send, closing
        self._storing: deque[tuple[Publish, Waiter | None]] = deque()  # in the outbox, not sent yet
        self._storer: asyncio.Task[None] | None = None
        # what an earlier run left in the outbox, re-sent by resend() or the first publication
        self._left: list[Publish] = outbox.recovered
        self._discarded: set[str] = set()  # ids taken out while on their way to the disk

    def __len__(self) -> int:
        return len(self._storing)

    def waiters(self) -> list[Waiter]:
        """Whoever waits for a publication still on its way to the link."""
        return [future for _, future in self._storing if future is not None]

    def resend(self) -> int:
        """Send what an earlier run left unacknowledged in the outbox; how many."""
        left, self._left = self._left, []
        for message in left:
            self._send(message, None)
        self.counters["resent.outbox"] += len(left)
        if left:
            log.info(
                "client %s: re-sent %d publications from outbox %s",
                self.client_id,
                len(left),
                self.outbox.directory,
            )
        return len(left)

    def discard(self, unwanted: Callable[[Publication], bool]) -> list[Publication]:
        """Take what ``unwanted`` names out of what waits here (left by an earlier run, or on
        its way to the disk) and out of the outbox; what was taken."""
        dropped: list[Publication] = []
        for message in [m for m in self._left if unwanted(m.publication)]:
            self._left.remove(message)
            self.outbox.remove(message.id)
            dropped.append(message.publication)
        for message, future in self._storing:  # (the storer pops them in order: left there)
            if message.id not in self._discarded and unwanted(message.publication):
                self._discarded.add(message.id)
                self.outbox.remove(message.id)
                dropped.append(message.publication)
                if future is not None and not future.done():
                    future.set_result(None)
        return dropped

    def store(self, message: Publish, future: Waiter | None) -> None:
        """Into the outbox; sent once on disk, in the order made."""
        if self._closing():
            raise LinkClosed("client closed")
        self.resend()
        self.outbox.add(message)
        self._storing.append((message, future))
        if self._storer is None or self._storer.done():
            self._storer = asyncio.get_running_loop().create_task(self._store_and_send())

    async def stored(self) -> None:
        """Until every publication stored so far is on disk."""
        if self._storing:
            await self.outbox.flush()

    async def _store_and_send(self) -> None:
        """Send what is on disk, one group commit at a time."""
        while self._storing and not self._closing():
            count = len(self._storing)
            try:
                await self.outbox.flush()
            except OSError as error:
                self._refused(
                    count,
                    OutboxError(f"cannot store a publication in outbox {self.outbox.directory}: {error}"),
                )
                continue
            failpoints.reach("outbox.stored")  # on disk, and not sent
            for _ in range(count):
                if self._closing():
                    return  # on disk: the next run sends it
                message, future = self._storing.popleft()
                if message.id in self._discarded:  # its user took it back (``discard``)
                    self._discarded.discard(message.id)
                    continue
                self._send(message, None if future is None or future.done() else future)

    def _refused(self, count: int, refused: OutboxError) -> None:
        for _ in range(count):
            message, future = self._storing.popleft()
            self.outbox.remove(message.id)
            if future is None:
                self.counters["lost.outbox"] += 1
                log.error("client %s: publication lost: %s: %s", self.client_id, refused, message.publication)
            elif not future.done():
                future.set_exception(refused)

    async def close(self) -> None:
        """Wait for the sending under way, then close the outbox."""
        if self._storer is not None:
            await asyncio.gather(self._storer, return_exceptions=True)
        await self.outbox.close()
