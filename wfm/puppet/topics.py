"""SESDAD's topics in our content-based language.

A SESDAD event has a hierarchical topic (``/edu/ulisboa/tecnico``) and a content; a subscription
names a topic, or a prefix of the name space ending in ``*`` (``/edu/ulisboa/*``). Here an event
of publisher ``p0`` with sequence number 12 is the publication

    [class,sesdad],[topic,'/edu/ulisboa/tecnico'],[publisher,'p0'],[seq,12]

a subscription to ``/edu/ulisboa/*`` is ``[class,eq,sesdad],[topic,str-prefix,'/edu/ulisboa/']``
and one to a plain topic uses ``eq``. A publisher advertises each topic the first time it
publishes on it: ``[class,eq,sesdad],[topic,eq,'…'],[publisher,eq,'p0'],[seq,isPresent,0]``, so
subscriptions travel only towards publishers of overlapping topics (SESDAD's "filter" policy).
"""

from __future__ import annotations

import hashlib

__all__ = ["CLASS", "advertisement", "check_topic", "matches", "publication", "request_name", "subscription"]

CLASS = "sesdad"


def check_topic(topic: str, pattern: bool = False) -> str:
    """``topic`` if it can be quoted in our language (no quote, no space, no line break) and, as
    a subscription ``pattern``, has ``*`` only as its last character; ValueError otherwise."""
    if not topic or any(c in topic for c in "'\"\n\r\t "):
        raise ValueError(f"bad topic {topic!r}: no quotes or spaces")
    if "*" in topic[:-1] or (topic.endswith("*") and not pattern):
        raise ValueError(f"bad topic {topic!r}: '*' may only end a subscription's topic")
    return topic


def matches(pattern: str, topic: str) -> bool:
    """Whether a subscription to ``pattern`` wants an event on ``topic``."""
    return topic.startswith(pattern[:-1]) if pattern.endswith("*") else topic == pattern


def subscription(pattern: str) -> str:
    if pattern.endswith("*"):
        return f"[class,eq,{CLASS}],[topic,str-prefix,'{pattern[:-1]}']"
    return f"[class,eq,{CLASS}],[topic,eq,'{pattern}']"


def advertisement(publisher: str, topic: str) -> str:
    return f"[class,eq,{CLASS}],[topic,eq,'{topic}'],[publisher,eq,'{publisher}'],[seq,isPresent,0]"


def publication(publisher: str, topic: str, seq: int) -> str:
    return f"[class,{CLASS}],[topic,'{topic}'],[publisher,'{publisher}'],[seq,{seq}]"


def request_name(kind: str, topic: str) -> str:
    """A stable name for the request about ``topic`` (no ``/``, ``@`` or space), so that a
    restarted process re-makes it under the same ref and its broker's durable session knows it."""
    return f"{kind}-{hashlib.sha256(topic.encode()).hexdigest()[:16]}"
