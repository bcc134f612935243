"""One routing suite, three back ends: the in-process simulator, real ``wfm broker`` processes,
and the same processes over mutual TLS (clients with their own certificates).

The topology is PADRES's five-broker star (B1 in the centre). Scenarios use their own class names,
so they can share one overlay of processes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from broker.client import BlockingClient
from broker.client import RefusedError as ClientRefused
from broker.sim import Overlay, RefusedError, SimClient
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
    def __init__(self) -> None:
        self.overlay = Overlay.star(4, covering="active")

    def client(self, broker: str) -> SimClient:
        return self.overlay.add_client(f"c{next(_names)}", broker)

    def settle(self) -> None:
        pass

    def received(self, client: Any) -> list[str]:
        return client.take()  # type: ignore[no-any-return]


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


@pytest.fixture(params=["sim", "processes", "tls"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "sim":
        yield SimBackend()
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


def test_processes_really_ran(processes: dict[str, BrokerURI]) -> None:
    """Guard: the process back end is not silently the simulator."""
    assert status(processes["B1"])["neighbors"] == ["B2", "B3", "B4", "B5"]


def test_tls_processes_really_use_tls(tls_processes: dict[str, BrokerURI], certs: Path) -> None:
    """Guard: the TLS back end's brokers refuse a plain client, and link over TLS."""
    assert status(tls_processes["B1"]) == {}
    report = status(tls_processes["B1"], watcher(certs))
    assert report["neighbors"] == ["B2", "B3", "B4", "B5"]
    assert report["counters"]["link.tls_refused"] >= 1  # type: ignore[index]
