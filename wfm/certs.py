"""A deployment's certificates, in the style of ``cockroach cert``: one CA, one identity per process.

``init(DIR)`` makes ``DIR/ca.crt`` and ``DIR/ca.key``; ``issue(DIR, NAME, role)`` makes
``DIR/NAME.crt`` and ``DIR/NAME.key``, signed by that CA. A certificate's subject is
``O=wfm, OU=<role>, CN=<name>``: the broker reads who a peer is (CN) and what it may be (OU) from
the certificate it verified, never from what the peer says (see docs/security.md). Keys are ECDSA
P-256, written with mode 0600 before a byte of them is; nothing existing is overwritten without
``force``, so a second ``init`` cannot silently cut every issued identity off its CA.
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
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from broker.errors import LocalError

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
    "subject_name",
]

ROLES = ("broker", "agent", "deployer", "monitor", "client")
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
    return _write(directory, CA, cert, key, force)


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
    missing: ``wfm up`` keeps its certificates across runs and issues one for a new agent."""
    if not (directory / f"{CA}.crt").exists():
        init(directory)
    for name, role in identities.items():
        if not (directory / f"{name}.crt").exists():
            issue(directory, name, role)
    return directory


def listing(directory: Path) -> list[Issued]:
    """Every certificate in ``directory``, the CA first."""
    found = []
    for path in sorted(directory.glob("*.crt"), key=lambda p: (p.stem != CA, p.stem)):
        try:
            cert = x509.load_pem_x509_certificate(path.read_bytes())
        except (OSError, ValueError) as error:
            raise CertError(f"cannot read {path}: {error}") from None
        role = _attribute(cert, NameOID.ORGANIZATIONAL_UNIT_NAME)
        found.append(Issued(path.stem, role, cert.not_valid_after_utc, _hosts(cert)))
    return found


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


def _write(
    directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, force: bool
) -> Path:
    """``NAME.key`` (0600, created so: never readable by others, not even for an instant) and
    ``NAME.crt``; CertError naming ``--force`` if either exists and ``force`` is not given."""
    crt, key_file = directory / f"{name}.crt", directory / f"{name}.key"
    what = "a CA" if name == CA else f"identity {name}"
    if not force and (crt.exists() or key_file.exists()):
        raise CertError(f"{directory} already holds {what} ({crt.name}): give --force to replace it")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        key_file.unlink(missing_ok=True)
        descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    except OSError as error:
        raise CertError(f"cannot write {what} in {directory}: {error.strerror or error}") from None
    return crt
