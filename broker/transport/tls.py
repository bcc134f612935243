"""TLS for every link: a process's identity (``--tls DIR --identity NAME``) as ``ssl`` contexts.

Mutual TLS, 1.3 only: each side shows a certificate from the deployment's CA (``DIR/ca.crt``,
made by ``wfm certs``) and checks the other's. Who a peer is and what it may be are read from the
certificate it proved it holds (CN and OU, see :func:`peer`), never from its Hello: a broker
compares the two and refuses a peer whose Hello claims more (see ``RouterService``).

A client's Hello id under TLS is its certificate's name, or ``NAME:SUFFIX`` (:func:`client_id`)
so that several processes of one identity (a monitor and a trigger of the same deployer) can be
on one broker at once without taking each other's session; names have no ``:`` in them, so no
identity can pass for another.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.errors import LocalError

__all__ = ["Identity", "Peer", "client_id", "peer"]


@dataclass(frozen=True, slots=True)
class Peer:
    """What a verified certificate says: the peer's name (CN) and role (OU)."""

    name: str
    role: str

    def __str__(self) -> str:
        return f"{self.name} (role {self.role or 'none'})"


def peer(certificate: dict[str, Any] | None) -> Peer:
    """The name and role in a certificate as ``SSLSocket.getpeercert()`` returns it."""
    fields: dict[str, str] = {}
    for rdn in (certificate or {}).get("subject", ()):
        for key, value in rdn:
            fields.setdefault(key, value)
    return Peer(fields.get("commonName", ""), fields.get("organizationalUnitName", ""))


def client_id(name: str, wanted: str | None) -> str:
    """The Hello id of a client of identity ``name`` that would like to be ``wanted``: the name
    itself, or ``name:wanted``."""
    if wanted is None or wanted == name or wanted.startswith(f"{name}:"):
        return name if wanted is None else wanted
    return f"{name}:{wanted}"


@dataclass(frozen=True)
class Identity:
    """``DIR/NAME.crt`` and ``DIR/NAME.key``, trusting ``DIR/ca.crt``. Loading checks the files at
    once (LocalError naming what is wrong), so a bad option fails at start, not at first dial."""

    directory: Path
    name: str
    _server: ssl.SSLContext = field(init=False, repr=False, compare=False)
    _client: ssl.SSLContext = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_server", self._context(ssl.PROTOCOL_TLS_SERVER))
        object.__setattr__(self, "_client", self._context(ssl.PROTOCOL_TLS_CLIENT))

    def _context(self, protocol: int) -> ssl.SSLContext:
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
        except (OSError, ssl.SSLError) as error:
            raise LocalError(f"TLS identity {self.name} in {self.directory}: {error}") from None
        return context

    @property
    def server(self) -> ssl.SSLContext:
        """For accepting: requires a certificate from the CA of every peer."""
        return self._server

    @property
    def client(self) -> ssl.SSLContext:
        """For dialling a broker: checks its certificate against the CA and the host dialled."""
        return self._client

    def __reduce__(self) -> tuple[type[Identity], tuple[Path, str]]:
        """Pickled as its files, loaded again (a context cannot be pickled): a client in a child
        process of ``multiprocessing`` is given its brokers with their identity."""
        return Identity, (self.directory, self.name)

    def __str__(self) -> str:
        return f"{self.name} in {self.directory}"
