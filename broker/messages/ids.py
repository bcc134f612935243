"""The ids a broker makes, as small records: each shape is written here once.

On the wire every id is text (the codec and INTERFACE.md do not change). A broker treats the ids
that others made as opaque text, which it only compares: a neighbour's subscription, a client's
ref, a publication that arrives from elsewhere. The ids it makes itself it keeps as records and
prints when they go into a message, so nothing in the router splits a string to learn what it
names; the one it must recognise when it comes back (a neighbour notifies one of its detections)
is parsed once, where the message arrives. Hops are the adapter's text, but for one: ``DETECTOR``,
the broker itself as the subscriber of its detections' atoms. A client's refs are ``ClientRef``
records, printed by the client and parsed by the broker that receives them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Final

from broker.errors import ParseError
from broker.records import Frozen

__all__ = [
    "CLIENT_SESSION_DIGITS",
    "DETECTOR",
    "PEER_ID",
    "ClientRef",
    "Hop",
    "Local",
    "LocalId",
    "OverlayId",
    "PartId",
    "PublicationId",
    "client_session",
    "publisher_of",
]

# what a peer (a broker, a client, a site member) may call itself: in its hello, in a site's votes
PEER_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,64}\Z")


class Local(Enum):
    """The hop of what a broker asks of itself: the atoms and clear conditions of its own
    detections, whose matches feed a detector instead of leaving the broker. A hop the adapter
    names is always text, so this one cannot be mistaken for a neighbour or a client."""

    DETECTOR = "detector"


DETECTOR: Final = Local.DETECTOR
Hop = str | Local
CLIENT_SESSION_DIGITS: Final = 20  # hex digits of a session a client names itself


def client_session(now: float, salt: int) -> str:
    """A session a client names itself: 12 hex digits of its start (ms) and 8 of ``salt`` (random),
    unique in the overlay. A broker's own session stamps are its clients' connection times, at
    most 12 hex digits for 8,000 years, so the length alone tells the two apart."""
    return f"{round(now * 1000):012x}{salt & 0xFFFFFFFF:08x}"


@dataclass(frozen=True, slots=True)
class ClientRef(Frozen):
    """A client's ref for one of its requests: its number (or the name it gives a request it makes
    again after a restart) and, for a publication, the session the client named itself
    (``<n>@<session>``). That session outlives a reconnection, so a re-sent publication keeps its
    overlay-wide id and a copy that got through twice is recognised."""

    name: str
    session: str = ""

    def __str__(self) -> str:
        return f"{self.name}@{self.session}" if self.session else self.name

    @classmethod
    def parse(cls, text: str) -> ClientRef:
        """The parts of ``<name>`` or ``<name>@<session>``; a name holds no ``@``."""
        return cls(*cls.split(text))

    @staticmethod
    def split(text: str) -> tuple[str, str]:
        """``parse``'s parts, name and session, without the record: an edge broker reads them
        from every publication's ref, and making a frozen record costs more than the split."""
        name, _, session = text.partition("@")
        return name, session

    @property
    def number(self) -> int:
        """The name as the number the client counted (ValueError for a name it was given)."""
        return int(self.name)

    @property
    def named_by_client(self) -> bool:
        """Whether the session is one the client named itself (``client_session``), not the
        broker's stamp of when the client connected, which a broker puts in its place."""
        return len(self.session) == CLIENT_SESSION_DIGITS


@dataclass(frozen=True, slots=True)
class OverlayId(Frozen):
    """A client's ref made overlay-wide by its edge broker, so that two clients never collide."""

    broker: str
    client: str
    ref: str

    def __str__(self) -> str:
        return f"{self.broker}/{self.client}/{self.ref}"

    @classmethod
    def parse(cls, text: str) -> OverlayId:
        """The parts of ``<broker>/<client>/<ref>``, or of a publication's id (which adds
        ``@<session>``, dropped here): broker ids and refs hold no ``/``, a client name may.
        ParseError for any other text."""
        broker, _, rest = text.partition("/")
        client, _, ref = rest.rpartition("/")
        if not (broker and client and ref):
            raise ParseError("expected <broker>/<client>/<ref>", 1, text)
        return cls(broker, client, ClientRef.parse(ref).name)


def publisher_of(publication_id: str) -> str:
    """The client that published the publication of this id, as its edge broker named it ("" if
    the id is not a broker's)."""
    try:
        return OverlayId.parse(publication_id).client
    except ParseError:
        return ""


@dataclass(frozen=True, slots=True)
class PublicationId(Frozen):
    """A publication's overlay-wide id. ``session`` is when its client connected (ms, hex): a
    client that reconnects under the same name counts its refs from 1 again, and the historians
    and the history/live seam tell publications apart by id. A client that re-sends after a
    reconnection names a session of its own in its ref (a ``ClientRef``), so the copy keeps the
    id of the first."""

    broker: str
    client: str
    ref: str
    session: str

    def __str__(self) -> str:
        return self.text(self.broker, self.client, self.ref, self.session)

    @staticmethod
    def text(broker: str, client: str, ref: str, session: str) -> str:
        """The id as it goes into messages, without the record: an edge broker names every
        publication, and making a frozen record costs more than the text."""
        return f"{broker}/{client}/{ref}@{session}"


_LOCAL_ID = re.compile(r"(.+)~([1-9][0-9]*)")


@dataclass(frozen=True, slots=True, order=True)
class LocalId(Frozen):
    """What a broker names for itself: a composite detection (the id it travels under to the
    neighbour that detects it) or the subscription of a clear condition. Ordered as made."""

    broker: str
    number: int

    def __str__(self) -> str:
        return f"{self.broker}~{self.number}"

    @classmethod
    def parse(cls, text: str) -> LocalId:
        """The id in ``<broker>~<n>``; ParseError for any other text."""
        found = _LOCAL_ID.fullmatch(text)
        if found is None:
            raise ParseError("expected <broker>~<number>", 1, text)
        return cls(found[1], int(found[2]))


@dataclass(frozen=True, slots=True, order=True)
class PartId(Frozen):
    """Part ``leaf`` of a detection of this broker: the subscription of one of its atoms, or the
    remote part it joins (see ``detection`` for how leaves are numbered)."""

    detection: LocalId
    leaf: int

    def __str__(self) -> str:
        return f"{self.detection}#{self.leaf}"
