"""The broker process: ``RouterService``, the sans-IO ``Router`` behind asyncio links.

This adapter owns what the router must not: the network (TCP, or memory in tests), timers, the
clock it is given. It accepts
clients and neighbour brokers through its ``Gate`` (handshake limits, TLS, the hellos), dials the
neighbours it was told about and redials them on the clients' backoff schedule, pings every link
and drops one that stays silent, and hands every frame to its ``RouterDriver``, which logs it,
feeds it to the router and sends what comes out. Nothing a peer sends can stop it: bad frames
are answered with ``Refuse``, counted and logged; a peer that breaks framing is disconnected;
even a bug in the router costs one message, not the broker.

With a data directory (``persistence``) a broker killed and restarted comes back from its log
(``group_commit``). Without an identity (``tls``) it listens on loopback only, unless told it is
``insecure``. One of the brokers of a replicated ``site`` keeps the site's log with the others
and serves while it leads (``broker.sites.member``); its peers know it by the site's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from broker.clock import SYSTEM, Clock
from broker.errors import ConnectError, LocalError
from broker.messages import Hello
from broker.routing.acl import AccessPolicy
from broker.routing.router import Router
from broker.sites.member import SiteConfig, SiteDriver, SiteMember
from broker.transport.admission import MAX_HANDSHAKES, MAX_HANDSHAKES_PER_ADDRESS
from broker.transport.backoff import Backoff
from broker.transport.cancels import CancelCheck
from broker.transport.codec import carriable
from broker.transport.dialer import dial
from broker.transport.driver import RouterDriver
from broker.transport.gate import Gate, Shaken
from broker.transport.handshake import HANDSHAKE_TIMEOUT, Misconfigured, ServedElsewhere
from broker.transport.link import Link, Reader, Writer
from broker.transport.network import TCP, Accepted, Listening, Network
from broker.transport.peers import Peers
from broker.transport.persistence import CHECKPOINT_RECORDS, Fsync, RouterLog
from broker.transport.tls import Identity, Peer
from broker.transport.trace import ForwardingTrace
from broker.transport.uri import BrokerURI

__all__ = ["REDIAL", "SENT_ON_RETRY", "RouterService", "loopback"]

# A neighbour restarted from its log is back in a second or two, and what it holds waits for the
# link: redialled at most a quarter second apart (a refused connect costs nothing worth saving).
REDIAL = Backoff(first=0.1, cap=0.25, attempts=None)
# A broker of a site that sends us on (its site elects) is dialled again this soon, for
# SENT_ON_ROUNDS refusals in a row; then on the REDIAL schedule (a site without a leader for long)
SENT_ON_RETRY = 0.05
SENT_ON_ROUNDS = 40


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
        clock: Clock = SYSTEM,
        composite_max_waiting: int = 10_000,
        composite_max_age: float | None = None,
        session_grace: float = 0.0,
        epoch: str | None = None,
        data: Path | None = None,
        fsync: Fsync = "group",
        checkpoint_every: int = CHECKPOINT_RECORDS,
        policy: AccessPolicy | None = None,
        tls: Identity | None = None,
        insecure: bool = False,
        max_handshakes: int = MAX_HANDSHAKES,
        max_handshakes_per_address: int = MAX_HANDSHAKES_PER_ADDRESS,
        network: Network = TCP,
        site: SiteConfig | None = None,
        neighbor_sites: Mapping[str, str] | None = None,
        routing: str = "filter",
        ordering: str = "FIFO",
        parent: str = "",
        trace: Path | None = None,
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
        if site is not None and data is None:
            raise LocalError(
                f"broker {uri.id} of site {site.name} must keep its log on disk (--data): a broker"
                " that forgot its vote could let two brokers lead the site at once"
            )
        if site is not None and uri.id not in {m.id for m in site.members}:
            raise LocalError(f"broker {uri.id} is not one of the brokers of site {site.name}")
        self.tls = tls
        self.network = network  # where it listens and dials: TCP, or memory in tests
        self.uri = uri
        self.neighbors = list(neighbors)
        self.queue_limit = queue_limit
        self.clock = clock
        self.links: dict[str, Link] = {}
        self.counters: Counter[str] = Counter()
        self.log = logging.LoggerAdapter(logging.getLogger("broker"), {"broker": uri.id})
        router = Router(
            uri.id if site is None else site.name,  # the brokers of a site are one router
            covering,
            advertisement_covering,
            composite_max_waiting,
            composite_max_age,
            session_grace,
            # a broker without its log starts a new custody epoch; a site's brokers share theirs
            epoch or (secrets.token_hex(8) if site is None else site.name),
            policy,
            routing,  # "filter" or "flooding" (SESDAD's RoutingPolicy)
            ordering,  # SESDAD's Ordering: under TOTAL, publications climb to the root (``parent``)
            parent,
        )
        router.process_status = self._process_status
        router.custody.fits = carriable  # what cannot be framed is dropped by the router, logged
        # a broker of a replicated site -> the site: known before the first dial, for our hello
        # names the channel of the site's (a guess would be a new channel, and the site would
        # drop what it holds for us); also learnt from hellos
        self.hops: dict[str, str] = dict(neighbor_sites or {})
        # the brokers this one was told are of a replicated site: only they may say so in a hello
        self.sites_of: Mapping[str, str] = dict(neighbor_sites or {})
        self.site: SiteMember | None = None
        if site is None:
            # opened: one broker per directory
            self.log_file = None if data is None else RouterLog(data, fsync, checkpoint_every)
            self.driver = RouterDriver(router, self.links, self.log_file, self.counters, self.log, clock)
        else:
            assert data is not None
            self.log_file = None
            self.driver = SiteDriver(router, self.links, None, self.counters, self.log, clock)
            self.site = SiteMember(
                site,
                uri.id,
                self.driver,
                self.links,
                data / "site",
                self.counters,
                self.log,
                clock,
                self._step_down,
                self._serving,
            )
        self.trace = None if trace is None else ForwardingTrace(trace, clock, self.counters, self.log)
        self.driver.trace = self.trace
        cancels = None if tls is None else CancelCheck(tls.revocations)  # who signed a cancel
        self.peers = Peers(
            self.links, self.driver, heartbeat, dead_after, self.counters, self.log, clock, cancels
        )
        self.gate = Gate(
            tls, queue_limit, self.counters, self.log, clock, max_handshakes, max_handshakes_per_address
        )
        self._server: Listening | None = None
        self.loop = ""  # the event loop it runs on, from start on: asyncio or uvloop (broker.loops)
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[asyncio.Task[Any]] = set()  # accepted-connection handlers
        self._wakes: dict[str, asyncio.Event] = {}  # broker dialled -> wakes its loop (_keep_linked)

    @property
    def router(self) -> Router:
        return self.driver.router

    # lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        self.loop = type(asyncio.get_running_loop()).__module__.partition(".")[0]
        if self.log_file is not None and self.driver.commits is not None:
            self.driver.restore(self.log_file)
            self._spawn(self.driver.commits.run())
        if self.tls is None:
            self._server = await self.network.listen(self.uri, self._accept)
        else:
            self._server = await self.network.listen_tls(self.uri, self._accept_tls)
        if self.site is not None:
            kept = f"with site {self.site.config.name}'s log in {self.site.disk.directory}"
        else:
            kept = "in memory only" if self.log_file is None else f"in {self.log_file.directory}"
        self.log.info("%s listening, its state %s", self.uri, kept)
        for neighbor in self.neighbors:
            self._spawn(self._dial(neighbor))
        if self.site is not None:
            self._spawn(self.site.run())
            self._spawn(self.site.ticks(self.peers.dead_after))
            for member in self.site.config.others(self.uri.id):
                if member.id > self.uri.id:  # one link per pair: the lesser name dials
                    self._spawn(self._dial_member(member))
        self._spawn(self.peers.heartbeats())
        self._spawn(self.driver.settle_when_quiet())
        self._spawn(self.driver.ticks())
        if self.tls is not None:
            self._spawn(self.gate.revocations(self._spawn))

    async def stop(self) -> None:
        """Close every link, let the connection handlers finish, then cancel the timers."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            if task not in self._connections:
                task.cancel()
        links = list(self.links.values())
        if self.site is not None:
            links += self.site.links.values()
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
        if self.site is not None:
            self.site.close()
        if self.trace is not None:
            self.trace.close()

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

    def status(self) -> dict[str, Any]:
        """The broker's status as a deployer asking for it sees it."""
        return self.router.status()

    def _process_status(self, full: bool) -> dict[str, Any]:
        """What only the process knows, added to every status the router answers: its URI, the
        URIs of the neighbours it dials and the frames each broker link carried (``full``: so a
        dashboard can walk the overlay from one broker to the next and show each link's rates; not
        for a client that may not see detail) and the link counters."""
        added: dict[str, Any] = {"uri": str(self.uri), "loop": self.loop}
        if full:
            added["neighbor_uris"] = {neighbor.id: str(neighbor) for neighbor in self.neighbors}
            added["link_frames"] = {  # per neighbour: frames received, frames sent
                hop: [link.received_frames, link.sent_frames]
                for hop, link in self.links.items()
                if link.peer is not None and link.peer.kind == "broker"
            }
        added["counters"] = {f"link.{k}": v for k, v in self.counters.items()}
        if self.site is not None:
            added["site"] = self.site.status()
        return added

    # links --------------------------------------------------------------------------------------

    async def _accept(self, reader: Reader, writer: Writer) -> None:
        await self._serve(self.gate.accept(reader, writer, self._answer))

    async def _accept_tls(self, accepted: Accepted) -> None:
        await self._serve(self.gate.accept_tls(accepted, self._answer))

    async def _serve(self, handshake: Coroutine[Any, Any, Shaken | None]) -> None:
        """Serve a connection once its handshake (TLS, hellos) is done, until it ends."""
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)
        shaken = await handshake
        if shaken is not None:
            link, hello, sent, who = shaken
            try:
                if self.site is not None and hello.kind == "broker" and self.site.is_member(hello.id):
                    await self.site.serve_member(link, hello.id)
                else:
                    await self.peers.serve(link, self._hop(hello), hello, sent, who)
            finally:
                self.gate.verified.pop(link, None)

    def _hop(self, hello: Hello) -> str:
        """How the router knows a peer: a broker of a replicated site by its site's name."""
        if hello.site:
            self.hops[hello.id] = hello.site
            return hello.site
        return hello.id

    def _answer(self, hello: Hello) -> Hello | str:
        """Our hello to a peer that said ``hello``, or why it may not connect."""
        if self.site is not None and (ours := self.site.answer(hello)) is not None:
            return ours
        if (claim := self._claim_refused(hello)) is not None:
            self.counters["site_claim_refused"] += 1
            return claim
        hop = hello.site or hello.id
        if hello.id == self.uri.id or hop == self.router.id or hop in self.links:
            return f"{hello.kind} id {hop!r} is already connected"
        if hello.kind == "client" and (handed := self.router.sessions.handed_over(hop, hello.noted)):
            self.counters["handed_over_refused"] += 1  # it re-sends nothing of the session it lost
            return handed
        return self.driver.hello(hop)

    def _claim_refused(self, hello: Hello) -> str | None:
        """Why a broker may not be taken for one of the site its hello names, if it may not: a
        site's name is its channel and its tables here, so a claim this broker was not told of
        (``neighbor_sites``) could take over another site's. With TLS the hello's id is its
        certificate's, the site never is."""
        if not hello.site or hello.site == self.sites_of.get(hello.id):
            return None
        known = self.sites_of.get(hello.id)
        said = f"of site {known!r}" if known else "of no replicated site"
        return (
            f"broker {hello.id} says it is of site {hello.site!r}, but this broker knows it as {said}"
            f" (give --neighbor-site {hello.id}={hello.site} if it is)"
        )

    def _wake(self, which: Callable[[BrokerURI], bool]) -> None:
        """Neighbours ``which`` are dialled at once if not linked (see ``_keep_linked``)."""
        for neighbor in self.neighbors:
            if which(neighbor) and (wake := self._wakes.get(neighbor.id)) is not None:
                wake.set()

    def _serving(self) -> None:
        """This broker serves its site from now on: it links to its neighbours at once."""
        self._wake(lambda neighbor: True)

    def _step_down(self, reason: str) -> None:
        """This broker no longer serves its site: its clients and site links move to the leader."""
        for link in list(self.links.values()):
            link.close(reason)

    async def _dial(self, neighbor: BrokerURI) -> None:
        """Keep a link to ``neighbor`` (see ``_keep_linked``). A broker of a replicated site
        dials only while it serves; the brokers of another replicated site that do not serve
        refuse, and the one that does is linked under the site's name."""

        def hop() -> str:
            return self.hops.get(neighbor.id, neighbor.id)

        def linked() -> bool:
            return hop() in self.links or (self.site is not None and not self.site.serving)

        async def serve(link: Link, sent: Hello, who: Peer | None) -> None:
            answered = link.peer or sent
            if (claim := self._claim_refused(answered)) is not None:
                self.counters["site_claim_refused"] += 1
                self.log.warning("%s: %s", neighbor, claim)
                await link.flush_and_close(claim)
                return
            try:
                await self.peers.serve(link, self._hop(answered), answered, sent, who)
            finally:  # the other brokers of its site: one of them serves it now, or soon
                self._wake(lambda n: n.id != neighbor.id and self.hops.get(n.id) == hop())

        await self._keep_linked(neighbor, linked, lambda: self.driver.hello(hop()), serve)

    async def _dial_member(self, member: BrokerURI) -> None:
        """Keep a link to ``member``, another broker of our site (see ``_keep_linked``)."""
        site = self.site
        assert site is not None
        hello = Hello("broker", self.uri.id, site=site.config.name)

        async def serve(link: Link, sent: Hello, who: Peer | None) -> None:
            await site.serve_member(link, member.id)

        await self._keep_linked(member, lambda: member.id in site.links, lambda: hello, serve)

    async def _keep_linked(
        self,
        target: BrokerURI,
        linked: Callable[[], bool],
        hello: Callable[[], Hello],
        serve: Callable[[Link, Hello, Peer | None], Awaitable[None]],
    ) -> None:
        """Dial ``target`` while not ``linked()`` (it may have dialled us) with ``hello()``, and
        ``serve`` the link it answers; again after each failure or loss on the ``REDIAL``
        schedule. A broker of a replicated site that sends us on (``ServedElsewhere``) is no
        failure while its site elects: it is dialled again ``SENT_ON_RETRY`` later, and the
        broker it names as the leader at once (its loop is woken)."""
        failures = sent_on = 0
        wake = self._wakes.setdefault(target.id, asyncio.Event())
        while True:
            delay = None
            wake.clear()  # a wake from now on is news: another broker named this one the leader
            if not linked():
                try:
                    sent = hello()
                    context = None if self.tls is None else self.tls.client
                    link, leftovers, who = await dial(
                        target, sent, HANDSHAKE_TIMEOUT, context, self.queue_limit, self.clock, self.network
                    )
                except ServedElsewhere as error:  # its site elects: the leader soon serves
                    self.log.debug("cannot link to %s: %s", target, error)
                    sent_on += 1
                    if sent_on < SENT_ON_ROUNDS:  # after that, a site without a leader for long
                        delay = SENT_ON_RETRY
                    if (leader := error.leader) != target.id:  # the leader it named: at once
                        self._wake(lambda neighbor: neighbor.id == leader)
                except ConnectError as error:  # a broker that is down is routine; a misfit is not
                    sent_on = 0
                    now = self.clock.monotonic()
                    if (
                        isinstance(error, Misconfigured)
                        and self.gate.refusal_log.admit(target.id, now) is not None
                    ):
                        self.log.warning("cannot link to %s: %s", target, error)
                    else:
                        self.log.debug("cannot link to %s: %s", target, error)
                else:
                    failures = sent_on = 0
                    link.pending = leftovers
                    if who is not None:
                        self.gate.verify(link, who)
                    try:
                        await serve(link, sent, who)
                    finally:
                        self.gate.verified.pop(link, None)
            if delay is None:
                failures += 1
                delay = REDIAL.delay(failures)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await wake.wait()
