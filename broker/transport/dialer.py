"""Dialling a broker: the connection, TLS, and the hello exchange, for a client and a neighbour alike.

The checks and the explanations are the pure ``handshake`` module's; this adapter only connects,
reads and writes. Every failure is a ConnectError with its reason, a ``Misconfigured`` one when
trying again would fail the same way.
"""

from __future__ import annotations

import asyncio
import ssl

from broker.clock import SYSTEM, Clock
from broker.errors import BadMessage, ConnectError, LinkClosed, ProtocolError
from broker.messages import Hello, WireMessage
from broker.transport.handshake import Misconfigured, answer, not_the_broker, unanswered, unreached
from broker.transport.link import Link
from broker.transport.network import TCP, Network
from broker.transport.tls import Peer, peer
from broker.transport.uri import BrokerURI

__all__ = ["Dialled", "dial", "greet"]

Dialled = tuple[Link, list[WireMessage | BadMessage], Peer | None]


async def dial(
    target: BrokerURI,
    hello: Hello,
    timeout: float,
    tls: ssl.SSLContext | None = None,
    queue_limit: int = 64 << 20,
    clock: Clock = SYSTEM,
    network: Network = TCP,
) -> Dialled:
    """A link to ``target`` after the handshake (its hello in ``link.peer``), what the broker
    sent behind its hello, and over TLS (given ``tls``) its certificate, which names it."""
    connected = False  # which step a timeout cut: the connection, or over TLS its handshake
    try:
        async with asyncio.timeout(timeout):  # not wait_for: a refusal racing a cancellation
            # (an agent stopping while its broker is down) swallowed the cancellation, and the
            # retries went on for ever
            reader, writer = await network.open(target)
            connected = True
            if tls is not None:
                assert isinstance(writer, asyncio.StreamWriter)  # TLS needs a socket
                try:
                    await writer.start_tls(tls, server_hostname=target.host)
                except BaseException:
                    writer.transport.abort()
                    raise
    except (OSError, TimeoutError) as error:
        reason = unreached(error, timeout, tls is not None and connected)
        failure = Misconfigured if isinstance(error, ssl.SSLError) else ConnectError
        raise failure(f"cannot connect to {target}: {reason}") from None
    link = Link(reader, writer, target.id, queue_limit, clock=clock)
    who = None if tls is None else peer(writer.get_extra_info("peercert"))
    if who is not None and (reason := not_the_broker(target, who)):
        await link.wait_closed()
        raise Misconfigured(reason)
    return link, await greet(link, target, hello, timeout, tls is not None), who


async def greet(
    link: Link, target: BrokerURI, hello: Hello, timeout: float, tls: bool = False
) -> list[WireMessage | BadMessage]:
    """Say ``hello`` on a fresh ``link`` to ``target`` and take its answer (into ``link.peer``):
    what it sent behind its hello. The link is closed if the handshake fails."""
    link.send(hello)
    try:
        async with asyncio.timeout(timeout):
            received = await link.receive()
        link.peer, leftovers = answer(target, received)
    except (TimeoutError, LinkClosed, ProtocolError) as error:
        await link.wait_closed()
        failure = Misconfigured if isinstance(error, ProtocolError) else ConnectError
        reason = unanswered(error, timeout, tls)
        raise failure(f"{target} did not answer the handshake: {reason}") from None
    except ConnectError:  # refused (by a broker of a site that does not serve it now, routinely)
        await link.wait_closed()
        raise
    return leftovers
