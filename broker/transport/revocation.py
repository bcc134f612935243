"""Revoked certificates: ``DIR/ca.crl``, an X.509 CRL signed by the deployment's CA.

``wfm certs revoke DIR NAME`` adds the serial of ``DIR/NAME.crt`` to the list, with NAME recorded
in the entry (a non-critical extension, :data:`NAME_OID`, that OpenSSL ignores). The file lives
next to ``ca.crt`` and travels like it: copied to every host. Processes re-read it when it
changes (its inode, size or mtime), at most every :data:`RECHECK` seconds:

- a broker's TLS contexts (:class:`broker.transport.tls.Identity`) load it into OpenSSL
  (``VERIFY_CRL_CHECK_LEAF``), so a revoked peer fails the handshake, and the broker closes the
  links it already has to a revoked peer;
- :class:`Revocations` answers ``revoked(certificate)`` for any other check (an agent checking
  who signed an envelope).

A list is used only once it is verified: issued and signed by ``DIR/ca.crt``, not expired, and
numbered (CRLNumber) no lower than the one in use, so an older list cannot bring back a revoked
identity. A file that fails any of these is refused: one line, logged at ERROR once per version
of the file, and the list in use stays (none at all: the constructor raises). A file that goes
away after a list was loaded leaves that list in use (a restart forgets it). No file at all:
nothing is revoked and every check behaves as without revocation.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from broker.clock import SYSTEM, Clock
from broker.errors import LocalError

__all__ = [
    "CRL",
    "NAME_OID",
    "RECHECK",
    "Entry",
    "RevocationError",
    "RevocationList",
    "Revocations",
    "entry_name",
    "name_extension",
    "read",
    "verify",
]

CRL = "ca.crl"  # DIR/ca.crl, next to DIR/ca.crt
RECHECK = 1.0  # seconds between two looks at the file: a revocation takes effect within this
# A UUID OID (ITU-T X.667, arc 2.25: no registration needed): a CRL entry's identity name, as a
# DER UTF8String. Non-critical, so a reader that does not know it (OpenSSL) ignores it.
NAME_OID = x509.ObjectIdentifier("2.25.307284249721325151349952268383191945168")

log = logging.getLogger(__name__)


class RevocationError(LocalError):
    """A revocation list that cannot be used, in one line."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One revoked certificate: its serial, the identity it was issued to, and when."""

    serial: int
    name: str
    revoked: datetime.datetime


@dataclass(frozen=True, slots=True)
class RevocationList:
    """A verified ``ca.crl``: its number, entries and the PEM it was read from."""

    number: int
    entries: tuple[Entry, ...]
    pem: bytes

    @property
    def serials(self) -> frozenset[int]:
        return frozenset(entry.serial for entry in self.entries)


def name_extension(name: str) -> x509.UnrecognizedExtension:
    """The CRL entry extension that records the identity ``name`` (at most 32 ASCII characters)."""
    data = name.encode()
    if len(data) > 127:
        raise ValueError("an identity name is short")
    return x509.UnrecognizedExtension(NAME_OID, bytes([0x0C, len(data)]) + data)


def entry_name(revoked: x509.RevokedCertificate) -> str:
    """The identity name recorded in a CRL entry ("" if none)."""
    try:
        value = revoked.extensions.get_extension_for_oid(NAME_OID).value
    except x509.ExtensionNotFound:
        return ""
    data = value.value if isinstance(value, x509.UnrecognizedExtension) else b""
    if len(data) < 2 or data[0] != 0x0C or data[1] != len(data) - 2:
        return ""
    return data[2:].decode(errors="replace")


def read(directory: Path, ca: x509.Certificate | None = None) -> RevocationList | None:
    """``DIR/ca.crl`` verified against ``ca`` (default ``DIR/ca.crt``); None if there is none.
    RevocationError, in one line, for a file that cannot be used (see the module's header)."""
    path = directory / CRL
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise RevocationError(f"cannot read {path}: {error.strerror or error}") from None
    return verify(data, _ca(directory) if ca is None else ca, str(path))


