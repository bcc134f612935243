"""Who gets into a broker: connections in handshake capped, TLS, the hello, the certificate behind it.

With an identity every link is mutual TLS and the peer is who its certificate says: a TLS
handshake that fails (a plain-TCP peer, a certificate from another CA, expired or revoked) and a
hello that claims more than the certificate (``handshake.impostor``) are refused, counted
(``tls_refused``, ``identity_refused``, ``revoked_refused``) and logged once per peer address. At
most so many connections may be in handshake at once (``admission``), counted as
``handshake_refused``. And a link whose peer's certificate is revoked while it runs is closed:
the gate looks at the revocation list every ``RECHECK`` seconds, no restart needed.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from broker.clock import Clock
from broker.errors import LinkClosed, ProtocolError
from broker.messages import Hello, Refuse
from broker.throttle import LogThrottle
from broker.transport.admission import MAX_HANDSHAKES, MAX_HANDSHAKES_PER_ADDRESS, Admission
from broker.transport.handshake import (
    HANDSHAKE_TIMEOUT,
    X509_V_ERR_CERT_REVOKED,
    impostor,
    opening,
    tls_failure,
)
from broker.transport.link import Link, Reader, Writer
from broker.transport.network import Accepted
from broker.transport.tls import Identity, Peer, peer

__all__ = ["Gate", "Shaken"]

Shaken = tuple[Link, Hello, Hello, Peer | None]  # the link, the peer's hello, ours, its certificate
Answer = Callable[[Hello], Hello | str]  # the peer's hello -> ours, or why it is refused
Spawn = Callable[[Coroutine[Any, Any, None]], None]


@dataclass(eq=False, slots=True)
class _Connection:
    """A connection in handshake: its handler (cancelled to make room for another), the socket,
    and whether it was so cancelled."""

    task: asyncio.Task[Any]
    accepted: Accepted
    evicted: bool = False


class Gate:
    def __init__(
        self,
        tls: Identity | None,
        queue_limit: int,
        counters: Counter[str],
        log: logging.LoggerAdapter[logging.Logger],
        clock: Clock,
        max_handshakes: int = MAX_HANDSHAKES,
        max_handshakes_per_address: int = MAX_HANDSHAKES_PER_ADDRESS,
    ) -> None:
        self.tls = tls
        self.queue_limit = queue_limit
        self.counters = counters
        self.log = log
        self.clock = clock
        self.admission: Admission[_Connection] = Admission(max_handshakes, max_handshakes_per_address)
        self.refusal_log = LogThrottle(burst=1)  # TLS and identity refusals, by peer address
        self.verified: dict[Link, Peer] = {}  # every TLS link's peer, from its handshake on
        self._swept: frozenset[int] = frozenset()  # the revoked serials links were last checked against
        self._spawn: Spawn | None = None  # how the watch runs the closing of a revoked link

    async def accept(self, reader: Reader, writer: Writer, answer: Answer) -> Shaken | None:
        """The handshake of an accepted connection without TLS (the hellos); None if it failed or
        was refused (counted, logged, closed)."""
        assert self.tls is None
        return await self._hello(reader, writer, None, answer)

    async def accept_tls(self, accepted: Accepted, answer: Answer) -> Shaken | None:
        """The handshakes of an accepted connection nothing has read yet (admission, TLS, the
        hellos); None if one failed or was refused (counted, logged, closed)."""
        assert self.tls is not None
        task = asyncio.current_task()
        assert task is not None
        connection = _Connection(task, accepted)
        verdict = self.admission.begin(accepted.address[0], connection)
        if (evicted := verdict.evicted) is not None:
            evicted.evicted = True
            self.refused(evicted.accepted.address, "handshake_refused", verdict.reason)
            evicted.task.cancel()
        if not verdict.admitted:
            self.refused(accepted.address, "handshake_refused", verdict.reason)
            accepted.close()
            return None
        try:
            try:
                reader, writer = await accepted.secured(self.tls.server, HANDSHAKE_TIMEOUT)
            except (OSError, ssl.SSLError, TimeoutError) as error:
                revoked = getattr(error, "verify_code", None) == X509_V_ERR_CERT_REVOKED
                counter = "revoked_refused" if revoked else "tls_refused"
                self.refused(accepted.address, counter, f"TLS handshake failed: {tls_failure(error)}")
                return None
            who = peer(writer.get_extra_info("peercert"))
            return await self._hello(reader, writer, who, answer)
        except asyncio.CancelledError:
            if not connection.evicted:
                raise
            task.uncancel()  # closed to make room: counted and logged already
            accepted.close()
            return None
        finally:
            self.admission.end(connection)

    async def _hello(self, reader: Reader, writer: Writer, who: Peer | None, answer: Answer) -> Shaken | None:
        link = Link(reader, writer, "incoming", self.queue_limit, clock=self.clock)
        if who is not None:
            self.verified[link] = who
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                hello, link.pending = opening(await link.receive())
        except asyncio.CancelledError:
            link.close("cancelled in its handshake", abort=True)
            await self._unshaken(link)
            raise
        except (TimeoutError, LinkClosed, ProtocolError) as error:
            self.counters["handshake_failed"] += 1
            await self._refuse(link, f"handshake failed: {error or 'timeout'}")
            return None
        if link.closed is not None:  # revoked while it said hello
            await self._unshaken(link)
            return None
        if who is not None and (reason := impostor(hello, who)):
            self.refused(_peer_address(writer), "identity_refused", reason)
            await self._refuse(link, reason)
            return None
        ours = answer(hello)
        if isinstance(ours, str):
            await self._refuse(link, ours)
            return None
        link.send(ours)
        return link, hello, ours, who

    async def _refuse(self, link: Link, reason: str) -> None:
        link.send(Refuse("", reason))
        await link.flush_and_close(reason)
        await self._unshaken(link)

    async def _unshaken(self, link: Link) -> None:
        self.verified.pop(link, None)
        await link.wait_closed()

    def refused(self, address: tuple[str, int], counter: str, reason: str) -> None:
        """Count a refused peer; log it once per address (then once a minute with how many more)."""
        self.counters[counter] += 1
        unlogged = self.refusal_log.admit(str(address[0]), self.clock.monotonic())
        if unlogged is not None:
            more = f" ({unlogged} more from there not logged since the last)" if unlogged else ""
            self.log.warning("refused %s:%s: %s%s", address[0], address[1], reason, more)

    def revocations(self, spawn: Spawn) -> Coroutine[Any, Any, None]:
        """The task that closes links whose peer's certificate is revoked from now on."""
        assert self.tls is not None
        self._swept = self.tls.revocations.serials
        self._spawn = spawn
        return self._watch(self.tls)

    def verify(self, link: Link, who: Peer) -> None:
        """Watch a link we dialled, whose peer's certificate says ``who``; one revoked while we
        shook hands is closed at once."""
        self.verified[link] = who
        self._cut_if_revoked(link, who, self._swept)

    async def _watch(self, tls: Identity) -> None:
        """Every ``RECHECK`` seconds: the revocation list again (the TLS contexts are rebuilt when
        it changed, so new handshakes check the new one), and the links whose peer's certificate
        it revokes now are closed, one line logged and counted each."""
        while True:
            await asyncio.sleep(tls.revocations.recheck)
            tls.refresh(now=True)
            serials = tls.revocations.serials
            if serials is not self._swept:
                self._swept = serials
                for link, who in list(self.verified.items()):
                    self._cut_if_revoked(link, who, serials)

    def _cut_if_revoked(self, link: Link, who: Peer, serials: frozenset[int]) -> None:
        if who.serial in serials and link.closed is None and self._spawn is not None:
            self.counters["revoked_refused"] += 1
            self.log.warning("disconnected %s: certificate %s is revoked", link.name, who)
            link.send(Refuse("", f"certificate {who.name} is revoked"))
            self._spawn(link.flush_and_close("certificate revoked"))


def _peer_address(writer: Writer) -> tuple[str, int]:
    address = writer.get_extra_info("peername") or ("?", 0)
    return str(address[0]), int(address[1])
