"""Content-based routing as a pure state machine (no I/O): the Router and its messages.

The router's names are imported when first used (PEP 562): a client needs the messages only,
and the router's matcher brings NumPy, about 60 ms at the start of every client process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.lazy import lazy_names
from broker.routing.messages import (
    DEFAULT_TTL,
    Ack,
    Advertise,
    Bye,
    Carry,
    CompositeSubscribe,
    Deliver,
    LinkDown,
    LinkUp,
    Message,
    Notify,
    Publish,
    Refuse,
    StatusReply,
    StatusRequest,
    Subscribe,
    Tick,
    Took,
    Unadvertise,
    Unsubscribe,
)

if TYPE_CHECKING:
    from broker.routing.forwarding import COVERING_MODES
    from broker.routing.router import Output, Router

__all__ = [
    "COVERING_MODES",
    "DEFAULT_TTL",
    "Ack",
    "Advertise",
    "Bye",
    "Carry",
    "CompositeSubscribe",
    "Deliver",
    "LinkDown",
    "LinkUp",
    "Message",
    "Notify",
    "Output",
    "Publish",
    "Refuse",
    "Router",
    "StatusReply",
    "StatusRequest",
    "Subscribe",
    "Tick",
    "Took",
    "Unadvertise",
    "Unsubscribe",
]

__getattr__ = lazy_names(
    __name__,
    {"COVERING_MODES": "forwarding", "Output": "router", "Router": "router"},
)
