"""Content-based routing as a pure state machine (no I/O): the Router and its messages."""

from broker.routing.forwarding import COVERING_MODES
from broker.routing.messages import (
    DEFAULT_TTL,
    Ack,
    Advertise,
    CompositeSubscribe,
    Deliver,
    LinkDown,
    LinkUp,
    Tick,
    Message,
    Notify,
    Publish,
    Refuse,
    StatusReply,
    StatusRequest,
    Subscribe,
    Unadvertise,
    Unsubscribe,
)
from broker.routing.router import Output, Router

__all__ = [
    "COVERING_MODES",
    "DEFAULT_TTL",
    "Ack",
    "Advertise",
    "CompositeSubscribe",
    "Deliver",
    "LinkDown",
    "LinkUp",
    "Tick",
    "Message",
    "Notify",
    "Output",
    "Publish",
    "Refuse",
    "Router",
    "StatusReply",
    "StatusRequest",
    "Subscribe",
    "Unadvertise",
    "Unsubscribe",
]
