"""Where a client's requests wait for their answers: the asyncio side of ``requests``.

A request goes on the link at once if it is up, else with the next link (see ``connection``);
a publication made with an outbox goes through it first (``storing``). Each request the caller
waits for has a future, settled by the broker's answer, failed by its refusal (``RefusedError``),
by no answer within ``timeout`` seconds (``NoAnswer``) or by the client's end (``LinkClosed``). A
refusal nobody waits for (a pipelined publication's) is logged and kept in ``refusals``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Callable

from broker import failpoints
from broker.client.connection import Connection
from broker.client.outbox import Outbox
from broker.client.reconnect import ConnectionEvent
from broker.client.requests import Requests
from broker.client.storing import Storing
from broker.client.streams import Subscription
from broker.errors import LinkClosed, NoAnswer, RefusedError
from broker.messages import ClientRef, Publish, Refuse, WireMessage
from broker.transport.codec import encode
from broker.transport.link import Link

__all__ = ["REFUSALS_KEPT", "Asking"]

log = logging.getLogger(__name__)

REFUSALS_KEPT = 1000  # the last refusals a client keeps to show; every one is counted
Waiter = asyncio.Future[object]


class Asking:
    """The requests of client ``name`` on ``connection``; ``closing`` says the client is ending."""

    def __init__(
        self,
        name: str,
        connection: Connection,
        counters: Counter[str],
        timeout: float,
        closing: Callable[[], bool],
        outbox: Outbox | None,
    ) -> None:
        self.name, self.connection, self.counters, self.timeout = name, connection, counters, timeout
        self.outbox = outbox
        self._closing = closing
        self.requests: Requests[Waiter, Subscription] = Requests()
        self.refusals: deque[Refuse] = deque(maxlen=REFUSALS_KEPT)  # counted in full in counters
        self.acked = asyncio.Event()  # set at each publication's answer
        self.storing = (
            None
            if outbox is None
            else Storing(outbox, name, lambda m, f: self.send(m.id, m, f), closing, counters)
        )

    def _send_stored(self, message: Publish, future: Waiter | None) -> None:
        self.send(message.id, message, future)

    @property
    def unacknowledged(self) -> int:
        """Publications not acknowledged yet, those on their way through the outbox included."""
        return self.requests.unacked + (len(self.storing) if self.storing is not None else 0)

    def send(self, ref: str, message: WireMessage, future: Waiter | None) -> None:
        """Send now if the link is up, else at the reconnection; the answer settles ``future``."""
        if self._closing():
            raise LinkClosed("client closed")
        link = self.connection.link
        if link is not None and self.connection.up:
            link.send(message)  # False: it just went down, and this goes again at the reconnection
        else:
            encode(message)  # what cannot be sent must fail here, not in the middle of a reconnection
        self.requests.sent(ref, message, future)

    async def ask(self, message: WireMessage, ref: str) -> object:
        """Send ``message`` under ``ref`` and wait for its answer."""
        future: Waiter = asyncio.get_running_loop().create_future()
        kept = self.storing is not None and isinstance(message, Publish)
        if self.storing is not None and isinstance(message, Publish):
            self.storing.store(message, future)
        else:
            self.send(ref, message, future)
        try:
            async with asyncio.timeout(self.timeout):
                return await future
        except asyncio.CancelledError:
            self._give_up(ref, kept)
            raise
        except TimeoutError:
            self._give_up(ref, kept)
            what = f"{type(message).__name__} {ClientRef.parse(ref).name} within {self.timeout:g} s"
            still = (
                f" (kept in the outbox {self.outbox.directory} until it is)" if self.outbox and kept else ""
            )
            raise NoAnswer(
                f"{self.connection.broker_id or 'the broker'} did not answer {what}{still}"
            ) from None

    def _give_up(self, ref: str, kept: bool) -> None:
        """The caller stopped waiting: the request is not re-sent at a reconnection, and a late
        acknowledgement registers nothing the caller was told had failed. A publication in the
        outbox (``kept``) is still sent until acknowledged: it is on disk, and a restart would."""
        if kept:
            pending = self.requests.pending.get(ref)
            if pending is not None:
                pending.waiter = None
            return
        self.answered(ref, None)
        self.requests.forget(ref)

    def answered(self, ref: str, result: object, error: Exception | None = None) -> bool:
        """The answer to ``ref``: whether it reached someone waiting (or, unawaited, was no error)."""
        pending = self.requests.answered(ref)
        if pending is None:
            return False
        if isinstance(pending.message, Publish):
            self.acked.set()
            if self.outbox is not None:  # acknowledged or refused: re-sending it cannot help
                failpoints.reach("outbox.acknowledged")  # taken by the broker, still in the outbox
                self.outbox.remove(ref)
        if pending.waiter is not None and not pending.waiter.done():
            if error is None:
                pending.waiter.set_result(result)
            else:
                pending.waiter.set_exception(error)
            return True
        return error is None

    def refused(self, item: Refuse) -> None:
        broker = self.connection.broker_id
        live = self.requests.live.get(item.ref)
        if live is not None and live.first:  # a re-sent request the new session refuses: it is
            self.counters["refused.resent"] += 1  # no longer live, and whoever made it must hear so
            log.warning("broker %s refused to restore %s: %s", broker, live.first, item.reason)
            self.connection.tell(ConnectionEvent("refused", broker, item.reason, live.first))
        self.requests.refused(item.ref)  # after the event: its handler may still ask for its name
        if not self.answered(item.ref, None, RefusedError(item.reason)):
            self.counters["refusals"] += 1
            self.refusals.append(item)
            log.warning("broker refused %s: %s", item.ref or "a message", item.reason)

    def resend(self, link: Link) -> None:
        """On a fresh link: what is live, then what is unanswered, in order."""
        again, pending = self.requests.to_send()
        for live in again:
            link.send(live)
            self.counters["resent.requests"] += 1
        for message in pending:
            link.send(message)
            if self.counters["reconnects"]:
                self.counters[
                    "resent.publications" if isinstance(message, Publish) else "resent.requests"
                ] += 1

    def lost(self) -> None:
        """The link ended: withdrawals in flight are done (the next session never hears of what
        they withdraw); everything else waits for the reconnection."""
        for future in self.requests.lost():
            if not future.done():
                future.set_result(None)

    def end(self, reason: str) -> None:
        """The client ended: every wait fails with ``reason``."""
        waiting, unacked = self.requests.end()
        for future in waiting + (self.storing.waiters() if self.storing is not None else []):
            if not future.done():
                future.set_exception(LinkClosed(reason))
        if unacked:
            self.counters["abandoned.publications"] += unacked
            kept = f", kept in outbox {self.outbox.directory}" if self.outbox else ""
            log.warning(
                "client %s: %d publications never acknowledged (%s%s)", self.name, unacked, reason, kept
            )
        self.acked.set()
