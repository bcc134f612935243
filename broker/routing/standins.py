"""Stand-in subscriptions: what a broker subscribes on behalf of a neighbour that is away.

A publication goes only where subscriptions were learned, and a neighbour sends us its
subscriptions for an advertisement only once it has *taken* the advertisement. While it is away
(kept for its grace period, its messages held in custody), an advertisement that reaches us
waits in its channel, and every publication under that advertisement would be dropped here as
matching no one, though the neighbour may well have subscribers for it: a trigger publisher that
fails over from a dead broker to its neighbour is exactly that case, and its triggers were lost.

So for every advertisement held for a neighbour whose link is down (sent while it was away, or
sent before and not taken when the link went), the broker subscribes, under the neighbour's hop,
the advertisement's own filter: its publications are held for the neighbour, which filters them
by its own tables when it is back, and the subscription travels upstream like any other, so a
publisher two hops away is covered too. The neighbour's ``Took`` of the advertisement comes after
the subscriptions it sent in answer (``Router._carried``), on the same ordered link, so the stand-in
is withdrawn only once the real ones are in place. Its session ending takes it with the rest.

An advertisement sent to a neighbour that is up gets a stand-in as well: publications that reach
this broker before the neighbour answered go on to it. That covers a middle broker's restart: the
neighbour beyond resends what it held for it, publications included, and the middle broker, which
had no subscription for them yet, now stands in for its other side. For an advertisement of a
client here the stand-in stays here (no message is spent on it): the publications start here. For
one that came from a neighbour it goes upstream too, ahead of our ``Took`` of the advertisement:
that ``Took`` ends the upstream broker's stand-in for us, and the subscribers beyond us have not
answered yet (their subscriptions come through us a round trip later), so without ours what the
upstream broker routed meanwhile matched no one and was lost: the first 1,200 of 10,000
acknowledged publications, B1 to a subscriber on B3, with fsyncs of a few ms.
"""

from __future__ import annotations

from collections import Counter

from broker.routing.custody import Channel, Custody
from broker.routing.messages import DEFAULT_TTL, Advertise, LinkDown, Message, Unadvertise
from broker.routing.tables import Output, Tables

__all__ = ["StandIns"]


class StandIns:
    def __init__(self, broker_id: str, tables: Tables, custody: Custody, counters: Counter[str]) -> None:
        self.broker_id = broker_id
        self.tables, self.custody, self.counters = tables, custody, counters
        # neighbour -> (its channel then, advertisement id -> (stand-in subscription id, sent on))
        self.made: dict[str, tuple[Channel, dict[str, tuple[str, bool]]]] = {}

    def update(self, message: Message, hop: str, out: Output) -> Output:
        """What the router's output ``out`` for ``message`` from ``hop`` changes: stand-ins for
        the advertisements it sends a neighbour, an end to those taken or withdrawn."""
        if self.made:
            channels = self.custody.channels
            for neighbour in [n for n, (then, _) in self.made.items() if channels.get(n) is not then]:
                del self.made[neighbour]  # its session ended, or it came back new: its entries went
        more: Output = []
        for target, sent in out:
            kind = type(sent)
            if kind is Advertise:
                more += self._make(target, sent.id)  # type: ignore[union-attr]
            elif kind is Unadvertise and sent.id in self._made(target):  # type: ignore[union-attr]
                more += self._end(target, sent.id)  # type: ignore[union-attr]
        if not (self.made or self.custody.taken_adverts):
            return more  # the usual case, and the hot path: nothing stood in for
        if isinstance(message, LinkDown) and (channel := self._away(hop)) is not None:
            for adv_id in list(channel.adverts):  # sent, not yet taken: it may never have been
                if not self._made(hop).get(adv_id, ("", True))[1]:
                    more += self._end(hop, adv_id)  # kept here while it was up: now sent on
                more += self._make(hop, adv_id)
        for target, adv_id in self.custody.advertisements_taken():
            if adv_id in self._made(target):
                more += self._end(target, adv_id)
        return more

    def _made(self, hop: str) -> dict[str, tuple[str, bool]]:
        return self.made[hop][1] if hop in self.made else {}

    def _away(self, hop: str) -> Channel | None:
        """The channel of a neighbour whose link is down, kept for its grace period."""
        channel = self.custody.channels.get(hop)
        if channel is None or channel.up or channel.client or hop not in self.tables.neighbors:
            return None
        return channel

    def _make(self, hop: str, adv_id: str) -> Output:
        """A stand-in for ``adv_id`` under ``hop``. It is sent on like any subscription for a
        neighbour away (a publisher further away must send its publications this way), and for
        an advertisement that came from another neighbour (whose stand-in for us ends at our
        ``Took`` of it, before ``hop`` answered). For a neighbour that is up and an advertisement
        of a client here it stays here: it only carries on to the neighbour what reaches this
        broker before the neighbour's answer, such as what a neighbour resends after this broker
        came back (a middle broker's restart), at no cost in messages when nothing does."""
        channel = self.custody.channels.get(hop)
        entry = self.tables.srt.get(adv_id)
        if channel is None or channel.client or hop not in self.tables.neighbors or entry is None:
            return []
        if adv_id in self._made(hop):
            return []  # (no empty entry left behind: it would keep ``update`` off its fast path)
        _, made = self.made.setdefault(hop, (channel, {}))
        # "~" is in no peer id, so this id is no client's ("<broker>/<client>/<ref>") nor another's
        sub_id = f"{self.broker_id}~stand-in~{hop}~{adv_id}"
        sent_on = not channel.up or entry.hop in self.tables.neighbors
        made[adv_id] = (sub_id, sent_on)
        self.counters["stand_ins.made"] += 1
        self.counters["stand_ins.sent_on"] += sent_on
        return self.tables.subscribe(sub_id, entry.filter, hop, DEFAULT_TTL, forward=sent_on)

    def _end(self, hop: str, adv_id: str) -> Output:
        made = self.made[hop][1]
        sub_id, _ = made.pop(adv_id)
        if not made:
            del self.made[hop]
        entry = self.tables.prt.get(sub_id)
        if entry is None or entry.hop != hop:
            return []
        self.counters["stand_ins.ended"] += 1
        return self.tables.withdraw(sub_id)

    def status(self) -> dict[str, int]:
        return {"stand_ins": sum(len(made) for _, made in self.made.values())}