def verify(data: bytes, ca: x509.Certificate, where: str) -> RevocationList:
    """The list in ``data`` if ``ca`` issued and signed it and it has not expired."""
    try:
        crl = x509.load_pem_x509_crl(data)
        public = ca.public_key()
        if crl.issuer != ca.subject or not isinstance(public, ec.EllipticCurvePublicKey):
            raise RevocationError(f"{where} was not issued by the CA {ca.subject.rfc4514_string()}")
        if not crl.is_signature_valid(public):
            raise RevocationError(f"{where} is not signed by the CA: refused")
        next_update = crl.next_update_utc
        if next_update is not None and next_update < datetime.datetime.now(datetime.UTC):
            raise RevocationError(f"{where} expired on {next_update:%Y-%m-%d}: revoke again to renew it")
        try:
            number = crl.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number
        except x509.ExtensionNotFound:
            number = 0
        entries = tuple(Entry(r.serial_number, entry_name(r), r.revocation_date_utc) for r in crl)
    except (ValueError, TypeError, x509.DuplicateExtension) as error:  # any malformed part
        raise RevocationError(f"{where} is not a valid certificate revocation list: {error}") from None
    return RevocationList(number, entries, data)


def _ca(directory: Path) -> x509.Certificate:
    path = directory / "ca.crt"
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as error:
        raise RevocationError(f"cannot read the CA certificate {path}: {error}") from None


_Version = tuple[int, int, int, int] | None  # the file's device, inode, size and mtime (None: absent)


def _version(path: Path) -> _Version:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return (-1, -1, -1, -1)  # unreadable: read() says why
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)


class Revocations:
    """Which certificates of the CA in ``directory`` are revoked, as ``DIR/ca.crl`` says now.

    Construct it with the directory a process was given (``--tls DIR``)::

        revocations = Revocations(Path(tls_dir))
        if revocations.revoked(signer_certificate):
            refuse(...)

    ``revoked(certificate)`` is True when the certificate's serial is in the list and the list's
    CA issued it; it first re-reads the file if it changed, looking at most once every
    ``recheck`` seconds (a stat; ``check()`` looks now). A bad or missing file never makes it
    raise, and it never blocks for more than reading a small file. Checking that the certificate
    was issued by the CA, is valid now and has the role wanted stays the caller's.

    The constructor raises :class:`RevocationError` (one line) if ``DIR/ca.crt`` cannot be read or
    a ``ca.crl`` is there and cannot be used: a process must not start trusting identities that
    may have been revoked. Later, a file that cannot be used (not a CRL, not signed by the CA,
    expired, older than the one in use) is refused: logged at ERROR in one line, once per version
    of the file, its reason in ``problem``; the list in use stays in use. A file removed after a
    list was loaded leaves that list in use. With no file, nothing is revoked.

    Thread-safe: one lock around re-reading."""

    def __init__(self, directory: Path, recheck: float = RECHECK, clock: Clock = SYSTEM) -> None:
        self.directory = directory
        self.path = directory / CRL
        self.recheck = recheck
        self.clock = clock
        self.ca = _ca(directory)
        self.problem: str | None = None  # why the file on disk is not the list in use, if it is not
        self._lock = threading.Lock()
        self._version = _version(self.path)
        self._current = read(directory, self.ca)
        self._serials = frozenset[int]() if self._current is None else self._current.serials
        self._looked = clock.monotonic()

    @property
    def current(self) -> RevocationList | None:
        """The list in use (None: there has never been one)."""
        return self._current

    @property
    def serials(self) -> frozenset[int]:
        """The serials revoked by the list in use."""
        return self._serials

    def revoked(self, certificate: x509.Certificate) -> bool:
        """Whether ``certificate`` (issued by this CA) is revoked, as of the file at most
        ``recheck`` seconds ago."""
        self.check(force=False)
        return certificate.serial_number in self._serials and certificate.issuer == self.ca.subject

    def check(self, force: bool = True) -> bool:
        """Look at the file (now, or unless ``force`` only if not looked at for ``recheck``
        seconds); re-read it if it changed. Whether the revoked serials changed."""
        if not force and self.clock.monotonic() - self._looked < self.recheck:
            return False
        with self._lock:
            self._looked = self.clock.monotonic()
            version = _version(self.path)
            if version == self._version:
                return False
            self._version = version
            if version is None:
                if self._current is not None:
                    self.problem = f"{self.path} is gone"
                    log.warning(
                        "%s is gone: still refusing the %d certificates it revoked",
                        self.path,
                        len(self._serials),
                    )
                return False
            try:
                found = read(self.directory, self.ca)
                if found is not None and self._current is not None and found.number < self._current.number:
                    raise RevocationError(
                        f"{self.path} is older than the list in use (number {found.number} <"
                        f" {self._current.number}): refused"
                    )
            except RevocationError as error:
                self.problem = str(error)
                log.error("%s; still using the list read before (%d revoked)", error, len(self._serials))
                return False
            self.problem = None
            if found is None:  # it went between the stat and the read: the next look sees it gone
                return False
            changed = found.serials != self._serials
            self._current, self._serials = found, found.serials
            if changed:
                log.info("%s: %d certificates revoked", self.path, len(found.serials))
            return changed
