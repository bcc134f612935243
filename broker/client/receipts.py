"""What a client tells its brokers it has taken, for the brokers' custody of its deliveries.

A broker carries each delivery to a client under a sequence number and holds it until the client
says ``Took`` (see ``broker.routing.custody``); after a reconnection it sends again what the
client had not taken. A delivery is taken when the application is done with it, which is when it
asks for the next one from the same stream: a consumer killed while handling a delivery gets it
again from a broker that kept its session. ``Took`` is cumulative, so it covers the deliveries up
to the oldest one some stream still has; it is sent every ``BATCH`` deliveries while a consumer
is behind, and ``DELAY`` seconds after it caught up, not once per delivery. A consumer that keeps
up with a steady stream (an agent, the historian) catches up after every delivery: a Took each
was a third of what a broker handled in a busy workflow, for nothing the broker needs at once
(what it holds meanwhile is sent again only after a reconnection, and dropped there as a resend).

A client that fails over keeps what it knows of each broker's channel: back at the first broker
(whose session kept what it held for it), its hello says how far it took, and deliveries of the
first broker still in its queues are reckoned to that broker's channel, not the new one's.

The brokers of a replicated site share one channel with each client (``docs/sites.md``): a
client that moves to another broker of its site greets it with the channel it has (the broker it
dials for the first time gets the current one, which a broker of another site does not know and
ignores), and the new broker's hello names the same channel, so the count goes on: what it sends
again that the client had is dropped here, as from the broker before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BATCH", "DELAY", "Receipts"]

BATCH = 64  # deliveries taken between two Took while the consumer is behind
DELAY = 0.02  # seconds a caught-up consumer's Took waits, to cover what it takes meanwhile


@dataclass(slots=True)
class _Channel:
    name: str  # the broker's name for it (its hello's epoch)
    received: int = 0  # the last seq that arrived
    told: int = 0  # the last seq the broker was told was taken
    open: dict[int, int] = field(default_factory=dict)  # seq -> its deliveries not done, oldest first

    def taken(self) -> int:
        return next(iter(self.open)) - 1 if self.open else self.received


class Receipts:
    def __init__(self) -> None:
        self._channels: dict[str, _Channel] = {}  # broker id -> the channel of its deliveries
        self._current = _Channel("")

    def start(self, broker: str, name: str) -> None:
        """A link to ``broker``, whose hello named its channel ``name``: the count of that channel
        goes on (another broker of the same site may have named it before); a new name, a new
        count."""
        channel = self._channels.get(broker)
        if channel is None or channel.name != name:
            shared = name and self._current.name == name  # the site's, from another of its brokers
            channel = self._channels[broker] = self._current if shared else _Channel(name)
        self._current = channel

    @property
    def channel(self) -> str:
        return self._current.name

    @property
    def received(self) -> int:
        return self._current.received

    def greeting(self, broker: str) -> tuple[str, int]:
        """What our hello to ``broker`` says: its channel we know and the last seq we took; to a
        broker never reached, the current channel's (the same site's brokers share it)."""
        channel = self._channels.get(broker, self._current)
        return (channel.name, channel.taken())

    def arrived(self, seq: int, deliveries: int) -> bool:
        """A carried message with ``deliveries`` put in queues; False if it came before."""
        channel = self._current
        if seq <= channel.received:
            return False
        channel.received = seq
        if deliveries:
            channel.open[seq] = deliveries
        return True

    def done(self, name: str, seq: int) -> None:
        """A delivery of channel ``name`` is done with (whichever broker it came from)."""
        channel: _Channel | None = self._current  # nearly always: no search (a generator per delivery)
        if self._current.name != name:
            channel = next((c for c in self._channels.values() if c.name == name), None)
        left = None if channel is None else channel.open.get(seq)
        if channel is None or left is None:
            return
        if left > 1:
            channel.open[seq] = left - 1
        else:
            del channel.open[seq]

    def again(self) -> None:
        """The broker sent again what we took: our Took was lost; say it again."""
        self._current.told = 0

    def due(self, caught_up: bool) -> int | None:
        """The seq to say ``Took`` for now on the current channel, if any."""
        channel = self._current
        taken = channel.taken()
        if taken > channel.told and (caught_up or taken - channel.told >= BATCH):
            channel.told = taken
            return taken
        return None
