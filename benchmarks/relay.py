"""A relay that speaks the broker's wire protocol and does nothing else: the floor of this design.

Why it exists: issue 37's targets (1x Redis through one broker, 5 µs of broker CPU per
publication) are out of reach of a Python asyncio broker, and ``benchmarks/overlay.py --floor``
shows which physical cost stops them. This is the server it measures against ``wfm broker``: it
talks to our real clients (``broker.client``) as a broker would, through the same
``broker.transport.link.Link`` (frames cut by its ``FrameDecoder``, everything queued for a peer
written in one ``write`` per batch), and does per publication only what the clients need:

* to the publisher, the ``Ack`` its ``Publish`` asks for (the overlay-wide id a broker gives it);
* to every client holding a subscription, a ``Deliver`` naming its subscriptions, carried in
  custody (``Carry(seq, ...)``) as a broker carries it, so the subscriber does the same work
  (and says ``Took`` every 64 deliveries, which is read and ignored).

No matching (every subscriber gets every publication), no routing tables, no custody kept, no
log. Two ways, one process each (``--codec``):

* plain: the publication is never decoded. ``msgspec.Raw`` splits a ``Publish`` frame into its
  fields without building them; the publication's bytes go into the ``Deliver`` as they came,
  only the ref (a short string) is decoded, to make the ids. This is the floor of asyncio,
  framing and system calls for our protocol.
* ``--codec``: every frame is decoded with ``broker.transport.codec.decode`` (the message records
  and the ``Publication`` a broker builds) and every answer encoded with ``encode``: the plain
  relay plus the codec's share.

The handshake and the few control frames (``Hello``, ``Advertise``, ``Subscribe``,
``StatusRequest``, ``Ping``, ``Bye``) are decoded in both: they are not per publication. Run by
``overlay.py --floor`` as ``python benchmarks/relay.py --uri socket://127.0.0.1:PORT/R1``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import secrets
import struct
import time
from typing import Any

import msgspec

from broker import loops
from broker.errors import BadMessage
from broker.messages import (
    Ack,
    Advertise,
    Bye,
    Carry,
    Deliver,
    Hello,
    Ping,
    Pong,
    Publish,
    StatusReply,
    StatusRequest,
    Subscribe,
    Took,
    Unadvertise,
    Unsubscribe,
    WireMessage,
)
from broker.transport.codec import decode, encode
from broker.transport.link import Link, Reader, Writer
from broker.transport.uri import BrokerURI

__all__ = ["RawLink", "Relay"]

_HEADER = struct.Struct(">I")
_SPLIT = msgspec.msgpack.Decoder(list[msgspec.Raw])  # a frame's fields, each left as its bytes
_TEXT = msgspec.msgpack.Decoder(str)
_ENCODER = msgspec.msgpack.Encoder()
_PUB, _TOOK, _TRUE = (msgspec.Raw(msgspec.msgpack.encode(v)) for v in ("pub", "took", True))


class RawLink(Link):
    """A ``Link`` that also queues frames already encoded; written like the others, in batches."""

    def send_frame(self, frame: bytes) -> None:
        if self.closed is None:
            self._queue.append(frame)
            self._queued_bytes += len(frame)
            self._wakeup.set()


class _Peer:
    """One client's link: who it is, its subscriptions (by the ids given), its custody seq."""

    def __init__(self, link: RawLink, name: str) -> None:
        self.link, self.name = link, name
        self.subscriptions: dict[str, str] = {}  # ref -> id
        self.ids: tuple[str, ...] = ()
        self.seq = 0


