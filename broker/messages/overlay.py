"""The messages a router consumes and produces. Everything that crosses a link is one of these.

Frozen, slotted dataclasses that validate their fields on construction (like h11's events), so a
message that exists is well formed; the wire codec only has to build them. Ids are text, as on
the wire: a client names its own requests (``ref``), and the edge broker turns them into
overlay-wide ids (``ids.OverlayId``), so two clients can never collide.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from broker.language.model import (
    And,
    Atom,
    Composite,
    Filter,
    Or,
    Policy,
    Publication,
    Sequence,
    Times,
    composite_variables,
    normalize_value,
)
from broker.language.values import Value, check_name
from broker.messages.qos import DEFAULT_QOS, Qos

__all__ = [
    "CANCEL_SKEW",
    "DEFAULT_TTL",
    "MAX_PULL",
    "Ack",
    "Advertise",
    "Bye",
    "Cancel",
    "Carry",
    "ClientMessage",
    "CompositeSubscribe",
    "Deliver",
    "LinkDown",
    "LinkMessage",
    "LinkUp",
    "Message",
    "Notify",
    "Publish",
    "Pull",
    "Refuse",
    "Renew",
    "Retained",
    "Standby",
    "StatusReply",
    "StatusRequest",
    "Subscribe",
    "TakeOver",
    "Took",
    "Unadvertise",
    "Unsubscribe",
    "request_ref",
]

DEFAULT_TTL = 32  # hops a message may travel: bounds the damage of a misconfigured cyclic overlay
MAX_SIGNER = 4096  # bytes of a signed cancel's certificate (``wfm certs`` makes about 600)
MAX_SIGNATURE = 160  # bytes of its signature (a DER ECDSA P-256 signature is at most 72)
# seconds the clocks of a client that signs a cancel and of the brokers may disagree: a signed
# cancel dated further ahead of a broker's clock is refused, and one cancels only the retained
# publications accepted before it was signed, or less than this after (``retained``)
CANCEL_SKEW = 60.0


# The checks below run for every message built, decoded or not: each takes the common case
# (exact types, which is what msgpack and the router make) first, then the general checks.


def _text(value: object, what: str) -> str:
    if type(value) is str and 0 < len(value) <= 512:
        return value
    if not isinstance(value, str) or not value or len(value) > 512:
        raise ValueError(f"{what} must be a non-empty string of at most 512 characters")
    return value


def _time(value: object, optional: bool = False) -> None:
    if type(value) is float and 0 <= value < 1e11:
        return
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e11:
        raise ValueError("time must be epoch seconds")


def _set_fields(message: object, state: list[object]) -> None:
    """Unpickle a message of a version with fewer trailing fields (a broker's log of the format
    before holds messages without ``qos``): the fields it lacks take their defaults."""
    for index, item in enumerate(fields(message)):  # type: ignore[arg-type]
        object.__setattr__(message, item.name, state[index] if index < len(state) else item.default)


def _priority(value: object, what: str) -> None:
    if type(value) is int and 0 <= value <= 9:
        return
    raise ValueError(f"{what} priority must be an integer from 0 to 9")


def _ttl(value: object) -> int:
    if type(value) is int and 0 <= value <= 255:
        return value
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 255:
        raise ValueError("ttl must be an integer from 0 to 255")
    return value


@dataclass(frozen=True, slots=True)
class Advertise:
    """From a client: ``id`` is its ref. Between brokers: the overlay-wide id."""

    id: str
    filter: Filter
    ttl: int = DEFAULT_TTL

    def __post_init__(self) -> None:
        _text(self.id, "advertisement id")
        _ttl(self.ttl)
        if not isinstance(self.filter, Filter):
            raise ValueError("an advertisement needs a Filter")


@dataclass(frozen=True, slots=True)
class Unadvertise:
    id: str

    def __post_init__(self) -> None:
        _text(self.id, "advertisement id")


@dataclass(frozen=True, slots=True)
class Subscribe:
    """From a client, ``lease`` (seconds, 0 for none) asks that the subscription end unless the
    client renews it (``Renew``) within that time (``broker.routing.leases``)."""

    id: str
    filter: Filter
    ttl: int = DEFAULT_TTL
    lease: float = 0.0

    def __post_init__(self) -> None:
        _text(self.id, "subscription id")
        _ttl(self.ttl)
        if not isinstance(self.filter, Filter):
            raise ValueError("a subscription needs a Filter")
        lease = self.lease
        if lease and (
            isinstance(lease, bool) or not isinstance(lease, int | float) or not 1 <= lease <= 86400
        ):
            raise ValueError("a lease is from 1 to 86400 seconds, or 0 for none")

    def __setstate__(self, state: list[object]) -> None:
        _set_fields(self, state)


@dataclass(frozen=True, slots=True)
class Renew:
    """From a client: its leased subscriptions ``ids`` (their ids at this broker) go on."""

    ids: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.ids, tuple) or not 0 < len(self.ids) <= 10_000:
            raise ValueError("a renewal names 1 to 10000 subscriptions")
        for sub_id in self.ids:
            _text(sub_id, "subscription id")


MAX_PULL = 1_000_000  # data messages one Pull may ask for


@dataclass(frozen=True, slots=True)
class Pull:
    """From a client: deliver it ``more`` data messages as they come, and no more until it asks
    again (``None``: every one, pushed, as before it pulled). What matches meanwhile is kept in
    the broker's custody for its session (``broker.routing.custody``)."""

    more: int | None

    def __post_init__(self) -> None:
        more = self.more
        if more is not None and (type(more) is not int or not 0 <= more <= MAX_PULL):
            raise ValueError(f"a pull asks for 0 to {MAX_PULL} messages")


