"""An overlay of routers wired together in memory: deterministic, no sockets, no threads.

Messages travel through one FIFO queue and each client call runs the overlay until it is quiet,
so a test reads like a script and sees exactly what a real overlay would do, hop by hop.

With ``interleave=random.Random(seed)`` the overlay behaves more like real processes: each link
stays FIFO but the next message is taken from a link chosen at random, and a client call returns
as soon as its answer arrives, leaving the rest of the work in flight to mix with the next call's
(``run()`` lets it finish). The seed makes any interleaving it finds reproducible. Every
message that crosses a broker-to-broker link is counted per link and per type (what a ``Carry``
carries, not the envelope; custody's ``Took`` answers apart, in ``acks``): these counts are the
traffic figures of the evaluation. Custody is acknowledged as a real broker does after a log
commit: the last ``Took`` of each link goes when the overlay is otherwise quiet (with
``prompt_tooks``, each goes in its place among the broker's outputs, as after a fast one). A refused
request raises ``RefusedError`` as a real client does, so a suite run against both the simulator
and real brokers catches one error.
"""

from __future__ import annotations

import pickle
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.errors import RefusedError
from broker.language import Policy, parse_composite, parse_filter, parse_publication
from broker.language.model import Composite, Filter, Publication
from broker.messages import (
    DEFAULT_QOS,
    Ack,
    Advertise,
    Bye,
    Cancel,
    Carry,
    CompositeSubscribe,
    Deliver,
    LinkDown,
    LinkUp,
    Message,
    Notify,
    Publish,
    Qos,
    Refuse,
    Standby,
    Subscribe,
    TakeOver,
    Tick,
    Took,
    Unadvertise,
    Unsubscribe,
)
from broker.routing.router import Router

__all__ = ["Overlay", "RefusedError", "SimClient"]


@dataclass
class SimClient:
    name: str
    broker: str
    overlay: Overlay
    deliveries: list[Deliver] = field(default_factory=list)
    notifications: list[Notify] = field(default_factory=list)
    refusals: list[Refuse] = field(default_factory=list)
    _acks: dict[str, str] = field(default_factory=dict)
    _next: int = 0
    took: int = 0  # the last carried delivery taken: what a reconnection resumes from
    taking: bool = True  # False: deliveries arrive but are never taken (a consumer that hangs)
    channel: str = ""  # the broker's name for the channel of its deliveries to this client
    noted: str = ""  # what its hellos say it knows was taken over of its session (``Hello.noted``)
    refused_hello: str = ""  # why its broker refused its last hello ("" if it did not)

    def _request(self, message: Message, ref: str) -> str:
        self.overlay._send(self.name, self.broker, message)
        self.overlay.run(lambda: ref in self._acks or any(r.ref == ref for r in self.refusals))
        if ref in self._acks:
            return self._acks.pop(ref)
        refused = [r for r in self.refusals if r.ref == ref]
        raise RefusedError(refused[-1].reason if refused else f"no answer to {ref}")

    def _ref(self) -> str:
        self._next += 1
        return str(self._next)

    def advertise(self, advertisement: str | Filter) -> str:
        ref = self._ref()
        return self._request(Advertise(ref, _filter(advertisement)), ref)

    def subscribe(self, subscription: str | Filter) -> str:
        ref = self._ref()
        return self._request(Subscribe(ref, _filter(subscription)), ref)

    def subscribe_composite(
        self,
        composite: str | Composite,
        clear: str | Filter | None = None,
        policy: str = "chronicle",
        priority: int = 4,
    ) -> str:
        ref = self._ref()
        parsed = parse_composite(composite) if isinstance(composite, str) else composite
        condition = parse_filter(clear, allow_variables=True) if isinstance(clear, str) else clear
        message = CompositeSubscribe(ref, parsed, condition, policy=Policy.named(policy), priority=priority)
        return self._request(message, ref)

    def declare_standbys(self, keys: dict[str, tuple[tuple[str, ...], float]]) -> str:
        ref = self._ref()
        declared = tuple((key, who, after) for key, (who, after) in sorted(keys.items()))
        return self._request(Standby(ref, declared), ref)

    def take_over(self, primary: str, key: str) -> str:
        ref = self._ref()
        return self._request(TakeOver(ref, primary, key), ref)

    def leave(self) -> None:
        """Say goodbye (``Bye``): its session ends now."""
        self.overlay._send(self.name, self.broker, Bye())
        self.overlay.run()

    def fired(self) -> list[list[str]]:
        """Each composite notification so far as the canonical texts of its publications; then
        forget them."""
        texts = [[str(p) for p in n.publications] for n in self.notifications]
        self.notifications.clear()
        return texts

    def publish(self, publication: str | Publication, qos: Qos = DEFAULT_QOS) -> str:
        ref = self._ref()
        if isinstance(publication, str):
            publication = parse_publication(publication)
        return self._request(Publish(ref, publication, qos=qos), ref)

    def cancel(self, mid: str) -> str:
        ref = self._ref()
        return self._request(Cancel(ref, mid), ref)

    def unadvertise(self, adv_id: str) -> None:
        self._request(Unadvertise(adv_id), adv_id)

    def unsubscribe(self, sub_id: str) -> None:
        self._request(Unsubscribe(sub_id), sub_id)

    def received(self) -> list[str]:
        """Canonical texts of the publications delivered so far, in order."""
        return [str(d.publication) for d in self.deliveries]

    def take(self) -> list[str]:
        """``received()``, then forget them."""
        texts = self.received()
        self.deliveries.clear()
        return texts


