"""The broker process: ``RouterService``, the sans-IO ``Router`` behind asyncio TCP links.

This adapter owns what the router must not: sockets, the clock, timers. It accepts clients and
neighbour brokers (after a ``Hello`` handshake), dials the neighbours it was told about and keeps
redialling them with backoff, pings every link and drops one that stays silent, and turns every
frame into a ``router.handle`` call whose output it queues on the target links. Nothing a peer
sends can stop it: bad frames are answered with ``Refuse``, counted and logged; a peer that breaks
framing is disconnected; even a bug in the router costs one message, not the broker.

With a data directory (``persistence``) every input is logged before it is handled, and the
router's output waits for the group commit that covers it: one fsync for everything that
arrived while the last one ran. A broker killed and restarted comes back from its log.

With an identity (``tls``) every link is mutual TLS and the peer is who its certificate says:
a TLS handshake that fails (a plain-TCP peer, a certificate from another CA or expired) and a
Hello that claims more than the certificate (a broker without a broker certificate, a client id
that is not its name) are refused, counted (``link.tls_refused``, ``link.identity_refused``) and
logged once per peer address; the router hears the certificate's name and role in ``LinkUp``.
Without one the broker listens on loopback only, unless told it is ``insecure``.

With an identity, a certificate that ``DIR/ca.crl`` revokes fails the handshake, and a link
whose peer's certificate is revoked while it runs is closed (both counted as
``link.revoked_refused``): the broker looks at the file every ``RECHECK`` seconds, no restart
needed. And at most ``max_handshakes`` connections may be in handshake (TLS, then hello) at once,
at most ``max_handshakes_per_address`` of them from one address: past the second the new
connection is closed, past the first the oldest one of the address that holds the most is (so a
client whose handshake takes milliseconds gets in while half-open connections hold the rest);
both counted as ``link.handshake_refused``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import secrets
import ssl
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.durable.offload import Offload
from broker.errors import BadMessage, LinkClosed, LocalError, ProtocolError
from broker.messages import Carry, LinkDown, LinkUp, Message, Refuse, StatusReply, Tick, Took
from broker.routing.acl import Policy
from broker.routing.router import Router
from broker.routing.tables import Output
from broker.throttle import LogThrottle
from broker.transport.codec import Hello, Ping, Pong
from broker.transport.link import SLOW_CONSUMER, Link
from broker.transport.persistence import CHECKPOINT_RECORDS, Fsync, RouterLog
from broker.transport.tls import Identity, Peer, peer
from broker.transport.uri import BrokerURI

__all__ = ["RouterService", "loopback"]

HANDSHAKE_TIMEOUT = 5.0  # seconds for the TLS handshake, and again for the hello after it
# Connections in handshake at once (with TLS), and from one address. A handshake on a LAN takes
# milliseconds; an attacker's half-open connections would each hold a task and a socket for
# HANDSHAKE_TIMEOUT. 64 is far more than a broker's clients have in handshake at once, even all
# reconnecting after a restart (one closed retries with backoff); 16 per address keeps one host
# from taking them all.
MAX_HANDSHAKES = 64
MAX_HANDSHAKES_PER_ADDRESS = 16
X509_V_ERR_CERT_REVOKED = 23  # OpenSSL's verify code for a certificate a CRL revokes
_JITTER = random.Random()  # our own: redials never touch the random module's state
TICK = 1.0  # seconds between the router's Ticks: how late a client session may expire
QUIET = 0.05  # seconds without an input after which the router's pending index entries are merged
REDIAL_CAP = 0.25  # seconds between two dials of a neighbour, at most (times 0.5-1.5): a neighbour
# restarted from its log is back in a second or two, and what it holds waits for the link; at 1 s
# the link came back 0.8-1.2 s after the restarted broker listened (reliability benchmark), and a
# refused connect four times a second costs nothing worth saving


@dataclass(eq=False, slots=True)
class _Handshake:
    """A connection in handshake: where from, its handler (cancelled to make room for another),
    its stream, and whether it was so cancelled."""

    address: str
    task: asyncio.Task[Any]
    writer: asyncio.StreamWriter
    evicted: bool = False


def loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class RouterService:
    def __init__(
        self,
        uri: BrokerURI,
        neighbors: Sequence[BrokerURI] = (),
        covering: str = "off",
        advertisement_covering: bool = False,
        heartbeat: float = 1.0,
        dead_after: float = 4.0,
        queue_limit: int = 64 << 20,
        clock: Callable[[], float] = time.time,
        composite_max_waiting: int = 10_000,
        composite_max_age: float | None = None,
        session_grace: float = 0.0,
        epoch: str | None = None,
        data: Path | None = None,
        fsync: Fsync = "group",
        checkpoint_every: int = CHECKPOINT_RECORDS,
        policy: Policy | None = None,
        tls: Identity | None = None,
        insecure: bool = False,
        max_handshakes: int = MAX_HANDSHAKES,
        max_handshakes_per_address: int = MAX_HANDSHAKES_PER_ADDRESS,
    ) -> None:
        if any(n.id == uri.id for n in neighbors):
            raise ValueError(f"broker {uri.id} cannot be its own neighbour")
        if tls is None and not insecure and not loopback(uri.host):
            raise LocalError(
                f"refusing to listen on {uri.host} without TLS: anyone who reaches it could join the"
                " overlay; give --tls DIR --identity NAME, or --insecure to accept that"
            )
        if tls is not None and tls.name != uri.id:
            raise LocalError(f"broker {uri.id} needs an identity of its own name, not {tls.name}")
        self.tls = tls
        self.uri = uri
        self.neighbors = list(neighbors)
        self.router = Router(
            uri.id,
            covering,
            advertisement_covering,
            composite_max_waiting,
            composite_max_age,
            session_grace,
            epoch or secrets.token_hex(8),  # a broker without its log starts a new custody epoch
            policy,
        )
        # opened: one broker per directory
        self.log_file = None if data is None else RouterLog(data, fsync, checkpoint_every)
        # outputs waiting for the commit of their inputs, with the links they were meant for
        self._held: list[tuple[Output, dict[str, Link | None]]] = []
        self._announced: dict[str, str] = {}  # hop -> the name our hello gave a new channel
        self._taken: dict[str, tuple[str, int]] = {}  # hop -> its channel, last Took sent (logged)
        self._commit_wanted = asyncio.Event()
        self._input_seen = asyncio.Event()  # cleared by the settling task (_settle_when_quiet)
        self._offload = Offload()  # where commits run: on the loop while the disk is fast
        self.heartbeat = heartbeat
        self.dead_after = dead_after
        self.queue_limit = queue_limit
        self.clock = clock
        self.links: dict[str, Link] = {}
        self.counters: Counter[str] = Counter()
        self.log = logging.LoggerAdapter(logging.getLogger("broker"), {"broker": uri.id})
        self.bad_message_log = LogThrottle()
        self.refusal_log = LogThrottle(burst=1)  # TLS and identity refusals, by peer address
        self.unsendable_log = LogThrottle(burst=1)  # messages too large to send, all together
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[asyncio.Task[Any]] = set()  # accepted-connection handlers
        self.max_handshakes = max_handshakes
        self.max_handshakes_per_address = max_handshakes_per_address
        self._handshakes: dict[str, dict[_Handshake, None]] = {}  # by address, oldest first
        self._handshaking = 0
        self._verified: dict[Link, Peer] = {}  # every TLS link's peer, from its handshake on
        self._swept: frozenset[int] = frozenset()  # the revoked serials links were last checked against

    # lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.log_file is not None:
            self._restore(self.log_file)
        self._server = await asyncio.start_server(self._accept, self.uri.host, self.uri.port)
        kept = "in memory only" if self.log_file is None else f"in {self.log_file.directory}"
        self.log.info("%s listening, its state %s", self.uri, kept)
        for neighbor in self.neighbors:
            self._spawn(self._dial(neighbor))
        self._spawn(self._heartbeats())
        self._spawn(self._settle_when_quiet())
        self._spawn(self._ticks(min(TICK, self.router.sessions.grace or TICK)))
        if self.tls is not None:
            self._swept = self.tls.revocations.serials
            self._spawn(self._revocations(self.tls))

    def _restore(self, log_file: RouterLog) -> None:
        """The router as it was, configured as this process was told; every link it had is down
        now (its peers reconnect and resume)."""
        fresh = self.router
        self.router = log_file.restore(lambda: fresh)
        if self.router.id != self.uri.id:
            raise LocalError(
                f"{log_file.directory} holds broker {self.router.id}'s state, not {self.uri.id}'s"
            )
        self.router.configure_like(fresh, str(log_file.directory))
        for hop, channel in list(self.router.custody.channels.items()):
            if channel.up:
                self._feed(LinkDown(), hop)
        for hop, channel in self.router.custody.channels.items():  # all of it in the log; no
            self._taken[hop] = (channel.name, channel.acked)  # stand-in holds a Took back now
        self._spawn(self._commits(log_file))

    async def _commits(self, log_file: RouterLog) -> None:
        """Group commit: what arrived while one commit ran goes in the next; outputs wait for it."""
        failures = 0
        while True:
            await self._commit_wanted.wait()
            self._commit_wanted.clear()
            held, self._held = self._held, []
            try:
                await self._offload.run(log_file.wal.commit)
            except OSError as error:  # a full disk: nothing is acknowledged until it commits
                self._held[:0] = held
                self._commit_wanted.set()
                self.counters["log_errors"] += 1
                if failures == 0 or failures % 60 == 0:
                    self.log.error(
                        "cannot write the log in %s: %s; holding %d outputs",
                        log_file.directory,
                        error,
                        len(self._held),
                    )
                failures += 1
                await asyncio.sleep(min(1.0, 0.05 * 2**failures))
                continue
            failures = 0
            self.counters["log_commits"] += 1
            # one Took per peer for the whole group: cumulative, the last covers the others
            last_took = {target: out for output, _ in held for target, out in output if type(out) is Took}
            for output, links in held:
                self._send(output, links, last_took)
            if log_file.due():
                try:  # in the loop: the snapshot must be of the state the log has reached
                    log_file.checkpoint(self.router)
                    self.counters["log_checkpoints"] += 1
                except OSError as error:  # the log goes on; the next commit or checkpoint tries again
                    self.counters["log_errors"] += 1
                    self.log.error("cannot checkpoint the log in %s: %s", log_file.directory, error)

    async def stop(self) -> None:
        """Close every link, let the connection handlers finish, then cancel the timers."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            if task not in self._connections:
                task.cancel()
        links = list(self.links.values())
        for link in links:
            link.close("broker stopping")
        await asyncio.gather(*(link.wait_closed() for link in links))
        if self._connections:
            await asyncio.wait(self._connections, timeout=2.0)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        if self.log_file is not None:
            self.log_file.checkpoint(self.router)  # a clean stop: the restart replays nothing
            self.log_file.close()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A timer or the committer must not die in silence: the broker would stop acknowledging."""
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            self.counters["task_errors"] += 1
            self.log.error("%s failed: %r", task.get_coro(), error, exc_info=error)

    def status(self, reported: dict[str, Any] | None = None) -> dict[str, object]:
        """The router's status (``reported``: one it answered already) with what only the process
        knows: its URI, the URIs of the neighbours it dials (so a dashboard can walk the overlay
        from one broker to the next; not in a summary for a client that may not see detail) and
        the link counters."""
        status = self.router.status() if reported is None else dict(reported)
        status["uri"] = str(self.uri)
        if "withheld" not in status:  # a summary (``Router.summary``): not where the neighbours are
            status["neighbor_uris"] = {neighbor.id: str(neighbor) for neighbor in self.neighbors}
        status["counters"] = {**status["counters"], **{f"link.{k}": v for k, v in self.counters.items()}}
        return status

    # feeding the router -------------------------------------------------------------------------

    def _feed(self, message: Message, hop: str) -> None:
        self._input_seen.set()
        now = self.clock()
        if self.log_file is not None:
            self.log_file.record(message, hop, now)
        try:
            output = self.router.handle(message, hop, now)
        except Exception:  # a router bug must cost one message, not the broker
            self.counters["router_errors"] += 1
            self.log.exception("router failed on %s from %s", type(message).__name__, hop)
            return
        if self.log_file is None:
            self._send(output, self.links)
        elif output:  # with the links it was meant for: one replaced meanwhile gets it resent
            self._held.append((output, {target: self.links.get(target) for target, _ in output}))
            self._commit_wanted.set()

    def _send(
        self, output: Output, links: Mapping[str, Link | None], last_took: Mapping[str, Took] | None = None
    ) -> None:
        """Onto the links; of the custody answers to one peer only the last matters (of this
        output, or of ``last_took``: a group commit's). What was carried or taken for a link that
        has been replaced since is not sent: the peer's hello on the new link said what it took,
        and what it had not is sent again, in order, by the router; our next Took covers what
        this one did."""
        if last_took is None:
            last_took = {target: out for target, out in output if type(out) is Took}
        for target, out in output:
            kind = type(out)  # exact types: messages are final dataclasses, and this runs per message
            if kind is Took:
                if last_took[target] is not out:
                    continue
                channel = self.router.custody.channels.get(target)
                said = self._taken.get(target, ("", 0))
                if channel is not None and (said[0] != channel.name or out.seq > said[1]):
                    # in the log: a hello may say so (never less: a restore's LinkDowns may have
                    # released a Took that says less than the one ``_restore`` found)
                    self._taken[target] = (channel.name, out.seq)
            elif kind is StatusReply:
                out = StatusReply(out.ref, self.status(out.status))  # type: ignore[union-attr]
            link = self.links.get(target)
            if (kind is Carry or kind is Took) and link is not links.get(target):
                # a Took too: on the new link it could overtake what we resend there (our answers
                # to what we took), and the peer would end a stand-in too early (``standins``)
                self.counters["unsent.relinked"] += 1
                continue
            try:  # the router never emits LinkUp/LinkDown; a message for a link that went is counted
                if link is None or not link.send(out):  # type: ignore[arg-type]
                    self.counters["dropped.link_gone"] += 1
            except (ProtocolError, TypeError) as error:  # it cannot be encoded: the next one can
                self._unsendable(target, out, error)

    def _unsendable(self, target: str, message: object, error: Exception) -> None:
        """A message that cannot be encoded (too large for a frame: a composite's firing of many
        publications) must cost itself only, not the committer task or the link it was for."""
        self.counters["dropped.unsendable"] += 1
        if isinstance(message, Carry):
            self.router.custody.unsendable(target, message.seq)
        unlogged = self.unsendable_log.admit("", time.monotonic())
        if unlogged is not None:
            kind = type(message.message if isinstance(message, Carry) else message).__name__
            more = f" ({unlogged} more not logged since the last)" if unlogged else ""
            self.log.error("dropped a %s for %s, it can never be sent: %s%s", kind, target, error, more)

    # links --------------------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)
        handshake: _Handshake | None = None
        if self.tls is not None:
            handshake = self._handshake_begins(task, writer)
            if handshake is None:
                return
        try:
            shaken = await self._handshake(reader, writer)
        except asyncio.CancelledError:
            if handshake is None or not handshake.evicted:
                raise
            task.uncancel()  # closed to make room: counted and logged already
            writer.transport.abort()
            return
        finally:
            if handshake is not None:
                self._handshake_ends(handshake)
        if shaken is not None:
            link, hello, sent, who = shaken
            try:
                await self._serve(link, hello.id, hello, sent, who)
            finally:
                self._verified.pop(link, None)

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[Link, Hello, Hello, Peer | None] | None:
        """TLS (with an identity), then the peer's hello and ours: the link, both hellos and the
        peer's certificate; None if it failed (refused, counted, closed)."""
        who: Peer | None = None
        if self.tls is not None:
            # the first await: asyncio hands the bytes already received to the TLS layer only
            # if nothing read the stream before it
            try:
                await writer.start_tls(self.tls.server, ssl_handshake_timeout=HANDSHAKE_TIMEOUT)
            except (OSError, ssl.SSLError, TimeoutError) as error:
                revoked = getattr(error, "verify_code", None) == X509_V_ERR_CERT_REVOKED
                counter = "revoked_refused" if revoked else "tls_refused"
                self._refused(writer, counter, f"TLS handshake failed: {_handshake_error(error)}")
                # start_tls closed the socket; the stream never hears of it (its protocol was
                # handed to the TLS layer), so waiting for it to close would wait for ever
                writer.close()
                return None
            who = peer(writer.get_extra_info("peercert"))
        link = Link(reader, writer, "incoming", self.queue_limit)
        if who is not None:
            self._verified[link] = who
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                hello = await self._first(link)
        except asyncio.CancelledError:
            link.close("cancelled in its handshake", abort=True)
            await self._unshaken(link)
            raise
        except (TimeoutError, LinkClosed, ProtocolError) as error:
            self.counters["handshake_failed"] += 1
            link.send(Refuse("", f"handshake failed: {error or 'timeout'}"))
            await link.flush_and_close("handshake failed")
            await self._unshaken(link)
            return None
        if link.closed is not None:  # revoked while it said hello
            await self._unshaken(link)
            return None
        hop = hello.id
        if who is not None and (reason := _impostor(hello, who)):
            self._refused(writer, "identity_refused", reason)
            link.send(Refuse("", reason))
            await link.flush_and_close(reason)
            await self._unshaken(link)
            return None
        if hop == self.uri.id or hop in self.links:
            link.send(Refuse("", f"{hello.kind} id {hop!r} is already connected"))
            await link.flush_and_close(f"duplicate id {hop}")
            await self._unshaken(link)
            return None
        sent = self._hello(hop)
        link.send(sent)
        return link, hello, sent, who

    async def _unshaken(self, link: Link) -> None:
        self._verified.pop(link, None)
        await link.wait_closed()

    def _handshake_begins(self, task: asyncio.Task[Any], writer: asyncio.StreamWriter) -> _Handshake | None:
        """Room for one more connection in handshake, or None (it was closed, counted and logged).
        Past ``max_handshakes_per_address`` from its address the new one is closed; past
        ``max_handshakes`` the oldest of the address that holds the most is, so that a client
        whose handshake takes milliseconds gets in while half-open connections hold the rest."""
        address = str((writer.get_extra_info("peername") or ("?", 0))[0])
        mine = self._handshakes.get(address, {})
        if len(mine) >= self.max_handshakes_per_address:
            self._refused(
                writer, "handshake_refused", f"{len(mine)} connections from there in handshake already"
            )
            writer.transport.abort()
            return None
        if self._handshaking >= self.max_handshakes:
            busiest = max(self._handshakes.values(), key=lambda handshakes: len(handshakes))
            oldest = next(iter(busiest))
            oldest.evicted = True
            self._handshake_ends(oldest)
            self._refused(
                oldest.writer,
                "handshake_refused",
                f"{self.max_handshakes} connections in handshake: closed the oldest of the busiest address",
            )
            oldest.task.cancel()
        handshake = _Handshake(address, task, writer)
        self._handshakes.setdefault(address, {})[handshake] = None
        self._handshaking += 1
        return handshake

    def _handshake_ends(self, handshake: _Handshake) -> None:
        mine = self._handshakes.get(handshake.address)
        if mine is not None and handshake in mine:
            del mine[handshake]
            self._handshaking -= 1
            if not mine:
                del self._handshakes[handshake.address]

    def _refused(self, writer: asyncio.StreamWriter, counter: str, reason: str) -> None:
        """Count a refused peer; log it once per address (then once a minute with how many more)."""
        self.counters[counter] += 1
        address = writer.get_extra_info("peername") or ("?", 0)
        unlogged = self.refusal_log.admit(str(address[0]), time.monotonic())
        if unlogged is not None:
            more = f" ({unlogged} more from there not logged since the last)" if unlogged else ""
            self.log.warning("refused %s:%s: %s%s", address[0], address[1], reason, more)

    async def _first(self, link: Link) -> Hello:
        items = await link.receive()
        first = items[0]
        if isinstance(first, BadMessage) or not isinstance(first, Hello):
            raise ProtocolError(f"expected hello, got {first}")
        link.pending.extend(items[1:])  # a client may pipeline its first requests behind the hello
        return first

    async def _dial(self, neighbor: BrokerURI) -> None:
        delay = 0.1
        while True:
            link: Link | None = None
            if neighbor.id not in self.links:
                try:
                    reader, writer = await asyncio.open_connection(
                        neighbor.host,
                        neighbor.port,
                        ssl=None if self.tls is None else self.tls.client,
                        ssl_handshake_timeout=None if self.tls is None else HANDSHAKE_TIMEOUT,
                    )
                    who = None if self.tls is None else peer(writer.get_extra_info("peercert"))
                    link = Link(reader, writer, neighbor.id, self.queue_limit)
                    if who is not None and (who.role != "broker" or who.name != neighbor.id):
                        raise ProtocolError(f"{neighbor}'s certificate is {who}, not broker {neighbor.id}")
                    if who is not None:
                        self._verified[link] = who
                    sent = self._hello(neighbor.id)
                    link.send(sent)
                    async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                        reply = await self._first(link)
                    if reply.id != neighbor.id or reply.kind != "broker":
                        raise ProtocolError(f"{neighbor} answered as {reply.kind} {reply.id!r}")
                    delay = 0.1
                    await self._serve(link, neighbor.id, reply, sent, who)
                except (OSError, TimeoutError, LinkClosed, ProtocolError) as error:
                    # a neighbour that is down is routine; one whose certificate is wrong is not
                    misconfigured = isinstance(error, ssl.SSLError | ProtocolError)
                    if misconfigured and self.refusal_log.admit(neighbor.id, time.monotonic()) is not None:
                        self.log.warning("cannot link to %s: %s", neighbor, error)
                    else:
                        self.log.debug("cannot link to %s: %s", neighbor, error)
                    if link is not None:
                        await link.wait_closed()
                finally:
                    if link is not None:
                        self._verified.pop(link, None)
            await asyncio.sleep(delay * (0.5 + _JITTER.random()))
            delay = min(delay * 2, REDIAL_CAP)

    def _hello(self, hop: str) -> Hello:
        """Our hello to ``hop``: the name of our channel with it (a new one's, chosen here and
        given to the router with ``LinkUp``, so the log has it), the peer's channel we know, and
        the last seq of it we took: with a log, the last ``Took`` we sent, for what we handled
        since may not be in the log yet."""
        name, peer_epoch, took = self.router.custody.greeting(hop)
        if not name:
            name = self._announced[hop] = f"{self.router.custody.epoch}:{secrets.token_hex(6)}"
        elif self.log_file is not None:
            logged, seq = self._taken.get(hop, ("", 0))
            took = seq if logged == name else 0
        return Hello("broker", self.uri.id, epoch=name, peer_epoch=peer_epoch, took=took)

    async def _serve(self, link: Link, hop: str, hello: Hello, sent: Hello, who: Peer | None) -> None:
        """Run an established link until it ends; the router hears of it coming and going (with
        the peer's certificate name and role over TLS)."""
        if hop in self.links:
            await link.wait_closed()
            return
        announced = self._announced.pop(hop, "")
        ours = self.router.custody.greeting(hop)[0] or announced
        if ours != sent.epoch:  # our channel changed since the hello went: it named the wrong one
            await link.flush_and_close("the channel changed during the handshake")
            await link.wait_closed()
            return
        link.name = hop
        self.links[hop] = link
        self.log.info("%s %s connected", hello.kind, hop)
        resume = hello.took if hello.peer_epoch == ours else None
        identity, role = (who.name, who.role) if who is not None else ("", "")
        self._feed(LinkUp(hello.kind == "broker", hello.epoch, resume, identity, role, name=ours), hop)
        try:
            for item in link.pending:
                self._handle(link, hop, item)
            link.pending.clear()
            while True:
                for item in await link.receive():
                    self._handle(link, hop, item)
        except LinkClosed:
            pass
        except ProtocolError as error:  # framing is broken: the stream cannot be trusted any more
            self.counters["bad_frames"] += 1
            self.log.warning("%s broke framing: %s", hop, error)
            link.send(Refuse("", str(error)))
            await link.flush_and_close(str(error))
        finally:
            await link.wait_closed()
            if link.closed is not None and link.closed.startswith(SLOW_CONSUMER):
                self.counters["slow_consumers"] += 1
                self.log.warning("%s disconnected: %s", hop, link.closed)
            self.counters["dropped.unsent"] += link.discarded_frames
            if self.links.get(hop) is link:
                del self.links[hop]
                self.log.info("%s disconnected: %s", hop, link.closed)
                self._feed(LinkDown(), hop)
                self._forget_gone()

    def _handle(self, link: Link, hop: str, item: object) -> None:
        if isinstance(item, BadMessage):
            self.counters["bad_messages"] += 1
            unlogged = self.bad_message_log.admit(hop, time.monotonic())
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
        else:
            self._feed(item, hop)  # type: ignore[arg-type]

    async def _ticks(self, interval: float) -> None:
        """The router has no clock: on a quiet broker, sessions of peers away expire on these,
        and a stand-in that held back a Took for ``ANSWER_WAIT`` goes upstream (``standins``).
        Only while either may happen: each Tick is an input, logged like any other."""
        while True:
            await asyncio.sleep(interval)
            if self.router.sessions.away or self.router.stand_ins.holding:
                self._feed(Tick(), "")
            self._forget_gone()

    def _forget_gone(self) -> None:
        """What we said we took from peers whose channel the router has closed: nothing to resume."""
        for hop in [hop for hop in self._taken if hop not in self.router.custody.channels]:
            del self._taken[hop]

    async def _settle_when_quiet(self) -> None:
        """A deployment adds thousands of subscriptions, and each publication after it would merge
        a share of their index entries: merged here instead, once no input came for QUIET
        seconds, a publication's share per turn of the loop, stopping at the next input."""
        while True:
            await self._input_seen.wait()
            self._input_seen.clear()
            await asyncio.sleep(QUIET)
            while not self._input_seen.is_set() and self.router.settle():
                await asyncio.sleep(0)

    async def _revocations(self, tls: Identity) -> None:
        """Every ``RECHECK`` seconds: the revocation list again (the TLS contexts are rebuilt when
        it changed, so new handshakes check the new one), and the links whose peer's certificate
        it revokes now are closed, one line logged and counted each."""
        while True:
            await asyncio.sleep(tls.revocations.recheck)
            tls.refresh(now=True)
            serials = tls.revocations.serials
            if serials is not self._swept:
                self._swept = serials
                self._cut_revoked(serials)

    def _cut_revoked(self, serials: frozenset[int]) -> None:
        for link, who in list(self._verified.items()):
            if who.serial in serials and link.closed is None:
                self.counters["revoked_refused"] += 1
                self.log.warning("disconnected %s: certificate %s is revoked", link.name, who)
                link.send(Refuse("", f"certificate {who.name} is revoked"))
                self._spawn(link.flush_and_close("certificate revoked"))

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat / 2)
            now = time.monotonic()
            for link in list(self.links.values()):
                if now - link.last_received > self.dead_after:
                    self.counters["heartbeat_timeouts"] += 1
                    link.close(f"no traffic for {self.dead_after:g} s", abort=True)
                elif now - link.last_sent >= self.heartbeat or now - link.last_received >= self.heartbeat:
                    link.send(Ping())  # also to a peer that only receives: its Pong is its sign of life


def _handshake_error(error: Exception) -> str:
    """A failed TLS handshake in a few words: OpenSSL's reason, not its file and line."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {error.verify_message}"
    if isinstance(error, ssl.SSLError):
        return error.reason or str(error)
    if isinstance(error, ConnectionResetError | BrokenPipeError):
        return "the peer hung up (it may not trust this broker's certificate)"
    return str(error) or "timed out"


def _impostor(hello: Hello, who: Peer) -> str:
    """Why a peer whose certificate says ``who`` may not say ``hello``; empty if it may."""
    if hello.kind == "broker":
        if who.role != "broker":
            return f"{who} may not link as a broker: only a broker certificate may"
        if hello.id != who.name:
            return f"broker certificate {who.name} may not link as broker {hello.id!r}"
    elif hello.id != who.name and not hello.id.startswith(f"{who.name}:"):
        return f"certificate {who} may not be client {hello.id!r}: only {who.name} or {who.name}:SUFFIX"
    return ""
