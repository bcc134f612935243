"""Asking the historians through the overlay, and joining their answer to live delivery.

:class:`Answers` (pure: the clock is passed in) merges what any number of historians return, results
by publication id, and decides how long to listen: ``timeout`` seconds for a first historian to
accept or answer; then for each historian heard from until its final marker, as long as it is never
silent for ``stall`` seconds (an answering historian repeats its accepted marker every
``protocol.HEARTBEAT`` seconds); and ``grace`` seconds after the first final marker, but not less
than ``settle`` seconds after asking, for historians not heard from at all. :func:`ask` publishes
the query, and again every ``retry`` seconds while it listens: a historian's subscription reaches
the asker only after the asker's new advertisement has reached the historian, so a distant historian
may miss the first copies that a near one answers.

:class:`Seam` joins history to live delivery: the live subscription is made before the query, its
deliveries are held while history arrives, those history returned are dropped by id, and the rest
follow the history. So nothing published around the query is lost or shown twice.

With TLS the asker signs its query and takes a historian's results only once its final marker
arrives signed by a historian of the asker's CA, over the digest of exactly the results received
(:mod:`wfm.history.protocol`); an answer that fails is dropped whole, with one line saying why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from cryptography import x509

from agents.trust import HISTORIAN, Refusal, identity_author, load_ca, signed_by
from broker.client import Client, Delivery, Subscription
from broker.errors import ParseError, RemoteError
from broker.language import Filter, Predicate, Publication, TimeRef
from broker.language.operators import TIME_ATTRIBUTE, holds
from broker.messages import OverlayId
from broker.transport.revocation import Revocations
from wfm.history.protocol import (
    STALL,
    Answer,
    parse_answer,
    query_advertisement,
    query_publication,
    result_digest,
    result_subscription,
)

__all__ = [
    "GRACE",
    "SETTLE",
    "Answers",
    "HistoryError",
    "Result",
    "Seam",
    "absolute",
    "ask",
    "historian_of",
    "historian_signature",
    "without_time",
]

GRACE = 0.3  # seconds after the first final marker for historians not heard from at all
# Nor is an answer taken as complete sooner than this after asking: a historian a few brokers away
# gets the query only once the asker's advertisement has reached it, and then the next resend
# (every second), while a near one may have answered in milliseconds.
SETTLE = 2.0


class HistoryError(RemoteError):
    """One line: no historian answered, or every one that did reported an error."""


@dataclass(frozen=True, slots=True)
class Result:
    id: str
    time: float
    publication: Publication


@dataclass
class Answers:
    """The merged answer to one query asked at ``asked_at``, from every historian that replies."""

    asked_at: float
    timeout: float
    stall: float = STALL
    grace: float = GRACE
    settle: float = SETTLE
    # with TLS: why a final marker (the publication) is not a historian's signature, or None
    verify: Callable[[Publication], str | None] | None = None
    results: dict[str, Result] = field(default_factory=dict)
    staged: dict[str, dict[int, Answer]] = field(default_factory=dict)  # historian -> its results by seq
    heard: dict[str, float] = field(default_factory=dict)  # historian -> when it last said anything
    finished: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    first_finish: float | None = None

    def add(self, historian: str, answer: Answer, now: float, publication: Publication | None = None) -> None:
        """One answer of ``historian``; ``publication`` is the final marker as it came, whose
        signature :attr:`verify` checks."""
        if historian in self.finished:  # its answer is complete (a late heartbeat, a repeat's answer)
            return
        self.heard[historian] = now
        if answer.last:
            self.finished.add(historian)
            if self.first_finish is None:
                self.first_finish = now
            results = sorted(self.staged.pop(historian, {}).values(), key=lambda a: a.seq)
            rejected = self._rejected(answer, publication, results)
            if rejected is not None:
                self.errors.append(f"the answer of historian {historian} is refused: {rejected}")
                return
            if answer.error:
                self.errors.append(answer.error)
            for result in results:
                assert result.publication is not None
                self.results.setdefault(result.id, Result(result.id, result.at, result.publication))
        elif answer.publication is not None and self.verify is not None:  # taken once signed for
            self.staged.setdefault(historian, {}).setdefault(answer.seq, answer)
        elif answer.publication is not None:
            self.results.setdefault(answer.id, Result(answer.id, answer.at, answer.publication))

    def _rejected(self, final: Answer, publication: Publication | None, results: list[Answer]) -> str | None:
        if self.verify is None:
            return None
        if publication is None:
            return "its final marker is missing"
        reason = self.verify(publication)
        if reason is not None:
            return reason
        if final.count != len(results):
            return f"its {len(results)} results are not the {final.count} it signed for"
        entries = [(r.seq, r.id, r.at, r.publication) for r in results]
        if (final.digest or not final.error) and final.digest != result_digest(entries):  # type: ignore[arg-type]
            return "its results are not those it signed for (changed on the way)"
        return None

    def wait(self, now: float) -> float | None:
        """Seconds to listen before deciding again, or None: the answer is as complete as it gets."""
        if not self.heard:
            left = self.asked_at + self.timeout - now
            return left if left > 0 else None
        waits = [at + self.stall - now for h, at in self.heard.items() if h not in self.finished]
        if self.first_finish is not None:
            waits.append(max(self.first_finish + self.grace, self.asked_at + self.settle) - now)
        return min((w for w in waits if w > 0), default=None)

    @property
    def stalled(self) -> list[str]:
        """Once :meth:`wait` says stop: the historians that accepted but never finished."""
        return sorted(set(self.heard) - self.finished)

    def failure(self) -> str | None:
        """Once :meth:`wait` says stop: one line if there is no answer to show, else None."""
        if not self.heard:
            return f"no historian answered within {self.timeout:g} s"
        if not self.finished:
            return self._stopped(self.stalled)
        if len(self.errors) == len(self.finished):  # every historian that finished refused it
            return self.errors[0]
        return None

    def warnings(self) -> list[str]:
        """Once :meth:`wait` says stop: one line per historian missing from a shown answer."""
        return [f"{self._stopped([h])}; the answer may lack what only it kept" for h in self.stalled]

    def _stopped(self, historians: list[str]) -> str:
        who = f"historian{'s' * (len(historians) > 1)} {', '.join(historians)}"
        return f"{who} stopped answering (nothing for {self.stall:g} s)"

    def in_time_order(self) -> list[Result]:
        return sorted(self.results.values(), key=lambda r: (r.time, r.id))


def historian_of(publication_id: str) -> str:
    """``<broker>/<client>`` of ``<broker>/<client>/<ref>``: unique in the overlay (a broker refuses a
    second client of the same name), where two historians on two brokers may share a client name."""
    try:
        overlay_id = OverlayId.parse(publication_id)
    except ParseError:
        return ""
    return f"{overlay_id.broker}/{overlay_id.client}"


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
) -> Answers:
    """The historians' merged answer; HistoryError if none accepts or answers within ``timeout``
    seconds, none that did finishes, or all that finished report errors (a bad filter)."""
    tls = client.tls
    asker = "" if tls is None else tls.name
    results = await client.subscribe(result_subscription(query_id, asker))
    await client.advertise(query_advertisement(asker))
    query = query_publication(query_id, str(wanted), since, until, asker)
    verify = None
    if tls is not None:
        query = identity_author(tls.directory, tls.name).sign_publication(query)
        verify = historian_signature(load_ca(tls.directory), Revocations(tls.directory))
    answers = Answers(time.monotonic(), timeout, verify=verify)
    next_send = 0.0
    while (wait := answers.wait(now := time.monotonic())) is not None:
        if now >= next_send:
            await client.publish(query)
            next_send = now + retry
        delivery = await _next(results, max(min(wait, next_send - now), 0.01))
        if delivery is None:
            continue
        try:
            answer = parse_answer(delivery.publication)
        except ValueError:
            continue  # not a well-formed answer: not from a historian of this protocol
        historian = answer.historian or historian_of(delivery.id)
        answers.add(historian, answer, time.monotonic(), delivery.publication)
    await results.unsubscribe()
    failure = answers.failure()
    if failure is not None:
        raise HistoryError(failure)
    return answers


def historian_signature(
    ca: x509.Certificate, revocations: Revocations | None = None
) -> Callable[[Publication], str | None]:
    """Why a final marker is not signed by a historian of ``ca`` not revoked, or None."""

    def verify(final: Publication) -> str | None:
        try:
            signed_by(final, ca, time.time(), (HISTORIAN,), revocations)
        except Refusal as refusal:
            return refusal.reason
        return None

    return verify


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