class Relay:
    """Serves clients as broker ``name``; ``codec``: decode and encode every frame (see above)."""

    def __init__(self, name: str, codec: bool) -> None:
        self.name, self.codec = name, codec
        self.epoch = f"relay:{secrets.token_hex(6)}"
        self.peers: list[_Peer] = []
        self.subscribers: list[_Peer] = []  # the peers with a subscription

    async def serve(self, reader: Reader, writer: Writer) -> None:
        link = RawLink(reader, writer, "?")
        peer: _Peer | None = None
        handle = self._decoded if self.codec else self._raw
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    break
                for payload in link.decoder.feed(data):
                    if peer is None:
                        peer = self._hello(link, payload)
                        if peer is None:
                            return
                    else:
                        handle(peer, payload)
        except (ConnectionError, OSError, BadMessage, ValueError):  # msgspec's DecodeError too
            pass  # a peer gone, or one that is not our client: this relay serves only the benchmark
        finally:
            if peer is not None:
                self.peers.remove(peer)
                self._subscribed(peer)
            await link.wait_closed()

    def _hello(self, link: RawLink, payload: bytes) -> _Peer | None:
        hello = decode(payload)
        if not isinstance(hello, Hello):
            return None
        link.send(Hello("broker", self.name, epoch=self.epoch))
        peer = _Peer(link, hello.id)
        self.peers.append(peer)
        return peer

    def _raw(self, peer: _Peer, payload: bytes) -> None:
        """A frame, the publication left in its bytes: Ack to ``peer``, Carry(Deliver) to each
        subscriber."""
        fields = _SPLIT.decode(payload)
        tag = fields[0]
        if tag == _TOOK:
            return
        if tag != _PUB:
            self._control(peer, decode(payload))
            return
        ref = _TEXT.decode(fields[1])
        overlay_id = f"{self.name}/{peer.name}/{ref}"
        if fields[4] == _TRUE:  # ack asked for
            peer.link.send_frame(_frame(("ack", ref, overlay_id)))
        now = time.time()
        for sub in self.subscribers:
            sub.seq += 1
            deliver = ("deliver", sub.ids, fields[2], overlay_id, now, *fields[6:])
            sub.link.send_frame(_frame(("carry", sub.seq, deliver)))

    def _decoded(self, peer: _Peer, payload: bytes) -> None:
        """The same with the codec: every frame decoded, every answer encoded."""
        message = decode(payload)
        if isinstance(message, Took):
            return
        if not isinstance(message, Publish):
            self._control(peer, message)
            return
        overlay_id = f"{self.name}/{peer.name}/{message.id}"
        if message.ack:
            peer.link.send_frame(encode(Ack(message.id, overlay_id)))
        now = time.time()
        for sub in self.subscribers:
            sub.seq += 1
            deliver = Deliver(sub.ids, message.publication, overlay_id, now, message.qos)
            sub.link.send_frame(encode(Carry(sub.seq, deliver)))

    def _control(self, peer: _Peer, message: WireMessage) -> None:
        """What is not per publication: acknowledged as a broker would, and otherwise ignored."""
        link = peer.link
        if isinstance(message, Advertise | Subscribe):
            overlay_id = f"{self.name}/{peer.name}/{message.id}"
            if isinstance(message, Subscribe):
                peer.subscriptions[message.id] = overlay_id
                self._subscribed(peer)
            link.send(Ack(message.id, overlay_id))
        elif isinstance(message, Unadvertise | Unsubscribe):
            if peer.subscriptions.pop(message.id, None) is not None:
                self._subscribed(peer)
            link.send(Ack(message.id, message.id))
        elif isinstance(message, StatusRequest):
            subscriptions = sum(len(p.subscriptions) for p in self.peers)
            status: dict[str, Any] = {"broker": self.name, "subscriptions": subscriptions, "neighbors": []}
            link.send(StatusReply(message.ref, status))
        elif isinstance(message, Ping):
            link.send(Pong())
        elif isinstance(message, Bye):
            link.close("bye")

    def _subscribed(self, peer: _Peer) -> None:
        """``peer``'s subscriptions changed: the ids its deliveries name, and who subscribes."""
        peer.ids = tuple(peer.subscriptions.values())
        self.subscribers = [p for p in self.peers if p.ids]


def _frame(message: object) -> bytes:
    payload = _ENCODER.encode(message)
    return _HEADER.pack(len(payload)) + payload


async def _main(uri: BrokerURI, codec: bool) -> None:
    relay = Relay(uri.id, codec)
    server = await asyncio.start_server(relay.serve, uri.host, uri.port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", required=True, help="socket://HOST:PORT/ID: where to listen, as whom")
    parser.add_argument("--codec", action="store_true", help="decode and encode every frame")
    args = parser.parse_args()
    gc.set_threshold(50_000, 20, 100)  # as ``wfm broker`` runs (docs/performance.md, Overlay)
    loops.run(_main(BrokerURI.parse(args.uri), args.codec), loops.loop_factory(loops.chosen()))


if __name__ == "__main__":
    main()
