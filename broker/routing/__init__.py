"""Content-based routing as a pure state machine (no I/O): the Router and its messages."""

from broker.routing.forwarding import COVERING_MODES
from broker.routing.messages import (
    DEFAULT_TTL,
    Ack,
    Advertise,
    Bye,
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
    Unadvertise,
    Unsubscribe,
)
from broker.routing.router import Output, Router

__all__ = [
    "COVERING_MODES",
    "DEFAULT_TTL",
    "Ack",
    "Advertise",
    "Bye",
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
    "Unadvertise",
    "Unsubscribe",
]