@dataclass(frozen=True, slots=True)
class CompositeSubscribe:
    """A composite subscription. ``clear``, if given, names the publication that ends a binding:
    when one matches it, the waiting state under its variables' values is dropped (the workflow
    layer passes the generation's APPL_END). ``policy`` says which waiting matches a firing uses
    and consumes; it travels with every part sent on. ``priority`` (0-9, as ``Qos.priority``) is
    its firings': every ``Notify`` of it carries it, so custody moves an urgent firing ahead of
    a backlog; a part sent on carries the highest of those who asked for it
    (``broker.routing.composites``). Withdrawn with ``Unsubscribe`` like any other."""

    id: str
    composite: Composite
    clear: Filter | None = None
    ttl: int = DEFAULT_TTL
    policy: Policy = Policy.CHRONICLE
    priority: int = DEFAULT_QOS.priority

    def __post_init__(self) -> None:
        _text(self.id, "subscription id")
        _ttl(self.ttl)
        _priority(self.priority, "a composite subscription's")
        if not isinstance(self.composite, Atom | And | Or | Sequence | Times):
            raise ValueError("a composite subscription needs a composite")
        if not isinstance(self.policy, Policy):
            raise ValueError("a composite subscription's policy must be a Policy")
        variables = composite_variables(self.composite)
        if self.clear is not None:
            if not isinstance(self.clear, Filter):
                raise ValueError("the clear condition must be a Filter")
            for name, var in self.clear.variables.items():
                if name not in variables:
                    raise ValueError(f"clear uses {var}, which the composite does not bind")
                if variables[name] != var:
                    raise ValueError(f"clear uses {var}, the composite {variables[name]}")

    def __setstate__(self, state: list[object]) -> None:
        _set_fields(self, state)  # one pickled before priorities has the default


@dataclass(frozen=True, slots=True)
class Notify:
    """A composite subscription (or, between brokers, a part of one) fired, with the publications
    that completed it. Between brokers it also carries the variable bindings of the firing, so the
    broker that joins it with other parts need not work them out again; to a client, none.
    ``priority``: the composite subscription's (``CompositeSubscribe.priority``), its lane in
    custody's backlogs."""

    subscription: str
    publications: tuple[Publication, ...]
    bindings: tuple[tuple[str, Value], ...] = ()
    priority: int = DEFAULT_QOS.priority

    def __post_init__(self) -> None:
        _text(self.subscription, "subscription id")
        _priority(self.priority, "a notification's")
        if not isinstance(self.publications, tuple) or not self.publications:
            raise ValueError("a notification carries at least one publication")
        if not all(isinstance(p, Publication) for p in self.publications):
            raise ValueError("a notification carries publications")
        if not isinstance(self.bindings, tuple):
            raise ValueError("the bindings of a notification must be a tuple of (name, value) pairs")
        for pair in self.bindings:
            if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
                raise ValueError("the bindings of a notification must be (name, value) pairs")
            check_name(pair[0], "variable name")
            if normalize_value(pair[1]) != pair[1] or isinstance(pair[1], bool):
                raise ValueError(f"variable {pair[0]} is bound to an invalid value")
        if len({name for name, _ in self.bindings}) != len(self.bindings):
            raise ValueError("a variable is bound twice in a notification")

    def __setstate__(self, state: list[object]) -> None:
        _set_fields(self, state)  # one pickled before priorities has the default


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    id: str

    def __post_init__(self) -> None:
        _text(self.id, "subscription id")


