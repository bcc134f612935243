"""The line commands ``wfm client`` reads on stdin, applied to a :class:`broker.client.Client`.

One command a line: ``a``/``s``/``cs`` advertise, subscribe and composite-subscribe (``cs
[POLICY] COMPOSITE``, the policy a word such as ``recent`` or ``padres``), ``p``
publishes (``p PUBLICATION [priority=0..9] [ttl=DURATION] [id=ID] [ack=receipt|client] [retain
[cancel=any]]``, its quality of service after it; the acks it asked for are reported as they
come), ``cancel ID`` cancels a retained publication, ``ack ID``
acknowledges a delivery whose publisher asked for it (by the publisher's id for it, or the
publication's), ``pull N`` asks the broker for N more deliveries and keeps the rest waiting in
its custody until asked again, ``push`` has them pushed again, ``ua``/``us`` withdraw by id,
``sleep`` waits while deliveries keep arriving. A line is
applied at the broker before the next is read; what it says back is returned for the caller to show.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.client import Client, Delivery
from broker.language import parse_composite_subscription, parse_filter, parse_publication
from broker.messages import MAX_PULL
from broker.messages.qos import Qos, parse_duration

__all__ = ["Console", "apply_line"]

RECEIPT_WAIT = 30.0  # seconds ``p ... ack=`` waits for the first acknowledgement


@dataclass
class Console:
    """What one ``wfm client`` remembers between lines: the deliveries whose publisher asked for
    the application's ack (by publication id and by the publisher's own id), and ``say``, where
    acks of our own publications are reported as they come."""

    say: Callable[[str], None]
    awaiting: dict[str, Delivery] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def delivered(self, delivery: Delivery) -> None:
        if delivery.qos.ack == "client":
            self.awaiting[delivery.id] = delivery
            if delivery.qos.mid:
                self.awaiting[delivery.qos.mid] = delivery

    async def report(self, session: Client, publication_id: str, mid: str) -> None:
        named = f"{publication_id} ({mid})" if mid else publication_id
        try:
            receipt = await session.receipt(publication_id, RECEIPT_WAIT)
        except TimeoutError:
            self.say(f"no ack of {named} within {RECEIPT_WAIT:g} s")
        else:
            self.say(f"{receipt.kind} {named} by {receipt.by}")


async def apply_line(session: Client, line: str, console: Console | None = None) -> str | None:
    """Apply one command line: ``adv ID`` or ``sub ID`` for a new advertisement or subscription,
    else None. ParseError, RefusedError or ValueError for a line that cannot be applied."""
    console = console or Console(lambda text: None)
    command, _, rest = line.partition(" ")
    rest = rest.strip()
    if command == "a":
        return f"adv {await session.advertise(parse_filter(rest))}"
    if command == "s":
        return f"sub {(await session.subscribe(parse_filter(rest), own_queue=False)).id}"
    if command == "cs":
        composite, policy = parse_composite_subscription(rest)
        return f"sub {(await session.subscribe_composite(composite, own_queue=False, policy=policy)).id}"
    if command == "p":
        text, qos = _publication_and_qos(rest)
        publication_id = await session.publish(parse_publication(text), qos)
        if qos.ack != "none":
            task = asyncio.get_running_loop().create_task(console.report(session, publication_id, qos.mid))
            console.tasks.add(task)
            task.add_done_callback(console.tasks.discard)
    elif command == "ack":
        delivery = console.awaiting.get(_one_word(rest, "ack"))
        if delivery is None:
            raise ValueError(f"no delivery {rest!r} waits for an ack")
        await session.ack(delivery)
        for key in (delivery.id, delivery.qos.mid):
            console.awaiting.pop(key, None)
    elif command == "cancel":
        await session.cancel(_one_word(rest, "cancel"))
    elif command == "pull":
        session.pull(_count(rest))
    elif command == "push":
        if rest:
            raise ValueError("push takes nothing after it")
        session.push()
    elif command == "ua":
        await session.unadvertise(_one_word(rest, "ua"))
    elif command == "us":
        await session.unsubscribe(_one_word(rest, "us"))
    elif command == "sleep":
        await asyncio.sleep(_seconds(rest))
    else:
        raise ValueError(
            f"unknown command {command!r} (use a, s, cs, p, ack, cancel, pull, push, ua, us or sleep)"
        )
    return None


# what may follow a publication: INTERFACE.md §5's words, and ``persistent=false`` (or ``no``):
# persistent is the default, so the bare word only says so again
_QOS_WORD = re.compile(r"(priority|ttl|ack|id|cancel|persistent)=\S*|persistent|retain")
_YES_NO = {"true": True, "yes": True, "false": False, "no": False}


def _publication_and_qos(rest: str) -> tuple[str, Qos]:
    """The publication and the quality of service the words after it ask for."""
    words = rest.split(" ")
    settings: dict[str, Any] = {}
    while len(words) > 1 and _QOS_WORD.fullmatch(words[-1]):
        name, given, value = words.pop().partition("=")
        if ("mid" if name == "id" else name) in settings:
            raise ValueError(f"{name} is given twice")
        if name == "priority":
            if not value.isdigit():
                raise ValueError(f"priority must be 0 to 9, not {value!r}")
            settings[name] = int(value)
        elif name == "ttl":
            settings[name] = parse_duration(value)
        elif name == "persistent" and given:
            if value.lower() not in _YES_NO:
                raise ValueError(f"persistent must be true or false (yes or no), not {value!r}")
            settings[name] = _YES_NO[value.lower()]
        elif name in ("persistent", "retain"):
            settings[name] = True
        elif name in ("ack", "cancel"):
            settings[name] = value
        else:
            settings["mid"] = value
    return " ".join(words), Qos(**settings)


def _one_word(rest: str, command: str) -> str:
    if not rest or " " in rest:
        raise ValueError(f"{command} needs one id")
    return rest


def _count(rest: str) -> int:
    if not rest.isdigit() or not 0 < int(rest) <= MAX_PULL:
        raise ValueError(f"pull needs a number of deliveries from 1 to {MAX_PULL}, not {rest!r}")
    return int(rest)


def _seconds(rest: str) -> float:
    try:
        seconds = float(rest)
    except ValueError:
        raise ValueError(f"sleep needs a number of seconds, not {rest!r}") from None
    if not 0 <= seconds <= 86400:
        raise ValueError("sleep takes 0 to 86400 seconds")
    return seconds
