"""A broker's established links, by peer: each served until it ends, pinged while quiet, dropped
when silent.

Frames go to the router (through its driver) except the link's own: ``Ping`` is answered here,
and a frame that is not a message is answered with ``Refuse``, counted and logged (once a minute
per peer), while the link goes on. A peer that breaks framing cannot be trusted any more and is
disconnected; one too slow to read what it is sent too (``Link.too_slow``). With TLS a
cancel's signature is checked here, before the router sees (and the log records) it
(``broker.transport.cancels``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import replace

from broker.clock import Clock
from broker.errors import BadMessage, ProtocolError
from broker.messages import (
    Append,
    AppendReply,
    Cancel,
    Carry,
    Hello,
    InstallSnapshot,
    LinkDown,
    LinkUp,
    Piece,
    Ping,
    Pong,
    Refuse,
    VoteReply,
    VoteRequest,
)
from broker.throttle import LogThrottle
from broker.transport.cancels import CancelCheck
from broker.transport.driver import RouterDriver
from broker.transport.link import Link
from broker.transport.tls import Peer

__all__ = ["Peers"]

# a site's, never a router's
SITE_ONLY = frozenset({VoteRequest, VoteReply, Append, AppendReply, InstallSnapshot, Piece})


class Peers:
    def __init__(
        self,
        links: dict[str, Link],
        driver: RouterDriver,
        heartbeat: float,
        dead_after: float,
        counters: Counter[str],
        log: logging.LoggerAdapter[logging.Logger],
        clock: Clock,
        cancels: CancelCheck | None = None,
    ) -> None:
        self.links = links
        self.driver = driver
        self.heartbeat = heartbeat
        self.dead_after = dead_after
        self.counters = counters
        self.log = log
        self.clock = clock
        self.bad_message_log = LogThrottle()
        self.cancels = cancels  # with TLS: who signed a cancel
        self.cancel_log = LogThrottle()

    async def serve(self, link: Link, hop: str, hello: Hello, sent: Hello, who: Peer | None) -> None:
        """Run an established link until it ends; the router hears of it coming and going (with
        the peer's certificate name and role over TLS)."""
        if hop in self.links:
            await link.wait_closed()
            return
        if self.driver.session_ends(hop):  # it links again, to a new channel
            await link.flush_and_close("its session ended as it came back: link again for a new one")
            await link.wait_closed()
            return
        if hello.kind == "client" and self.driver.router.sessions.handed_over(hop, hello.noted):
            await link.flush_and_close("its session was handed over during the handshake: link again")
            await link.wait_closed()  # (the next hello is refused, saying so)
            return
        ours = self.driver.channel(hop)
        if ours != sent.epoch:  # our channel changed since the hello went: it named the wrong one
            await link.flush_and_close("the channel changed during the handshake")
            await link.wait_closed()
            return
        link.name = hop
        self.links[hop] = link
        self.log.info("%s %s connected", hello.kind, hop)
        resume = hello.took if hello.peer_epoch == ours else None
        identity, role = (who.name, who.role) if who is not None else ("", "")
        self.driver.feed(LinkUp(hello.kind == "broker", hello.epoch, resume, identity, role, name=ours), hop)
        try:
            client = None if hello.kind == "broker" else identity
            await link.read_all(lambda item: self._handle(link, hop, item, client))
        except ProtocolError as error:  # framing is broken: the stream cannot be trusted any more
            self.counters["bad_frames"] += 1
            self.log.warning("%s broke framing: %s", hop, error)
            link.send(Refuse("", str(error)))
            await link.flush_and_close(str(error))
        finally:
            await link.wait_closed()
            if link.too_slow:
                self.counters["slow_consumers"] += 1
                self.log.warning("%s disconnected: %s", hop, link.closed)
            self.counters["dropped.unsent"] += link.discarded_frames
            if self.links.get(hop) is link:
                del self.links[hop]
                self.log.info("%s disconnected: %s", hop, link.closed)
                self.driver.feed(LinkDown(), hop)
                self.driver.forget_gone()

    def _handle(self, link: Link, hop: str, item: object, client: str | None) -> None:
        """One frame of ``hop``'s link: a client's of identity ``client``, or (None) a broker's."""
        if isinstance(item, BadMessage):
            self.counters["bad_messages"] += 1
            unlogged = self.bad_message_log.admit(hop, self.clock.monotonic())
            if unlogged is not None:
                more = f" ({unlogged} more not logged since the last)" if unlogged else ""
                self.log.warning("bad message from %s: %s%s", hop, item, more)
            link.send(Refuse("", f"bad message: {item}"))
        elif isinstance(item, Ping):
            link.send(Pong())
        elif isinstance(item, Pong):
            pass
        elif isinstance(item, Hello):
            self.counters["bad_messages"] += 1
            link.send(Refuse("", "unexpected hello on an established link"))
        elif type(item) in SITE_ONLY:  # one lookup on every frame's way (messages are final classes)
            self.counters["bad_messages"] += 1
            link.send(
                Refuse("", f"a {type(item).__name__} is for the brokers of a site, and this link is not")
            )
        elif self.cancels is not None and (
            type(item) is Cancel or (type(item) is Carry and type(item.message) is Cancel)
        ):
            vouched = self._vouched(link, hop, item, client)  # type: ignore[arg-type]
            if vouched is not None:
                self.driver.feed(vouched, hop)
        else:
            self.driver.feed(item, hop)  # type: ignore[arg-type]

    def _vouched(
        self, link: Link, hop: str, item: Cancel | Carry, client: str | None
    ) -> Cancel | Carry | None:
        """A cancel, or a carried one, named for whoever signed it (``broker.transport.cancels``):
        a client's signed by anyone else, or not signed, is refused (None); a neighbour's that
        does not verify is named for nobody."""
        cancel = item.message if type(item) is Carry else item
        assert type(cancel) is Cancel and self.cancels is not None
        try:
            signer = self.cancels.signer(cancel, self.clock.time())
            if client is not None and signer != client:
                raise ValueError(f"the cancel is signed by {signer}, not by this client's identity {client}")
        except ValueError as error:
            signer, why = "", str(error)
            counter = "cancel_refused" if client is not None else "cancel_unverified"
            self.counters[counter] += 1
            if (unlogged := self.cancel_log.admit(hop, self.clock.monotonic())) is not None:
                more = f" ({unlogged} more not logged since the last)" if unlogged else ""
                self.log.warning(
                    "%s's cancel of %s is not %s: %s%s",
                    hop,
                    cancel.mid,
                    "taken" if client else "vouched for",
                    why,
                    more,
                )
            if client is not None:
                link.send(Refuse(cancel.id, why))
                return None
        named = replace(cancel, by=signer)
        return replace(item, message=named) if type(item) is Carry else named

    async def heartbeats(self) -> None:
        """Ping links that were quiet for ``heartbeat`` seconds; close those silent for ``dead_after``."""
        while True:
            await asyncio.sleep(self.heartbeat / 2)
            now = self.clock.monotonic()
            for link in list(self.links.values()):
                if now - link.last_received > self.dead_after:
                    self.counters["heartbeat_timeouts"] += 1
                    link.close(f"no traffic for {self.dead_after:g} s", abort=True)
                elif now - link.last_sent >= self.heartbeat or now - link.last_received >= self.heartbeat:
                    link.send(Ping())  # also to a peer that only receives: its Pong is its sign of life