def _filter(value: str | Filter) -> Filter:
    return parse_filter(value) if isinstance(value, str) else value


class Overlay:
    def __init__(
        self,
        covering: str = "off",
        advertisement_covering: bool = False,
        interleave: random.Random | None = None,
        session_grace: float = 0.0,
        session_max_queued: int = 10_000,
        prompt_tooks: bool = False,
        routing: str = "filter",
        ordering: str = "FIFO",
        parents: dict[str, str] | None = None,
    ) -> None:
        self.interleave = interleave
        self.ordering = ordering  # every broker's; under TOTAL each needs its parent (but the root)
        self.parents = parents or {}
        self.prompt_tooks = prompt_tooks  # each Took in its place, as after a fast commit
        self.session_grace = session_grace
        self.session_max_queued = session_max_queued
        self.covering = covering
        self.advertisement_covering = advertisement_covering
        self.routing = routing  # every broker's: "filter" or "flooding"
        self.routers: dict[str, Router] = {}
        self.clients: dict[str, SimClient] = {}
        self.links: set[frozenset[str]] = set()
        self.queue: deque[tuple[str, str, Message]] = deque()
        self.traffic: Counter[tuple[str, str, str]] = Counter()  # (from, to, message type)
        self.acks = 0  # Took answers that crossed broker links
        self._took: dict[tuple[str, str], Took] = {}  # the last of each link, sent when quiet
        self.now = 1_800_000_000.0
        self.epochs: Counter[str] = Counter()
        self.channels = 0  # channels named by hellos
        self._logs: dict[str, bytes] = {}  # what a crashed broker's write-ahead log holds

    # building -----------------------------------------------------------------------------------

    def add_broker(self, broker_id: str) -> Router:
        self.epochs[broker_id] += 1
        router = Router(
            broker_id,
            self.covering,
            self.advertisement_covering,
            session_grace=self.session_grace,
            epoch=f"{broker_id}.{self.epochs[broker_id]}",
            routing=self.routing,
            ordering=self.ordering,
            parent=self.parents.get(broker_id, ""),
        )
        router.custody.max_held = self.session_max_queued
        self.routers[broker_id] = router
        return router

    def _name(self, broker: str, hop: str) -> str:
        """What ``broker``'s hello to ``hop`` names its channel: the one it has, or a new one."""
        name = self.routers[broker].custody.greeting(hop)[0]
        if not name:
            self.channels += 1
            name = f"{self.routers[broker].custody.epoch}:s{self.channels}"
        return name

    def _hello(self, listener: str, speaker: str, names: dict[str, str]) -> LinkUp:
        """What ``listener`` learns from ``speaker``'s hello, as ``RouterService`` works it out;
        ``names`` are the channel names both hellos gave."""
        if speaker in self.clients:
            client = self.clients[speaker]
            resume = client.took if client.channel == names[listener] else None
            if client.channel != names[listener]:  # a new session: its seqs start again
                client.channel, client.took = names[listener], 0
            return LinkUp(broker=False, resume=resume, name=names[listener])
        _, knows, took = self.routers[speaker].custody.greeting(listener)
        return LinkUp(True, names[speaker], took if knows == names[listener] else None, name=names[listener])

    def _link(self, a: str, b: str) -> None:
        """Both hellos of a link between ``a`` and ``b`` (a client, or a broker), then the LinkUps.
        A broker that kept a session for the other whose grace is over withdraws it first, as
        ``RouterDriver.session_ends`` has it, so its hello names a new channel."""
        if a in self.clients and (handed := self.routers[b].sessions.handed_over(a, self.clients[a].noted)):
            self.clients[a].refused_hello = handed  # as ``RouterService`` refuses its hello
            return
        if a in self.clients:
            self.clients[a].refused_hello = ""
        for broker, hop in ((a, b), (b, a)):
            if broker in self.routers and self.routers[broker].sessions.ends_by(hop, self.now):
                for target, out in self.routers[broker].handle(Tick(), "", self.now):
                    self._send(broker, target, out)
        names = {x: self._name(x, y) for x, y in ((a, b), (b, a)) if x in self.routers}
        ups = [(x, y, self._hello(x, y, names)) for x, y in ((a, b), (b, a)) if x in self.routers]
        for listener, speaker, up in ups:
            self._send(speaker, listener, up)

    def connect(self, a: str, b: str) -> None:
        self.links.add(frozenset((a, b)))
        self._link(a, b)
        self.run()

    def disconnect(self, a: str, b: str) -> None:
        self.links.discard(frozenset((a, b)))
        self._send(b, a, LinkDown())
        self._send(a, b, LinkDown())
        self.run()

    def _neighbours(self, broker_id: str) -> list[str]:
        """Sorted: a set's order changes with PYTHONHASHSEED, and a seeded run must replay."""
        return sorted(next(iter(link - {broker_id})) for link in self.links if broker_id in link)

    def restart(self, broker_id: str) -> None:
        """The broker loses all its state; its links go down and come back, its clients are gone."""
        neighbours = self._neighbours(broker_id)
        for name in [c.name for c in self.clients.values() if c.broker == broker_id]:
            del self.clients[name]
        for other in neighbours:
            self.disconnect(broker_id, other)
        self.add_broker(broker_id)
        for other in neighbours:
            self.connect(broker_id, other)

    def crash(self, broker_id: str) -> None:
        """SIGKILL of a broker that keeps a write-ahead log: what was in flight to it is lost (its
        senders still hold it), its neighbours and clients see their links go down. ``recover``
        brings it back from its log."""
        self.queue = deque(item for item in self.queue if broker_id not in item[:2])
        self._took = {link: took for link, took in self._took.items() if broker_id not in link}
        self._logs[broker_id] = pickle.dumps(self.routers.pop(broker_id).snapshot())  # all it took is logged
        for other in self._neighbours(broker_id):
            self._send(broker_id, other, LinkDown())
        self.run()

    def recover(self, broker_id: str, neighbours: bool = True) -> None:
        """The crashed broker restarts from its log: every link it had went down, then its
        neighbours and clients reconnect and each side resends what the other had not taken.
        ``neighbours`` False: only its clients do, and each neighbour when ``connect``ed."""
        router = Router.restore(pickle.loads(self._logs.pop(broker_id)))
        router.custody.max_held = self.session_max_queued  # a setting, as ``add_broker`` gave it
        self.routers[broker_id] = router
        for hop in [hop for hop, channel in router.custody.channels.items() if channel.up]:
            router.handle(LinkDown(), hop, self.now)  # before any link is back, as ``RouterService``
            # restores: what this sends goes nowhere (custody holds what it carries, for the resume)
        if router.sessions.away:  # and sessions whose grace ran out while it was down end
            router.handle(Tick(), "", self.now)
        for other in self._neighbours(broker_id) if neighbours else []:
            self._link(broker_id, other)
        for client in self.clients.values():
            if client.broker == broker_id:
                self._link(client.name, broker_id)
        self.run()

    def add_client(self, name: str, broker: str) -> SimClient:
        if name in self.clients or name in self.routers:
            raise ValueError(f"name {name!r} is taken")
        client = SimClient(name, broker, self)
        self.clients[name] = client
        self._link(name, broker)
        self.run()
        return client

    def remove_client(self, name: str) -> None:
        client = self.clients.pop(name)
        self._send(name, client.broker, LinkDown())
        self.run()

    def drop_client(self, name: str) -> None:
        """The client's link goes down but the client lives on (its process, its state): what
        reaches it meanwhile is lost unless its broker keeps its session; ``reconnect`` it."""
        self.queue = deque(item for item in self.queue if item[1] != name)  # in flight to it: lost
        self._send(name, self.clients[name].broker, LinkDown())
        self.run()

    def reconnect(self, name: str) -> None:
        self._link(name, self.clients[name].broker)
        self.run()

    def advance(self, seconds: float) -> None:
        """Time passes; every broker hears a ``Tick``, as a real one does every second."""
        self.now += seconds
        for broker_id in self.routers:
            self._send(broker_id, broker_id, Tick())
        self.run()

    @classmethod
    def line(cls, count: int, **options: object) -> Overlay:
        """B1 - B2 - ... - Bn."""
        overlay = cls(**options)  # type: ignore[arg-type]
        for i in range(1, count + 1):
            overlay.add_broker(f"B{i}")
        for i in range(1, count):
            overlay.connect(f"B{i}", f"B{i + 1}")
        return overlay

    @classmethod
    def star(cls, leaves: int = 4, **options: object) -> Overlay:
        """B1 in the centre (the root), B2..B(leaves+1) around it."""
        options.setdefault("parents", {f"B{i}": "B1" for i in range(2, leaves + 2)})
        overlay = cls(**options)  # type: ignore[arg-type]
        overlay.add_broker("B1")
        for i in range(2, leaves + 2):
            overlay.add_broker(f"B{i}")
            overlay.connect("B1", f"B{i}")
        return overlay

    # running ------------------------------------------------------------------------------------

    def _send(self, source: str, target: str, message: Message) -> None:
        between_brokers = source in self.routers and target in self.routers
        if isinstance(message, Took) and between_brokers and not self.prompt_tooks:
            self._took[(source, target)] = message
        else:
            self.queue.append((source, target, message))

    def run(self, answered: Callable[[], bool] | None = None) -> None:
        """Deliver queued messages, and whatever they cause, until the overlay is quiet (when
        interleaving, until ``answered()`` if given)."""
        if self.interleave is None:
            answered = None
        while not (answered is not None and answered()):
            if not self.queue:
                if not self._took:
                    return
                self.acks += len(self._took)
                self.queue.extend((source, target, took) for (source, target), took in self._took.items())
                self._took.clear()
            source, target, message = self._next()
            if target in self.clients and source in self.routers:
                self._to_client(self.clients[target], message)
                continue
            router = self.routers.get(target)
            if router is None:
                continue
            if source in self.routers and not isinstance(message, LinkUp | LinkDown | Tick | Took):
                carried = message.message if isinstance(message, Carry) else message
                self.traffic[(source, target, type(carried).__name__)] += 1
            for hop, out in router.handle(message, source, self.now):
                self._send(target, hop, out)

    def _next(self) -> tuple[str, str, Message]:
        if self.interleave is None:
            return self.queue.popleft()
        links = list(dict.fromkeys((source, target) for source, target, _ in self.queue))
        link = self.interleave.choice(links)
        for i, (source, target, message) in enumerate(self.queue):
            if (source, target) == link:
                del self.queue[i]
                return source, target, message
        raise AssertionError("unreachable: the chosen link has a message")

    def _to_client(self, client: SimClient, message: Message) -> None:
        if isinstance(message, Carry):  # taken at once: this client handles it as it arrives
            if message.seq <= client.took:
                return
            if client.taking:
                client.took = message.seq
                self._send(client.name, client.broker, Took(message.seq))
            message = message.message
        if isinstance(message, Deliver):
            client.deliveries.append(message)
        elif isinstance(message, Notify):
            client.notifications.append(message)
        elif isinstance(message, Ack):
            client._acks[message.ref] = message.id
        elif isinstance(message, Refuse):
            client.refusals.append(message)

    # counting -----------------------------------------------------------------------------------

    def messages(self, kind: str | None = None) -> int:
        """Messages that crossed broker-to-broker links (hops travelled), of one type or all."""
        return sum(n for (_, _, k), n in self.traffic.items() if kind is None or k == kind)

    def reset_traffic(self) -> None:
        self.traffic.clear()