@dataclass(frozen=True, slots=True)
class Publish:
    """From a client: ``id`` is its ref. Between brokers: overlay-wide, for duplicate detection.

    ``ack=False`` (fire and forget) asks the edge broker to answer only a refusal: the producer
    that streams publications saves a frame each way per message. ``time`` is when the edge
    broker accepted it (epoch seconds), set there and carried along; a client leaves it None.
    ``qos``: its quality of service (``broker.messages.qos``), beside the content.
    """

    id: str
    publication: Publication
    ttl: int = DEFAULT_TTL
    ack: bool = True
    time: float | None = None
    qos: Qos = DEFAULT_QOS

    def __post_init__(self) -> None:
        _text(self.id, "publication id")
        _ttl(self.ttl)
        if not isinstance(self.ack, bool):
            raise ValueError("ack must be true or false")
        _time(self.time, optional=True)
        if not isinstance(self.publication, Publication):
            raise ValueError("a publication message needs a Publication")
        if type(self.qos) is not Qos:
            raise ValueError("a publication's quality of service must be a Qos")

    def __setstate__(self, state: list[object]) -> None:
        _set_fields(self, state)


@dataclass(frozen=True, slots=True)
class Deliver:
    """To a client: one publication, and every one of its subscriptions that it matched; with the
    publication's overlay-wide id (``<broker>/<client>/<ref>``: who published it) and the time
    its edge broker accepted it, which is what a historian keeps."""

    subscriptions: tuple[str, ...]
    publication: Publication
    id: str = "-"
    time: float = 0.0
    qos: Qos = DEFAULT_QOS

    def __post_init__(self) -> None:
        _text(self.id, "publication id")
        _time(self.time)
        if not isinstance(self.subscriptions, tuple) or not self.subscriptions:
            raise ValueError("a delivery names at least one subscription")
        for sid in self.subscriptions:
            _text(sid, "subscription id")
        if not isinstance(self.publication, Publication):
            raise ValueError("a delivery needs a Publication")
        if type(self.qos) is not Qos:
            raise ValueError("a delivery's quality of service must be a Qos")

    def __setstate__(self, state: list[object]) -> None:
        _set_fields(self, state)


