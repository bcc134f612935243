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
``insecure``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
from collections import Counter
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from broker.clock import SYSTEM, Clock
from broker.errors import ConnectError, LocalError
from broker.messages import Hello
from broker.routing.acl import AccessPolicy
from broker.routing.router import Router
from broker.transport.admission import MAX_HANDSHAKES, MAX_HANDSHAKES_PER_ADDRESS
from broker.transport.backoff import Backoff
from broker.transport.dialer import dial
from broker.transport.driver import RouterDriver
from broker.transport.gate import Gate
from broker.transport.handshake import HANDSHAKE_TIMEOUT, Misconfigured
from broker.transport.link import Link, Reader, Writer
from broker.transport.network import TCP, Listening, Network
from broker.transport.peers import Peers
from broker.transport.persistence import CHECKPOINT_RECORDS, Fsync, RouterLog
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI

__all__ = ["REDIAL", "RouterService", "loopback"]

# A neighbour restarted from its log is back in a second or two, and what it holds waits for the
# link: redialled at most a quarter second apart (a refused connect costs nothing worth saving).
REDIAL = Backoff(first=0.1, cap=0.25, attempts=None)


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
        routing: str = "filter",
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
        self.network = network  # where it listens and dials: TCP, or memory in tests
        self.uri = uri
        self.neighbors = list(neighbors)
        self.queue_limit = queue_limit
        self.clock = clock
        self.links: dict[str, Link] = {}
        self.counters: Counter[str] = Counter()
        self.log = logging.LoggerAdapter(logging.getLogger("broker"), {"broker": uri.id})
        router = Router(
            uri.id,
            covering,
            advertisement_covering,
            composite_max_waiting,
            composite_max_age,
            session_grace,
            epoch or secrets.token_hex(8),  # a broker without its log starts a new custody epoch
            policy,
            routing,  # "filter" or "flooding" (SESDAD's RoutingPolicy)
        )
        router.process_status = self._process_status
        # opened: one broker per directory
        self.log_file = None if data is None else RouterLog(data, fsync, checkpoint_every)
        self.driver = RouterDriver(router, self.links, self.log_file, self.counters, self.log, clock)
        self.peers = Peers(self.links, self.driver, heartbeat, dead_after, self.counters, self.log, clock)
        self.gate = Gate(
            tls, queue_limit, self.counters, self.log, clock, max_handshakes, max_handshakes_per_address
        )
        self._server: Listening | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[asyncio.Task[Any]] = set()  # accepted-connection handlers

    @property
    def router(self) -> Router:
        return self.driver.router

    # lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.log_file is not None and self.driver.commits is not None:
            self.driver.restore(self.log_file)
            self._spawn(self.driver.commits.run())
        self._server = await self.network.listen(self.uri, self._accept)
        kept = "in memory only" if self.log_file is None else f"in {self.log_file.directory}"
        self.log.info("%s listening, its state %s", self.uri, kept)
        for neighbor in self.neighbors:
            self._spawn(self._dial(neighbor))
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

    def status(self) -> dict[str, Any]:
        """The broker's status as a deployer asking for it sees it."""
        return self.router.status()

    def _process_status(self, full: bool) -> dict[str, Any]:
        """What only the process knows, added to every status the router answers: its URI, the
        URIs of the neighbours it dials and the frames each broker link carried (``full``: so a
        dashboard can walk the overlay from one broker to the next and show each link's rates; not
        for a client that may not see detail) and the link counters."""
        added: dict[str, Any] = {"uri": str(self.uri)}
        if full:
            added["neighbor_uris"] = {neighbor.id: str(neighbor) for neighbor in self.neighbors}
            added["link_frames"] = {  # per neighbour: frames received, frames sent
                hop: [link.received_frames, link.sent_frames]
                for hop, link in self.links.items()
                if link.peer is not None and link.peer.kind == "broker"
            }
        added["counters"] = {f"link.{k}": v for k, v in self.counters.items()}
        return added

    # links --------------------------------------------------------------------------------------

    async def _accept(self, reader: Reader, writer: Writer) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)
        shaken = await self.gate.accept(reader, writer, self._answer)
        if shaken is not None:
            link, hello, sent, who = shaken
            try:
                await self.peers.serve(link, hello.id, hello, sent, who)
            finally:
                self.gate.verified.pop(link, None)

    def _answer(self, hello: Hello) -> Hello | str:
        """Our hello to a peer that said ``hello``, or why it may not connect."""
        if hello.id == self.uri.id or hello.id in self.links:
            return f"{hello.kind} id {hello.id!r} is already connected"
        return self.driver.hello(hello.id)

    async def _dial(self, neighbor: BrokerURI) -> None:
        """Keep a link to ``neighbor``: dial it while it has none (it may have dialled us), again
        after each failure or loss on the ``REDIAL`` schedule."""
        failures = 0
        while True:
            if neighbor.id not in self.links:
                try:
                    sent = self.driver.hello(neighbor.id)
                    context = None if self.tls is None else self.tls.client
                    link, leftovers, who = await dial(
                        neighbor, sent, HANDSHAKE_TIMEOUT, context, self.queue_limit, self.clock, self.network
                    )
                except ConnectError as error:  # a neighbour that is down is routine; a misfit is not
                    now = self.clock.monotonic()
                    if (
                        isinstance(error, Misconfigured)
                        and self.gate.refusal_log.admit(neighbor.id, now) is not None
                    ):
                        self.log.warning("cannot link to %s: %s", neighbor, error)
                    else:
                        self.log.debug("cannot link to %s: %s", neighbor, error)
                else:
                    failures = 0
                    link.pending = leftovers
                    if who is not None:
                        self.gate.verify(link, who)
                    try:
                        await self.peers.serve(link, neighbor.id, link.peer or sent, sent, who)
                    finally:
                        self.gate.verified.pop(link, None)
            failures += 1
            await asyncio.sleep(REDIAL.delay(failures))
