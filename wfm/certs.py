"""A deployment's certificates, in the style of ``cockroach cert``: one CA, one identity per process.

``init(DIR)`` makes ``DIR/ca.crt`` and ``DIR/ca.key``; ``issue(DIR, NAME, role)`` makes
``DIR/NAME.crt`` and ``DIR/NAME.key``, signed by that CA. A certificate's subject is
``O=wfm, OU=<role>, CN=<name>``: the broker reads who a peer is (CN) and what it may be (OU) from
the certificate it verified, never from what the peer says (see docs/security.md). Keys are ECDSA
P-256; nothing existing is overwritten without ``force``, so a second ``init`` cannot silently cut
every issued identity off its CA. ``revoke(DIR, NAME)`` adds NAME's certificate to ``DIR/ca.crl``,
a CRL signed by the CA that every process re-reads (``broker.transport.revocation``).

Modes are explicit, whatever the umask (:func:`broker.durable.log.replace_atomically`): keys 0600,
certificates and the CRL 0644 (public, and read by processes that may run as another user once
copied to their host), the directory 0700 when it is made here: it holds ``ca.key`` and every
identity's key, whose names and presence are nobody else's business, and nothing in it is of use to
another user of this machine (they cannot read the keys; the public files are copied to where they
run). A directory that already exists keeps its mode. Every file is written to a temporary name
with its mode set before a byte is written, then renamed over the old one: a reader sees the old
file or the new, never half of one, and a key is never readable by others, not even for an instant.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from broker.durable.log import replace_atomically
from broker.errors import LocalError
from broker.transport.revocation import CRL, Entry, RevocationError, name_extension, read

__all__ = [
    "CA",
    "DEFAULT_DAYS",
    "DEFAULT_HOSTS",
    "ROLES",
    "CertError",
    "Issued",
    "ensure",
    "init",
    "issue",
    "listing",
    "revocations",
    "revoke",
    "subject_name",
]

# What a certificate's holder may be (its OU); what each role may do is the brokers' access rules
# (wfm/security/acl.py) and the agents' checks of who signed what (docs/security.md).
ROLES = ("broker", "agent", "deployer", "monitor", "client", "operator", "scheduler", "historian")
KEY_MODE = 0o600  # only the owner reads a key
PUBLIC_MODE = 0o644  # certificates and the revocation list: public
DIRECTORY_MODE = 0o700  # see the module's header
CA = "ca"  # DIR/ca.crt, DIR/ca.key
DEFAULT_DAYS = 365
CA_DAYS = 10 * 365  # rotating the CA means re-issuing everything: it outlives its identities
DEFAULT_HOSTS = ("localhost", "127.0.0.1")  # a broker's names when no --host is given
# no ':' so that NAME:SUFFIX (a client session of identity NAME) is unambiguous
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,32}\Z")


class CertError(LocalError):
    """A certificate directory, name or role that cannot be used, in one line."""


@dataclass(frozen=True, slots=True)
class Issued:
    """One certificate in a directory, as ``wfm certs list`` shows it."""

    name: str
    role: str
    expires: datetime.datetime
    hosts: tuple[str, ...]
    serial: int = 0
    revoked: datetime.datetime | None = None  # when, if DIR/ca.crl revokes it


def check_name(name: str) -> str:
    if name == CA or not _NAME.match(name):
        raise CertError(f"{name!r} is not an identity name: 1 to 32 of A-Z a-z 0-9 _ . - (and not 'ca')")
    return name


def init(directory: Path, force: bool = False, days: int = CA_DAYS) -> Path:
    """Make the CA in ``directory`` (created if missing); its certificate's path."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = subject_name("wfm CA", "ca")
    now = _now()
    cert = (
        _builder(name, name, key.public_key(), now, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    written = _write(directory, CA, cert, key, force)
    (directory / CRL).unlink(missing_ok=True)  # the old CA's list: a new CA has revoked nothing
    return written


def issue(
    directory: Path,
    name: str,
    role: str,
    days: int = DEFAULT_DAYS,
    hosts: Sequence[str] = (),
    force: bool = False,
) -> Path:
    """Issue identity ``name`` with ``role`` from the CA in ``directory``; its certificate's path.
    A broker's certificate names ``hosts`` (default localhost and 127.0.0.1), which its clients
    check against the address they dialled."""
    check_name(name)
    if role not in ROLES:
        raise CertError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    if days < 1:
        raise CertError(f"a certificate must be valid for at least one day, not {days}")
    if hosts and role != "broker":
        raise CertError("--host names a broker's addresses: only a broker certificate has them")
    ca_cert, ca_key = _load_ca(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    usage = [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        _builder(subject_name(name, role), ca_cert.subject, key.public_key(), _now(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if role == "broker":  # a broker is a server to its clients and neighbours, and a client to these
        usage.append(ExtendedKeyUsageOID.SERVER_AUTH)
        names = [_general_name(host) for host in hosts or DEFAULT_HOSTS]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False).sign(ca_key, hashes.SHA256())
    return _write(directory, name, cert, key, force)


def ensure(directory: Path, identities: Mapping[str, str]) -> Path:
    """The CA in ``directory`` and an identity for each ``name -> role``, making only what is
    missing or of another role: ``wfm up`` keeps its certificates across runs, issues one for a
    new agent, and a new one for an identity whose role changed (its historian was a monitor)."""
    if not (directory / f"{CA}.crt").exists():
        init(directory)
    for name, role in identities.items():
        path = directory / f"{name}.crt"
        if not path.exists():
            issue(directory, name, role)
        elif _role_of(path) != role:
            issue(directory, name, role, force=True)
    return directory


def _role_of(path: Path) -> str:
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as error:
        raise CertError(f"cannot read {path}: {error}") from None
    return _attribute(cert, NameOID.ORGANIZATIONAL_UNIT_NAME)


def listing(directory: Path) -> list[Issued]:
    """Every certificate in ``directory``, the CA first, with when it was revoked if it was."""
    found = []
    revoked = {entry.serial: entry for entry in revocations(directory)}
    for path in sorted(directory.glob("*.crt"), key=lambda p: (p.stem != CA, p.stem)):
        try:
            cert = x509.load_pem_x509_certificate(path.read_bytes())
        except (OSError, ValueError) as error:
            raise CertError(f"cannot read {path}: {error}") from None
        role = _attribute(cert, NameOID.ORGANIZATIONAL_UNIT_NAME)
        entry = revoked.get(cert.serial_number) if path.stem != CA else None
        when = None if entry is None else entry.revoked
        found.append(
            Issued(path.stem, role, cert.not_valid_after_utc, _hosts(cert), cert.serial_number, when)
        )
    return found


def revocations(directory: Path) -> list[Entry]:
    """What ``DIR/ca.crl`` revokes (verified against the CA), oldest first; nothing without it."""
    try:
        crl = read(directory)
    except RevocationError as error:
        raise CertError(str(error)) from None
    return [] if crl is None else sorted(crl.entries, key=lambda entry: entry.revoked)


def revoke(directory: Path, name: str) -> tuple[Path, Entry, bool]:
    """Revoke identity ``name``: the serial of ``DIR/NAME.crt`` (and the name) added to
    ``DIR/ca.crl``, signed by the CA. The list's path, the entry, and whether it is new (False:
    it was revoked already, and nothing was written)."""
    check_name(name)
    ca_cert, ca_key = _load_ca(directory)
    entries = revocations(directory)
    path = directory / f"{name}.crt"
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except FileNotFoundError:
        gone = [entry for entry in entries if entry.name == name]
        if gone:  # revoked, then its files removed: still revoked
            return directory / CRL, gone[-1], False
        raise CertError(f"no identity {name} in {directory} (no {path.name}): nothing to revoke") from None
    except (OSError, ValueError) as error:
        raise CertError(f"cannot read {path}: {error}") from None
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        raise CertError(f"{path} was not issued by the CA in {directory}: nothing to revoke") from None
    for entry in entries:
        if entry.serial == cert.serial_number:
            return directory / CRL, entry, False
    entry = Entry(cert.serial_number, name, _now().replace(microsecond=0))
    _write_crl(directory, ca_cert, ca_key, [*entries, entry])
    return directory / CRL, entry, True


# helpers ------------------------------------------------------------------------------------------


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def subject_name(name: str, role: str) -> x509.Name:
    """The name of a certificate of ``role`` (its OU: what brokers and agents read the role from)."""
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "wfm"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
            x509.NameAttribute(NameOID.COMMON_NAME, name),
        ]
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePublicKey, now: datetime.datetime, days: int
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # a peer's clock a little behind
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _attribute(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> str:
    values = cert.subject.get_attributes_for_oid(oid)
    return str(values[0].value) if values else ""


def _hosts(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(str(name.value) for name in names)


def _load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate((directory / f"{CA}.crt").read_bytes())
        key = serialization.load_pem_private_key((directory / f"{CA}.key").read_bytes(), None)
    except FileNotFoundError:
        raise CertError(f"no CA in {directory}: make one with wfm certs init {directory}") from None
    except (OSError, ValueError) as error:
        raise CertError(f"cannot read the CA in {directory}: {error}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertError(f"the CA key in {directory} is not an ECDSA key")
    return cert, key


def _write_crl(
    directory: Path, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, entries: list[Entry]
) -> None:
    """``DIR/ca.crl`` listing ``entries``, numbered one above the list it replaces. Valid as long
    as the CA: OpenSSL refuses every peer once a CRL in force has expired, and there is no one to
    renew it on a schedule."""
    try:
        crl = read(directory, ca_cert)
    except RevocationError:
        crl = None  # unusable: replaced (it may have been the reason to revoke again)
    number = 1 if crl is None else crl.number + 1
    now = _now()
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now - datetime.timedelta(minutes=5))  # a reader's clock a little behind
        .next_update(max(ca_cert.not_valid_after_utc, now + datetime.timedelta(days=1)))
        .add_extension(x509.CRLNumber(number), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    for entry in entries:
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder()
            .serial_number(entry.serial)
            .revocation_date(entry.revoked)
            .add_extension(name_extension(entry.name), critical=False)
            .build()
        )
    pem = builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    try:
        replace_atomically(directory / CRL, pem, mode=PUBLIC_MODE)
    except OSError as error:
        raise CertError(f"cannot write {directory / CRL}: {error.strerror or error}") from None


def _write(
    directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, force: bool
) -> Path:
    """``NAME.key`` (0600) and ``NAME.crt`` (0644), whatever the umask; CertError naming
    ``--force`` if either exists and ``force`` is not given."""
    crt, key_file = directory / f"{name}.crt", directory / f"{name}.key"
    what = "a CA" if name == CA else f"identity {name}"
    if not force and (crt.exists() or key_file.exists()):
        raise CertError(f"{directory} already holds {what} ({crt.name}): give --force to replace it")
    try:
        _make_directory(directory)
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        replace_atomically(key_file, private, mode=KEY_MODE)
        replace_atomically(crt, cert.public_bytes(serialization.Encoding.PEM), mode=PUBLIC_MODE)
    except OSError as error:
        raise CertError(f"cannot write {what} in {directory}: {error.strerror or error}") from None
    return crt


def _make_directory(directory: Path) -> None:
    """``directory`` and its missing parents; the directory itself 0700 if made here (the
    parents as the umask says, like ``mkdir -p``)."""
    if directory.is_dir():
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(directory, DIRECTORY_MODE)
    except FileExistsError:  # made meanwhile by someone else: theirs
        return
    os.chmod(directory, DIRECTORY_MODE)  # the umask may have taken bits off (or left them, at 000)
