"""One routing suite, four back ends: the in-process simulator, the real brokers
(``RouterService``) over in-memory streams with no socket, real ``wfm broker`` processes, and the
same processes over mutual TLS (clients with their own certificates). The first two run the suite
flooding too (SESDAD's RoutingPolicy): what is delivered is the same.

The topology is PADRES's five-broker star (B1 in the centre). Scenarios use their own class names,
so they can share one overlay of processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest

from broker.client import BlockingClient
from broker.client import RefusedError as ClientRefused
from broker.errors import LinkClosed
from broker.language import parse_filter, parse_publication
from broker.messages import (
    Ack,
    Advertise,
    Carry,
    Deliver,
    Hello,
    Message,
    Publish,
    Refuse,
    Subscribe,
    Took,
    Unsubscribe,
    WireMessage,
)
from broker.sim import Overlay, RefusedError, SimClient
from broker.transport.dialer import greet
from broker.transport.link import Link
from broker.transport.memory import MemoryNetwork
from broker.transport.server import RouterService
from broker.transport.tls import Identity
from broker.transport.uri import BrokerURI
from tests.processes import brokers, quiet, status, watcher

STAR = {"B1": [], "B2": ["B1"], "B3": ["B1"], "B4": ["B1"], "B5": ["B1"]}
_names = itertools.count()


class Handle(Protocol):
    def advertise(self, text: str) -> str: ...
    def subscribe(self, text: str) -> str: ...
    def unsubscribe(self, sub_id: str) -> None: ...
    def publish(self, text: str) -> str: ...


class Backend(Protocol):
    def client(self, broker: str) -> Handle: ...
    def settle(self) -> None: ...
    def received(self, client: Handle) -> list[str]: ...


class SimBackend:
    def __init__(self, routing: str = "filter") -> None:
        self.overlay = Overlay.star(4, covering="active", routing=routing)

    def client(self, broker: str) -> SimClient:
        return self.overlay.add_client(f"c{next(_names)}", broker)

    def settle(self) -> None:
        pass

    def received(self, client: Any) -> list[str]:
        return client.take()  # type: ignore[no-any-return]


T = TypeVar("T")


class MemoryBackend:
    """The brokers of a process (``RouterService``, links, handshakes, the driver) in one event
    loop of their own, linked by memory stream pairs: no socket, no port, no process. Its clients
    speak frames as ``Client`` does: a hello, requests answered by ref, a Took for what is carried."""

    def __init__(self, routing: str = "filter", traces: Path | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="memory overlay", daemon=True)
        self.thread.start()
        self.network = MemoryNetwork()
        self.uris = {name: BrokerURI("127.0.0.1", 7001 + n, name) for n, name in enumerate(STAR)}
        self.brokers = [
            RouterService(
                uri,
                [self.uris[n] for n in STAR[name]],
                covering="active",
                network=self.network,
                routing=routing,
                trace=None if traces is None else traces / f"{name}.jsonl",
            )
            for name, uri in self.uris.items()
        ]
        for broker in self.brokers:
            self.run(broker.start())
        self.run(self._linked())
        self.clients: list[MemoryClient] = []

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=10)

    async def _linked(self) -> None:
        while sorted(self.brokers[0].links) != ["B2", "B3", "B4", "B5"]:
            await asyncio.sleep(0.01)

    def client(self, broker: str) -> MemoryClient:
        client = MemoryClient(self, self.uris[broker])
        self.clients.append(client)
        return client

    def settle(self) -> None:
        self.run(asyncio.sleep(0.1))

    def received(self, client: Any) -> list[str]:
        self.settle()
        texts, client.delivered = client.delivered, []
        return sorted(set(texts), key=texts.index)  # type: ignore[no-any-return]

    def close(self) -> None:
        for client in self.clients:
            self.run(client.close())
        for broker in self.brokers:
            self.run(broker.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class MemoryClient:
    def __init__(self, backend: MemoryBackend, broker: BrokerURI) -> None:
        self.run = backend.run
        self.refs = itertools.count(1)
        self.delivered: list[str] = []
        self.answers: dict[str, asyncio.Future[Ack | Refuse]] = {}
        self.link = self.run(self._connect(backend.network, broker))

    async def _connect(self, network: MemoryNetwork, broker: BrokerURI) -> Link:
        reader, writer = await network.open(broker)
        link = Link(reader, writer, broker.id)
        leftovers = await greet(link, broker, Hello("client", f"c{next(_names)}"), timeout=5.0)
        self.reading = asyncio.create_task(self._read(link, leftovers))
        return link

    async def _read(self, link: Link, items: list[Any]) -> None:
        with contextlib.suppress(LinkClosed):
            while True:
                for item in items:
                    if isinstance(item, Carry):
                        link.send(Took(item.seq))
                        item = item.message
                    if isinstance(item, Deliver):
                        self.delivered.append(str(item.publication))
                    elif isinstance(item, Ack | Refuse) and (answer := self.answers.pop(item.ref, None)):
                        answer.set_result(item)
                items = await link.receive()

    async def close(self) -> None:
        await self.link.wait_closed()
        await self.reading

    async def _ask(self, ref: str, message: WireMessage) -> str:
        self.answers[ref] = answer = asyncio.get_running_loop().create_future()
        self.link.send(message)
        said = await asyncio.wait_for(answer, 5.0)
        if isinstance(said, Refuse):
            raise ClientRefused(said.reason)
        return said.id

    def _request(self, make: Callable[[str], Message]) -> str:
        ref = f"r{next(self.refs)}"
        return self.run(self._ask(ref, make(ref)))  # type: ignore[arg-type]

    def advertise(self, text: str) -> str:
        return self._request(lambda ref: Advertise(ref, parse_filter(text)))

    def subscribe(self, text: str) -> str:
        return self._request(lambda ref: Subscribe(ref, parse_filter(text)))

    def unsubscribe(self, sub_id: str) -> None:
        self.run(self._ask(sub_id, Unsubscribe(sub_id)))

    def publish(self, text: str) -> str:
        return self._request(lambda ref: Publish(ref, parse_publication(text)))


class ProcessBackend:
    def __init__(self, uris: dict[str, BrokerURI], tls: Identity | None = None) -> None:
        self.uris = uris
        self.tls = tls
        self.clients: list[BlockingClient] = []

    def client(self, broker: str) -> BlockingClient:
        client = BlockingClient(self.uris[broker], f"c{next(_names)}", tls=self.tls)
        self.clients.append(client)
        return client

    def settle(self) -> None:
        quiet(self.uris, tls=watcher(self.tls and self.tls.directory))

    def received(self, client: Any) -> list[str]:
        texts = []
        while (delivery := client.receive(timeout=0.3)) is not None:
            texts.append(str(delivery.publication))
        return sorted(set(texts), key=texts.index)  # one line per publication, in order

    def close(self) -> None:
        for client in self.clients:
            client.close()


@pytest.fixture(scope="module")
def processes() -> Iterator[dict[str, BrokerURI]]:
    with brokers(STAR, covering="active") as uris:
        yield uris


@pytest.fixture(scope="module")
def tls_processes(certs: Path) -> Iterator[dict[str, BrokerURI]]:
    with brokers(STAR, covering="active", certs=certs) as uris:
        yield uris


@pytest.fixture(params=["sim", "sim-flooding", "memory", "memory-flooding", "processes", "tls"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    routing = "flooding" if request.param.endswith("-flooding") else "filter"
    if request.param.startswith("sim"):
        yield SimBackend(routing)
        return
    if request.param.startswith("memory"):
        memory = MemoryBackend(routing)
        yield memory
        memory.close()
        return
    if request.param == "tls":
        certs = request.getfixturevalue("certs")
        real = ProcessBackend(request.getfixturevalue("tls_processes"), Identity(certs, "alice"))
    else:
        real = ProcessBackend(request.getfixturevalue("processes"))
    yield real
    real.close()


def unique(name: str) -> str:
    return f"{name}{next(_names)}"


def test_delivery_across_the_star(backend: Backend) -> None:
    cls = unique("stock")
    pub = backend.client("B2")
    subs = {b: backend.client(b) for b in ("B1", "B3", "B5")}
    pub.advertise(f"[class,eq,{cls}],[price,<,100],[amount,>,100]")
    for client in subs.values():
        client.subscribe(f"[class,eq,{cls}],[price,<,100]")
    backend.settle()
    pub.publish(f"[class,{cls}],[price,80]")
    for client in subs.values():
        assert backend.received(client) == [f"[class,{cls}],[price,80]"]


def test_subscription_attributes_must_be_present(backend: Backend) -> None:
    cls = unique("stock")
    pub, sub = backend.client("B2"), backend.client("B4")
    pub.advertise(f"[class,eq,{cls}],[price,<,200],[amount,>,100]")
    sub.subscribe(f"[class,eq,{cls}],[price,>,100],[amount,>,100]")
    backend.settle()
    pub.publish(f"[class,{cls}],[price,120]")
    pub.publish(f"[class,{cls}],[price,130],[amount,150]")
    assert backend.received(sub) == [f"[class,{cls}],[amount,150],[price,130]"]


def test_unsubscribe_elsewhere_stops_delivery_there_only(backend: Backend) -> None:
    cls = unique("stock")
    pub, near, far = backend.client("B2"), backend.client("B2"), backend.client("B3")
    pub.advertise(f"[class,eq,{cls}],[price,isPresent,0]")
    near.subscribe(f"[class,eq,{cls}]")
    far_id = far.subscribe(f"[class,eq,{cls}]")
    backend.settle()
    far.unsubscribe(far_id)
    backend.settle()
    pub.publish(f"[class,{cls}],[price,1]")
    assert backend.received(near) == [f"[class,{cls}],[price,1]"]
    assert backend.received(far) == []


def test_subscription_waits_for_advertisement(backend: Backend) -> None:
    cls = unique("stock")
    sub, pub = backend.client("B5"), backend.client("B3")
    sub.subscribe(f"[class,eq,{cls}],[price,<,10]")
    backend.settle()
    pub.advertise(f"[class,eq,{cls}],[price,<,100]")
    backend.settle()
    pub.publish(f"[class,{cls}],[price,5]")
    assert backend.received(sub) == [f"[class,{cls}],[price,5]"]


def test_nonconforming_publication_is_refused(backend: Backend) -> None:
    cls = unique("stock")
    pub = backend.client("B1")
    pub.advertise(f"[class,eq,{cls}],[price,<,100]")
    with pytest.raises((RefusedError, ClientRefused), match="fits no advertisement"):
        pub.publish(f"[class,{cls}],[price,100]")


def test_the_memory_overlay_is_the_real_brokers_with_no_socket() -> None:
    """Guard: the memory back end runs ``RouterService`` itself, linked over memory streams."""
    memory = MemoryBackend()
    try:
        status = memory.brokers[0].status()
        assert status["neighbors"] == ["B2", "B3", "B4", "B5"]
        assert all(
            broker._server is not None and not hasattr(broker._server, "sockets") for broker in memory.brokers
        )
    finally:
        memory.close()


@pytest.mark.parametrize("routing", ["filter", "flooding"])
def test_real_brokers_started_flooding_send_every_publication_everywhere(routing: str) -> None:
    """A publication nobody subscribed to: flooding, every broker of the star routes it (and
    says so in its status); filtering, only its publisher's broker does."""
    memory = MemoryBackend(routing)
    try:
        cls = unique("stock")
        pub, sub = memory.client("B2"), memory.client("B3")
        pub.advertise(f"[class,eq,{cls}],[price,isPresent,0]")
        sub.subscribe(f"[class,eq,{cls}],[price,>,10]")
        memory.settle()
        pub_id = pub.publish(f"[class,{cls}],[price,1]")  # matches no one
        memory.settle()
        routed = [broker.uri.id for broker in memory.brokers if pub_id in broker.router.seen]
        assert routed == (list(STAR) if routing == "flooding" else ["B2"])
        assert [broker.status()["routing"] for broker in memory.brokers] == [routing] * len(STAR)
        pub.publish(f"[class,{cls}],[price,20]")
        assert memory.received(sub) == [f"[class,{cls}],[price,20]"]
    finally:
        memory.close()


def test_processes_really_ran(processes: dict[str, BrokerURI]) -> None:
    """Guard: the process back end is not silently the simulator."""
    assert status(processes["B1"])["neighbors"] == ["B2", "B3", "B4", "B5"]


def test_tls_processes_really_use_tls(tls_processes: dict[str, BrokerURI], certs: Path) -> None:
    """Guard: the TLS back end's brokers refuse a plain client, and link over TLS."""
    assert status(tls_processes["B1"]) == {}
    report = status(tls_processes["B1"], watcher(certs))
    assert report["neighbors"] == ["B2", "B3", "B4", "B5"]
    assert report["counters"]["link.tls_refused"] >= 1  # type: ignore[index]
