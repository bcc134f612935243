"""Getting a client onto a broker, and back on after a lost link: broker lists, backoff, events.

A client is given one or more brokers (``Client.connect([uri1, uri2])``, ``--broker A,B``,
``WFM_BROKER=A,B``). It dials them in turn, starting with the one it last used, and waits between
two attempts for a delay from :class:`Backoff`: exponential, capped, with jitter so that clients
cut off together do not all come back in the same instant. What happens is reported as
:class:`ConnectionEvent` values to the caller's callback, so a daemon can log it its own way.
The randomness and the sleeping are parameters, so tests check the schedule without waiting.
"""

from __future__ import annotations

import asyncio
import random
import ssl
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from broker.errors import BadMessage, ConnectError, LinkClosed, ProtocolError
from broker.messages import Refuse
from broker.transport.codec import Hello, WireMessage
from broker.transport.link import Link
from broker.transport.tls import Identity, peer
from broker.transport.uri import BrokerURI

__all__ = [
    "DAEMON_BACKOFF",
    "Backoff",
    "BrokerList",
    "Brokers",
    "ConnectionEvent",
    "brokers",
    "dial",
    "dial_any",
]

JITTER = random.Random()  # our own: a client's reconnections never touch the random module's state
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


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between connection attempts: ``first * factor**n`` for the n-th consecutive failure,
    at most ``cap``, each scaled by a random factor in ``[1 - jitter, 1 + jitter]`` and then capped
    again, so no wait ever exceeds ``cap``. ``attempts`` bounds the attempts of one reconnection
    (None: keep trying, as a daemon must).

    A reconnection keeps trying the broker it lost until it has waited ``failover_after``
    seconds in all, then fails over: that broker keeps the client's session (a subscriber that
    moves leaves what is held for it there), and a broker restarted from its log is back within
    a second or two. A publisher that moves at once is acknowledged by a broker whose part of
    the overlay may not yet know the subscriptions beyond the one that went down, and what it
    publishes there in the meantime reaches no one."""

    first: float = 0.1
    factor: float = 2.0
    cap: float = 5.0
    jitter: float = 0.5
    attempts: int | None = 60
    failover_after: float = 3.0

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.cap or self.factor < 1 or not 0 <= self.jitter <= 1:
            raise ValueError("backoff needs 0 < first <= cap, factor >= 1 and 0 <= jitter <= 1")
        if self.failover_after < 0:
            raise ValueError("failover_after must not be negative")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError("backoff attempts must be at least 1, or None for no limit")

    def delay(self, failures: int, rng: Callable[[], float] = JITTER.random) -> float:
        """Seconds to wait after ``failures`` consecutive failed attempts (the first wait is 0)."""
        if failures <= 0:
            return 0.0
        base = min(self.cap, self.first * self.factor ** min(failures - 1, 64))
        return min(self.cap, base * (1 - self.jitter + 2 * self.jitter * rng()))


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
Greeting = Callable[[str], tuple[str, int]]  # broker id -> (its custody epoch we know, last seq taken)


def _no_custody(broker: str) -> tuple[str, int]:
    return "", 0


async def dial(
    target: BrokerURI,
    name: str,
    timeout: float,
    greeting: Greeting = _no_custody,
    tls: ssl.SSLContext | None = None,
) -> tuple[Link, list[WireMessage]]:
    """A link to ``target`` after the handshake (its hello in ``link.peer``), and what the broker
    sent behind its hello; over TLS if given ``tls``, to a broker whose certificate names it.
    ConnectError, with the reason, if the broker cannot be reached, refuses or is someone else."""
    connected = False  # which step a timeout cut: the connection, or over TLS its handshake
    try:
        async with asyncio.timeout(timeout):  # not wait_for: a refusal racing a cancellation
            # (an agent stopping while its broker is down) swallowed the cancellation, and the
            # retries went on for ever
            reader, writer = await asyncio.open_connection(target.host, target.port)
            connected = True
            if tls is not None:
                try:
                    await writer.start_tls(tls, server_hostname=target.host)
                except BaseException:
                    writer.transport.abort()
                    raise
    except (OSError, TimeoutError) as error:
        reason = _unreached(error, timeout, tls if connected else None)
        raise ConnectError(f"cannot connect to {target}: {reason}") from None
    link = Link(reader, writer, target.id)
    if tls is not None:
        who = peer(writer.get_extra_info("peercert"))
        if who.role != "broker" or who.name != target.id:
            await link.wait_closed()
            raise ConnectError(f"{target}'s certificate is {who}, not broker {target.id}'s")
    peer_epoch, took = greeting(target.id)
    link.send(Hello("client", name, peer_epoch=peer_epoch, took=took))
    try:
        async with asyncio.timeout(timeout):
            items = await link.receive()
        if isinstance(items[0], BadMessage):
            raise items[0]
    except (TimeoutError, LinkClosed, ProtocolError) as error:
        await link.wait_closed()
        reason = _unanswered(error, timeout, tls)
        raise ConnectError(f"{target} did not answer the handshake: {reason}") from None
    first = items[0]
    if isinstance(first, Refuse):
        await link.wait_closed()
        raise ConnectError(f"{target} refused the connection: {first.reason}")
    if not isinstance(first, Hello) or first.id != target.id:
        await link.wait_closed()
        raise ConnectError(f"{target} answered as {getattr(first, 'id', first)!r}, not {target.id!r}")
    link.peer = first
    return link, [item for item in items[1:] if not isinstance(item, Exception)]


def _unreached(error: Exception, timeout: float, tls: ssl.SSLContext | None) -> str:
    """Why a connection failed (``tls``: once connected, in its TLS handshake). A timeout has no
    message of its own: under TLS it is most often a port that takes the connection and never
    answers, as a plain broker's handshake would be."""
    if isinstance(error, TimeoutError) and not str(error):
        if tls is not None:
            return f"no answer to the TLS handshake within {timeout:g} s: is a wfm broker listening there?"
        return f"no connection within {timeout:g} s: is the host up, and the port open?"
    return str(error) or type(error).__name__