@dataclass(frozen=True, slots=True)
class Retained:
    """A retained publication (``Qos.retain``) on its way to one subscription made after it was
    published: routed by the subscription's id, back along the path the subscription came, and
    delivered to that subscription alone (``broker.routing.retained``)."""

    subscription: str
    publication: Publication
    id: str
    time: float
    qos: Qos

    def __post_init__(self) -> None:
        _text(self.subscription, "subscription id")
        _text(self.id, "publication id")
        _time(self.time)
        if not isinstance(self.publication, Publication) or type(self.qos) is not Qos:
            raise ValueError("a retained publication needs a Publication and its Qos")


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel a retained publication named by its publisher's id for it (``Qos.mid``) or its
    overlay-wide id. From a client ``id`` is its ref; between brokers, which flood it, ``id`` is
    overlay-wide and ``by`` the identity of the client that asked: the retained publication's
    cancel policy is checked against it.

    With TLS the client signs it (``broker.transport.cancels``): ``at`` when (epoch seconds, its
    clock), ``signer`` its certificate (DER) and ``signature`` its ECDSA signature over the
    message id and ``at``. The signature travels with the cancel, and every broker that takes
    one sets ``by`` to whoever signed it, not to what a neighbour says; so a broker cannot cancel
    in another's name. A cancel is signed or not: all three, or none."""

    id: str
    mid: str
    by: str = ""
    ttl: int = DEFAULT_TTL
    at: float | None = None
    signer: bytes = b""
    signature: bytes = b""

    def __post_init__(self) -> None:
        _text(self.id, "cancel id")
        _text(self.mid, "message id")
        if type(self.by) is not str or len(self.by) > 512:
            raise ValueError("who cancels is a string of at most 512 characters")
        _ttl(self.ttl)
        if self.at is None and not self.signer and not self.signature:
            return
        _time(self.at)
        if type(self.signer) is not bytes or not 0 < len(self.signer) <= MAX_SIGNER:
            raise ValueError(f"a signed cancel's certificate is 1 to {MAX_SIGNER} bytes")
        if type(self.signature) is not bytes or not 0 < len(self.signature) <= MAX_SIGNATURE:
            raise ValueError(f"a signed cancel's signature is 1 to {MAX_SIGNATURE} bytes")

    @property
    def signed(self) -> bool:
        return self.at is not None

    def __setstate__(self, state: list[object]) -> None:
        _set_fields(self, state)  # one held in custody before cancels were signed: unsigned


@dataclass(frozen=True, slots=True)
class Ack:
    """To a client: the request ``ref`` was accepted; ``id`` is the overlay-wide id it got."""

    ref: str
    id: str

    def __post_init__(self) -> None:
        _text(self.ref, "request ref")
        _text(self.id, "id")


@dataclass(frozen=True, slots=True)
class Refuse:
    """To a client (or a peer): the request ``ref`` was refused, and why, in one line."""

    ref: str
    reason: str

    def __post_init__(self) -> None:
        if not isinstance(self.ref, str) or len(self.ref) > 512:
            raise ValueError("request ref must be a string of at most 512 characters")
        if not isinstance(self.reason, str):
            raise ValueError("a refusal needs a reason")


MAX_STANDBY_KEYS = 1000  # what one client may declare may be taken over (``Standby``)


@dataclass(frozen=True, slots=True)
class Standby:
    """From a client: what of its session another client may take over, and when. Each of
    ``keys`` is ``(key, identities, takeover)``: the identities (as the broker knows its
    clients: a certificate's name, or without TLS the client's id up to its first ``:``) that may
    take ``key`` over once the client's link has been down ``takeover`` seconds by the broker's
    clock (``TakeOver``). It replaces what the client declared before; no keys: none."""

    ref: str
    keys: tuple[tuple[str, tuple[str, ...], float], ...]

    def __post_init__(self) -> None:
        _text(self.ref, "request ref")
        if not isinstance(self.keys, tuple) or len(self.keys) > MAX_STANDBY_KEYS:
            raise ValueError(f"a standby declaration holds at most {MAX_STANDBY_KEYS} keys")
        for item in self.keys:
            if not isinstance(item, tuple) or len(item) != 3:
                raise ValueError("a standby key is (key, identities, takeover)")
            key, identities, takeover = item
            _text(key, "standby key")
            if not isinstance(identities, tuple) or not 0 < len(identities) <= 32:
                raise ValueError("a standby key names 1 to 32 identities")
            for who in identities:
                _text(who, "standby identity")
            if isinstance(takeover, bool) or not isinstance(takeover, int | float) or not 0 < takeover < 1e9:
                raise ValueError("a takeover is a number of seconds above 0")


@dataclass(frozen=True, slots=True)
class TakeOver:
    """From a client: take ``key`` of the session of client ``primary`` over, as the primary's
    ``Standby`` allows. Answered ``Ack`` (granted: the primary's session ends, its entries are
    withdrawn) or ``Refuse`` (why not yet, or not at all)."""

    ref: str
    primary: str
    key: str

    def __post_init__(self) -> None:
        _text(self.ref, "request ref")
        _text(self.primary, "primary client")
        _text(self.key, "standby key")


