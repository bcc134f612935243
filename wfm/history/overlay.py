"""``wfm history --broker``: historic queries asked of the historians through the overlay.

On one connection (:func:`connection`): :func:`ask_filter` asks for one filter and gives the
answer and, when its window ends in the future, the live publications that follow it;
:func:`ask_composite` asks for each atom of an ``&`` at once and joins the answers here, so
historians that keep different classes still join. Nothing here prints: the warnings about
historians that stopped answering come back with the answer.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from broker.client import Brokers, Client, ConnectError, Subscription
from broker.errors import LinkClosed
from broker.language import Atom
from wfm.history.asker import Answers, HistoryError, Result, Seam, ask, without_time
from wfm.history.groups import join
from wfm.history.windows import Window

__all__ = ["LATE", "Asked", "ask_composite", "ask_filter", "connection"]

LATE = 0.5  # seconds a publication accepted just before the end of the window gets to arrive
# a new subscription must reach the publishers' brokers before the query's answer is the seam:
# local hops take milliseconds, this leaves a wide margin
SUBSCRIPTION_SETTLE = 0.5


@asynccontextmanager
async def connection(uri: Brokers) -> AsyncIterator[Client]:
    """A client of the broker at ``uri``, closed on exit; HistoryError (one line) if it cannot
    connect or the link is lost meanwhile."""
    try:
        client = await Client.connect(uri)
    except ConnectError as error:
        raise HistoryError(str(error)) from None
    try:
        yield client
    except LinkClosed as error:
        raise HistoryError(f"lost the connection to {uri}: {error}") from None
    finally:
        await client.close()


@dataclass
class Asked:
    """The historians' answer to the query ``id``, and the live subscription that follows it (None
    when the window ends by now)."""

    id: str
    answers: Answers
    seam: Seam
    live: Subscription | None

    def warnings(self) -> list[str]:
        """One line per historian that stopped answering: the answer may lack what it kept."""
        return self.answers.warnings()

    def history(self) -> Iterator[Result]:
        """The stored publications, in time order."""
        return self.seam.history(self.answers)

    async def follow(self, stop: asyncio.Event) -> AsyncIterator[Result]:
        """After :meth:`history`, the live publications up to the end of the window (or until
        ``stop`` is set), each once. What was held while history arrived comes even if the window
        has ended meanwhile, and one accepted just before its end gets LATE seconds to arrive."""
        until = self.seam.until
        if self.live is None or until is None:
            return
        while not stop.is_set():
            remaining = until + LATE - time.time()
            try:
                delivery = await self.live.next(min(0.2, max(0.0, remaining)))
            except TimeoutError:
                if remaining <= 0:
                    break
                continue
            shown = self.seam.live(delivery)
            if shown is not None:
                yield shown


async def ask_filter(client: Client, asked: Window, now: float, timeout: float) -> Asked:
    """Ask the historians for the window's stored publications; if it ends later than ``now``,
    subscribe first and give the subscription time to reach the publishers' brokers, so what they
    publish from the query on is either live or already in the answer. HistoryError (one line) if
    every historian fails."""
    wanted, since, until = asked
    live = await client.subscribe(without_time(wanted)) if until is not None and until > now else None
    if live is not None:
        await asyncio.sleep(SUBSCRIPTION_SETTLE)
    query_id = uuid.uuid4().hex
    answers = await ask(client, query_id, wanted, since, until, timeout)
    return Asked(query_id, answers, Seam(wanted, since, until), live)


async def ask_composite(
    client: Client, atoms: Sequence[Atom], windows: Sequence[Window], timeout: float
) -> tuple[list[tuple[Result, ...]], list[str]]:
    """The groups of stored publications that complete an & of ``atoms`` (each asked at once as
    the plain filter of its window), and one warning line per historian that stopped answering.
    HistoryError (one line) if no historian answers an atom."""
    asked = [ask(client, uuid.uuid4().hex, *window, timeout) for window in windows]
    answers: list[Answers] = []
    for outcome in await asyncio.gather(*asked, return_exceptions=True):
        if isinstance(outcome, BaseException):
            raise outcome
        answers.append(outcome)
    warnings = list(dict.fromkeys(w for answer in answers for w in answer.warnings()))
    rows = [answer.in_time_order() for answer in answers]
    groups = join(atoms, rows, lambda result: result.publication, lambda result: (result.time, result.id))
    return groups, warnings
