"""The wire vocabulary: every message that crosses a link, and the ids inside them.

This floor sits below routing, transport and the client, and imports only the language model:
a client process gets the messages without the router (and its matcher's NumPy). Each message
is a frozen, slotted dataclass whose fields are its wire fields in order, so a codec can be
derived from these definitions alone: the overlay's messages (``overlay``), a link's session
(``session``), the ids inside them (``ids``) and a site's consensus (``consensus``).
"""

from broker.messages.consensus import (
    Append,
    AppendReply,
    ConsensusMessage,
    Entry,
    HardState,
    VoteReply,
    VoteRequest,
)
from broker.messages.ids import DETECTOR, Hop, Local, LocalId, OverlayId, PartId, PublicationId
from broker.messages.overlay import (
    CARRIED,
    DEFAULT_TTL,
    Ack,
    Advertise,
    Bye,
    Carry,
    ClientMessage,
    CompositeSubscribe,
    Deliver,
    LinkDown,
    LinkMessage,
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
    publication_weight,
    request_ref,
)
from broker.messages.session import Hello, Ping, Pong, WireMessage

__all__ = [
    "CARRIED",
    "DEFAULT_TTL",
    "DETECTOR",
    "Ack",
    "Advertise",
    "Append",
    "AppendReply",
    "Bye",
    "Carry",
    "ClientMessage",
    "CompositeSubscribe",
    "ConsensusMessage",
    "Deliver",
    "Entry",
    "HardState",
    "Hello",
    "Hop",
    "LinkDown",
    "LinkMessage",
    "LinkUp",
    "Local",
    "LocalId",
    "Message",
    "Notify",
    "OverlayId",
    "PartId",
    "Ping",
    "Pong",
    "PublicationId",
    "Publish",
    "Refuse",
    "StatusReply",
    "StatusRequest",
    "Subscribe",
    "Tick",
    "Took",
    "Unadvertise",
    "Unsubscribe",
    "VoteReply",
    "VoteRequest",
    "WireMessage",
    "publication_weight",
    "request_ref",
]
