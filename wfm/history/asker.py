"""Asking the historians through the overlay, and joining their answer to live delivery.

:class:`Answers` (pure) merges what any number of historians return: results by publication id, and
a historian's answer is complete at its final marker. :func:`ask` publishes the query, again every
``retry`` seconds until a final marker arrives (the first copy may be lost while the asker's
advertisement and the historians' subscriptions are still travelling), and once one historian has
finished waits ``grace`` seconds more for the others that have started answering.

:class:`Seam` joins history to live delivery: the live subscription is made before the query, its
deliveries are held while history arrives, those history returned are dropped by id, and the rest
follow the history. So nothing published around the query is lost or shown twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from broker.client import Client, Delivery, Subscription
from broker.language import Filter, Predicate, Publication, TimeRef
from broker.language.operators import TIME_ATTRIBUTE, holds
from wfm.history.historian import publisher_of
from wfm.history.protocol import (
    Answer,
    parse_answer,
    query_advertisement,
    query_publication,
    result_subscription,
)

__all__ = ["Answers", "HistoryError", "Result", "Seam", "absolute", "ask", "without_time"]


class HistoryError(Exception):
    """One line: no historian answered, or every one that did reported an error."""


@dataclass(frozen=True, slots=True)
class Result:
    id: str
    time: float
    publication: Publication


@dataclass
class Answers:
    """The merged answer to one query, from every historian that replies."""

    results: dict[str, Result] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)  # historians (publisher names) heard from
    finished: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    def add(self, historian: str, answer: Answer) -> None:
        self.started.add(historian)
        if answer.last:
            self.finished.add(historian)
            if answer.error:
                self.errors.append(answer.error)
        elif answer.publication is not None:
            self.results.setdefault(answer.id, Result(answer.id, answer.at, answer.publication))

    @property
    def complete(self) -> bool:
        """Some historian finished and every one heard from has."""
        return bool(self.finished) and self.started <= self.finished

    def in_time_order(self) -> list[Result]:
        return sorted(self.results.values(), key=lambda r: (r.time, r.id))


def without_time(wanted: Filter) -> Filter:
    """The filter minus its ``time`` predicate: what a live subscription asks the brokers for."""
    return Filter(wanted.cls, tuple(p for p in wanted.predicates if p.attribute != TIME_ATTRIBUTE))


async def ask(
    client: Client,
    query_id: str,
    wanted: Filter,
    since: float | None,
    until: float | None,
    timeout: float,
    retry: float = 1.0,
    grace: float = 0.3,
) -> Answers:
    """The historians' merged answer; HistoryError if none finishes within ``timeout`` seconds or
    all that did report errors (a bad filter)."""
    answers = Answers()
    results = await client.subscribe(result_subscription(query_id))
    await client.advertise(query_advertisement())
    query = query_publication(query_id, str(wanted), since, until)
    deadline = time.monotonic() + timeout
    first_finish: float | None = None
    next_send = 0.0
    while True:
        now = time.monotonic()
        if first_finish is not None and (answers.complete or now >= first_finish + grace):
            break
        if now >= deadline:
            break
        if not answers.started and now >= next_send:
            await client.publish(query)
            next_send = now + retry
        if first_finish is not None:
            wait = first_finish + grace - now
        else:
            wait = (deadline if answers.started else min(deadline, next_send)) - now
        delivery = await _next(results, max(wait, 0.01))
        if delivery is None:
            continue
        try:
            answer = parse_answer(delivery.publication)
        except ValueError:
            continue  # not a well-formed answer: not from a historian of this protocol
        answers.add(publisher_of(delivery.id), answer)
        if answer.last and first_finish is None:
            first_finish = time.monotonic()
    await results.unsubscribe()
    if not answers.finished:
        raise HistoryError(f"no historian answered within {timeout:g} s")
    if len(answers.errors) == len(answers.finished):  # every historian that finished refused it
        raise HistoryError(answers.errors[0])
    return answers


async def _next(stream: Subscription, timeout: float) -> Delivery | None:
    try:
        return await stream.next(timeout)
    except TimeoutError:
        return None


@dataclass
class Seam:
    """Live deliveries after history: each publication once, none between the two missing.

    ``window`` is the query's filter: only its ``time`` predicate is checked here (the live
    subscription matched the rest), together with ``since`` (inclusive) and ``until`` (exclusive)."""

    window: Filter
    since: float | None
    until: float | None
    shown: set[str] = field(default_factory=set)

    def history(self, answers: Answers) -> Iterator[Result]:
        for result in answers.in_time_order():
            self.shown.add(result.id)
            yield result

    def live(self, delivery: Delivery) -> Result | None:
        """The delivery to show, or None: already shown, or outside the time window."""
        if delivery.id in self.shown or not self.in_window(delivery.time):
            return None
        self.shown.add(delivery.id)
        return Result(delivery.id, delivery.time, delivery.publication)

    def in_window(self, at: float) -> bool:
        if TIME_ATTRIBUTE in self.window:
            predicate = self.window[TIME_ATTRIBUTE]
            if not holds(predicate.op, predicate.value, at):
                return False
        return (self.since is None or at >= self.since) and (self.until is None or at < self.until)


def absolute(wanted: Filter, now: float) -> Filter:
    """The filter with its ``time`` reference fixed at ``now`` (the asker's clock), so the
    historians and the live window agree on what ``now-1h`` meant."""
    return Filter(
        wanted.cls,
        tuple(
            Predicate(p.attribute, p.op, p.value.absolute(now)) if isinstance(p.value, TimeRef) else p
            for p in wanted.predicates
        ),
    )