@dataclass(frozen=True, slots=True)
class StatusRequest:
    """``detail``: the reply also lists the routing tables and composite detections (bounded),
    for a dashboard that draws them; without it a status stays small enough to poll."""

    ref: str
    detail: bool = False

    def __post_init__(self) -> None:
        _text(self.ref, "request ref")
        if not isinstance(self.detail, bool):
            raise ValueError("a status request's detail is true or false")


@dataclass(frozen=True, slots=True)
class StatusReply:
    ref: str
    status: dict[str, object]

    def __post_init__(self) -> None:
        _text(self.ref, "request ref")
        if not isinstance(self.status, dict):
            raise ValueError("a status reply carries a dict")


@dataclass(frozen=True, slots=True)
class Bye:
    """From a client that closes on purpose: its session ends now, not after the grace period
    that keeps a client which only lost its link (a crash and a clean exit look alike on TCP)."""


@dataclass(frozen=True, slots=True)
class Carry:
    """A message in custody on a link (between brokers, and deliveries to a client): the sender
    keeps it, under ``seq``, until the receiver says it ``Took`` it, and sends it again after a
    reconnection if it did not; the receiver drops a ``seq`` it has taken already."""

    seq: int
    message: (
        Advertise
        | Unadvertise
        | Subscribe
        | CompositeSubscribe
        | Unsubscribe
        | Publish
        | Notify
        | Deliver
        | Retained
        | Cancel
    )

    def __post_init__(self) -> None:
        _seq(self.seq)
        if not isinstance(self.message, CARRIED):
            raise ValueError(f"a {type(self.message).__name__} is not carried in custody")


@dataclass(frozen=True, slots=True)
class Took:
    """The receiver has taken custody of everything carried to it up to ``seq`` (a broker: stored
    in its write-ahead log; a client: handled), so the sender may forget it."""

    seq: int

    def __post_init__(self) -> None:
        _seq(self.seq)


def _seq(value: object) -> None:
    if type(value) is int and 0 <= value < 1 << 63:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 63:
        raise ValueError("a sequence number must be an integer from 0 to 2**63-1")


@dataclass(frozen=True, slots=True)
class LinkUp:
    """From the adapter: a hop is connected. ``broker`` says whether it is a neighbour broker.
    From the peer's hello: ``epoch`` names its custody state (a broker that restarted without its
    log has a new one), and ``resume`` is the last ``seq`` it took from us in our current epoch
    (None if it does not know our epoch: it gets everything we still hold for it). Over TLS,
    ``identity`` and ``role`` are what the peer's certificate says (see the security model in
    docs/security.md); empty on a plain link, where no role is known."""

    broker: bool
    epoch: str = ""
    resume: int | None = None
    identity: str = ""
    role: str = ""
    name: str = ""  # the name our hello gave a new channel (the adapter's choice, logged with this)


@dataclass(frozen=True, slots=True)
class LinkDown:
    """From the adapter: a hop is gone; everything learned through it is withdrawn (a client's
    only once its session's grace period is over)."""


@dataclass(frozen=True, slots=True)
class Tick:
    """From the adapter, every second or so: time passes even on a quiet broker (the router has
    no clock), so client sessions whose grace period is over are withdrawn."""


ClientMessage = (
    Advertise
    | Unadvertise
    | Subscribe
    | CompositeSubscribe
    | Unsubscribe
    | Publish
    | Cancel
    | Renew
    | Pull
    | StatusRequest
    | Bye
    | Took
    | Standby
    | TakeOver
)
# What crosses a link; LinkUp, LinkDown and Tick only ever come from the local adapter.
LinkMessage = ClientMessage | Deliver | Notify | Retained | Ack | Refuse | StatusReply | Carry
# What a link carries in custody: routing state and publications, never an answer to a request
# (a client asks again) nor a refusal (only logged).
CARRIED = (
    Advertise,
    Unadvertise,
    Subscribe,
    CompositeSubscribe,
    Unsubscribe,
    Publish,
    Notify,
    Deliver,
    Retained,
    Cancel,
)
Message = LinkMessage | LinkUp | LinkDown | Tick


def request_ref(message: Message) -> str:
    """The client's name for a request, which its answer must carry (withdrawals use the id)."""
    ref = getattr(message, "ref", None)
    return ref if isinstance(ref, str) else str(getattr(message, "id", ""))
