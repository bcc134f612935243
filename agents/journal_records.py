"""How the agent's journal writes an event it consumed: one JSON object a record.

``{"t": now, "event": kind, ...}``, kind one of ``incoming``, ``delivery``, ``finished``, ``lost``,
``tick``, ``taken`` and ``handed`` (standby agents), with the event's fields. A publication is
kept as its structure, ``[class, {attribute: value}]``, not as its text, which a restart would
have to parse again with the grammar, far slower than building it from the structure. Journals
that hold the text, under ``publication`` / ``publications``, are read by :mod:`agents.old_journal`.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from agents.events import (
    Delivered,
    Event,
    Finished,
    HandedOver,
    Incoming,
    Lost,
    Result,
    Run,
    TakenOver,
    TimePassed,
)
from broker.language import Publication, parse_publication

__all__ = ["decode", "encode", "fields"]


def fields(event: Event) -> dict[str, Any]:
    """The record of ``event`` but its time."""
    if isinstance(event, Incoming):
        return {"event": "incoming", "pub": _structure(event.publication)}
    if isinstance(event, Delivered):
        return {"event": "delivery", "key": event.key, "pubs": [_structure(p) for p in event.publications]}
    if isinstance(event, Finished):
        return {"event": "finished", "run": asdict(event.run), "result": asdict(event.result)}
    if isinstance(event, Lost):
        return {"event": "lost", "run": asdict(event.run)}
    if isinstance(event, TakenOver):
        return {"event": "taken", "key": event.key, "primary": event.primary, "at": event.at}
    if isinstance(event, HandedOver):
        return {"event": "handed", "grants": event.grants}
    return {"event": "tick"}


def encode(event: Event, now: float) -> bytes:
    return json.dumps({"t": now, **fields(event)}, ensure_ascii=False).encode()


def decode(record: dict[str, Any]) -> tuple[Event, float]:
    """The event of a record and when it was consumed; ValueError, KeyError, TypeError or
    :class:`broker.language.ParseError` if it is not one."""
    kind = record["event"]
    if kind == "incoming":
        event: Event = Incoming(_publication(record["pub"] if "pub" in record else record["publication"]))
    elif kind == "delivery":
        publications = record["pubs"] if "pubs" in record else record["publications"]
        event = Delivered(record["key"], tuple(map(_publication, publications)))
    elif kind == "finished":
        event = Finished(Run(**record["run"]), Result(**record["result"]))
    elif kind == "lost":
        event = Lost(Run(**record["run"]))
    elif kind == "tick":
        event = TimePassed()
    elif kind == "taken":
        event = TakenOver(record["key"], record["primary"], float(record["at"]))
    elif kind == "handed":
        event = HandedOver(tuple((str(k), str(who), float(at)) for k, who, at in record["grants"]))
    else:
        raise ValueError(f"unknown event {kind!r}")
    return event, float(record["t"])


def _structure(publication: Publication) -> list[Any]:
    return [publication.cls, dict(publication.fields)]


def _publication(data: Any) -> Publication:
    """``[class, {attribute: value}]``, checked by the constructor as any other; or its text."""
    if isinstance(data, str):
        return parse_publication(data)
    cls, attributes = data
    if not isinstance(cls, str) or not isinstance(attributes, dict):
        raise ValueError(f"not a publication: {data!r:.80}")
    return Publication(cls, attributes)
