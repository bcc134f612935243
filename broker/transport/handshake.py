"""The handshake, both sides, with no I/O: what a hello must say, and why a handshake failed.

Each side's first frame is a ``Hello``. The listener takes the peer's first frames (``opening``:
a client may pipeline requests behind its hello) and, over TLS, checks that the hello claims no
more than the certificate (``impostor``); the dialler takes the answer (``answer``): the broker
it dialled, or a ``Refuse`` saying why not. The server and the client both dial, so every
failure is explained here once, in words a user can act on (``tls_failure``, ``unreached``,
``unanswered``); the adapters only read and write.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Sequence

from broker.errors import BadMessage, ConnectError, LinkClosed, ProtocolError
from broker.messages import Hello, Refuse, WireMessage
from broker.transport.tls import Peer
from broker.transport.uri import BrokerURI

__all__ = [
    "ELSEWHERE",
    "HANDED_OVER",
    "HANDSHAKE_TIMEOUT",
    "X509_V_ERR_CERT_REVOKED",
    "HandedOver",
    "Misconfigured",
    "ServedElsewhere",
    "answer",
    "elsewhere",
    "handed_over",
    "impostor",
    "not_the_broker",
    "opening",
    "tls_failure",
    "unanswered",
    "unreached",
]

HANDSHAKE_TIMEOUT = 5.0  # seconds for the TLS handshake, and again for the hello after it
X509_V_ERR_CERT_REVOKED = 23  # OpenSSL's verify code for a certificate a CRL revokes
# How a refusal begins that sends the peer on to another broker of the same site: routine while a
# site's leader changes, not a misconfiguration (``broker.sites.member``)
ELSEWHERE = "served elsewhere: "
# How a refusal begins of a client whose session another took over (``broker.routing.sessions``)
HANDED_OVER = "handed over: "
LEADS = " leads it"  # what follows the name of the broker such a refusal names as leading the site
_NAMED = re.compile(r": (\S+)" + LEADS)

Received = Sequence[WireMessage | BadMessage]


class Misconfigured(ConnectError):
    """The peer was reached, but this handshake cannot succeed as things are set up: it refused,
    it is someone else, its certificate does not fit, it does not speak our protocol. Trying
    again fails the same way, so it is worth a warning where a peer that is down is not."""


class ServedElsewhere(ConnectError):
    """A broker of a replicated site that does not serve it now sent us on (``ELSEWHERE``): its
    site's leader, or the next one elected, takes us. ``leader``: the broker the refusal names as
    leading the site (the refusing broker itself while it takes over), "" while none is known."""

    def __init__(self, message: str, leader: str = "") -> None:
        super().__init__(message)
        self.leader = leader


class HandedOver(ConnectError):
    """The broker refuses our hello: keys of our session were taken over by a standby and our
    hello did not say we know (``Hello.noted``). ``grants``: key -> (who took it, when: the
    broker's epoch seconds)."""

    def __init__(self, message: str, grants: dict[str, tuple[str, float]]) -> None:
        super().__init__(message)
        self.grants = grants


def handed_over(reason: str) -> dict[str, tuple[str, float]]:
    """The grants a refusal (``HANDED_OVER`` then ``KEY to WHO at T; ...``) names."""
    grants: dict[str, tuple[str, float]] = {}
    for part in reason.removeprefix(HANDED_OVER).split("; "):
        key, _, rest = part.partition(" to ")
        who, _, at = rest.rpartition(" at ")
        try:
            grants[key] = (who, float(at))
        except ValueError:
            continue
    return grants


def elsewhere(me: str, site: str, leader: str | None) -> str:
    """Why broker ``me`` of ``site``, which does not serve it now, refuses a hello: it names
    ``leader`` (``me`` itself: elected, it serves once the site's log is applied), if known, so
    that the peer dials that broker next (``ServedElsewhere.leader``)."""
    if not leader:
        return f"{ELSEWHERE}{me} does not serve site {site} now: it is electing a leader"
    if leader == me:
        return f"{ELSEWHERE}{me} does not serve site {site} yet: {me}{LEADS}, and serves once caught up"
    return f"{ELSEWHERE}{me} does not serve site {site} now: {leader}{LEADS}"


def _leader_named(reason: str) -> str:
    """The broker a refusal (``elsewhere``) names as its site's leader, or ""."""
    named = _NAMED.search(reason)
    return named.group(1) if named else ""


def opening(received: Received) -> tuple[Hello, list[WireMessage | BadMessage]]:
    """The peer's hello, and what it sent behind it. ProtocolError if it did not begin with one."""
    first = received[0]
    if isinstance(first, BadMessage) or not isinstance(first, Hello):
        raise ProtocolError(f"expected hello, got {first}")
    return first, list(received[1:])


def answer(target: BrokerURI, received: Received) -> tuple[Hello, list[WireMessage | BadMessage]]:
    """The hello of the broker we dialled, and what it sent behind it. The frame's error if the
    first is not a message; Misconfigured if it refused us or is not ``target``."""
    first = received[0]
    if isinstance(first, BadMessage):
        raise first
    if isinstance(first, Refuse):
        said = f"{target} refused the connection: {first.reason}"
        if first.reason.startswith(ELSEWHERE):
            raise ServedElsewhere(said, _leader_named(first.reason))
        if first.reason.startswith(HANDED_OVER):
            raise HandedOver(said, handed_over(first.reason))
        raise Misconfigured(said)
    if not isinstance(first, Hello) or first.kind != "broker" or first.id != target.id:
        said = f"{first.kind} {first.id!r}" if isinstance(first, Hello) else repr(first)
        raise Misconfigured(f"{target} answered as {said}, not broker {target.id!r}")
    return first, list(received[1:])


def not_the_broker(target: BrokerURI, who: Peer) -> str:
    """Why the certificate ``who`` is not that of the broker we dialled; empty if it is."""
    if who.role != "broker" or who.name != target.id:
        return f"{target}'s certificate is {who}, not broker {target.id}'s"
    return ""


def impostor(hello: Hello, who: Peer) -> str:
    """Why a peer whose certificate says ``who`` may not say ``hello``; empty if it may."""
    if hello.kind == "broker":
        if who.role != "broker":
            return f"{who} may not link as a broker: only a broker certificate may"
        if hello.id != who.name:
            return f"broker certificate {who.name} may not link as broker {hello.id!r}"
    elif hello.id != who.name and not hello.id.startswith(f"{who.name}:"):
        return f"certificate {who} may not be client {hello.id!r}: only {who.name} or {who.name}:SUFFIX"
    return ""


def tls_failure(error: Exception) -> str:
    """A failed TLS handshake in a few words: OpenSSL's reason, not its file and line."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {error.verify_message}"
    if isinstance(error, ssl.SSLError):
        return error.reason or str(error)
    if isinstance(error, ConnectionResetError | BrokenPipeError):
        return "the peer hung up (it may not trust this broker's certificate)"
    return str(error) or "timed out"


def unreached(error: Exception, timeout: float, in_tls: bool) -> str:
    """Why a connection failed (``in_tls``: once connected, in its TLS handshake). A timeout has
    no message of its own: under TLS it is most often a port that takes the connection and never
    answers, as a plain broker's handshake would be."""
    if isinstance(error, TimeoutError) and not str(error):
        if in_tls:
            return f"no answer to the TLS handshake within {timeout:g} s: is a wfm broker listening there?"
        return f"no connection within {timeout:g} s: is the host up, and the port open?"
    return str(error) or type(error).__name__


def unanswered(error: Exception, timeout: float, tls: bool) -> str:
    """Why a handshake failed, in words a user can act on: most often the port is not a broker's."""
    if isinstance(error, ProtocolError):
        return f"it sent something that is not a wfm frame ({error}): is a wfm broker listening there?"
    if isinstance(error, LinkClosed):  # why a broker hangs up before its hello, most often
        hint = (
            "the broker did not accept our certificate: is it from the broker's CA, and valid?"
            if tls
            else "a broker that requires TLS closes plain connections: give --tls and --identity"
        )
        return f"it closed the connection ({error}; {hint})"
    return f"no answer within {timeout:g} s: is a wfm broker listening there?"
