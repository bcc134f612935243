"""Getting a client onto a broker, and back on after a lost link: broker lists, backoff, events.

A client is given one or more brokers (``Client.connect([uri1, uri2])``, ``--broker A,B``,
``WFM_BROKER=A,B``). It dials them in turn, starting with the one it last used, and waits between
two attempts for a delay from :class:`Backoff`, the schedule neighbour brokers redial on too. What
happens is reported as :class:`ConnectionEvent` values to the caller's callback, so a daemon can
log it its own way. The randomness and the sleeping are parameters, so tests check the schedule
without waiting. The handshake itself is the transport's (``broker.transport.dialer``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from broker.clock import SYSTEM, Clock
from broker.errors import ConnectError
from broker.messages import Hello, WireMessage
from broker.transport.backoff import JITTER, Backoff
from broker.transport.dialer import dial as connect
from broker.transport.handshake import HandedOver, ServedElsewhere
from broker.transport.link import Link
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI

__all__ = [
    "DAEMON_BACKOFF",
    "JITTER",
    "Backoff",
    "BrokerList",
    "Brokers",
    "ConnectionEvent",
    "brokers",
    "dial",
    "dial_any",
]

Brokers = BrokerURI | str | Sequence[BrokerURI | str]  # one broker, or a list to fail over along


class BrokerList(tuple[BrokerURI, ...]):
    """Brokers to fail over along, printed as ``--broker`` takes them: comma-separated URIs; and
    how to reach them: ``tls``, the identity to show them (None: plain TCP). So ``--tls`` and
    ``--identity`` travel with ``--broker`` to every client a command makes, however deep."""

    tls: Identity | None = None

    def secured(self, tls: Identity | None) -> BrokerList:
        """The same brokers, reached with ``tls``."""
        secured = BrokerList(self)
        secured.tls = tls
        return secured

    def __str__(self) -> str:
        return ",".join(str(uri) for uri in self)


def brokers(value: Brokers) -> BrokerList:
    """The broker list in ``value``: a URI, a comma-separated text of URIs, or a sequence of
    either. ValueError naming the bad URI for anything else, or for an empty list."""
    if isinstance(value, BrokerList):
        return value
    items: Iterable[BrokerURI | str] = [value] if isinstance(value, BrokerURI | str) else value
    found: list[BrokerURI] = []
    for item in items:
        if isinstance(item, BrokerURI):
            found.append(item)
        else:
            found += [BrokerURI.parse(part) for part in str(item).split(",") if part.strip()]
    if not found:
        raise ValueError("no broker URI given")
    return BrokerList(found)


# a daemon (agent, historian) never gives up its broker, and is back soon after it is: what its
# broker held for it waits, and a delivery gap after a restart is the daemon's backoff
DAEMON_BACKOFF = Backoff(cap=1.0, attempts=None)


@dataclass(frozen=True, slots=True)
class ConnectionEvent:
    """``disconnected`` (the link to ``broker`` ended: ``reason``), ``reconnected`` (to
    ``broker``, everything live re-sent), ``closed`` (the client gave up: no more attempts) or
    ``refused`` (after a reconnection, ``broker`` refused to restore the advertisement or
    subscription known by the id ``request``, for ``reason``: it is no longer live)."""

    kind: str
    broker: str
    reason: str = ""
    request: str = ""


STAY_RETRY = 0.25  # seconds between two attempts at the broker a client stays with, at most
SENT_ON_RETRY = 0.05  # seconds before the next broker of a site, after one sent us on
SENT_ON_ROUNDS = 40  # refusals by brokers of a site (a site electing) that count as one failure
Greeting = Callable[[str], tuple[str, int]]  # broker id -> (its custody epoch we know, last seq taken)


def _no_custody(broker: str) -> tuple[str, int]:
    return "", 0


async def dial(
    target: BrokerURI,
    name: str,
    timeout: float,
    greeting: Greeting = _no_custody,
    tls: ssl.SSLContext | None = None,
    clock: Clock = SYSTEM,
    noted: str = "",
) -> tuple[Link, list[WireMessage]]:
    """A link to ``target`` after the handshake (its hello in ``link.peer``), and what the broker
    sent behind its hello; over TLS if given ``tls``, to a broker whose certificate names it.
    ConnectError, with the reason, if the broker cannot be reached, refuses or is someone else.
    The link reads ``clock`` (the client's) for when it last heard from the broker. ``noted``:
    the keys of our session we know were taken over (``Hello.noted``)."""
    peer_epoch, took = greeting(target.id)
    hello = Hello("client", name, peer_epoch=peer_epoch, took=took, noted=noted)
    link, leftovers, _ = await connect(target, hello, timeout, tls, clock=clock)
    return link, [item for item in leftovers if not isinstance(item, Exception)]


async def dial_any(
    targets: Sequence[BrokerURI],
    name: str,
    timeout: float,
    backoff: Backoff,
    start: int = 0,
    rng: Callable[[], float] = JITTER.random,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    greeting: Greeting = _no_custody,
    stay: float = 0.0,
    tls: ssl.SSLContext | None = None,
    clock: Clock = SYSTEM,
    noted: Callable[[], str] = str,
) -> tuple[int, Link, list[WireMessage]]:
    """Dial ``targets`` in turn from ``start``, waiting ``backoff.delay(failures)`` before each
    attempt, until one answers: its index, link and leftovers; while the waits add up to less
    than ``stay`` seconds, the attempts are all at ``start``. A broker of a site that sends us on
    (``ServedElsewhere``) is no failure while its site elects (within ``SENT_ON_ROUNDS``), and
    neither is a broker that cannot be reached meanwhile (most likely the one that died, which
    is why the site elects): the next is dialled at once until each was asked, then every
    ``SENT_ON_RETRY``, not after a backoff the dead one made grow, so the client is on the new
    leader soon after it serves. The broker a refusal names as the leader is dialled next: at
    once if it named another than itself and the attempt was not itself such a jump, else
    ``SENT_ON_RETRY`` later (a leader elected serves once caught up; names may be stale).
    ConnectError naming every broker once ``backoff.attempts`` attempts have failed; HandedOver
    at once (``noted`` says what the hello says we know of it: see ``Hello.noted``)."""
    failures = moved = sent_on = 0
    waited = 0.0
    errors: dict[BrokerURI, ConnectError] = {}
    ids = [target.id for target in targets]
    named: int | None = None  # the index of the broker the last refusal named as the leader
    at_once = False  # it named another broker than itself, not just after a jump: no wait
    while backoff.attempts is None or failures < backoff.attempts:
        delay = backoff.delay(failures, rng)
        if at_once:
            delay = 0.0
        elif named is not None:  # a leader not serving yet, or a name right after a jump
            delay = SENT_ON_RETRY
        elif sent_on:  # a broker of a site sent us on: each at once, then every SENT_ON_RETRY
            delay = 0.0 if sent_on < len(targets) else SENT_ON_RETRY  # (its site elects a leader)
        elif waited < stay:  # staying: try it often, so it is found soon after it is back
            delay = min(delay, STAY_RETRY, stay - waited)
        await sleep(delay)
        waited += delay
        if named is not None:
            index = named
        else:
            if sent_on or (failures and waited >= stay):
                moved += 1
            index = (start + moved) % len(targets)
        jumped, named, at_once = at_once, None, False
        try:
            link, leftovers = await dial(targets[index], name, timeout, greeting, tls, clock, noted())
        except HandedOver:
            raise
        except ServedElsewhere as error:  # not a failure while its site elects, within reason
            errors[targets[index]] = error
            sent_on += 1
            if sent_on % SENT_ON_ROUNDS == 0:
                failures += 1
            if error.leader in ids:  # that broker next (itself: elected, it serves soon)
                named = ids.index(error.leader)
                moved = (named - start) % len(targets)  # the walk goes on from there
                at_once = named != index and not jumped  # no two in a row: names may be stale
            continue
        except ConnectError as error:
            errors[targets[index]] = error
            if not sent_on:
                failures += 1
                continue
            sent_on += 1  # its site elects: one of its brokers is down, as one sending us on
            if sent_on % SENT_ON_ROUNDS == 0:
                failures += 1
            continue
        return index, link, leftovers
    if failures == 1:
        raise next(iter(errors.values()))  # one broker, tried once: its own reason says it all
    reasons = "; ".join(map(str, errors.values()))
    raise ConnectError(f"no broker answered after {failures} attempts: {reasons}")
