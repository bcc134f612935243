"""TLS for every link: a process's identity (``--tls DIR --identity NAME``) as ``ssl`` contexts.

Mutual TLS, 1.3 only: each side shows a certificate from the deployment's CA (``DIR/ca.crt``,
made by ``wfm certs``) and checks the other's. Who a peer is and what it may be are read from the
certificate it proved it holds (CN and OU, see :func:`peer`), never from its Hello: a broker
compares the two and refuses a peer whose Hello claims more (see ``RouterService``).

A client's Hello id under TLS is its certificate's name, or ``NAME:SUFFIX`` (:func:`client_id`)
so that several processes of one identity (a monitor and a trigger of the same deployer) can be
on one broker at once without taking each other's session; names have no ``:`` in them, so no
identity can pass for another.

Revocation: with a ``DIR/ca.crl`` (``wfm certs revoke``), both contexts check the peer's
certificate against it (``VERIFY_CRL_CHECK_LEAF``). ``Identity.refresh`` rebuilds them when the
file changed (see :mod:`broker.transport.revocation`), and the ``server`` and ``client``
properties do so on their own at most every ``RECHECK`` seconds, so a long-running process
refuses a newly revoked peer at its next handshake without a restart. Without the file the
contexts are as they always were.
"""

from __future__ import annotations

import logging
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.errors import LocalError
from broker.transport.revocation import RevocationList, Revocations

__all__ = ["Identity", "Peer", "client_id", "peer"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Peer:
    """What a verified certificate says: the peer's name (CN), role (OU) and serial number
    (None if not given: what revocation lists name)."""

    name: str
    role: str
    serial: int | None = None

    def __str__(self) -> str:
        return f"{self.name} (role {self.role or 'none'})"


def peer(certificate: dict[str, Any] | None) -> Peer:
    """The name and role in a certificate as ``SSLSocket.getpeercert()`` returns it."""
    fields: dict[str, str] = {}
    for rdn in (certificate or {}).get("subject", ()):
        for key, value in rdn:
            fields.setdefault(key, value)
    serial = (certificate or {}).get("serialNumber")
    return Peer(
        fields.get("commonName", ""),
        fields.get("organizationalUnitName", ""),
        int(serial, 16) if isinstance(serial, str) and serial else None,
    )


def client_id(name: str, wanted: str | None) -> str:
    """The Hello id of a client of identity ``name`` that would like to be ``wanted``: the name
    itself, or ``name:wanted``."""
    if wanted is None or wanted == name or wanted.startswith(f"{name}:"):
        return name if wanted is None else wanted
    return f"{name}:{wanted}"


@dataclass(frozen=True)
class Identity:
    """``DIR/NAME.crt`` and ``DIR/NAME.key``, trusting ``DIR/ca.crt`` and refusing what
    ``DIR/ca.crl`` revokes. Loading checks the files at once (LocalError naming what is wrong), so
    a bad option fails at start, not at first dial."""

    directory: Path
    name: str
    revocations: Revocations = field(init=False, repr=False, compare=False)
    _built_with: RevocationList | None = field(init=False, repr=False, compare=False)
    _server: ssl.SSLContext = field(init=False, repr=False, compare=False)
    _client: ssl.SSLContext = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ca = self.directory / "ca.crt"
        if not ca.is_file():
            raise LocalError(f"TLS identity {self.name}: no {ca} (see wfm certs)")
        try:
            object.__setattr__(self, "revocations", Revocations(self.directory))
        except LocalError as error:
            raise LocalError(f"TLS identity {self.name}: {error}") from None
        self._build(self.revocations.current)

    def _build(self, crl: RevocationList | None) -> None:
        server = self._context(ssl.PROTOCOL_TLS_SERVER, crl)
        client = self._context(ssl.PROTOCOL_TLS_CLIENT, crl)
        object.__setattr__(self, "_server", server)
        object.__setattr__(self, "_client", client)
        object.__setattr__(self, "_built_with", crl)

    def _context(self, protocol: int, crl: RevocationList | None) -> ssl.SSLContext:
        context = ssl.SSLContext(protocol)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.verify_mode = ssl.CERT_REQUIRED  # a server too asks every peer for its certificate
        ca, crt, key = (self.directory / name for name in ("ca.crt", f"{self.name}.crt", f"{self.name}.key"))
        for path in (ca, crt, key):
            if not path.is_file():
                raise LocalError(f"TLS identity {self.name}: no {path} (see wfm certs)")
        try:
            context.load_verify_locations(ca)
            context.load_cert_chain(crt, key)
            if crl is not None:  # the bytes that were verified, not the file (it may change meanwhile)
                with tempfile.NamedTemporaryFile(suffix=".crl") as copy:
                    copy.write(crl.pem)
                    copy.flush()
                    context.load_verify_locations(cafile=copy.name)
                context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
        except (OSError, ssl.SSLError) as error:
            raise LocalError(f"TLS identity {self.name} in {self.directory}: {error}") from None
        return context

    def refresh(self, now: bool = False) -> bool:
        """Rebuild the contexts if ``DIR/ca.crl`` changed (looking at it ``now``, or if it was
        not looked at for ``RECHECK`` seconds); whether they were rebuilt."""
        self.revocations.check(force=now)
        current = self.revocations.current
        if current is self._built_with:
            return False
        try:
            self._build(current)
        except LocalError as error:  # our own files went: keep the contexts there are (logged once)
            object.__setattr__(self, "_built_with", current)
            log.error("%s; the new revocation list is not in force", error)
            return False
        return True

    @property
    def server(self) -> ssl.SSLContext:
        """For accepting: requires a certificate from the CA of every peer, not revoked."""
        self.refresh()
        return self._server

    @property
    def client(self) -> ssl.SSLContext:
        """For dialling a broker: checks its certificate against the CA (and the revocation
        list) and the host dialled."""
        self.refresh()
        return self._client

    def __reduce__(self) -> tuple[type[Identity], tuple[Path, str]]:
        """Pickled as its files, loaded again (a context cannot be pickled): a client in a child
        process of ``multiprocessing`` is given its brokers with their identity."""
        return Identity, (self.directory, self.name)

    def __str__(self) -> str:
        return f"{self.name} in {self.directory}"