def _unanswered(error: Exception, timeout: float, tls: ssl.SSLContext | None) -> str:
    """Why a handshake failed, in words a user can act on: most often the port is not a broker's."""
    if isinstance(error, ProtocolError):
        return f"it sent something that is not a wfm frame ({error}): is a wfm broker listening there?"
    if isinstance(error, LinkClosed):  # why a broker hangs up before its hello, most often
        hint = (
            "a broker that requires TLS closes plain connections: give --tls and --identity"
            if tls is None
            else "the broker did not accept our certificate: is it from the broker's CA, and valid?"
        )
        return f"it closed the connection ({error}; {hint})"
    return f"no answer within {timeout:g} s: is a wfm broker listening there?"


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
) -> tuple[int, Link, list[WireMessage]]:
    """Dial ``targets`` in turn from ``start``, waiting ``backoff.delay(failures)`` before each
    attempt, until one answers: its index, link and leftovers; while the waits add up to less
    than ``stay`` seconds, the attempts are all at ``start``. ConnectError naming every broker
    once ``backoff.attempts`` attempts have failed."""
    failures = moved = 0
    waited = 0.0
    errors: dict[BrokerURI, ConnectError] = {}
    while backoff.attempts is None or failures < backoff.attempts:
        delay = backoff.delay(failures, rng)
        if waited < stay:  # staying: try it often, so it is found soon after it is back
            delay = min(delay, STAY_RETRY, stay - waited)
        await sleep(delay)
        waited += delay
        if failures and waited >= stay:
            moved += 1
        index = (start + moved) % len(targets)
        try:
            link, leftovers = await dial(targets[index], name, timeout, greeting, tls)
        except ConnectError as error:
            errors[targets[index]] = error
            failures += 1
            continue
        return index, link, leftovers
    if failures == 1:
        raise next(iter(errors.values()))  # one broker, tried once: its own reason says it all
    reasons = "; ".join(map(str, errors.values()))
    raise ConnectError(f"no broker answered after {failures} attempts: {reasons}")
