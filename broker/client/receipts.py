"""What a client tells its broker it has taken, for the broker's custody of its deliveries.

A broker carries each delivery to a client under a sequence number and holds it until the client
says ``Took`` (see ``broker.routing.custody``); after a reconnection it sends again what the
client had not taken. A delivery is taken when the application is done with it, which is when it
asks for the next one from the same stream: a consumer killed while handling a delivery gets it
again from a broker that kept its session. ``Took`` is cumulative, so it covers the deliveries up
to the oldest one some stream still has; it is sent when a consumer has caught up or every
``BATCH`` deliveries, not once per delivery.
"""

from __future__ import annotations

__all__ = ["BATCH", "Receipts"]

BATCH = 64  # deliveries taken between two Took while the consumer is behind


class Receipts:
    def __init__(self) -> None:
        self.broker = ""  # the broker and its custody epoch these seqs belong to
        self.epoch = ""
        self.received = 0  # the last seq that arrived
        self.told = 0  # the last seq the broker was told was taken
        self._open: dict[int, int] = {}  # seq -> its deliveries not yet done, oldest first

    def start(self, broker: str, epoch: str) -> None:
        """A link to ``broker`` in custody ``epoch``: a new one starts counting again."""
        if (broker, epoch) != (self.broker, self.epoch):
            self.broker, self.epoch = broker, epoch
            self.received = self.told = 0
            self._open.clear()

    def greeting(self, broker: str) -> tuple[str, int]:
        """What our hello to ``broker`` says: its epoch we know and the last seq we took."""
        return (self.epoch, self.taken()) if broker == self.broker else ("", 0)

    def arrived(self, seq: int, deliveries: int) -> bool:
        """A carried message with ``deliveries`` put in queues; False if it came before."""
        if seq <= self.received:
            return False
        self.received = seq
        if deliveries:
            self._open[seq] = deliveries
        return True

    def done(self, seq: int) -> None:
        left = self._open.get(seq)
        if left is None:
            return
        if left > 1:
            self._open[seq] = left - 1
        else:
            del self._open[seq]

    def taken(self) -> int:
        return next(iter(self._open)) - 1 if self._open else self.received

    def due(self, caught_up: bool) -> int | None:
        """The seq to say ``Took`` for now, if any."""
        taken = self.taken()
        if taken > self.told and (caught_up or taken - self.told >= BATCH):
            self.told = taken
            return taken
        return None
